"""What recording a model call costs, and what replaying one costs.

    python -m benchmarks.model_call_cost [--threads 200]

A ``create_agent`` agent with a scripted model (no network: one call asks for a tool, the
next answers) and a plain tool; an outer middleware times each model call as the agent
sees it. Per thread: a run whose first model step fails once its model has answered (an
error raised after the call, as a crash would cut the step), then ``invoke(None)``, which
runs that step again. With `DurableMiddleware(model_calls=True)` the first call is
recorded and the step run again is answered from the ledger; without it, every call goes
to the model. Prints medians in milliseconds per model call; a private schema, dropped at
the end.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import time
import uuid
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.config import get_config

from benchmarks.infra import delete_prefix, drop_schema
from langgraph_durable import DurableSaver
from langgraph_durable.middleware import DurableMiddleware

REDIS_URL = os.environ.get("LGD_REDIS_URL", "redis://127.0.0.1:6379/0")
POSTGRES_URL = os.environ.get("LGD_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")


class Scripted(BaseChatModel):
    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Any, **kwargs: Any) -> Scripted:  # type: ignore[override]
        return self

    def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        if isinstance(messages[-1], ToolMessage):
            reply = AIMessage(f"answer: {messages[-1].content}")
        else:
            reply = AIMessage("", tool_calls=[{"name": "lookup", "args": {"q": "x"},
                                               "id": f"call_{uuid.uuid4().hex}"}])
        return ChatResult(generations=[ChatGeneration(message=reply)])


@tool
def lookup(q: str) -> str:
    """Look something up."""
    return f"found {q}"


class Cut(Exception):
    """Raised after a model call, as a crash would cut its step."""


class Timed(AgentMiddleware):
    """Times each model call, and cuts the step of each thread's first."""

    def __init__(self) -> None:
        super().__init__()
        self.times: list[tuple[str, float]] = []
        self.calls: dict[str, int] = {}

    def wrap_model_call(self, request: Any, handler: Any) -> Any:
        thread = get_config()["configurable"]["thread_id"]
        started = time.perf_counter()
        response = handler(request)
        made = self.calls[thread] = self.calls.get(thread, 0) + 1
        # the 1st call is cut; the 2nd runs its step again; the 3rd is the final answer
        kind = "again" if made == 2 else "first"
        self.times.append((kind, (time.perf_counter() - started) * 1e3))
        if made == 1:
            raise Cut
        return response


def measure(saver: DurableSaver, on: bool, threads: int) -> dict[str, float]:
    timed = Timed()
    agent = create_agent(Scripted(), [lookup], checkpointer=saver, middleware=[
        timed, DurableMiddleware(tools={"lookup": None}, model_calls=on)])
    for _ in range(threads):
        config = {"configurable": {"thread_id": uuid.uuid4().hex}}
        with contextlib.suppress(Cut):
            agent.invoke({"messages": [("user", "hi")]}, config)
        agent.invoke(None, config)
    skip = len(timed.times) // 10
    kept = timed.times[skip:]
    return {kind: statistics.median(ms for k, ms in kept if k == kind)
            for kind in ("first", "again")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=200)
    threads = parser.parse_args().threads
    tag = uuid.uuid4().hex[:8]
    schema, prefix = f"bench_models_{tag}", f"bench-models-{tag}"
    saver = DurableSaver(REDIS_URL, POSTGRES_URL, schema=schema, key_prefix=prefix)
    try:
        saver.setup()
        rounds = [measure(saver, on, threads // 4) for on in (False, True, False, True)]
        plain = statistics.median(r["first"] for r in rounds[0::2])
        recorded = statistics.median(r["first"] for r in rounds[1::2])
        replayed = statistics.median(r["again"] for r in rounds[1::2])
        print(f"model call, plain: {plain:.2f} ms; recorded: {recorded:.2f} ms "
              f"(+{recorded - plain:.2f} ms); the same call run again, replayed from the "
              f"ledger: {replayed:.2f} ms ({threads} threads)")
    finally:
        saver.close()
        drop_schema(POSTGRES_URL, schema)
        delete_prefix(REDIS_URL, prefix)


if __name__ == "__main__":
    main()
