"""Asyncio driver: redis.asyncio and a psycopg async pool.

The blocking driver (`sync.py`) is generated from this file by `scripts/unasync.py`:
edit this file, not `sync.py`.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import secrets
import time
from collections import deque
from collections.abc import AsyncIterator, Generator
from typing import Any, TypeVar

import psycopg
import psycopg.errors
import psycopg_pool
from psycopg.rows import dict_row
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError
from redis.exceptions import ResponseError as RedisResponseError

from langgraph_durable._core.context import Breaker, Latencies, deadline_ms
from langgraph_durable._core.keys import Layout
from langgraph_durable._core.requests import Cold, Hot, HotBatch, Pause
from langgraph_durable._core.scripts import thread
from langgraph_durable._tiers import clients
from langgraph_durable._tiers.cluster import AsyncSlots as Slots
from langgraph_durable._tiers.cluster import async_cluster_client as cluster_client
from langgraph_durable._tiers.cluster import check_layout, cluster_mode
from langgraph_durable._tiers.common import (
    COLD_ERRORS,
    HOT_ERRORS,
    REJECTED_ERRORS,
    AsyncEffects,
    Learn,
    RedisCheck,
    RedisReplaced,
    Scripts,
    cold_rejected,
    cold_silent,
    cold_unavailable,
    conn_was_broken,
    hot_unavailable,
    layout_learned,
    not_set_up,
    polluted,
    replica_wait,
    rolled_back_by_postgres,
    run_id_of,
    said_repaired,
    said_unchecked,
    told,
    wrong_type,
)
from langgraph_durable._tiers.pipeline import Io, ScriptCalls, Send, Steps
from langgraph_durable._tiers.watchdog import Watchdog
from langgraph_durable.config import SaverConfig, seconds
from langgraph_durable.errors import TierUnavailableError

# How often a transaction Postgres rolled back (a deadlock, a serialization failure) runs
# again before its error reaches the caller.
ROLLBACK_RETRIES = 3
# A request waiting for a busy pool past ``tier_timeout`` looks this often (seconds) whether
# another found Postgres silent meanwhile.
POOL_SLICE = 0.25

T = TypeVar("T")
# Redis connections a driver keeps out of its own pool for the next script (`Tiers._keep`).
HELD = 8
# The attribute of a Redis connection naming the Redis process (run id) it reached, None
# once it reconnected and until asked again (`Tiers._reached`).
REACHED = "lgd_run_id"
UNSEEN = object()


class Tiers:
    """Both tiers' clients for one event loop."""

    def __init__(self, config: SaverConfig, latencies: Latencies,
                 provided: clients.Provided | None = None, learn: Learn | None = None,
                 cold_breaker: Breaker | None = None,
                 redis_check: RedisCheck | None = None) -> None:
        self.latencies = latencies
        # which Redis process the saver's hot data was checked in (`_reached`)
        self.redis_check = redis_check
        # Postgres's breaker, shared by every driver of a saver (`cold`)
        self.cold_breaker = cold_breaker or Breaker(seconds(config.breaker_cooldown))
        self.watchdog = Watchdog(config)  # gives up on statements Postgres stopped answering
        self.config = config
        self.learn = learn or told(config)
        self.cluster: Any = None  # the cluster client, once Redis turned out to be one
        self.detected = False
        self._slots = Slots(config)
        self.clients = clients.for_loop(config, provided or clients.Provided())
        self.redis = self.clients.redis
        self.calls = ScriptCalls(Scripts(), replica_wait(config))
        self.pool = self.clients.postgres
        # connections kept out of the pool for the next script, each with the request whose
        # reply it owes (`Hot.wait` false) or None; a pool shared with the application
        # (passed in) lends one at most
        self._held: deque[tuple[Any, Hot | None]] = deque()
        self.held = HELD if self.clients.owns_redis else 1
        self._waiting: list[object] = []  # one token per caller waiting for the pool

    async def open(self, *, detect: bool = True) -> TierUnavailableError | None:
        """Open the pool and, with ``detect``, learn Redis's mode (`detect`); returns the
        error of a Redis that did not answer (learned again on first use), for the caller
        to open the breaker with, so no other request of the saver waits for it."""
        if self.clients.owns_postgres:
            await self.pool.open(wait=False)
        if not detect:
            return None
        try:
            await self.detect()
        except HOT_ERRORS as exc:
            return hot_unavailable(exc)
        return None

    async def detect(self) -> None:
        """Learn whether Redis is a cluster (the setting, checked against the server) and
        check the prefix's recorded key layout; a cluster gets its cluster client."""
        try:
            info = await self.redis.info("cluster")
        except RedisResponseError:  # INFO refused (a managed service's rules): the setting
            info = None
        cluster = cluster_mode(self.config, info, passed_in=not self.clients.owns_redis)
        if cluster and self.cluster is None:
            self.cluster = cluster_client(self.config)
        layout = self.learn(cluster)
        client = self.cluster or self.redis
        new = await client.set(layout.layout_key(), layout.describe(), nx=True)
        check_layout(layout, await client.get(layout.layout_key()))
        if new and self.cluster is None and self.redis_check is not None:
            # a prefix new to this Redis holds no data to check (`_reached`)
            with contextlib.suppress(RedisResponseError):  # INFO refused: checked on use
                run_id = run_id_of(await self.redis.info("server"))
                await client.set(layout.incarnation(), run_id, nx=True)
        self.detected = True

    async def run(self, op: Generator[Any, Any, T], effects: AsyncEffects) -> T:
        """Drive an operation to its end: execute each storage request it yields, hand any
        other request (a tool effect) to ``effects``, send back the reply or throw in the error."""
        built = self.learn(None)  # the key layout the operation's requests are built with
        try:
            request = next(op)
            while True:
                try:
                    result = await self.execute(request, effects, built)
                except RedisReplaced as replaced:  # nothing was sent: once checked, again
                    try:
                        await self._check(replaced.run_id, effects)
                    except Exception as exc:
                        request = op.throw(exc)
                except Exception as exc:
                    request = op.throw(exc)
                else:
                    request = op.send(result)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]

    async def _check(self, run_id: str, effects: AsyncEffects) -> None:
        """Check the hot data of the Redis process ``run_id`` against Postgres
        (`RedisCheck`), with this task's scripts let through to it meanwhile. A check
        stopped midway by a cancellation (or an interrupt) releases its lock on the way
        out, as one that failed does, so the next caller checks at once rather than after
        the lock's lease."""
        check = self.redis_check
        assert check is not None  # only a driver with a check raises RedisReplaced
        lock = secrets.token_hex(8)
        token = check.checking.set(run_id)
        try:
            await self.run(check.check(run_id, lock), effects)
        except Exception:  # the check released its lock
            raise
        except BaseException:  # cancelled, interrupted: its own release did not run
            with contextlib.suppress(Exception):
                await self.run(check.abandon(run_id, lock), effects)
            raise
        finally:
            check.checking.reset(token)
        check.checked = run_id

    async def execute(
        self, request: Any, effects: AsyncEffects, built: Layout | None = None
    ) -> Any:
        started = time.perf_counter()
        if isinstance(request, (Hot, HotBatch)):
            result = await self.hot(request, built)
        elif isinstance(request, Cold):
            result = await self.cold(request)
        elif isinstance(request, Pause):
            return await asyncio.sleep(request.seconds)
        else:
            return await effects(request)
        self.latencies.record("cold" if isinstance(request, Cold) else "hot",
                              time.perf_counter() - started)
        return result

    async def hot(self, request: Hot | HotBatch, built: Layout | None = None) -> Any:
        """Run a script (`_hot`). One that fails because a key of the prefix holds another
        type (another client wrote it: WRONGTYPE) has its keys of another type deleted, as
        if evicted (`_repair`), and runs once more; failing so again, it raises
        `TierUnavailableError`. A script sent without waiting that met such a key has its
        keys repaired before the next script runs."""
        while self.calls.damaged:
            await self._repair(self.calls.damaged.pop())
        try:
            return await self._hot(request, built)
        except RedisResponseError as exc:
            if not wrong_type(exc):
                raise
            await self._repair(request)
        try:
            return await self._hot(request, built)
        except RedisResponseError as exc:
            if not wrong_type(exc):
                raise
            raise polluted(exc) from exc

    async def _repair(self, request: Hot | HotBatch) -> None:
        """Delete the keys of ``request`` that hold another type than the scripts keep
        there (`repair.lua`), and say so, once per key. An intents key holds one intent
        as long as any it lost could have lived."""
        failed = request.requests if isinstance(request, HotBatch) else (request,)
        for each in failed:
            repairs = thread.repairs(each, self.config.key_prefix, deadline_ms(self.config))
            if repairs:
                replies = await self._hot(HotBatch(tuple(repairs)))
                said_repaired(each.script.name,
                              [key for reply in replies for key in thread.repaired(reply)])

    async def _hot(self, request: Hot | HotBatch, built: Layout | None = None) -> Any:
        """Run a script on a kept or pooled connection (`_connection`), straight through the
        connection (redis-py's command path costs more than the round trip at small
        replies); a connection that fails is dropped and the call retried with the client's
        backoff. A script sent without waiting (`Hot.wait` false) returns None at once.
        A batch goes in one round trip (pipelined, each script with its source). On a
        cluster, see `_cluster_hot`. A request built with another key layout (``built``,
        when known) than the one learned since (Redis turned out to be a cluster) is not
        sent."""
        if not self.detected:
            try:
                await self.detect()
            except HOT_ERRORS as exc:
                raise (hot_unavailable(exc) or exc) from exc
        if built is not None and self.learn(None).cluster != built.cluster:
            raise layout_learned()
        if self.cluster is not None:
            return await self._cluster_hot(request)
        pool: Any = self.redis.connection_pool  # its connections, untyped in redis-py
        try:
            conn, owing = await self._connection(pool)
            try:
                reply = await conn.retry.call_with_retry(
                    lambda: self._script(conn, request, owing), lambda _: conn.disconnect())
            except BaseException as exc:
                # a reply left unread (a call cancelled midway, a batch stopped at its
                # first refusal) would be the next caller's: only a script's own refusal,
                # read whole, leaves the connection fit for reuse
                if isinstance(exc, RedisReplaced) or (
                        isinstance(exc, RedisResponseError) and isinstance(request, Hot)):
                    await pool.release(conn)
                else:
                    await self._drop(pool, conn)
                raise
            owed = request if isinstance(request, Hot) and not request.wait else None
            await self._keep(pool, conn, owed)
            return reply
        except HOT_ERRORS as exc:
            raise (hot_unavailable(exc) or exc) from exc

    async def _connection(self, pool: Any) -> tuple[Any, list[Hot]]:
        """A connection for the next script: the one kept last, with the request whose
        reply it still owes (`_script` reads that reply, once), else one from the pool."""
        try:
            conn, owed = self._held.pop()
        except IndexError:
            waiter = object()
            self._waiting.append(waiter)
            try:
                return await pool.get_connection(), []
            finally:
                self._waiting.remove(waiter)
        return conn, [] if owed is None else [owed]

    async def _keep(self, pool: Any, conn: Any, owed: Hot | None) -> None:
        """Keep ``conn`` for the next script instead of pooling it (a pool's checkout and
        return cost more than a small script's round trip), with the request whose reply
        it still owes (sent without waiting). Past `held` connections, the oldest is
        settled and goes back to the pool, and every kept one does while a caller waits for
        the pool (kept connections would otherwise starve it until ``pool_timeout``)."""
        self._held.append((conn, owed))
        while len(self._held) > (0 if self._waiting else self.held):
            try:
                oldest, sent = self._held.popleft()
            except IndexError:
                return
            await pool.release(await self._settled(pool, oldest, sent))

    async def _settled(self, pool: Any, conn: Any, owed: Hot | None) -> Any:
        """``conn`` once its owed reply, if any, is read (`pipeline.ScriptCalls.settle`).
        Stopped meanwhile (cancelled), the connection goes back to the pool closed
        (`_drop`)."""
        if owed is not None:
            try:
                await self._drive(conn, self.calls.settle(owed))
            except BaseException:
                await self._drop(pool, conn)
                raise
        return conn

    async def _drop(self, pool: Any, conn: Any) -> None:
        """Give back a connection whose call stopped midway: its reply stream is unknown,
        so it is closed first and reconnects on its next use."""
        await conn.disconnect()
        await pool.release(conn)

    async def _script(self, conn: Any, request: Hot | HotBatch, owed: list[Hot]) -> Any:
        """Send ``request`` on ``conn`` and read its reply (`pipeline.ScriptCalls.call`). A
        script ``conn`` still owes the reply of (``owed``) has that reply read too; it is
        taken from the list, so a retry does not read it again."""
        await self._reached(conn, owed)
        return await self._drive(conn, self.calls.call(request, owed.pop() if owed else None))

    @staticmethod
    async def _drive(conn: Any, steps: Steps[T]) -> T:
        """Carry out a script call's steps (`pipeline`) on ``conn``: all the driver does of
        the call is send, read and close. Nothing here connects: redis-py's send would
        reconnect a closed connection, or one whose health-check ``PING`` failed, to
        whatever Redis process answers now, which `_reached` has not asked about."""
        try:
            step = next(steps)
            while True:
                try:
                    if isinstance(step, Send):
                        if not conn.is_connected:
                            raise RedisConnectionError("the connection closed mid-call")
                        done = await conn.send_packed_command(step.packed, check_health=False)
                    elif step is Io.READ:
                        done = await conn.read_response()
                    else:
                        done = await conn.disconnect()
                except Exception as exc:
                    step = steps.throw(exc)
                else:
                    step = steps.send(done)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]

    async def _reached(self, conn: Any, owed: list[Hot]) -> None:
        """Connect ``conn`` if it is not, learn which Redis process it reached (``INFO
        server``'s run id, asked once per connection), and raise `RedisReplaced` if the
        saver's hot data was not checked in that process yet. A connection that was closed
        since it was kept owes nothing: that reply went with its socket. One idle past
        redis-py's ``health_check_interval`` is pinged here, and a failed ``PING``
        reconnects it here, before its run id is read (a Redis restarted meanwhile is
        another process), not in the middle of a script's send."""
        if not conn.is_connected:
            owed.clear()
            await conn.connect()
        elif not owed:  # (a reply owed would be read as the PING's)
            await conn.check_health()
        if self.redis_check is None:
            return
        run_id = getattr(conn, REACHED, UNSEEN)
        if run_id is UNSEEN:  # told of its reconnections from now on
            conn.register_connect_callback(self._reconnected)
        # asked once per connection, and again before a check of the answer kept: a
        # connection kept since a process that is gone (its socket dead, not yet seen so)
        # must not have that process checked in the one that answers now
        if not isinstance(run_id, str) or (not owed and not self.redis_check.allows(run_id)):
            await conn.send_command("INFO", "server")
            try:
                run_id = run_id_of(await conn.read_response())
            except RedisResponseError:  # INFO refused (a managed service's rules)
                run_id = ""
                said_unchecked()
            setattr(conn, REACHED, run_id)
        assert self.redis_check is not None
        if not self.redis_check.allows(run_id):
            raise RedisReplaced(run_id)

    def _reconnected(self, conn: Any) -> None:
        """redis-py's connect callback (a method: it keeps it weakly): ``conn`` may reach
        another Redis process now."""
        setattr(conn, REACHED, None)

    async def _cluster_hot(self, request: Hot | HotBatch) -> Any:
        """Run a script on the primary that owns its keys' slot (the cluster client routes
        ``EVAL``/``EVALSHA`` by their keys, follows MOVED/ASK and refreshes the topology
        after a failover). A node that lost its script cache gets the source. A batch runs
        its scripts one by one: redis-py's cluster pipeline asks a node for each ``EVAL``'s
        keys (``COMMAND GETKEYS``), a round trip more per script, and fails while that node
        is down. At most ``redis_max_connections`` calls are in flight (see `Slots`)."""
        if isinstance(request, HotBatch):
            return [await self._cluster_hot(each) for each in request.requests]
        scripts = self.calls.scripts
        try:
            await self._slots.acquire()
            try:
                try:
                    reply = await self.cluster.execute_command(*scripts.command(request))
                except NoScriptError:
                    command = scripts.command(request, source=True)
                    reply = await self.cluster.execute_command(*command)
            finally:
                self._slots.release()
            scripts.sent(request)
            return reply
        except HOT_ERRORS as exc:
            raise (hot_unavailable(exc) or exc) from exc

    async def cold(self, request: Cold) -> list[Any]:
        """Run a request's statements (in one transaction when several). Postgres's
        breaker (`cold_breaker`, one per saver): a request that found Postgres silent or
        unreachable opens it, and until its cooldown passed the others fail at once
        instead of waiting as long again; then requests try again (each within
        ``tier_timeout``), and the first answer closes it."""
        started = time.monotonic()
        breaker = self.cold_breaker
        if breaker.is_open and not breaker.cooled():
            raise cold_silent(breaker.reason)
        try:
            result = await self._cold(request, started=started)
        except TierUnavailableError as exc:
            if isinstance(exc.__cause__, psycopg.OperationalError) and rolled_back_by_postgres(
                    exc.__cause__):
                breaker.recovered()  # Postgres answered: it rolled the transaction back
            else:
                breaker.failure(exc, started=started)
            raise
        except Exception:
            breaker.recovered()  # Postgres answered (a refusal, a missing table)
            raise
        breaker.recovered()
        return result

    async def _cold(self, request: Cold, *, started: float, retry: bool = True,
                    rolled_back: int = 0) -> list[Any]:
        """`cold` without the breaker's bookkeeping. A request that waited for a pooled
        connection while another found Postgres silent (the breaker opened since it
        ``started``) fails at once: its statements would wait as long again."""
        watch = None  # set once a connection is lent: a failure from then on is its own
        try:
            async with self._pooled(started) as conn:
                if self.cold_breaker.opened_after(started):
                    raise cold_silent(self.cold_breaker.reason)
                watch = self.watchdog.watch(conn)
                try:
                    if len(request.statements) == 1 and conn.autocommit:
                        return [await self._execute(conn, request.statements[0])]
                    async with conn.transaction():
                        return [await self._execute(conn, s) for s in request.statements]
                finally:
                    self.watchdog.done(watch)
        except REJECTED_ERRORS as exc:
            raise cold_rejected(exc) from exc
        except psycopg.OperationalError as exc:
            # Postgres rolled the transaction back to break a deadlock between two of the
            # saver's own transactions (or a serialization failure): nothing of it was
            # committed, and running it again is what the caller asked for. A sign of
            # contention, not of Postgres being unavailable (`cold` keeps its breaker shut)
            if rolled_back_by_postgres(exc) and rolled_back < ROLLBACK_RETRIES:
                await asyncio.sleep(random.uniform(0.005, 0.025) * (rolled_back + 1))
                return await self._cold(request, started=started, retry=retry,
                                        rolled_back=rolled_back + 1)
            # a pooled connection that died (Postgres restarted, a proxy cut it): drop the
            # idle ones and try once more; a connection the pool could not make or lend
            # in time, or one the watchdog shut down, is Postgres not answering, and a
            # retry would only wait as long again
            if retry and watch is not None and not watch.severed and conn_was_broken(exc):
                await self.pool.check()
                return await self._cold(request, started=started, retry=False)
            raise cold_unavailable(exc) from exc
        except COLD_ERRORS as exc:
            raise cold_unavailable(exc) from exc
        except psycopg.errors.UndefinedTable as exc:
            raise not_set_up(exc) from exc

    @contextlib.asynccontextmanager
    async def _pooled(self, started: float) -> AsyncIterator[Any]:
        """A pooled Postgres connection. A psycopg pool has ``tier_timeout`` to lend one;
        past it the caller waits on, up to ``pool_timeout``, only if the pool is busy (it
        holds all the connections it may, every one lent out, and none failed to connect
        meanwhile); else Postgres does not answer and `psycopg_pool.PoolTimeout` is
        raised; while it waits on, a request that ``started`` before another found
        Postgres silent fails at once (`cold_silent`). The saver's pool for an event loop
        (`LoopPool`) connects in the caller, within ``tier_timeout`` (the connect
        timeout), and its wait is for a free slot."""
        total = seconds(self.config.pool_timeout)
        first = min(total, seconds(self.config.tier_timeout))
        stats = getattr(self.pool, "get_stats", None)
        if stats is None or first >= total:
            async with self.pool.connection() as conn:
                yield conn
            return
        errors = stats().get("connections_errors", 0)
        lent = False
        try:
            async with self.pool.connection(timeout=first) as conn:
                lent = True
                yield conn
            return
        except psycopg_pool.PoolTimeout:
            now = stats()
            if lent or now.get("connections_errors", 0) > errors or (
                    now.get("pool_size", 0) < now.get("pool_max", 0)):
                raise
        # busy: wait on in slices, and stop once another request found Postgres silent
        # (the connections it frees are broken, and new ones wait for Postgres too)
        deadline = time.monotonic() + total - first
        while not self.cold_breaker.opened_after(started):
            try:
                async with self.pool.connection(
                        timeout=max(0.001, min(POOL_SLICE, deadline - time.monotonic()))
                ) as conn:
                    lent = True
                    yield conn
                return
            except psycopg_pool.PoolTimeout:
                if lent or time.monotonic() >= deadline:
                    raise
        raise cold_silent(self.cold_breaker.reason)

    @staticmethod
    async def _execute(conn: psycopg.AsyncConnection[Any], statement: Any) -> Any:
        cursor = conn.cursor(row_factory=dict_row, binary=statement.binary)
        cursor = await cursor.execute(statement.query, statement.params)
        return await cursor.fetchall() if statement.fetch else None

    async def close(self) -> None:
        """Close the clients the saver made (never the ones passed in), once the Redis
        connections kept have read their owed replies and gone back to their pool."""
        pool: Any = self.redis.connection_pool
        while self._held:
            conn, owed = self._held.popleft()
            await pool.release(await self._settled(pool, conn, owed))
        if self.clients.owns_postgres:
            await self.pool.close()
        if self.clients.owns_redis:
            await self.redis.aclose()
            await self.redis.connection_pool.disconnect()
        if self.cluster is not None:
            await self.cluster.aclose()

