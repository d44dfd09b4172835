"""Restart: a fresh saver instance opens and serves its first read of an existing thread.

Two tables: a new instance in this process (construct + ``setup()``, then two reads), and a
new process per sample (construct without ``setup()``, as an application process opens
once the schema exists, then its first read). For the tiered ``DurableSaver`` two cases:
*hot*, Redis still holds the thread, and *cold*, every key under the saver's prefix was
deleted first (SCAN + UNLINK of that prefix only), so the read must come from Postgres.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Literal

from benchmarks import infra
from benchmarks.context import Context
from benchmarks.fresh_process import FirstRead, Request, first_read
from benchmarks.report import NOTE, SAVER, Column, Row, Table, add_ratios, error_row
from benchmarks.savers import Namespace, SaverSpec, drain, namespace
from benchmarks.sections._common import SAMPLES, quantile_cells, quantile_columns
from benchmarks.timing import Series, describe, round_robin, summarize
from benchmarks.workloads import CheckpointChain, expect_checkpoint, make_messages, thread_config

SECTION = "restart"
THREAD = "restart"
CHECKPOINTS = 10
MESSAGES = 10
PENDING_WRITES = 2

Variant = Literal["db", "hot", "cold"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Target:
    """A saver and the state of its hot tier at restart; its data lives in its own namespace."""

    spec: SaverSpec
    variant: Variant

    @property
    def name(self) -> str:
        """The report's saver label, e.g. ``durable-through (cold)``."""
        return self.spec.name if self.variant == "db" else f"{self.spec.name} ({self.variant})"

    def namespace(self, ctx: Context) -> Namespace:
        """The target's own data: hot and cold restarts never share keys or tables."""
        return namespace(ctx.settings, self.spec, f"restart-{self.variant}")


@dataclass(frozen=True, slots=True)
class Sample:
    """One restart: open (construct + setup), first and second ``get_tuple``, in ns."""

    open_ns: int
    first_ns: int
    second_ns: int
    hot_keys: int | None


def _targets(ctx: Context) -> list[Target]:
    """Every persistent saver; tiered ones twice, hot and cold."""
    targets: list[Target] = []
    for spec in ctx.specs:
        variants: tuple[Variant, ...] = ("hot", "cold") if spec.tiered else ("db",)
        targets.extend(Target(spec, variant) for variant in variants if not spec.volatile)
    return targets


def _seed(target: Target, ns: Namespace) -> str:
    """Store the thread with the saver that will be restarted; return the latest id."""
    target.spec.provision(ns)
    with target.spec.open(ns) as saver:
        chain = CheckpointChain(saver, THREAD, make_messages(MESSAGES)).extend(CHECKPOINTS)
        chain.put_writes()
        drain(saver)
    return chain.ids[-1]


def _prepare(target: Target, ns: Namespace) -> None:
    """Put the hot tier in the target's state: a cold target's keys are deleted."""
    if target.variant == "cold":
        infra.delete_prefix(ns.redis_url, ns.key_prefix)


def _probe(target: Target, ns: Namespace, expected_id: str, _round: int) -> Sample:
    """Open a fresh instance and read the thread twice; check the first answer."""
    _prepare(target, ns)
    hot_keys = infra.count_prefix(ns.redis_url, ns.key_prefix) if target.spec.tiered else None
    config = thread_config(THREAD)
    start = time.perf_counter_ns()
    with target.spec.open(ns) as saver:
        opened = time.perf_counter_ns()
        found = saver.get_tuple(config)
        first = time.perf_counter_ns()
        saver.get_tuple(config)
        second = time.perf_counter_ns()
    expect_checkpoint(found, expected_id, MESSAGES, PENDING_WRITES)
    return Sample(opened - start, first - opened, second - first, hot_keys)


def _row(name: str, series: Series[Sample]) -> Row:
    """Medians of open and of both reads, the first read's p95, the hot keys seen."""
    if series.error is not None:
        return error_row(name, series.error)
    samples = series.values
    first = summarize([s.first_ns for s in samples])
    row: Row = {
        "saver": name,
        "open_ms": summarize([s.open_ns for s in samples]).p50 / 1000,
        **quantile_cells(first, "first_"),
        "second_p50": summarize([s.second_ns for s in samples]).p50,
        "n": first.n,
    }
    keys = [s.hot_keys for s in samples if s.hot_keys is not None]
    if keys:
        row["hot_keys"] = min(keys)
    return row


def _new_process_probe(target: Target, request: Request, _round: int) -> FirstRead:
    """Start a new process that opens the saver without setup() and reads the thread."""
    _prepare(target, request.namespace())
    return first_read(request)


def _new_process_row(name: str, series: Series[FirstRead]) -> Row:
    """Medians of construct, of the first read, and of both together, in ms."""
    if series.error is not None:
        return error_row(name, series.error)
    samples = series.values
    both = summarize([s.construct_ns + s.first_ns for s in samples])
    return {
        "saver": name,
        "construct_ms": summarize([s.construct_ns for s in samples]).p50 / 1000,
        "first_ms": summarize([s.first_ns for s in samples]).p50 / 1000,
        "both_ms": both.p50 / 1000,
        "n": both.n,
    }


def _volatile_rows(ctx: Context) -> list[Row]:
    return [
        {"saver": spec.name, NOTE: "n/a: in-process state; a fresh instance starts empty"}
        for spec in ctx.specs
        if spec.volatile
    ]


def _new_process_table(
    ctx: Context, requests: dict[Target, Request], unseeded: list[Row]
) -> Table:
    """A new interpreter per sample, targets interleaved round by round."""
    table = Table(
        SECTION,
        "Restart: a new process's first get_tuple (latest), without setup()",
        (
            SAVER,
            Column("construct_ms", "construct p50 ms", "ms"),
            Column("first_ms", "1st get_tuple p50 ms", "ms"),
            Column("both_ms", "construct + 1st p50 ms", "ms"),
            Column("x_postgres", "vs pg (construct + 1st)", "ratio"),
            SAMPLES,
        ),
        notes=[
            "Each sample starts a new interpreter (`python -m benchmarks.fresh_process`) that "
            "imports everything, then, timed: constructs the saver on the existing schema "
            "without setup() (PostgresSaver: opens its connection; DurableSaver: its "
            "constructor), and reads the same thread as above, checked as above. "
            "construct + 1st is the median of each sample's sum.",
        ],
    )
    probes = {
        target.name: partial(_new_process_probe, target, request)
        for target, request in requests.items()
    }
    log.info("%s: %d targets in new processes", SECTION, len(probes))
    series = round_robin(
        probes, rounds=ctx.profile.new_process_rounds, warmup=ctx.profile.new_process_warmup
    )
    table.rows = [_new_process_row(name, entry) for name, entry in series.items()]
    table.rows.extend([*unseeded, *_volatile_rows(ctx)])
    add_ratios(table.rows, "both_ms")
    return table


def run(ctx: Context) -> list[Table]:
    """Seed each target once, then restart them in turn, a fresh instance per sample; then
    the same in a new process per sample."""
    table = Table(
        SECTION,
        "Restart: a fresh instance's open and first get_tuple (latest)",
        (
            SAVER,
            Column("open_ms", "open p50 ms", "ms"),
            *quantile_columns("first_", before="1st get_tuple "),
            Column("x_postgres", "vs pg (1st p50)", "ratio"),
            Column("second_p50", "2nd get_tuple p50 µs", "us"),
            Column("hot_keys", "redis keys at open", "int"),
            SAMPLES,
        ),
        notes=[
            f"The thread has {CHECKPOINTS} checkpoints of {MESSAGES} messages; the latest has "
            f"{PENDING_WRITES} pending writes, and each read is checked to return them. open = "
            "construct + setup() (+ connect). The seeding saver is flushed and closed first.",
        ],
    )
    probes: dict[str, Callable[[int], Sample]] = {}
    requests: dict[Target, Request] = {}
    unseeded: list[Row] = []
    for target in _targets(ctx):
        ns = target.namespace(ctx)
        try:
            expected_id = _seed(target, ns)
        except Exception as exc:
            unseeded.append(error_row(target.name, describe(exc)))
            continue
        probes[target.name] = partial(_probe, target, ns, expected_id)
        requests[target] = Request.of(
            ns, thread=THREAD, checkpoint_id=expected_id, messages=MESSAGES, writes=PENDING_WRITES
        )
    log.info("%s: %d targets", SECTION, len(probes))
    series = round_robin(
        probes, rounds=ctx.profile.restart_rounds, warmup=ctx.profile.restart_warmup
    )
    table.rows = [_row(name, entry) for name, entry in series.items()]
    table.rows.extend([*unseeded, *_volatile_rows(ctx)])
    add_ratios(table.rows, "first_p50")
    return [table, _new_process_table(ctx, requests, unseeded)]
