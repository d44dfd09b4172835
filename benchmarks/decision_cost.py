"""What waiting for a durable tool call's decision to be in Postgres costs, per write mode.

    python -m benchmarks.decision_cost [--invokes 400]

A graph model → ToolNode with one durable tool, invoked on a new thread each time (so each
call is tracked: claim and outcome). The wait before the claim (`_core.ledger.protocol`,
"the decision is durable before the effect") is switched on and off on alternate invokes
of the same saver, so both halves see the same machine state; the first tenth is warm-up.
Prints the median milliseconds per invoke with and without it, per write mode and per
LangGraph durability: ``"async"`` (LangGraph's default: the put of the deciding checkpoint
may still be in flight when the tool step starts) and ``"sync"``. Works on private
schemas, dropped at the end.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import uuid
from collections.abc import Iterator
from typing import Any

from langchain_core.messages import AIMessage

from benchmarks.infra import delete_prefix, drop_schema
from langgraph_durable import DurableSaver, durable_tool
from langgraph_durable._core.ledger import protocol
from tests.support.graphs import model_then_tool_graph

REDIS_URL = os.environ.get("LGD_REDIS_URL", "redis://127.0.0.1:6379/0")
POSTGRES_URL = os.environ.get("LGD_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")


def _no_wait(ctx: Any, spec: Any) -> Iterator[Any]:
    return
    yield


def measure(mode: str, durability: str, invokes: int) -> tuple[float, float]:
    """Median ms per invoke without and with the wait."""
    tag = uuid.uuid4().hex[:8]
    schema, prefix = f"bench_decision_{tag}", f"bench-decision-{tag}"
    saver = DurableSaver(REDIS_URL, POSTGRES_URL, write_mode=mode, schema=schema,
                         key_prefix=prefix)
    waits = protocol._decision_durable
    try:
        saver.setup()

        @durable_tool(saver=saver)
        def echo(x: int) -> str:
            """Echo x."""
            return str(x)

        graph = model_then_tool_graph(saver, echo, {"x": 1}, lambda: uuid.uuid4().hex)
        samples: dict[bool, list[float]] = {True: [], False: []}
        for i in range(invokes):
            on = i % 2 == 0
            protocol._decision_durable = waits if on else _no_wait  # type: ignore[assignment]
            started = time.perf_counter()
            graph.invoke({"messages": [AIMessage("hi")]},
                         {"configurable": {"thread_id": uuid.uuid4().hex}},
                         durability=durability)  # type: ignore[arg-type]
            if i >= invokes // 10:
                samples[on].append((time.perf_counter() - started) * 1000)
        return statistics.median(samples[False]), statistics.median(samples[True])
    finally:
        protocol._decision_durable = waits  # type: ignore[assignment]
        saver.close()
        drop_schema(POSTGRES_URL, schema)
        delete_prefix(REDIS_URL, prefix)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--invokes", type=int, default=400)
    args = parser.parse_args()
    for mode in ("through", "behind"):
        for durability in ("async", "sync"):
            off, on = measure(mode, durability, args.invokes)
            print(f"{mode:8} {durability:5}  without the wait {off:6.2f} ms   with it "
                  f"{on:6.2f} ms   difference {on - off:+.2f} ms per tracked call")


if __name__ == "__main__":
    main()
