"""A connection pool for one event loop that runs nothing in the background.

psycopg_pool's `AsyncConnectionPool` keeps worker tasks on the loop that opened it. A
saver outlives event loops (a script that calls ``asyncio.run`` twice, a notebook, pytest's
loop per test), and a loop that ends while such a worker is connecting can hang in its
shutdown. This pool connects in the caller's task, keeps idle connections in a list, and
bounds concurrency with a semaphore: when its loop ends there is no task to cancel.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import psycopg
import psycopg_pool
from psycopg.pq import TransactionStatus


class LoopPool:
    """The subset of `psycopg_pool.AsyncConnectionPool` the async driver uses. It takes
    only the options it honours: no ``min_size`` (it keeps no connection open in advance)
    and no ``open`` (there is nothing to start)."""

    def __init__(self, conninfo: str, *, max_size: int, timeout: float,
                 kwargs: dict[str, Any] | Callable[[], dict[str, Any]],
                 name: str | None = None) -> None:
        self.conninfo = conninfo
        self.timeout = timeout
        self.kwargs = kwargs
        self.name = name
        self._idle: list[psycopg.AsyncConnection[Any]] = []
        self._slots = asyncio.Semaphore(max_size)

    async def open(self, wait: bool = False) -> None:
        """Nothing to start: connections are made on demand."""

    @asynccontextmanager
    async def connection(self, timeout: float | None = None
                         ) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """Lend a connection; a broken one or one left in a transaction is discarded.

        Raises:
            psycopg_pool.PoolTimeout: no slot came free within ``timeout`` (default: the
                pool's).
        """
        wait = self.timeout if timeout is None else timeout
        try:
            await asyncio.wait_for(self._slots.acquire(), wait)
        except TimeoutError as exc:
            raise psycopg_pool.PoolTimeout(
                f"no connection free in {wait:.1f} s (pool {self.name!r})") from exc
        try:
            conn = self._idle.pop() if self._idle else await self._connect()
            try:
                yield conn
            finally:
                if not conn.closed and conn.info.transaction_status == TransactionStatus.IDLE:
                    self._idle.append(conn)
                else:
                    await conn.close()
        finally:
            self._slots.release()

    async def _connect(self) -> psycopg.AsyncConnection[Any]:
        """A new connection; settings given as a callable (fresh credentials) are asked
        for in a worker thread, so a slow token service never blocks the loop."""
        kwargs = await asyncio.to_thread(self.kwargs) if callable(self.kwargs) else self.kwargs
        return await psycopg.AsyncConnection.connect(self.conninfo, **kwargs)

    async def check(self) -> None:
        """Drop every idle connection (called after one was found broken)."""
        await self.close()

    async def close(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            await conn.close()
