"""Identities of the tool-call ledger: call keys, argument fingerprints, claim nonces.

Lease owners (``"host:pid:random"``) are made and judged by the engine
(`langgraph_durable._tiers.host`): that asks the operating system.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import secrets
from typing import Any

from langgraph_durable._core.keys import check_text
from langgraph_durable.errors import ConfigurationError


def derive_key(thread_id: str, checkpoint_ns: str, call_ref: str,
               checkpoint_id: str | None = None) -> str:
    """The key of a call: its thread, graph namespace, call reference (tool call id, task
    position, or model call) and, for a call made in a graph task, the checkpoint its step
    ran from, so that the same reference run from another checkpoint (a fork, an
    ``update_state`` that edited the call) is another call.

    Mirrored in SQL by ``COPY_THREAD_LEDGER_SQL``: parts are length-prefixed, so no id can
    make two calls collide.
    """
    parts = (thread_id, checkpoint_ns, call_ref) + ((checkpoint_id,) if checkpoint_id else ())
    text = "|".join(f"{len(p.encode())}:{p}" for p in parts)
    return "lgd-" + hashlib.sha256(text.encode()).hexdigest()[:40]


def explicit_key(value: object) -> str:
    """Validate a key returned by a tool's ``key=`` function.

    Raises:
        ConfigurationError: not a non-empty string Postgres can store.
    """
    key = check_text(value, "idempotency key")
    if not key:
        raise ConfigurationError("idempotency key must not be empty")
    return key


def claim_nonce() -> str:
    """A fresh nonce for one call's claims: 128 random bits (never drawn from `uuid.uuid4`,
    which applications patch for deterministic ids). A claim stores it, so a claim run again
    after its reply was lost knows the row it committed for its own."""
    return secrets.token_hex(16)


def fingerprint(args: Any) -> str:
    """sha256 of the canonical JSON (sorted keys, no spaces) of a call's arguments."""
    text = json.dumps(
        args, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=_jsonable
    )
    return hashlib.sha256(text.encode()).hexdigest()


def _jsonable(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, (set, frozenset)):
        return sorted(value, key=repr)
    if isinstance(value, bytes):
        return {"$bytes": value.hex()}
    isoformat = getattr(value, "isoformat", None)
    if callable(isoformat):
        return isoformat()
    return f"<{type(value).__qualname__}>{value!r}"
