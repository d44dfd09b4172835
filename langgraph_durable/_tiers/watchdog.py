"""Gives up on Postgres requests whose server stopped answering.

A Redis read has a socket timeout; a Postgres statement has none that helps here: a server
that is frozen (a stopped process, a paused machine, a proxy that stopped forwarding) keeps
the TCP connection alive, and the statement would wait forever. A statement may also be
slow on a server that answers (a large flush, a sweep), and must then be left alone. So
once a request has waited half of ``tier_timeout``, the server its connection talks to is
asked, on a new TCP connection, to answer the first message of Postgres's protocol (an
``SSLRequest``, which a live postmaster or pooler answers with one byte before any
authentication). No byte within the other half: the request's connection is shut down, and
the request fails with `TierUnavailableError` (``tier="cold"``) about ``tier_timeout``
after it started. Both drivers use it: the shutdown wakes a blocking wait and an event
loop's alike.
"""

from __future__ import annotations

import contextlib
import os
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from langgraph_durable.config import SaverConfig, seconds

# Postgres's SSLRequest: length 8, then the request code 1234.5679.
_SSL_REQUEST = struct.pack("!ii", 8, 80877103)


@dataclass(slots=True)
class Watch:
    """One request watched: when it started, its connection, whether it was shut down."""

    conn: Any
    started: float = field(default_factory=time.monotonic)
    severed: bool = False


class Watchdog:
    """Watches the Postgres requests of one driver (see the module's docstring)."""

    def __init__(self, config: SaverConfig) -> None:
        self.timeout = seconds(config.tier_timeout)
        self._lock = threading.Lock()
        self._watched: dict[int, Watch] = {}
        self._thread: threading.Thread | None = None

    def watch(self, conn: Any) -> Watch:
        """Watch a request on ``conn`` until `done`; the `Watch` says whether it was shut
        down (its failure is then the server's silence: nothing to retry)."""
        watch = Watch(conn)
        with self._lock:
            self._watched[id(watch)] = watch
            if self._thread is None:
                self._thread = threading.Thread(target=self._patrol, daemon=True,
                                                name="langgraph-durable-watchdog")
                self._thread.start()
        return watch

    def done(self, watch: Watch) -> None:
        """The request of ``watch`` ended."""
        with self._lock:
            self._watched.pop(id(watch), None)

    def _patrol(self) -> None:
        """Look at the running requests a few times a second; end when there are none."""
        while True:
            time.sleep(min(0.25, self.timeout / 4))
            with self._lock:
                if not self._watched:
                    self._thread = None
                    return
                now = time.monotonic()
                late = [w for w in self._watched.values()
                        if now - w.started >= self.timeout / 2]
            silent: dict[tuple[str, str], float] = {}  # server -> when it was asked
            for where in {w for w in map(_address, (w.conn for w in late)) if w}:
                asked = time.monotonic()
                if not _answers(where, self.timeout / 2):
                    silent[where] = asked
            if silent:
                self._sever_waiting(silent)

    def _sever_waiting(self, silent: dict[tuple[str, str], float]) -> None:
        """Shut down every request to a server that did not answer, that was waiting
        already when the server was asked (it has waited at least as long, for nothing)."""
        with self._lock:
            waiting = list(self._watched.values())
        for watch in waiting:
            asked = silent.get(_address(watch.conn) or ("", ""))
            if asked is not None and watch.started <= asked:
                _sever(watch)


def _address(conn: Any) -> tuple[str, str] | None:
    """``(host, port)`` of the server ``conn`` talks to (host: a Unix socket's directory)."""
    try:
        return str(conn.info.host), str(conn.info.port)
    except Exception:  # closed meanwhile
        return None


def _answers(where: tuple[str, str], timeout: float) -> bool:
    """Whether the server at ``where`` answers an SSLRequest within ``timeout`` seconds."""
    host, port = where
    try:
        if host.startswith("/"):
            sock = socket.socket(socket.AF_UNIX)
            target: Any = os.path.join(host, f".s.PGSQL.{port}")
        else:
            sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
            target = (host, int(port))
    except (OSError, ValueError):
        return True  # nothing to ask: leave the request alone
    with sock:
        sock.settimeout(timeout)
        try:
            sock.connect(target)
            sock.sendall(_SSL_REQUEST)
            return bool(sock.recv(1))
        except TimeoutError:
            return False
        except OSError:
            return False  # refused or reset: the server is gone too


def _sever(watch: Watch) -> None:
    """Shut down the socket of a watched request's connection (its waiting read ends)."""
    try:
        fd = watch.conn.pgconn.socket
        sock = socket.socket(fileno=os.dup(fd))
    except Exception:  # closed meanwhile
        return
    with sock:
        watch.severed = True
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
