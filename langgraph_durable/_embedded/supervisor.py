"""Supervision of the embedded servers' processes, whichever server they are.

Launching a child tied to this process's life (PR_SET_PDEATHSIG from one long-lived
thread), pidfiles, finding and stopping servers left behind by a crashed process,
polling a server until it answers on its socket, stopping servers, the data
directory's lock, and the servers' logs. What is special to one server lives in
`postgres.py` or `valkey.py`; the data directory's layout in `langgraph_durable.embedded`.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import fcntl
import functools
import importlib.util
import logging
import os
import pwd
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Final, Literal

from langgraph_durable.errors import ConfigurationError, TierUnavailableError

logger = logging.getLogger("langgraph_durable").getChild("embedded")
"""The logger of every ``_embedded`` module: ``langgraph_durable.embedded``."""

Tier = Literal["hot", "cold"]
"""The storage tier a server backs: ``"hot"`` (Valkey) or ``"cold"`` (PostgreSQL)."""

_PR_SET_PDEATHSIG: Final = 1
_LOG_ROTATE_BYTES: Final = 5 * 1024 * 1024
_LOG_TAIL_LINES: Final = 40
_POLL_INTERVAL: Final = 0.02


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerSpec:
    """What the supervisor knows of one server of one data directory."""

    process: str
    """The binary's process name (``/proc/<pid>/comm``): ``postgres``, ``valkey-server``."""
    label: str
    """Its name in messages: ``PostgreSQL``, ``Valkey``."""
    tier: Tier
    """The tier named by the `TierUnavailableError` raised when it does not come up."""
    workdir: Path
    """Its working directory, which tells it apart from the same server of another folder."""
    socket: Path
    """Its Unix socket."""
    pidfile: Path
    """The pidfile this module writes at launch and removes at stop."""
    log: Path
    """The file its output is appended to."""
    stop_signal: signal.Signals
    """The signal of its clean shutdown, also sent when this process dies."""
    own_pidfile: Path | None = None
    """The pidfile the server writes itself, if any (PostgreSQL's ``postmaster.pid``)."""


def package_dir(package: str, pip_name: str) -> Path:
    """Locate an installed package's folder without importing it."""
    spec = importlib.util.find_spec(package)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        raise ConfigurationError(
            f"the embedded servers need the {pip_name!r} package, which is not installed: "
            f"pip install {pip_name} (or, in a checkout, pip install '.[embedded]')"
        )
    return Path(locations[0])


# --------------------------------------------------------------------------- accounts


@dataclass(frozen=True, slots=True)
class RunAs:
    """The account a server runs as (None: the current one)."""

    uid: int | None
    gid: int | None
    name: str

    @property
    def extra_groups(self) -> list[int] | None:
        """Supplementary groups for `subprocess`: none when switching account."""
        return [] if self.uid is not None else None


def current_user() -> RunAs:
    """The account this process runs as."""
    try:
        name = pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        name = str(os.geteuid())
    return RunAs(None, None, name)


# --------------------------------------------------------------------------- launching


@functools.cache
def _libc() -> ctypes.CDLL | None:
    """Load libc for prctl(2); None where there is no prctl (not Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def _make_preexec(death_signal: signal.Signals) -> Callable[[], None] | None:
    """Build a ``preexec_fn`` that ties the child's life to this process (Linux only).

    The function runs in the forked child after `subprocess` has switched user and
    group (which clears the parent-death signal), so the setting sticks.
    """
    libc = _libc()
    if libc is None:
        return None
    prctl = libc.prctl
    parent_pid = os.getpid()

    def preexec() -> None:
        if prctl(_PR_SET_PDEATHSIG, int(death_signal), 0, 0, 0) != 0:
            os._exit(126)
        if os.getppid() != parent_pid:  # the parent died before prctl took effect
            os._exit(1)

    return preexec


_Job = tuple[Callable[[], subprocess.Popen[bytes]], Future[subprocess.Popen[bytes]]]


class _Spawner:
    """Launches children from one long-lived daemon thread.

    PR_SET_PDEATHSIG fires when the *thread* that forked the child ends, not the
    process. Forking from a thread that lives as long as the process makes the signal
    mean "the process died", whichever thread called `EmbeddedServers.start()`.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._owner_pid = -1

    def spawn(self, launch: Callable[[], subprocess.Popen[bytes]]) -> subprocess.Popen[bytes]:
        """Run ``launch`` (which calls `subprocess.Popen`) on the spawner thread."""
        with self._lock:
            # A thread does not survive fork(): a forked child starts its own.
            stale = self._owner_pid != os.getpid()
            if self._thread is None or not self._thread.is_alive() or stale:
                self._jobs = queue.SimpleQueue()
                self._thread = threading.Thread(
                    target=self._serve, args=(self._jobs,), name="lgd-embedded-spawner", daemon=True
                )
                self._thread.start()
                self._owner_pid = os.getpid()
            jobs = self._jobs
        future: Future[subprocess.Popen[bytes]] = Future()
        jobs.put((launch, future))
        return future.result()

    @staticmethod
    def _serve(jobs: queue.SimpleQueue[_Job]) -> None:
        while True:
            launch, future = jobs.get()
            try:
                future.set_result(launch())
            except BaseException as exc:  # handed to the caller, who re-raises it
                future.set_exception(exc)


_spawner = _Spawner()


def child_env() -> dict[str, str]:
    """Environment for server processes: ours minus PG* variables that steer libpq/initdb."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env.setdefault("LC_ALL", "C")
    return env


def launch(
    spec: ServerSpec, cmd: list[str], *, account: RunAs, pdeathsig: bool
) -> subprocess.Popen[bytes]:
    """Start ``cmd`` as ``account`` in ``spec.workdir`` and write ``spec.pidfile``.

    With ``pdeathsig`` the child receives ``spec.stop_signal`` when this process dies.

    Raises:
        TierUnavailableError: The process could not be started.
    """
    log = open_log(spec.log)
    preexec = _make_preexec(spec.stop_signal) if pdeathsig else None

    def start() -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=spec.workdir,
            env=child_env(),
            start_new_session=True,  # keep terminal Ctrl-C away; we stop them ourselves
            preexec_fn=preexec,
            user=account.uid,
            group=account.gid,
            extra_groups=account.extra_groups,
        )

    try:
        proc = _spawner.spawn(start)
    except (OSError, subprocess.SubprocessError) as exc:
        raise TierUnavailableError(f"could not launch {cmd[0]}: {exc}", tier=spec.tier) from exc
    finally:
        log.close()  # the child has its own copy of the descriptor
    spec.pidfile.write_text(f"{proc.pid}\n")
    logger.debug("launched %s (pid %d)", " ".join(cmd), proc.pid)
    return proc


def wait_ready(
    spec: ServerSpec,
    proc: subprocess.Popen[bytes],
    ping: Callable[[], object],
    errors: type[Exception],
    *,
    timeout: float,
) -> None:
    """Poll ``ping`` over ``spec.socket`` until it succeeds, ``proc`` exits or time is up.

    Each ``errors`` raised by ``ping`` (e.g. "the database system is starting up", or
    LOADING while Valkey replays its AOF) means "not yet".

    Raises:
        TierUnavailableError: ``proc`` exited, or did not answer within ``timeout``
            seconds; the message holds the tail of its log.
    """
    deadline = time.monotonic() + timeout
    last = "not started"
    while True:
        code = proc.poll()
        if code is not None:
            reason = f"exited with code {code} during startup"
            break
        if not spec.socket.exists():
            last = "no socket yet"
        else:
            try:
                ping()
            except errors as exc:
                last = str(exc).strip()
            else:
                return
        if time.monotonic() >= deadline:
            reason = f"did not accept connections within {timeout:g}s ({last})"
            break
        time.sleep(_POLL_INTERVAL)
    raise TierUnavailableError(
        f"embedded {spec.label} (pid {proc.pid}) {reason}; last lines of {spec.log}:\n"
        f"{log_tail(spec.log)}",
        tier=spec.tier,
    )


# --------------------------------------------------------------------------- stopping


def stop_all(running: Sequence[tuple[ServerSpec, subprocess.Popen[bytes]]], timeout: float) -> None:
    """Signal every server, then wait for each (SIGKILL after ``timeout``); drop pidfiles."""
    for spec, proc in running:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(spec.stop_signal)
    for spec, proc in running:
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            logger.warning("pid %d did not stop in time; sending SIGKILL", proc.pid)
            proc.kill()
            proc.wait()
        with contextlib.suppress(FileNotFoundError):
            spec.pidfile.unlink()


def leftover_pids(spec: ServerSpec) -> set[int]:
    """Pids that may be this server left behind: its pidfiles, and a /proc scan if needed.

    The scan runs only when the socket is still there; the pids still have to pass
    `stop_leftovers`' check that each one is our server.
    """
    pidfiles = (spec.pidfile, spec.own_pidfile)
    pids = {pid for path in pidfiles if path is not None and (pid := _read_pid(path)) is not None}
    if spec.socket.exists():
        pids |= _find_servers(spec.process, spec.workdir)
    return pids


def stop_leftovers(spec: ServerSpec, pids: set[int], *, timeout: float, data_dir: Path) -> None:
    """Stop each of ``pids`` that is this server (SIGKILL after ``timeout``)."""
    for pid in sorted(pids):
        if _is_server(pid, spec.process, spec.workdir):
            logger.warning(
                "stopping leftover %s (pid %d) of a previous run in %s",
                spec.process, pid, data_dir,
            )  # fmt: skip
            _kill_pid(pid, spec.stop_signal, timeout)


def clear_pidfiles(spec: ServerSpec) -> None:
    """Remove our pidfile, and the server's own one if it names a process that is not it."""
    own = spec.own_pidfile
    stale = _read_pid(own) if own is not None else None
    if own is not None and stale is not None and not _is_server(stale, spec.process, spec.workdir):
        # PostgreSQL itself refuses to start if the pid was reused by a live process.
        logger.info("removing stale %s (pid %d is not our %s)", own.name, stale, spec.process)
        with contextlib.suppress(FileNotFoundError):
            own.unlink()
    with contextlib.suppress(FileNotFoundError):
        spec.pidfile.unlink()


# --------------------------------------------------------------------------- processes


def _pid_alive(pid: int) -> bool:
    """Whether a process exists and is not a zombie; reaps it if it is our child."""
    with contextlib.suppress(ChildProcessError):
        reaped, _ = os.waitpid(pid, os.WNOHANG)
        if reaped == pid:
            return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by someone else
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return not Path("/proc/self").exists()  # no /proc (macOS): trust kill(0)
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def _process_name(pid: int) -> str | None:
    """The short name of a process (``/proc/<pid>/comm``, else ``ps``)."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except FileNotFoundError:
        if Path("/proc/self").exists():
            return None
    except OSError:
        return None
    ps = shutil.which("ps")
    if ps is None:
        return None
    out = subprocess.run([ps, "-o", "comm=", "-p", str(pid)], capture_output=True, text=True)
    name = out.stdout.strip()
    return os.path.basename(name) if name else None


def _is_server(pid: int, name: str, workdir: Path) -> bool:
    """Whether ``pid`` is a live ``name`` process whose working directory is ``workdir``.

    PostgreSQL chdirs into PGDATA and Valkey into its ``dir``, so the working directory
    identifies the server of one data directory. Where /proc is missing the name alone
    has to do.
    """
    if pid <= 0 or pid == os.getpid() or not _pid_alive(pid):
        return False
    if _process_name(pid) != name:
        return False
    try:
        cwd = os.readlink(f"/proc/{pid}/cwd")
    except FileNotFoundError:
        return not Path("/proc/self").exists()
    except OSError:
        return False
    return cwd == os.path.realpath(workdir)


def _find_servers(name: str, workdir: Path) -> set[int]:
    """Scan /proc for ``name`` processes whose working directory is ``workdir``."""
    found: set[int] = set()
    proc = Path("/proc")
    if not proc.is_dir():
        return found
    for entry in proc.iterdir():
        if entry.name.isdigit():
            pid = int(entry.name)
            with contextlib.suppress(OSError):
                if (entry / "comm").read_text().strip() == name and _is_server(pid, name, workdir):
                    found.add(pid)
    return found


def _wait_gone(pid: int, timeout: float) -> bool:
    """Poll until ``pid`` has exited; return whether it did within ``timeout``."""
    deadline = time.monotonic() + timeout
    while _pid_alive(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(_POLL_INTERVAL)
    return True


def _kill_pid(pid: int, first: signal.Signals, timeout: float) -> None:
    """Send ``first``; after ``timeout`` seconds, SIGKILL; wait for the process to go."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, first)
    if not _wait_gone(pid, timeout):
        logger.warning("pid %d ignored %s for %.0fs; sending SIGKILL", pid, first.name, timeout)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        _wait_gone(pid, 10.0)


def _read_pid(path: Path) -> int | None:
    """First line of a pidfile as an int, or None if missing or unreadable."""
    try:
        first = path.read_text().splitlines()[0].strip()
    except (OSError, IndexError):
        return None
    return int(first) if first.isdigit() else None


# --------------------------------------------------------------------------- lock and logs


class DataDirInUseError(ConfigurationError):
    """Another process (its pid is ``holder``) runs embedded servers on the data directory."""

    def __init__(self, message: str, *, holder: str) -> None:
        super().__init__(message)
        self.holder = holder


def lock_data_dir(path: Path, data_dir: Path) -> IO[str]:
    """Take the ``flock`` on lock file ``path`` of ``data_dir`` and write our pid in it.

    The lock is held until the returned file is closed (see `unlock_data_dir`).

    Raises:
        DataDirInUseError: Another process (or object) holds the lock.
    """
    fh = open(path, "a+", encoding="utf-8")  # noqa: SIM115 - held until unlock_data_dir()
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fh.seek(0)
        holder = fh.read().strip() or "unknown"
        fh.close()
        raise DataDirInUseError(
            f"data directory {data_dir} is in use by embedded servers of process "
            f"{holder}; stop them first or use another data directory",
            holder=holder,
        ) from None
    fh.seek(0)
    fh.truncate()
    fh.write(f"{os.getpid()}\n")
    fh.flush()
    return fh


def unlock_data_dir(fh: IO[str]) -> None:
    """Empty the lock file returned by `lock_data_dir` and close it, releasing the lock."""
    with contextlib.suppress(OSError):
        fh.seek(0)
        fh.truncate()
    fh.close()  # closing releases the flock


def log_tail(path: Path, lines: int = _LOG_TAIL_LINES) -> str:
    """The last ``lines`` lines of a log file, for error messages."""
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 64 * 1024))
            text = fh.read().decode("utf-8", "replace")
    except OSError as exc:
        return f"(log {path} unreadable: {exc})"
    return "\n".join(text.splitlines()[-lines:])


def open_log(path: Path) -> IO[bytes]:
    """Open a server log for appending, rotating it to ``<name>.1`` once it is large."""
    with contextlib.suppress(FileNotFoundError):
        if path.stat().st_size > _LOG_ROTATE_BYTES:
            path.replace(path.with_name(path.name + ".1"))
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
    return os.fdopen(fd, "ab", buffering=0)
