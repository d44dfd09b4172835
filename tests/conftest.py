"""Test fixtures: real Redis and Postgres, one Postgres schema and Redis prefix per module.

Which servers the tests use is chosen by `tests.support.servers` (``LGD_TEST_SERVERS``);
when that is the embedded servers, the session starts them here and stops them when it
ends. The tests in ``tests/core/`` drive the sans-I/O core with a scripted fake driver and
need no server: a run of only those checks and starts nothing.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from langgraph_durable import DurableSaver
from tests.support.cluster import TestCluster
from tests.support.servers import (
    EMBEDDED,
    HOWTO,
    POSTGRES_URL,
    REDIS_URL,
    WHY_EMBEDDED,
    check_servers,
    drop_prefix,
    drop_schema,
)

SERVER_FREE = Path(__file__).parent / "core"


def _server_free_only(config: pytest.Config) -> bool:
    """Whether every path given on the command line is inside ``tests/core/``."""
    paths = [(config.invocation_params.dir / arg.split("::")[0]).resolve() for arg in config.args]
    return bool(paths) and all(path.is_relative_to(SERVER_FREE) for path in paths)


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
        line = (f"servers: embedded PostgreSQL and Valkey ({WHY_EMBEDDED}), started in "
                f"{EMBEDDED.data_dir} and stopped when the tests end")
    if reporter is not None:
        reporter.write_line(line)
    if EMBEDDED is None:
        check_servers()


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
        pytest.exit(f"the embedded servers did not start ({exc}): {HOWTO}", returncode=3)
    try:
        check_servers()
        yield
    finally:
        EMBEDDED.stop()
        shutil.rmtree(EMBEDDED.data_dir.parent, ignore_errors=True)


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


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[TestCluster]:
    """A private six-node Redis Cluster (three primaries, one replica each), started once
    for the session by the first test that asks for it (`tests/support/cluster.py`)."""
    cluster = TestCluster()
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
