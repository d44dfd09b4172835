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
from langgraph_durable._core.sql.render import render
from langgraph_durable._core.sql.schema import (
    APPLY_ONCE_TEMPLATE,
    SETUP_LOCK_KEY,
    Migration,
    statements,
)
from langgraph_durable.errors import SchemaVersionError


def setup(schema: str, migrations: Sequence[Migration]) -> Op[list[int]]:
    """Create the schema and apply every missing migration; return the versions applied."""
    rendered = statements(schema)
    lock = Statement(rendered.setup_lock, {"key": SETUP_LOCK_KEY})
    yield Cold(
        (
            lock,
            Statement(rendered.create_schema, {}),
            Statement(rendered.create_migrations, {}),
        )
    )
    applied_rows = (
        yield Cold(
            (
                lock,
                Statement(rendered.applied, {}, fetch=True),
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


def _apply_once(schema: str, migration: Migration) -> tuple[sql.Composed, sql.SQL]:
    return sql.SQL(APPLY_ONCE_TEMPLATE).format(
        lock=sql.Literal(SETUP_LOCK_KEY),
        schema=sql.Identifier(schema),
        version=sql.Literal(migration.version),
        name=sql.Literal(migration.name),
        body=sql.Literal(render(migration.sql, schema).as_string(None)),
    ), statements(schema).apply_once


def current_version(schema: str) -> Op[int]:
    """The newest applied migration (0 when the schema was never set up)."""
    rows = (
        yield Cold.one(
            statements(schema).migrations_present,
            {"table": f'"{schema}".lgd_migrations'},
            fetch=True,
        )
    )[0]
    if not rows[0]["present"]:
        return 0
    versions = (yield Cold.one(statements(schema).applied, {}, fetch=True))[0]
    return max((r["version"] for r in versions), default=0)
