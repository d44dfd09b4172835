"""The one place the simulation imports the saver's internals.

Every core name the harness uses comes from here, so a module that moves inside
`langgraph_durable` costs a one-line change in this file.
"""

from __future__ import annotations

from langgraph.checkpoint.serde.base import SerializerProtocol

from langgraph_durable._core import journal, ops
from langgraph_durable._core.keys import ThreadKeys
from langgraph_durable._core.requests import (
    Breaker,
    Cold,
    Context,
    Hot,
    Latencies,
    Op,
    Pause,
    Request,
    TupleCache,
)
from langgraph_durable._core.sql import Statements
from langgraph_durable._tiers.sync import Tiers
from langgraph_durable.config import SaverConfig
from langgraph_durable.errors import ThreadConflictError, TierUnavailableError

__all__ = [
    "Cold",
    "Context",
    "Hot",
    "Latencies",
    "Op",
    "Pause",
    "Request",
    "SaverConfig",
    "ThreadConflictError",
    "ThreadKeys",
    "TierUnavailableError",
    "Tiers",
    "journal",
    "new_context",
    "ops",
    "recover_hot",
]

recover_hot = ops.recover_hot


def new_context(config: SaverConfig, consumer: str, serde: SerializerProtocol) -> Context:
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
    )
