"""Schema migrations as a sans-I/O operation.

Each migration runs in its own transaction, as one statement that takes a
transaction-scoped advisory lock, checks whether its version is recorded, and if not
applies the step and records it. Concurrent ``setup()`` calls from many processes apply
each step exactly once: a caller that loses the race finds the step done.
"""

from __future__ import annotations

from collections.abc import Sequence

from psycopg import sql

from langgraph_durable._core.requests import Cold, Op, Statement
from langgraph_durable._core.sql import SETUP_LOCK_KEY, Migration, render
from langgraph_durable.errors import SchemaVersionError

_LOCK = Statement(sql.SQL("SELECT pg_advisory_xact_lock(%(key)s)"), {"key": SETUP_LOCK_KEY})
_APPLIED_SQL = "SELECT version FROM {schema}.lgd_migrations"
_CREATE_SCHEMA_SQL = "CREATE SCHEMA IF NOT EXISTS {schema}"
_CREATE_MIGRATIONS_SQL = """
CREATE TABLE IF NOT EXISTS {schema}.lgd_migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)"""


def setup(schema: str, migrations: Sequence[Migration]) -> Op[list[int]]:
    """Create the schema and apply every missing migration; return the versions applied."""
    yield Cold(
        (
            _LOCK,
            Statement(render(_CREATE_SCHEMA_SQL, schema), {}),
            Statement(render(_CREATE_MIGRATIONS_SQL, schema), {}),
        )
    )
    applied_rows = (
        yield Cold(
            (
                _LOCK,
                Statement(render(_APPLIED_SQL, schema), {}, fetch=True),
            )
        )
    )[1]
    applied = {row["version"] for row in applied_rows}
    known = {m.version for m in migrations}
    if applied - known:
        raise SchemaVersionError(
            f"schema {schema!r} has migrations {sorted(applied - known)} that this version of "
            "langgraph-durable does not know; upgrade the package"
        )
    done: list[int] = []
    for migration in sorted(migrations, key=lambda m: m.version):
        if migration.version in applied:
            continue
        create, call = _apply_once(schema, migration)
        rows = (yield Cold((Statement(create, {}), Statement(call, {}, fetch=True))))[1]
        if rows and rows[0]["applied"]:
            done.append(migration.version)
    return done


# One statement per migration: under the advisory lock, apply it and record its version
# unless a concurrent setup() already did. A DO block cannot return rows, so a function in
# the session's temporary schema (pg_temp) does the work.
_APPLY_ONCE_SQL = """
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


def _apply_once(schema: str, migration: Migration) -> tuple[sql.Composed, sql.SQL]:
    return sql.SQL(_APPLY_ONCE_SQL).format(
        lock=sql.Literal(SETUP_LOCK_KEY),
        schema=sql.Identifier(schema),
        version=sql.Literal(migration.version),
        name=sql.Literal(migration.name),
        body=sql.Literal(render(migration.sql, schema).as_string(None)),
    ), sql.SQL("SELECT pg_temp.lgd_apply_once() AS applied")


def current_version(schema: str) -> Op[int]:
    """The newest applied migration (0 when the schema was never set up)."""
    rows = (
        yield Cold.one(
            sql.SQL("SELECT to_regclass(%(table)s) IS NOT NULL AS present"),
            {"table": f'"{schema}".lgd_migrations'},
            fetch=True,
        )
    )[0]
    if not rows[0]["present"]:
        return 0
    versions = (yield Cold.one(render(_APPLIED_SQL, schema), {}, fetch=True))[0]
    return max((r["version"] for r in versions), default=0)
