"""The flush policy: which rows of a batch of entries go to Postgres, deduplicated by
primary key, and the statements that write them."""

from __future__ import annotations

import json
from typing import Any

from langgraph_durable._core.context import Context
from langgraph_durable._core.journal.entries import Entry
from langgraph_durable._core.requests import Statement


class _Batch:
    """Rows of one flush transaction, deduplicated by primary key as Postgres requires."""

    def __init__(self) -> None:
        # (thread, namespace, channel, version) -> (blob, the checkpoint it came with)
        self.blobs: dict[tuple[str, str, str, str], tuple[bytes, str]] = {}
        self.checkpoints: dict[tuple[str, str, str], list[Any]] = {}
        self.writes: dict[tuple[str, str, str, str, int], list[Any]] = {}
        self.special: dict[tuple[str, str, str, str, int], list[Any]] = {}
        # every namespace the batch touches -> its newest checkpoint id ("" if none)
        self.heads: dict[tuple[str, str], str] = {}

    def add_checkpoint(self, e: Entry) -> None:
        _, t, ns, cid, parent, run_id, frame, versions, metadata, blobs = e.body
        for channel, version, blob in blobs:
            self.blobs.setdefault((t, ns, channel, version), (blob, cid))
        self.checkpoints[(t, ns, cid)] = [t, ns, cid, parent, run_id, frame, versions, metadata]
        self.heads[(t, ns)] = max(self.heads.get((t, ns), ""), cid)

    def add_blobs_only(self, e: Entry) -> None:
        _, t, ns, cid, _, _, _, _, _, blobs = e.body
        for channel, version, blob in blobs:
            self.blobs.setdefault((t, ns, channel, version), (blob, cid))

    def add_writes(self, e: Entry) -> None:
        _, t, ns, cid, writes = e.body
        self.heads.setdefault((t, ns), "")
        for task_id, idx, channel, task_path, frame in writes:
            key = (t, ns, cid, task_id, idx)
            row = [t, ns, cid, task_id, idx, channel, task_path, frame]
            if idx < 0:
                self.special[key] = row  # replaces: the last entry wins
            else:
                self.writes.setdefault(key, row)  # first write wins

    def statements(self, ctx: Context) -> tuple[Statement, ...]:
        st = ctx.statements
        out = []
        if self.blobs:
            keys, stored = list(self.blobs), list(self.blobs.values())
            out.append(
                Statement(
                    st.flush_blobs_sql,
                    {
                        "thread_ids": [k[0] for k in keys],
                        "namespaces": [k[1] for k in keys],
                        "channels": [k[2] for k in keys],
                        "versions": [k[3] for k in keys],
                        "blobs": [b for b, _ in stored],
                        "checkpoint_ids": [c for _, c in stored],
                    },
                )
            )
        if self.checkpoints:
            rows = list(self.checkpoints.values())
            names = (
                "thread_ids",
                "namespaces",
                "checkpoint_ids",
                "parent_ids",
                "run_ids",
                "checkpoints",
                "channel_versions",
                "metadata",
            )
            out.append(
                Statement(
                    st.flush_checkpoints_sql, {n: [r[i] for r in rows] for i, n in enumerate(names)}
                )
            )
        names = (
            "thread_ids",
            "namespaces",
            "checkpoint_ids",
            "task_ids",
            "idxs",
            "channels",
            "task_paths",
            "blobs",
        )
        for rows_by_key, query in (
            (self.writes, st.flush_writes_sql),
            (self.special, st.flush_special_writes_sql),
        ):
            if rows_by_key:
                rows = list(rows_by_key.values())
                out.append(Statement(query, {n: [r[i] for r in rows] for i, n in enumerate(names)}))
        if self.heads:
            spaces = sorted(self.heads)  # one lock order for concurrent flushers
            out.append(
                Statement(
                    st.flush_heads_sql,
                    {
                        "thread_ids": [k[0] for k in spaces],
                        "namespaces": [k[1] for k in spaces],
                        "heads": [self.heads[k] or None for k in spaces],
                    },
                    fetch=True,
                )
            )
        return tuple(out)


CheckpointKey = tuple[str, str, str]  # (thread, namespace, checkpoint id)


def _latest_kept(entries: list[Entry]) -> set[CheckpointKey]:
    """The checkpoints the ``latest`` policy flushes: the newest of each thread and
    namespace in the batch, and every checkpoint of the batch a kept one's `DeltaChannel`
    value is rebuilt from. A checkpoint's metadata counts what happened since each delta
    channel's last snapshot (``counters_since_delta_snapshot``, whose largest count is
    the checkpoints since it, so the last of them holds the snapshot); its parents that far
    up are kept too."""
    parents: dict[CheckpointKey, str | None] = {}
    depth: dict[CheckpointKey, int] = {}
    newest: dict[tuple[str, str], str] = {}
    for e in entries:
        if e.kind != "c":
            continue
        key = (e.thread_id, e.ns, e.checkpoint_id)
        parents[key] = e.body[4]
        newest[key[:2]] = max(newest.get(key[:2], ""), e.checkpoint_id)
        try:
            counters = json.loads(e.body[8]).get("counters_since_delta_snapshot") or {}
            counts = [c for v in counters.values() for c in (v if isinstance(v, list) else [v])]
            depth[key] = max((int(c) for c in counts), default=0)
        except (ValueError, TypeError, AttributeError):
            depth[key] = len(entries)  # unreadable: keep every ancestor in the batch
    kept = {(t, ns, cid) for (t, ns), cid in newest.items()}
    todo = list(kept)
    while todo:
        t, ns, cid = todo.pop()
        parent = parents[(t, ns, cid)]
        for _ in range(depth[(t, ns, cid)]):
            if parent is None or (t, ns, parent) not in parents:
                break
            if (t, ns, parent) not in kept:
                kept.add((t, ns, parent))
                todo.append((t, ns, parent))
            parent = parents[(t, ns, parent)]
    return kept


def plan(ctx: Context, entries: list[Entry]) -> _Batch:
    """Apply the flush policy: ``all`` keeps every checkpoint; ``latest`` keeps, per thread
    and namespace, the newest checkpoint of the batch (every blob, so it stays whole) and
    the ones a `DeltaChannel` rebuilds its value from (`_latest_kept`), and drops the
    writes of the checkpoints it skipped."""
    batch = _Batch()
    entries = sorted(entries, key=lambda e: e.order)
    skipped: set[CheckpointKey] = set()
    if ctx.config.flush_policy == "latest":
        kept = _latest_kept(entries)
        skipped = {
            (e.thread_id, e.ns, e.checkpoint_id)
            for e in entries
            if e.kind == "c" and (e.thread_id, e.ns, e.checkpoint_id) not in kept
        }
    for e in entries:
        if e.kind == "c":
            if (e.thread_id, e.ns, e.checkpoint_id) in skipped:
                batch.add_blobs_only(e)
            else:
                batch.add_checkpoint(e)
        elif (e.thread_id, e.ns, e.checkpoint_id) not in skipped:
            batch.add_writes(e)
    return batch
