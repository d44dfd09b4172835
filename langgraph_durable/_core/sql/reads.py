"""Statements that read checkpoints: tuples (latest, by id, a list) and delta chains."""

from __future__ import annotations

# One tuple row per checkpoint: the checkpoint, its blobs and its pending writes, in a
# single round trip. The checkpoints are picked first (by primary key, with the order and
# limit applied to keys alone), and only those get the two LATERAL aggregates, so a read
# costs the same on a thread of 10 or of 10,000 checkpoints. {pick} is the picking query.
_SELECT_TUPLES = """
WITH picked AS ({pick})
SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id, c.parent_checkpoint_id,
       c.checkpoint, c.metadata::text AS metadata,  -- decoded once, and re-used to warm
       bl.channels AS blob_channels, bl.versions AS blob_versions, bl.blobs AS blobs,
       wr.task_ids AS write_task_ids, wr.idxs AS write_idxs, wr.channels AS write_channels,
       wr.paths AS write_paths, wr.blobs AS write_blobs,
       -- the namespace's version in the same snapshot (a warm knows how new it is)
       h.version
FROM picked p
JOIN {{schema}}.lgd_checkpoints c USING (thread_id, checkpoint_ns, checkpoint_id)
LEFT JOIN {{schema}}.lgd_heads h
  ON h.thread_id = c.thread_id AND h.checkpoint_ns = c.checkpoint_ns
LEFT JOIN LATERAL (
    SELECT array_agg(v.key) AS channels, array_agg(v.value) AS versions,
           array_agg(b.blob) AS blobs
    FROM jsonb_each_text(c.channel_versions) v
    CROSS JOIN LATERAL (
        -- one primary-key lookup per channel: LIMIT 1 (the key is unique) keeps the
        -- planner from turning this into a hash of every blob of the thread
        SELECT b.blob FROM {{schema}}.lgd_blobs b
        WHERE b.thread_id = c.thread_id AND b.checkpoint_ns = c.checkpoint_ns
          AND b.channel = v.key AND b.version = v.value
        LIMIT 1
    ) b
) bl ON true
LEFT JOIN LATERAL (
    SELECT array_agg(w.task_id) AS task_ids, array_agg(w.idx) AS idxs,
           array_agg(w.channel) AS channels, array_agg(w.task_path) AS paths,
           array_agg(w.blob) AS blobs
    FROM {{schema}}.lgd_writes w
    WHERE w.thread_id = c.thread_id AND w.checkpoint_ns = c.checkpoint_ns
      AND w.checkpoint_id = c.checkpoint_id
) wr ON true
ORDER BY c.checkpoint_id DESC
"""
_PICK = """SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id
    FROM {{schema}}.lgd_checkpoints c {where}
    ORDER BY c.checkpoint_id DESC{limit}"""


def _tuples(where: str, limit: str = "") -> str:
    return _SELECT_TUPLES.format(pick=_PICK.format(where=where, limit=limit))


# %(thread_id)s, %(checkpoint_ns)s
GET_LATEST_SQL = _tuples(
    "WHERE c.thread_id = %(thread_id)s AND c.checkpoint_ns = %(checkpoint_ns)s", " LIMIT 1"
)

# %(thread_id)s, %(checkpoint_ns)s, %(checkpoint_id)s
GET_BY_ID_SQL = _tuples(
    "WHERE c.thread_id = %(thread_id)s AND c.checkpoint_ns = %(checkpoint_ns)s "
    "AND c.checkpoint_id = %(checkpoint_id)s"
)

# list(): only the conditions a call needs are rendered, so the planner always sees plain
# index conditions (an "x IS NULL OR" form defeats the primary key under generic plans).
# The picking query for a thread's history renders as:
#   WHERE c.thread_id = %(thread_id)s AND c.checkpoint_ns = %(checkpoint_ns)s
#   AND c.checkpoint_id < %(before)s ORDER BY c.checkpoint_id DESC LIMIT %(limit)s
LIST_CONDITIONS = {
    "thread_id": "c.thread_id = %(thread_id)s",
    "checkpoint_ns": "c.checkpoint_ns = %(checkpoint_ns)s",
    "checkpoint_id": "c.checkpoint_id = %(checkpoint_id)s",
    "before": "c.checkpoint_id < %(before)s",
    "filter": "c.metadata @> %(filter)s::jsonb",
}


def list_template(present: frozenset[str], limited: bool) -> str:
    """The list query for the parameters that are set (keys of `LIST_CONDITIONS`)."""
    where = [cond for name, cond in LIST_CONDITIONS.items() if name in present]
    return _tuples(
        "WHERE " + " AND ".join(where) if where else "", " LIMIT %(limit)s" if limited else ""
    )

# The parent chain above a checkpoint (excluding it), nearest first, with the channel
# versions of the requested channels and which of them have a stored value.
# %(thread_id)s %(checkpoint_ns)s %(checkpoint_id)s %(channels)s
DELTA_CHAIN_SQL = """
WITH RECURSIVE chain AS (
    SELECT c.checkpoint_id, c.parent_checkpoint_id, c.channel_versions, 0 AS depth
    FROM {schema}.lgd_checkpoints c
    WHERE c.thread_id = %(thread_id)s AND c.checkpoint_ns = %(checkpoint_ns)s
      AND c.checkpoint_id = (
        SELECT t.parent_checkpoint_id FROM {schema}.lgd_checkpoints t
        WHERE t.thread_id = %(thread_id)s AND t.checkpoint_ns = %(checkpoint_ns)s
          AND t.checkpoint_id = %(checkpoint_id)s)
    UNION ALL
    SELECT c.checkpoint_id, c.parent_checkpoint_id, c.channel_versions, chain.depth + 1
    FROM chain JOIN {schema}.lgd_checkpoints c
      ON c.thread_id = %(thread_id)s AND c.checkpoint_ns = %(checkpoint_ns)s
     AND c.checkpoint_id = chain.parent_checkpoint_id
)
SELECT chain.checkpoint_id,
       ARRAY(SELECT ch FROM unnest(%(channels)s::text[]) ch
             CROSS JOIN LATERAL (
                 SELECT 1 FROM {schema}.lgd_blobs b  -- a key lookup each (see _SELECT_TUPLES)
                 WHERE b.thread_id = %(thread_id)s AND b.checkpoint_ns = %(checkpoint_ns)s
                   AND b.channel = ch AND b.version = chain.channel_versions ->> ch LIMIT 1) b
       ) AS stored
FROM chain ORDER BY chain.depth
"""

# The writes of some checkpoints on some channels, and the seed blobs.
# %(thread_id)s %(checkpoint_ns)s %(checkpoint_ids)s %(channels)s
DELTA_WRITES_SQL = """
SELECT w.checkpoint_id, w.task_id, w.idx, w.channel, w.task_path, w.blob
FROM {schema}.lgd_writes w
WHERE w.thread_id = %(thread_id)s AND w.checkpoint_ns = %(checkpoint_ns)s
  AND w.checkpoint_id = ANY(%(checkpoint_ids)s) AND w.channel = ANY(%(channels)s)
"""

# %(thread_id)s %(checkpoint_ns)s %(seed_ids)s %(seed_channels)s (aligned arrays)
DELTA_SEEDS_SQL = """
SELECT s.channel, b.version, b.blob
FROM unnest(%(seed_ids)s::text[], %(seed_channels)s::text[]) AS s(checkpoint_id, channel)
JOIN {schema}.lgd_checkpoints c
  ON c.thread_id = %(thread_id)s AND c.checkpoint_ns = %(checkpoint_ns)s
 AND c.checkpoint_id = s.checkpoint_id
JOIN {schema}.lgd_blobs b
  ON b.thread_id = %(thread_id)s AND b.checkpoint_ns = %(checkpoint_ns)s
 AND b.channel = s.channel AND b.version = c.channel_versions ->> s.channel
"""

