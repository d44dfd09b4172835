"""Store fixtures: set-up stores on the module's own Postgres schema and Redis prefix."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from langgraph_durable import DurableStore
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
