"""Real faults for tests: a private redis-server the test stops and restarts, a TCP proxy
in front of Postgres that the test can cut (existing connections die, new ones are refused)
and restore, or have lose one reply, an operator's command line run while the system
works (`cli`), and the simulation's lost reply for one request of an operation.

The private server is ``redis-server`` when the session uses the system servers and one
is installed, else the ``valkey-server`` of the embedded servers."""

from __future__ import annotations

import contextlib
import json
import select
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any, Literal, TypeVar

import redis

from langgraph_durable._embedded import valkey
from langgraph_durable.errors import TierUnavailableError
from tests.support.servers import EMBEDDED

T = TypeVar("T")

# A Postgres ReadyForQuery message (idle): the server sends it once a request's implicit
# transaction has committed.
READY_FOR_QUERY = b"Z\x00\x00\x00\x05I"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrivateRedis:
    """A redis-server of the test's own, on its own port and directory."""

    def __init__(self, workdir: Path, *, appendonly: str | None = None,
                 password: str | None = None, replica_of: int | None = None) -> None:
        self.port = free_port()
        self.dir = workdir
        self.appendonly = appendonly
        self.password = password
        self.replica_of = replica_of  # the port of the primary it starts as a replica of
        self.proc: subprocess.Popen[bytes] | None = None
        system = shutil.which("redis-server") if EMBEDDED is None else None
        self.binary = system or str(valkey.binary())

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        args = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                "--dir", str(self.dir), "--logfile", str(self.dir / "redis.log")]
        if self.appendonly:
            args += ["--appendonly", "yes", "--appendfsync", self.appendonly]
        else:
            args += ["--appendonly", "no"]
        if self.password:
            args += ["--requirepass", self.password]
        if self.replica_of is not None:
            args += ["--replicaof", "127.0.0.1", str(self.replica_of)]
        self.proc = subprocess.Popen(args)
        client = redis.Redis(port=self.port, password=self.password)
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                break
            except redis.exceptions.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.02)
        client.close()

    def save(self) -> None:
        """Write an RDB of the data now (``SAVE``): the next start loads it, whatever was
        written after it gone, as a restore from a backup or an old snapshot does."""
        client = redis.Redis(port=self.port, password=self.password)
        try:
            client.save()
        finally:
            client.close()

    def freeze(self) -> None:
        """SIGSTOP: the server keeps its port (the kernel still accepts connections) and
        answers nothing, as a paused machine or an overloaded server does."""
        if self.proc is not None:
            self.proc.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        """SIGCONT: the frozen server answers again, what it was sent meanwhile first."""
        if self.proc is not None:
            self.proc.send_signal(signal.SIGCONT)

    def kill(self) -> None:
        """SIGKILL: no shutdown save, whatever the AOF policy had not written is gone."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait()
            self.proc = None


@contextlib.contextmanager
def private_redis(workdir: Path, *, appendonly: str | None = None,
                  password: str | None = None) -> Iterator[PrivateRedis]:
    server = PrivateRedis(workdir, appendonly=appendonly, password=password)
    server.start()
    try:
        yield server
    finally:
        server.kill()


class Proxy:
    """Forwards 127.0.0.1:<port> to a target, ``(host, port)`` or a Unix socket's path;
    `cut()` drops every connection and refuses new ones until `restore()`; `freeze()`
    keeps every connection and accepts new ones but forwards nothing until `thaw()` (a
    server that stopped answering);
    `lose_reply(marker)` lets the server answer the next request that contains ``marker``
    in full, drops the answer and closes that connection; ``delay`` (seconds, 0 by
    default) holds every chunk that long before forwarding it: a slow link."""

    def __init__(self, target: tuple[str, int] | str) -> None:
        self.target = target
        self.port = free_port()
        self._listener: socket.socket | None = None
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._marker: bytes | None = None
        self.lost = 0  # replies dropped by `lose_reply`
        self.delay = 0.0  # seconds each chunk waits before it is forwarded
        self._frozen = threading.Event()  # set: nothing is forwarded (`freeze`)

    def freeze(self) -> None:
        self._frozen.set()

    def thaw(self) -> None:
        self._frozen.clear()

    def lose_reply(self, marker: bytes) -> None:
        """Drop the reply to the next request whose bytes contain ``marker``, once the
        server sent all of it (so its transaction committed), and close that connection."""
        self._marker = marker

    def start(self) -> None:
        self._stop.clear()
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self._listener = listener
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        assert self._listener is not None
        while not self._stop.is_set():
            ready, _, _ = select.select([self._listener], [], [], 0.05)
            if not ready:
                continue
            try:
                client, _ = self._listener.accept()
                upstream = self._connect()
            except OSError:
                continue
            with self._lock:
                self._pairs.append((client, upstream))
            doomed = threading.Event()  # this connection's next reply is to be lost
            for a, b, up in ((client, upstream, True), (upstream, client, False)):
                threading.Thread(target=self._pump, args=(a, b, up, doomed),
                                 daemon=True).start()

    def _connect(self) -> socket.socket:
        if isinstance(self.target, tuple):
            return socket.create_connection(self.target)
        upstream = socket.socket(socket.AF_UNIX)
        try:
            upstream.connect(self.target)
        except OSError:
            upstream.close()
            raise
        return upstream

    def _pump(self, src: socket.socket, dst: socket.socket, up: bool,
              doomed: threading.Event) -> None:
        held = b""
        try:
            while data := src.recv(65536):
                if up and self._marker is not None and self._marker in data:
                    self._marker = None
                    doomed.set()
                if not up and doomed.is_set():
                    held += data
                    if READY_FOR_QUERY in held:  # answered in full, never delivered
                        self.lost += 1
                        break
                    continue
                if self.delay:
                    time.sleep(self.delay)
                while self._frozen.is_set() and not self._stop.is_set():
                    time.sleep(0.02)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for pair in pairs:
            for s in pair:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()

    def restore(self) -> None:
        self.start()

    def url(self, database: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"


def cli(args: list[str], env: dict[str, str]) -> tuple[int, str]:
    """``langgraph-durable ARGS`` as an operator runs it at a shell, with ``env`` (its
    ``LGD_*`` settings), in this process: the exit code and what it printed (stdout, then
    stderr)."""
    code, stdout, stderr = _invoked(args, env)
    return code, stdout + stderr


def cli_json(args: list[str], env: dict[str, str]) -> tuple[int, Any, str]:
    """``langgraph-durable ARGS --json`` as `cli` runs it: the exit code, the document it
    printed on stdout (None when it exited non-zero) and all it printed. A warning on
    stderr (a tier that did not answer) is the operator's to read, not part of the document."""
    code, stdout, stderr = _invoked(args, env)
    return code, json.loads(stdout) if code == 0 else None, stdout + stderr


def _invoked(args: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    from typer.testing import CliRunner

    from langgraph_durable.cli import app

    result = CliRunner().invoke(app, args, env={**env, "COLUMNS": "250"})
    return result.exit_code, result.stdout, result.stderr


def lose_reply(op: Generator[Any, Any, T], lost: Callable[[Any], bool], *,
               tier: Literal["hot", "cold"] = "cold") -> Generator[Any, Any, T]:
    """``op``, except that the first request for which ``lost(request)`` holds runs and then
    has its reply replaced by ``TierUnavailableError`` of ``tier`` — the simulation's "lost"
    fault (`tests/support/sim/scheduler.py`): the server applied the request, the caller
    never heard (a Redis that froze and ran it once it thawed, a Postgres whose reply was
    lost)."""
    request = next(op)
    armed = True
    while True:
        try:
            reply = yield request
        except Exception as exc:  # the driver's error for this request
            try:
                request = op.throw(exc)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
            continue
        try:
            if armed and lost(request):
                armed = False
                request = op.throw(TierUnavailableError("injected lost reply", tier=tier))
            else:
                request = op.send(reply)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
