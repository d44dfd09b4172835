"""Statements of the write-behind flush: one per table for a whole batch."""

from __future__ import annotations

from psycopg import sql

from langgraph_durable._core.sql.parts import CHECKPOINT_CONFLICT, NEXT_VERSION

# Whether Postgres answers at all: a drain asks it while another flusher's entries do not
# move (`journal.flushing.flush`).
ANSWERS_SQL = sql.SQL("SELECT 1")

# Write-behind flush: one statement per table for a whole batch, in one transaction.
# Each takes aligned arrays, one element per row; a batch holds each key at most once.
#
# Rows of a deleted history are left out: a checkpoint no newer than the newest one the
# thread's last delete removed (`lgd_deleted.through`; checkpoint ids grow with time), and
# the blobs and head that came with it. A delete drains the journal first, so such rows
# come from a batch whose flusher stalled (a paused process) past `reclaim_after` while a
# drain took its entries over, committed them and let the delete pass: committed late,
# they would bring the deleted thread back.
_OF_DELETED = """EXISTS (
    SELECT 1 FROM {schema}.lgd_deleted d WHERE d.thread_id = x.t AND {checkpoint} <= d.through)"""

# %(thread_ids)s %(namespaces)s %(channels)s %(versions)s %(blobs)s %(checkpoint_ids)s (the
# checkpoint each blob came with)
FLUSH_BLOBS_SQL = """
INSERT INTO {schema}.lgd_blobs (thread_id, checkpoint_ns, channel, version, blob)
SELECT x.t, x.n, x.channel, x.version, x.blob
FROM unnest(%(thread_ids)b::text[], %(namespaces)b::text[], %(channels)b::text[],
            %(versions)b::text[], %(blobs)b::bytea[], %(checkpoint_ids)b::text[])
    AS x(t, n, channel, version, blob, c)
WHERE NOT """ + _OF_DELETED.replace("{checkpoint}", "x.c") + """
ON CONFLICT (thread_id, checkpoint_ns, channel, version) DO NOTHING
"""

# %(thread_ids)s %(namespaces)s %(checkpoint_ids)s %(parent_ids)s %(run_ids)s
# %(checkpoints)s %(channel_versions)s %(metadata)s
FLUSH_CHECKPOINTS_SQL = (
    """
INSERT INTO {schema}.lgd_checkpoints (thread_id, checkpoint_ns, checkpoint_id,
    parent_checkpoint_id, run_id, checkpoint, channel_versions, metadata)
SELECT x.t, x.n, x.i, x.p, x.r, x.c, x.v::jsonb, x.m::jsonb
FROM unnest(%(thread_ids)b::text[], %(namespaces)b::text[], %(checkpoint_ids)b::text[],
            %(parent_ids)b::text[], %(run_ids)b::text[], %(checkpoints)b::bytea[],
            %(channel_versions)b::text[], %(metadata)b::text[]) AS x(t, n, i, p, r, c, v, m)
WHERE NOT """ + _OF_DELETED.replace("{checkpoint}", "x.i") + """
"""
    + CHECKPOINT_CONFLICT
)

# Every namespace a flush batch touches gets a new version (and its newest checkpoint as
# head); returned so Redis can refuse copies read before the flush.
# %(thread_ids)s %(namespaces)s %(heads)s (one element per namespace; head may be NULL)
FLUSH_HEADS_SQL = (
    """
INSERT INTO {schema}.lgd_heads AS h (thread_id, checkpoint_ns, head, version)
SELECT x.t, x.n, x.head, """
    + NEXT_VERSION
    + """
FROM unnest(%(thread_ids)b::text[], %(namespaces)b::text[], %(heads)b::text[]) AS x(t, n, head)
-- a namespace of writes alone gets a row only if some were stored (see _FLUSH_WRITES)
WHERE CASE WHEN x.head IS NULL THEN EXISTS (
    SELECT 1 FROM {schema}.lgd_writes w WHERE w.thread_id = x.t AND w.checkpoint_ns = x.n)
    ELSE NOT """ + _OF_DELETED.replace("{checkpoint}", "x.head") + """ END
ON CONFLICT (thread_id, checkpoint_ns) DO UPDATE SET
    head = GREATEST(h.head, EXCLUDED.head), version = """ + NEXT_VERSION + """, written_at = now()
RETURNING h.thread_id, h.checkpoint_ns, h.version
"""
)

# %(thread_ids)s %(namespaces)s %(checkpoint_ids)s %(task_ids)s %(idxs)s %(channels)s
# %(task_paths)s %(blobs)s; {conflict} is DO NOTHING (ordinary) or DO UPDATE (special).
# Writes of a deleted history are left out (as `_DELETED` tells, here per row; the batch's
# checkpoints are stored by then): Redis sends them through Postgres, which refuses them,
# unless it lost the thread's tombstone.
_FLUSH_WRITES = """
INSERT INTO {{schema}}.lgd_writes (thread_id, checkpoint_ns, checkpoint_id, task_id, idx,
    channel, task_path, blob)
SELECT x.* FROM unnest(%(thread_ids)b::text[], %(namespaces)b::text[],
    %(checkpoint_ids)b::text[], %(task_ids)b::text[], %(idxs)b::int[], %(channels)b::text[],
    %(task_paths)b::text[], %(blobs)b::bytea[]) AS x(t, n, c, task, idx, channel, path, blob)
WHERE NOT EXISTS (
    SELECT 1 FROM {{schema}}.lgd_deleted d
    WHERE d.thread_id = x.t AND x.c <= d.through AND NOT EXISTS (
        SELECT 1 FROM {{schema}}.lgd_checkpoints k
        WHERE k.thread_id = x.t AND k.checkpoint_ns = x.n AND k.checkpoint_id = x.c))
ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id, task_id, idx) {conflict}
"""
FLUSH_WRITES_SQL = _FLUSH_WRITES.format(conflict="DO NOTHING")
FLUSH_SPECIAL_WRITES_SQL = _FLUSH_WRITES.format(
    conflict="DO UPDATE SET channel = EXCLUDED.channel, task_path = EXCLUDED.task_path, "
    "blob = EXCLUDED.blob"
)

