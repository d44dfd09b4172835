"""Every SQL statement of the cold tier, and the schema migrations.

Statements are templates with a ``{schema}`` placeholder, rendered once per saver with
``psycopg.sql.Identifier`` (`Statements`); nothing user-supplied is ever formatted in.
Parameters are named (``%(thread_id)s``) so each statement documents its own inputs.
"""

from __future__ import annotations

from dataclasses import dataclass

from psycopg import sql


@dataclass(frozen=True, slots=True)
class Migration:
    """One schema step, applied once, in its own transaction, with its version recorded."""

    version: int
    name: str
    sql: str
    transactional: bool = True


MIGRATIONS_TABLE = "lgd_migrations"

CREATE_SCHEMA_SQL = "CREATE SCHEMA IF NOT EXISTS {schema}"

CREATE_MIGRATIONS_SQL = """
CREATE TABLE IF NOT EXISTS {schema}.lgd_migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)"""

# Serializes concurrent setup() calls across processes (any 64-bit constant unique to us).
SETUP_LOCK_KEY = 0x1D6E_D0AB_1E5E_7001

# Versions are shared with the ledger's migrations (`_core/ledger_sql.py`, version 2).
CORE_MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "checkpoints, blobs, writes",
        """
CREATE TABLE {schema}.lgd_checkpoints (
    thread_id            text NOT NULL,
    checkpoint_ns        text NOT NULL DEFAULT '',
    checkpoint_id        text NOT NULL,
    parent_checkpoint_id text,
    run_id               text,
    checkpoint           bytea NOT NULL,
    channel_versions     jsonb NOT NULL,
    metadata             jsonb NOT NULL DEFAULT '{{}}',
    created_at           timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id)
);
CREATE INDEX lgd_checkpoints_run_id_idx ON {schema}.lgd_checkpoints (run_id)
    WHERE run_id IS NOT NULL;
CREATE TABLE {schema}.lgd_blobs (
    thread_id     text NOT NULL,
    checkpoint_ns text NOT NULL DEFAULT '',
    channel       text NOT NULL,
    version       text NOT NULL,
    blob          bytea NOT NULL,
    PRIMARY KEY (thread_id, checkpoint_ns, channel, version)
);
CREATE TABLE {schema}.lgd_writes (
    thread_id     text NOT NULL,
    checkpoint_ns text NOT NULL DEFAULT '',
    checkpoint_id text NOT NULL,
    task_id       text NOT NULL,
    idx           integer NOT NULL,
    channel       text NOT NULL,
    task_path     text NOT NULL DEFAULT '',
    blob          bytea NOT NULL,
    PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, task_id, idx)
);
CREATE TABLE {schema}.lgd_hot_invalidations (
    thread_id text PRIMARY KEY,
    at        timestamptz NOT NULL DEFAULT now()
);
""",
    ),
    Migration(
        3,
        "namespace heads and versions, stale marks by sequence",
        """
CREATE SEQUENCE {schema}.lgd_version_seq;
CREATE TABLE {schema}.lgd_heads (
    thread_id     text NOT NULL,
    checkpoint_ns text NOT NULL DEFAULT '',
    head          text,
    version       bigint NOT NULL,
    PRIMARY KEY (thread_id, checkpoint_ns)
);
INSERT INTO {schema}.lgd_heads (thread_id, checkpoint_ns, head, version)
SELECT thread_id, checkpoint_ns, max(checkpoint_id), nextval('{schema}.lgd_version_seq')
FROM {schema}.lgd_checkpoints GROUP BY thread_id, checkpoint_ns;
CREATE SEQUENCE {schema}.lgd_mark_seq;
CREATE TABLE {schema}.lgd_hot_marks (
    thread_id text PRIMARY KEY,
    seq       bigint NOT NULL DEFAULT nextval('{schema}.lgd_mark_seq'),
    version   bigint NOT NULL,
    at        timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX lgd_hot_marks_seq_idx ON {schema}.lgd_hot_marks (seq);
INSERT INTO {schema}.lgd_hot_marks (thread_id, version)
SELECT thread_id, nextval('{schema}.lgd_version_seq') FROM {schema}.lgd_hot_invalidations;
DROP TABLE {schema}.lgd_hot_invalidations;
""",
    ),
    Migration(
        8,
        "deleted threads",
        # A deleted thread's newest checkpoint id: a write to a checkpoint no newer that
        # is not stored belongs to a run that was mid-step when the thread was deleted.
        """
CREATE TABLE {schema}.lgd_deleted (
    thread_id  text PRIMARY KEY,
    through    text NOT NULL,
    deleted_at timestamptz NOT NULL DEFAULT now()
);
""",
    ),
    Migration(
        6,
        "types the application stores",
        """
CREATE TABLE {schema}.lgd_types (
    module      text NOT NULL,
    name        text NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (module, name)
);
""",
    ),
)

# The types (classes rebuilt by name) a value the application stored names, recorded
# before the value is stored (`_core.stored_types`). %(modules)s %(names)s
RECORD_TYPES_SQL = """
INSERT INTO {schema}.lgd_types (module, name)
SELECT * FROM unnest(%(modules)s::text[], %(names)s::text[])
ON CONFLICT (module, name) DO NOTHING
"""

KNOWN_TYPES_SQL = "SELECT module, name FROM {schema}.lgd_types"

# Whether Postgres holds a checkpoint (the one that decided a tool call: `_core.ledger`).
# %(thread_id)s %(checkpoint_ns)s %(checkpoint_id)s
CHECKPOINT_STORED_SQL = """
SELECT 1 FROM {schema}.lgd_checkpoints
WHERE thread_id = %(thread_id)s AND checkpoint_ns = %(checkpoint_ns)s
  AND checkpoint_id = %(checkpoint_id)s
"""

# Every commit that changes a namespace takes a new version from one sequence, so versions
# only grow, across deletes and copies too. Redis keeps the newest version it has seen of
# each namespace and refuses an older copy (see `_core/scripts/`).
_NEXT_VERSION = "nextval('{schema}.lgd_version_seq')"

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


# Re-putting a checkpoint (a retried write, a re-flushed batch) replaces it.
_CHECKPOINT_CONFLICT = """
ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id) DO UPDATE SET
    parent_checkpoint_id = EXCLUDED.parent_checkpoint_id,
    run_id = EXCLUDED.run_id,
    checkpoint = EXCLUDED.checkpoint,
    channel_versions = EXCLUDED.channel_versions,
    metadata = EXCLUDED.metadata
"""

# A checkpoint and its new blobs in one statement (one round trip, one transaction). The
# namespace's head row is taken first: its lock orders concurrent writers of the
# namespace, and with %(cas)s the checkpoint is stored only if it extends the head (its
# parent is the head, it is a root of a namespace with none yet, or it is a retry of
# this very put). A head row in this statement's snapshot is only ever updated (`moved`,
# against its newest version), never inserted again: a delete that removed it while this
# put waited for its lock leaves `moved` empty, so the put conflicts instead of starting
# the deleted history afresh.
# Returns the new version and head, or no row when the head moved on (another run wrote
# first) or the thread was deleted.
# %(thread_id)s %(checkpoint_ns)s %(checkpoint_id)s %(parent_id)s %(run_id)s %(cas)s
# %(checkpoint)s %(channel_versions)s %(metadata)s %(channels)s %(versions)s
# %(blobs)s
PUT_CHECKPOINT_SQL = (
    """
WITH moved AS (
    UPDATE {schema}.lgd_heads AS h
    SET head = GREATEST(h.head, %(checkpoint_id)s), version = """
    + _NEXT_VERSION
    + """, written_at = now()
    WHERE h.thread_id = %(thread_id)s AND h.checkpoint_ns = %(checkpoint_ns)s
      AND (NOT %(cas)s OR h.head = %(parent_id)s OR h.head = %(checkpoint_id)s
           OR (h.head IS NULL AND %(parent_id)s::text IS NULL))
    RETURNING h.version, h.head
), started AS (
    -- a namespace without a head row has no checkpoint: a put that extends a parent
    -- there extends a deleted history, and conflicts
    INSERT INTO {schema}.lgd_heads AS h (thread_id, checkpoint_ns, head, version)
    SELECT %(thread_id)s, %(checkpoint_ns)s, %(checkpoint_id)s, """
    + _NEXT_VERSION
    + """
    WHERE (NOT %(cas)s OR %(parent_id)s::text IS NULL) AND NOT EXISTS (
        SELECT 1 FROM {schema}.lgd_heads x
        WHERE x.thread_id = %(thread_id)s AND x.checkpoint_ns = %(checkpoint_ns)s)
    ON CONFLICT (thread_id, checkpoint_ns) DO UPDATE SET
        head = GREATEST(h.head, EXCLUDED.head), version = EXCLUDED.version, written_at = now()
    WHERE NOT %(cas)s OR h.head = EXCLUDED.head
       OR (h.head IS NULL AND %(parent_id)s::text IS NULL)
    RETURNING h.version, h.head
), head AS (
    SELECT version, head FROM moved UNION ALL SELECT version, head FROM started
), new_blobs AS (
    INSERT INTO {schema}.lgd_blobs (thread_id, checkpoint_ns, channel, version, blob)
    SELECT %(thread_id)s, %(checkpoint_ns)s, x.channel, x.version, x.blob
    FROM unnest(%(channels)b::text[], %(versions)b::text[], %(blobs)b::bytea[])
         AS x(channel, version, blob)
    WHERE EXISTS (SELECT 1 FROM head)
    ON CONFLICT (thread_id, checkpoint_ns, channel, version) DO NOTHING
), stored AS (
    INSERT INTO {schema}.lgd_checkpoints (thread_id, checkpoint_ns, checkpoint_id,
        parent_checkpoint_id, run_id, checkpoint, channel_versions, metadata)
    SELECT %(thread_id)s, %(checkpoint_ns)s, %(checkpoint_id)s, %(parent_id)s, %(run_id)s,
        %(checkpoint)b, %(channel_versions)s::jsonb, %(metadata)s::jsonb
    FROM head
"""
    + _CHECKPOINT_CONFLICT
    + """)
SELECT version, head FROM head
"""
)

# Whether %(checkpoint_id)s of %(thread_id)s %(checkpoint_ns)s belongs to a deleted history:
# it is not stored, and no newer than the newest checkpoint the thread's last delete
# removed (checkpoint ids grow with time). A write to it comes from a run that was mid-step
# when the thread was deleted; a new run's checkpoints are newer, so its writes may come
# before their checkpoint (LangGraph's durability "async") as they always may.
# {deleted}: the lgd_deleted rows to look at (the table, or a CTE that locked the row).
_DELETED = """EXISTS (
        SELECT 1 FROM {deleted} d
        WHERE d.thread_id = %(thread_id)s AND %(checkpoint_id)s <= d.through
          AND NOT EXISTS (
            SELECT 1 FROM {schema}.lgd_checkpoints c
            WHERE c.thread_id = %(thread_id)s AND c.checkpoint_ns = %(checkpoint_ns)s
              AND c.checkpoint_id = %(checkpoint_id)s))"""

# A put refused because its parent's history was deleted: the checkpoint it would have
# stored is of that history too. The delete's record grows to it, so writes to it that
# come later are refused; its writes that came first (LangGraph's durability "async") go.
# Two statements: the first waits for a put_writes that holds the record (it locks it), so
# the second, a new snapshot, sees its writes. (`mutate_threads` then rebuilds the thread's
# heads above the tombstone.) %(thread_id)s %(checkpoint_ns)s %(checkpoint_id)s
EXTEND_DELETED_SQL = """
UPDATE {schema}.lgd_deleted SET through = GREATEST(through, %(checkpoint_id)s)
WHERE thread_id = %(thread_id)s
"""
FORGET_DELETED_SQL = """
DELETE FROM {schema}.lgd_writes
WHERE thread_id = %(thread_id)s AND checkpoint_ns = %(checkpoint_ns)s
  AND checkpoint_id = %(checkpoint_id)s
"""

# The head of a namespace and the run that wrote it (the run id in its metadata), and
# whether %(checkpoint_id)s, the checkpoint the writer extended, belongs to a deleted
# history (`_DELETED`), for the error a writer gets when the head moved on. One row, its
# head NULL when the namespace has none. %(thread_id)s %(checkpoint_ns)s %(checkpoint_id)s
HEAD_SQL = """
SELECT h.head, c.metadata ->> 'run_id' AS run_id,
    """ + _DELETED.replace("{deleted}", "{schema}.lgd_deleted") + """ AS deleted
FROM (SELECT 1) AS one
LEFT JOIN {schema}.lgd_heads h
    ON h.thread_id = %(thread_id)s AND h.checkpoint_ns = %(checkpoint_ns)s
LEFT JOIN {schema}.lgd_checkpoints c ON c.thread_id = h.thread_id
    AND c.checkpoint_ns = h.checkpoint_ns AND c.checkpoint_id = h.head
"""

# Ordinary writes are first-write-wins; the special writes of WRITES_IDX_MAP replace.
# Nothing is stored for a deleted history (`_DELETED`, its record locked until the commit,
# see `EXTEND_DELETED_SQL`).
# Returns the namespace's new version, or no row when the history was deleted.
# %(thread_id)s %(checkpoint_ns)s %(checkpoint_id)s %(task_id)s %(task_path)s
# %(idxs)s %(channels)s %(blobs)s (ordinary)  %(s_idxs)s %(s_channels)s %(s_blobs)s (special)
PUT_WRITES_SQL = (
    """
WITH deleted AS (
    SELECT thread_id, through FROM {schema}.lgd_deleted
    WHERE thread_id = %(thread_id)s FOR SHARE
), bumped AS (
    UPDATE {schema}.lgd_heads AS h SET version = """
    + _NEXT_VERSION
    + """, written_at = now()
    WHERE h.thread_id = %(thread_id)s AND h.checkpoint_ns = %(checkpoint_ns)s AND NOT """
    + _DELETED.replace("{deleted}", "deleted")
    + """
    RETURNING h.version
), started AS (
    -- the namespace's first write (no head row in this statement's snapshot); a row the
    -- snapshot holds is only updated, so a delete that removed it meanwhile stores nothing
    INSERT INTO {schema}.lgd_heads AS h (thread_id, checkpoint_ns, version)
    SELECT %(thread_id)s, %(checkpoint_ns)s, """
    + _NEXT_VERSION
    + """
    WHERE NOT """
    + _DELETED.replace("{deleted}", "deleted")
    + """ AND NOT EXISTS (
        SELECT 1 FROM {schema}.lgd_heads x
        WHERE x.thread_id = %(thread_id)s AND x.checkpoint_ns = %(checkpoint_ns)s)
    ON CONFLICT (thread_id, checkpoint_ns) DO UPDATE SET
        version = EXCLUDED.version, written_at = now()
    RETURNING h.version
), bump AS (
    SELECT version FROM bumped UNION ALL SELECT version FROM started
), special AS (
    INSERT INTO {schema}.lgd_writes (thread_id, checkpoint_ns, checkpoint_id, task_id, idx,
        channel, task_path, blob)
    SELECT %(thread_id)s, %(checkpoint_ns)s, %(checkpoint_id)s, %(task_id)s, x.idx,
        x.channel, %(task_path)s, x.blob
    FROM unnest(%(s_idxs)b::int[], %(s_channels)b::text[], %(s_blobs)b::bytea[])
         AS x(idx, channel, blob)
    WHERE EXISTS (SELECT 1 FROM bump)
    ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id, task_id, idx) DO UPDATE SET
        channel = EXCLUDED.channel, task_path = EXCLUDED.task_path, blob = EXCLUDED.blob
), ordinary AS (
    INSERT INTO {schema}.lgd_writes (thread_id, checkpoint_ns, checkpoint_id, task_id, idx,
        channel, task_path, blob)
    SELECT %(thread_id)s, %(checkpoint_ns)s, %(checkpoint_id)s, %(task_id)s, x.idx,
        x.channel, %(task_path)s, x.blob
    FROM unnest(%(idxs)b::int[], %(channels)b::text[], %(blobs)b::bytea[])
         AS x(idx, channel, blob)
    WHERE EXISTS (SELECT 1 FROM bump)
    ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id, task_id, idx) DO NOTHING
)
SELECT version FROM bump
"""
)

# Write-behind flush: one statement per table for a whole batch, in one transaction.
# Each takes aligned arrays, one element per row; a batch holds each key at most once.
# %(thread_ids)s %(namespaces)s %(channels)s %(versions)s %(blobs)s
FLUSH_BLOBS_SQL = """
INSERT INTO {schema}.lgd_blobs (thread_id, checkpoint_ns, channel, version, blob)
SELECT * FROM unnest(%(thread_ids)b::text[], %(namespaces)b::text[], %(channels)b::text[],
                     %(versions)b::text[], %(blobs)b::bytea[])
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
"""
    + _CHECKPOINT_CONFLICT
)

# Every namespace a flush batch touches gets a new version (and its newest checkpoint as
# head); returned so Redis can refuse copies read before the flush.
# %(thread_ids)s %(namespaces)s %(heads)s (one element per namespace; head may be NULL)
FLUSH_HEADS_SQL = (
    """
INSERT INTO {schema}.lgd_heads AS h (thread_id, checkpoint_ns, head, version)
SELECT x.t, x.n, x.head, """
    + _NEXT_VERSION
    + """
FROM unnest(%(thread_ids)b::text[], %(namespaces)b::text[], %(heads)b::text[]) AS x(t, n, head)
-- a namespace of writes alone gets a row only if some were stored (see _FLUSH_WRITES)
WHERE x.head IS NOT NULL OR EXISTS (
    SELECT 1 FROM {schema}.lgd_writes w WHERE w.thread_id = x.t AND w.checkpoint_ns = x.n)
ON CONFLICT (thread_id, checkpoint_ns) DO UPDATE SET
    head = GREATEST(h.head, EXCLUDED.head), version = EXCLUDED.version, written_at = now()
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

# Repair of a damaged cold blob from a good hot copy.
# %(thread_id)s %(checkpoint_ns)s %(channel)s %(version)s %(blob)s
REPAIR_BLOB_SQL = """
UPDATE {schema}.lgd_blobs SET blob = %(blob)s
WHERE thread_id = %(thread_id)s AND checkpoint_ns = %(checkpoint_ns)s
  AND channel = %(channel)s AND version = %(version)s
"""

# %(thread_id)s %(checkpoint_ns)s %(checkpoint_id)s %(checkpoint)s
REPAIR_CHECKPOINT_SQL = """
UPDATE {schema}.lgd_checkpoints SET checkpoint = %(checkpoint)s
WHERE thread_id = %(thread_id)s AND checkpoint_ns = %(checkpoint_ns)s
  AND checkpoint_id = %(checkpoint_id)s
"""

# A new version for a change to whole threads (delete, copy, prune, delete_for_runs):
# Redis keeps it as the threads' tombstone. Taken first in the transaction, so it is above
# every version before the change and below every one the change itself gives.
TOMBSTONE_SQL = "SELECT " + _NEXT_VERSION + " AS version"

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
    + _NEXT_VERSION
    + """
FROM {schema}.lgd_checkpoints c WHERE c.thread_id = ANY(%(thread_ids)s)
GROUP BY c.thread_id, c.checkpoint_ns
ON CONFLICT (thread_id, checkpoint_ns) DO UPDATE SET
    head = EXCLUDED.head, version = EXCLUDED.version
"""
)

# A write that bypassed Redis marks the thread, in its own transaction: every process
# applies the marks Redis has not seen before it trusts Redis, and then every
# `stale_poll_interval`. One mark per thread: a newer one takes a new sequence number.
# %(thread_id)s
MARK_HOT_STALE_SQL = (
    "INSERT INTO {schema}.lgd_hot_marks (thread_id, version) VALUES (%(thread_id)s, "
    + _NEXT_VERSION
    + ") ON CONFLICT (thread_id) DO UPDATE SET seq = nextval('{schema}.lgd_mark_seq'), "
    "version = EXCLUDED.version, at = now()"
)

# After a mark: every namespace of the thread gets a version above the mark's. %(thread_id)s
BUMP_THREAD_SQL = (
    "UPDATE {schema}.lgd_heads SET version = "
    + _NEXT_VERSION
    + " WHERE thread_id = %(thread_id)s"
)

# Last in a transaction that marked threads: number its marks anew, under a lock held
# until it commits. A reader that sees a mark numbered N has then seen every mark
# numbered below N that will ever commit, so it may record N as applied. (Numbered when
# made, a mark could commit after a newer one that a reader already recorded as applied,
# and no process would ever apply it.) The lock is taken after every row lock of the
# transaction, and no row lock is awaited while it is held, so it adds no deadlock; it
# orders only writes that bypassed Redis. %(thread_ids)s
ORDER_MARKS_SQL = (
    "SELECT pg_advisory_xact_lock(hashtext('{schema}.lgd_mark_seq'))"
)
RENUMBER_MARKS_SQL = (
    "UPDATE {schema}.lgd_hot_marks SET seq = nextval('{schema}.lgd_mark_seq') "
    "WHERE thread_id = ANY(%(thread_ids)s)"
)

# %(after)s: the marks Redis has not applied yet, oldest first
PENDING_MARKS_SQL = """
SELECT seq, thread_id, version FROM {schema}.lgd_hot_marks
WHERE seq > %(after)s ORDER BY seq LIMIT 500
"""

# The newest mark (0 when there is none).
NEWEST_MARK_SQL = "SELECT coalesce(max(seq), 0) AS seq FROM {schema}.lgd_hot_marks"

# Marks older than any hot copy they could describe (%(keep)s seconds: twice the hot TTL).
FORGET_MARKS_SQL = """
DELETE FROM {schema}.lgd_hot_marks WHERE at < now() - make_interval(secs => %(keep)s)
"""


def render(template: str, schema: str) -> sql.SQL:
    """Render a template for ``schema`` (quoted as an identifier), once: a composition
    would be rendered again at every execution, which costs more than sending it. (The
    schema is a plain identifier, so its quoting needs no connection.)"""
    return sql.SQL(sql.SQL(template).format(schema=sql.Identifier(schema)).as_string(None))


class Statements:
    """Every statement rendered once for one schema; attribute names match the constants
    (``PUT_CHECKPOINT_SQL`` -> ``put_checkpoint_sql``). Each is declared here, so the type
    checker catches a misspelled name; `tests/core/test_layers.py` checks that the
    declarations and the constants agree."""

    bump_thread_sql: sql.SQL
    checkpoint_stored_sql: sql.SQL
    copy_source_blobs_sql: sql.SQL
    copy_source_checkpoints_sql: sql.SQL
    copy_source_writes_sql: sql.SQL
    copy_thread_resealed_sql: sql.SQL
    copy_thread_sql: sql.SQL
    create_migrations_sql: sql.SQL
    create_schema_sql: sql.SQL
    delete_for_runs_sql: sql.SQL
    delete_orphan_blobs_sql: sql.SQL
    delete_threads_sql: sql.SQL
    delta_chain_sql: sql.SQL
    delta_seeds_sql: sql.SQL
    delta_writes_sql: sql.SQL
    flush_blobs_sql: sql.SQL
    flush_checkpoints_sql: sql.SQL
    flush_heads_sql: sql.SQL
    flush_special_writes_sql: sql.SQL
    extend_deleted_sql: sql.SQL
    flush_writes_sql: sql.SQL
    forget_deleted_sql: sql.SQL
    forget_marks_sql: sql.SQL
    get_by_id_sql: sql.SQL
    get_latest_sql: sql.SQL
    head_sql: sql.SQL
    known_types_sql: sql.SQL
    lock_heads_sql: sql.SQL
    mark_hot_stale_sql: sql.SQL
    newest_mark_sql: sql.SQL
    order_marks_sql: sql.SQL
    no_jit_sql: sql.SQL
    pending_marks_sql: sql.SQL
    renumber_marks_sql: sql.SQL
    prune_delete_sql: sql.SQL
    prune_scan_sql: sql.SQL
    put_checkpoint_sql: sql.SQL
    put_writes_sql: sql.SQL
    rebuild_heads_sql: sql.SQL
    record_types_sql: sql.SQL
    repair_blob_sql: sql.SQL
    repair_checkpoint_sql: sql.SQL
    threads_of_runs_sql: sql.SQL
    tombstone_sql: sql.SQL

    def __init__(self, schema: str) -> None:
        self.schema = schema
        for name in STATEMENT_NAMES:
            setattr(self, name, render(globals()[name.upper()], schema))
        self._lists: dict[tuple[frozenset[str], bool], sql.SQL] = {}

    def list_sql(self, present: frozenset[str], limited: bool) -> sql.SQL:
        """`list_template` rendered for this schema (memoized)."""
        key = (present, limited)
        if key not in self._lists:
            self._lists[key] = render(list_template(present, limited), self.schema)
        return self._lists[key]


# The statements `Statements` renders: the names it declares.
STATEMENT_NAMES = tuple(
    name for name, kind in Statements.__annotations__.items() if kind == "sql.SQL"
)
