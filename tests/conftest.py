"""Test fixtures: real Redis and Postgres, one Postgres schema and Redis prefix per module.

URLs come from ``LGD_REDIS_URL`` / ``LGD_POSTGRES_URL`` (defaults: the local servers).
Nothing here flushes a server or touches keys and schemas it did not create. The tests in
``tests/core/`` drive the sans-I/O core with a scripted fake driver and need no server.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import redis
from langgraph.checkpoint.base import empty_checkpoint

from langgraph_durable import DurableSaver

REDIS_URL = os.environ.get("LGD_REDIS_URL", "redis://127.0.0.1:6379/0")
POSTGRES_URL = os.environ.get("LGD_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")

_HOWTO = (
    "start it, e.g. `redis-server --daemonize yes --port 6379 --save '' --appendonly no` and "
    "`pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start`, or point "
    "LGD_REDIS_URL / LGD_POSTGRES_URL at running servers"
)


SERVER_FREE = Path(__file__).parent / "core"


def _server_free_only(config: pytest.Config) -> bool:
    """Whether every path given on the command line is inside ``tests/core/``."""
    paths = [(config.invocation_params.dir / arg.split("::")[0]).resolve() for arg in config.args]
    return bool(paths) and all(path.is_relative_to(SERVER_FREE) for path in paths)


def pytest_sessionstart(session: pytest.Session) -> None:
    """Fail the whole run at once, with a how-to, if a server is missing (unless only the
    server-free core tests were asked for)."""
    if _server_free_only(session.config):
        return
    try:
        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2).ping()
    except redis.exceptions.RedisError as exc:
        pytest.exit(f"Redis is not reachable at {REDIS_URL} ({exc}): {_HOWTO}", returncode=3)
    try:
        psycopg.connect(POSTGRES_URL, connect_timeout=3).close()
    except psycopg.Error as exc:
        pytest.exit(f"Postgres is not reachable at {POSTGRES_URL} ({exc}): {_HOWTO}", returncode=3)


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


def put_value(saver: DurableSaver, thread_id: str, value: object, *, ns: str = "",
              metadata: dict[str, object] | None = None) -> dict[str, object]:
    """Put one checkpoint whose only channel ``value`` holds ``value``; returns its config."""
    checkpoint = empty_checkpoint()
    version = saver.get_next_version(None, None)
    checkpoint["channel_values"] = {"value": value}
    checkpoint["channel_versions"] = {"value": version}
    return saver.put(  # type: ignore[return-value]
        {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns}}, checkpoint,
        {"source": "input", "step": -1, **(metadata or {})},  # type: ignore[typeddict-item]
        {"value": version})


def cold_checkpoints(schema: str, thread_id: str) -> int:
    """How many checkpoints of a thread Postgres holds."""
    with psycopg.connect(POSTGRES_URL) as conn:
        row = conn.execute(f'SELECT count(*) FROM "{schema}".lgd_checkpoints '
                           "WHERE thread_id = %s", (thread_id,)).fetchone()
    assert row is not None
    return int(row[0])
