"""Whether a put extends the head (and must find its parent still the head) or is a fork
LangGraph asked for is decided per caller, never by what else this process did: not by an
earlier read by id made outside any run, not by how many runs the process served while
one run was slow, and a new thread's first checkpoint is fenced as "no head yet". Each
test is two processes (two savers on one schema and prefix) racing on one thread."""

from __future__ import annotations

import operator
import threading
import uuid
from collections.abc import Callable
from typing import Annotated, Any

import pytest
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

from langgraph_durable import DurableSaver, ThreadConflictError

# More runs than the lineage used to remember (it kept the last 256).
OTHER_RUNS = 300


class Steps(TypedDict):
    steps: Annotated[list[str], operator.add]


def _graph(saver: DurableSaver, node: Callable[[Steps], dict[str, Any]] | None = None) -> Any:
    """One node appending to ``steps`` (``node`` to run something first)."""
    builder = StateGraph(Steps)
    builder.add_node("step", node or (lambda state: {"steps": ["step"]}))
    builder.add_edge(START, "step")
    builder.add_edge("step", END)
    return builder.compile(checkpointer=saver)


def _config(thread: str) -> Any:
    return {"configurable": {"thread_id": thread}}


def test_update_state_after_a_read_by_id_is_fenced_like_any_update(
    make_saver: Callable[..., DurableSaver],
) -> None:
    """Process A shows the head by id (a UI's ``get_state`` with its checkpoint id), later
    calls ``update_state`` without an id; process B completes a run on the thread between
    that update's read and its write. The update raises `ThreadConflictError` (as it does
    without the earlier read by id) and B's acknowledged run stays in the latest state.
    (The by-id read used to leave a fork mark that the update's read of the latest kept:
    the update was stored as a fork and B's run dropped out of the thread.)"""
    a, b = make_saver(), make_saver()
    graph_a, graph_b = _graph(a), _graph(b)
    config = _config(f"by-id-then-update-{uuid.uuid4()}")
    graph_a.invoke({"steps": ["one"]}, config)
    shown = graph_a.get_state(config)
    assert graph_a.get_state(shown.config).values == shown.values  # the read by id
    put = a.put
    raced: list[Any] = []

    def put_after_b(*args: Any) -> Any:
        if not raced:  # B's run lands between the update's read and its write
            raced.append(graph_b.invoke({"steps": ["b"]}, config))
        return put(*args)

    a.put = put_after_b  # type: ignore[method-assign]
    with pytest.raises(ThreadConflictError):
        graph_a.update_state(config, {"steps": ["edit"]})
    a.put = put  # type: ignore[method-assign]
    b.flush()
    assert graph_a.get_state(config).values["steps"] == ["one", "step", "b", "step"]


def test_a_slow_run_is_fenced_after_hundreds_of_other_runs_in_its_process(
    make_saver: Callable[..., DurableSaver],
) -> None:
    """A long-lived worker: one run reads the head and sits in a slow node while the same
    saver serves 300 other runs; meanwhile another process completes a run on the slow
    run's thread. The slow run's next put raises `ThreadConflictError`, and the other
    process's run stays the head. (The lineage used to keep the last 256 runs: the slow
    run came back as a new one, its put uncompared, and the thread forked silently.)"""
    a, b = make_saver(), make_saver()
    entered, release = threading.Event(), threading.Event()

    def slow(state: Steps) -> dict[str, Any]:
        entered.set()
        assert release.wait(60)
        return {"steps": ["slow"]}

    thread = f"slow-run-{uuid.uuid4()}"
    config = _config(thread)
    _graph(b).invoke({"steps": ["one"]}, config)
    b.flush()
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            _graph(a, slow).invoke({"steps": ["two"]}, config, durability="exit")
            outcome.append(None)
        except BaseException as exc:  # the outcome is the assertion
            outcome.append(exc)

    worker = threading.Thread(target=run)
    worker.start()
    try:
        assert entered.wait(20)
        quick = _graph(a)
        for n in range(OTHER_RUNS):
            quick.invoke({"steps": [str(n)]}, _config(f"{thread}-other-{n}"),
                         durability="exit")
        _graph(b).invoke({"steps": ["b"]}, config)
        b.flush()
    finally:
        release.set()
        worker.join(30)
    assert len(outcome) == 1 and isinstance(outcome[0], ThreadConflictError), outcome
    a.flush()
    assert _graph(a).get_state(config).values["steps"] == ["one", "step", "b", "step"]


def test_two_first_runs_of_a_new_thread_cannot_both_succeed(
    make_saver: Callable[..., DurableSaver],
) -> None:
    """A double-submitted first message: two processes run a new thread at once with
    ``durability="exit"``, both having found it empty. Exactly one stores its run; the
    other raises `ThreadConflictError` (its root would have started a second history),
    and the thread holds the first one's run. (A root has no parent, so nothing compared
    it: both returned success and one was silently dropped.)"""
    both_read = threading.Barrier(2, timeout=20)

    def meet(state: Steps) -> dict[str, Any]:
        both_read.wait()  # each run read the empty thread before either writes
        return {"steps": ["step"]}

    savers = [make_saver(), make_saver()]
    config = _config(f"first-runs-{uuid.uuid4()}")
    outcomes: dict[str, BaseException | None] = {}

    def run(name: str, saver: DurableSaver) -> None:
        try:
            _graph(saver, meet).invoke({"steps": [name]}, config, durability="exit")
            outcomes[name] = None
        except BaseException as exc:  # the outcome is the assertion
            outcomes[name] = exc

    workers = [threading.Thread(target=run, args=(name, saver))
               for name, saver in zip("ab", savers, strict=True)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(30)
    won = [name for name, exc in outcomes.items() if exc is None]
    lost = [exc for exc in outcomes.values() if exc is not None]
    assert len(won) == 1 and len(lost) == 1, outcomes
    assert isinstance(lost[0], ThreadConflictError), lost
    for saver in savers:
        saver.flush()
    assert _graph(savers[0]).get_state(config).values["steps"] == [won[0], "step"]
