"""The tool-call ledger's data: records, per-tool policy, one call's spec, verdicts, and
the effects the protocol asks of whoever runs it.

The effects are requests no storage driver answers: `Invoke` (run the tool), `Verify`
(ask the tool's ``verify``), `Ask` (a LangGraph ``interrupt()``) — answered by the tool
wrapper — and `OwnerGone` (is a lease owner's process gone?) — answered by the engine,
which may ask the operating system.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, TypeVar, get_args

from langgraph_durable._core.ledger.keys import claim_nonce
from langgraph_durable._core.lineage import Marks
from langgraph_durable._core.requests import Request

Status = Literal["started", "succeeded", "failed", "uncertain"]

OnUncertain = Literal["raise", "retry", "interrupt"]

OnDuplicate = Literal["warn", "raise", "replay", "ignore"]
Outcome = Literal["succeeded", "failed", "retry"]
OUTCOMES: tuple[str, ...] = get_args(Outcome)

INTERRUPT_TYPE = "langgraph_durable/uncertain_tool_call"

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class LedgerRecord:
    """One tool call as the ledger holds it.

    Attributes:
        key: the idempotency key (pass it downstream; see `current_idempotency_key`).
        thread_id, checkpoint_ns: the graph thread and namespace the call ran in.
        tool_call_id: the id of the model's tool call (``None`` for task-position keys).
        task_id: the LangGraph task that ran it, when known.
        tool: the tool's name.
        args_fingerprint: sha256 of the canonical JSON of the model-visible arguments.
        status: ``"started"``, ``"succeeded"``, ``"failed"`` or ``"uncertain"``.
        attempts: how many times the tool was started under this key (0: the result was
            replayed from a probable duplicate).
        result: what the tool returned (usually a ``ToolMessage`` or a ``Command``).
        error: the last failure's message (or why a result could not be stored).
        error_type: ``"module:qualname"`` of the last failure's exception.
        retryable: whether the last failure may be retried (``None`` unless failed).
        lease_owner: ``"host:pid:random"`` of the process that ran the latest attempt.
        lease_expires_at: when that attempt's lease runs out (``None`` once finished).
        duplicate_of: the key of a recent call with the same thread, tool and
            arguments, when this one was flagged as a probable duplicate.
        started_at, finished_at: first claim, latest outcome (database clock).
        idempotency_key: the key the tool passes downstream (`current_idempotency_key`)
            and ``verify`` receives: ``key`` itself, except for a call copied into a fork
            (``copy_thread``), which keeps the key the downstream API saw for the original.
        checkpoint_id: the checkpoint the call's step ran from (``None`` outside a graph
            task), part of its key.
        retired_at: when the thread was deleted with its ledger kept (``keep_ledger``):
            the row stays as an audit trail and answers no later call; its ``key`` then
            ends with ``~retired:<microseconds>``, and ``idempotency_key`` is the key the
            call had. ``None`` for the thread's live conversation.
    """

    key: str
    thread_id: str
    checkpoint_ns: str
    tool_call_id: str | None
    task_id: str | None
    tool: str
    args_fingerprint: str
    status: Status
    attempts: int
    result: Any
    error: str | None
    error_type: str | None
    retryable: bool | None
    lease_owner: str | None
    lease_expires_at: datetime | None
    duplicate_of: str | None
    started_at: datetime
    finished_at: datetime | None
    idempotency_key: str
    checkpoint_id: str | None = None
    retired_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class Policy:
    """How one durable tool treats waits, uncertain outcomes and probable duplicates."""

    lease: float
    wait: float
    on_uncertain: OnUncertain
    verify: bool
    on_duplicate: OnDuplicate
    duplicate_window: float | None


@dataclass(frozen=True, slots=True)
class CallSpec:
    """Everything known about one call before it runs."""

    key: str
    thread_id: str
    checkpoint_ns: str
    call_ref: str | None  # third part of a derived key; None for an explicit key
    tool_call_id: str | None
    task_id: str | None
    tool: str
    args: Any  # the model-visible arguments (for verify and the interrupt payload)
    fingerprint: str
    owner: str
    policy: Policy
    nonce: str = field(default_factory=claim_nonce)  # stamped on this call's claims
    # the checkpoint the call runs from (the one holding the model's tool call), and
    # LangGraph's durability for the run: the call waits until that checkpoint is durable
    decided_by: str | None = None
    durability: str | None = None
    # the LangGraph step the call runs in (``langgraph_step``), when known; recorded for
    # the audit trail (a call's identity is its key alone)
    step: int | None = None
    # the checkpoint the call's step ran from, part of its key (``None`` outside a graph
    # task): a recorded call of the same reference whose checkpoint Postgres never held (a
    # run under durability "exit", or checkpoints lost) is this call, run again
    checkpoint_id: str | None = None
    # (namespace, checkpoint id) of each enclosing graph's running step, for a call in a
    # subgraph: the decision waits for these too
    ancestry: tuple[tuple[str, str], ...] = ()
    # the marks of the LangGraph run that makes the call (`Lineage.run`): whether a put of
    # that run failed, so the checkpoint that decided the call is not on its way
    run: Marks | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Resolution:
    """A verdict on an uncertain call, from ``verify``, a human or an operator."""

    outcome: Outcome
    result: Any = None
    has_result: bool = False
    error: str | None = None


# ----------------------------------------------------------------- effects (non-SQL steps)


@dataclass(frozen=True, slots=True)
class Verify:
    """Call the tool's ``verify(key, args)``; the driver sends back its answer."""

    key: str
    args: Any


@dataclass(frozen=True, slots=True)
class Ask:
    """Call ``langgraph.types.interrupt(payload)``; the driver sends back the answer."""

    payload: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Invoke:
    """Run the tool under the current lease (``key``'s), exposing ``idempotency_key`` to
    it; the driver sends back `Returned` or `Raised`."""

    key: str
    attempt: int
    lease: float
    idempotency_key: str


@dataclass(frozen=True, slots=True)
class OwnerGone:
    """Whether the lease owner provably no longer runs the call ``key`` (its process on this
    host is gone, or it is this process and no caller here but the asker, which handles
    ``asker``, handles the key); the engine sends back a bool."""

    owner: str | None
    key: str
    asker: str


@dataclass(frozen=True, slots=True)
class Returned:
    value: Any


@dataclass(frozen=True, slots=True)
class Raised:
    """The tool raised. ``kind``: ``"error"`` (an outcome), ``"paused"`` (LangGraph's
    ``interrupt()`` or another graph bubble-up: runs again on resume) or ``"cancelled"``
    (not an outcome: nothing is written, the lease runs out)."""

    error: BaseException
    kind: Literal["error", "paused", "cancelled"]
    retryable: bool = False


# What the call protocol yields: the storage requests, and the effects above.
CallRequest = Request | Verify | Ask | Invoke | OwnerGone
CallOp = Generator[CallRequest, Any, T]
