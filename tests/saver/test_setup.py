"""setup(): versioned migrations, idempotent, safe when many processes call it at once."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import psycopg
import pytest

from langgraph_durable import DurableSaver, SchemaVersionError
from tests.support.servers import POSTGRES_URL, REDIS_URL, drop_prefix, drop_schema

ROOT = Path(__file__).parents[2]


def test_concurrent_setup_from_eight_processes_applies_each_migration_once() -> None:
    """Eight processes race on a fresh schema; all succeed and each version is recorded once."""
    schema = f"lgdt_setup_{uuid.uuid4().hex[:8]}"
    code = (
        "from langgraph_durable import DurableSaver; "
        f"s = DurableSaver({REDIS_URL!r}, {POSTGRES_URL!r}, schema={schema!r}, "
        "key_prefix='lgdt-setup'); s.setup(); s.close(); print('ok')"
    )
    try:
        procs = [subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, text=True,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                 for _ in range(8)]
        results = [p.communicate(timeout=120) for p in procs]
        assert [out.strip() for out, _ in results] == ["ok"] * 8, [e for _, e in results]
        with psycopg.connect(POSTGRES_URL) as conn:
            rows = conn.execute(f'SELECT version FROM "{schema}".lgd_migrations '
                                "ORDER BY version").fetchall()
        assert [r[0] for r in rows] == [m.version for m in DurableSaver().migrations]
    finally:
        drop_schema(schema)


def test_schema_newer_than_the_package_is_refused(namespace: tuple[str, str]) -> None:
    """A schema migrated by a newer release raises SchemaVersionError instead of guessing."""
    schema, prefix = namespace
    saver = DurableSaver(REDIS_URL, POSTGRES_URL, schema=schema, key_prefix=prefix)
    saver.setup()
    saver.setup()  # idempotent
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(f'INSERT INTO "{schema}".lgd_migrations (version, name) '
                     "VALUES (999, 'from the future')")
    with pytest.raises(SchemaVersionError, match="999"):
        saver.setup()
    saver.close()


def test_using_a_saver_before_setup_says_what_to_do(namespace: tuple[str, str]) -> None:
    """Without setup() the first call names the missing step, not a driver error."""
    schema, prefix = namespace
    saver = DurableSaver(REDIS_URL, POSTGRES_URL, schema=f"{schema}_unset", key_prefix=prefix)
    with pytest.raises(SchemaVersionError, match=r"saver\.setup\(\)"):
        saver.get_tuple({"configurable": {"thread_id": "t"}})
    saver.close()


async def test_an_async_start_prints_no_warning() -> None:
    """An asyncio saver's setup, put and read warn of nothing (redis-py warned of a
    blocking Retry converted for asyncio on every async start)."""
    import warnings

    from tests.support.checkpoints import aput_value, config_of

    tag = uuid.uuid4().hex[:8]
    schema, prefix = f"lgdt_async_start_{tag}", f"lgdt-async-start-{tag}"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        async with DurableSaver.afrom_conn_string(REDIS_URL, POSTGRES_URL, schema=schema,
                                                  key_prefix=prefix) as saver:
            await saver.asetup()
            await aput_value(saver, "async-start", 1)
            assert await saver.aget_tuple(config_of("async-start")) is not None
    drop_schema(schema)
    drop_prefix(prefix)
    assert [str(w.message) for w in caught] == []
