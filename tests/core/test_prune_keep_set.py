"""Which checkpoints ``prune(strategy="keep_latest")`` keeps, and the statements it runs."""

from __future__ import annotations

from typing import Any

from langgraph_durable._core import ops
from langgraph_durable._core.context import Context
from langgraph_durable._core.keys import ThreadKeys
from langgraph_durable._core.prune import keep_set
from tests.core.script import Script, cold, empty_journal, hot


def _row(cid: str, parent: str | None, *, thread: str = "t1", ns: str = "",
         counters: dict[str, int] | None = None, stored: list[str] | None = None) -> dict[str, Any]:
    """A row of the prune scan: a checkpoint, its parent, its `DeltaChannel` counters and
    the channels it stores a full value (a seed) for."""
    return {"thread_id": thread, "checkpoint_ns": ns, "checkpoint_id": cid,
            "parent_checkpoint_id": parent, "counters": counters, "stored_channels": stored}


def test_keeps_the_latest_checkpoint_of_each_thread_and_namespace() -> None:
    """Without delta channels, only each (thread, namespace)'s newest checkpoint stays."""
    rows = [_row("c1", None), _row("c2", "c1"), _row("c3", "c2"),
            _row("s1", None, ns="sub"), _row("s2", "s1", ns="sub"),
            _row("d1", None, thread="t2")]
    assert sorted(keep_set(rows)) == [("t1", "", "c3"), ("t1", "sub", "s2"), ("t2", "", "d1")]


def test_keeps_every_ancestor_back_to_each_delta_channels_seed() -> None:
    """A `DeltaChannel` value is rebuilt from its nearest stored snapshot plus the writes
    after it: the walk keeps every ancestor up to the seed of each delta channel, and
    nothing older."""
    rows = [
        _row("c1", None, stored=["messages", "notes"]),
        _row("c2", "c1", stored=["notes"]),
        _row("c3", "c2", counters={"messages": 2}),
        _row("c4", "c3", counters={"messages": 3, "notes": 1}),
    ]
    assert list(keep_set(rows)) == [("t1", "", "c4"), ("t1", "", "c3"), ("t1", "", "c2"),
                                     ("t1", "", "c1")]
    rows[1]["stored_channels"] = ["notes", "messages"]  # a newer seed of messages
    assert list(keep_set(rows)) == [("t1", "", "c4"), ("t1", "", "c3"), ("t1", "", "c2")]


def test_a_latest_checkpoint_that_stores_its_delta_channels_keeps_nothing_else() -> None:
    """A latest checkpoint that holds a full value of each delta channel needs no ancestor."""
    rows = [_row("c1", None), _row("c2", "c1", counters={"m": 4}, stored=["m"])]
    assert list(keep_set(rows)) == [("t1", "", "c2")]


def test_the_walk_stops_at_a_parent_that_is_gone() -> None:
    """An ancestor already pruned (or never flushed) ends the walk without an error."""
    rows = [_row("c3", "c2", counters={"m": 1}), _row("c5", "c4", counters={"m": 2})]
    assert list(keep_set(rows)) == [("t1", "", "c5")]


def test_prune_deletes_all_but_the_keep_set_in_one_transaction(ctx: Context) -> None:
    """prune(keep_latest): drain the journal (empty here), the write intent (from now on
    a write-behind write of the thread goes through Postgres), drain again (a write made
    in between), scan, then one transaction that holds the heads table against writes,
    takes a tombstone version, deletes
    everything outside the keep set (plus orphan blobs) and gives each remaining namespace
    its head back, and the hot copy's drop with that tombstone."""
    st = ctx.statements
    keys = ThreadKeys("t", "t1")
    script = Script([
        empty_journal("t"),
        (hot("intent", [keys.intents, keys.unflushed, keys.versions]), 0),
        empty_journal("t"),
        (cold(st.no_jit_sql, st.prune_scan_sql), [None, [_row("c1", None, stored=["m"]),
                                                  _row("c2", "c1", counters={"m": 1})]]),
        (cold(st.lock_heads_table_sql, st.tombstone_sql, st.lock_heads_sql, st.no_jit_sql,
              st.prune_delete_sql, st.delete_orphan_blobs_sql, st.lock_heads_sql,
              st.rebuild_heads_sql),
         [None, [{"version": 17}], None, None, [], None, None, None]),
        (hot("drop_thread", [keys.intents, keys.registry, keys.versions, keys.unflushed]), 1),
    ])
    script.run(ops.prune(ctx, ["t1"], "keep_latest"))
    assert script.done
    assert script.requests[3].statements[1].params == {"thread_ids": ["t1"]}
    _, tombstone, lock, _, delete, _, relock, heads = script.requests[4].statements
    assert lock.params == relock.params == {"thread_ids": ["t1"]}
    assert tombstone.fetch
    assert delete.params == {
        "thread_ids": ["t1"], "keep_threads": ["t1", "t1"], "keep_ns": ["", ""],
        "keep_ids": ["c2", "c1"],
        # only checkpoints older than the latest the scan saw may go (a later one stays)
        "latest_threads": ["t1"], "latest_ns": [""], "latest_ids": ["c2"]}
    assert heads.params == {"thread_ids": ["t1"]}
    token = script.requests[1].args[0]
    assert list(script.requests[5].args) == [token, 17, ctx.ttl_ms, ""]
