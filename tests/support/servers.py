"""The servers the tests use, and their URLs and addresses.

Which servers (``LGD_TEST_SERVERS``):

- unset or ``auto``: ``LGD_REDIS_URL`` / ``LGD_POSTGRES_URL`` when both are set, else the
  local servers (Redis on 127.0.0.1:6379, Postgres on 127.0.0.1:5432, database ``test``)
  when both answer, else the embedded servers that ``make demo`` uses, started for this
  session in a folder of its own under the temp folder (Unix sockets only, so they never
  meet another session's or a running demo's) and stopped when it ends;
- ``embedded``: always those embedded servers, even when local ones answer;
- ``system``: the URLs, else the local servers; never starts anything (``.ci/run``).

The choice is made when this module is first imported. When it picks the embedded servers
it exports their URLs and ``LGD_TEST_SERVERS=system``, so that the processes the tests
spawn use the same servers; `tests/conftest.py` starts and stops them. Nothing here
flushes a server or touches keys and schemas it did not create.
"""

from __future__ import annotations

import os
import socket
import tempfile
from pathlib import Path
from urllib.parse import quote, urlencode, urlsplit, urlunsplit

import psycopg
import pytest
import redis
from psycopg.conninfo import conninfo_to_dict

from langgraph_durable.embedded import EmbeddedServers

TEST_SERVERS_ENV = "LGD_TEST_SERVERS"
LOCAL_REDIS_URL = "redis://127.0.0.1:6379/0"
LOCAL_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/test"

HOWTO = (
    "start it, e.g. `redis-server --daemonize yes --port 6379 --save '' --appendonly no` and "
    "`pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start`, point "
    "LGD_REDIS_URL / LGD_POSTGRES_URL at running servers, or unset "
    f"{TEST_SERVERS_ENV} to let the tests start the embedded servers"
)


def _answers(host: str, port: int) -> bool:
    """Whether something accepts TCP connections on ``host:port``."""
    try:
        socket.create_connection((host, port), timeout=1).close()
    except OSError:
        return False
    return True


WHY_EMBEDDED = ""


def _choose_servers() -> tuple[str, str, EmbeddedServers | None]:
    """The Redis URL, the Postgres URL, and the embedded servers to start (if any)."""
    mode = os.environ.get(TEST_SERVERS_ENV, "auto") or "auto"
    if mode not in ("auto", "embedded", "system"):
        raise pytest.UsageError(f"{TEST_SERVERS_ENV}={mode!r}: use auto, embedded or system")
    given = os.environ.get("LGD_REDIS_URL"), os.environ.get("LGD_POSTGRES_URL")
    if mode == "system" or (mode == "auto" and all(given)):
        return given[0] or LOCAL_REDIS_URL, given[1] or LOCAL_POSTGRES_URL, None
    if mode == "auto" and _answers("127.0.0.1", 6379) and _answers("127.0.0.1", 5432):
        return LOCAL_REDIS_URL, LOCAL_POSTGRES_URL, None
    global WHY_EMBEDDED
    if mode == "auto":
        WHY_EMBEDDED = "no LGD_REDIS_URL/LGD_POSTGRES_URL, nothing on 127.0.0.1:6379 and :5432"
    else:
        WHY_EMBEDDED = f"{TEST_SERVERS_ENV}=embedded"
    # A folder of this session's own; 0711 so that PostgreSQL's account (as root) enters it.
    folder = Path(tempfile.mkdtemp(prefix="lgd-tests-"))
    folder.chmod(0o711)
    servers = EmbeddedServers(folder / "data", startup_timeout=60)
    os.environ.update(LGD_REDIS_URL=servers.redis_url, LGD_POSTGRES_URL=servers.postgres_url)
    os.environ[TEST_SERVERS_ENV] = "system"
    return servers.redis_url, servers.postgres_url, servers


REDIS_URL, POSTGRES_URL, EMBEDDED = _choose_servers()
"""The servers every test uses; ``EMBEDDED`` is set when this session starts its own."""
POSTGRES_DATABASE = str(conninfo_to_dict(POSTGRES_URL).get("dbname") or "postgres")
"""The database of ``POSTGRES_URL``."""


def check_servers() -> None:
    """Exit the whole run at once, with a how-to, if a server does not answer."""
    try:
        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2).ping()
    except redis.exceptions.RedisError as exc:
        pytest.exit(f"Redis is not reachable at {REDIS_URL} ({exc}): {HOWTO}", returncode=3)
    try:
        psycopg.connect(POSTGRES_URL, connect_timeout=3).close()
    except psycopg.Error as exc:
        pytest.exit(f"Postgres is not reachable at {POSTGRES_URL} ({exc}): {HOWTO}", returncode=3)


def postgres_url(*, database: str | None = None, password: str | None = None,
                 query: dict[str, str] | None = None) -> str:
    """The test Postgres as a URL: another ``database``, a ``password`` in the user info,
    extra ``query`` parameters. A Unix-socket host (the embedded server's) goes in ``?host=``."""
    params = dict(query or {})
    info = conninfo_to_dict(POSTGRES_URL)
    host, port = str(info.get("host") or "127.0.0.1"), str(info.get("port") or "5432")
    user = quote(str(info.get("user") or "postgres"), safe="")
    if password is not None:
        user += f":{quote(password, safe='')}"
    if host.startswith("/"):
        netloc, params = f"{user}@", {"host": host, "port": port, **params}
    else:
        netloc = f"{user}@{host}:{port}"
    dbname = database or POSTGRES_DATABASE
    return urlunsplit(("postgresql", netloc, f"/{dbname}", urlencode(params, safe="/"), ""))


def postgres_address() -> tuple[str, int] | str:
    """Where the test Postgres listens: ``(host, port)``, or its Unix socket's path."""
    info = conninfo_to_dict(POSTGRES_URL)
    host, port = str(info.get("host") or "127.0.0.1"), int(info.get("port") or 5432)
    return f"{host}/.s.PGSQL.{port}" if host.startswith("/") else (host, port)


def redis_address() -> tuple[str, int] | str:
    """Where the test Redis listens: ``(host, port)``, or its Unix socket's path."""
    parts = urlsplit(REDIS_URL)
    if parts.scheme == "unix":
        return parts.path
    return parts.hostname or "127.0.0.1", parts.port or 6379


def redis_url(*, db: int) -> str:
    """The test Redis as a URL of logical database ``db``."""
    parts = urlsplit(REDIS_URL)
    if parts.scheme == "unix":  # unix:///path/to.sock?db=N
        base, _, query = REDIS_URL.partition("?")
        kept = [p for p in query.split("&") if p and not p.startswith("db=")]
        return f"{base}?{'&'.join([*kept, f'db={db}'])}"
    return urlunsplit(parts._replace(path=f"/{db}"))


def drop_prefix(prefix: str, url: str = REDIS_URL) -> None:
    """Delete every Redis key under ``prefix`` or a prefix derived from it (``prefix-x``)."""
    client = redis.Redis.from_url(url)
    try:
        batch = list(client.scan_iter(match=f"{prefix}*", count=1000))
        for i in range(0, len(batch), 500):
            client.delete(*batch[i : i + 500])
    finally:
        client.close()


def drop_schema(schema: str, url: str = POSTGRES_URL) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
