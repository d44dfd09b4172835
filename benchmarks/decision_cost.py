"""What waiting for a durable tool call's decision to be in Postgres costs, per write mode.

    python -m benchmarks.decision_cost [--invokes 400]

A graph model → ToolNode with one durable tool, invoked on a new thread each time (so each
call is tracked: claim and outcome). Both write modes run side by side, one saver each,
and the wait before the claim (`_core.ledger.protocol`, "the decision is durable before
the effect") is switched on and off: every round invokes all four (mode, wait) pairs, in an
order that rotates from round to round, so all of them see the same machine state; the
first tenth of the rounds is warm-up. Prints, per LangGraph durability (``"async"``,
LangGraph's default: the put of the deciding checkpoint may still be in flight when the
tool step starts, and ``"sync"``), the median milliseconds per invoke of each pair, the
wait's cost in each mode, and what a tracked call costs written behind against written
through (the goal: at most 1 ms more). Works on private schemas, dropped at the end.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

from langchain_core.messages import AIMessage

from benchmarks.infra import delete_prefix, drop_schema
from langgraph_durable import DurableSaver, durable_tool
from langgraph_durable._core.ledger import protocol
from langgraph_durable.config import WriteMode
from tests.support.graphs import model_then_tool_graph

REDIS_URL = os.environ.get("LGD_REDIS_URL", "redis://127.0.0.1:6379/0")
POSTGRES_URL = os.environ.get("LGD_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
MODES: tuple[WriteMode, ...] = ("through", "behind")


def _no_wait(ctx: Any, spec: Any) -> Iterator[Any]:
    return
    yield


def _graph(stack: ExitStack, mode: WriteMode) -> Any:
    """A model → tool graph on a saver of its own, closed and dropped with ``stack``."""
    tag = uuid.uuid4().hex[:8]
    schema, prefix = f"bench_decision_{tag}", f"bench-decision-{tag}"
    saver = DurableSaver(REDIS_URL, POSTGRES_URL, write_mode=mode, schema=schema,
                         key_prefix=prefix)
    stack.callback(delete_prefix, REDIS_URL, prefix)
    stack.callback(drop_schema, POSTGRES_URL, schema)
    stack.callback(saver.close)
    saver.setup()

    @durable_tool(saver=saver)
    def echo(x: int) -> str:
        """Echo x."""
        return str(x)

    return model_then_tool_graph(saver, echo, {"x": 1}, lambda: uuid.uuid4().hex)


def measure(durability: str, rounds: int) -> dict[tuple[str, bool], float]:
    """Median ms per invoke of each (write mode, wait on) pair."""
    waits = protocol._decision_durable
    pairs = [(mode, on) for mode in MODES for on in (True, False)]
    samples: dict[tuple[WriteMode, bool], list[float]] = {pair: [] for pair in pairs}
    with ExitStack() as stack:
        graphs = {mode: _graph(stack, mode) for mode in MODES}
        try:
            for i in range(rounds):
                for mode, on in pairs[i % 4:] + pairs[:i % 4]:
                    protocol._decision_durable = waits if on else _no_wait  # type: ignore[assignment]
                    started = time.perf_counter()
                    graphs[mode].invoke({"messages": [AIMessage("hi")]},
                                        {"configurable": {"thread_id": uuid.uuid4().hex}},
                                        durability=durability)
                    if i >= rounds // 10:
                        samples[mode, on].append((time.perf_counter() - started) * 1000)
        finally:
            protocol._decision_durable = waits
    return {pair: statistics.median(values) for pair, values in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--invokes", type=int, default=400,
                        help="invokes of each (write mode, wait) pair per durability")
    args = parser.parse_args()
    for durability in ("async", "sync"):
        ms = measure(durability, args.invokes)
        for mode in MODES:
            off, on = ms[mode, False], ms[mode, True]
            print(f"{mode:8} {durability:5}  without the wait {off:6.2f} ms   with it "
                  f"{on:6.2f} ms   difference {on - off:+.2f} ms per tracked call")
        gap = ms["behind", True] - ms["through", True]
        print(f"{'':8} {durability:5}  a tracked call written behind against written through: "
              f"{gap:+.2f} ms per invoke (goal: at most +1 ms)")


if __name__ == "__main__":
    main()
