"""Test fixtures: real Redis and Postgres, one Postgres schema and Redis prefix per module.

Which servers the tests use (``LGD_TEST_SERVERS``):

- unset or ``auto``: ``LGD_REDIS_URL`` / ``LGD_POSTGRES_URL`` when both are set, else the
  local servers (Redis on 127.0.0.1:6379, Postgres on 127.0.0.1:5432, database ``test``)
  when both answer, else the embedded servers that ``make demo`` uses, started for this
  session in a folder of its own under the temp folder (Unix sockets only, so they never
  meet another session's or a running demo's) and stopped when it ends;
- ``embedded``: always those embedded servers, even when local ones answer;
- ``system``: the URLs, else the local servers; never starts anything (``.ci/run``).

A session that starts the embedded servers exports their URLs and ``LGD_TEST_SERVERS=system``,
so that the processes the tests spawn use the same servers. Nothing here flushes a server
or touches keys and schemas it did not create. The tests in ``tests/core/`` drive the
sans-I/O core with a scripted fake driver and need no server.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode, urlsplit, urlunsplit

import psycopg
import pytest
import redis
from langgraph.checkpoint.base import empty_checkpoint
from psycopg.conninfo import conninfo_to_dict

from langgraph_durable import DurableSaver
from langgraph_durable.embedded import EmbeddedServers
from tests.cluster import TestCluster

TEST_SERVERS_ENV = "LGD_TEST_SERVERS"
LOCAL_REDIS_URL = "redis://127.0.0.1:6379/0"
LOCAL_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/test"

_HOWTO = (
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


_WHY_EMBEDDED = ""


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
    global _WHY_EMBEDDED
    if mode == "auto":
        _WHY_EMBEDDED = "no LGD_REDIS_URL/LGD_POSTGRES_URL, nothing on 127.0.0.1:6379 and :5432"
    else:
        _WHY_EMBEDDED = f"{TEST_SERVERS_ENV}=embedded"
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


SERVER_FREE = Path(__file__).parent / "core"


def _server_free_only(config: pytest.Config) -> bool:
    """Whether every path given on the command line is inside ``tests/core/``."""
    paths = [(config.invocation_params.dir / arg.split("::")[0]).resolve() for arg in config.args]
    return bool(paths) and all(path.is_relative_to(SERVER_FREE) for path in paths)


def _check_servers() -> None:
    """Exit the whole run at once, with a how-to, if a server does not answer."""
    try:
        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2).ping()
    except redis.exceptions.RedisError as exc:
        pytest.exit(f"Redis is not reachable at {REDIS_URL} ({exc}): {_HOWTO}", returncode=3)
    try:
        psycopg.connect(POSTGRES_URL, connect_timeout=3).close()
    except psycopg.Error as exc:
        pytest.exit(f"Postgres is not reachable at {POSTGRES_URL} ({exc}): {_HOWTO}", returncode=3)


def pytest_sessionstart(session: pytest.Session) -> None:
    """Say which servers the run uses, and fail the whole run at once if a given server is
    missing (unless only the server-free core tests were asked for); the embedded servers
    are started by `test_servers`."""
    if _server_free_only(session.config):
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if EMBEDDED is None:
        line = f"servers: {REDIS_URL} and {POSTGRES_URL}"
    else:
        line = (f"servers: embedded PostgreSQL and Valkey ({_WHY_EMBEDDED}), started in "
                f"{EMBEDDED.data_dir} and stopped when the tests end")
    if reporter is not None:
        reporter.write_line(line)
    if EMBEDDED is None:
        _check_servers()


@pytest.fixture(scope="session", autouse=True)
def test_servers(request: pytest.FixtureRequest) -> Iterator[None]:
    """Start this session's embedded servers, if it uses them, and stop them (and remove
    their folder) when the session ends."""
    if EMBEDDED is None or _server_free_only(request.config):
        yield
        if EMBEDDED is not None:
            shutil.rmtree(EMBEDDED.data_dir.parent, ignore_errors=True)
        return
    try:
        EMBEDDED.start()
    except Exception as exc:
        shutil.rmtree(EMBEDDED.data_dir.parent, ignore_errors=True)
        pytest.exit(f"the embedded servers did not start ({exc}): {_HOWTO}", returncode=3)
    try:
        _check_servers()
        yield
    finally:
        EMBEDDED.stop()
        shutil.rmtree(EMBEDDED.data_dir.parent, ignore_errors=True)


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


@pytest.fixture(scope="module")
def namespace(request: pytest.FixtureRequest) -> Iterator[tuple[str, str]]:
    """A Postgres schema and a Redis key prefix of this test module's own."""
    tag = uuid.uuid4().hex[:8]
    module = request.module.__name__.rsplit(".", 1)[-1].removeprefix("test_")[:30]
    schema, prefix = f"lgdt_{module}_{tag}", f"lgdt-{module}-{tag}"
    yield schema, prefix
    drop_prefix(prefix)
    drop_schema(schema)


@pytest.fixture(params=["through", "behind"])
def write_mode(request: pytest.FixtureRequest) -> str:
    """Every saver test runs in each write mode."""
    return str(request.param)


@pytest.fixture
def make_saver(namespace: tuple[str, str], write_mode: str) -> Iterator[type[DurableSaver]]:
    """A factory of set-up savers on this module's schema and prefix; closed after the test."""
    schema, prefix = namespace
    made: list[DurableSaver] = []

    def factory(**options: object) -> DurableSaver:
        options.setdefault("write_mode", write_mode)
        saver = DurableSaver(REDIS_URL, POSTGRES_URL, key_prefix=prefix, schema=schema,
                             **options)  # type: ignore[arg-type]
        saver.setup()
        made.append(saver)
        return saver

    yield factory  # type: ignore[misc]
    for saver in made:
        saver.close()


@pytest.fixture
def saver(make_saver: type[DurableSaver]) -> DurableSaver:
    """One set-up saver."""
    return make_saver()


def value_put_args(saver: DurableSaver, thread_id: str, value: object, ns: str,
               metadata: dict[str, object] | None) -> tuple[Any, ...]:
    """The arguments of a ``put`` of one root checkpoint whose channel ``value`` holds
    ``value`` (``metadata`` added to its own)."""
    checkpoint = empty_checkpoint()
    version = saver.get_next_version(None, None)
    checkpoint["channel_values"] = {"value": value}
    checkpoint["channel_versions"] = {"value": version}
    return ({"configurable": {"thread_id": thread_id, "checkpoint_ns": ns}}, checkpoint,
            {"source": "input", "step": -1, **(metadata or {})}, {"value": version})


def put_value(saver: DurableSaver, thread_id: str, value: object, *, ns: str = "",
              metadata: dict[str, object] | None = None) -> dict[str, object]:
    """Put one checkpoint whose only channel ``value`` holds ``value``; returns its config.

    It is a root (no parent). Written behind, it follows a read of its namespace, as a
    run's first write does: a root of a namespace Redis does not hold stays in Redis only
    once a read found the namespace empty (else it goes through Postgres)."""
    args = value_put_args(saver, thread_id, value, ns, metadata)
    if saver.config.write_mode == "behind":
        saver.get_tuple(args[0])
    return saver.put(*args)  # type: ignore[return-value]


async def aput_value(saver: DurableSaver, thread_id: str, value: object, *, ns: str = "",
                     metadata: dict[str, object] | None = None) -> dict[str, object]:
    """Async twin of `put_value` (``aput``)."""
    args = value_put_args(saver, thread_id, value, ns, metadata)
    if saver.config.write_mode == "behind":
        await saver.aget_tuple(args[0])
    return await saver.aput(*args)  # type: ignore[return-value]


def cold_checkpoints(schema: str, thread_id: str) -> int:
    """How many checkpoints of a thread Postgres holds."""
    with psycopg.connect(POSTGRES_URL) as conn:
        row = conn.execute(f'SELECT count(*) FROM "{schema}".lgd_checkpoints '
                           "WHERE thread_id = %s", (thread_id,)).fetchone()
    assert row is not None
    return int(row[0])


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[TestCluster]:
    """A private six-node Redis Cluster (three primaries, one replica each), started once
    for the session by the first test that asks for it (`tests/cluster.py`)."""
    cluster = TestCluster()
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def wait_for_row_lock(conn: psycopg.Connection[Any], schema: str,
                      table: str = "lgd_heads") -> None:
    """Until another session waits for a row lock on ``table`` of the schema (a statement
    of the saver's that reached rows a transaction of the test holds)."""
    for _ in range(500):
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
            "AND pid <> pg_backend_pid() AND query LIKE %s",
            (f'%"{schema}".{table}%',)).fetchone()
        if row and row[0]:
            return
        threading.Event().wait(0.01)
    raise AssertionError(f"no statement waited for the {table} rows the test holds")
