"""What a run measures (a :class:`Profile`) and where it runs (:class:`Settings`)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from psycopg.conninfo import make_conninfo

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
DEFAULT_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/test"
DEFAULT_DATABASE = "lgd_bench"
KEY_PREFIX_ROOT = "lgdbench"


@dataclass(frozen=True, slots=True, kw_only=True)
class Profile:
    """Sample counts for every section; :data:`FULL` and :data:`QUICK` are the two in use."""

    name: str
    micro_rounds: int
    """Measured samples per saver for each micro operation."""
    micro_warmup: int
    """Discarded samples per saver before each micro operation."""
    read_thread_length: int
    """Checkpoints in the thread that the micro read operations query."""
    history_lengths: tuple[int, int]
    """Checkpoints in the short and the long thread of the history section."""
    history_rounds: int
    history_warmup: int
    macro_threads: int
    """Threads per macro run (sequential for the sync API, concurrent for the async one)."""
    macro_invokes: int
    """Graph invocations per thread; each runs 3 nodes, so 3 supersteps."""
    macro_warmup: int
    """Discarded warm-up rounds (one thread for sync, one concurrent batch for async)."""
    restart_rounds: int
    restart_warmup: int
    new_process_rounds: int
    """Samples per saver of the restart section's new-process table (an interpreter each)."""
    new_process_warmup: int
    storage_threads: int
    ledger_rounds: int
    ledger_warmup: int
    scaling_concurrency: tuple[int, ...]
    """Concurrent graphs per round of the scaling section's throughput table."""
    scaling_concurrency_rounds: int
    scaling_state_bytes: tuple[int, ...]
    """State sizes of the scaling section's put table."""
    scaling_lengths: tuple[int, ...]
    """Thread lengths (checkpoints) of the scaling section's read table."""
    scaling_rounds: int
    """At least 1: a replay in round ``r`` replays the call made in round ``r - 1``."""
    store_rounds: int
    """Measured samples per store for each operation of the store section."""
    store_warmup: int
    store_search_items: int
    """Items in the namespace that the store section's filtered search reads."""
    store_namespace_sizes: tuple[int, ...]
    """Items in each namespace of the store section's get-as-a-namespace-grows table."""
    load_threads: int
    """Threads per round of the load section (each runs ``load_invokes`` invocations)."""
    load_concurrency: int
    """The most ``ainvoke`` calls in flight at once in the load section."""
    load_invokes: int
    """Invocations of the chat graph per thread in the load section (3 node steps each)."""
    load_rounds: int
    """Measured rounds per saver of the load section (interleaved; medians are reported)."""
    load_warmup: int
    """Discarded rounds per saver before the load section's measured ones (each round also
    warms its saver up, untimed, before it starts)."""
    load_quiet_s: float
    """Seconds of the quiet window before each load round, whose server-wide counters
    (Redis, the cluster's WAL and background processes) give the baseline subtracted."""

    def __post_init__(self) -> None:
        if self.ledger_warmup < 1:
            raise ValueError("ledger_warmup must be at least 1")
        if min(self.history_lengths) < 1 or self.read_thread_length < 2:
            raise ValueError("threads need at least one checkpoint (two for by-id reads)")


FULL = Profile(
    name="full",
    micro_rounds=1000,
    micro_warmup=50,
    read_thread_length=20,
    history_lengths=(10, 1000),
    history_rounds=500,
    history_warmup=20,
    macro_threads=50,
    macro_invokes=10,
    macro_warmup=1,
    restart_rounds=50,
    restart_warmup=1,
    new_process_rounds=10,
    new_process_warmup=1,
    storage_threads=20,
    ledger_rounds=300,
    ledger_warmup=20,
    scaling_concurrency=(1, 10, 50, 200),
    scaling_concurrency_rounds=5,
    scaling_state_bytes=(1024, 10 * 1024, 100 * 1024, 1024 * 1024),
    scaling_lengths=(10, 100, 1000, 10_000),
    scaling_rounds=50,
    store_rounds=1000,
    store_warmup=50,
    store_search_items=1000,
    store_namespace_sizes=(100, 1000, 10_000, 100_000),
    load_threads=100,
    load_concurrency=50,
    load_invokes=4,
    load_rounds=3,
    load_warmup=1,
    load_quiet_s=2.0,
)

QUICK = Profile(
    name="quick",
    micro_rounds=40,
    micro_warmup=5,
    read_thread_length=5,
    history_lengths=(10, 100),
    history_rounds=20,
    history_warmup=3,
    macro_threads=5,
    macro_invokes=2,
    macro_warmup=1,
    restart_rounds=3,
    restart_warmup=1,
    new_process_rounds=1,
    new_process_warmup=0,
    storage_threads=2,
    ledger_rounds=20,
    ledger_warmup=3,
    scaling_concurrency=(1, 10),
    scaling_concurrency_rounds=2,
    scaling_state_bytes=(1024, 100 * 1024),
    scaling_lengths=(10, 100),
    scaling_rounds=5,
    store_rounds=40,
    store_warmup=5,
    store_search_items=1000,
    store_namespace_sizes=(100, 1000, 10_000),
    load_threads=20,
    load_concurrency=10,
    load_invokes=4,
    load_rounds=2,
    load_warmup=1,
    load_quiet_s=0.5,
)

PROFILES = {profile.name: profile for profile in (FULL, QUICK)}


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    """The servers and scratch space of one run."""

    redis_url: str
    postgres_url: str
    """Any database on the server: used only to drop and create :attr:`database`."""
    database: str
    """Scratch database, dropped and created anew at the start of every run."""
    run_id: str
    workdir: Path
    """Scratch directory for SQLite files."""
    keep_data: bool = False
    """Leave the scratch databases and Redis keys in place after the run."""

    def __post_init__(self) -> None:
        scratch_database(self.database)

    @classmethod
    def from_env(
        cls,
        *,
        run_id: str,
        workdir: Path,
        database: str = DEFAULT_DATABASE,
        keep_data: bool = False,
    ) -> Settings:
        """Settings from ``LGD_REDIS_URL`` / ``LGD_POSTGRES_URL``, else the local servers."""
        return cls(
            redis_url=os.environ.get("LGD_REDIS_URL", DEFAULT_REDIS_URL),
            postgres_url=os.environ.get("LGD_POSTGRES_URL", DEFAULT_POSTGRES_URL),
            database=database,
            run_id=run_id,
            workdir=workdir,
            keep_data=keep_data,
        )

    @property
    def bench_postgres_url(self) -> str:
        """:attr:`postgres_url` pointed at the scratch :attr:`database`."""
        return with_database(self.postgres_url, self.database)

    @property
    def key_prefix(self) -> str:
        """Root of every Redis key this run writes (``.``-separated: ``DurableSaver``
        accepts only letters, digits and ``_.-`` in a prefix, at most 64 of them)."""
        return f"{KEY_PREFIX_ROOT}.{self.run_id}"


def scratch_database(name: str) -> str:
    """Return ``name`` if it may be used as the scratch database, else raise ``ValueError``.

    The scratch database is dropped at every run, so its name must start with
    ``lgd_bench``: a typo cannot drop someone else's database.
    """
    if not name.startswith(DEFAULT_DATABASE):
        raise ValueError(f"the scratch database's name must start with {DEFAULT_DATABASE!r}")
    return name


def with_database(url: str, database: str) -> str:
    """Return the Postgres ``url`` (URL or ``key=value`` form) naming ``database`` instead."""
    if "://" not in url:
        return make_conninfo(url, dbname=database)
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{database}"))
