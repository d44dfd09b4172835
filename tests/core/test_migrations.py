"""Each schema migration runs in a transaction of its own, with its version recorded inside
it; a migration that could not run in a transaction cannot be declared."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import pytest

from langgraph_durable._core import migrate
from langgraph_durable._core.requests import Cold
from langgraph_durable._core.sql import CORE_MIGRATIONS, Migration
from langgraph_durable._core.sql.ledger import LEDGER_MIGRATIONS
from langgraph_durable._core.sql.sweep import RETENTION_MIGRATIONS

ALL = sorted(CORE_MIGRATIONS + LEDGER_MIGRATIONS + RETENTION_MIGRATIONS, key=lambda m: m.version)


def test_a_migration_has_no_way_to_leave_its_transaction() -> None:
    """`Migration` takes no ``transactional`` option (one that nothing honoured), and no
    migration holds a statement Postgres refuses inside a transaction."""
    assert [f.name for f in dataclasses.fields(Migration)] == ["version", "name", "sql"]
    with pytest.raises(TypeError):
        Migration(9, "x", "SELECT 1", transactional=False)  # type: ignore[call-arg]
    refused = re.compile(r"\bCONCURRENTLY\b|\bVACUUM\b|\bALTER SYSTEM\b", re.I)
    assert [m.version for m in ALL if refused.search(m.sql)] == []


def test_setup_applies_each_missing_migration_in_one_request_of_its_own() -> None:
    """After the lock and the bookkeeping table, every missing migration is one Postgres
    request (one transaction): its function, then the call that applies and records it."""
    op = migrate.setup("s", ALL)
    requests: list[Cold] = [next(op)]
    replies: list[Any] = [[None, None, None], [None, [{"version": ALL[0].version}]]]
    replies += [[None, [{"applied": True}]] for _ in ALL[1:]]
    applied = None
    for reply in replies:
        try:
            requests.append(op.send(reply))
        except StopIteration as stop:
            applied = stop.value
            break
    assert applied == [m.version for m in ALL[1:]]
    per_migration = requests[2:]
    assert len(per_migration) == len(ALL) - 1
    for request, migration in zip(per_migration, ALL[1:], strict=True):
        assert isinstance(request, Cold) and len(request.statements) == 2
        body = request.statements[0].query.as_string(None)
        assert f"VALUES ({migration.version}," in body
