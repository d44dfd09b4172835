"""What the CLI's ``--json`` prints: one JSON document per command, built from the same rows
and records its tables are built from, so that the two cannot disagree.

Field names are part of the command line's interface (docs/cli.md lists them): snake_case,
times as ISO 8601 strings in UTC, sizes as integer bytes, checkpoint ids and keys whole.
A stored value goes under its field's name when it is JSON data (or a pydantic model, such
as a LangChain message, dumped as JSON); any other value goes under the name with
``_repr`` added, as its ``repr``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from langgraph.checkpoint.base import CheckpointTuple
from langgraph.store.base import Item
from pydantic import BaseModel

from langgraph_durable._cli.actions import Settled
from langgraph_durable._cli.views import (
    Change,
    Check,
    HistoryRow,
    ThreadRow,
    interrupts_of,
    moment,
    pending_writes,
    state_values,
)
from langgraph_durable._tiers.engine import DeadLetter
from langgraph_durable.ledger import LedgerRecord

Document = dict[str, Any]
REPR = "_repr"
"""Added to a field's name when its value is not JSON data and is given as its ``repr``."""


class NotJSON(ValueError):
    """A value with no faithful JSON form."""


def jsonable(value: Any) -> Any:
    """``value`` as JSON data: JSON's own types (tuples as arrays), and pydantic models
    as their ``model_dump(mode="json")``.

    Raises:
        NotJSON: some part of ``value`` is none of those (or a float that is not finite,
            or a mapping key that is not a string).
    """
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise NotJSON(value)
        return value
    if isinstance(value, list | tuple):
        return [jsonable(item) for item in value]
    if isinstance(value, dict):
        if not all(isinstance(key, str) for key in value):
            raise NotJSON(value)
        return {key: jsonable(item) for key, item in value.items()}
    if isinstance(value, BaseModel):
        try:
            dumped = value.model_dump(mode="json")
        except Exception as exc:  # a field pydantic cannot serialize
            raise NotJSON(value) from exc
        return jsonable(dumped)
    raise NotJSON(value)


def put(document: Document, field: str, value: Any) -> None:
    """Set ``field`` to ``value`` as JSON data, or ``field_repr`` to its ``repr``."""
    try:
        document[field] = jsonable(value)
    except (NotJSON, RecursionError):
        document[field + REPR] = repr(value)


def iso(value: datetime | str | None) -> str | None:
    """A timestamp as ISO 8601 in UTC (``2025-01-31T09:30:00.123456+00:00``), or ``None``."""
    parsed = moment(value)
    return None if parsed is None else parsed.astimezone(UTC).isoformat()


# ------------------------------------------------------------------------------ commands


def threads_document(rows: Sequence[ThreadRow], *, total: int, where: dict[str, Any],
                     schema: str, prefix: str, unflushed: int) -> Document:
    """``threads --json``."""
    return {
        "threads": [{
            "thread_id": r.thread_id,
            "checkpoints": r.checkpoints,
            "namespaces": r.namespaces,
            "bytes": r.bytes,
            "last_update": iso(r.last_update),
            "in_redis": r.hot,
            "in_postgres": r.cold,
            "unflushed": r.unflushed,
        } for r in rows],
        "total": total,
        "where": where,
        "schema": schema,
        "prefix": prefix,
        "unflushed_journal_entries": unflushed,
    }


def history_document(thread_id: str, checkpoint_ns: str | None,
                     rows: Sequence[HistoryRow]) -> Document:
    """``history --json``."""
    return {
        "thread_id": thread_id,
        "checkpoint_ns": checkpoint_ns,
        "checkpoints": [{
            "checkpoint_id": r.checkpoint_id,
            "checkpoint_ns": r.checkpoint_ns,
            "step": r.step,
            "source": r.source,
            "updated_channels": list(r.updated_channels),
            "time": iso(r.time),
            "added_bytes": r.added_bytes,
            "pending_writes": r.pending_writes,
            "interrupts": r.interrupts,
            "in_redis": r.hot,
        } for r in rows],
    }


def _checkpoint_ref(tup: CheckpointTuple) -> Document:
    """Thread, namespace, id and step of a checkpoint."""
    conf = tup.config["configurable"]
    return {"thread_id": conf["thread_id"], "checkpoint_ns": conf.get("checkpoint_ns", ""),
            "checkpoint_id": conf["checkpoint_id"], "step": (tup.metadata or {}).get("step")}


def checkpoint_document(tup: CheckpointTuple) -> Document:
    """``show --json``."""
    meta = tup.metadata or {}
    parent = (tup.parent_config or {}).get("configurable", {}).get("checkpoint_id")
    document = {**_checkpoint_ref(tup), "parent_checkpoint_id": parent,
                "source": meta.get("source"), "time": iso(tup.checkpoint.get("ts"))}
    put(document, "metadata", dict(meta))
    values: Document = {}
    reprs: dict[str, str] = {}
    for channel, value in state_values(tup).items():
        try:
            values[channel] = jsonable(value)
        except (NotJSON, RecursionError):
            reprs[channel] = repr(value)
    document["values"], document["values" + REPR] = values, reprs
    writes = []
    for task_id, channel, value in pending_writes(tup):
        write: Document = {"task_id": task_id, "channel": channel}
        put(write, "value", value)
        writes.append(write)
    document["pending_writes"] = writes
    interrupts = []
    for item in interrupts_of(tup):
        found: Document = {"id": getattr(item, "id", None)}
        put(found, "value", getattr(item, "value", item))
        interrupts.append(found)
    document["interrupts"] = interrupts
    return document


def diff_document(a: CheckpointTuple, b: CheckpointTuple,
                  changes: Sequence[Change]) -> Document:
    """``diff --json``."""
    first, second = _checkpoint_ref(a), _checkpoint_ref(b)
    listed = []
    for change in changes:
        item: Document = {"channel": change.channel, "kind": change.kind}
        if change.kind == "appended":
            item["before_length"] = len(change.before)
            put(item, "appended", change.appended)
        else:
            if change.kind != "added":
                put(item, "before", change.before)
            if change.kind != "removed":
                put(item, "after", change.after)
        listed.append(item)
    return {"thread_id": first["thread_id"], "checkpoint_ns": first["checkpoint_ns"],
            "from": {k: first[k] for k in ("checkpoint_id", "step")},
            "to": {k: second[k] for k in ("checkpoint_id", "step")},
            "changes": listed}


def call_document(record: LedgerRecord) -> Document:
    """One tool call of the ledger."""
    document: Document = {
        "key": record.key,
        "idempotency_key": record.idempotency_key,
        "thread_id": record.thread_id,
        "checkpoint_ns": record.checkpoint_ns,
        "tool": record.tool,
        "tool_call_id": record.tool_call_id,
        "task_id": record.task_id,
        "status": record.status,
        "attempts": record.attempts,
        "started_at": iso(record.started_at),
        "finished_at": iso(record.finished_at),
        "lease_owner": record.lease_owner,
        "lease_expires_at": iso(record.lease_expires_at),
        "error": record.error,
        "error_type": record.error_type,
        "retryable": record.retryable,
        "duplicate_of": record.duplicate_of,
        "args_fingerprint": record.args_fingerprint,
    }
    put(document, "result", record.result)
    return document


def ledger_document(thread_id: str, records: Sequence[LedgerRecord]) -> Document:
    """``ledger --json``."""
    return {"thread_id": thread_id, "calls": [call_document(r) for r in records]}


def settled_document(outcome: str, settled: Sequence[Settled], *, dry_run: bool,
                     filters: Document) -> Document:
    """``resolve-all --json``: each call as ``ledger --json`` gives it (as it was listed),
    with ``settled_status`` (its status once settled; ``None`` in a dry run or when it was
    not) and ``refused`` (why it was not settled; else ``None``)."""
    calls = [{**call_document(s.before), "settled_status": s.after and s.after.status,
              "refused": s.refused} for s in settled]
    return {"outcome": outcome, "dry_run": dry_run, "filters": filters, "calls": calls,
            "matched": len(calls), "settled": sum(s.after is not None for s in settled)}


def checks_document(checks: Sequence[Check], exit_code: int) -> Document:
    """``doctor --json``."""
    return {"checks": [{"name": c.name, "status": c.status, "detail": c.detail}
                       for c in checks],
            "exit_code": exit_code}


def dead_letters_document(prefix: str, letters: Sequence[DeadLetter]) -> Document:
    """``dead-letters list --json``."""
    return {"prefix": prefix, "dead_letters": [{
        "id": letter.id,
        "entry_id": letter.entry_id,
        "kind": letter.kind,
        "thread_id": letter.thread_id,
        "checkpoint_ns": letter.checkpoint_ns,
        "checkpoint_id": letter.checkpoint_id,
        "bytes": letter.size,
        "reason": letter.reason,
    } for letter in letters]}


def item_document(item: Item) -> Document:
    """One store item (``store get --json``, and each of ``store items --json``)."""
    document: Document = {"namespace": list(item.namespace), "key": item.key}
    put(document, "value", item.value)
    document["created_at"] = iso(item.created_at)
    document["updated_at"] = iso(item.updated_at)
    return document


def namespaces_document(namespaces: Sequence[tuple[str, ...]], *, schema: str,
                        under: Sequence[str], max_depth: int | None, more: bool) -> Document:
    """``store namespaces --json``."""
    return {"namespaces": [list(n) for n in namespaces], "more": more, "schema": schema,
            "namespace_prefix": list(under), "max_depth": max_depth}


def items_document(items: Sequence[Item], *, schema: str, namespace: Sequence[str],
                   more: bool) -> Document:
    """``store items --json``."""
    return {"items": [item_document(i) for i in items], "more": more, "schema": schema,
            "namespace": list(namespace)}
