"""A run is told apart by its runtime object, never by a recycled address: CPython gives
a freed object's id to the next object made, so a run that started after another ended
must not inherit its marks (it would compare a fork as an extension, or not compare)."""

from __future__ import annotations

import gc

from langgraph_durable._core.lineage import RUN_KEY, Lineage


def _config(runtime: object) -> dict[str, object]:
    return {"configurable": {"thread_id": "t", RUN_KEY: runtime}}


def test_a_run_keeps_its_token_and_a_new_run_never_takes_an_ended_ones_marks() -> None:
    """One token per runtime for as long as it is remembered; a runtime made after
    another was dropped by its caller gets another token even if it lands at the same
    address, so the first run's marks (here: it wrote C, so extends C) are not its own."""
    lineage = Lineage()
    first = object()
    token = lineage.run_of(_config(first))
    assert lineage.run_of(_config(first)) == token and token != 0
    lineage.wrote(token, "t", "", "C")
    address = id(first)
    del first
    gc.collect()
    later = [object() for _ in range(1000)]  # freed addresses are handed out again
    assert all(id(o) != address for o in later)  # the lineage still holds the first run
    tokens = {lineage.run_of(_config(o)) for o in later[:100]}
    assert token not in tokens and len(tokens) == 100
    assert not any(lineage.extends(t, "t", "", "C") for t in tokens)
    assert lineage.run_of({"configurable": {"thread_id": "t"}}) == 0


def test_a_run_pushed_out_by_newer_ones_comes_back_uncompared() -> None:
    """Past ``runs`` remembered runs the oldest is forgotten: back again, it gets a new
    token, so its next put is not compared (never wrongly refused)."""
    lineage = Lineage(runs=2)
    old, a, b = object(), object(), object()
    token = lineage.run_of(_config(old))
    lineage.wrote(token, "t", "", "C")
    lineage.run_of(_config(a))
    lineage.run_of(_config(b))
    again = lineage.run_of(_config(old))
    assert again != token and not lineage.extends(again, "t", "", "C")
