"""The default serializer: LangGraph's `JsonPlusSerializer`, refusing every type not allowed.

LangGraph's msgpack format rebuilds objects by name: an extension carries
``(module, name, argument)`` and loading calls ``module.name(argument)``. Left open, a blob
anyone wrote into Redis or Postgres runs any callable (``os.system``) on the next read.
`StrictSerializer` allows LangGraph's own safe set (messages, documents, ``Send``,
``Interrupt``, ``Command``, datetime, uuid, decimal, ...), the types the application names
(``allowed_types``) and the types the application itself has stored: every put lists the
types its values name (`named_types`), and the saver records the new ones in Postgres, the
trusted tier, before the value is stored anywhere (`_core.writes`). A reader that meets a
type it does not allow yet learns the recorded ones and decodes again (`_core.reads`). So
a graph's own pydantic models and LangChain types read back with no setting, while a
frame only someone with write access to Redis could have made still cannot construct a
type the application never stored. A value naming any other type, at any depth, makes the
load fail (`RefusedTypeError`) instead of coming back half-decoded. Pickle stays off, and
JSON constructors follow LangGraph's own allowlist.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

import ormsgpack
from langgraph.checkpoint.serde._msgpack import SAFE_MSGPACK_METHODS, SAFE_MSGPACK_TYPES
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.event_hooks import SerdeEvent, register_serde_event_listener
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from langgraph_durable.config import SaverConfig
from langgraph_durable.errors import ConfigurationError, RefusedTypeError

AllowedType = type | tuple[str, ...]
_BLOCKED = frozenset(("msgpack_blocked", "msgpack_method_blocked"))


TypeKey = tuple[str, ...]  # (module, name), or (module, name, method) for a method call
# LangGraph's msgpack extensions that rebuild an object by name: their payload starts with
# (module, name, ...); the method extension names a classmethod fourth.
_CONSTRUCTORS = frozenset((0, 1, 2, 4, 5))
_METHOD = 3


def named_types(typed: tuple[str, bytes]) -> set[TypeKey]:
    """Every type a serialized value would rebuild by name, at any depth, without building
    any of them: what a reader must allow for the value to read back."""
    type_, payload = typed
    found: set[TypeKey] = set()
    if type_ != "msgpack":
        return found

    def hook(code: int, data: bytes) -> None:
        inner = ormsgpack.unpackb(data, ext_hook=hook, option=ormsgpack.OPT_NON_STR_KEYS)
        if code in _CONSTRUCTORS or code == _METHOD:
            module, name = str(inner[0]), str(inner[1])
            found.add((module, name, str(inner[3])) if code == _METHOD else (module, name))

    ormsgpack.unpackb(payload, ext_hook=hook, option=ormsgpack.OPT_NON_STR_KEYS)
    return found


def unreadable(key: TypeKey) -> str | None:
    """Why a value naming ``key`` could never be read back, or ``None`` if it can: a method
    LangGraph never calls on load (a subclass of ``datetime``, say). A class its module
    does not expose (one defined inside a function) reads back as LangGraph's own savers
    give it: as its raw fields, which a typed state rebuilds."""
    if len(key) == 3 and key not in SAFE_MSGPACK_METHODS:
        return f"it is rebuilt with {'.'.join(key)}, a method LangGraph never calls on load"
    return None


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
            key: TypeKey = (blocked[0]["module"], blocked[0]["name"])
            name = ".".join(key)
            raise RefusedTypeError(
                f"type {name} is not allowed by the serializer: allow it with "
                f"DurableSaver(allowed_types=[{name}]) if the application stores it",
                type_key=key,
            )
        return value

    def unknown(self, types: Iterable[TypeKey]) -> set[TypeKey]:
        """The ones of ``types`` this serializer would refuse to rebuild now."""
        return {
            t for t in types
            if t not in SAFE_MSGPACK_TYPES and t not in SAFE_MSGPACK_METHODS
            and t not in self.allowed
        }

    def allow(self, extra: Iterable[AllowedType]) -> None:
        """Allow more types, in place (every saver sharing this serializer sees them)."""
        more = {type_key(a) for a in extra} - self.allowed
        if more:
            self.allowed = self.allowed | more
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
