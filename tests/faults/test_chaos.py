"""Real-process chaos, small: agent processes SIGKILLed in both write modes, Redis killed
and restarted, Postgres cut, asyncio cancellations (mid-tool too), a fork and resolves from
the command line while calls run, a supervisor with parallel worker agents among the
workloads, under LangGraph durability sync, async and exit, with and without
``handle_tool_errors`` and durable model calls. `make chaos` runs the same harness with 200
kills (`python -m tests.support.chaos`)."""

from __future__ import annotations

from tests.support.chaos import MODES, soak

KILLS = 12


def test_kills_and_faults_lose_nothing_acknowledged_and_repeat_no_effect() -> None:
    """12 SIGKILLs (6 per write mode, four workers a round), a Redis restart and a Postgres
    cut in each mode, a Redis restored from an older snapshot, cancellations, forks and
    resolves: no acknowledged checkpoint is lost, no order reaches the provider twice, no
    call is left unsettled, every thread resumes to its end, and every resume has a known
    explanation."""
    tally = soak(KILLS, seed=7, workers=4)
    report = tally.table()
    assert tally.violations == [], report
    assert all(tally.kills[mode] * 2 >= KILLS for mode in MODES), report
    assert tally.faults["postgres cut"] >= 2, report
    assert sum(n for fault, n in tally.faults.items() if fault.startswith("redis")) >= 2, report
    assert tally.faults["redis none restarted from an older snapshot"] >= 1, report
    for fault in ("asyncio cancel (timeout)", "asyncio cancel mid-tool",
                  "cli fork (calls in flight)", "cli resolve-all (call in flight)"):
        assert tally.faults[fault] >= 1, report
    assert sum(n for f, n in tally.faults.items() if f.startswith("cli resolve")) >= 2, report
    for draw in ("durability exit", "handle_tool_errors", "durable_model", "tool idempotent",
                 "tool verify"):
        assert tally.draws[draw] >= 1, report
    assert tally.threads["supervisor through"] and tally.threads["supervisor behind"], report
    assert tally.acknowledged > 0 and tally.lost == 0, report
    assert tally.orders > 0 and tally.effects >= tally.orders // 2, report
    assert tally.repeated == 0, report
    assert tally.completed == sum(tally.threads.values()) + tally.faults[
        "cli fork (calls in flight)"], report
    assert not any(c.startswith(("LOST", "FORK")) for c in tally.classes), report
