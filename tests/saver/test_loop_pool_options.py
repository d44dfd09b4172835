"""The event loop's connection pool honours every option it takes, and takes no other."""

from __future__ import annotations

import time

import psycopg_pool
import pytest

from langgraph_durable._tiers import clients
from langgraph_durable._tiers.loop_pool import LoopPool
from langgraph_durable.config import SaverConfig
from tests.support.servers import POSTGRES_URL, REDIS_URL


def test_options_the_pool_cannot_honour_are_refused() -> None:
    """``min_size`` (connections kept open in advance) and ``open`` are not accepted: a
    caller asking for them learns at once that it would not get them."""
    kwargs = {"max_size": 1, "timeout": 1.0, "kwargs": {}}
    with pytest.raises(TypeError, match="min_size"):
        LoopPool(POSTGRES_URL, min_size=1, **kwargs)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="open"):
        LoopPool(POSTGRES_URL, open=True, **kwargs)  # type: ignore[call-arg]


async def test_the_saver_pool_holds_its_size_and_timeout() -> None:
    """The pool made from a saver's settings lends at most ``postgres_max_connections`` at
    once, and the next caller gives up after ``pool_timeout`` seconds."""
    config = SaverConfig(redis_url=REDIS_URL, postgres_url=POSTGRES_URL,
                         postgres_max_connections=2, pool_timeout=0.5)
    pool = clients.for_loop(config, clients.Provided()).postgres
    assert isinstance(pool, LoopPool)
    try:
        async with pool.connection() as first, pool.connection() as second:
            assert first is not second
            started = time.monotonic()
            with pytest.raises(psycopg_pool.PoolTimeout, match=r"no connection free in 0\.5 s"):
                async with pool.connection():
                    pass
            assert 0.4 < time.monotonic() - started < 3.0
        async with pool.connection() as again:  # a lent connection came back
            assert (await (await again.execute("SELECT 1")).fetchone()) == {"?column?": 1}
    finally:
        await pool.close()
