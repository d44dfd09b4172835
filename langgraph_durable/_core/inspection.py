"""Read-only queries for operators (the CLI, notebooks), written as sans-I/O operations.

Nothing here writes. Each statement is a template with a ``{schema}`` placeholder,
rendered with `langgraph_durable._core.sql.render`; every operation yields `Cold`
requests and is run by the engine (``saver.engine``), e.g. `Engine.thread_summaries`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from langgraph_durable._core.requests import Cold, Op, Statement
from langgraph_durable._core.sql import render

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


@dataclass(frozen=True, slots=True)
class ThreadSummary:
    """One thread as Postgres holds it.

    Attributes:
        thread_id: the thread.
        checkpoints: checkpoints in every namespace.
        namespaces: distinct checkpoint namespaces (1 without subgraphs).
        last_update: when its newest checkpoint was stored.
        bytes: payload bytes of its checkpoints, blobs and pending writes.
    """

    thread_id: str
    checkpoints: int
    namespaces: int
    last_update: datetime
    bytes: int


@dataclass(frozen=True, slots=True)
class CheckpointSize:
    """When a checkpoint was stored and the bytes it added to Postgres.

    Attributes:
        checkpoint_ns: its namespace.
        checkpoint_id: its id.
        created_at: when Postgres stored it.
        checkpoint_bytes: its frame and metadata.
        blob_bytes: the channel values it introduced.
        write_bytes: its pending writes.
    """

    checkpoint_ns: str
    checkpoint_id: str
    created_at: datetime
    checkpoint_bytes: int
    blob_bytes: int
    write_bytes: int

    @property
    def total(self) -> int:
        """Every byte the checkpoint added."""
        return self.checkpoint_bytes + self.blob_bytes + self.write_bytes


def thread_summaries(
    schema: str,
    *,
    thread_ids: Sequence[str] | None = None,
    metadata: Mapping[str, Any] | None = None,
    limit: int = 50,
) -> Op[tuple[int, list[ThreadSummary]]]:
    """The schema's thread count and up to ``limit`` threads, most recently active first;
    with ``metadata``, only (and the count of) the threads with a checkpoint whose metadata
    contains it, as ``list(filter=metadata)`` matches."""
    pattern = json.dumps(dict(metadata)) if metadata else None
    count_rows, rows = yield Cold(
        (
            Statement(render(THREAD_COUNT_SQL, schema), {"metadata": pattern}, fetch=True),
            Statement(
                render(THREAD_SUMMARY_SQL, schema),
                {
                    "thread_ids": list(thread_ids) if thread_ids is not None else None,
                    "metadata": pattern,
                    "limit": limit,
                },
                fetch=True,
            ),
        )
    )
    summaries = [
        ThreadSummary(
            r["thread_id"],
            int(r["checkpoints"]),
            int(r["namespaces"]),
            r["last_update"],
            int(r["bytes"]),
        )
        for r in rows
    ]
    return int(count_rows[0]["threads"]), summaries


def checkpoint_sizes(
    schema: str, thread_id: str, *, checkpoint_ns: str | None = None, limit: int | None = None
) -> Op[list[CheckpointSize]]:
    """The bytes each checkpoint of a thread added, newest first."""
    rows = (
        yield Cold.one(
            render(CHECKPOINT_SIZES_SQL, schema),
            {
                "thread_id": thread_id,
                "checkpoint_ns": checkpoint_ns,
                "limit": limit,
            },
            fetch=True,
        )
    )[0]
    return [
        CheckpointSize(
            r["checkpoint_ns"],
            r["checkpoint_id"],
            r["created_at"],
            int(r["checkpoint_bytes"]),
            int(r["blob_bytes"]),
            int(r["write_bytes"]),
        )
        for r in rows
    ]


def match_checkpoint(
    schema: str, thread_id: str, checkpoint_ns: str, fragment: str
) -> Op[list[str]]:
    """Ids of the thread's checkpoints containing ``fragment`` (at most 10, newest first)."""
    escaped = fragment.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    rows = (
        yield Cold.one(
            render(MATCH_CHECKPOINT_SQL, schema),
            {
                "thread_id": thread_id,
                "checkpoint_ns": checkpoint_ns,
                "pattern": f"%{escaped}%",
            },
            fetch=True,
        )
    )[0]
    return [str(r["checkpoint_id"]) for r in rows]
