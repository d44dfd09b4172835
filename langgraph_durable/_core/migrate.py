"""Schema migrations as a sans-I/O operation.

Each migration runs in its own transaction under a transaction-scoped advisory lock and
records its version inside that transaction, so concurrent ``setup()`` calls from many
processes apply each step exactly once: a caller that loses the race finds the step done.
"""

from __future__ import annotations

from collections.abc import Sequence

from psycopg import sql

from langgraph_durable._core.requests import Cold, Op, Statement
from langgraph_durable._core.sql import (
    CREATE_MIGRATIONS_SQL,
    CREATE_SCHEMA_SQL,
    SETUP_LOCK_KEY,
    Migration,
    render,
)
from langgraph_durable.errors import SchemaVersionError

_LOCK = Statement(sql.SQL("SELECT pg_advisory_xact_lock(%(key)s)"), {"key": SETUP_LOCK_KEY})
_APPLIED_SQL = "SELECT version FROM {schema}.lgd_migrations"
_RECORD_SQL = "INSERT INTO {schema}.lgd_migrations (version, name) VALUES (%(version)s, %(name)s)"


def setup(schema: str, migrations: Sequence[Migration]) -> Op[list[int]]:
    """Create the schema and apply every missing migration; return the versions applied."""
    yield Cold((
        _LOCK,
        Statement(render(CREATE_SCHEMA_SQL, schema), {}),
        Statement(render(CREATE_MIGRATIONS_SQL, schema), {}),
    ))
    applied_rows = (yield Cold((
        _LOCK, Statement(render(_APPLIED_SQL, schema), {}, fetch=True),
    )))[1]
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
        # Under the lock, a concurrent setup() that applied this step is visible here.
        now = (yield Cold((_LOCK, Statement(render(_APPLIED_SQL, schema), {}, fetch=True))))[1]
        if migration.version in {row["version"] for row in now}:
            continue
        yield Cold((
            _LOCK,
            Statement(render(_APPLIED_SQL, schema), {}, fetch=True),
            Statement(render(migration.sql, schema), {}),
            Statement(render(_RECORD_SQL, schema),
                      {"version": migration.version, "name": migration.name}),
        ))
        done.append(migration.version)
    return done


def current_version(schema: str) -> Op[int]:
    """The newest applied migration (0 when the schema was never set up)."""
    rows = (yield Cold.one(
        sql.SQL("SELECT to_regclass(%(table)s) IS NOT NULL AS present"),
        {"table": f'"{schema}".lgd_migrations'}, fetch=True,
    ))[0]
    if not rows[0]["present"]:
        return 0
    versions = (yield Cold.one(render(_APPLIED_SQL, schema), {}, fetch=True))[0]
    return max((r["version"] for r in versions), default=0)
