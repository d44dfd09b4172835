"""Store fixtures: set-up stores on the module's own Postgres schema and Redis prefix."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from langgraph_durable import DurableStore
from langgraph_durable.embedded import EmbeddedServers
from tests.support.servers import POSTGRES_URL, REDIS_URL

MakeStore = Callable[..., DurableStore]


@pytest.fixture
def make_store(namespace: tuple[str, str]) -> Iterator[MakeStore]:
    """A factory of set-up stores on this module's schema and prefix; closed after the test
    (every store a test makes shares the schema and prefix, like two processes would)."""
    schema, prefix = namespace
    made: list[DurableStore] = []

    def factory(**options: Any) -> DurableStore:
        options.setdefault("redis_url", REDIS_URL)
        store = DurableStore(postgres_url=POSTGRES_URL, key_prefix=prefix, schema=schema,
                             **options)
        store.setup()
        made.append(store)
        return store

    yield factory
    for store in made:
        store.close()


@pytest.fixture
def store(make_store: MakeStore) -> DurableStore:
    """One set-up store."""
    return make_store()


@pytest.fixture(scope="session")
def vector_postgres_url() -> Iterator[str]:
    """A Postgres with pgvector: the test servers' when it has the extension, else an
    embedded Postgres started for the session (its build ships pgvector), stopped after."""
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        available = conn.execute(
            "SELECT 1 FROM pg_available_extensions WHERE name = 'vector'").fetchone()
    if available:
        yield POSTGRES_URL
        return
    folder = Path(tempfile.mkdtemp(prefix="lgd-vector-"))
    folder.chmod(0o711)  # PostgreSQL's own account (as root) enters it
    try:
        with EmbeddedServers(folder / "data", startup_timeout=60) as servers:
            yield servers.postgres_url
    finally:
        shutil.rmtree(folder, ignore_errors=True)
