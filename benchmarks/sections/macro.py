"""Macro: graphs end to end (the 3-node chat graph, and a research graph with more
channels, a larger state and a subgraph), sync sequential and async concurrent."""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AsyncExitStack, ExitStack
from dataclasses import dataclass, field
from typing import Any, Literal

from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Durability

from benchmarks.context import Context
from benchmarks.report import NOTE, RATIO_COLUMNS, SAVER, Column, Row, Table, add_ratios, error_row
from benchmarks.savers import OpenSavers, Saver, adrain, aopen_savers, drain, open_savers
from benchmarks.settings import Profile
from benchmarks.timing import Series, around_robin, describe, percentile, round_robin
from benchmarks.workloads import (
    WORKLOADS,
    Workload,
    chat_config,
    message_count,
    thread_config,
)

DURABILITIES: tuple[Durability, ...] = ("sync", "async")
Api = Literal["sync", "async"]
Graph = CompiledStateGraph[Any, Any, Any, Any]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Batch:
    """One probe's outcome: wall time, per-invoke latencies of the successes, failures."""

    wall_ns: int = 0
    latencies_ns: list[int] = field(default_factory=list)
    failures: int = 0
    first_error: str | None = None

    def add(self, outcome: int | BaseException) -> None:
        """Count one invocation: its latency in ns, or the exception it raised."""
        if isinstance(outcome, BaseException):
            self.failures += 1
            self.first_error = self.first_error or describe(outcome)
        else:
            self.latencies_ns.append(outcome)


def _thread_id(durability: Durability, index: int, warm: bool) -> str:
    """Thread ids differ per durability and keep warm-up threads apart from measured ones."""
    return f"{durability}-{'warm' if warm else 'run'}-{index}"


@dataclass(frozen=True, slots=True)
class Expected:
    """What the measured threads of one durability must hold after the run."""

    thread_ids: list[str]
    messages: int

    @classmethod
    def of(cls, profile: Profile, durability: Durability, workload: Workload) -> Expected:
        """Every measured thread of ``durability`` holds every turn's messages."""
        ids = [_thread_id(durability, i, warm=False) for i in range(profile.macro_threads)]
        return cls(ids, profile.macro_invokes * workload.messages_per_invoke)


# --- probes -------------------------------------------------------------------------------


def _invoke(
    graph: Graph, work: Workload, thread_id: str, turn: int, durability: Durability
) -> int | Exception:
    """One ``invoke``: its latency in ns, or the exception it raised."""
    inputs, config = work.inputs(thread_id, turn), chat_config(thread_id)
    start = time.perf_counter_ns()
    try:
        graph.invoke(inputs, config, durability=durability)
    except Exception as exc:
        return exc
    return time.perf_counter_ns() - start


async def _ainvoke(
    graph: Graph, work: Workload, thread_id: str, turn: int, durability: Durability
) -> int | Exception:
    """Async twin of :func:`_invoke`."""
    inputs, config = work.inputs(thread_id, turn), chat_config(thread_id)
    start = time.perf_counter_ns()
    try:
        await graph.ainvoke(inputs, config, durability=durability)
    except Exception as exc:
        return exc
    return time.perf_counter_ns() - start


def _sync_probe(
    graph: Graph, work: Workload, durability: Durability, profile: Profile
) -> Callable[[int], Batch]:
    """Round ``r`` runs all turns of one thread, one invoke after another."""
    invokes, warmup = profile.macro_invokes, profile.macro_warmup

    def probe(round_: int) -> Batch:
        warm = round_ < warmup
        thread_id = _thread_id(durability, round_ if warm else round_ - warmup, warm)
        batch = Batch()
        start = time.perf_counter_ns()
        for turn in range(invokes):
            batch.add(_invoke(graph, work, thread_id, turn, durability))
        batch.wall_ns = time.perf_counter_ns() - start
        return batch

    return probe


def _async_probe(
    graph: Graph, work: Workload, durability: Durability, profile: Profile
) -> Callable[[int], Awaitable[Batch]]:
    """Round ``r`` runs one turn of every thread at once (``asyncio.gather``)."""
    threads, warmup = profile.macro_threads, profile.macro_warmup

    async def probe(round_: int) -> Batch:
        warm = round_ < warmup
        turn = round_ if warm else round_ - warmup
        ids = [_thread_id(durability, index, warm) for index in range(threads)]
        batch = Batch()
        start = time.perf_counter_ns()
        outcomes = await asyncio.gather(
            *(_ainvoke(graph, work, t, turn, durability) for t in ids)
        )
        batch.wall_ns = time.perf_counter_ns() - start
        for outcome in outcomes:
            batch.add(outcome)
        return batch

    return probe


# --- rows -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Check:
    """After a run: threads whose final state is wrong, and the write-behind drain time."""

    bad_threads: int | None = None
    drain_ms: float | None = None
    error: str | None = None
    """Why the check itself failed (draining or reading back raised)."""


def _row(
    api: Api,
    durability: Durability,
    saver: str,
    series: Series[Batch],
    check: Check,
    steps_per_invoke: int,
) -> Row:
    """Throughput and invoke latency over the measured samples of one saver."""
    cells: dict[str, Any] = {"api": api, "durability": durability}
    if series.error is not None:
        return error_row(saver, series.error, **cells)
    latencies = sorted(ns / 1e6 for batch in series.values for ns in batch.latencies_ns)
    failures = sum(batch.failures for batch in series.values)
    first_error = next((b.first_error for b in series.values if b.first_error), None)
    steps = len(latencies) * steps_per_invoke
    wall_s = sum(batch.wall_ns for batch in series.values) / 1e9
    row: Row = {"saver": saver, **cells, "failures": failures, "bad_threads": check.bad_threads}
    row["drain_ms"] = check.drain_ms
    if check.error:
        row[NOTE] = f"ERROR after the run: {check.error}"
    elif first_error:
        row[NOTE] = f"first failure: {first_error}"
    if steps and wall_s > 0:
        row |= {
            "steps_per_s": steps / wall_s,
            "us_per_step": wall_s * 1e6 / steps,
            "invoke_p50_ms": percentile(latencies, 0.50),
            "invoke_p95_ms": percentile(latencies, 0.95),
        }
    return row


COLUMNS = (
    Column("api", "api"),
    Column("durability", "durability"),
    SAVER,
    Column("steps_per_s", "steps/s", "rate"),
    Column("us_per_step", "µs/step", "us"),
    *RATIO_COLUMNS,
    Column("invoke_p50_ms", "invoke p50 ms", "ms"),
    Column("invoke_p95_ms", "invoke p95 ms", "ms"),
    Column("failures", "failed invokes", "int"),
    Column("bad_threads", "bad threads", "int"),
    Column("drain_ms", "drain ms", "ms"),
)


def _check_sync(saver: Saver, expected: Expected) -> Check:
    """Drain the saver (timed), then count threads whose final message count is wrong."""
    try:
        start = time.perf_counter_ns()
        drained = drain(saver)
        drain_ms = (time.perf_counter_ns() - start) / 1e6 if drained else None
        bad = sum(
            message_count(saver.get_tuple(thread_config(thread_id))) != expected.messages
            for thread_id in expected.thread_ids
        )
    except Exception as exc:
        return Check(error=describe(exc))
    return Check(bad, drain_ms)


async def _check_async(saver: Saver, expected: Expected) -> Check:
    """Async twin of :func:`_check_sync`."""
    try:
        start = time.perf_counter_ns()
        drained = await adrain(saver)
        drain_ms = (time.perf_counter_ns() - start) / 1e6 if drained else None
        bad = 0
        for thread_id in expected.thread_ids:
            found = await saver.aget_tuple(thread_config(thread_id))
            bad += message_count(found) != expected.messages
    except Exception as exc:
        return Check(error=describe(exc))
    return Check(bad, drain_ms)


def _rows(
    api: Api,
    durability: Durability,
    opened: OpenSavers,
    series: Mapping[str, Series[Batch]],
    checks: Mapping[str, Check],
    work: Workload,
) -> list[Row]:
    rows = [
        _row(api, durability, name, series[name], checks[name], work.steps_per_invoke)
        for name in series
    ]
    rows.extend(
        error_row(name, error, api=api, durability=durability)
        for name, error in opened.errors.items()
    )
    return rows


# --- runs -----------------------------------------------------------------------------------


def _label(work: Workload, api: Api) -> str:
    """The savers' namespace of one workload and API (``macro-sync`` for the chat graph)."""
    return f"macro-{api}" if work.name == "chat" else f"macro-{work.name}-{api}"


def _run_sync(ctx: Context, work: Workload) -> list[Row]:
    """Sync API: ``graph.invoke``, one thread after another; savers alternate per thread."""
    rows: list[Row] = []
    builder = work.build(async_nodes=False)
    with ExitStack() as stack:
        opened = open_savers(stack, ctx.specs, ctx.settings, _label(work, "sync"))
        graphs = {name: builder.compile(checkpointer=s) for name, s in opened.savers.items()}
        for durability in DURABILITIES:
            log.info("macro %s: sync API, durability=%s", work.name, durability)
            gc.collect()
            series = round_robin(
                {name: _sync_probe(g, work, durability, ctx.profile) for name, g in graphs.items()},
                rounds=ctx.profile.macro_threads,
                warmup=ctx.profile.macro_warmup,
            )
            expected = Expected.of(ctx.profile, durability, work)
            checks = {name: _check_sync(opened.savers[name], expected) for name in series}
            rows.extend(_rows("sync", durability, opened, series, checks, work))
    return rows


async def _run_async(ctx: Context, work: Workload) -> list[Row]:
    """Async twin of :func:`_run_sync`: ``ainvoke`` on every thread at once, per round."""
    rows: list[Row] = []
    builder = work.build(async_nodes=True)
    async with AsyncExitStack() as stack:
        opened = await aopen_savers(stack, ctx.specs, ctx.settings, _label(work, "async"))
        graphs = {name: builder.compile(checkpointer=s) for name, s in opened.savers.items()}
        for durability in DURABILITIES:
            log.info("macro %s: async API, durability=%s", work.name, durability)
            gc.collect()
            series = await around_robin(
                {
                    name: _async_probe(g, work, durability, ctx.profile)
                    for name, g in graphs.items()
                },
                rounds=ctx.profile.macro_invokes,
                warmup=ctx.profile.macro_warmup,
            )
            expected = Expected.of(ctx.profile, durability, work)
            checks = {name: await _check_async(opened.savers[name], expected) for name in series}
            rows.extend(_rows("async", durability, opened, series, checks, work))
    return rows


def run(ctx: Context) -> list[Table]:
    """Each workload, both APIs by both durabilities; throughput over the measured threads."""
    return [_table(ctx, work) for work in WORKLOADS]


def _table(ctx: Context, work: Workload) -> Table:
    profile = ctx.profile
    steps = profile.macro_invokes * work.steps_per_invoke
    table = Table(
        "macro",
        f"Macro ({work.name}): {profile.macro_threads} threads x {steps} node runs",
        COLUMNS,
        notes=[
            f"Each thread gets {profile.macro_invokes} invocations of {work.description}. An "
            f"invocation runs {work.steps_per_invoke} nodes (the unit of steps/s).",
            "sync API: `graph.invoke`, threads one after another; a sample is one thread's "
            "invocations, and savers take turns thread by thread. async API: one round is "
            f"`asyncio.gather` of one `graph.ainvoke` on each of the {profile.macro_threads} "
            "threads (async nodes); savers take turns round by round. "
            f"{profile.macro_warmup} warm-up thread/round per saver is not counted.",
            "bad threads: measured threads whose latest checkpoint does not hold "
            f"{profile.macro_invokes * work.messages_per_invoke} messages after the run. drain: "
            "`flush()`/`aflush()` after the run, for savers that have one (not in steps/s).",
        ],
    )
    table.rows = _run_sync(ctx, work) + asyncio.run(_run_async(ctx, work))
    add_ratios(table.rows, "us_per_step", group=("api", "durability"))
    return table
