"""Read-only statements for operators (`_core.inspection`: the CLI, notebooks)."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from psycopg import sql

from langgraph_durable._core.sql.render import Rendered

# One row per thread, newest activity first: checkpoints, namespaces, the last checkpoint's
# time, and the bytes the thread holds (checkpoint frames, metadata, blobs, writes). The
# page of threads is picked first, so blobs and writes are summed for that page only
# (index lookups on the primary keys' leading thread_id). With a metadata pattern, only the
# threads with a checkpoint whose metadata contains it (``list(filter=)``'s ``@>``).
# %(thread_ids)s text[] or NULL for every thread, %(metadata)s jsonb or NULL, %(limit)s int
THREAD_SUMMARY_SQL = """
WITH page AS (
    SELECT thread_id, count(*) AS checkpoints, count(DISTINCT checkpoint_ns) AS namespaces,
           max(created_at) AS last_update,
           sum(octet_length(checkpoint) + octet_length(metadata::text)) AS checkpoint_bytes
    FROM {schema}.lgd_checkpoints
    WHERE (%(thread_ids)s::text[] IS NULL OR thread_id = ANY(%(thread_ids)s::text[]))
      AND (%(metadata)s::jsonb IS NULL OR thread_id IN (
          SELECT m.thread_id FROM {schema}.lgd_checkpoints m
          WHERE m.metadata @> %(metadata)s::jsonb))
    GROUP BY thread_id
    ORDER BY max(created_at) DESC, thread_id
    LIMIT %(limit)s
)
SELECT p.thread_id, p.checkpoints, p.namespaces, p.last_update,
       p.checkpoint_bytes
       + coalesce((SELECT sum(octet_length(b.blob)) FROM {schema}.lgd_blobs b
                   WHERE b.thread_id = p.thread_id), 0)
       + coalesce((SELECT sum(octet_length(w.blob)) FROM {schema}.lgd_writes w
                   WHERE w.thread_id = p.thread_id), 0) AS bytes
FROM page p
ORDER BY p.last_update DESC, p.thread_id
"""

# How many threads the schema holds (with a checkpoint whose metadata contains a pattern).
# %(metadata)s jsonb or NULL
THREAD_COUNT_SQL = """
SELECT count(DISTINCT thread_id) AS threads FROM {schema}.lgd_checkpoints
WHERE %(metadata)s::jsonb IS NULL OR metadata @> %(metadata)s::jsonb
"""

# Per checkpoint of one thread, newest first: when it was stored and the bytes it added:
# its frame and metadata, the blobs of the channel versions it introduced (those its
# parent does not reference), and its pending writes.
# %(thread_id)s, %(checkpoint_ns)s text or NULL for every namespace, %(limit)s int or NULL
CHECKPOINT_SIZES_SQL = """
SELECT c.checkpoint_ns, c.checkpoint_id, c.created_at,
       octet_length(c.checkpoint) + octet_length(c.metadata::text) AS checkpoint_bytes,
       coalesce((SELECT sum(octet_length(b.blob))
                 FROM jsonb_each_text(c.channel_versions) v
                 JOIN {schema}.lgd_blobs b
                   ON b.thread_id = c.thread_id AND b.checkpoint_ns = c.checkpoint_ns
                  AND b.channel = v.key AND b.version = v.value
                 WHERE p.channel_versions IS NULL
                    OR (p.channel_versions ->> v.key) IS DISTINCT FROM v.value), 0) AS blob_bytes,
       coalesce((SELECT sum(octet_length(w.blob)) FROM {schema}.lgd_writes w
                 WHERE w.thread_id = c.thread_id AND w.checkpoint_ns = c.checkpoint_ns
                   AND w.checkpoint_id = c.checkpoint_id), 0) AS write_bytes
FROM {schema}.lgd_checkpoints c
LEFT JOIN {schema}.lgd_checkpoints p
  ON p.thread_id = c.thread_id AND p.checkpoint_ns = c.checkpoint_ns
 AND p.checkpoint_id = c.parent_checkpoint_id
WHERE c.thread_id = %(thread_id)s
  AND (%(checkpoint_ns)s::text IS NULL OR c.checkpoint_ns = %(checkpoint_ns)s)
ORDER BY c.checkpoint_id DESC
LIMIT %(limit)s
"""

# Ids of one thread's checkpoints whose id contains a fragment, newest first.
# %(thread_id)s, %(checkpoint_ns)s, %(pattern)s (a LIKE pattern, escaped by the caller)
MATCH_CHECKPOINT_SQL = """
SELECT checkpoint_id FROM {schema}.lgd_checkpoints
WHERE thread_id = %(thread_id)s AND checkpoint_ns = %(checkpoint_ns)s
  AND checkpoint_id LIKE %(pattern)s
ORDER BY checkpoint_id DESC
LIMIT 10
"""


@dataclass(frozen=True, slots=True, init=False, eq=False)
class InspectionStatements(Rendered):
    """The operators' statements rendered for one schema."""

    TEMPLATES: ClassVar[Mapping[str, str]] = {
        "thread_summary": THREAD_SUMMARY_SQL,
        "thread_count": THREAD_COUNT_SQL,
        "checkpoint_sizes": CHECKPOINT_SIZES_SQL,
        "match_checkpoint": MATCH_CHECKPOINT_SQL,
    }

    thread_summary: sql.SQL
    thread_count: sql.SQL
    checkpoint_sizes: sql.SQL
    match_checkpoint: sql.SQL


# Every statement rendered for a schema, once per schema.
statements = functools.lru_cache(maxsize=64)(InspectionStatements)
