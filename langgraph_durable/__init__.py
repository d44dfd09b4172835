"""langgraph-durable: LangGraph agents that survive crashes, restarts and long pauses."""

from typing import TYPE_CHECKING, Any

from langgraph_durable._core.context import SweepReport
from langgraph_durable._core.ledger.model import LedgerRecord
from langgraph_durable.config import Retention, SaverConfig
from langgraph_durable.errors import (
    ConfigurationError,
    CorruptStateError,
    DegradedWarning,
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

if TYPE_CHECKING:
    from langgraph_durable.middleware import DurableMiddleware as DurableMiddleware

__all__ = [
    "ConfigurationError",
    "CorruptStateError",
    "DegradedWarning",
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


def __getattr__(name: str) -> Any:
    """`DurableMiddleware`, imported when first asked for: it needs LangChain (the
    ``agents`` extra), which the base install does not bring."""
    if name != "DurableMiddleware":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        from langgraph_durable.middleware import DurableMiddleware
    except ImportError as exc:
        raise ImportError(
            f"DurableMiddleware needs LangChain ({exc}): "
            "pip install 'langgraph-durable[agents]'") from exc
    return DurableMiddleware
