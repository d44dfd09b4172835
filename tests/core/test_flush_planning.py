"""The write-behind flush: which rows one batch writes to Postgres, and what it acknowledges."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from langgraph_durable._core import journal
from langgraph_durable._core.context import Context
from langgraph_durable._core.journal.entries import decode
from langgraph_durable._core.journal.policy import plan
from langgraph_durable._core.keys import Layout, ThreadKeys
from langgraph_durable._core.records import Location, StoredCheckpoint, StoredWrite
from tests.core.script import Script, cold, hot

THREAD = "thread-1"


def _checkpoint(cid: str, parent: str | None, version: str, ns: str = "") -> StoredCheckpoint:
    return StoredCheckpoint(
        where=Location(THREAD, ns, None), checkpoint_id=cid, parent_id=parent, run_id="run",
        frame=f"frame-{cid}".encode(), metadata="{}", channel_versions=f'{{"x": "{version}"}}',
        blobs=[("x", version, f"blob-{version}".encode())],
    )


def _writes(cid: str, *writes: tuple[int, str, bytes], ns: str = "") -> bytes:
    stored = [StoredWrite("task", idx, channel, "", frame) for idx, channel, frame in writes]
    return journal.pack_writes_entry(Location(THREAD, ns, cid), stored)


def _raw(*payloads: bytes) -> list[Any]:
    """The stream entries as the flush_read script returns them: ``[id, [b"d", payload]]``."""
    return [[f"{i + 1}-0".encode(), [b"d", p]] for i, p in enumerate(payloads)]


def _entries(*payloads: bytes) -> list[journal.Entry]:
    return [decode(r) for r in _raw(*payloads)]


def _rows(statement: Any) -> list[tuple[Any, ...]]:
    """A flush statement's parameter arrays, zipped back into rows."""
    return list(zip(*statement.params.values(), strict=True))


def test_flush_batch_writes_one_transaction_then_acks_every_entry(ctx: Context) -> None:
    """flush_batch: read a batch through the consumer group (bounded by entries and bytes,
    forgetting consumers idle ten reclaim periods), write blobs, checkpoints, writes and
    each namespace's new head in one transaction, then ack each entry with its thread's
    unflushed member and payload bytes (for the journal's byte counter), none rejected,
    and raise each namespace's hot version to the one the flush committed; returns how many
    entries it moved."""
    payloads = (journal.pack_checkpoint_entry(_checkpoint("c1", None, "1")),
                journal.pack_checkpoint_entry(_checkpoint("c2", "c1", "2")),
                _writes("c2", (0, "x", b"w0")))
    st, layout = ctx.statements, Layout("t")
    script = Script([
        (hot("flush_read", [layout.journal(0)]), _raw(*payloads)),
        (cold(st.flush_blobs_sql, st.flush_checkpoints_sql, st.flush_writes_sql,
              st.flush_heads_sql),
         [None, None, None, [{"thread_id": THREAD, "checkpoint_ns": "", "version": 42}]]),
        (hot("flush_ack", [layout.journal(0), layout.dead(0), layout.journal_bytes(0)]), 3),
    ])
    assert script.run(journal.flush_batch(ctx)) == 3
    assert script.done
    assert list(script.requests[0].args) == [
        journal.GROUP, "host:1:c", 256, 10_000, 32 * 1024 * 1024, 10 * 10_000]
    blobs, checkpoints, writes, heads = script.requests[1].statements
    assert [r[:4] for r in _rows(blobs)] == [(THREAD, "", "x", "1"), (THREAD, "", "x", "2")]
    assert [r[2] for r in _rows(checkpoints)] == ["c1", "c2"]
    assert [r[2:5] for r in _rows(writes)] == [("c2", "task", 0)]
    assert heads.fetch and _rows(heads) == [(THREAD, "", "c2")]
    keys = ThreadKeys("t", THREAD)
    sizes = [len(p) for p in payloads]
    assert list(script.requests[2].args) == [
        journal.GROUP, ctx.ttl_ms, 3, 0,
        "1-0", keys.unflushed, keys.unflushed_member("", "c1"), keys.registry, sizes[0],
        "2-0", keys.unflushed, keys.unflushed_member("", "c2"), keys.registry, sizes[1],
        "3-0", keys.unflushed, keys.unflushed_member("", "c2"), keys.registry, sizes[2],
        keys.versions, keys.version_field(""), 42,
    ]


def test_an_empty_journal_costs_one_read(ctx: Context) -> None:
    """Nothing to flush: one read, no transaction, no ack, 0 moved."""
    script = Script([(hot("flush_read"), [])])
    assert script.run(journal.flush_batch(ctx)) == 0
    assert script.done


def test_latest_policy_keeps_the_newest_checkpoint_per_namespace_and_every_blob(
        make_ctx: Callable[..., Context]) -> None:
    """flush_policy="latest": per thread and namespace only the batch's newest checkpoint is
    written, with the blobs of the skipped ones (it may reference them) but without their
    writes; another namespace keeps its own newest, and each becomes its namespace's head."""
    ctx = make_ctx(flush_policy="latest")
    entries = _entries(
        journal.pack_checkpoint_entry(_checkpoint("c1", None, "1")),
        _writes("c1", (0, "x", b"old")),
        journal.pack_checkpoint_entry(_checkpoint("c2", "c1", "2")),
        _writes("c2", (0, "x", b"new")),
        journal.pack_checkpoint_entry(_checkpoint("s1", None, "1", ns="sub")),
    )
    blobs, checkpoints, writes, heads = plan(ctx, entries).statements(ctx)
    assert sorted(r[:4] for r in _rows(blobs)) == [
        (THREAD, "", "x", "1"), (THREAD, "", "x", "2"), (THREAD, "sub", "x", "1")]
    assert sorted((r[1], r[2]) for r in _rows(checkpoints)) == [("", "c2"), ("sub", "s1")]
    assert [(r[2], r[7]) for r in _rows(writes)] == [("c2", b"new")]
    assert _rows(heads) == [(THREAD, "", "c2"), (THREAD, "sub", "s1")]


def test_all_policy_keeps_every_checkpoint(make_ctx: Callable[..., Context]) -> None:
    """flush_policy="all": every checkpoint of the batch is written, in journal order; the
    namespace's head becomes the newest of them."""
    ctx = make_ctx(flush_policy="all")
    entries = _entries(journal.pack_checkpoint_entry(_checkpoint("c1", None, "1")),
                       journal.pack_checkpoint_entry(_checkpoint("c2", "c1", "2")))
    _, checkpoints, heads = plan(ctx, entries).statements(ctx)
    assert [r[2] for r in _rows(checkpoints)] == ["c1", "c2"]
    assert _rows(heads) == [(THREAD, "", "c2")]


def test_a_batch_dedupes_writes_first_wins_special_last_wins(ctx: Context) -> None:
    """Two entries for the same (task, idx): an ordinary write keeps the first (LangGraph's
    first-write-wins), a special one (idx < 0, e.g. an interrupt) the last. A batch of
    writes alone still versions its namespace, without naming a head."""
    entries = _entries(
        _writes("c1", (0, "x", b"first"), (-3, "__interrupt__", b"first-special")),
        _writes("c1", (0, "x", b"second"), (-3, "__interrupt__", b"second-special")),
    )
    st = ctx.statements
    writes, special, heads = plan(ctx, entries).statements(ctx)
    assert writes.query == st.flush_writes_sql and special.query == st.flush_special_writes_sql
    assert [r[7] for r in _rows(writes)] == [b"first"]
    assert [r[7] for r in _rows(special)] == [b"second-special"]
    assert heads.query == st.flush_heads_sql and _rows(heads) == [(THREAD, "", None)]


def test_entries_are_planned_in_stream_order_whatever_order_they_arrive_in(
        ctx: Context) -> None:
    """A reclaimed batch may list entries out of order; the plan sorts them by stream id,
    so the special write that wins is the one journaled last, not the one listed last."""
    entries = _entries(_writes("c1", (-3, "__interrupt__", b"journaled-first")),
                       _writes("c1", (-3, "__interrupt__", b"journaled-last")))
    special, _ = plan(ctx, list(reversed(entries))).statements(ctx)
    assert [r[7] for r in _rows(special)] == [b"journaled-last"]
