"""The error tree of langgraph_durable: every error the package raises is a `DurableError`."""

from __future__ import annotations

from typing import Literal


class DurableError(Exception):
    """Base class of every error raised by langgraph_durable."""


class ConfigurationError(DurableError, ValueError):
    """An option, URL or config passed to the saver is invalid."""


class SchemaVersionError(DurableError):
    """The database schema is newer than this version of the package understands."""


class SerializationError(DurableError):
    """A value could not be serialized; nothing was stored.

    Attributes:
        thread_id, checkpoint_ns, checkpoint_id, channel: where the value belonged.
    """

    def __init__(
        self,
        message: str,
        *,
        thread_id: str | None = None,
        checkpoint_ns: str | None = None,
        checkpoint_id: str | None = None,
        channel: str | None = None,
    ) -> None:
        super().__init__(message)
        self.thread_id = thread_id
        self.checkpoint_ns = checkpoint_ns
        self.checkpoint_id = checkpoint_id
        self.channel = channel

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild, (type(self), self.args, self.__dict__))


class CorruptStateError(SerializationError):
    """A stored blob failed its checksum or could not be decoded, and no good copy exists."""


class RefusedTypeError(SerializationError, ValueError):
    """A stored value names a type the serializer may not rebuild, so nothing was decoded:
    the application never stored that type through this schema, and ``allowed_types`` does
    not list it (a frame forged in Redis, or a value written with another serializer).

    Attributes:
        type_key: ``(module, name)`` of the type (``(module, name, method)`` for a method).
        thread_id, checkpoint_ns, checkpoint_id, channel: where the value was read, when
            known.
    """

    def __init__(
        self,
        message: str,
        *,
        type_key: tuple[str, ...] = (),
        thread_id: str | None = None,
        checkpoint_ns: str | None = None,
        checkpoint_id: str | None = None,
        channel: str | None = None,
    ) -> None:
        super().__init__(
            message,
            thread_id=thread_id,
            checkpoint_ns=checkpoint_ns,
            checkpoint_id=checkpoint_id,
            channel=channel,
        )
        self.type_key = type_key


class FlushTimeoutError(DurableError, TimeoutError):
    """``flush(timeout=...)`` ran out of time before every write acknowledged before the
    call was in Postgres; those writes are still in Redis, for a later flush."""


class TierUnavailableError(DurableError):
    """A storage tier could not be reached; `__cause__` is the driver's error.

    Attributes:
        tier: ``"hot"`` (Redis) or ``"cold"`` (Postgres).
    """

    def __init__(self, message: str, *, tier: Literal["hot", "cold"]) -> None:
        super().__init__(message)
        self.tier = tier

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild, (type(self), self.args, self.__dict__))


class WriteRejectedError(DurableError):
    """Postgres refused a statement because of what it holds (a value it cannot store, a
    row over one of its size limits), not because it is unreachable: retrying the same
    statement fails the same way. `__cause__` is the driver's error.

    Attributes:
        sqlstate: Postgres' error code (``"22P02"``, ``"54000"``, ...), if it sent one.
    """

    def __init__(self, message: str, *, sqlstate: str | None = None) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild, (type(self), self.args, self.__dict__))


class ThreadConflictError(DurableError):
    """Another run moved the thread's head since this run read it: committing on top of
    the head this run saw would fork the thread's history.

    Attributes name the thread and namespace, the checkpoint this run extended
    (``expected``), the head it found (``head``), the run that wrote that head
    (``run_id``, from the head's metadata; ``None`` when unknown), and whether the thread
    was deleted while this run worked (``deleted``: nothing the run writes is stored).
    """

    def __init__(
        self,
        message: str,
        *,
        thread_id: str,
        checkpoint_ns: str = "",
        expected: str | None = None,
        head: str | None = None,
        run_id: str | None = None,
        deleted: bool = False,
    ) -> None:
        super().__init__(message)
        self.thread_id = thread_id
        self.checkpoint_ns = checkpoint_ns
        self.expected = expected
        self.head = head
        self.run_id = run_id
        self.deleted = deleted

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild, (type(self), self.args, self.__dict__))


class ToolCallError(DurableError):
    """Base class of the tool ledger's errors.

    Attributes:
        key: the idempotency key of the call.
    """

    def __init__(self, message: str, *, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild, (type(self), self.args, self.__dict__))


class IdempotencyConflictError(ToolCallError):
    """The same idempotency key was used with a different tool or different arguments."""


class ToolCallInProgressError(ToolCallError):
    """Another worker holds a live lease on this call."""


class ToolOutcomeUncertainError(ToolCallError):
    """The call started but its owner died before recording an outcome; the policy says raise."""


class DegradedWarning(UserWarning):
    """The saver runs without its hot tier (Redis cannot be reached): reads and writes go
    to Postgres alone (write-through) or wait for Redis (write-behind). Issued once per
    saver, so a program that configured no logging still shows it on stderr; set
    ``redis_required`` to refuse to start instead, or filter it with `warnings`."""


def _rebuild(
    cls: type[DurableError], args: tuple[object, ...], state: dict[str, object]
) -> DurableError:
    error = cls.__new__(cls)
    Exception.__init__(error, *args)
    error.__dict__.update(state)
    return error
