"""`Ledger`: the tool-call ledger of one saver — inspection, settling, and lease heartbeats.

``saver.ledger`` is the event log of side effects: every call of a `durable_tool` with its
status, attempts, result and error, queryable by thread, counted by status for metrics.
The protocol itself lives in `_core.ledger`; this module only drives it.
"""

from __future__ import annotations

import builtins
import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from langgraph_durable._core import ledger as core
from langgraph_durable._core.ledger import LedgerRecord
from langgraph_durable._core.ledger_keys import derive_key, process_owner
from langgraph_durable._core.ledger_values import Outcome, Resolution
from langgraph_durable.errors import ToolCallError

if TYPE_CHECKING:
    from langgraph_durable.saver import DurableSaver

logger = logging.getLogger("langgraph_durable")

_UNSET: Any = object()


class Ledger:
    """The tool-call ledger of a `DurableSaver` (``saver.ledger``).

    Records live in Postgres (the saver's schema), whatever the saver's ``write_mode``.
    """

    def __init__(self, saver: DurableSaver) -> None:
        self._saver = saver
        self._heartbeat = _Heartbeat(saver)

    @staticmethod
    def key_for(thread_id: str, tool_call_id: str, checkpoint_ns: str = "") -> str:
        """The key of the call ``tool_call_id`` of an ``AIMessage`` in a thread.

        ``checkpoint_ns`` is the graph's namespace (``""`` for the root graph).
        """
        return derive_key(thread_id, checkpoint_ns, tool_call_id)

    def get(self, key: str) -> LedgerRecord | None:
        """The record of one call, or ``None``.

        Raises:
            CorruptStateError: its stored result fails its checksum.
            TierUnavailableError: Postgres is unreachable.
        """
        return self._saver._run(core.get(self._saver._ctx, key))

    async def aget(self, key: str) -> LedgerRecord | None:
        """Async twin of `get`."""
        return await self._saver._arun(core.get(self._saver._ctx, key))

    def list(self, thread_id: str) -> builtins.list[LedgerRecord]:
        """A thread's tool calls, oldest first.

        Raises:
            CorruptStateError: a stored result fails its checksum.
            TierUnavailableError: Postgres is unreachable.
        """
        return self._saver._run(core.list_thread(self._saver._ctx, thread_id))

    async def alist(self, thread_id: str) -> builtins.list[LedgerRecord]:
        """Async twin of `list`."""
        return await self._saver._arun(core.list_thread(self._saver._ctx, thread_id))

    def counts(self, thread_id: str | None = None) -> dict[str, int]:
        """Calls per status (``started``, ``succeeded``, ``failed``, ``uncertain``), for one
        thread or all.

        Raises:
            TierUnavailableError: Postgres is unreachable.
        """
        return self._saver._run(core.counts(self._saver._ctx, thread_id))

    async def acounts(self, thread_id: str | None = None) -> dict[str, int]:
        """Async twin of `counts`."""
        return await self._saver._arun(core.counts(self._saver._ctx, thread_id))

    def resolve(self, key: str, outcome: Outcome, *, result: Any = _UNSET,
                error: str | None = None) -> LedgerRecord:
        """Settle an uncertain call by hand (an operator's answer to `on_uncertain="raise"`).

        Args:
            key: the call's key.
            outcome: ``"succeeded"`` (it happened; the next execution returns ``result``),
                ``"failed"`` (the next execution raises ``error``) or ``"retry"`` (it did
                not happen; the next execution runs the tool again with the same key).
            result: what the tool should be taken to have returned (default: a note).
            error: the failure's message for ``"failed"``.

        Raises:
            ToolCallError: the call is not uncertain (nor started with an expired lease).
            SerializationError: ``result`` cannot be serialized.
        """
        return self._settled(key, self._saver._run(
            core.resolve(self._saver._ctx, key, _verdict(outcome, result, error))))

    async def aresolve(self, key: str, outcome: Outcome, *, result: Any = _UNSET,
                       error: str | None = None) -> LedgerRecord:
        """Async twin of `resolve`."""
        return self._settled(key, await self._saver._arun(
            core.resolve(self._saver._ctx, key, _verdict(outcome, result, error))))

    @staticmethod
    def _settled(key: str, record: LedgerRecord | None) -> LedgerRecord:
        if record is None:
            raise ToolCallError(f"tool call {key} is not uncertain (nor started with an "
                                "expired lease); nothing to settle", key=key)
        return record

    @contextmanager
    def _track(self, key: str, attempt: int, lease: float) -> Iterator[None]:
        """Keep a running call's lease alive."""
        self._heartbeat.add(key, attempt, lease)
        try:
            yield
        finally:
            self._heartbeat.remove(key)

    def close(self) -> None:
        """Stop the heartbeat thread (the saver's ``close`` calls it)."""
        self._heartbeat.close()


def _verdict(outcome: Outcome, result: Any, error: str | None) -> Resolution:
    if outcome not in ("succeeded", "failed", "retry"):
        raise ToolCallError(f"outcome must be 'succeeded', 'failed' or 'retry', not {outcome!r}")
    return Resolution(outcome, result=None if result is _UNSET else result,
                      has_result=result is not _UNSET, error=error)


class _Heartbeat:
    """One daemon thread per saver that extends the leases of the calls running in this
    process, each every third of its lease, in one statement per beat.

    A thread serves sync and async tools alike, so an event loop busy with a long
    synchronous step does not let its leases run out.
    """

    def __init__(self, saver: DurableSaver) -> None:
        self._saver = saver
        self._cond = threading.Condition()
        self._leases: dict[str, tuple[int, float, float]] = {}  # key -> attempt, lease, due
        self._thread: threading.Thread | None = None
        self._closed = False

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

    def _due(self) -> builtins.list[tuple[str, int, float]] | None:
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
                held = self._saver._run(core.heartbeat(self._saver._ctx, owner, due))
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
