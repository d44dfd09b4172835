"""The real-process checker's latency check, on histories written by hand: a call that met
a frozen tier may take ``tier_timeout`` on top of `LATENCY_BOUND`'s work for each freeze
after the first it met, and no more."""

from __future__ import annotations

from tests.support.checker.check import LATENCY_BOUND, TIER_TIMEOUT, Checker, Fault, Op


def _violations(took: float, faults: list[Fault]) -> list[str]:
    op = Op("p0@1.1", "p0@1", 1, "p0@1.0", "delete", "t0", {}, t0=100.0, t1=100.0 + took,
            kind="info", error="TierUnavailableError: Postgres (cold tier) is unavailable")
    report = Checker([op], faults, "through").run()
    return [v.text for v in report.violations if v.check == "latency"]


def test_a_call_that_met_one_freeze_gets_the_bound() -> None:
    freeze = [Fault("pg_freeze", None, 90.0, 101.0)]
    assert not _violations(LATENCY_BOUND - 0.1, freeze)
    assert _violations(LATENCY_BOUND + 0.5, freeze)


def test_a_call_that_met_two_freezes_in_turn_gets_a_tier_timeout_more() -> None:
    two = [Fault("pg_freeze", None, 90.0, 101.0), Fault("redis_freeze", None, 101.5, 120.0)]
    assert not _violations(LATENCY_BOUND + TIER_TIMEOUT - 0.1, two)
    assert _violations(LATENCY_BOUND + TIER_TIMEOUT + 0.5, two)


def test_a_freeze_that_ended_before_the_call_began_gives_nothing() -> None:
    before = [Fault("pg_freeze", None, 80.0, 99.0), Fault("pg_freeze", None, 99.5, 120.0)]
    assert _violations(LATENCY_BOUND + 1.0, before)
