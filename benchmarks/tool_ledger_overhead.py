"""What `durable_tool` adds to one tool call: median microseconds and Postgres commits.

    python -m benchmarks.tool_ledger_overhead [--calls 200]

Calls the same trivial function as a plain ``@tool`` and through ``durable_tool`` (a new
tool call id each time: claim + outcome; and the same id again: a replay), directly with
a ``ToolCall`` and a thread config, so graph overhead is left out. Commits are counted at
the saver's Postgres driver: each request is one transaction (a single autocommitted
statement for every ledger step). Works on a private schema, dropped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
from langchain_core.tools import tool

from langgraph_durable import DurableSaver, durable_tool

REDIS_URL = os.environ.get("LGD_REDIS_URL", "redis://127.0.0.1:6379/0")
POSTGRES_URL = os.environ.get("LGD_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")


def lookup(x: int) -> str:
    """Look x up."""
    return f"item {x}"


class _Counter:
    """Counts the saver's Postgres transactions by wrapping its drivers' ``cold``."""

    def __init__(self) -> None:
        self.n = 0

    def wrap(self, tiers: Any) -> None:
        inner = tiers.cold
        is_async = asyncio.iscoroutinefunction(inner)

        def cold(*args: Any, **kwargs: Any) -> Any:
            self.n += 1
            return inner(*args, **kwargs)

        async def acold(*args: Any, **kwargs: Any) -> Any:
            self.n += 1
            return await inner(*args, **kwargs)

        tiers.cold = acold if is_async else cold


def _call(i: int, call_id: str) -> dict[str, Any]:
    return {"type": "tool_call", "name": "lookup", "args": {"x": i}, "id": call_id}


def _median_us(samples: list[float]) -> float:
    return statistics.median(samples) * 1e6


def _time(fn: Callable[[int], Any], n: int) -> list[float]:
    out = []
    for i in range(n):
        start = time.perf_counter()
        fn(i)
        out.append(time.perf_counter() - start)
    return out


async def _atime(fn: Callable[[int], Awaitable[Any]], n: int) -> list[float]:
    out = []
    for i in range(n):
        start = time.perf_counter()
        await fn(i)
        out.append(time.perf_counter() - start)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    n = parser.parse_args().calls
    tag = uuid.uuid4().hex[:8]
    schema, prefix = f"lgdbench_ledger_{tag}", f"lgdbench-ledger-{tag}"
    saver = DurableSaver(REDIS_URL, POSTGRES_URL, schema=schema, key_prefix=prefix)
    saver.setup()
    plain = tool(lookup)
    tracked = durable_tool(lookup, saver=saver)
    thread = {"configurable": {"thread_id": f"bench-{tag}"}}
    counter = _Counter()
    counter.wrap(saver.engine.tiers())
    try:
        for i in range(20):  # warm-up: pools, prepared statements
            plain.invoke(_call(i, f"w{i}"), thread)
            tracked.invoke(_call(10_000 + i, f"w{i}"), thread)
        rows: list[tuple[str, list[float], float]] = []
        base = _time(lambda i: plain.invoke(_call(i, f"p{i}"), thread), n)
        counter.n = 0
        fresh = _time(lambda i: tracked.invoke(_call(i, f"s{i}"), thread), n)
        rows.append(("sync, new call", fresh, counter.n / n))
        counter.n = 0
        replay = _time(lambda i: tracked.invoke(_call(i, f"s{i}"), thread), n)
        rows.append(("sync, replay", replay, counter.n / n))

        async def run_async() -> None:
            counter.wrap(await saver.engine.atiers())
            for i in range(20):
                await tracked.ainvoke(_call(20_000 + i, f"aw{i}"), thread)
            counter.n = 0
            fresh = await _atime(lambda i: tracked.ainvoke(_call(50_000 + i, f"a{i}"), thread), n)
            rows.append(("async, new call", fresh, counter.n / n))
            counter.n = 0
            replay = await _atime(lambda i: tracked.ainvoke(_call(50_000 + i, f"a{i}"), thread), n)
            rows.append(("async, replay", replay, counter.n / n))
            await saver.aclose()

        asyncio.run(run_async())
        print(f"plain @tool: median {_median_us(base):.0f} us over {n} calls")
        print("| path | median us | overhead us | Postgres transactions/call |")
        print("|---|---|---|---|")
        for name, samples, commits in rows:
            print(f"| {name} | {_median_us(samples):.0f} | "
                  f"{_median_us(samples) - _median_us(base):.0f} | {commits:.2f} |")
    finally:
        saver.close()
        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


if __name__ == "__main__":
    main()
