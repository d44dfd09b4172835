"""The ``sync_checkpointer`` / ``async_checkpointer`` fixtures that replace upstream's, and
the ``sync_store`` / ``async_store`` ones of its graph-level store tests.

`compat.run` appends two lines to the extracted ``tests/conftest.py``::

    from compat.fixtures import async_checkpointer, sync_checkpointer
    from compat.fixtures import async_store, sync_store

which rebind the names after upstream defined them, so pytest registers these fixtures
(at the same conftest level) instead of upstream's memory/sqlite/postgres
parametrisation. Each has the single param ``PARAM_ID``: test ids read ``test_x[durable]``.
A store is a `DurableStore` on a schema and prefix of its own (`compat.store_fixtures`).

Every test gets a fresh `DurableSaver` with a Postgres schema ``lgc_<random>`` and a Redis
key prefix ``lgc-<random>`` of its own, set up before the test. After it the saver is
closed, its schema dropped and its prefix's keys deleted; nothing else is touched.

Environment: ``LGD_WRITE_MODE`` (``through`` or ``behind``, set by ``--mode``),
``LGD_REDIS_URL`` and ``LGD_POSTGRES_URL``.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Iterator
from typing import cast
from uuid import uuid4

import psycopg
import pytest
import redis

from compat import MODE_ENV, PARAM_ID
from compat.store_fixtures import adurable_store, durable_store
from langgraph_durable import DurableSaver, DurableStore
from langgraph_durable.config import WriteMode

REDIS_URL = os.environ.get("LGD_REDIS_URL", "redis://127.0.0.1:6379/0")
POSTGRES_URL = os.environ.get("LGD_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")


def _write_mode() -> WriteMode:
    """The write mode named by ``$LGD_WRITE_MODE``; a bad value stops the import (and so the
    run) rather than erroring every test."""
    mode = os.environ.get(MODE_ENV, "through")
    if mode not in ("through", "behind"):
        raise RuntimeError(f"{MODE_ENV} must be 'through' or 'behind', got {mode!r}")
    return cast(WriteMode, mode)


WRITE_MODE = _write_mode()


def new_saver() -> DurableSaver:
    """A saver over a schema and key prefix no other test uses (not set up yet)."""
    tag = uuid4().hex[:12]
    return DurableSaver(REDIS_URL, POSTGRES_URL, write_mode=WRITE_MODE,
                        schema=f"lgc_{tag}", key_prefix=f"lgc-{tag}")


def discard(saver: DurableSaver) -> None:
    """Drop the (closed) saver's own schema and delete its own prefix's Redis keys."""
    schema, prefix = saver.config.schema, saver.config.key_prefix
    assert schema.startswith("lgc_") and prefix.startswith("lgc-"), (schema, prefix)
    try:
        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    finally:
        client = redis.Redis.from_url(REDIS_URL)
        try:
            keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
            if keys:
                client.delete(*keys)
        finally:
            client.close()


@pytest.fixture(params=[PARAM_ID])
def sync_checkpointer() -> Iterator[DurableSaver]:
    """A fresh, set-up saver for a test that uses the blocking API."""
    saver = new_saver()
    try:
        saver.setup()
        yield saver
    finally:
        try:
            saver.close()
        finally:
            discard(saver)


@pytest.fixture(params=[PARAM_ID])
async def async_checkpointer() -> AsyncIterator[DurableSaver]:
    """A fresh, set-up saver for a test that uses the async API."""
    saver = new_saver()
    try:
        await saver.asetup()
        yield saver
    finally:
        try:
            await saver.aclose()
        finally:
            await asyncio.to_thread(discard, saver)


@pytest.fixture(params=[PARAM_ID])
def sync_store() -> Iterator[DurableStore]:
    """A fresh, set-up store (no TTL, no index, as upstream's) for a blocking test."""
    with durable_store(ttl=None) as store:
        yield store


@pytest.fixture(params=[PARAM_ID])
async def async_store() -> AsyncIterator[DurableStore]:
    """A fresh, set-up store for an async test."""
    async with adurable_store(ttl=None) as store:
        yield store
