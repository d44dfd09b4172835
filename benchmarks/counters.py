"""What a stretch of work cost each process and server: CPU time, Postgres's statistics and
WAL, Redis's command and byte counters. Read only; nothing here writes to the servers
except ``CREATE EXTENSION pg_walinspect`` in the run's own scratch database.

CPU time comes from ``/proc``, so it is known only for servers on this host (in this PID
namespace): a server elsewhere gets ``None``, not a wrong figure.
"""

from __future__ import annotations

import logging
import os
import resource
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import redis
from psycopg import sql

from benchmarks.timing import describe

log = logging.getLogger(__name__)

CLOCK_TICK_NS = 1_000_000_000 // os.sysconf("SC_CLK_TCK")
PROC = Path("/proc")

DATABASE_COUNTERS = ("xact_commit", "xact_rollback", "tup_inserted", "tup_updated", "tup_deleted")

WAL_OF_DATABASE_SQL = """
WITH r AS (
    SELECT xid::text::bigint AS x, record_length, block_ref
    FROM pg_get_wal_records_info(%(start)s::pg_lsn, %(end)s::pg_lsn)
), ours AS (
    SELECT DISTINCT x FROM r WHERE block_ref LIKE %(pattern)s AND x <> 0
)
SELECT coalesce(sum(record_length), 0)::bigint, count(*)
FROM r
WHERE block_ref LIKE %(pattern)s OR x IN (SELECT x FROM ours)
"""
"""The WAL records of one database: those that touch its relations (a block reference
``rel <tablespace>/<database oid>/<relfilenode>``), and every record of the transactions
that made one (their commit records)."""


def machine_busy_ns() -> int | None:
    """CPU time every processor of this host has spent busy so far (``/proc/stat``: user,
    nice, system, irq, softirq, steal), or ``None`` where there is no ``/proc/stat``."""
    try:
        fields = (PROC / "stat").read_text().splitlines()[0].split()
    except (OSError, IndexError):
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, fields[1:9])
    return (user + nice + system + irq + softirq + steal) * CLOCK_TICK_NS


def self_cpu_s() -> float:
    """User + system CPU seconds of this process, every thread (``getrusage``)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


@dataclass(frozen=True, slots=True)
class ProcessCpu:
    """One process as ``/proc`` shows it now."""

    comm: str
    started: int
    """Start time in clock ticks since boot: a pid reused by a new process differs here."""
    cpu_ns: int
    """User + system CPU time so far."""


def _schedstat_ns(pid: int) -> int | None:
    """The sum over the process's threads of ``/proc/<pid>/task/<tid>/schedstat``'s time on
    CPU (ns); ``None`` when the kernel does not expose it."""
    total = 0
    try:
        tasks = list((PROC / str(pid) / "task").iterdir())
        for task in tasks:
            total += int((task / "schedstat").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return total


def process_cpu(pid: int) -> ProcessCpu | None:
    """CPU time so far of ``pid``, or ``None`` if no such process is visible.

    The time is the sum of the threads' ``schedstat`` (ns, user + system); where the kernel
    has no schedstat, ``/proc/<pid>/stat``'s ``utime + stime`` (clock ticks, 10 ms).
    """
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    head, _, tail = text.rpartition(")")
    fields = tail.split()  # fields[0] is field 3 of proc(5), `state`
    try:
        utime, stime, started = int(fields[11]), int(fields[12]), int(fields[19])
    except (IndexError, ValueError):
        return None
    precise = _schedstat_ns(pid)
    cpu_ns = precise if precise is not None else (utime + stime) * CLOCK_TICK_NS
    return ProcessCpu(head.partition("(")[2], started, cpu_ns)


def cpu_source() -> str:
    """Where :func:`process_cpu` reads CPU time on this host."""
    if _schedstat_ns(os.getpid()) is not None:
        return "/proc/<pid>/task/*/schedstat (ns on CPU, user + system)"
    return "/proc/<pid>/stat utime + stime (clock ticks)"


Processes = dict[tuple[int, int], int]
"""CPU ns by ``(pid, start time)``."""


def processes_cpu(pids: Iterable[int], comm: str) -> Processes:
    """:func:`process_cpu` of each pid whose command name is ``comm``."""
    found: Processes = {}
    for pid in pids:
        cpu = process_cpu(pid)
        if cpu is not None and cpu.comm == comm:
            found[(pid, cpu.started)] = cpu.cpu_ns
    return found


@dataclass(frozen=True, slots=True)
class CpuDelta:
    """CPU used between two :func:`processes_cpu` readings."""

    ns: int
    processes: int
    """Processes seen at the end (the ones that started in between count from zero)."""
    lost: int
    """Processes seen at the start that were gone at the end: their share is missing."""


def cpu_delta(before: Processes, after: Processes) -> CpuDelta:
    """CPU used by the processes alive at the end since ``before`` (or since they started)."""
    used = sum(ns - before.get(key, 0) for key, ns in after.items())
    return CpuDelta(used, len(after), len(before.keys() - after.keys()))


# --- Redis ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RedisCounters:
    """Server-wide counters of one Redis server at one moment."""

    commands: int
    """Calls of every command, ``INFO commandstats`` (commands run inside scripts count)."""
    net_bytes: int
    """``total_net_input_bytes + total_net_output_bytes``."""
    cpu_ns: int | None
    """``redis-server``'s CPU so far, or ``None`` when its process is not on this host."""

    def __sub__(self, other: RedisCounters) -> RedisCounters:
        cpu = None if self.cpu_ns is None or other.cpu_ns is None else self.cpu_ns - other.cpu_ns
        return RedisCounters(self.commands - other.commands, self.net_bytes - other.net_bytes, cpu)

    def scaled(self, factor: float) -> RedisCounters:
        cpu = None if self.cpu_ns is None else round(self.cpu_ns * factor)
        return RedisCounters(round(self.commands * factor), round(self.net_bytes * factor), cpu)


class RedisProbe:
    """Reads one Redis server's counters (one ``INFO stats commandstats`` per reading)."""

    def __init__(self, url: str) -> None:
        self.client = redis.Redis.from_url(url)
        server = self.client.info("server")
        pid = int(server.get("process_id", 0))
        found = process_cpu(pid) if pid else None
        self.pid = pid if found is not None and found.comm.startswith("redis-server") else None
        self.overhead = RedisCounters(0, 0, 0)
        """What a reading pair itself adds (its own ``INFO``), set by :meth:`calibrate`."""

    def read(self) -> RedisCounters:
        info: Mapping[str, Any] = self.client.info("stats", "commandstats")
        commands = sum(
            int(value.get("calls", 0))
            for key, value in info.items()
            if key.startswith("cmdstat_") and isinstance(value, Mapping)
        )
        net = int(info["total_net_input_bytes"]) + int(info["total_net_output_bytes"])
        cpu = process_cpu(self.pid) if self.pid is not None else None
        return RedisCounters(commands, net, cpu.cpu_ns if cpu is not None else None)

    def calibrate(self, pairs: int = 5) -> RedisCounters:
        """Take readings back to back; the smallest difference is the readings' own cost
        (one ``INFO`` call and its bytes), subtracted from every window."""
        deltas = []
        for _ in range(pairs):
            first = self.read()
            deltas.append(self.read() - first)
        self.overhead = RedisCounters(
            min(d.commands for d in deltas), min(d.net_bytes for d in deltas), 0
        )
        return self.overhead

    def close(self) -> None:
        self.client.close()


# --- Postgres ---------------------------------------------------------------------------------


class PostgresProbe:
    """Reads a Postgres cluster's statistics from a connection to the run's scratch database
    (so that its own queries never count in the databases it measures)."""

    def __init__(self, url: str) -> None:
        self.conn = psycopg.connect(url, autocommit=True)
        own = self._one("SELECT pg_backend_pid()")
        found = process_cpu(int(own))
        self.local = found is not None and found.comm == "postgres"
        """Whether the server's processes are visible in this host's ``/proc``."""
        self.walinspect = self._create_walinspect()

    def _one(self, query: str, params: Any = None) -> Any:
        row = self.conn.execute(query, params).fetchone()
        return row[0] if row else None

    def _create_walinspect(self) -> str | None:
        """Create ``pg_walinspect`` in the scratch database; ``None`` if it worked, else why."""
        try:
            self.conn.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
        except psycopg.Error as exc:
            log.warning("pg_walinspect unavailable, WAL per database unknown: %s", describe(exc))
            return describe(exc)
        return None

    def database_oid(self, database: str) -> int:
        return int(self._one("SELECT oid FROM pg_database WHERE datname = %s", (database,)))

    def database_counters(self, database: str) -> dict[str, int]:
        """``pg_stat_database``'s counters of ``database`` (as flushed by its backends)."""
        query = sql.SQL("SELECT {} FROM pg_stat_database WHERE datname = %s").format(
            sql.SQL(", ").join(map(sql.Identifier, DATABASE_COUNTERS))
        )
        row = self.conn.execute(query, (database,)).fetchone()
        if row is None:
            raise LookupError(f"no pg_stat_database row for {database}")
        return dict(zip(DATABASE_COUNTERS, map(int, row), strict=True))

    def wal_lsn(self) -> str:
        """The WAL insert position now (every record inserted so far, cluster-wide)."""
        return str(self._one("SELECT pg_current_wal_insert_lsn()"))

    def wal_bytes(self, start: str, end: str) -> int:
        return int(self._one("SELECT pg_wal_lsn_diff(%s::pg_lsn, %s::pg_lsn)", (end, start)))

    def database_wal(self, oid: int, start: str, end: str) -> tuple[int, int] | None:
        """``(bytes, records)`` of the WAL records of database ``oid`` between two insert
        positions; ``None`` without ``pg_walinspect``. Waits for ``end`` to be flushed."""
        if self.walinspect is not None:
            return None
        deadline = time.monotonic() + 5
        while not self._one(
            "SELECT pg_current_wal_flush_lsn() >= %s::pg_lsn", (end,)
        ) and time.monotonic() < deadline:
            time.sleep(0.05)
        # An insert position read right at a page boundary already counts the next page's
        # header, which is flushed only with the next record: the records end before it.
        end = str(self._one("SELECT LEAST(pg_current_wal_flush_lsn(), %s::pg_lsn)", (end,)))
        row = self.conn.execute(
            WAL_OF_DATABASE_SQL, {"start": start, "end": end, "pattern": f"% rel %/{oid}/%"}
        ).fetchone()
        return (int(row[0]), int(row[1])) if row else (0, 0)

    def backend_pids(self, database: str, *, clients_only: bool = False) -> list[int]:
        """The server processes connected to ``database``: client backends and (unless
        ``clients_only``) autovacuum workers."""
        query = "SELECT pid FROM pg_stat_activity WHERE datname = %s"
        if clients_only:
            query += " AND backend_type = 'client backend'"
        rows = self.conn.execute(query, (database,)).fetchall()
        return [int(row[0]) for row in rows]

    def backends_cpu(self, database: str) -> Processes | None:
        if not self.local:
            return None
        return processes_cpu(self.backend_pids(database), "postgres")

    def background_cpu(self) -> Processes | None:
        """The cluster's processes of no database: checkpointer, background writer,
        walwriter, the launchers (shared with every other client of the cluster)."""
        if not self.local:
            return None
        rows = self.conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datid IS NULL"
        ).fetchall()
        return processes_cpu((int(row[0]) for row in rows), "postgres")

    def wait_disconnected(self, database: str, timeout: float = 10.0) -> bool:
        """Wait until no client is connected to ``database``: a backend writes its pending
        statistics to shared memory as it exits, before it leaves ``pg_stat_activity``."""
        deadline = time.monotonic() + timeout
        while self.backend_pids(database, clients_only=True):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)
        return True

    def close(self) -> None:
        self.conn.close()
