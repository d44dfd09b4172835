"""A worker process for crash tests: runs a graph and reports every acknowledged checkpoint.

    python -m tests.support.kill_worker THREAD_ID SCHEMA PREFIX WRITE_MODE STEPS [REDIS_URL]

Prints ``ack <checkpoint_id>`` (flushed) after each ``put`` returned, so the test knows
what the saver acknowledged before it sends SIGKILL.
"""

from __future__ import annotations

import operator
import sys
import time
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph

from langgraph_durable import DurableSaver
from tests.support.servers import POSTGRES_URL, REDIS_URL


class Counter(TypedDict):
    count: int
    trail: Annotated[list[int], operator.add]


class ReportingSaver(DurableSaver):
    """Prints each checkpoint id once the saver acknowledged it."""

    def put(self, *args: Any, **kwargs: Any) -> Any:
        config = super().put(*args, **kwargs)
        print(f"ack {config['configurable']['checkpoint_id']}", flush=True)
        return config


def build(saver: DurableSaver, steps: int) -> Any:
    def tick(state: Counter) -> dict[str, Any]:
        time.sleep(0.01)
        return {"count": state["count"] + 1, "trail": [state["count"] + 1]}

    def more(state: Counter) -> str:
        return "tick" if state["count"] < steps else END

    builder = StateGraph(Counter)
    builder.add_node("tick", tick)
    builder.add_edge(START, "tick")
    builder.add_conditional_edges("tick", more, ["tick", END])
    return builder.compile(checkpointer=saver)


def main() -> None:
    thread_id, schema, prefix, write_mode, steps = sys.argv[1:6]
    redis_url = sys.argv[6] if len(sys.argv) > 6 else REDIS_URL
    saver = ReportingSaver(redis_url, POSTGRES_URL, schema=schema, key_prefix=prefix,
                           write_mode=write_mode)  # type: ignore[arg-type]
    saver.setup()
    graph = build(saver, int(steps))
    graph.invoke({"count": 0, "trail": []},
                 {"configurable": {"thread_id": thread_id}, "recursion_limit": 10_000},
                 durability="sync")
    print("done", flush=True)


if __name__ == "__main__":
    main()
