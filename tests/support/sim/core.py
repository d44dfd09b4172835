"""The one place the simulation imports the saver's internals.

Every core name the harness uses comes from here, so a module that moves inside
`langgraph_durable` costs a one-line change in this file.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from langgraph.checkpoint.serde.base import SerializerProtocol

from langgraph_durable._core import journal, ops, writes
from langgraph_durable._core.context import (
    Breaker,
    Context,
    Latencies,
    MarkClock,
    TupleCache,
    layout_of,
)
from langgraph_durable._core.keys import Layout
from langgraph_durable._core.requests import Cold, Hot, Op, Pause, Request
from langgraph_durable._core.sql import Statements
from langgraph_durable._tiers.sync import Tiers
from langgraph_durable.config import SaverConfig
from langgraph_durable.errors import ThreadConflictError, TierUnavailableError

__all__ = [
    "MARK_INTERVAL",
    "Cold",
    "Context",
    "Hot",
    "Latencies",
    "Layout",
    "Op",
    "Pause",
    "Request",
    "SaverConfig",
    "ThreadConflictError",
    "TierUnavailableError",
    "Tiers",
    "execute",
    "journal",
    "layout_of",
    "new_context",
    "ops",
    "poll_marks",
    "recover_hot",
    "run",
    "writes",
]

recover_hot = ops.recover_hot
poll_marks = ops.poll_marks

# How often (in steps) a simulated process applies pending stale marks, as a saver does
# every stale_poll_interval; the I1 checker allows another process this many steps.
MARK_INTERVAL = 8


class StepClock(MarkClock):
    """A `MarkClock` that counts the simulation's steps instead of seconds."""

    def __init__(self, now: Callable[[], int]) -> None:
        super().__init__(MARK_INTERVAL)
        self._now = now
        self._due_at = 0

    def due(self) -> bool:
        return self._now() >= self._due_at

    def due_now(self) -> None:
        self._due_at = 0

    def checked(self) -> None:
        self._due_at = self._now() + MARK_INTERVAL


def _no_effects(request: Any) -> Any:
    raise AssertionError(f"a checkpoint operation asked for a tool effect: {request!r}")


def execute(tiers: Tiers, request: Request) -> Any:
    """Execute one storage request with the real driver."""
    return tiers.execute(request, _no_effects)


def run(tiers: Tiers, op: Op[Any]) -> Any:
    """Run a whole operation with the real driver."""
    return tiers.run(op, _no_effects)


def new_context(
    config: SaverConfig, consumer: str, serde: SerializerProtocol, now: Callable[[], int]
) -> Context:
    """A process's own context: its own breaker, decoded-tuple cache and consumer name.

    The breaker's cooldown is never reached in a run: the simulation decides when a
    process probes (as a saver does once the cooldown passed), so time plays no part.
    """
    return Context(
        config=config,
        statements=Statements(config.schema),
        serde=serde,
        breaker=Breaker(cooldown=1e9),
        cache=TupleCache(),
        consumer=consumer,
        marks=StepClock(now),
    )
