"""Statements that change whole threads: delete, delete for runs, copy, prune."""

from __future__ import annotations

from langgraph_durable._core.sql.parts import NEXT_VERSION

# %(thread_ids)s; records each thread's newest checkpoint id first (`_DELETED`).
DELETE_THREADS_SQL = """
WITH d AS (
    INSERT INTO {schema}.lgd_deleted AS d (thread_id, through)
    SELECT thread_id, max(checkpoint_id) FROM {schema}.lgd_checkpoints
    WHERE thread_id = ANY(%(thread_ids)s) GROUP BY thread_id
    ON CONFLICT (thread_id) DO UPDATE SET
        through = GREATEST(d.through, EXCLUDED.through), deleted_at = now()
),
     w AS (DELETE FROM {schema}.lgd_writes WHERE thread_id = ANY(%(thread_ids)s)),
     b AS (DELETE FROM {schema}.lgd_blobs WHERE thread_id = ANY(%(thread_ids)s)),
     h AS (DELETE FROM {schema}.lgd_heads WHERE thread_id = ANY(%(thread_ids)s))
DELETE FROM {schema}.lgd_checkpoints WHERE thread_id = ANY(%(thread_ids)s)
"""

# %(run_ids)s -> the threads that hold checkpoints of those runs
THREADS_OF_RUNS_SQL = """
SELECT DISTINCT thread_id FROM {schema}.lgd_checkpoints WHERE run_id = ANY(%(run_ids)s)
"""

# %(run_ids)s; blobs no remaining checkpoint of the thread refers to go too.
DELETE_FOR_RUNS_SQL = """
WITH gone AS (
    DELETE FROM {schema}.lgd_checkpoints WHERE run_id = ANY(%(run_ids)s)
    RETURNING thread_id, checkpoint_ns, checkpoint_id
)
DELETE FROM {schema}.lgd_writes w USING gone
WHERE w.thread_id = gone.thread_id AND w.checkpoint_ns = gone.checkpoint_ns
  AND w.checkpoint_id = gone.checkpoint_id
"""

# %(source)s %(target)s, %(up_to)s a checkpoint id or NULL: only the checkpoints whose id is
# not greater (the thread as it was when that one was stored) are copied, with the writes of
# the older ones; the writes made from that checkpoint on stay behind, so the copy runs on
# from it.
COPY_THREAD_SQL = """
WITH c AS (
    INSERT INTO {schema}.lgd_checkpoints (thread_id, checkpoint_ns, checkpoint_id,
        parent_checkpoint_id, run_id, checkpoint, channel_versions, metadata, created_at)
    SELECT %(target)s, checkpoint_ns, checkpoint_id, parent_checkpoint_id, run_id,
        checkpoint, channel_versions, metadata, created_at
    FROM {schema}.lgd_checkpoints
    WHERE thread_id = %(source)s AND (%(up_to)s::text IS NULL OR checkpoint_id <= %(up_to)s)
    ON CONFLICT DO NOTHING
), b AS (
    INSERT INTO {schema}.lgd_blobs (thread_id, checkpoint_ns, channel, version, blob)
    SELECT %(target)s, checkpoint_ns, channel, version, blob
    FROM {schema}.lgd_blobs WHERE thread_id = %(source)s
    ON CONFLICT DO NOTHING
)
INSERT INTO {schema}.lgd_writes (thread_id, checkpoint_ns, checkpoint_id, task_id, idx,
    channel, task_path, blob)
SELECT %(target)s, checkpoint_ns, checkpoint_id, task_id, idx, channel, task_path, blob
FROM {schema}.lgd_writes
WHERE thread_id = %(source)s AND (%(up_to)s::text IS NULL OR checkpoint_id < %(up_to)s)
ON CONFLICT DO NOTHING
"""

# copy_thread with sealed frames: the source's rows, read to be sealed again for the target
# (each frame is bound to its thread). %(source)s %(up_to)s (as in COPY_THREAD_SQL)
COPY_SOURCE_CHECKPOINTS_SQL = """
SELECT checkpoint_ns, checkpoint_id, parent_checkpoint_id, checkpoint
FROM {schema}.lgd_checkpoints
WHERE thread_id = %(source)s AND (%(up_to)s::text IS NULL OR checkpoint_id <= %(up_to)s)
"""
COPY_SOURCE_BLOBS_SQL = """
SELECT checkpoint_ns, channel, version, blob FROM {schema}.lgd_blobs WHERE thread_id = %(source)s
"""
COPY_SOURCE_WRITES_SQL = """
SELECT checkpoint_ns, checkpoint_id, task_id, idx, channel, task_path, blob
FROM {schema}.lgd_writes
WHERE thread_id = %(source)s AND (%(up_to)s::text IS NULL OR checkpoint_id < %(up_to)s)
"""

# The copy itself, every frame given (sealed for the target); other columns come from the
# source rows. %(source)s %(target)s, then aligned arrays: %(c_ns)s %(c_ids)s %(c_frames)s;
# %(b_ns)s %(b_channels)s %(b_versions)s %(b_frames)s; %(w_ns)s %(w_ids)s %(w_tasks)s
# %(w_idxs)s %(w_frames)s
COPY_THREAD_RESEALED_SQL = """
WITH c AS (
    INSERT INTO {schema}.lgd_checkpoints (thread_id, checkpoint_ns, checkpoint_id,
        parent_checkpoint_id, run_id, checkpoint, channel_versions, metadata, created_at)
    SELECT %(target)s, s.checkpoint_ns, s.checkpoint_id, s.parent_checkpoint_id, s.run_id,
        f.frame, s.channel_versions, s.metadata, s.created_at
    FROM unnest(%(c_ns)s::text[], %(c_ids)s::text[], %(c_frames)s::bytea[]) AS f(ns, id, frame)
    JOIN {schema}.lgd_checkpoints s
      ON s.thread_id = %(source)s AND s.checkpoint_ns = f.ns AND s.checkpoint_id = f.id
    ON CONFLICT DO NOTHING
), b AS (
    INSERT INTO {schema}.lgd_blobs (thread_id, checkpoint_ns, channel, version, blob)
    SELECT %(target)s, f.ns, f.channel, f.version, f.frame
    FROM unnest(%(b_ns)s::text[], %(b_channels)s::text[], %(b_versions)s::text[],
                %(b_frames)s::bytea[]) AS f(ns, channel, version, frame)
    ON CONFLICT DO NOTHING
)
INSERT INTO {schema}.lgd_writes (thread_id, checkpoint_ns, checkpoint_id, task_id, idx,
    channel, task_path, blob)
SELECT %(target)s, s.checkpoint_ns, s.checkpoint_id, s.task_id, s.idx, s.channel, s.task_path,
    f.frame
FROM unnest(%(w_ns)s::text[], %(w_ids)s::text[], %(w_tasks)s::text[], %(w_idxs)s::int[],
            %(w_frames)s::bytea[]) AS f(ns, id, task, idx, frame)
JOIN {schema}.lgd_writes s
  ON s.thread_id = %(source)s AND s.checkpoint_ns = f.ns AND s.checkpoint_id = f.id
 AND s.task_id = f.task AND s.idx = f.idx
ON CONFLICT DO NOTHING
"""

# For the rest of a transaction that reads or deletes many rows with per-row subqueries
# (prune's scan and delete): the planner's estimates for them (a set-returning function per
# row) pass the JIT threshold, and compiling costs seconds where running costs milliseconds.
NO_JIT_SQL = "SET LOCAL jit = off"

# First in a prune's or a delete's transaction: the threads' head rows, locked in one
# order. A write in flight on one of them finishes first (and the rebuilt heads then see
# its checkpoint, or the delete, in a snapshot of its own, deletes it too); a later one
# waits for the prune or the delete to commit (and, after a delete, finds its head row
# gone and stores nothing: see `PUT_CHECKPOINT_SQL`). Without it, a write that commits
# while the heads are rebuilt would have its head set back to the checkpoint before it,
# and one that commits while a delete runs would outlive it.
# %(thread_ids)s
LOCK_HEADS_SQL = """
SELECT 1 FROM {schema}.lgd_heads WHERE thread_id = ANY(%(thread_ids)s)
ORDER BY thread_id, checkpoint_ns FOR UPDATE
"""

# The shape of each thread's history, for prune: ids, parents, delta counters, and for
# each channel version whether a stored value (a snapshot or a plain value) exists.
# %(thread_ids)s
PRUNE_SCAN_SQL = """
SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id, c.parent_checkpoint_id,
       extract(epoch FROM now() - c.created_at)::float8 AS age,
       c.metadata -> 'counters_since_delta_snapshot' AS counters,
       ARRAY(SELECT v.key FROM jsonb_each_text(c.channel_versions) v
             CROSS JOIN LATERAL (
                 SELECT 1 FROM {schema}.lgd_blobs b  -- a key lookup each (see _SELECT_TUPLES)
                 WHERE b.thread_id = c.thread_id AND b.checkpoint_ns = c.checkpoint_ns
                   AND b.channel = v.key AND b.version = v.value LIMIT 1) b
       ) AS stored_channels
FROM {schema}.lgd_checkpoints c
WHERE c.thread_id = ANY(%(thread_ids)s)
"""

# Delete every checkpoint of the given threads not in the keep-list, its writes, and the
# blobs no kept checkpoint refers to. Only checkpoints older than the latest the scan saw
# of their namespace go: one a writer committed after the scan is newer, and stays.
# %(thread_ids)s %(keep_threads)s %(keep_ns)s %(keep_ids)s
# %(latest_threads)s %(latest_ns)s %(latest_ids)s (the latest of each namespace scanned)
PRUNE_DELETE_SQL = """
WITH keep AS (
    SELECT * FROM unnest(%(keep_threads)s::text[], %(keep_ns)s::text[], %(keep_ids)s::text[])
        AS k(thread_id, checkpoint_ns, checkpoint_id)
), latest AS (
    SELECT * FROM unnest(%(latest_threads)s::text[], %(latest_ns)s::text[],
                         %(latest_ids)s::text[]) AS l(thread_id, checkpoint_ns, checkpoint_id)
), gone AS (
    DELETE FROM {schema}.lgd_checkpoints c
    WHERE c.thread_id = ANY(%(thread_ids)s)
      AND EXISTS (SELECT 1 FROM latest WHERE latest.thread_id = c.thread_id
                  AND latest.checkpoint_ns = c.checkpoint_ns
                  AND c.checkpoint_id < latest.checkpoint_id)
      AND NOT EXISTS (SELECT 1 FROM keep WHERE keep.thread_id = c.thread_id
                      AND keep.checkpoint_ns = c.checkpoint_ns
                      AND keep.checkpoint_id = c.checkpoint_id)
    RETURNING c.thread_id, c.checkpoint_ns, c.checkpoint_id, octet_length(c.checkpoint) AS n
), gone_writes AS (
    DELETE FROM {schema}.lgd_writes w USING gone
    WHERE w.thread_id = gone.thread_id AND w.checkpoint_ns = gone.checkpoint_ns
      AND w.checkpoint_id = gone.checkpoint_id
    RETURNING octet_length(w.blob) AS n
)
SELECT (SELECT count(*) FROM gone) AS checkpoints, (SELECT count(*) FROM gone_writes) AS writes,
       (SELECT coalesce(sum(n), 0) FROM gone) + (SELECT coalesce(sum(n), 0) FROM gone_writes)
       AS bytes
"""

# Blobs of the given threads that no remaining checkpoint refers to; returns how many and
# their bytes. %(thread_ids)s
DELETE_ORPHAN_BLOBS_SQL = """
WITH gone AS (
    DELETE FROM {schema}.lgd_blobs b
    WHERE b.thread_id = ANY(%(thread_ids)s)
      AND NOT EXISTS (
        SELECT 1 FROM {schema}.lgd_checkpoints c
        WHERE c.thread_id = b.thread_id AND c.checkpoint_ns = b.checkpoint_ns
          AND c.channel_versions ->> b.channel = b.version)
    RETURNING octet_length(b.blob) AS n
)
SELECT count(*) AS blobs, coalesce(sum(n), 0) AS bytes FROM gone
"""
# A new version for a change to whole threads (delete, copy, prune, delete_for_runs):
# Redis keeps it as the threads' tombstone. Taken first in the transaction, so it is above
# every version before the change and below every one the change itself gives.
TOMBSTONE_SQL = "SELECT " + NEXT_VERSION + " AS version"

# First in a transaction that rebuilds heads (a prune, a copy, delete_for_runs, the cleanup
# of a put refused in a deleted history): no head row is written, and none is started,
# until it commits. The row locks of `LOCK_HEADS_SQL` hold only the rows their snapshot
# saw: a namespace's first write (a root put, a flush, writes first) that commits after
# them starts a row they do not hold, and a put extending it could then commit while the
# rebuild, whose snapshot saw the root but not the put, waits for its row and then sets
# the head back to the root (a second child of the root acknowledged: a fork). The table
# lock lets every write in flight finish first and holds the others until the commit;
# reads (and other row locks) go on. It is taken before any row lock, so it waits for no
# one who waits for it.
LOCK_HEADS_TABLE_SQL = "LOCK TABLE {schema}.lgd_heads IN SHARE ROW EXCLUSIVE MODE"

# First in a write that locks its head rows before it writes them (`hot.commit`, a write
# that bypassed Redis): the lock its head updates take anyway, taken before the row locks.
# A row lock needs less (`FOR UPDATE`: ROW SHARE), so without it the write could hold rows
# a heads rebuild (which holds `LOCK_HEADS_TABLE_SQL`) waits for, and then wait for that
# rebuild's table lock itself: a deadlock, which Postgres ends after a second by failing one.
LOCK_HEADS_FOR_WRITES_SQL = "LOCK TABLE {schema}.lgd_heads IN ROW EXCLUSIVE MODE"

# After a change to whole threads: every remaining namespace gets a new version and its
# newest checkpoint as head (delete_for_runs may have removed the head). %(thread_ids)s
REBUILD_HEADS_SQL = (
    """
WITH gone AS (
    DELETE FROM {schema}.lgd_heads h
    WHERE h.thread_id = ANY(%(thread_ids)s) AND NOT EXISTS (
        SELECT 1 FROM {schema}.lgd_checkpoints c
        WHERE c.thread_id = h.thread_id AND c.checkpoint_ns = h.checkpoint_ns)
)
INSERT INTO {schema}.lgd_heads AS h (thread_id, checkpoint_ns, head, version)
SELECT c.thread_id, c.checkpoint_ns, max(c.checkpoint_id), """
    + NEXT_VERSION
    + """
FROM {schema}.lgd_checkpoints c WHERE c.thread_id = ANY(%(thread_ids)s)
GROUP BY c.thread_id, c.checkpoint_ns
ON CONFLICT (thread_id, checkpoint_ns) DO UPDATE SET
    head = EXCLUDED.head, version = """ + NEXT_VERSION + """
"""
)

