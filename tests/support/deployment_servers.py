"""Servers a deployment test starts for itself: a redis-server with TLS or with an ACL user,
a primary with a replica watched by a sentinel, a pgbouncer in transaction mode. Each runs
on a free port in the test's directory and is killed when its block ends."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import redis

from tests.support.faults import PrivateRedis, free_port
from tests.support.servers import postgres_address


def wait_until(ready: Callable[[], Any], *, timeout: float = 15.0) -> Any:
    """Call ``ready`` until it returns something true without raising; return that."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = ready()
            if value:
                return value
        except (redis.RedisError, psycopg.Error, OSError):
            if time.monotonic() > deadline:
                raise
        if time.monotonic() > deadline:
            raise TimeoutError("the server did not become ready")
        time.sleep(0.05)


@contextlib.contextmanager
def process(args: Sequence[str], ready: Callable[[], Any], *,
            log: Path | None = None) -> Iterator[subprocess.Popen[bytes]]:
    """Run ``args`` until the block ends (SIGKILL), once ``ready()`` answers."""
    out = open(log, "ab") if log else subprocess.DEVNULL  # noqa: SIM115 - closed below
    proc = subprocess.Popen(list(args), stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: _running(proc, log) and ready())
        yield proc
    finally:
        proc.kill()
        proc.wait()
        if log:
            out.close()  # type: ignore[union-attr]


def _running(proc: subprocess.Popen[bytes], log: Path | None) -> bool:
    """Whether ``proc`` still runs; if it exited, raise with the end of its log."""
    if proc.poll() is None:
        return True
    said = log.read_text(errors="replace")[-600:] if log and log.exists() else ""
    raise RuntimeError(f"{proc.args[0]} exited with {proc.returncode}: {said}")


def redis_binary(workdir: Path) -> str:
    """The redis-server (or valkey-server) the other fault tests use."""
    return PrivateRedis(workdir).binary


def redis_args(workdir: Path, port: int, *extra: str, binary: str | None = None) -> list[str]:
    """A memory-only redis-server (``binary``, else `redis_binary`) on ``port`` in
    ``workdir``."""
    return [binary or redis_binary(workdir), "--port", str(port), "--bind", "127.0.0.1",
            "--save", "", "--appendonly", "no", "--dir", str(workdir), *extra]


def pings(**kwargs: Any) -> Callable[[], bool]:
    """A readiness check that opens a client with ``kwargs`` and pings."""
    def ping() -> bool:
        client = redis.Redis(**kwargs, socket_timeout=1)
        try:
            return bool(client.ping())
        finally:
            client.close()
    return ping


@dataclass(frozen=True)
class TlsRedis:
    """Two TLS-only redis-servers: on ``port`` a client certificate is optional, on
    ``mtls_port`` required; ``dir`` holds ``ca.crt`` and ``client.crt``/``client.key``."""

    port: int
    mtls_port: int
    dir: Path


@contextlib.contextmanager
def tls_redis(workdir: Path) -> Iterator[TlsRedis]:
    """Start the servers of `TlsRedis`, with a CA and certificates made by ``openssl``.
    The system ``redis-server`` is used when there is one: the embedded servers' Valkey is
    built without TLS."""
    ca = workdir / "ca.crt"
    (workdir / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    openssl = [["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out",
                "ca.crt", "-days", "1", "-subj", "/CN=lgd-test-ca"]]
    for name in ("server", "client"):
        openssl += [
            ["req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out",
             f"{name}.csr", "-subj", "/CN=127.0.0.1"],
            ["x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
             "-CAcreateserial", "-out", f"{name}.crt", "-days", "1", "-extfile", "ext.cnf"]]
    for command in openssl:
        subprocess.run(["openssl", *command], cwd=workdir, check=True, capture_output=True)
    with ExitStack() as stack:
        ports = []
        for auth in ("optional", "yes"):
            port = free_port()
            args = redis_args(workdir, 0, "--tls-port", str(port),
                              "--tls-cert-file", str(workdir / "server.crt"),
                              "--tls-key-file", str(workdir / "server.key"),
                              "--tls-ca-cert-file", str(ca), "--tls-auth-clients", auth,
                              binary=shutil.which("redis-server"))
            stack.enter_context(process(args, pings(
                port=port, ssl=True, ssl_ca_certs=str(ca), ssl_certfile=str(
                    workdir / "client.crt"), ssl_keyfile=str(workdir / "client.key")),
                log=workdir / f"tls-{auth}.log"))
            ports.append(port)
        yield TlsRedis(ports[0], ports[1], workdir)


def pgbouncer_args(workdir: Path, port: int, database: str,
                   backend: tuple[str, int] | None = None,
                   password: str | None = None) -> list[str]:
    """A pgbouncer in transaction mode on ``port`` in front of the test Postgres's
    ``database`` (trust auth; with ``password``, clients must give it), reached at
    ``backend`` (default: where it listens). Run as ``postgres`` when the test runs as
    root, which pgbouncer refuses to be."""
    address = backend or postgres_address()
    host, pg_port = (address if isinstance(address, tuple)
                     else (os.path.dirname(address), int(address.rsplit(".", 1)[1])))
    (workdir / "users.txt").write_text(f'"postgres" "{password or ""}"\n')
    (workdir / "pgbouncer.ini").write_text(f"""\
[databases]
{database} = host={host} port={pg_port} dbname={database}
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = {"md5" if password else "trust"}
auth_file = {workdir / "users.txt"}
pool_mode = transaction
default_pool_size = 4
ignore_startup_parameters = extra_float_digits,options
""")
    binary = shutil.which("pgbouncer")
    if binary is None:
        raise RuntimeError("pgbouncer is not installed: `apt-get install pgbouncer` "
                           "(.ci/run installs it)")
    if os.geteuid() == 0:
        workdir.chmod(0o777)
        postgres = pwd.getpwnam("postgres")
        os.chown(workdir / "pgbouncer.ini", postgres.pw_uid, postgres.pw_gid)
        os.chown(workdir / "users.txt", postgres.pw_uid, postgres.pw_gid)
        return [binary, "-u", "postgres", str(workdir / "pgbouncer.ini")]
    return [binary, str(workdir / "pgbouncer.ini")]
