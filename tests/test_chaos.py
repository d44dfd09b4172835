"""Real-process chaos, small: agent processes SIGKILLed in both write modes, Redis killed
and restarted, Postgres cut, a supervisor with parallel worker agents among the workloads.
`make chaos` runs the same harness with 200 kills (`python -m tests.chaos`)."""

from __future__ import annotations

from tests.chaos import MODES, soak

KILLS = 12


def test_kills_and_faults_lose_nothing_acknowledged_and_repeat_no_effect() -> None:
    """12 SIGKILLs (6 per write mode, four workers a round), a Redis restart and a Postgres
    cut in each mode: no acknowledged checkpoint is lost, no side effect of the supervisor's
    worker agents runs twice, every thread resumes to its end, and every resume has a known
    explanation."""
    tally = soak(KILLS, seed=7, workers=4)
    report = tally.table()
    assert tally.violations == [], report
    assert all(tally.kills[mode] * 2 >= KILLS for mode in MODES), report
    assert tally.faults["postgres cut"] >= 2, report
    assert sum(n for fault, n in tally.faults.items() if fault.startswith("redis")) >= 2, report
    assert tally.threads["supervisor through"] and tally.threads["supervisor behind"], report
    assert tally.acknowledged > 0 and tally.lost == 0, report
    assert tally.effects > 0 and tally.repeated == 0, report
    assert tally.completed == sum(tally.threads.values()), report
    assert not any(c.startswith(("LOST", "FORK")) for c in tally.classes), report
