"""What a thread looks like after kill -9, compared with LangGraph's own `PostgresSaver`.

A process killed inside a turn leaves the thread at the last checkpoint it stored, with the
pending writes of the tasks that finished in that step. The snapshot, the history and what
the next `invoke` does must be the same as with `PostgresSaver` killed at the same point:
anything else would mean this saver lost or invented a write. See "What a resume looks like
after kill -9" in docs/failure-model.md.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tests.support import forked
from tests.support.graphs import chat_graph
from tests.support.kill_point_worker import FIRST, SECOND, close_saver, main, open_saver

SAVERS = ("postgres", "through", "behind")
THIRD = "third"


def _snapshot(graph: Any, config: dict[str, Any]) -> tuple[Any, ...]:
    """Everything a user sees of a thread, without ids and timestamps."""
    state = graph.get_state(config)
    history = [(h.metadata["source"], h.metadata["step"], h.next, len(h.tasks))
               for h in graph.get_state_history(config)]
    return ([m.content for m in state.values["messages"]], state.next,
            state.metadata["source"], state.metadata["step"], history)


def _kill_at(schema: str, prefix: str, threads: dict[Any, str], step: int,
             when: str) -> None:
    """Run each thread's worker (SAVER first in its key) to its kill point."""
    # Set the tables up first: PostgresSaver.setup() is not safe to run concurrently.
    for kind in ("postgres", "through"):
        close_saver(open_saver(kind, schema, prefix))
    procs = [forked.start(main, [key[0], schema, prefix, thread, str(step), when])
             for key, thread in threads.items()]
    for proc in procs:
        proc.join(timeout=120)
        assert proc.exitcode == -9, "a worker did not reach its kill point"


def _contents(out: dict[str, Any]) -> list[str]:
    return [str(m.content) for m in out["messages"]]


# The second turn's checkpoints: step 4 is its input (task __start__), 5 runs plan. The
# kill after the input step's writes is the next test's.
@pytest.mark.parametrize("step,when", [(4, "before"), (5, "before"), (5, "after")])
def test_a_killed_turn_resumes_as_with_postgres_saver(
    namespace: tuple[str, str], step: int, when: str
) -> None:
    """Killed at the same point of a turn, PostgresSaver and DurableSaver in both modes
    show the same state and history, a new input continues the same way, and
    ``invoke(None)`` first finishes the interrupted turn with each node run once."""
    schema, prefix = namespace
    threads = {(kind, path): f"t-{kind}-{path}-{uuid.uuid4()}"
               for kind in SAVERS for path in ("new-input", "resume")}
    _kill_at(schema, prefix, threads, step, when)

    seen: dict[str, tuple[Any, ...]] = {}
    for kind in SAVERS:
        saver = open_saver(kind, schema, prefix)
        graph = chat_graph(saver)
        new_input = {"configurable": {"thread_id": threads[kind, "new-input"]}}
        resume = {"configurable": {"thread_id": threads[kind, "resume"]}}
        after_kill = _snapshot(graph, new_input)
        assert _snapshot(graph, resume) == after_kill
        continued = _contents(graph.invoke({"messages": [("user", THIRD)]}, new_input))
        finished = _contents(graph.invoke(None, resume))
        then = _contents(graph.invoke({"messages": [("user", THIRD)]}, resume))
        seen[kind] = (after_kill, continued, finished, then)
        close_saver(saver)

    assert seen["through"] == seen["postgres"]
    assert seen["behind"] == seen["postgres"]
    (_, _, finished, then) = seen["postgres"]
    assert finished == [FIRST, "plan #1", "act #2", "finish #3",
                        SECOND, "plan #5", "act #6", "finish #7"]
    assert then == [*finished, THIRD, "plan #9", "act #10", "finish #11"]


def test_a_kill_after_the_input_step_shows_the_input_with_nothing_next(
    namespace: tuple[str, str]
) -> None:
    """The shape users took for a lost write: killed after the input was stored and its
    step finished, the thread shows the new input with ``next=()``, and a new input
    instead of ``invoke(None)`` drops it. PostgresSaver does the same (LangGraph's rule:
    a new input starts from the last checkpoint; the writes of its unfinished step go)."""
    schema, prefix = namespace
    threads = {(kind,): f"t-{kind}-{uuid.uuid4()}" for kind in SAVERS}
    _kill_at(schema, prefix, threads, 4, "after")
    for (kind,), thread in threads.items():
        saver = open_saver(kind, schema, prefix)
        graph = chat_graph(saver)
        config = {"configurable": {"thread_id": thread}}
        state = graph.get_state(config)
        assert [m.content for m in state.values["messages"]][-1] == SECOND, kind
        assert state.next == () and state.metadata["source"] == "input", kind
        assert [t.name for t in state.tasks] == ["__start__"], kind  # the unfinished step
        out = _contents(graph.invoke({"messages": [("user", THIRD)]}, config))
        assert SECOND not in out and out[-4:] == [THIRD, "plan #5", "act #6", "finish #7"], kind
        close_saver(saver)
