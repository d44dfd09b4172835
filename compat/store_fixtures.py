"""The store fixtures LangGraph's Postgres store tests get instead of theirs: a set-up
`DurableStore` on a schema and key prefix of its own, dropped after the test, with the TTL
config their fixture uses."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import psycopg
import redis

from langgraph_durable import DurableStore

REDIS_URL = os.environ.get("LGD_REDIS_URL", "redis://127.0.0.1:6379/0")
POSTGRES_URL = os.environ.get("LGD_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
# a Postgres with pgvector for the semantic search tests (compat.store_run sets it)
VECTOR_POSTGRES_URL = os.environ.get("LGD_VECTOR_POSTGRES_URL", POSTGRES_URL)
TTL_MINUTES = 6 / 60
TTL: Any = {"default_ttl": TTL_MINUTES, "refresh_on_read": True,
            "sweep_interval_minutes": TTL_MINUTES / 2}


def _names() -> tuple[str, str]:
    tag = uuid.uuid4().hex[:10]
    return f"lgdc_store_{tag}", f"lgdc-store-{tag}"


def _drop(schema: str, prefix: str, postgres_url: str = POSTGRES_URL) -> None:
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    client = redis.Redis.from_url(REDIS_URL)
    for key in client.scan_iter(match=f"{prefix}:*", count=1000):
        client.delete(key)
    client.close()


@contextmanager
def durable_store(postgres_url: str = POSTGRES_URL, **options: Any) -> Iterator[DurableStore]:
    """A set-up store of its own, dropped on exit."""
    schema, prefix = _names()
    options.setdefault("ttl", TTL)
    try:
        with DurableStore.from_conn_string(REDIS_URL, postgres_url, schema=schema,
                                           key_prefix=prefix, **options) as store:
            yield store
    finally:
        _drop(schema, prefix, postgres_url)


@asynccontextmanager
async def adurable_store(postgres_url: str = POSTGRES_URL,
                         **options: Any) -> AsyncIterator[DurableStore]:
    """Async twin of `durable_store`."""
    schema, prefix = _names()
    options.setdefault("ttl", TTL)
    try:
        async with DurableStore.afrom_conn_string(REDIS_URL, postgres_url, schema=schema,
                                                  key_prefix=prefix, **options) as store:
            yield store
    finally:
        _drop(schema, prefix, postgres_url)


# The suite's `_create_vector_store` (a PostgresStore with an index, on a database of its
# own): a DurableStore with the same index on the pgvector Postgres, on a schema of its own.
def _index(vector_type: str, distance_type: str, embeddings: Any,
           text_fields: list[str] | None) -> dict[str, Any]:
    return {"dims": embeddings.dims, "embed": embeddings, "fields": text_fields,
            "ann_index_config": {"vector_type": vector_type}, "distance_type": distance_type}


@contextmanager
def create_vector_store(vector_type: str, distance_type: str, fake_embeddings: Any,
                        text_fields: list[str] | None = None,
                        enable_ttl: bool = True) -> Iterator[DurableStore]:
    """A set-up store with the suite's index (and TTL config), dropped on exit."""
    ttl = {"default_ttl": 2, "refresh_on_read": True} if enable_ttl else None
    with durable_store(VECTOR_POSTGRES_URL, ttl=ttl, index=_index(
            vector_type, distance_type, fake_embeddings, text_fields)) as store:
        store.setup()  # a second setup changes nothing
        yield store


@asynccontextmanager
async def acreate_vector_store(vector_type: str, distance_type: str, fake_embeddings: Any,
                               text_fields: list[str] | None = None
                               ) -> AsyncIterator[DurableStore]:
    """Async twin of `create_vector_store` (the async suite's has no TTL)."""
    async with adurable_store(VECTOR_POSTGRES_URL, ttl=None, index=_index(
            vector_type, distance_type, fake_embeddings, text_fields)) as store:
        await store.asetup()
        yield store


# The suite's row helpers read PostgresStore's table through its private cursor; these
# do the same on DurableStore's table (appended to the test modules by compat.store_run).
def _row(store: DurableStore, ns: tuple[str, ...], key: str, query: str) -> Any:
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        return conn.execute(query.format(table=f'"{store.config.schema}".lgd_store_items'),
                            (list(ns), key)).fetchone()


def expire_now(store: DurableStore, ns: tuple[str, ...], key: str) -> None:
    """Backdate an item's expiry without deleting it."""
    _row(store, ns, key, "UPDATE {table} SET expires_at = now() - interval '1 minute' "
         "WHERE namespace = %s AND key = %s RETURNING 1")


def row_exists(store: DurableStore, ns: tuple[str, ...], key: str) -> bool:
    """Whether the item's row is there, expired or not."""
    return bool(_row(store, ns, key, "SELECT count(*) FROM {table} "
                     "WHERE namespace = %s AND key = %s")[0] == 1)


def stored_expires_at(store: DurableStore, ns: tuple[str, ...], key: str) -> Any:
    """The item's stored expiry."""
    return _row(store, ns, key, "SELECT expires_at FROM {table} "
                "WHERE namespace = %s AND key = %s")[0]
