"""langgraph-durable: LangGraph agents that survive crashes, restarts and long pauses."""

from langgraph_durable.config import SaverConfig
from langgraph_durable.errors import (
    ConfigurationError,
    CorruptStateError,
    DurableError,
    IdempotencyConflictError,
    SchemaVersionError,
    SerializationError,
    ThreadConflictError,
    TierUnavailableError,
    ToolCallError,
    ToolCallInProgressError,
    ToolOutcomeUncertainError,
)
from langgraph_durable.saver import DurableSaver

__all__ = [
    "ConfigurationError",
    "CorruptStateError",
    "DurableError",
    "DurableSaver",
    "IdempotencyConflictError",
    "SaverConfig",
    "SchemaVersionError",
    "SerializationError",
    "ThreadConflictError",
    "TierUnavailableError",
    "ToolCallError",
    "ToolCallInProgressError",
    "ToolOutcomeUncertainError",
]
