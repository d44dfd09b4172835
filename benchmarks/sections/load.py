"""Load: many threads of the chat graph, a bounded number of ``ainvoke`` at once, and what
each node step costs every process and server.

Each round runs ``load_threads`` new threads of the chat graph, ``load_invokes`` invocations
each (3 node steps apiece), at most ``load_concurrency`` ``ainvoke`` in flight. Per node
step it reports throughput, the CPU of the Python process, ``redis-server`` and the saver's
Postgres backends, Postgres's commits, rows and WAL, and Redis's commands and bytes. The
baseline is ``AsyncPostgresSaver`` on an 8-connection ``psycopg_pool``, as LangGraph's
server runs it; the single-connection one runs beside it.

A round opens the saver, runs an untimed warm-up of ``load_concurrency`` threads (so that
its connections are open, its statements prepared and its caches filled, as in a server
that has been running), drains it, and only then reads the counters and runs the round.

How each figure is kept apart from everything else on the servers:

- Every saver has a scratch database of its own, so ``pg_stat_database`` (commits, rows)
  counts its work alone. A backend writes its statistics to shared memory as it exits (a
  live, idle one may hold them for up to 10 s), so these counters are read before the saver
  opens and after its backends have exited: they cover the warm-up too, and are divided by
  the node steps of both. The CPU of its backends is read from ``/proc`` by the pids
  ``pg_stat_activity`` lists for that database.
- WAL is cluster-wide: the records of the saver's database are picked out with
  ``pg_walinspect`` (those touching its relations, and their transactions' commit records);
  the raw insert-position difference is reported too, less a quiet baseline.
- Redis's counters and ``redis-server``'s CPU are server-wide: what the readings' own
  ``INFO`` adds is subtracted, and so is a quiet baseline: the same counters over a window
  with no saver open right before each round, scaled to the round's length.
- Savers are opened anew for each round and closed after it (their data stays), so no other
  saver's connections or flusher threads live in this process during a round.
- Every other figure covers the round alone: from after the warm-up's drain to after the
  round's.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import logging
import os
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from statistics import median
from typing import Any

from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from psycopg import AsyncConnection
from psycopg.rows import DictRow
from psycopg_pool import AsyncConnectionPool

from benchmarks import infra
from benchmarks.context import Context
from benchmarks.counters import (
    CpuDelta,
    PostgresProbe,
    RedisCounters,
    RedisProbe,
    cpu_delta,
    cpu_source,
    machine_busy_ns,
    self_cpu_s,
)
from benchmarks.report import NOTE, SAVER, Column, Format, Row, Table, error_row, format_cell
from benchmarks.savers import (
    POSTGRES,
    POSTGRES_POOL,
    Namespace,
    Saver,
    SaverSpec,
    WriteMode,
    _aclosing_reported,
    _call_twin,
    _durable_saver,
    _postgres_kwargs,
    adrain,
)
from benchmarks.timing import describe, schedule
from benchmarks.workloads import (
    MESSAGES_PER_INVOKE,
    STEPS_PER_INVOKE,
    chat_config,
    chat_graph,
    chat_input,
)

SECTION = "load"
THROUGH, BEHIND = "durable-through", "durable-behind"
SAVERS = (POSTGRES, POSTGRES_POOL, THROUGH, BEHIND)
"""The savers this section runs, when selected."""
BASELINE = POSTGRES_POOL
POOL_SIZE = 8

log = logging.getLogger(__name__)


# --- the savers, opened anew each round (their schema was set up before the rounds) -------


@asynccontextmanager
async def _postgres(ns: Namespace) -> AsyncIterator[Saver]:
    conn: AsyncConnection[DictRow]
    async with await AsyncConnection.connect(ns.postgres_url, **_postgres_kwargs(ns)) as conn:
        yield AsyncPostgresSaver(conn)


@asynccontextmanager
async def _postgres_pool(ns: Namespace) -> AsyncIterator[Saver]:
    """``POOL_SIZE`` connections, all open before the round starts (a server's warm pool)."""
    async with AsyncConnectionPool[AsyncConnection[DictRow]](
        ns.postgres_url,
        kwargs=_postgres_kwargs(ns),
        min_size=POOL_SIZE,
        max_size=POOL_SIZE,
        open=False,
    ) as pool:
        await pool.wait()
        yield AsyncPostgresSaver(pool)


@asynccontextmanager
async def _durable(ns: Namespace, *, write_mode: WriteMode) -> AsyncIterator[Saver]:
    saver = _durable_saver(ns, write_mode)
    try:
        yield saver
    finally:
        await _call_twin(saver, "close")


OPENERS: dict[str, Callable[[Namespace], AbstractAsyncContextManager[Saver]]] = {
    POSTGRES: _postgres,
    POSTGRES_POOL: _postgres_pool,
    THROUGH: partial(_durable, write_mode="through"),
    BEHIND: partial(_durable, write_mode="behind"),
}
LABELS = {
    POSTGRES: "AsyncPostgresSaver, one connection",
    POSTGRES_POOL: f"AsyncPostgresSaver, psycopg_pool of {POOL_SIZE}",
    THROUGH: "DurableSaver write-through",
    BEHIND: "DurableSaver write-behind",
}


def _namespace(ctx: Context, name: str) -> Namespace:
    """The saver's namespace in a scratch database of its own: ``<database>_load_<saver>``."""
    database = f"{ctx.settings.database}_{SECTION}_{name.replace('-', '_')}"
    settings = dataclasses.replace(ctx.settings, database=database)
    return Namespace(settings=settings, saver=name, section=SECTION)


async def _provision(ctx: Context, spec: SaverSpec) -> Namespace:
    """Create the saver's database and schema, and run its ``setup()`` once."""
    ns = _namespace(ctx, spec.name)
    infra.recreate_database(ctx.settings.postgres_url, ns.settings.database)
    spec.provision(ns)
    async with spec.aopen(ns):
        pass
    return ns


# --- one round ----------------------------------------------------------------------------


@dataclass(slots=True)
class Tally:
    """The invocations of one round: how many succeeded, failed, or returned a wrong state."""

    invokes: int = 0
    failures: int = 0
    wrong: int = 0
    first_error: str | None = None


async def _thread(
    graph: Any, gate: asyncio.Semaphore, thread_id: str, invokes: int, tally: Tally
) -> None:
    """One thread's invocations, one after another, each holding a place in ``gate``; the
    state each returns must hold every turn's messages so far."""
    for turn in range(invokes):
        async with gate:
            try:
                state = await graph.ainvoke(chat_input(thread_id, turn), chat_config(thread_id))
            except Exception as exc:
                tally.failures += 1
                tally.first_error = tally.first_error or describe(exc)
                return
        tally.invokes += 1
        if len(state["messages"]) != MESSAGES_PER_INVOKE * (turn + 1):
            tally.wrong += 1


@dataclass(frozen=True, slots=True)
class Quiet:
    """The server-wide counters over a window with no saver open: the background."""

    seconds: float
    redis: RedisCounters
    wal: int
    postgres_background_ns: int | None

    def over(self, seconds: float) -> Quiet:
        """The same background over a window of ``seconds``."""
        factor = seconds / self.seconds
        background = self.postgres_background_ns
        return Quiet(
            seconds,
            self.redis.scaled(factor),
            round(self.wal * factor),
            None if background is None else round(background * factor),
        )


@dataclass(frozen=True, slots=True)
class Probes:
    postgres: PostgresProbe
    redis: RedisProbe


async def _quiet(probes: Probes, seconds: float) -> Quiet:
    pg, rd = probes.postgres, probes.redis
    background, lsn, before = pg.background_cpu(), pg.wal_lsn(), rd.read()
    start = time.monotonic()
    await asyncio.sleep(seconds)
    after = rd.read()
    elapsed = time.monotonic() - start
    wal = pg.wal_bytes(lsn, pg.wal_lsn())
    background_after = pg.background_cpu()
    return Quiet(
        elapsed,
        after - before - rd.overhead,
        wal,
        None
        if background is None or background_after is None
        else cpu_delta(background, background_after).ns,
    )


@dataclass(frozen=True, slots=True)
class Sample:
    """What one round of one saver did and cost (server-wide figures net of the background)."""

    round: int
    tally: Tally
    invoke_s: float
    total_s: float
    """Invocations and the drain (``aflush()``) after them."""
    drain_s: float | None
    python_cpu_s: float
    redis: RedisCounters
    backends: CpuDelta | None
    postgres_background_ns: int | None
    database: dict[str, int]
    """``pg_stat_database``'s counts over the warm-up invocations and the round's."""
    database_steps: int
    """The node steps those counts cover."""
    wal_database: int | None
    wal_cluster: int
    background: Quiet
    """What was subtracted, over this round's windows."""
    others_share: float | None
    """The share of the machine's CPU that processes other than the Python process,
    redis-server and the saver's backends used during the round."""

    @property
    def steps(self) -> int:
        return self.tally.invokes * STEPS_PER_INVOKE


async def _invocations(
    graph: Any, gate: asyncio.Semaphore, prefix: str, threads: int, invokes: int, tally: Tally
) -> None:
    """``threads`` new threads of ``invokes`` invocations each, ``gate`` bounding them."""
    await asyncio.gather(
        *(_thread(graph, gate, f"{prefix}-{index}", invokes, tally) for index in range(threads))
    )


async def _round(
    ctx: Context, probes: Probes, ns: Namespace, oid: int, round_: int, quiet: Quiet
) -> Sample:
    """Open the saver, warm its connections, run the round's threads, drain, close; read
    every counter around it."""
    profile, pg, rd = ctx.profile, probes.postgres, probes.redis
    database, tally, warm = ns.settings.database, Tally(), Tally()
    builder = chat_graph(async_nodes=True)
    counters = pg.database_counters(database)  # no client connected: nothing pending
    opening = OPENERS[ns.saver](ns)
    async with _aclosing_reported(opening, ns.saver) as saver:
        graph = builder.compile(checkpointer=saver)
        gate = asyncio.Semaphore(profile.load_concurrency)
        concurrency, invokes = profile.load_concurrency, profile.load_invokes
        await _invocations(graph, gate, f"load-{round_}-warm", concurrency, invokes, warm)
        await adrain(saver)
        gc.collect()
        lsn, wal_started = pg.wal_lsn(), time.monotonic()
        background, backends = pg.background_cpu(), pg.backends_cpu(database)
        redis_before, redis_started = rd.read(), time.monotonic()
        busy, cpu = machine_busy_ns(), self_cpu_s()
        start = time.perf_counter()
        await _invocations(graph, gate, f"load-{round_}", profile.load_threads, invokes, tally)
        invoked = time.perf_counter()
        drained = await adrain(saver)
        end = time.perf_counter()
        cpu, busy_after = self_cpu_s() - cpu, machine_busy_ns()
        redis_after, redis_s = rd.read(), time.monotonic() - redis_started
        backends_after, background_after = pg.backends_cpu(database), pg.background_cpu()
    if not pg.wait_disconnected(database):
        log.warning("%s: %s: clients still connected after close", SECTION, ns.saver)
    lsn_after, wal_s = pg.wal_lsn(), time.monotonic() - wal_started
    counters_after = pg.database_counters(database)
    wal_database = pg.database_wal(oid, lsn, lsn_after)
    redis_quiet, wal_quiet = quiet.over(redis_s), quiet.over(wal_s)
    background_ns = None
    if background is not None and background_after is not None:
        background_ns = cpu_delta(background, background_after).ns
        if wal_quiet.postgres_background_ns is not None:
            background_ns -= wal_quiet.postgres_background_ns
    sample_backends = (
        None if backends is None or backends_after is None else cpu_delta(backends, backends_after)
    )
    redis_used = redis_after - redis_before
    others = None
    if busy is not None and busy_after is not None and end > start:
        ours = cpu * 1e9 + (redis_used.cpu_ns or 0) + (sample_backends.ns if sample_backends else 0)
        others = (busy_after - busy - ours) / ((end - start) * 1e9 * (os.cpu_count() or 1))
    tally.failures += warm.failures
    tally.wrong += warm.wrong
    tally.first_error = tally.first_error or warm.first_error
    return Sample(
        round=round_,
        tally=tally,
        invoke_s=invoked - start,
        total_s=end - start,
        drain_s=end - invoked if drained else None,
        python_cpu_s=cpu,
        redis=redis_used - rd.overhead - redis_quiet.redis,
        backends=sample_backends,
        postgres_background_ns=background_ns,
        database={key: counters_after[key] - counters[key] for key in counters},
        database_steps=(warm.invokes + tally.invokes) * STEPS_PER_INVOKE,
        wal_database=None if wal_database is None else wal_database[0],
        wal_cluster=pg.wal_bytes(lsn, lsn_after) - wal_quiet.wal,
        background=dataclasses.replace(wal_quiet, redis=redis_quiet.redis),
        others_share=others,
    )


# --- figures per node step -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Measure:
    """One figure of a round, and how the tables show it."""

    key: str
    label: str
    format: Format
    of: Callable[[Sample, bool], float | None]
    """The figure of a sample; the flag says whether the saver uses Redis."""
    compared: bool = True
    """Whether the summary gives its ratio to the baseline's."""


def _per_step(value: float | None, sample: Sample) -> float | None:
    return None if value is None or not sample.steps else value / sample.steps


def _database_per_step(value: int, sample: Sample) -> float | None:
    return value / sample.database_steps if sample.database_steps else None


def _ms(ns: int | None) -> float | None:
    return None if ns is None else ns / 1e6


def _redis_cpu_ms(sample: Sample, redis: bool) -> float | None:
    return _per_step(_ms(sample.redis.cpu_ns), sample) if redis else None


def _postgres_cpu_ms(sample: Sample, redis: bool) -> float | None:
    return None if sample.backends is None else _per_step(_ms(sample.backends.ns), sample)


def _every_cpu_ms(sample: Sample, redis: bool) -> float | None:
    python = _per_step(sample.python_cpu_s * 1e3, sample)
    postgres, redis_cpu = _postgres_cpu_ms(sample, redis), _redis_cpu_ms(sample, redis)
    if python is None or postgres is None or (redis and redis_cpu is None):
        return None
    return python + postgres + (redis_cpu or 0.0)


def _rows_written(sample: Sample) -> int:
    database = sample.database
    return database["tup_inserted"] + database["tup_updated"] + database["tup_deleted"]


MEASURES: tuple[Measure, ...] = (
    Measure(
        "steps_per_s", "steps/s", "rate",
        lambda s, r: s.steps / s.invoke_s if s.invoke_s > 0 else None,
    ),
    Measure(
        "steps_per_s_drained", "steps/s, to Postgres (with the drain)", "rate",
        lambda s, r: s.steps / s.total_s if s.total_s > 0 else None,
    ),
    Measure("cpu_ms", "CPU, every process, ms", "ms", _every_cpu_ms),
    Measure("python_ms", "CPU, Python process, ms", "ms",
            lambda s, r: _per_step(s.python_cpu_s * 1e3, s)),
    Measure("redis_cpu_ms", "CPU, redis-server, ms", "ms", _redis_cpu_ms),
    Measure("postgres_cpu_ms", "CPU, Postgres backends, ms", "ms", _postgres_cpu_ms),
    Measure(
        "background_ms", "CPU, Postgres background processes (cluster), ms", "ms",
        lambda s, r: _per_step(_ms(s.postgres_background_ns), s),
        compared=False,
    ),
    Measure("commits", "Postgres commits", "number",
            lambda s, r: _database_per_step(s.database["xact_commit"], s)),
    Measure("rows", "Postgres rows written", "number",
            lambda s, r: _database_per_step(_rows_written(s), s)),
    Measure("wal_b", "WAL bytes, the saver's database", "bytes",
            lambda s, r: _per_step(s.wal_database, s)),
    Measure("wal_cluster_b", "WAL bytes, cluster insert position", "bytes",
            lambda s, r: _per_step(s.wal_cluster, s)),
    Measure("redis_commands", "Redis commands (incl. inside scripts)", "number",
            lambda s, r: _per_step(s.redis.commands, s) if r else None),
    Measure("redis_b", "Redis bytes in + out", "bytes",
            lambda s, r: _per_step(s.redis.net_bytes, s) if r else None),
)
ROUND_MEASURES: tuple[Measure, ...] = (
    Measure("drain_ms", "drain after the round, ms", "ms",
            lambda s, r: None if s.drain_s is None else s.drain_s * 1e3),
    Measure("connections", "Postgres processes of the database", "int",
            lambda s, r: None if s.backends is None else s.backends.processes),
)
"""Figures per round, not per step."""


@dataclass(slots=True)
class Runs:
    """The measured samples of one saver, or why it stopped."""

    uses_redis: bool
    samples: list[Sample] = field(default_factory=list)
    error: str | None = None


def _median(values: Sequence[float | None]) -> float | None:
    known = [value for value in values if value is not None]
    return median(known) if len(known) == len(values) and known else None


def _figures(runs: Runs) -> dict[str, float | None]:
    return {
        m.key: _median([m.of(s, runs.uses_redis) for s in runs.samples])
        for m in (*MEASURES, *ROUND_MEASURES)
    }


def _data_row(name: str, runs: Runs) -> Row:
    if runs.error is not None and not runs.samples:
        return error_row(name, runs.error)
    row: Row = {"saver": name, **_figures(runs)}
    rates = (s.steps / s.invoke_s for s in runs.samples if s.invoke_s > 0)
    row["by_round"] = " / ".join(f"{rate:,.0f}" for rate in rates)
    row["failures"] = sum(s.tally.failures for s in runs.samples)
    row["wrong"] = sum(s.tally.wrong for s in runs.samples)
    notes = [f"ERROR {runs.error}"] if runs.error else []
    notes += [f"first failure: {e}" for s in runs.samples if (e := s.tally.first_error)][:1]
    lost = sum(s.backends.lost for s in runs.samples if s.backends is not None)
    if lost:
        notes.append(f"{lost} Postgres processes exited mid-round; their CPU is missing")
    if notes:
        row[NOTE] = "; ".join(notes)
    return row


def _summary(names: Sequence[str], rows: Mapping[str, Row]) -> Table:
    """Measures down, savers across, each figure with its ratio to the baseline's."""
    base = rows.get(BASELINE, {})
    table = Table(
        SECTION,
        "Load: per node step, medians of the rounds",
        (Column("measure", "per node step"), *(Column(name, name) for name in names)),
    )
    for measure in (*MEASURES, *ROUND_MEASURES):
        line: Row = {"measure": measure.label}
        for name in names:
            value, reference = rows[name].get(measure.key), base.get(measure.key)
            cell = format_cell(value, measure.format)
            if (
                name != BASELINE
                and isinstance(value, int | float)
                and isinstance(reference, int | float)
                and reference > 0
                and measure in MEASURES
                and measure.compared
            ):
                cell += f" ({value / reference:.2f}x)"
            line[name] = cell
        table.rows.append(line)
    return table


ROUND_KEYS = (
    "steps_per_s",
    "cpu_ms",
    "python_ms",
    "redis_cpu_ms",
    "postgres_cpu_ms",
    "commits",
    "wal_b",
    "wal_cluster_b",
    "redis_commands",
)
ROUND_COLUMNS = (
    SAVER,
    Column("round", "round", "int"),
    *(Column(m.key, m.label, m.format) for m in MEASURES if m.key in ROUND_KEYS),
    Column("others", "other processes' CPU, % of the machine", "number"),
    Column("background", "subtracted as background"),
)


def _round_rows(name: str, runs: Runs) -> list[Row]:
    """Each measured round of one saver, in the order they ran."""
    rows: list[Row] = []
    for sample in runs.samples:
        row: Row = {"saver": name, "round": sample.round}
        row |= {m.key: m.of(sample, runs.uses_redis) for m in MEASURES if m.key in ROUND_KEYS}
        share = sample.others_share
        row["others"] = None if share is None else share * 100
        back = sample.background
        row["background"] = (
            f"{back.redis.commands:,} Redis commands, {back.redis.net_bytes:,} B, "
            f"{back.wal:,} WAL B"
        )
        rows.append(row)
    return rows


DATA_COLUMNS = (
    SAVER,
    *(Column(m.key, m.label, m.format) for m in (*MEASURES, *ROUND_MEASURES)),
    Column("by_round", "steps/s by round"),
    Column("failures", "failed invokes", "int"),
    Column("wrong", "wrong states", "int"),
)


# --- the section ------------------------------------------------------------------------------


def _notes(ctx: Context, probes: Probes, runs: Mapping[str, Runs]) -> list[str]:
    profile, pg = ctx.profile, probes.postgres
    steps = profile.load_invokes * STEPS_PER_INVOKE
    samples = [s for r in runs.values() for s in r.samples]
    background = (
        "Subtracted as the background, median per round: "
        f"{_median([s.background.redis.commands for s in samples]) or 0:,.0f} Redis commands, "
        f"{_median([s.background.redis.net_bytes for s in samples]) or 0:,.0f} Redis bytes, "
        f"{_median([s.background.wal for s in samples]) or 0:,.0f} WAL bytes."
        if samples
        else ""
    )
    shares = [s.others_share for s in samples if s.others_share is not None]
    others = (
        f" Meanwhile the machine's other processes used {min(shares):.0%} to {max(shares):.0%} "
        "of its CPU (from /proc/stat, less the processes measured here; per round in the last "
        "table): a round that shares the machine runs slower."
        if shares
        else ""
    )
    wal = (
        "WAL bytes, the saver's database: the pg_walinspect records that touch its relations "
        "and every record of the transactions that made one (their commits); exact beside "
        "other clients, without page headers and alignment."
        if pg.walinspect is None
        else f"WAL bytes of the saver's database unknown: pg_walinspect: {pg.walinspect}."
    )
    return [
        f"Savers: {'; '.join(f'{name} = {LABELS[name]}' for name in runs)}. Ratios in "
        f"brackets are over {BASELINE}'s: steps/s above 1x is faster, a cost above 1x is more.",
        f"Each round: {profile.load_threads} new threads x {profile.load_invokes} invocations "
        f"of the chat graph (START → plan → act → reflect → END, async nodes, ~200-char "
        f"messages merged by `add_messages`; {steps} node steps a thread), at most "
        f"{profile.load_concurrency} `ainvoke` in flight, LangGraph's default durability "
        f"(\"async\"); each invocation's state is checked. {profile.load_rounds} measured "
        f"rounds per saver after {profile.load_warmup} discarded, interleaved (each round "
        "starts with another saver).",
        "Each saver has a scratch database of its own (setup() once before the rounds, data "
        "kept across them), is opened for its round and closed after it (no other saver is "
        f"open meanwhile; the pool opens its {POOL_SIZE} connections at once; DurableSaver "
        "runs at its defaults), and first runs an untimed warm-up of "
        f"{profile.load_concurrency} threads x {profile.load_invokes} invocations, drained, "
        "so that its connections are open and its statements prepared when the round starts. "
        "The drain (write-behind `aflush()`) follows the round's invocations: outside steps/s, "
        "inside every other figure.",
        f"CPU: the Python process (getrusage: every thread, the write-behind flusher too), "
        f"redis-server (INFO server process_id) and every process pg_stat_activity lists "
        f"for the saver's database (client backends, autovacuum workers), from "
        f"{cpu_source()}. Every process = the three (Redis not counted for the savers that "
        "do not use it). Postgres background processes (checkpointer, walwriter, background "
        "writer; cluster-wide, so shared with other clients) are shown apart, without a ratio.",
        "Postgres commits and rows: pg_stat_database of the saver's database (xact_commit; "
        "tup_inserted + tup_updated + tup_deleted), read before the saver opens and once its "
        "backends have exited (an idle backend may hold its statistics for 10 s), so over the "
        "warm-up and the round, per step of both. Every other figure covers the round alone. "
        + wal
        + " The cluster's insert position (pg_current_wal_insert_lsn) counts every client.",
        "Redis commands: INFO commandstats calls (commands run by scripts count); bytes: "
        "total_net_input_bytes + total_net_output_bytes. Both server-wide, less the readings' "
        f"own INFO and less a quiet baseline: the same counters over {profile.load_quiet_s} s "
        "with no saver open before each round, scaled to the round. So are redis-server's "
        "CPU and the cluster's WAL and background processes: other clients' bursts make "
        "these noisy (the last table shows what each round lost to the baseline); give the "
        "run servers of its own for exact ones. " + background + others,
    ]


async def _run(ctx: Context, names: Sequence[str], table: Table) -> list[Table]:
    profile = ctx.profile
    pg = PostgresProbe(ctx.settings.bench_postgres_url)
    probes = Probes(pg, RedisProbe(ctx.settings.redis_url))
    specs = {spec.name: spec for spec in ctx.specs}
    runs = {name: Runs("redis" in specs[name].stores) for name in names}
    spaces: dict[str, tuple[Namespace, int]] = {}
    try:
        probes.redis.calibrate()
        for name in names:
            try:
                ns = await _provision(ctx, specs[name])
                spaces[name] = (ns, pg.database_oid(ns.settings.database))
            except Exception as exc:
                runs[name].error = describe(exc)
        live = [name for name in names if name in spaces]
        for round_, name in schedule(live, profile.load_warmup + profile.load_rounds):
            if runs[name].error is not None:
                continue
            warm = round_ < profile.load_warmup
            quiet = await _quiet(probes, profile.load_quiet_s)
            try:
                sample = await _round(ctx, probes, *spaces[name], round_, quiet)
            except Exception as exc:
                log.exception("%s: %s failed", SECTION, name)
                runs[name].error = describe(exc)
                continue
            log.info(
                "%s: %s round %d%s: %.0f steps/s, %d failed, %d wrong",
                SECTION, name, round_, " (discarded)" if warm else "",
                sample.steps / sample.invoke_s, sample.tally.failures, sample.tally.wrong,
            )
            if not warm:
                runs[name].samples.append(sample)
    finally:
        probes.redis.close()
        pg.close()
        if not ctx.settings.keep_data:
            for ns, _oid in spaces.values():
                infra.drop_database(ctx.settings.postgres_url, ns.settings.database)
    rows = {name: _data_row(name, runs[name]) for name in names}
    table.rows.extend(rows.values())
    summary = _summary(names, rows)
    summary.notes = _notes(ctx, probes, runs)
    table.notes = [
        "The figures of the table above, one row per saver (the goals read them here); "
        "steps/s by round in the order the rounds ran."
    ]
    rounds = Table(
        SECTION,
        "Load: each measured round",
        ROUND_COLUMNS,
        [row for name in names for row in _round_rows(name, runs[name])],
        notes=[
            "Per node step, as above; rounds numbered in the order they ran, from 0 (discarded "
            "rounds included). The last column is what the quiet baseline subtracted from the "
            "round's server-wide counters."
        ],
    )
    return [summary, table, rounds]


def run(ctx: Context) -> list[Table]:
    """The selected savers among :data:`SAVERS`, round by round."""
    names = [spec.name for spec in ctx.specs if spec.name in SAVERS]
    table = Table(SECTION, "Load: per saver", DATA_COLUMNS)
    if not names:
        table.rows.append({"saver": SECTION, NOTE: f"not run: select {', '.join(SAVERS)}"})
        return [table]
    return asyncio.run(_run(ctx, names, table))

