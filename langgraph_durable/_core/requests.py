"""What the sans-I/O operations ask the drivers to do.

An operation is a generator: it yields `Hot`, `Cold` and `Pause` requests, receives each
result (or has `TierUnavailableError` thrown in), and returns its value. The sync and async
drivers only execute requests, so every decision is written once. What an operation reads
besides its requests' replies is its `Context` (`_core.context`).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from psycopg import sql

T = TypeVar("T")


class Script(Protocol):
    """What a driver needs of a Lua script (`scripts.registry.Script`)."""

    @property
    def name(self) -> str: ...
    @property
    def source(self) -> str: ...
    @property
    def sha(self) -> str: ...  # SHA1 of the source, for EVALSHA
    @property
    def replicated(self) -> bool: ...  # followed by WAIT with redis_replica_acks


@dataclass(frozen=True, slots=True)
class Hot:
    """Run one Lua script on the hot tier (built by the script's builder, see
    `scripts.registry`).

    With ``wait`` false the driver sends the script and goes on: the operation gets
    ``None`` at once, and the reply is read before the connection's next use (a failure is
    logged there, not raised). Only for a script whose effect nothing in the operation
    waits for and whose failure costs speed, not correctness: a write-through update after
    the commit, whose intent keeps readers on Postgres until it lands.

    ``meanwhile`` is work the driver may run after sending the script and before reading
    its reply, hidden by the round trip; it never raises, and the operation collects its
    result itself (a driver that does not run it costs only that time).
    """

    script: Script
    keys: Sequence[str]
    args: Sequence[str | bytes | int]
    wait: bool = True
    meanwhile: Callable[[], None] | None = None

    def sent_only(self) -> Hot:
        """This request, without waiting for its reply."""
        return Hot(self.script, self.keys, self.args, wait=False)

    def overlapping(self, work: Callable[[], None]) -> Hot:
        """This request, with ``work`` to run while its reply is in flight."""
        return Hot(self.script, self.keys, self.args, self.wait, work)


@dataclass(frozen=True, slots=True)
class HotBatch:
    """Run hot requests of different threads in one round trip (a pipeline, not a
    transaction: each script is atomic on its own); the result is their replies in order."""

    requests: tuple[Hot, ...]


@dataclass(frozen=True, slots=True)
class Statement:
    """One statement; ``fetch`` returns its rows. ``binary`` has Postgres send the rows in
    binary format: the same Python values, but a ``bytea`` arrives as its bytes instead
    of hex text twice its size that the client then decodes, which halves the time of a
    read that returns checkpoint frames (set only on queries whose columns all have a
    binary loader: text, bytea, integers and arrays of them)."""

    query: sql.Composable
    params: Mapping[str, Any]
    fetch: bool = False
    binary: bool = False


@dataclass(frozen=True, slots=True)
class Cold:
    """Run statements in one Postgres transaction; the result is one row list per statement
    (``None`` for statements that fetch nothing)."""

    statements: tuple[Statement, ...]

    @classmethod
    def one(
        cls,
        query: sql.Composable,
        params: Mapping[str, Any],
        fetch: bool = False,
        binary: bool = False,
    ) -> Cold:
        return cls((Statement(query, params, fetch, binary),))


@dataclass(frozen=True, slots=True)
class Pause:
    """Wait (``time.sleep`` or ``asyncio.sleep``), e.g. between flush polls."""

    seconds: float


Request = Hot | HotBatch | Cold | Pause
Op = Generator[Request, Any, T]
