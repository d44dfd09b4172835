"""The statements of retention sweeps (`_core.sweep`), and the migration they need.

Templates take a ``{schema}`` placeholder, rendered once per schema (`statements`);
parameters are named. Every duration is
compared with the database's clock (``now()``), never the caller's.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from psycopg import sql

from langgraph_durable._core.sql.ledger import RETIRE_LEDGER_ROWS
from langgraph_durable._core.sql.ledger import TABLE as LEDGER_TABLE
from langgraph_durable._core.sql.render import Rendered
from langgraph_durable._core.sql.schema import Migration

# Versions are shared with `_core/sql/schema.py` (1, 3) and the ledger's (2, 4).
RETENTION_MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        5,
        "last written time of each namespace, for retention",
        """
ALTER TABLE {schema}.lgd_heads ADD COLUMN written_at timestamptz NOT NULL DEFAULT now();
UPDATE {schema}.lgd_heads h SET written_at = c.at
FROM (SELECT thread_id, checkpoint_ns, max(created_at) AS at
      FROM {schema}.lgd_checkpoints GROUP BY thread_id, checkpoint_ns) c
WHERE c.thread_id = h.thread_id AND c.checkpoint_ns = h.checkpoint_ns;
""",
    ),
)

# A namespace is waiting at an interrupt when its head checkpoint holds an interrupt
# write. {t} is the thread id column of the enclosing query.
_INTERRUPTED = """EXISTS (
    SELECT 1 FROM {{schema}}.lgd_heads ih
    JOIN {{schema}}.lgd_writes iw ON iw.thread_id = ih.thread_id
     AND iw.checkpoint_ns = ih.checkpoint_ns AND iw.checkpoint_id = ih.head
    WHERE ih.thread_id = {t} AND iw.channel = '__interrupt__')"""

# One step of a sweep: the next threads after %(after)s (in id order, %(limit)s of them,
# read from the heads' primary key) and what the policies say of each:
# idle: no namespace written for %(max_idle)s seconds; interrupted: waiting at an
# interrupt; aged: holds a checkpoint older than %(max_age)s seconds besides a head;
# long: a namespace holds more than %(keep_last)s checkpoints. A NULL policy says false.
# %(after)s %(limit)s %(max_idle)s %(max_age)s %(keep_last)s
SWEEP_BATCH_SQL = (
    """
WITH batch AS (
    SELECT DISTINCT thread_id FROM {schema}.lgd_heads
    WHERE thread_id > %(after)s ORDER BY thread_id LIMIT %(limit)s
)
SELECT b.thread_id,
    coalesce((SELECT max(h.written_at) FROM {schema}.lgd_heads h WHERE h.thread_id = b.thread_id)
             < now() - make_interval(secs => %(max_idle)s::float8), false) AS idle,
    """
    + _INTERRUPTED.format(t="b.thread_id")
    + """ AS interrupted,
    coalesce(EXISTS (
        SELECT 1 FROM {schema}.lgd_checkpoints c JOIN {schema}.lgd_heads h
          ON h.thread_id = c.thread_id AND h.checkpoint_ns = c.checkpoint_ns
        WHERE c.thread_id = b.thread_id AND c.checkpoint_id < h.head
          AND c.created_at < now() - make_interval(secs => %(max_age)s::float8)), false)
        AS aged,
    coalesce((SELECT max(n) FROM (SELECT count(*) AS n FROM {schema}.lgd_checkpoints c
                                  WHERE c.thread_id = b.thread_id GROUP BY c.checkpoint_ns) x)
             > %(keep_last)s::int, false) AS long,
    (SELECT count(*) FROM {schema}.lgd_checkpoints c WHERE c.thread_id = b.thread_id)
        AS checkpoints
FROM batch b ORDER BY b.thread_id
"""
)

# Delete whole idle threads, in one short transaction. Each thread's head rows are locked
# (SKIP LOCKED: a row a writer or another sweeper holds leaves the thread for a later
# sweep) and the policy is checked again under the locks, so a thread written since the
# step looked at it stays. Its checkpoints, blobs, writes, heads and tool ledger records
# go; with %(keep_ledger)s the ledger records stay, retired (`RETIRE_LEDGER_ROWS`).
# Returns the threads deleted and what went.
# %(thread_ids)s %(max_idle)s %(keep_interrupted)s %(keep_ledger)s
SWEEP_DELETE_IDLE_SQL = (
    """
WITH locked AS (
    SELECT thread_id, checkpoint_ns, written_at FROM {schema}.lgd_heads
    WHERE thread_id = ANY(%(thread_ids)s) FOR UPDATE SKIP LOCKED
), idle AS (
    SELECT l.thread_id FROM locked l GROUP BY l.thread_id
    HAVING max(l.written_at) < now() - make_interval(secs => %(max_idle)s::float8)
       AND count(*) = (SELECT count(*) FROM {schema}.lgd_heads a
                       WHERE a.thread_id = l.thread_id)
       AND NOT (%(keep_interrupted)s AND """
    + _INTERRUPTED.format(t="l.thread_id")
    + """)
), w AS (
    DELETE FROM {schema}.lgd_writes WHERE thread_id IN (SELECT thread_id FROM idle)
    RETURNING octet_length(blob) AS n
), b AS (
    DELETE FROM {schema}.lgd_blobs WHERE thread_id IN (SELECT thread_id FROM idle)
    RETURNING octet_length(blob) AS n
), h AS (
    DELETE FROM {schema}.lgd_heads WHERE thread_id IN (SELECT thread_id FROM idle)
), c AS (
    DELETE FROM {schema}.lgd_checkpoints WHERE thread_id IN (SELECT thread_id FROM idle)
    RETURNING octet_length(checkpoint) AS n
), l AS (
    DELETE FROM {schema}."""
    + LEDGER_TABLE
    + """ WHERE NOT %(keep_ledger)s AND thread_id IN (SELECT thread_id FROM idle)
    RETURNING 1
), r AS (
"""
    + RETIRE_LEDGER_ROWS
    + """IN (SELECT thread_id FROM idle) AND %(keep_ledger)s
)
SELECT ARRAY(SELECT thread_id FROM idle) AS threads,
       (SELECT count(*) FROM c) AS checkpoints, (SELECT count(*) FROM w) AS writes,
       (SELECT count(*) FROM b) AS blobs, (SELECT count(*) FROM l) AS ledger,
       (SELECT coalesce(sum(n), 0) FROM c) + (SELECT coalesce(sum(n), 0) FROM w)
       + (SELECT coalesce(sum(n), 0) FROM b) AS bytes
"""
)


@dataclass(frozen=True, slots=True, init=False, eq=False)
class SweepStatements(Rendered):
    """The sweep's statements rendered for one schema."""

    TEMPLATES: ClassVar[Mapping[str, str]] = {
        "batch": SWEEP_BATCH_SQL,
        "delete_idle": SWEEP_DELETE_IDLE_SQL,
    }

    batch: sql.SQL
    delete_idle: sql.SQL


# Every statement rendered for a schema, once per schema.
statements = functools.cache(SweepStatements)
