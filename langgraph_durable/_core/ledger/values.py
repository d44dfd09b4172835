"""Values the tool-call ledger stores and reads back: results, failures, verdicts.

A result is serialized with the saver's serde and framed with a checksum (`_core.codec`);
a failure is kept as its message and ``module:qualname``; a verdict settles an uncertain
call.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping
from typing import Any

from langgraph.checkpoint.serde.base import SerializerProtocol

from langgraph_durable._core.codec import FrameError, decode_frame, encode_frame
from langgraph_durable._core.ledger.model import OUTCOMES, LedgerRecord, Resolution
from langgraph_durable.errors import (
    ConfigurationError,
    CorruptStateError,
    SerializationError,
    ToolCallError,
)

logger = logging.getLogger("langgraph_durable")


def encode_result(serde: SerializerProtocol, value: Any) -> bytes:
    """Serialize a result with the saver's serde into a checksummed frame."""
    is_tuple = type(value) is tuple
    type_, payload = serde.dumps_typed(list(value) if is_tuple else value)
    return encode_frame(type_ + "+tuple" if is_tuple else type_, payload)


def decode_result(serde: SerializerProtocol, frame: bytes, key: str, thread_id: str) -> Any:
    """Invert `encode_result`.

    Raises:
        CorruptStateError: the frame fails its checksum.
        SerializationError: the serde cannot load it.
    """
    try:
        type_, payload = decode_frame(frame)
    except FrameError as exc:
        raise CorruptStateError(
            f"stored result of tool call {key!r} (thread {thread_id!r}) is damaged: {exc}",
            thread_id=thread_id,
            channel=f"ledger:{key}",
        ) from exc
    is_tuple = type_.endswith("+tuple")
    try:
        value = serde.loads_typed((type_.removesuffix("+tuple"), payload))
    except Exception as exc:
        raise SerializationError(
            f"cannot load the stored result of tool call {key!r}: {exc}",
            thread_id=thread_id,
            channel=f"ledger:{key}",
        ) from exc
    return tuple(value) if is_tuple else value


def error_type(error: BaseException) -> str:
    cls = type(error)
    return f"{cls.__module__}:{cls.__qualname__}"


def rebuild_error(record: LedgerRecord) -> Exception:
    """The recorded failure as an exception to raise again.

    The original class is used when it is already imported (nothing is imported on behalf
    of the database) and takes a message; otherwise a `ToolCallError` names it.
    """
    message = record.error or ""
    error: Exception | None = None
    module, _, qualname = (record.error_type or "").partition(":")
    cls: Any = sys.modules.get(module)
    for part in qualname.split(".") if cls is not None else ():
        cls = getattr(cls, part, None)
    if isinstance(cls, type) and issubclass(cls, Exception):
        try:
            error = cls(message)
        except Exception:  # a constructor that wants more than a message
            logger.debug("cannot rebuild %s; raising ToolCallError", record.error_type)
    if error is None:
        error = ToolCallError(
            f"{record.tool} failed: {record.error_type}: {message}", key=record.key
        )
    if isinstance(error, ToolCallError):
        error.key = record.key
    error.add_note(
        f"replayed from the tool ledger (key {record.key}, {record.attempts} "
        "attempt(s)); the original traceback was not kept"
    )
    return error


def parse_resolution(answer: Any, *, key: str, source: str) -> Resolution | None:
    """Read a verdict: ``"succeeded" | "failed" | "retry"``, ``True`` (it happened) /
    ``False`` (it did not: retry), ``(outcome, result_or_error)``, or a mapping
    ``{"outcome": ..., "result": ..., "error": ..., "key": ...}``. ``None``: no verdict.

    Raises:
        ConfigurationError: the answer has none of those shapes.
        ToolCallError: the mapping answers another call's key.
    """
    if answer is None:
        return None
    if answer is True or answer is False:
        return Resolution("succeeded" if answer else "retry")
    if isinstance(answer, str) and answer in OUTCOMES:
        return Resolution(answer)  # type: ignore[arg-type]
    if (
        isinstance(answer, tuple)
        and len(answer) == 2
        and isinstance(answer[0], str)
        and answer[0] in OUTCOMES
    ):
        outcome, detail = answer
        if outcome == "failed":
            return Resolution("failed", error=str(detail))
        return Resolution(outcome, result=detail, has_result=outcome == "succeeded")
    if isinstance(answer, Mapping) and answer.get("outcome") in OUTCOMES:
        if answer.get("key") not in (None, key):
            raise ToolCallError(
                f"{source} answered for call {answer['key']!r}, but this call is {key!r}", key=key
            )
        error = answer.get("error")
        return Resolution(
            answer["outcome"],
            result=answer.get("result"),
            has_result="result" in answer,
            error=str(error) if error is not None else None,
        )
    raise ConfigurationError(
        f"{source} answered {answer!r} for tool call {key!r}; expected 'succeeded', "
        "'failed', 'retry', a bool, (outcome, detail) or {'outcome': ..., 'result': ...}"
    )
