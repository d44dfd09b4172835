"""Micro: one saver call at a time (put, put_writes, get_tuple, list), sync API."""

from __future__ import annotations

import gc
import logging
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass

from benchmarks.context import Context
from benchmarks.report import SAVER, Column, Table, add_ratios, error_row
from benchmarks.savers import Saver, open_savers
from benchmarks.sections._common import LATENCY_COLUMNS, build_fixtures, latency_rows
from benchmarks.timing import round_robin, timed, timed_ns
from benchmarks.workloads import CheckpointChain, expect_checkpoint, make_messages, thread_config

SECTION = "micro"
SIZES = (10, 100)
"""Messages in the ``messages`` channel of the checkpoints put and read."""
WRITES_SIZE = 10
LIST_LIMIT = 10

log = logging.getLogger(__name__)

Probe = Callable[[int], int]
"""Runs sample ``round`` of one operation; returns the operation's duration in ns."""


@dataclass(frozen=True, slots=True)
class Fixture:
    """One saver's threads: one to append to per message count, one per read size, and
    one whose new checkpoints are read back at once."""

    puts: dict[int, CheckpointChain]
    writes: CheckpointChain
    reads: dict[int, CheckpointChain]
    new_reads: CheckpointChain


def _read_thread(saver: Saver, size: int, length: int) -> CheckpointChain:
    """A thread of ``length`` checkpoints whose latest has one task's two pending writes."""
    chain = CheckpointChain(saver, f"read-{size}", make_messages(size)).extend(length)
    chain.put_writes()
    latest = thread_config(chain.thread_id)
    expect_checkpoint(saver.get_tuple(latest), chain.ids[-1], size, 2)
    expect_checkpoint(
        saver.get_tuple(thread_config(chain.thread_id, chain.ids[0])), chain.ids[0], size, 0
    )
    listed = [found.checkpoint["id"] for found in saver.list(latest, limit=LIST_LIMIT)]
    if listed != chain.ids[::-1][:LIST_LIMIT]:
        raise AssertionError(f"list(limit={LIST_LIMIT}) returned {len(listed)} ids out of order")
    return chain


def _fixture(saver: Saver, read_length: int) -> Fixture:
    return Fixture(
        puts={size: CheckpointChain(saver, f"put-{size}", make_messages(size)) for size in SIZES},
        writes=CheckpointChain(saver, "writes", make_messages(WRITES_SIZE)),
        reads={size: _read_thread(saver, size, read_length) for size in SIZES},
        new_reads=CheckpointChain(saver, "new-read", make_messages(SIZES[0])),
    )


def _put(chain: CheckpointChain) -> Probe:
    return lambda _round: chain.put_timed()


def _put_writes(chain: CheckpointChain) -> Probe:
    """Two writes on a checkpoint just put (untimed), as the loop writes after each put."""

    def probe(_round: int) -> int:
        chain.put()
        config, writes, task_id, path = chain.prepare_writes()
        return timed_ns(lambda: chain.saver.put_writes(config, writes, task_id, path))

    return probe


def _get_latest(chain: CheckpointChain) -> Probe:
    config = thread_config(chain.thread_id)
    return lambda _round: timed_ns(lambda: chain.saver.get_tuple(config))


def _get_new_latest(chain: CheckpointChain) -> Probe:
    """Put a checkpoint (untimed), then read the thread's latest: the first read of a
    checkpoint this saver instance has just written, as at the start of an invoke."""
    config = thread_config(chain.thread_id)

    def probe(_round: int) -> int:
        chain.put()
        elapsed, found = timed(lambda: chain.saver.get_tuple(config))
        expect_checkpoint(found, chain.ids[-1], len(chain.messages), 0)
        return elapsed

    return probe


def _get_by_id(chain: CheckpointChain) -> Probe:
    """Cycle through the thread's older checkpoints (every one but the latest)."""
    configs = [thread_config(chain.thread_id, checkpoint_id) for checkpoint_id in chain.ids[:-1]]
    return lambda round_: timed_ns(lambda: chain.saver.get_tuple(configs[round_ % len(configs)]))


def _list(chain: CheckpointChain) -> Probe:
    config = thread_config(chain.thread_id)
    return lambda _round: timed_ns(lambda: list(chain.saver.list(config, limit=LIST_LIMIT)))


OPERATIONS: tuple[tuple[str, Callable[[Fixture], Probe]], ...] = (
    *((f"put · {n} msgs", lambda fx, n=n: _put(fx.puts[n])) for n in SIZES),
    ("put_writes · 2 writes", lambda fx: _put_writes(fx.writes)),
    *((f"get_tuple latest · {n} msgs", lambda fx, n=n: _get_latest(fx.reads[n])) for n in SIZES),
    (f"get_tuple latest after its put · {SIZES[0]} msgs", lambda fx: _get_new_latest(fx.new_reads)),
    (f"get_tuple by id · {SIZES[0]} msgs", lambda fx: _get_by_id(fx.reads[SIZES[0]])),
    (f"list limit={LIST_LIMIT} · {SIZES[0]} msgs", lambda fx: _list(fx.reads[SIZES[0]])),
)


def run(ctx: Context) -> list[Table]:
    """Measure every operation on every saver, interleaved per sample."""
    profile = ctx.profile
    table = Table(
        SECTION,
        "Micro: single calls, sync API",
        (Column("op", "operation"), SAVER, *LATENCY_COLUMNS),
        notes=[
            "Checkpoints are shaped like the 3-node chat graph's: each put bumps `messages` "
            "and one `branch:to:*` trigger via `saver.get_next_version`, so `messages` is "
            "serialized in full on every put. put_writes targets a checkpoint put just "
            f"before it (untimed). Reads hit a {profile.read_thread_length}-checkpoint "
            "thread whose latest checkpoint has 2 pending writes, the same checkpoint again "
            "and again. *after its put*: each sample puts a checkpoint (untimed), then reads "
            "the thread's latest, which must be that checkpoint: the read at the start of an "
            "invoke, of what the same saver instance has just written.",
        ],
    )
    with ExitStack() as stack:
        opened = open_savers(stack, ctx.specs, ctx.settings, SECTION)
        fixtures, errors = build_fixtures(
            opened, lambda saver: _fixture(saver, profile.read_thread_length)
        )
        for label, make_probe in OPERATIONS:
            log.info("%s: %s", SECTION, label)
            gc.collect()
            series = round_robin(
                {name: make_probe(fixture) for name, fixture in fixtures.items()},
                rounds=profile.micro_rounds,
                warmup=profile.micro_warmup,
            )
            table.rows.extend(latency_rows(series, op=label))
    add_ratios(table.rows, "p50", group=("op",))
    table.rows.extend(error_row(name, error, op="(all)") for name, error in errors.items())
    return [table]
