"""Postgres behind PgBouncer in transaction mode (each transaction may run on another server
session): with ``prepare_threshold=None`` the saver sets up, writes, reads and flushes
through it, from blocking and async callers, in both write modes."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from langgraph_durable import DurableSaver
from tests.support.checkpoints import cold_checkpoints, put_value
from tests.support.deployment_servers import pgbouncer_args, process
from tests.support.faults import Proxy, free_port
from tests.support.servers import POSTGRES_URL, REDIS_URL, postgres_address

pytestmark = pytest.mark.timeout(120)

DATABASE = str(conninfo_to_dict(POSTGRES_URL).get("dbname") or "postgres")


@pytest.fixture(scope="module")
def bouncer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A pgbouncer in transaction mode in front of the test database; yields its URL."""
    workdir = tmp_path_factory.mktemp("pgbouncer")
    port = free_port()
    url = f"postgresql://postgres@127.0.0.1:{port}/{DATABASE}"

    def ready() -> bool:
        with psycopg.connect(url, connect_timeout=1, prepare_threshold=None) as conn:
            return conn.execute("SELECT 1").fetchone() == (1,)

    # The embedded servers' Postgres listens on a Unix socket in a folder only its own
    # account may enter, not pgbouncer's: pgbouncer reaches it through a TCP forwarder here.
    address = postgres_address()
    forwarder = Proxy(address) if isinstance(address, str) else None
    if forwarder is not None:
        forwarder.start()
    try:
        backend = ("127.0.0.1", forwarder.port) if forwarder is not None else None
        with process(pgbouncer_args(workdir, port, DATABASE, backend), ready,
                     log=workdir / "pgbouncer.log"):
            yield url
    finally:
        if forwarder is not None:
            forwarder.cut()


def test_the_saver_runs_through_pgbouncer_in_transaction_mode(
        bouncer: str, namespace: tuple[str, str], write_mode: str) -> None:
    """setup() (migrations under a transaction-scoped advisory lock), puts, reads by a
    saver with nothing in Redis (Postgres through the pooler), history, flush and delete, with
    prepared statements off, on more sessions than the pooler has server connections."""
    schema, prefix = namespace
    with DurableSaver(REDIS_URL, bouncer, schema=schema, key_prefix=f"{prefix}-{write_mode}",
                      write_mode=write_mode, prepare_threshold=None,  # type: ignore[arg-type]
                      postgres_max_connections=8) as saver:
        saver.setup()
        saver.setup()  # idempotent through the pooler too
        for step in range(6):
            put_value(saver, f"pgb-{write_mode}", step)
        saver.flush()
        assert cold_checkpoints(schema, f"pgb-{write_mode}") == 6
        config = {"configurable": {"thread_id": f"pgb-{write_mode}", "checkpoint_ns": ""}}
        assert len(list(saver.list(config))) == 6
        found = asyncio.run(saver.aget_tuple(config))
        assert found is not None and found.checkpoint["channel_values"]["value"] == 5
        with DurableSaver(REDIS_URL, bouncer, schema=schema, key_prefix=f"{prefix}-cold",
                          prepare_threshold=None) as cold:  # nothing hot: Postgres answers
            found = cold.get_tuple(config)
            assert found is not None and found.checkpoint["channel_values"]["value"] == 5
        saver.delete_thread(f"pgb-{write_mode}")
        assert saver.get_tuple(config) is None
        assert cold_checkpoints(schema, f"pgb-{write_mode}") == 0
