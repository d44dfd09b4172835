"""The default serializer: LangGraph's `JsonPlusSerializer`, refusing every type not allowed.

LangGraph's msgpack format rebuilds objects by name: an extension carries
``(module, name, argument)`` and loading calls ``module.name(argument)``. Left open, a blob
anyone wrote into Redis or Postgres runs any callable (``os.system``) on the next read.
`StrictSerializer` allows LangGraph's own safe set (messages, documents, ``Send``,
``Interrupt``, ``Command``, datetime, uuid, decimal, ...) plus the types the application
names; any other named type makes the load fail — the frame is then treated as damaged
(repaired from the other tier or `CorruptStateError`) instead of half-decoded. Pickle stays
off, and JSON constructors follow LangGraph's own allowlist.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

import ormsgpack
from langgraph.checkpoint.serde._msgpack import SAFE_MSGPACK_METHODS, SAFE_MSGPACK_TYPES
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from langgraph_durable.config import SaverConfig
from langgraph_durable.errors import ConfigurationError

# LangGraph's extension codes that name a type: (module, name, ...) at the front
_BY_NAME = frozenset((0, 1, 2, 4, 5))  # constructor(arg), (*args), (**kwargs), pydantic v1/v2
_BY_METHOD = 3  # (module, name, arg, method): a classmethod call
_DELTA = 7  # a delta snapshot: msgpack inside, checked recursively
_CHECKED = _BY_NAME | {_BY_METHOD, _DELTA}

AllowedType = type | tuple[str, ...]


class RefusedTypeError(ValueError):
    """A stored value names a type the serializer does not allow."""


def type_key(allowed: AllowedType) -> tuple[str, ...]:
    """``(module, name)`` of a class, or the tuple itself."""
    if isinstance(allowed, type):
        return (allowed.__module__, allowed.__name__)
    return tuple(allowed)


class StrictSerializer(JsonPlusSerializer):
    """`JsonPlusSerializer` that loads only LangGraph's safe types and ``allowed``.

    Args:
        allowed: further classes (or ``(module, name)`` pairs) a checkpoint may hold,
            e.g. the application's pydantic models, dataclasses and enums.
    """

    def __init__(self, allowed: Iterable[AllowedType] = ()) -> None:
        self.allowed: frozenset[tuple[str, ...]] = frozenset(SAFE_MSGPACK_TYPES) | {
            type_key(a) for a in allowed
        }
        super().__init__(allowed_msgpack_modules=tuple(self.allowed))
        self._rebuild: Callable[[int, bytes], Any] = self._unpack_ext_hook
        self._unpack_ext_hook = self._checked
        self._refused = threading.local()  # ormsgpack replaces a hook's error with its own

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        """Load a value; a refused type raises `RefusedTypeError` naming it."""
        self._refused.error = None
        try:
            return super().loads_typed(data)
        except ValueError as exc:
            refused: RefusedTypeError | None = self._refused.error
            if refused is not None:
                raise refused from exc
            raise

    def allow(self, extra: Iterable[AllowedType]) -> None:
        """Allow more types, in place (every saver sharing this serializer sees them)."""
        self.allowed = self.allowed | {type_key(a) for a in extra}
        rebuilt = JsonPlusSerializer(allowed_msgpack_modules=tuple(self.allowed))
        self._rebuild = rebuilt._unpack_ext_hook

    def with_msgpack_allowlist(
        self, extra_allowlist: Iterable[tuple[str, ...] | type]
    ) -> StrictSerializer:
        """What LangGraph calls to add a graph's schema types (``LANGGRAPH_STRICT_MSGPACK``)."""
        self.allow(extra_allowlist)
        return self

    def _checked(self, code: int, data: bytes) -> Any:
        """Refuse a type not allowed before LangGraph's hook could import or call it."""
        try:
            return self._rebuild(code, self._check(code, data))
        except RefusedTypeError as exc:
            self._refused.error = exc
            raise

    def _check(self, code: int, data: bytes) -> bytes:
        if code in _CHECKED:
            parts = ormsgpack.unpackb(data, ext_hook=self._checked, option=_OPTIONS)
            if code == _BY_METHOD:
                key: tuple[Any, ...] = (*parts[:2], parts[3])
                if key not in SAFE_MSGPACK_METHODS:
                    raise RefusedTypeError(f"method {'.'.join(map(str, key))} is not allowed")
            elif code != _DELTA and tuple(parts[:2]) not in self.allowed:
                module, name = (str(p) for p in parts[:2])
                raise RefusedTypeError(
                    f"type {module}.{name} is not allowed by the serializer: allow it with "
                    f"DurableSaver(allowed_types=[{module}.{name}]) if the application stores it"
                )
        return data


_OPTIONS = ormsgpack.OPT_NON_STR_KEYS


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
