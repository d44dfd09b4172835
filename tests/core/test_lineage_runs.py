"""Each caller keeps its own marks for as long as it lives: a run (told by its runtime
object, never by a recycled address: CPython gives a freed object's id to the next object
made) until LangGraph lets go of the object, a call outside a run by its asyncio task or
thread. How many other runs the process served meanwhile changes nothing."""

from __future__ import annotations

import asyncio
import gc

from langgraph_durable._core.lineage import RUN_KEY, Lineage


def _config(runtime: object) -> dict[str, object]:
    return {"configurable": {"thread_id": "t", RUN_KEY: runtime}}


def test_a_run_keeps_its_marks_and_a_new_run_never_takes_an_ended_ones() -> None:
    """A runtime's marks are its own for as long as it is held; a runtime made after
    another was dropped by its caller starts with no marks even if it lands at the same
    address, so the first run's marks (here: it wrote C, so extends C) are not its own."""
    lineage = Lineage()
    first = object()
    marks = lineage.caller(_config(first))
    assert lineage.caller(_config(first)) is marks
    marks.wrote("t", "", "C")
    del first
    gc.collect()
    later = [object() for _ in range(100)]
    assert not any(lineage.caller(_config(o)).extends("t", "", "C") for o in later)


def test_a_live_run_is_remembered_however_many_runs_end_meanwhile() -> None:
    """A slow run that read the head still extends it after thousands of other runs came
    and went in the process; the ended ones are forgotten, so what is held stays bounded
    by the runs alive (a long-lived worker's memory does not grow with the runs it
    served)."""
    lineage = Lineage(sweep_at=8)
    slow = object()
    lineage.caller(_config(slow)).read("t", "", "H", latest=True)
    for _ in range(3_000):
        lineage.caller(_config(object())).read("t2", "", "X", latest=True)
    assert lineage.caller(_config(slow)).extends("t", "", "H")
    assert lineage.callers() <= 16


def test_a_read_that_finds_the_namespace_empty_fences_the_root() -> None:
    """A caller that found the namespace empty puts its root as "no head yet" (compared);
    once it wrote there, a further root is its own choice again (not compared), and a
    caller that never read the namespace does not compare its root."""
    lineage = Lineage()
    run = lineage.caller(_config(object()))
    run.read("t", "", None, latest=True)
    assert run.extends("t", "", None)
    run.wrote("t", "", "C")
    assert not run.extends("t", "", None) and run.extends("t", "", "C")
    assert not lineage.caller(_config(object())).extends("t", "", None)
    run.read("t", "", None, latest=False)  # a read by id that found nothing marks nothing
    assert not run.extends("t", "", None)


def test_calls_outside_a_run_are_kept_apart_per_asyncio_task() -> None:
    """Two tasks calling the async API outside any run: one's read by id (a fork) is not
    the other's read of the latest."""
    lineage = Lineage()

    async def read(latest: bool) -> bool:
        marks = lineage.caller(None)
        marks.read("t", "", "P", latest=latest)
        await asyncio.sleep(0)
        return marks.extends("t", "", "P")

    async def both() -> list[bool]:
        return list(await asyncio.gather(read(False), read(True)))

    assert asyncio.run(both()) == [False, True]
