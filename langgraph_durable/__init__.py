"""langgraph-durable: LangGraph agents that survive crashes, restarts and long pauses."""

from langgraph_durable._core.context import SweepReport
from langgraph_durable._core.ledger.model import LedgerRecord
from langgraph_durable.config import Retention, SaverConfig
from langgraph_durable.errors import (
    ConfigurationError,
    CorruptStateError,
    DurableError,
    FlushTimeoutError,
    IdempotencyConflictError,
    RefusedTypeError,
    SchemaVersionError,
    SerializationError,
    ThreadConflictError,
    TierUnavailableError,
    ToolCallError,
    ToolCallInProgressError,
    ToolOutcomeUncertainError,
    WriteRejectedError,
)
from langgraph_durable.ledger import Ledger
from langgraph_durable.saver import DurableSaver
from langgraph_durable.store import DurableStore
from langgraph_durable.tools import DurableTool, current_idempotency_key, durable_tool

__all__ = [
    "ConfigurationError",
    "CorruptStateError",
    "DurableError",
    "DurableSaver",
    "DurableStore",
    "DurableTool",
    "FlushTimeoutError",
    "IdempotencyConflictError",
    "Ledger",
    "LedgerRecord",
    "RefusedTypeError",
    "Retention",
    "SaverConfig",
    "SchemaVersionError",
    "SerializationError",
    "SweepReport",
    "ThreadConflictError",
    "TierUnavailableError",
    "ToolCallError",
    "ToolCallInProgressError",
    "ToolOutcomeUncertainError",
    "WriteRejectedError",
    "current_idempotency_key",
    "durable_tool",
]
