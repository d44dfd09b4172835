"""One Redis connection's script calls without I/O: what is sent and read, in which order.

The drivers leave a script's reply unread when its caller need not wait for it (`Hot.wait`
false: the update of the hot copy after a Postgres commit): the connection owes that reply,
and the next script on it reads it. The ordering rules live here, as psycopg keeps its
pipeline's protocol apart from its sockets: each call is a generator of `Send` and `Io`
steps, and a driver (`aio.py`, `sync.py`) only carries each one out on its connection
(`aio.Tiers._drive`), sending back what a read returned or throwing in what it raised.
`tests/core/test_redis_pipeline.py` checks the rules with no server.

- A script waited for, on a connection that owes a reply, is sent before that reply is
  read: the two share one round trip (Redis answers in the order it was sent). A script
  sent without waiting, and a batch, read the owed reply first.
- A server that lost its script cache (restarted, ``SCRIPT FLUSH``) answers ``NOSCRIPT``:
  the script goes again with its source. An owed script gets its source once the reply of
  the script sent behind it is read (Redis ran that one first; the owed update's intent
  keeps readers on Postgres until it lands).
- An owed reply's failure belongs to an operation that has returned: it is logged, not
  raised. But Redis not answering it within ``tier_timeout`` fails the script behind it at
  once (that script would wait as long again), and a connection it broke carries nothing
  more: the script fails as lost, and the driver's retry reconnects (and checks which Redis
  process it reached) before sending it.
- A refusal read whole leaves the connection in step; any other failure of an owed reply
  closes it. An owed script refused for a key of another type (another client wrote it)
  is kept in `ScriptCalls.damaged`, for the driver to repair its keys before the next
  script.
- A replicated script is followed by ``WAIT`` when replicas must acknowledge writes.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any, TypeVar

import hiredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError
from redis.exceptions import ResponseError as RedisResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from langgraph_durable._core.requests import Hot, HotBatch
from langgraph_durable._tiers.common import (
    HOT_ERRORS,
    LOST_CONNECTION,
    Scripts,
    wrong_type,
)

T = TypeVar("T")
logger = logging.getLogger("langgraph_durable")


@dataclass(frozen=True, slots=True)
class Send:
    """Send these commands, packed in the Redis protocol (``send_packed_command``)."""

    packed: list[bytes]


class Io(enum.Enum):
    """The steps that carry nothing."""

    READ = "read one reply"
    DISCONNECT = "close the connection (it reconnects on its next use)"


Step = Send | Io
Steps = Generator[Step, Any, T]


class ScriptCalls:
    """How one driver calls its scripts on a plain (not cluster) Redis: ``scripts`` knows
    which ones Redis holds; ``wait`` is the ``WAIT`` command after a replicated script
    (`common.replica_wait`), or None."""

    def __init__(self, scripts: Scripts, wait: tuple[Any, ...] | None) -> None:
        self.scripts = scripts
        self.wait = wait
        self.damaged: list[Hot] = []  # scripts sent without waiting that met a wrong type

    def call(self, request: Hot | HotBatch, owed: Hot | None) -> Steps[Any]:
        """Run ``request`` on a connection that owes the reply of ``owed`` (or nothing).
        Returns its reply (a batch: each script's), None for a script sent without waiting.

        Raises:
            redis.exceptions.ResponseError: Redis refused the script (read whole: the
                connection is still in step), or a batch's script (the rest unread).
            redis.exceptions.TimeoutError: Redis did not send the owed reply in time.
            redis.exceptions.ConnectionError: the owed reply broke the connection.
        """
        failed: list[BaseException] = []
        if owed is not None and (isinstance(request, HotBatch) or not request.wait):
            yield from self.settle(owed, failed=failed)
            _owed_failed(failed)
            owed = None
        if isinstance(request, HotBatch):
            yield Send(self.scripts.packed(*request.requests, source=True))
            replies = []
            for _ in request.requests:
                replies.append((yield Io.READ))
            if any(each.script.replicated for each in request.requests):
                yield from self._replicated()
            return replies
        yield Send(self.scripts.packed(request))
        if not request.wait:  # the reply is read before the connection's next use
            return None
        if request.meanwhile is not None:
            request.meanwhile()
        # The owed reply comes first; its script may need its source, sent once this
        # script's reply is read.
        lost = owed is not None and (yield from self.settle(owed, source=False, failed=failed))
        _owed_failed(failed)
        try:
            reply, refused = (yield from self._reply(request)), None
        except RedisResponseError as exc:  # read whole: the connection is still in step
            reply, refused = None, exc
        if lost and owed is not None:
            yield Send(self.scripts.packed(owed, source=True))
            yield from self.settle(owed)
        if refused is not None:
            raise refused
        return reply

    def settle(self, request: Hot, *, source: bool = True,
               failed: list[BaseException] | None = None) -> Steps[bool]:
        """Read the owed reply of ``request``, sent without waiting. A server that lost the
        script gets its source (and that reply is read now), or, with ``source`` false,
        True is returned: a command sent behind it is in flight, and the caller sends the
        source once that command's reply is read. A failure is logged and added to
        ``failed`` (for the script behind it), not raised."""
        try:
            try:
                yield Io.READ
            except NoScriptError:
                if not source:
                    return True
                yield Send(self.scripts.packed(request, source=True))
                yield Io.READ
            self.scripts.sent(request)
        except HOT_ERRORS as exc:  # an outage is the breaker's to report; a refusal is news
            if failed is not None:
                failed.append(exc)
            if not isinstance(exc, RedisResponseError):  # a refusal leaves the stream in step
                yield Io.DISCONNECT
            if wrong_type(exc):  # the next script's call repairs its keys, and says so
                self.damaged.append(request)
            level = (logging.DEBUG if isinstance(exc, LOST_CONNECTION) or wrong_type(exc)
                     else logging.WARNING)
            logger.log(level, "a Redis update sent without waiting failed (%s script): %s; "
                       "readers use Postgres until its intent's deadline", request.script.name, exc)
        return False

    def _reply(self, request: Hot) -> Steps[Any]:
        """The reply of ``request``, just sent: sent again with its source if the server
        does not hold the script."""
        try:
            reply = yield Io.READ
        except NoScriptError:
            yield Send(self.scripts.packed(request, source=True))
            reply = yield Io.READ
        self.scripts.sent(request)
        if request.script.replicated:
            yield from self._replicated()
        return reply

    def _replicated(self) -> Steps[None]:
        """With ``redis_replica_acks``, wait until that many replicas hold the connection's
        writes so far (``WAIT``)."""
        if self.wait is not None:
            yield Send([hiredis.pack_command(self.wait)])
            acked = yield Io.READ
            if int(acked) < self.wait[1]:  # as a Redis that cannot take writes
                raise RedisResponseError(
                    f"NOREPLICAS {acked} of the {self.wait[1]} replicas asked for "
                    f"acknowledged the write within {self.wait[2]} ms")


def _owed_failed(failed: list[BaseException]) -> None:
    """Fail the script behind an owed reply whose read (``failed``: what it met) timed
    out: Redis did not answer within ``tier_timeout``, and that script, or a retry of it
    on a new connection, would wait as long again (the driver retries only a lost
    connection). Or whose read broke the connection (closed by `ScriptCalls.settle`):
    what is sent next would go on a new connection, to a Redis process nobody checked it
    reached; the driver's retry reconnects and checks first."""
    for exc in failed:
        if isinstance(exc, RedisTimeoutError):
            raise RedisTimeoutError(f"an owed reply: {exc}") from exc
    for exc in failed:
        if not isinstance(exc, RedisResponseError):
            raise RedisConnectionError(
                f"connection lost while reading an owed reply: {exc}") from exc
