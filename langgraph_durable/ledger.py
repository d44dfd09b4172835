"""`Ledger`: the tool-call ledger of one saver — inspection, settling, and lease heartbeats.

``saver.ledger`` is the event log of side effects: every call of a `durable_tool` with its
status, attempts, result and error, queryable by thread, counted by status for metrics.
The protocol itself lives in `_core.ledger`; the saver's engine runs it.
"""

from __future__ import annotations

import builtins
from datetime import timedelta
from typing import Any

from langgraph_durable._core import ledger as core
from langgraph_durable._core.ledger import LedgerRecord as LedgerRecord
from langgraph_durable._core.ledger import Outcome as Outcome  # the type `resolve` takes
from langgraph_durable._core.ledger import Resolution
from langgraph_durable._core.ledger.keys import derive_key
from langgraph_durable._core.requests import Op
from langgraph_durable._tiers.engine import Engine
from langgraph_durable.config import seconds
from langgraph_durable.errors import ConfigurationError, ToolCallError

_UNSET: Any = object()


class Ledger:
    """The tool-call ledger of a `DurableSaver` (``saver.ledger``).

    Records live in Postgres (the saver's schema), whatever the saver's ``write_mode``.
    """

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    @staticmethod
    def key_for(thread_id: str, tool_call_id: str, checkpoint_ns: str = "",
                checkpoint_id: str | None = None) -> str:
        """The key of the call ``tool_call_id`` of an ``AIMessage`` in a thread.

        ``checkpoint_ns`` is the graph's namespace (``""`` for the root graph);
        ``checkpoint_id`` the checkpoint the call's step ran from, for a call made in a
        graph (``ToolNode``, agents): the one whose ``next`` holds the tool step. A call
        made outside a graph has none.
        """
        return derive_key(thread_id, checkpoint_ns, tool_call_id, checkpoint_id)

    def get(self, key: str) -> LedgerRecord | None:
        """The record of one call, or ``None``.

        Raises:
            CorruptStateError: its stored result fails its checksum.
            TierUnavailableError: Postgres is unreachable.
        """
        return self._engine.run(core.get(self._engine.context, key))

    async def aget(self, key: str) -> LedgerRecord | None:
        """Async twin of `get`."""
        return await self._engine.arun(core.get(self._engine.context, key))

    def list(self, thread_id: str) -> builtins.list[LedgerRecord]:
        """A thread's tool calls, oldest first.

        Raises:
            CorruptStateError: a stored result fails its checksum.
            TierUnavailableError: Postgres is unreachable.
        """
        return self._engine.run(core.list_thread(self._engine.context, thread_id))

    async def alist(self, thread_id: str) -> builtins.list[LedgerRecord]:
        """Async twin of `list`."""
        return await self._engine.arun(core.list_thread(self._engine.context, thread_id))

    def unsettled(self, *, tool: str | None = None, thread_id: str | None = None,
                  older_than: float | timedelta | None = None,
                  limit: int | None = None) -> builtins.list[LedgerRecord]:
        """The calls `resolve` would settle, across threads, oldest first.

        Those are the ``uncertain`` calls and the ``started`` ones whose lease ran out (a
        started call under a live lease may still finish: it is not listed).

        Args:
            tool: only the calls of this tool.
            thread_id: only the calls of this thread.
            older_than: only the calls first started at least this long ago (seconds or a
                `timedelta`, by the database's clock).
            limit: at most this many.

        Raises:
            ConfigurationError: ``older_than`` is negative or ``limit`` below 1.
            CorruptStateError: a stored result fails its checksum.
            TierUnavailableError: Postgres is unreachable.
        """
        return self._engine.run(self._unsettled(tool, thread_id, older_than, limit))

    async def aunsettled(self, *, tool: str | None = None, thread_id: str | None = None,
                         older_than: float | timedelta | None = None,
                         limit: int | None = None) -> builtins.list[LedgerRecord]:
        """Async twin of `unsettled`."""
        return await self._engine.arun(self._unsettled(tool, thread_id, older_than, limit))

    def _unsettled(self, tool: str | None, thread_id: str | None,
                   older_than: float | timedelta | None,
                   limit: int | None) -> Op[builtins.list[LedgerRecord]]:
        age = None if older_than is None else seconds(older_than)
        if (age is not None and age < 0) or (limit is not None and limit < 1):
            raise ConfigurationError("older_than must not be negative, limit at least 1")
        return core.list_unsettled(self._engine.context, tool=tool, thread_id=thread_id,
                                   older_than=age, limit=limit)

    def counts(self, thread_id: str | None = None) -> dict[str, int]:
        """Calls per status (``started``, ``succeeded``, ``failed``, ``uncertain``), for one
        thread or all.

        Raises:
            TierUnavailableError: Postgres is unreachable.
        """
        return self._engine.run(core.counts(self._engine.context, thread_id))

    async def acounts(self, thread_id: str | None = None) -> dict[str, int]:
        """Async twin of `counts`."""
        return await self._engine.arun(core.counts(self._engine.context, thread_id))

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
        return self._settled(key, self._engine.run(
            core.resolve(self._engine.context, key, _verdict(outcome, result, error))))

    async def aresolve(self, key: str, outcome: Outcome, *, result: Any = _UNSET,
                       error: str | None = None) -> LedgerRecord:
        """Async twin of `resolve`."""
        return self._settled(key, await self._engine.arun(
            core.resolve(self._engine.context, key, _verdict(outcome, result, error))))

    @staticmethod
    def _settled(key: str, record: LedgerRecord | None) -> LedgerRecord:
        if record is None:
            raise ToolCallError(f"tool call {key} is not uncertain (nor started with an "
                                "expired lease); nothing to settle", key=key)
        return record

    def close(self) -> None:
        """Stop extending the leases of running calls (the saver's ``close`` does it too)."""
        self._engine.leases.close()


def _verdict(outcome: Outcome, result: Any, error: str | None) -> Resolution:
    if outcome not in ("succeeded", "failed", "retry"):
        raise ToolCallError(f"outcome must be 'succeeded', 'failed' or 'retry', not {outcome!r}")
    return Resolution(outcome, result=None if result is _UNSET else result,
                      has_result=result is not _UNSET, error=error)
