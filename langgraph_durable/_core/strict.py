"""The default serializer: LangGraph's `JsonPlusSerializer`, refusing every type not allowed.

LangGraph's msgpack format rebuilds objects by name: an extension carries
``(module, name, argument)`` and loading calls ``module.name(argument)``. Left open, a blob
anyone wrote into Redis or Postgres runs any callable (``os.system``) on the next read.
`StrictSerializer` allows LangGraph's own safe set (messages, documents, ``Send``,
``Interrupt``, ``Command``, datetime, uuid, decimal, ...) plus the types the application
names, and imports or calls nothing else; a value naming any other type, at any depth,
makes the load fail, so the frame is treated as damaged (repaired from the other tier, or
`CorruptStateError`) instead of half-decoded. Pickle stays off, and JSON constructors
follow LangGraph's own allowlist.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.event_hooks import SerdeEvent, register_serde_event_listener
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from langgraph_durable.config import SaverConfig
from langgraph_durable.errors import ConfigurationError

AllowedType = type | tuple[str, ...]
_BLOCKED = frozenset(("msgpack_blocked", "msgpack_method_blocked"))


class RefusedTypeError(ValueError):
    """A stored value names a type the serializer does not allow."""


def type_key(allowed: AllowedType) -> tuple[str, ...]:
    """``(module, name)`` of a class, or the tuple itself."""
    if isinstance(allowed, type):
        return (allowed.__module__, allowed.__name__)
    return tuple(allowed)


class _Loads(threading.local):
    """The types LangGraph blocked during this thread's current strict load, if any."""

    blocked: list[SerdeEvent] | None = None


_loads = _Loads()


def _record(event: SerdeEvent) -> None:
    if _loads.blocked is not None and event["kind"] in _BLOCKED:
        _loads.blocked.append(event)


register_serde_event_listener(_record)


class StrictSerializer(JsonPlusSerializer):
    """`JsonPlusSerializer` in allowlist mode that refuses a value naming any other type.

    LangGraph's allowlist mode skips a type it blocks (the value comes back as the raw
    arguments, silently); here the whole load fails instead, so the frame is treated as
    damaged rather than half-decoded.

    Args:
        allowed: further classes (or ``(module, name)`` pairs) a checkpoint may hold,
            e.g. the application's pydantic models, dataclasses and enums.
    """

    def __init__(self, allowed: Iterable[AllowedType] = ()) -> None:
        self.allowed: frozenset[tuple[str, ...]] = frozenset(type_key(a) for a in allowed)
        super().__init__(allowed_msgpack_modules=tuple(self.allowed) or None)

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        """Load a value; a type not allowed, at any depth, raises `RefusedTypeError`.

        Raises:
            RefusedTypeError: the value names a type (or method) not allowed.
        """
        outer, _loads.blocked = _loads.blocked, []
        try:
            value = super().loads_typed(data)
            blocked = _loads.blocked
        finally:
            _loads.blocked = outer
        if blocked:
            name = ".".join((blocked[0]["module"], blocked[0]["name"]))
            raise RefusedTypeError(
                f"type {name} is not allowed by the serializer: allow it with "
                f"DurableSaver(allowed_types=[{name}]) if the application stores it"
            )
        return value

    def allow(self, extra: Iterable[AllowedType]) -> None:
        """Allow more types, in place (every saver sharing this serializer sees them)."""
        self.allowed = self.allowed | {type_key(a) for a in extra}
        super().__init__(allowed_msgpack_modules=tuple(self.allowed))

    def with_msgpack_allowlist(
        self, extra_allowlist: Iterable[tuple[str, ...] | type]
    ) -> StrictSerializer:
        """What LangGraph calls to add a graph's schema types (``LANGGRAPH_STRICT_MSGPACK``)."""
        self.allow(extra_allowlist)
        return self


def default_serde(serde: SerializerProtocol | None, config: SaverConfig) -> SerializerProtocol:
    """The application's serializer, or a `StrictSerializer` allowing ``allowed_types``.

    Raises:
        ConfigurationError: both a serializer and ``allowed_types`` were given.
    """
    if serde is None:
        return StrictSerializer(config.allowed_types)
    if config.allowed_types:
        raise ConfigurationError(
            "allowed_types configures the default serializer; with serde= given, configure "
            "that serializer's allowlist instead"
        )
    return serde
