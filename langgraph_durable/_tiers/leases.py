"""Lease heartbeats of the tool calls running in this process.

A thread serves sync and async tools alike, so an event loop busy with a long synchronous
step does not let its leases run out.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from langgraph_durable._core import ledger
from langgraph_durable._core.context import Context
from langgraph_durable._core.requests import Op
from langgraph_durable._tiers.host import process_owner

logger = logging.getLogger("langgraph_durable")


class Leases:
    """The leases of the tool calls running in this process, kept alive by one daemon thread
    per saver that extends each every third of its lease, in one statement per beat."""

    def __init__(self, run: Callable[[Op[set[str]]], set[str]], context: Context) -> None:
        self._execute = run
        self._context = context
        self._cond = threading.Condition()
        self._leases: dict[str, tuple[int, float, float]] = {}  # key -> attempt, lease, due
        self._thread: threading.Thread | None = None
        self._closed = False

    @contextmanager
    def track(self, key: str, attempt: int, lease: float) -> Iterator[None]:
        """Keep a running call's lease alive while the block runs."""
        self.add(key, attempt, lease)
        try:
            yield
        finally:
            self.remove(key)

    def add(self, key: str, attempt: int, lease: float) -> None:
        with self._cond:
            self._leases[key] = (attempt, lease, time.monotonic() + lease / 3)
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(target=self._loop, daemon=True,
                                                name="langgraph_durable-heartbeat")
                self._thread.start()
            self._cond.notify()

    def remove(self, key: str) -> None:
        with self._cond:
            self._leases.pop(key, None)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            thread, self._thread = self._thread, None
            self._cond.notify()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)

    def _due(self) -> list[tuple[str, int, float]] | None:
        """Wait for the next leases to extend; ``None`` once closed."""
        with self._cond:
            while not self._closed:
                now = time.monotonic()
                due = [(k, a, s) for k, (a, s, at) in self._leases.items() if at <= now]
                if due:
                    for key, attempt, lease in due:
                        self._leases[key] = (attempt, lease, now + lease / 3)
                    return due
                nearest = min((at for _, _, at in self._leases.values()), default=now + 60)
                self._cond.wait(max(0.001, nearest - now))
            return None

    def _loop(self) -> None:
        owner = process_owner().text
        while (due := self._due()) is not None:
            try:
                held = self._execute(ledger.heartbeat(self._context, owner, due))
            except Exception as exc:  # keep beating: the next beat may get through
                logger.warning("tool ledger heartbeat failed (%d leases): %s", len(due), exc)
                continue
            with self._cond:  # a call that ended meanwhile is not a lost lease
                lost = [k for k, a, _ in due if k not in held
                        and self._leases.get(k, (None,))[0] == a]
                for key in lost:
                    self._leases.pop(key, None)
            for key in lost:
                logger.warning("tool call %s lost its lease (another worker took it over or "
                               "it was settled); its outcome may not be recorded", key)
