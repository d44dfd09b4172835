"""The tool-call ledger, written once as sans-I/O generators.

`model` (records, policy, effects) ← `values` (stored results, failures, verdicts) ←
`records` (read, list, count, settle, heartbeat) ← `protocol` (one call's state machine);
`keys` (call keys, argument fingerprints) stands alone; the statements and the migration
are `_core.sql.ledger`'s.
"""

from langgraph_durable._core.ledger.model import (
    INTERRUPT_TYPE,
    Ask,
    CallOp,
    CallRequest,
    CallSpec,
    Invoke,
    LedgerRecord,
    OnDuplicate,
    OnUncertain,
    Outcome,
    OwnerGone,
    Policy,
    Raised,
    Resolution,
    Returned,
    Status,
    Verify,
)
from langgraph_durable._core.ledger.protocol import call, interrupt_payload, record_outcome
from langgraph_durable._core.ledger.records import (
    counts,
    get,
    heartbeat,
    list_thread,
    list_unsettled,
    resolve,
)

__all__ = [
    "INTERRUPT_TYPE",
    "Ask",
    "CallOp",
    "CallRequest",
    "CallSpec",
    "Invoke",
    "LedgerRecord",
    "OnDuplicate",
    "OnUncertain",
    "Outcome",
    "OwnerGone",
    "Policy",
    "Raised",
    "Resolution",
    "Returned",
    "Status",
    "Verify",
    "call",
    "counts",
    "get",
    "heartbeat",
    "interrupt_payload",
    "list_thread",
    "list_unsettled",
    "record_outcome",
    "resolve",
]
