"""The schema: the migrations of the checkpoint tables, and the statements that apply them.

Versions are shared with the tool-call ledger's migrations (`_core/sql/ledger.py`) and
the retention sweep's (`_core/sql/sweep.py`). `_core.migrate` runs them.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from psycopg import sql

from langgraph_durable._core.sql.render import Rendered


@dataclass(frozen=True, slots=True)
class Migration:
    """One schema step, applied once, in its own transaction, with its version recorded
    (`migrate.setup`); so its ``sql`` must run inside a transaction (no ``CREATE INDEX
    CONCURRENTLY``)."""

    version: int
    name: str
    sql: str


CREATE_SCHEMA_SQL = "CREATE SCHEMA IF NOT EXISTS {schema}"

CREATE_MIGRATIONS_SQL = """
CREATE TABLE IF NOT EXISTS {schema}.lgd_migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)"""

# Serializes concurrent setup() calls across processes (any 64-bit constant unique to us).
SETUP_LOCK_KEY = 0x1D6E_D0AB_1E5E_7001

# Versions are shared with the ledger's migrations (`_core/sql/ledger.py`, version 2).
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
    Migration(
        23,
        "small channel values inside their checkpoint",
        # No table changes: checkpoints written from here on hold their small scalar
        # values inline (`records.is_inline`), have no blob rows for them, and leave them
        # out of the `channel_versions` column (it lists what blobs to look up). A process of
        # an older version would read such a checkpoint without those values, so the
        # version is recorded, and its setup() refuses a schema this new.
        """
COMMENT ON COLUMN {schema}.lgd_checkpoints.checkpoint IS
    'the checkpoint, its small scalar channel values inline (migration 23)';
""",
    ),
    Migration(
        24,
        "checkpoint versions stored without their zero padding",
        # No table changes: checkpoint frames written from here on hold their versions
        # without the zero padding of their counters, under keys of their own
        # (`records.checkpoint_body`). A process of an older version would find no
        # `channel_versions` in them, so the version is recorded, and its setup() refuses a
        # schema this new.
        """
COMMENT ON COLUMN {schema}.lgd_checkpoints.checkpoint IS
    'the checkpoint, its small scalar channel values inline (migration 23), its versions '
    'without zero padding (migration 24)';
""",
    ),
)

# Every setup() statement takes this transaction-scoped lock first. %(key)s: SETUP_LOCK_KEY
SETUP_LOCK_SQL = "SELECT pg_advisory_xact_lock(%(key)s)"

APPLIED_SQL = "SELECT version FROM {schema}.lgd_migrations"

# Whether the schema was ever set up. %(table)s: the migrations table, quoted
MIGRATIONS_PRESENT_SQL = "SELECT to_regclass(%(table)s) IS NOT NULL AS present"

# One statement per migration: under the advisory lock, apply it and record its version
# unless a concurrent setup() already did. A DO block cannot return rows, so a function in
# the session's temporary schema (pg_temp) does the work. Rendered per migration
# (`_core.migrate`): {lock} {schema} {version} {name} {body} are literals and an identifier.
APPLY_ONCE_TEMPLATE = """
CREATE OR REPLACE FUNCTION pg_temp.lgd_apply_once() RETURNS boolean LANGUAGE plpgsql AS
$lgd_apply$
BEGIN
  PERFORM pg_advisory_xact_lock({lock});
  IF EXISTS (SELECT 1 FROM {schema}.lgd_migrations WHERE version = {version}) THEN
    RETURN false;
  END IF;
  EXECUTE {body};
  INSERT INTO {schema}.lgd_migrations (version, name) VALUES ({version}, {name});
  RETURN true;
END
$lgd_apply$
"""

APPLY_ONCE_SQL = "SELECT pg_temp.lgd_apply_once() AS applied"


@dataclass(frozen=True, slots=True, init=False, eq=False)
class SchemaStatements(Rendered):
    """The statements of setup() rendered for one schema."""

    TEMPLATES: ClassVar[Mapping[str, str]] = {
        "create_schema": CREATE_SCHEMA_SQL,
        "create_migrations": CREATE_MIGRATIONS_SQL,
        "setup_lock": SETUP_LOCK_SQL,
        "applied": APPLIED_SQL,
        "migrations_present": MIGRATIONS_PRESENT_SQL,
        "apply_once": APPLY_ONCE_SQL,
    }

    create_schema: sql.SQL
    create_migrations: sql.SQL
    setup_lock: sql.SQL
    applied: sql.SQL
    migrations_present: sql.SQL
    apply_once: sql.SQL


# Every statement rendered for a schema, once per schema.
statements = functools.cache(SchemaStatements)
