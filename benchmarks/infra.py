"""Scratch space on the servers: the bench database, schemas, Redis prefixes, sizes.

Everything here touches only what the run created: the scratch database named in
:class:`~benchmarks.settings.Settings` and Redis keys under the run's own prefix.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psycopg
import redis
from psycopg import sql

SCAN_BATCH = 1000

TABLES_BYTES_SQL = """
SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint AS bytes
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = %s AND c.relkind IN ('r', 'p', 'm')
"""


def recreate_database(admin_url: str, database: str) -> None:
    """Drop ``database`` (closing its sessions) and create it empty."""
    with psycopg.connect(admin_url, autocommit=True) as conn:
        name = sql.Identifier(database)
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(name))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(name))


def drop_database(admin_url: str, database: str) -> None:
    """Drop ``database`` if it exists, closing its sessions."""
    with psycopg.connect(admin_url, autocommit=True) as conn:
        name = sql.Identifier(database)
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(name))


def create_schema(url: str, schema: str) -> None:
    """Create ``schema`` in the database at ``url`` if it is missing."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))


def drop_schema(url: str, schema: str) -> None:
    """Drop ``schema`` and everything in it, if it exists."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def schema_bytes(url: str, schema: str) -> int:
    """Bytes on disk of every table in ``schema``, with its indexes and TOAST."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(TABLES_BYTES_SQL, (schema,)).fetchone()
    return int(row[0]) if row else 0


def postgres_version(url: str) -> str:
    """The server's ``server_version``."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SHOW server_version").fetchone()
    return str(row[0]) if row else "?"


def _glob_escape(text: str) -> str:
    """Escape Redis glob metacharacters so ``text`` matches only itself."""
    return "".join(f"\\{ch}" if ch in "*?[]\\" else ch for ch in text)


def scan_prefix(client: redis.Redis, prefix: str) -> Iterator[bytes]:
    """Yield every key that starts with ``prefix`` (``SCAN``, never ``KEYS``)."""
    yield from client.scan_iter(match=f"{_glob_escape(prefix)}*", count=SCAN_BATCH)


def delete_prefix(url: str, prefix: str) -> int:
    """Delete every key under ``prefix``; return how many were deleted."""
    deleted = 0
    with redis.Redis.from_url(url) as client:
        batch: list[bytes] = []
        for key in scan_prefix(client, prefix):
            batch.append(key)
            if len(batch) >= SCAN_BATCH:
                deleted += int(client.unlink(*batch))
                batch.clear()
        if batch:
            deleted += int(client.unlink(*batch))
    return deleted


def prefix_usage(url: str, prefix: str) -> tuple[int, int]:
    """Return ``(keys, bytes)`` under ``prefix``, bytes by exact ``MEMORY USAGE``."""
    with redis.Redis.from_url(url) as client:
        keys = list(scan_prefix(client, prefix))
        total = 0
        for start in range(0, len(keys), SCAN_BATCH):
            pipe = client.pipeline(transaction=False)
            for key in keys[start : start + SCAN_BATCH]:
                pipe.memory_usage(key, samples=0)
            total += sum(int(size or 0) for size in pipe.execute())
    return len(keys), total


def count_prefix(url: str, prefix: str) -> int:
    """How many keys exist under ``prefix``."""
    with redis.Redis.from_url(url) as client:
        return sum(1 for _ in scan_prefix(client, prefix))


def redis_version(url: str) -> str:
    """The server's ``redis_version`` (or Valkey's, which reports one too)."""
    with redis.Redis.from_url(url) as client:
        info = client.info("server")
    return str(info.get("redis_version", "?"))


def sqlite_bytes(path: Path) -> int:
    """Bytes of a SQLite database with its ``-wal`` and ``-shm`` files."""
    files = (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm"))
    return sum(file.stat().st_size for file in files if file.exists())
