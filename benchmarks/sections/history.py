"""History: does reading the head of a thread slow down as the thread grows?"""

from __future__ import annotations

import gc
import logging
from collections.abc import Callable
from contextlib import ExitStack

from benchmarks.context import Context
from benchmarks.report import NOTE, SAVER, Column, Row, Table, add_ratios, error_row
from benchmarks.savers import Saver, open_savers
from benchmarks.sections._common import (
    build_fixtures,
    per_point,
    quantile_cells,
    quantile_columns,
)
from benchmarks.timing import Series, round_robin, summarize, timed_ns
from benchmarks.workloads import CheckpointChain, expect_checkpoint, make_messages, thread_config

SECTION = "history"
MESSAGES = 10
LIST_LIMIT = 10

log = logging.getLogger(__name__)

Probe = Callable[[int], int]


def _thread(saver: Saver, length: int) -> str:
    """Store a ``length``-checkpoint thread; return its id."""
    chain = CheckpointChain(saver, f"history-{length}", make_messages(MESSAGES)).extend(length)
    expect_checkpoint(saver.get_tuple(thread_config(chain.thread_id)), chain.ids[-1], MESSAGES, 0)
    return chain.thread_id


def _get_latest(saver: Saver, thread_id: str) -> Probe:
    config = thread_config(thread_id)
    return lambda _round: timed_ns(lambda: saver.get_tuple(config))


def _list(saver: Saver, thread_id: str) -> Probe:
    config = thread_config(thread_id)
    return lambda _round: timed_ns(lambda: list(saver.list(config, limit=LIST_LIMIT)))


OPERATIONS: tuple[tuple[str, Callable[[Saver, str], Probe]], ...] = (
    ("get_tuple latest", _get_latest),
    (f"list limit={LIST_LIMIT}", _list),
)


def _row(saver: str, op: str, short: Series[int], long: Series[int]) -> Row:
    """One saver's latencies on both threads and how much the long one costs more."""
    error = short.error or long.error
    if error is not None:
        return error_row(saver, error, op=op)
    if not short.values or not long.values:
        return {"saver": saver, "op": op, NOTE: "no samples"}
    s, lo = summarize(short.values), summarize(long.values)
    return {
        "saver": saver,
        "op": op,
        **quantile_cells(s, "short_"),
        **quantile_cells(lo, "long_"),
        "growth": lo.p50 / s.p50,
    }


def run(ctx: Context) -> list[Table]:
    """Seed a short and a long thread per saver; time reads of both, all interleaved."""
    short, long = ctx.profile.history_lengths
    table = Table(
        SECTION,
        f"History: reads on a {short}- vs a {long}-checkpoint thread",
        (
            Column("op", "operation"),
            SAVER,
            *quantile_columns("short_", after=f" @{short}"),
            *quantile_columns("long_", after=f" @{long}"),
            Column("growth", f"{long}/{short} (p50)", "ratio"),
            Column("x_postgres", f"vs pg @{long}", "ratio"),
        ),
        notes=[f"Checkpoints hold {MESSAGES} messages; ratios divide p50s."],
    )
    with ExitStack() as stack:
        opened = open_savers(stack, ctx.specs, ctx.settings, SECTION)
        fixtures, errors = build_fixtures(
            opened, lambda saver: {n: _thread(saver, n) for n in (short, long)}
        )
        for label, make_probe in OPERATIONS:
            log.info("%s: %s", SECTION, label)
            gc.collect()
            series = round_robin(
                per_point(opened.savers, fixtures, make_probe),
                rounds=ctx.profile.history_rounds,
                warmup=ctx.profile.history_warmup,
            )
            table.rows.extend(
                _row(name, label, series[(name, short)], series[(name, long)]) for name in fixtures
            )
    add_ratios(table.rows, "long_p50", group=("op",))
    table.rows.extend(error_row(name, error, op="(all)") for name, error in errors.items())
    return [table]
