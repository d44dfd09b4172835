"""Scaling: how cost grows with concurrency, state size and history length.

Three tables, each a row per saver and a column per point of growth (p50s, and for
concurrency the throughput), so a cost that grows faster than the others' stands out:
throughput of the chat graph at N concurrent ``ainvoke``; ``put`` latency as the state grows
from 1 KB to 1 MB; ``get_tuple`` (latest) and ``list(limit=10)`` as a thread grows.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack, ExitStack

from langchain_core.messages import HumanMessage

from benchmarks.context import Context
from benchmarks.report import SAVER, Column, Row, Table, error_row
from benchmarks.savers import Saver, aopen_savers, open_savers
from benchmarks.sections import history
from benchmarks.sections._common import build_fixtures, per_point
from benchmarks.timing import Series, around_robin, round_robin, summarize
from benchmarks.workloads import (
    CHAT,
    CheckpointChain,
    chat_config,
    expect_checkpoint,
    make_messages,
    thread_config,
)

SECTION = "scaling"
MESSAGES = 10

log = logging.getLogger(__name__)


def _kb(size: int) -> str:
    return f"{size // 1024} KB" if size < 1024 * 1024 else f"{size // (1024 * 1024)} MB"


def _p50_row(saver: str, series: dict[int, Series[int]], **cells: object) -> Row:
    """One saver's p50 (µs) at each point, or its first error."""
    errors = [s.error for s in series.values() if s.error]
    if errors:
        return error_row(saver, errors[0], **cells)  # type: ignore[arg-type]
    row: Row = {"saver": saver, **cells}  # type: ignore[dict-item]
    for point, entry in series.items():
        if entry.values:
            row[f"at_{point}"] = summarize(entry.values).p50
    return row


# --- history length -------------------------------------------------------------------------


def _history(ctx: Context) -> Table:
    lengths = ctx.profile.scaling_lengths
    table = Table(
        SECTION,
        "Scaling: read p50 (µs) as a thread grows",
        (
            Column("op", "operation"),
            SAVER,
            *(Column(f"at_{n}", f"@{n:,} ckpts", "us") for n in lengths),
        ),
        notes=[
            f"One thread per length; checkpoints hold {MESSAGES} messages. The savers' reads "
            "are interleaved round by round.",
        ],
    )
    with ExitStack() as stack:
        opened = open_savers(stack, ctx.specs, ctx.settings, f"{SECTION}-history")

        def seed(saver: Saver) -> dict[int, str]:
            threads = {}
            for n in lengths:
                chain = CheckpointChain(saver, f"grow-{n}", make_messages(MESSAGES)).extend(n)
                found = saver.get_tuple(thread_config(chain.thread_id))
                expect_checkpoint(found, chain.ids[-1], MESSAGES, 0)
                threads[n] = chain.thread_id
            return threads

        fixtures, errors = build_fixtures(opened, seed)
        for label, probe in history.OPERATIONS:
            log.info("%s: %s", SECTION, label)
            gc.collect()
            series = round_robin(
                per_point(opened.savers, fixtures, probe),
                rounds=ctx.profile.scaling_rounds,
                warmup=2,
            )
            for name in fixtures:
                per = {n: series[(name, n)] for n in lengths}
                table.rows.append(_p50_row(name, per, op=label))
    table.rows.extend(error_row(name, error, op="(all)") for name, error in errors.items())
    return table


# --- state size -----------------------------------------------------------------------------


def _state(ctx: Context) -> Table:
    sizes = ctx.profile.scaling_state_bytes
    table = Table(
        SECTION,
        "Scaling: put p50 (µs) as the state grows",
        (SAVER, *(Column(f"at_{size}", f"@{_kb(size)}", "us") for size in sizes)),
        notes=[
            "Each put stores a new version of a channel holding one message of the given "
            "size (plus the next node's trigger), as a superstep that rewrote the state does.",
        ],
    )
    with ExitStack() as stack:
        opened = open_savers(stack, ctx.specs, ctx.settings, f"{SECTION}-state")

        def chains(saver: Saver) -> dict[int, CheckpointChain]:
            return {
                size: CheckpointChain(
                    saver, f"state-{size}", [HumanMessage(content="x" * size, id=str(uuid.uuid4()))]
                )
                for size in sizes
            }

        fixtures, errors = build_fixtures(opened, chains)
        log.info("%s: put by state size", SECTION)
        gc.collect()
        series = round_robin(
            per_point(opened.savers, fixtures, lambda _saver, chain: lambda _r: chain.put_timed()),
            rounds=ctx.profile.scaling_rounds,
            warmup=2,
        )
        for name in fixtures:
            table.rows.append(_p50_row(name, {s: series[(name, s)] for s in sizes}))
    table.rows.extend(error_row(name, error) for name, error in errors.items())
    return table


# --- concurrency ----------------------------------------------------------------------------


async def _concurrency(ctx: Context) -> Table:
    levels = ctx.profile.scaling_concurrency
    rounds = ctx.profile.scaling_concurrency_rounds
    table = Table(
        SECTION,
        "Scaling: chat-graph throughput (node runs/s) at N concurrent ainvoke",
        (SAVER, *(Column(f"at_{n}", f"N={n}", "rate") for n in levels)),
        notes=[
            f"A round is `asyncio.gather` of N `ainvoke` (one turn of N threads, "
            f"{CHAT.steps_per_invoke} node runs each, LangGraph's default durability); "
            f"{rounds} rounds per N and saver, savers taking turns round by round. A failed "
            "invoke makes the saver's row an error.",
        ],
    )
    async with AsyncExitStack() as stack:
        opened = await aopen_savers(stack, ctx.specs, ctx.settings, f"{SECTION}-concurrency")
        graphs = {
            name: CHAT.build(async_nodes=True).compile(checkpointer=saver)
            for name, saver in opened.savers.items()
        }
        rates: dict[str, dict[int, Series[int]]] = {name: {} for name in graphs}
        for n in levels:
            log.info("%s: %d concurrent graphs", SECTION, n)
            gc.collect()

            def probe(name: str, n: int = n) -> Callable[[int], Awaitable[int]]:
                graph = graphs[name]

                async def run(round_: int) -> int:
                    ids = [f"c{n}-{round_}-{i}" for i in range(n)]
                    start = time.perf_counter_ns()
                    await asyncio.gather(
                        *(graph.ainvoke(CHAT.inputs(t, 0), chat_config(t)) for t in ids)
                    )
                    return time.perf_counter_ns() - start

                return run

            series = await around_robin(
                {name: probe(name) for name in graphs}, rounds=rounds, warmup=1
            )
            for name, entry in series.items():
                rates[name][n] = entry
        for name, per in rates.items():
            errors = [s.error for s in per.values() if s.error]
            if errors:
                table.rows.append(error_row(name, errors[0]))
                continue
            row: Row = {"saver": name}
            for n, entry in per.items():
                wall_s = sum(entry.values) / 1e9
                if wall_s > 0:
                    row[f"at_{n}"] = n * len(entry.values) * CHAT.steps_per_invoke / wall_s
            table.rows.append(row)
    table.rows.extend(error_row(name, error) for name, error in opened.errors.items())
    return table


def run(ctx: Context) -> list[Table]:
    """The three scaling tables."""
    return [asyncio.run(_concurrency(ctx)), _state(ctx), _history(ctx)]
