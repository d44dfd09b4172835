"""A write-through ``put_writes`` of ordinary writes commits the short form of the writes
statement (`PUT_ORDINARY_WRITES_SQL`: no head row to start, no special writes to replace);
when that stores nothing, the full form (`PUT_WRITES_SQL`) runs in its own transaction and
decides: the namespace's first write stored, or a deleted history refused. A run that
found the namespace empty, and special writes, commit the full form at once."""

from __future__ import annotations

from typing import Any

import pytest

from langgraph_durable._core import ops
from langgraph_durable._core.context import Context
from langgraph_durable._core.keys import ThreadKeys
from langgraph_durable.errors import ThreadConflictError
from tests.core.script import Script, cold, hot

THREAD = "thread-1"
CONFIG = {"configurable": {"thread_id": THREAD, "checkpoint_ns": "", "checkpoint_id": "c1"}}
KEYS = ThreadKeys("t", THREAD)
INTENT = hot("intent", [KEYS.intents, KEYS.unflushed, KEYS.versions])


def _put_writes(ctx: Context, writes: list[tuple[str, Any]]) -> Any:
    return ops.put_writes(ctx, CONFIG, writes, "task", "path")  # type: ignore[arg-type]


def test_ordinary_writes_commit_the_short_form_once(ctx: Context) -> None:
    """One transaction of the short form; its version goes to Redis with the writes."""
    script = Script([
        (INTENT, 0),
        (cold(ctx.statements.put_ordinary_writes_sql),
         [[{"version": 7, "checkpoint_stored": True}]]),
        (hot("put_writes"), 1),
    ])
    script.run(_put_writes(ctx, [("x", 1), ("y", 2)]))
    assert script.done
    params = script.requests[1].statements[0].params
    assert (params["idxs"], params["channels"]) == ([0, 1], ["x", "y"])
    assert list(script.requests[2].args)[3:6] == [7, KEYS.version_field(""), "c1"]


def test_the_full_form_runs_when_the_short_one_stored_nothing(ctx: Context) -> None:
    """The short form returned no row (the namespace has no head row yet): the full form
    runs next, with the same writes, and Redis gets the version it committed."""
    script = Script([
        (INTENT, 0),
        (cold(ctx.statements.put_ordinary_writes_sql), [[]]),
        (cold(ctx.statements.put_writes_sql), [[{"version": 9, "checkpoint_stored": False}]]),
        (hot("put_writes"), 1),
    ])
    script.run(_put_writes(ctx, [("x", 1)]))
    assert script.done
    assert script.requests[2].statements[0].params == script.requests[1].statements[0].params
    assert list(script.requests[3].args)[3:6] == [9, KEYS.version_field(""), ""]


def test_writes_refused_by_both_forms_release_the_intent_and_raise(ctx: Context) -> None:
    """Neither form stored anything (the history was deleted): the intent is released,
    nothing goes to Redis, and the writer learns its thread was deleted."""
    script = Script([
        (INTENT, 0),
        (cold(ctx.statements.put_ordinary_writes_sql), [[]]),
        (cold(ctx.statements.put_writes_sql), [[]]),
        (hot("release", [KEYS.intents, KEYS.versions]), 1),
        (cold(ctx.statements.head_sql), [[{"head": None, "run_id": None, "deleted": True}]]),
    ])
    with pytest.raises(ThreadConflictError) as raised:
        script.run(_put_writes(ctx, [("x", 1)]))
    assert script.done and raised.value.deleted


def test_special_writes_commit_the_full_form_alone(ctx: Context) -> None:
    """A special write (``__interrupt__``) replaces: only the full form stores it, so it
    is the one statement, and a refusal is not tried twice."""
    script = Script([
        (INTENT, 0),
        (cold(ctx.statements.put_writes_sql), [[]]),
        (hot("release", [KEYS.intents, KEYS.versions]), 1),
        (cold(ctx.statements.head_sql), [[{"head": None, "run_id": None, "deleted": True}]]),
    ])
    with pytest.raises(ThreadConflictError):
        script.run(_put_writes(ctx, [("__interrupt__", "question"), ("x", 1)]))
    assert script.done


def test_a_run_that_found_the_namespace_empty_commits_the_full_form_at_once(
        ctx: Context) -> None:
    """A run that read the namespace empty and put nothing there yet (its first writes come
    before its first checkpoint) has no head row to bump: the full form, in one statement."""
    ctx.lineage.caller(None).read(THREAD, "", None, latest=True)
    script = Script([
        (INTENT, 0),
        (cold(ctx.statements.put_writes_sql), [[{"version": 3, "checkpoint_stored": False}]]),
        (hot("put_writes"), 1),
    ])
    script.run(_put_writes(ctx, [("x", 1)]))
    assert script.done
