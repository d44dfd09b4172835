"""An application that already has its Redis client and Postgres pool passes them in: the
saver uses them as they are (whatever their row factory or autocommit setting), never
closes them, and says clearly when one cannot serve a caller (another event loop, the
other flavour, a pool not open, a client that decodes replies, a forked child)."""

from __future__ import annotations

import asyncio
import multiprocessing
from collections.abc import Iterator
from typing import Any

import psycopg_pool
import pytest
import redis
import redis.asyncio

from langgraph_durable import DurableSaver
from langgraph_durable.errors import ConfigurationError
from tests.support.checkpoints import put_value
from tests.support.servers import POSTGRES_URL, REDIS_URL

THREAD = {"configurable": {"thread_id": "t-byo", "checkpoint_ns": ""}}


@pytest.fixture
def no_env_urls(monkeypatch: pytest.MonkeyPatch) -> None:
    """Neither URL comes from the environment: only what the test passes counts."""
    monkeypatch.delenv("LGD_REDIS_URL", raising=False)
    monkeypatch.delenv("LGD_POSTGRES_URL", raising=False)


@pytest.fixture
def own_clients() -> Iterator[tuple[redis.Redis, psycopg_pool.ConnectionPool[Any]]]:
    """A plain client and a pool with psycopg's defaults: tuple rows, no autocommit."""
    client = redis.Redis.from_url(REDIS_URL)
    pool: psycopg_pool.ConnectionPool[Any] = psycopg_pool.ConnectionPool(
        POSTGRES_URL, min_size=1, max_size=4, open=True)
    yield client, pool
    pool.close()
    client.close()


def _value(saver: DurableSaver) -> object:
    found = saver.get_tuple(THREAD)
    assert found is not None
    return found.checkpoint["channel_values"]["value"]


def test_blocking_callers_use_the_clients_passed_in_and_leave_them_open(
        own_clients: tuple[redis.Redis, psycopg_pool.ConnectionPool[Any]],
        namespace: tuple[str, str], write_mode: str, no_env_urls: None) -> None:
    """setup, writes, reads, history and delete run on the application's client and pool
    (a pool with tuple rows and without autocommit); after ``close()`` both still work."""
    client, pool = own_clients
    schema, prefix = namespace
    saver = DurableSaver(redis_client=client, postgres_pool=pool, schema=schema,
                         key_prefix=prefix, write_mode=write_mode)  # type: ignore[arg-type]
    saver.setup()
    for value in range(3):
        put_value(saver, "t-byo", value)
    saver.flush()
    assert _value(saver) == 2
    assert len(list(saver.list(THREAD))) == 3
    assert any(True for _ in client.scan_iter(match=f"{prefix}*"))
    with pool.connection() as conn:
        row = conn.execute(f'SELECT count(*) FROM "{schema}".lgd_checkpoints '
                           "WHERE thread_id = 't-byo'").fetchone()
    assert row == (3,)
    saver.delete_thread("t-byo")
    assert saver.get_tuple(THREAD) is None
    saver.close()
    assert client.ping() and not pool.closed
    with pool.connection() as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)


def test_async_clients_passed_in_serve_their_event_loop_and_no_other(
        namespace: tuple[str, str], no_env_urls: None) -> None:
    """``aredis_client`` and ``apostgres_pool`` serve the loop they were made on; the saver's
    ``aclose()`` leaves them open; a second event loop gets a `ConfigurationError` that
    says what to pass instead."""
    schema, prefix = namespace

    async def main() -> DurableSaver:
        aclient = redis.asyncio.Redis.from_url(REDIS_URL)
        apool: psycopg_pool.AsyncConnectionPool[Any] = psycopg_pool.AsyncConnectionPool(
            POSTGRES_URL, min_size=1, max_size=4, open=False)
        await apool.open()
        saver = DurableSaver(aredis_client=aclient, apostgres_pool=apool, schema=schema,
                             key_prefix=prefix)
        await saver.asetup()
        config = await saver.aput(THREAD, _checkpoint("async"), {"step": 1}, {"value": 1})
        found = await saver.aget_tuple(config)
        assert found is not None and found.checkpoint["channel_values"]["value"] == "async"
        await saver.aclose()
        assert await aclient.ping() and not apool.closed
        await apool.close()
        await aclient.aclose()
        return saver

    saver = asyncio.run(main())
    with pytest.raises(ConfigurationError, match="event loop"):
        asyncio.run(saver.aget_tuple(THREAD))
    with pytest.raises(ConfigurationError, match="redis_client"):
        saver.get_tuple(THREAD)  # blocking callers: no client of theirs, no URL to build one


def _checkpoint(value: object) -> Any:
    from langgraph.checkpoint.base import empty_checkpoint
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"value": value}
    checkpoint["channel_versions"] = {"value": 1}
    return checkpoint


def test_the_other_flavour_is_built_from_a_url_when_one_is_given(
        own_clients: tuple[redis.Redis, psycopg_pool.ConnectionPool[Any]],
        namespace: tuple[str, str]) -> None:
    """Blocking clients passed in plus both URLs: async callers get clients of their own
    loop, built from the URLs, and see what the blocking callers wrote."""
    client, pool = own_clients
    schema, prefix = namespace
    with DurableSaver(REDIS_URL, POSTGRES_URL, redis_client=client, postgres_pool=pool,
                      schema=schema, key_prefix=prefix) as saver:
        saver.setup()
        put_value(saver, "t-byo", "mixed")
        found = asyncio.run(saver.aget_tuple(THREAD))
        assert found is not None and found.checkpoint["channel_values"]["value"] == "mixed"


def test_clients_that_cannot_serve_are_refused_with_the_reason(
        own_clients: tuple[redis.Redis, psycopg_pool.ConnectionPool[Any]],
        namespace: tuple[str, str]) -> None:
    """A client that decodes replies to text, a pool that is not open and an object of the
    wrong kind each raise `ConfigurationError` naming the argument."""
    client, _ = own_clients
    schema, prefix = namespace
    decoding = redis.Redis.from_url(REDIS_URL, decode_responses=True)
    with pytest.raises(ConfigurationError, match="decode_responses"):
        DurableSaver(redis_client=decoding, schema=schema, key_prefix=prefix)
    decoding.close()
    with pytest.raises(ConfigurationError, match="postgres_pool must be"):
        DurableSaver(postgres_pool=client, schema=schema,  # type: ignore[arg-type]
                     key_prefix=prefix)
    closed: psycopg_pool.ConnectionPool[Any] = psycopg_pool.ConnectionPool(
        POSTGRES_URL, open=False)
    saver = DurableSaver(redis_client=client, postgres_pool=closed, schema=schema,
                         key_prefix=prefix)
    with pytest.raises(ConfigurationError, match="not open"):
        saver.setup()
    saver.close()


def _use_in_child(saver: DurableSaver, answer: Any) -> None:
    try:
        saver.delete_thread("t-other")  # a write: Redis and Postgres both
        assert _value(saver) == "parent"
        answer.put("served")
    except ConfigurationError as exc:
        answer.put(str(exc))


@pytest.mark.parametrize("postgres", ["pool passed in", "url"])
def test_a_forked_child_keeps_the_redis_client_but_not_the_parents_postgres_pool(
        own_clients: tuple[redis.Redis, psycopg_pool.ConnectionPool[Any]],
        namespace: tuple[str, str], no_env_urls: None, postgres: str) -> None:
    """In a child made by ``fork()``, a Redis client passed in goes on working (redis-py
    reconnects in the new process) while a Postgres pool passed in belongs to the parent
    (its sessions and threads): the saver refuses it, saying what to do, instead of sharing
    the parent's sessions. With a URL instead, the child makes a pool of its own."""
    client, pool = own_clients
    schema, prefix = namespace
    cold: dict[str, Any] = ({"postgres_pool": pool} if postgres == "pool passed in"
                            else {"postgres_url": POSTGRES_URL})
    saver = DurableSaver(redis_client=client, schema=schema, key_prefix=prefix, **cold)
    saver.setup()
    put_value(saver, "t-byo", "parent")
    context = multiprocessing.get_context("fork")
    answer = context.Queue()
    child = context.Process(target=_use_in_child, args=(saver, answer))
    child.start()
    message = answer.get(timeout=30)
    child.join(30)
    if postgres == "url":
        assert message == "served"
    else:
        assert "forked" in message and "postgres_pool" in message
    assert _value(saver) == "parent"  # the parent's saver is untouched
    saver.close()
