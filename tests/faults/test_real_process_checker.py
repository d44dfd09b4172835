"""The real-process checker (`tests/support/checker`), short: worker processes on shared threads
under a nemesis (links cut and slowed, Postgres cut, processes paused and killed, Redis
restarted, frozen and, written through, restored from an older snapshot, keys evicted), in
each write mode, then the history check finds no violation.
`make chaos` runs it long (``CHECKER_SECONDS``)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.support.checker.drain_loop import Loop
from tests.support.checker.run import run
from tests.support.servers import EMBEDDED

SECONDS = 20.0  # per write mode: with setup, healing and the final reads, under a minute


@pytest.mark.parametrize("write_mode", ["through", "behind"])
def test_checker_finds_no_violation(write_mode: str, tmp_path: Path) -> None:
    if EMBEDDED is None and shutil.which("redis-server") is None:
        pytest.fail("the checker restarts a Redis of its own: install redis-server "
                    "(apt-get install redis-server) or let the tests use the embedded servers")
    report = run(SECONDS, 1, write_mode, "general", tmp_path)
    print(report.summary())
    slices = "\n\n".join(f"{v.check} on {v.thread}: {v.text}\n{v.slice}"
                         for v in report.violations[:3])
    assert not report.violations, f"{report.summary()}\n\n{slices}"
    assert sum(report.faults.values()) >= 10, report.summary()


def test_a_fresh_read_after_a_kill_a_drain_and_an_emptied_redis_holds_every_turn(
        tmp_path: Path) -> None:
    """Written behind, rounds of: a process running turns SIGKILLed, a fresh saver's
    flush(), FLUSHDB, a fresh saver's read and resume. Every read holds every turn the
    killed process saw finish, and no resume finds the thread empty (once in 80 such
    rounds, a read found nothing for a thread Postgres held). `make chaos` runs 500."""
    failures = Loop(tmp_path, seed=1).run(12)
    assert failures == []
