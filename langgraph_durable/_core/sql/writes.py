"""Statements of write-through: a checkpoint, its writes, a deleted history, repairs, and
the types stored values name."""

from __future__ import annotations

from langgraph_durable._core.sql.parts import CHECKPOINT_CONFLICT, NEXT_VERSION

# The types (classes rebuilt by name) a value the application stored names, recorded
# before the value is stored (`_core.stored_types`). %(modules)s %(names)s
RECORD_TYPES_SQL = """
INSERT INTO {schema}.lgd_types (module, name)
SELECT * FROM unnest(%(modules)s::text[], %(names)s::text[])
ON CONFLICT (module, name) DO NOTHING
"""

KNOWN_TYPES_SQL = "SELECT module, name FROM {schema}.lgd_types"

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
    + NEXT_VERSION
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
    + NEXT_VERSION
    + """
    WHERE (NOT %(cas)s OR %(parent_id)s::text IS NULL) AND NOT EXISTS (
        SELECT 1 FROM {schema}.lgd_heads x
        WHERE x.thread_id = %(thread_id)s AND x.checkpoint_ns = %(checkpoint_ns)s)
    ON CONFLICT (thread_id, checkpoint_ns) DO UPDATE SET
        head = GREATEST(h.head, EXCLUDED.head), written_at = now(), version = """
    + NEXT_VERSION
    + """
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
    + CHECKPOINT_CONFLICT
    + """)
SELECT version, head, EXISTS (
    SELECT 1 FROM {schema}.lgd_writes w WHERE w.thread_id = %(thread_id)s
      AND w.checkpoint_ns = %(checkpoint_ns)s AND w.checkpoint_id = %(checkpoint_id)s
) AS has_writes FROM head
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

# A task's pending writes, with the namespace's new version. Ordinary writes are
# first-write-wins; the special writes of WRITES_IDX_MAP replace. Nothing is stored for a
# deleted history (`_DELETED`, its record locked until the commit, see
# `EXTEND_DELETED_SQL`). Two forms, so the common write runs only what it needs:
# - PUT_ORDINARY_WRITES_SQL, ordinary writes to a namespace with a head row (every write
#   after the namespace's first checkpoint). No row back: the namespace has no head row
#   (its first writes came before its first checkpoint, LangGraph's durability "async")
#   or its history was deleted, and the caller runs PUT_WRITES_SQL, which tells the two
#   apart. It stored nothing, so running the other after it is running that one alone.
# - PUT_WRITES_SQL, any writes: also starts the head row of a namespace that has none.
# Both return the namespace's new version and whether the checkpoint is stored (see
# `_WRITES_RESULT`), or no row when the history was deleted.
# %(thread_id)s %(checkpoint_ns)s %(checkpoint_id)s %(task_id)s %(task_path)s
# %(idxs)s %(channels)s %(blobs)s (ordinary)  %(s_idxs)s %(s_channels)s %(s_blobs)s (special)
# The deleted-history record (locked) and the head row's new version, which every write
# of both forms waits for
_WRITES_BUMPED = """
WITH deleted AS (
    SELECT thread_id, through FROM {schema}.lgd_deleted
    WHERE thread_id = %(thread_id)s FOR SHARE
), bumped AS (
    UPDATE {schema}.lgd_heads AS h SET version = """ + NEXT_VERSION + """, written_at = now()
    WHERE h.thread_id = %(thread_id)s AND h.checkpoint_ns = %(checkpoint_ns)s AND NOT """ + (
    _DELETED.replace("{deleted}", "deleted")) + """
    RETURNING h.version
)"""

_STARTED = """, started AS (
    -- the namespace's first write (no head row in this statement's snapshot); a row the
    -- snapshot holds is only updated, so a delete that removed it meanwhile stores nothing
    INSERT INTO {schema}.lgd_heads AS h (thread_id, checkpoint_ns, version)
    SELECT %(thread_id)s, %(checkpoint_ns)s, """ + NEXT_VERSION + """
    WHERE NOT """ + _DELETED.replace("{deleted}", "deleted") + """ AND NOT EXISTS (
        SELECT 1 FROM {schema}.lgd_heads x
        WHERE x.thread_id = %(thread_id)s AND x.checkpoint_ns = %(checkpoint_ns)s)
    ON CONFLICT (thread_id, checkpoint_ns) DO UPDATE SET
        version = """ + NEXT_VERSION + """, written_at = now()
    RETURNING h.version
), bump AS (
    SELECT version FROM bumped UNION ALL SELECT version FROM started
)"""


def _insert_writes(name: str, prefix: str, bump: str, conflict: str) -> str:
    """A CTE ``name`` storing the writes of the ``prefix``ed arrays once ``bump`` holds
    the namespace's new version."""
    return f""", {name} AS (
    INSERT INTO {{schema}}.lgd_writes (thread_id, checkpoint_ns, checkpoint_id, task_id, idx,
        channel, task_path, blob)
    SELECT %(thread_id)s, %(checkpoint_ns)s, %(checkpoint_id)s, %(task_id)s, x.idx,
        x.channel, %(task_path)s, x.blob
    FROM unnest(%({prefix}idxs)b::int[], %({prefix}channels)b::text[],
                %({prefix}blobs)b::bytea[]) AS x(idx, channel, blob)
    WHERE EXISTS (SELECT 1 FROM {bump})
    ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id, task_id, idx) {conflict}
)"""


_REPLACE = """DO UPDATE SET
        channel = EXCLUDED.channel, task_path = EXCLUDED.task_path, blob = EXCLUDED.blob"""

# What both forms return: the new version, and whether Postgres holds the checkpoint written
# to (a copy in Redis that ends before it lost it, see put_writes.lua)
_WRITES_RESULT = """
SELECT version, EXISTS (
    SELECT 1 FROM {schema}.lgd_checkpoints c WHERE c.thread_id = %(thread_id)s
      AND c.checkpoint_ns = %(checkpoint_ns)s AND c.checkpoint_id = %(checkpoint_id)s
) AS checkpoint_stored FROM """

PUT_ORDINARY_WRITES_SQL = (
    _WRITES_BUMPED
    + _insert_writes("ordinary", "", "bumped", "DO NOTHING")
    + _WRITES_RESULT + "bumped\n"
)

PUT_WRITES_SQL = (
    _WRITES_BUMPED
    + _STARTED
    + _insert_writes("special", "s_", "bump", _REPLACE)
    + _insert_writes("ordinary", "", "bump", "DO NOTHING")
    + _WRITES_RESULT + "bump\n"
)

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

