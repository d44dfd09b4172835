"""Scaling: how cost grows with concurrency, state size and history length.

Three tables with a row per saver and a column per point of growth (p50s, and for
concurrency the throughput), so a cost that grows faster than the others' stands out:
throughput of the chat graph at N concurrent ``ainvoke``; ``put`` latency as the state grows
from 1 KB to 1 MB; ``get_tuple`` (latest) and ``list(limit=10)`` as a thread grows. Then
what a thread costs: Redis memory per active and per idle thread, and Postgres bytes per
step with and without `DeltaChannel`. `plot` draws the first three as
``benchmarks/results/scaling.png``.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack, ExitStack
from pathlib import Path

from langchain_core.messages import HumanMessage

from benchmarks import infra
from benchmarks.context import Context
from benchmarks.report import SAVER, Column, Row, Table, error_row
from benchmarks.savers import Saver, aopen_savers, drain, open_savers, provisioned
from benchmarks.sections import history
from benchmarks.sections._common import build_fixtures, per_point
from benchmarks.timing import Series, around_robin, describe, round_robin, summarize
from benchmarks.workloads import (
    CHAT,
    DELTA_SNAPSHOT_EVERY,
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


# --- what a thread costs in Redis, and what DeltaChannel saves in Postgres -------------------


def _run_turns(saver: Saver, *, delta: bool, threads: int, turns: int) -> int:
    """``turns`` invocations of the chat graph on each of ``threads`` threads; the steps."""
    graph = CHAT.build(async_nodes=False, delta=delta).compile(checkpointer=saver)
    for thread in range(threads):
        thread_id = f"grow-{'delta' if delta else 'plain'}-{thread}"
        for turn in range(turns):
            graph.invoke(CHAT.inputs(thread_id, turn), chat_config(thread_id), durability="sync")
        got = len(graph.get_state(chat_config(thread_id)).values.get("messages", ()))
        if got != turns * CHAT.messages_per_invoke:  # DeltaChannel: rebuilt from the writes
            raise AssertionError(f"thread {thread_id} holds {got} messages after {turns} turns")
    return threads * turns * CHAT.steps_per_invoke


def _redis_memory(ctx: Context) -> Table:
    threads, turns = ctx.profile.storage_threads, ctx.profile.macro_invokes
    table = Table(
        SECTION,
        "Scaling: Redis memory per thread",
        (SAVER, Column("active_b", "active B/thread", "bytes"),
         Column("idle_b", "idle B/thread", "bytes"), Column("keys", "keys/thread", "int")),
        notes=[
            f"{threads} threads x {turns} turns of the chat graph (durability=sync), one "
            "after another. Active: `MEMORY USAGE` summed over the saver's prefix right after "
            "the last turn (write-behind: with the journal entries not flushed yet); idle: "
            "after `flush()`, what a thread keeps until `hot_ttl` (its last "
            "`hot_checkpoints` checkpoints at most). Divided by the threads.",
        ],
    )
    for spec in ctx.specs:
        if not spec.tiered:
            continue
        log.info("%s: Redis memory of %s", SECTION, spec.name)
        ns = provisioned(ctx.settings, spec, f"{SECTION}-memory")
        try:
            with spec.open(ns) as saver:
                _run_turns(saver, delta=False, threads=threads, turns=turns)
                _, active = infra.prefix_usage(ns.redis_url, ns.key_prefix)
                drain(saver)
                keys, idle = infra.prefix_usage(ns.redis_url, ns.key_prefix)
        except Exception as exc:
            table.rows.append(error_row(spec.name, describe(exc)))
            continue
        table.rows.append({"saver": spec.name, "active_b": active / threads,
                           "idle_b": idle / threads, "keys": keys / threads})
    return table


def _delta_bytes(ctx: Context) -> Table:
    threads, turns = ctx.profile.storage_threads, ctx.profile.macro_invokes
    table = Table(
        SECTION,
        "Scaling: Postgres bytes per step, with and without DeltaChannel",
        (SAVER, Column("plain_b", "add_messages B/step", "bytes"),
         Column("delta_b", "DeltaChannel B/step", "bytes"),
         Column("saved", "delta / plain", "ratio")),
        notes=[
            f"{threads} threads x {turns} turns of the chat graph, its messages in a plain "
            "`add_messages` channel (each checkpoint stores the whole list) or in a "
            f"`DeltaChannel` (a sentinel, a snapshot every {DELTA_SNAPSHOT_EVERY} updates; "
            "reads replay the writes). Growth of `pg_total_relation_size` over the saver's "
            "schema after a flush, per superstep.",
        ],
    )
    for spec in ctx.specs:
        if "postgres" not in spec.stores:
            continue
        log.info("%s: DeltaChannel bytes of %s", SECTION, spec.name)
        row: Row = {"saver": spec.name}
        try:
            for delta in (False, True):
                ns = provisioned(ctx.settings, spec, f"{SECTION}-{'delta' if delta else 'plain'}")
                with spec.open(ns) as saver:
                    before = infra.schema_bytes(ns.postgres_url, ns.schema)
                    steps = _run_turns(saver, delta=delta, threads=threads, turns=turns)
                    drain(saver)
                    grown = infra.schema_bytes(ns.postgres_url, ns.schema) - before
                row["delta_b" if delta else "plain_b"] = grown / steps
        except Exception as exc:
            table.rows.append(error_row(spec.name, describe(exc)))
            continue
        plain, delta_b = row.get("plain_b"), row.get("delta_b")
        if isinstance(plain, float) and isinstance(delta_b, float) and plain > 0:
            row["saved"] = delta_b / plain
        table.rows.append(row)
    return table


def run(ctx: Context) -> list[Table]:
    """The scaling tables."""
    return [asyncio.run(_concurrency(ctx)), _state(ctx), _history(ctx), _redis_memory(ctx),
            _delta_bytes(ctx)]


# --- the plot -------------------------------------------------------------------------------

PLOTTED = (
    ("Scaling: chat-graph throughput", "concurrent ainvoke", "node runs/s"),
    ("Scaling: put p50", "state size (bytes)", "put p50 (µs)"),
    ("Scaling: read p50", "checkpoints in the thread", "p50 (µs)"),
)


def plot(tables: list[Table], directory: Path) -> Path | None:
    """Draw the growth tables (one panel each, a line per saver and operation, log axes)
    as ``scaling.png`` in ``directory``; returns its path, or ``None`` without them."""
    panels = [
        (t, x, y) for title, x, y in PLOTTED for t in tables
        if t.section == SECTION and t.title.startswith(title)
    ]
    if not panels:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure = plt.figure(figsize=(6 * len(panels), 4.5))
    figure.subplots(1, len(panels), squeeze=False)
    for axis, (table, xlabel, ylabel) in zip(figure.axes, panels, strict=True):
        points = [(c.key, int(c.key[3:])) for c in table.columns if c.key.startswith("at_")]
        for row in table.rows:
            xs = [n for key, n in points if isinstance(row.get(key), int | float)]
            ys = [row[key] for key, _ in points if isinstance(row.get(key), int | float)]
            if xs:
                label = f"{row['saver']} {row['op']}" if row.get("op") else str(row["saver"])
                axis.plot(xs, ys, marker="o", label=label)
        axis.set(xscale="log", yscale="log", xlabel=xlabel, ylabel=ylabel,
                 title=table.title.removeprefix("Scaling: "))
        axis.grid(True, which="both", alpha=0.3)
        axis.legend(fontsize=7)
    figure.tight_layout()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "scaling.png"
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path

