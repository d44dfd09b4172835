"""The engine: runs the core's operations for one saver.

It holds the `Context` every operation reads, the blocking clients (shared by all threads)
and the asyncio clients of each event loop (a loop's clients are closed when the loop shuts
down, so successive ``asyncio.run`` calls keep working and leave no socket open), probes
the hot tier when its breaker says so, answers the requests that ask the operating system
(`OwnerGone`), and keeps the leases of the tool calls running in this process. In a child
made by ``fork()`` it renews itself before the child runs anything: clients, heartbeats
and locks of the child's own (`Engine._forked`). `DurableSaver`, `Ledger`, the flusher,
`DurableTool` and the CLI all run operations through ``saver.engine``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import weakref
from collections.abc import (
    AsyncGenerator,
    Awaitable,
    Callable,
    Generator,
    Iterator,
    Mapping,
    Sequence,
)
from contextlib import contextmanager
from typing import Any, TypeVar

import psycopg_pool
import redis
import redis.asyncio
from langgraph.checkpoint.serde.base import SerializerProtocol

from langgraph_durable._core import hot, inspection, journal, migrate, ops, outage, reads
from langgraph_durable._core.context import Breaker, Context, MarkClock
from langgraph_durable._core.journal import DeadLetter as DeadLetter  # `dead_letters`' type
from langgraph_durable._core.ledger import OwnerGone
from langgraph_durable._core.seal import Seal
from langgraph_durable._core.sql import Migration, Statements
from langgraph_durable._tiers import aio, clients, host, sync
from langgraph_durable._tiers.common import (
    AsyncEffects,
    Effects,
    RedisCheck,
    learner,
    probe_cold,
)
from langgraph_durable._tiers.leases import Leases
from langgraph_durable.config import SaverConfig, seconds
from langgraph_durable.errors import ConfigurationError, TierUnavailableError

T = TypeVar("T")
logger = logging.getLogger("langgraph_durable")
Operation = Generator[Any, Any, T]  # an `Op`, or one that also yields tool effects


class Engine:
    """Runs operations with the blocking (`run`) or the current event loop's (`arun`)
    clients. Safe to share between threads and event loops."""

    def __init__(self, config: SaverConfig, serde: SerializerProtocol, *,
                 redis_client: redis.Redis | None = None,
                 aredis_client: redis.asyncio.Redis | None = None,
                 postgres_pool: psycopg_pool.ConnectionPool[Any] | None = None,
                 apostgres_pool: psycopg_pool.AsyncConnectionPool[Any] | None = None,
                 redis_url_given: bool = True, postgres_url_given: bool = True) -> None:
        """The clients passed in serve their flavour as they are (never closed here);
        the other flavour's are built from the tier's URL when one was given
        (``*_url_given``), else using that flavour raises `ConfigurationError`.

        Raises:
            ConfigurationError: a client passed in is of the wrong kind.
        """
        self.config = config
        self.provided = clients.Provided(
            redis=redis_client, aredis=aredis_client,
            postgres=postgres_pool, apostgres=apostgres_pool,
            redis_url=redis_url_given, postgres_url=postgres_url_given)
        # the one event loop async clients passed in serve (they are bound to it)
        self._provided_loop: weakref.ref[asyncio.AbstractEventLoop] | None = None
        self.context = Context(
            config=config,
            statements=Statements(config.schema),
            serde=serde,
            breaker=Breaker(seconds(config.breaker_cooldown)),
            marks=MarkClock(seconds(config.stale_poll_interval)),
            cold=Breaker(seconds(config.breaker_cooldown)),
            consumer=host.consumer_name(),
            seal=Seal.of(config),
        )
        self.leases = Leases(self.run, self.context)
        self._lock = threading.Lock()
        self._learn = learner(self.context, self.config)
        self._sync: sync.Tiers | None = None
        # each loop's clients, with the suspended generator that closes them (`_closer`)
        self._aio: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, tuple[aio.Tiers, AsyncGenerator[None, None]]
        ] = weakref.WeakKeyDictionary()
        # which Redis process the hot data was checked in (`hot.check_redis`)
        self.redis_check = RedisCheck(
            lambda run_id, token: hot.check_redis(self.context, run_id, token),
            lambda run_id, token: hot.abandon_check(self.context, run_id, token))
        self._fork_hooks: list[Callable[[], None]] = []
        self._tasks: set[asyncio.Future[None]] = set()  # background probes and polls
        _ENGINES.add(self)

    # ------------------------------------------------------------------ clients

    def tiers(self) -> sync.Tiers:
        """The blocking clients, opened on first use."""
        if self._sync is None:
            with self._lock:
                if self._sync is None:
                    tiers = sync.Tiers(self.config, self.context.latencies, self.provided,
                                       self._learn, self.context.cold, self.redis_check)
                    try:
                        failed = tiers.open(detect=self.context.breaker.allows())
                    except BaseException:  # e.g. a prefix laid out with other shards
                        tiers.close()
                        raise
                    if failed is not None:
                        outage.hot_failed(self.context, failed)
                    self._sync = tiers
        return self._sync

    async def atiers(self) -> aio.Tiers:
        """The running event loop's clients, opened on first use and closed when the loop
        shuts down (see `_closer`)."""
        loop = asyncio.get_running_loop()
        entry = self._aio.get(loop)
        if entry is None:
            self._bind_provided(loop)
            fresh = aio.Tiers(self.config, self.context.latencies, self.provided,
                               self._learn, self.context.cold, self.redis_check)
            try:
                failed = await fresh.open(detect=self.context.breaker.allows())
            except BaseException:  # e.g. a prefix laid out with other shards
                await fresh.close()
                raise
            if failed is not None:
                outage.hot_failed(self.context, failed)
            closer = self._closer(fresh)
            entry = self._aio.setdefault(loop, (fresh, closer))  # two first calls may race
            await closer.__anext__()  # now the loop knows it; the loser's closes at once
            if entry[0] is not fresh:
                await closer.aclose()
        return entry[0]

    def _bind_provided(self, loop: asyncio.AbstractEventLoop) -> None:
        """Tie the async clients passed in to the first event loop that uses them.

        Raises:
            ConfigurationError: they are already tied to another loop.
        """
        if self.provided.aredis is None and self.provided.apostgres is None:
            return
        if self._provided_loop is None:
            self._provided_loop = weakref.ref(loop)
        elif self._provided_loop() is not loop:
            raise ConfigurationError(
                "aredis_client / apostgres_pool serve the event loop that first used them "
                "(a redis.asyncio client or an async pool works on one loop only); this is "
                "another loop: pass redis_url / postgres_url instead and the saver makes "
                "clients for each loop")

    async def _closer(self, tiers: aio.Tiers) -> AsyncGenerator[None, None]:
        """Close ``tiers`` when this generator is closed: by `aclose`, or by the event loop's
        ``shutdown_asyncgens()``, which ``asyncio.run`` (and every `asyncio.Runner`) calls
        before it closes the loop. A loop closed without it leaves its sockets to the
        garbage collector."""
        try:
            yield
        finally:
            loop = asyncio.get_running_loop()
            entry = self._aio.get(loop)
            if entry is not None and entry[0] is tiers:
                del self._aio[loop]
            await tiers.close()

    @property
    def has_blocking_clients(self) -> bool:
        """Whether `close` has blocking clients (or lease heartbeats) to close."""
        return self._sync is not None

    def close(self) -> None:
        """Stop the lease heartbeats, then close the blocking clients."""
        self.leases.close()
        with self._lock:
            tiers, self._sync = self._sync, None
        if tiers is not None:
            tiers.close()

    async def aclose(self) -> None:
        """Close the running event loop's clients."""
        entry = self._aio.pop(asyncio.get_running_loop(), None)
        if entry is not None:
            await entry[1].aclose()

    def check_cold(self) -> None:
        """Fail fast, with the reason, when Postgres cannot be reached (see `probe_cold`);
        a pool passed in is the application's to check."""
        if self.provided.postgres is None:
            self._checked_cold(probe_cold)

    async def acheck_cold(self) -> None:
        """Async twin of `check_cold` (the probe runs in a worker thread)."""
        if self.provided.apostgres is None:
            await asyncio.to_thread(self._checked_cold, probe_cold)

    def _checked_cold(self, probe: Callable[[SaverConfig], None]) -> None:
        """Run ``probe``; a Postgres it found silent opens the cold breaker, so the calls
        that follow do not wait for it again within the cooldown."""
        try:
            probe(self.config)
        except TierUnavailableError as exc:
            self.context.cold.failure(exc)
            raise
        self.context.cold.recovered()

    # ------------------------------------------------------------------ fork()

    def after_fork(self, hook: Callable[[], None]) -> None:
        """Call ``hook`` in a child process after ``fork()``, once the engine renewed itself
        (the saver forgets its flusher there)."""
        self._fork_hooks.append(hook)

    def _forked(self) -> None:
        """In a child after ``fork()``: replace what the fork copied but cannot use.

        The parent's connections and pool threads: its sockets are shared with the parent,
        and a pool's workers did not come along. They are set aside, never used nor closed
        here (closing would end the parent's sessions); clients of this process's own open
        on first use. Redis clients passed in go on (redis-py reconnects in a new process);
        Postgres pools passed in are the parent's, and using them raises (`clients.Provided`).
        The heartbeat thread did not come along either, and the parent's
        running calls are not this process's. Locks another thread may have held are new.
        """
        _INHERITED.append((self._sync, list(self._aio.values())))
        self._lock = threading.Lock()
        self._learn = learner(self.context, self.config)  # with a new lock
        self._sync = None
        self._aio = weakref.WeakKeyDictionary()
        self.provided = self.provided.forked()
        self.leases = Leases(self.run, self.context)
        self.context.forked(host.consumer_name())
        for hook in self._fork_hooks:
            hook()

    # ------------------------------------------------------------------ running

    def run(self, op: Operation[T], effects: Effects | None = None) -> T:
        """Run an operation with the blocking clients; ``effects`` answers its tool effects.

        Before it: a hot tier whose breaker is open is probed (and recovered) in the
        background once per cooldown; stale marks this process must apply first
        (`MarkClock.urgent`) are applied, unless Postgres did not answer a moment ago (its
        breaker, `Context.cold`, is open); periodic ones, and those, are applied in the
        background (`hot.poll_marks`). The operation waits for a probe or a periodic poll
        at most `PROBE_GRACE`: tiers that answer finish it within that, and the operation
        goes on with its outcome (a Redis back in use, another process's write seen); a
        tier that does not answer costs the operation no more, unless it needs that tier.

        Raises:
            TierUnavailableError: a tier the operation needs is unreachable.
        """
        tiers = self.tiers()
        ctx = self.context
        if ctx.breaker.should_probe():
            _background(lambda: tiers.run(ops.recover_hot(ctx), _unhandled), ctx.breaker,
                        wait=self._grace)
        elif ctx.marks.urgent() and ctx.cold.allows():
            tiers.run(ops.poll_marks(ctx), _unhandled)
        elif ctx.marks.claim():
            _background(lambda: tiers.run(ops.poll_marks(ctx), _unhandled), None,
                        wait=self._grace)
        return tiers.run(op, _host_first(effects or _unhandled))

    async def arun(self, op: Operation[T], effects: AsyncEffects | None = None) -> T:
        """Async twin of `run`: the running loop's clients; ``effects`` is awaited. The
        background probes and polls are tasks of the running loop."""
        tiers = await self.atiers()
        ctx = self.context
        if ctx.breaker.should_probe():
            await self._abackground(tiers.run(ops.recover_hot(ctx), _aunhandled), ctx.breaker,
                                    wait=self._grace)
        elif ctx.marks.urgent() and ctx.cold.allows():
            await tiers.run(ops.poll_marks(ctx), _aunhandled)
        elif ctx.marks.claim():
            await self._abackground(tiers.run(ops.poll_marks(ctx), _aunhandled), None,
                                    wait=self._grace)
        return await tiers.run(op, _ahost_first(effects or _aunhandled))

    @property
    def _grace(self) -> float:
        return min(PROBE_GRACE, seconds(self.config.tier_timeout))

    async def _abackground(self, work: Awaitable[Any], breaker: Breaker | None, *,
                           wait: float) -> None:
        """Run ``work`` as a task of the running loop, waiting for it at most ``wait``
        seconds; a probe (``breaker`` given) that ends without a verdict leaves the
        breaker open for the next cooldown."""

        async def guarded() -> None:
            try:
                await work
            except Exception as exc:  # in the background: nobody else would hear of it
                logger.debug("background check failed: %r", exc)
            finally:
                if breaker is not None:
                    breaker.probe_ended()

        task = asyncio.ensure_future(guarded())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        if wait > 0:
            await asyncio.wait((task,), timeout=wait)

    # ------------------------------------------------------------------ this process

    @property
    def owner(self) -> str:
        """This process as a tool-call lease owner (``"host:pid:random"``)."""
        return host.process_owner().text

    @contextmanager
    def handling(self, key: str) -> Iterator[None]:
        """Mark a tool call as handled by this process from before its claim until after its
        outcome, so a concurrent caller here never takes a live call for a dead one."""
        host.ACTIVE.enter(key)
        try:
            yield
        finally:
            host.ACTIVE.leave(key)

    # ------------------------------------------------------------------ for operators

    def schema_version(self) -> int:
        """The schema's migration version (0: not set up)."""
        return self.run(migrate.current_version(self.config.schema))

    def migrate(self, migrations: Sequence[Migration]) -> list[int]:
        """Apply the missing migrations; returns the versions applied."""
        return self.run(migrate.setup(self.config.schema, migrations))

    def thread_summaries(self, *, thread_ids: Sequence[str] | None = None,
                         metadata: Mapping[str, Any] | None = None,
                         limit: int) -> tuple[int, list[inspection.ThreadSummary]]:
        """The schema's thread count and a page of per-thread summaries (Postgres only);
        ``metadata`` keeps the threads with a checkpoint whose metadata contains it."""
        return self.run(inspection.thread_summaries(
            self.config.schema, thread_ids=thread_ids, metadata=metadata, limit=limit))

    def checkpoint_sizes(self, thread_id: str, *, checkpoint_ns: str | None,
                         limit: int | None) -> list[inspection.CheckpointSize]:
        """Bytes each of a thread's checkpoints added, newest first (Postgres only)."""
        return self.run(inspection.checkpoint_sizes(
            self.config.schema, thread_id, checkpoint_ns=checkpoint_ns, limit=limit))

    def match_checkpoint(self, thread_id: str, checkpoint_ns: str, fragment: str) -> list[str]:
        """Ids of a thread's checkpoints that contain ``fragment``."""
        return self.run(inspection.match_checkpoint(self.config.schema, thread_id,
                                                    checkpoint_ns, fragment))

    @staticmethod
    def metadata_matches(metadata: Mapping[str, Any], where: Mapping[str, Any]) -> bool:
        """Whether checkpoint ``metadata`` contains ``where`` as a ``list`` filter (and
        Postgres' ``jsonb @>``) decides it."""
        return reads.contains(dict(metadata), dict(where))

    def dead_letters(self, limit: int) -> list[DeadLetter]:
        """The prefix's dead letters (write-behind journal entries Postgres rejected), at
        most ``limit``."""
        return self.run(journal.dead_letters(self.context, limit))

    def resolve_dead_letter(self, letter_id: str, action: str) -> str:
        """``action="retry"``: put a dead letter back on the journal; returns its new entry
        id. ``"drop"``: delete it; returns ``"dropped"``. ``""``: there is no such letter.

        Raises:
            ConfigurationError: ``action`` is neither, or the letter cannot be retried.
        """
        return self.run(journal.resolve_dead_letter(self.context, letter_id, action))


# Every engine of this process, renewed in a child after ``fork()`` (`Engine._forked`).
_ENGINES: weakref.WeakSet[Engine] = weakref.WeakSet()

# The parent's clients a forked child inherited: referenced for the child's lifetime so no
# destructor here runs on them (a pool's would wait on threads that did not come along).
_INHERITED: list[object] = []


def _after_fork_in_child() -> None:
    host.forked()
    for engine in list(_ENGINES):
        engine._forked()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _host_first(effects: Effects) -> Effects:
    """Answer what only this host knows (`OwnerGone`); hand the other effects on."""

    def answer(request: Any) -> Any:
        if isinstance(request, OwnerGone):
            return host.owner_gone(request.owner, request.key, request.asker)
        return effects(request)

    return answer


def _ahost_first(effects: AsyncEffects) -> AsyncEffects:
    """Async twin of `_host_first`."""

    async def answer(request: Any) -> Any:
        if isinstance(request, OwnerGone):  # reads /proc: off the event loop
            return await asyncio.to_thread(host.owner_gone, request.owner, request.key,
                                           request.asker)
        return await effects(request)

    return answer


# How long the operation that starts a probe of a tier whose breaker is open, or a periodic
# stale-marks poll, waits for it: tiers that answer finish it within that, and the
# operation goes on with its outcome; a tier still out costs that operation no more.
PROBE_GRACE = 0.25


def _background(work: Callable[[], Any], breaker: Breaker | None, *, wait: float) -> None:
    """Run ``work`` in a daemon thread, waiting for it at most ``wait`` seconds; a probe
    (``breaker`` given) that ends without a verdict leaves the breaker open for the next
    cooldown."""

    def guarded() -> None:
        try:
            work()
        except Exception as exc:  # in the background: nobody else would hear of it
            logger.debug("background check failed: %r", exc)
        finally:
            if breaker is not None:
                breaker.probe_ended()

    thread = threading.Thread(target=guarded, name="langgraph-durable-probe", daemon=True)
    thread.start()
    if wait > 0:
        thread.join(wait)


def _unhandled(request: Any) -> Any:
    raise TypeError(f"{type(request).__name__} needs an effects handler (engine.run(op, effects))")


async def _aunhandled(request: Any) -> Any:
    return _unhandled(request)
