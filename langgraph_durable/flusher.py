"""Write-behind flushers: a background thread inside each saver, and a standalone worker
that also sweeps (`Sweeper`) when the saver has a retention policy.

The in-process flusher is a thread for sync and async callers alike: event loops come and
go (``asyncio.run`` twice in a script), and a task would die with its loop and leave
acknowledged writes behind until another flusher ran. Several flushers, in one process or
many, share the journal through a Redis consumer group, so none double-applies an entry.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from types import FrameType
from typing import Protocol

from langgraph_durable._core import journal
from langgraph_durable._core.sweep import sweep
from langgraph_durable._tiers.engine import Engine
from langgraph_durable.config import seconds
from langgraph_durable.errors import ConfigurationError, DurableError, TierUnavailableError

logger = logging.getLogger("langgraph_durable")

# The longest a flusher waits after a failed batch before it tries again. A call that
# drains a thread (a delete, a copy, a read that must see Postgres) waits for a batch
# another flusher holds, so once Postgres answers again it waits at most this long more.
BACKOFF_CAP = 1.0


class HasEngine(Protocol):
    """A `DurableSaver` (or anything that runs operations through an engine)."""

    @property
    def engine(self) -> Engine: ...


def drain(engine: Engine) -> int:
    """Move batches to Postgres until the journal has nothing this flusher may take."""
    moved = 0
    while True:
        n = engine.run(journal.flush_batch(engine.context))
        moved += n
        if n == 0:
            return moved


class BackgroundFlusher:
    """Drains the journal every ``flush_interval`` on a daemon thread until stopped."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._loop, name="langgraph-durable-flusher", daemon=True
        )
        self.failures = 0
        self.last_error: str | None = None

    def start(self) -> None:
        self._thread.start()

    def _loop(self) -> None:
        interval = seconds(self._engine.config.flush_interval)
        while not self._stop.wait(interval):
            try:
                drain(self._engine)
            except TierUnavailableError as exc:
                self.failures += 1
                self.last_error = str(exc)
                if self.failures == 1 or self.failures % 100 == 0:
                    logger.warning("flusher: %s; acknowledged writes wait in Redis", exc)
                # at most a second: a drain in a call waits for this flusher's batch
                self._stop.wait(min(BACKOFF_CAP, interval * 2 ** min(self.failures, 5)))
            except Exception:
                self.failures += 1
                logger.exception("flusher: unexpected error; retrying")
            else:
                self.failures = 0

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=30)


class Sweeper:
    """Applies the saver's `Retention` every ``interval`` on a daemon thread (its own, so
    a long sweep never holds up flushing) until stopped; the first sweep runs at once.

    Raises:
        ConfigurationError: the engine's saver has no retention policy.
    """

    def __init__(self, engine: Engine) -> None:
        retention = engine.config.retention
        if retention is None:
            raise ConfigurationError("Sweeper needs a saver configured with a retention policy")
        self._engine = engine
        self._retention = retention
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._loop, name="langgraph-durable-sweeper", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def _loop(self) -> None:
        interval = seconds(self._retention.interval)
        while not self._stop.is_set():
            try:
                report = self._engine.run(sweep(self._engine.context, self._retention))
            except TierUnavailableError as exc:
                logger.warning("sweeper: %s; sweeping again in %.0fs", exc, interval)
            except Exception:
                logger.exception("sweeper: unexpected error; sweeping again in %.0fs", interval)
            else:
                if report.rows:
                    logger.info(
                        "sweeper: %d threads deleted, %d pruned, %d rows (%d bytes) in %.1fs",
                        report.threads_deleted,
                        report.threads_pruned,
                        report.rows,
                        report.bytes,
                        report.seconds,
                    )
            self._stop.wait(interval)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=30)


def run_flusher(
    saver: HasEngine, *, follow: bool = False, stop: threading.Event | None = None
) -> int:
    """Standalone worker (``python -m langgraph_durable flush [--follow]``).

    Drains the journal and returns; with ``follow``, keeps draining every
    ``flush_interval`` until SIGINT/SIGTERM or ``stop`` is set, and sweeps every
    ``Retention.interval`` when the saver has a retention policy. Returns entries moved.
    """
    stop = stop or threading.Event()
    if follow and threading.current_thread() is threading.main_thread():

        def _handler(signum: int, frame: FrameType | None) -> None:
            stop.set()

        signal.signal(signal.SIGTERM, _handler)
        signal.signal(signal.SIGINT, _handler)
    engine = saver.engine
    moved = 0 if follow else drain(engine)
    interval = seconds(engine.config.flush_interval)
    sweeper = Sweeper(engine) if follow and engine.config.retention is not None else None
    if sweeper is not None:
        sweeper.start()
    try:
        moved += _follow(engine, stop, interval) if follow else 0
    finally:
        if sweeper is not None:
            sweeper.stop()
    return moved


def _follow(engine: Engine, stop: threading.Event, interval: float) -> int:
    moved = 0
    while not stop.is_set():
        try:
            moved += drain(engine)
        except TierUnavailableError as exc:
            logger.warning("flusher: %s", exc)
            stop.wait(1.0)
            continue
        except DurableError:  # e.g. a schema not set up: say so, keep the worker up
            logger.exception("flusher: cannot flush; retrying")
            stop.wait(5.0)
            continue
        stop.wait(interval)
    return moved


def wait_until_flushed(saver: HasEngine, timeout: float) -> bool:
    """Poll until the journal is empty (another flusher may be draining it)."""
    engine = saver.engine
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if engine.run(journal.journal_state(engine.context)).length == 0:
            return True
        time.sleep(0.01)
    return False
