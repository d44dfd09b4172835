"""What retention costs and reclaims: sweep throughput, live latency during a sweep, and
what compression does to a large state.

    python -m benchmarks.retention [--checkpoints 100000] [--live-threads 8]
                                   [--messages 200] [--rounds 60]

1. **Sweep.** ``--checkpoints`` checkpoints (10 per thread, two channel values each) are
   seeded with bulk ``INSERT ... SELECT`` from one real thread, last written 30 days ago,
   into a private schema. A ``max_idle`` sweep runs in a separate process while this one
   keeps ``--live-threads`` threads busy (``put`` then ``get_tuple`` of the head, in a loop,
   write-through); then the same seed again for a ``keep_last=2`` sweep (the threads stay,
   their older checkpoints go). Reported: checkpoints deleted per second, and p50/p99 of
   the live ``put`` and ``get_tuple`` before and during each sweep.
2. **Compression.** ``--rounds`` supersteps of a ``--messages``-message chat thread (every
   put stores the whole messages channel, as LangGraph does), interleaved between a saver
   with ``compress_above=0`` and one with the default: Postgres bytes per step (schema size
   growth), Redis bytes per step (``MEMORY USAGE`` of the prefix) and put p50/p99.
   Messages are words drawn from a 2,000-word vocabulary, which zstd shrinks about as much
   as English text. LangGraph's ``PostgresSaver`` runs the same puts for reference.

Everything runs in private schemas and key prefixes, removed at the end.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import statistics
import threading
import time
import uuid
from typing import Any

import psycopg
import redis
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.checkpoint.postgres import PostgresSaver
from psycopg.rows import dict_row

from benchmarks.workloads import CheckpointChain
from langgraph_durable import DurableSaver, Retention

REDIS_URL = os.environ.get("LGD_REDIS_URL", "redis://127.0.0.1:6379/0")
POSTGRES_URL = os.environ.get("LGD_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
PER_THREAD = 10


def _percentiles(samples: list[float]) -> str:
    if len(samples) < 2:
        return "n/a"
    q = statistics.quantiles(samples, n=100)
    return f"p50 {q[49] * 1000:.2f} ms, p99 {q[98] * 1000:.2f} ms (n={len(samples)})"


def _drop(schema: str, prefix: str) -> None:
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    client = redis.Redis.from_url(REDIS_URL)
    try:
        keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
        for i in range(0, len(keys), 1000):
            client.unlink(*keys[i : i + 1000])
    finally:
        client.close()


# ------------------------------------------------------------------------------ sweep


def _seed(saver: DurableSaver, threads: int) -> None:
    """``threads`` copies of one real 10-checkpoint thread, idle for 30 days."""
    chain = CheckpointChain(saver, "template", _messages(10, random.Random(1)))
    chain.extend(PER_THREAD)
    schema = saver.config.schema
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(
            f'INSERT INTO "{schema}".lgd_checkpoints (thread_id, checkpoint_ns, checkpoint_id,'
            " parent_checkpoint_id, run_id, checkpoint, channel_versions, metadata, created_at)"
            " SELECT 'idle-' || g, checkpoint_ns, checkpoint_id, parent_checkpoint_id, run_id,"
            " checkpoint, channel_versions, metadata, now() - interval '30 days'"
            f' FROM "{schema}".lgd_checkpoints, generate_series(1, %s) g'
            " WHERE thread_id = 'template'", (threads,))
        conn.execute(
            f'INSERT INTO "{schema}".lgd_blobs (thread_id, checkpoint_ns, channel, version, blob)'
            " SELECT 'idle-' || g, checkpoint_ns, channel, version, blob"
            f' FROM "{schema}".lgd_blobs, generate_series(1, %s) g'
            " WHERE thread_id = 'template'", (threads,))
        conn.execute(
            f'INSERT INTO "{schema}".lgd_heads (thread_id, checkpoint_ns, head, version,'
            " written_at) SELECT 'idle-' || g, checkpoint_ns, head, version,"
            " now() - interval '30 days'"
            f' FROM "{schema}".lgd_heads, generate_series(1, %s) g'
            " WHERE thread_id = 'template'", (threads,))
        conn.execute(f'ANALYZE "{schema}".lgd_checkpoints')
        conn.execute(f'ANALYZE "{schema}".lgd_blobs')
        conn.execute(f'ANALYZE "{schema}".lgd_heads')
    saver.delete_thread("template")


def _sweeper(schema: str, prefix: str, policy: Retention, out: Any) -> None:
    with DurableSaver(REDIS_URL, POSTGRES_URL, schema=schema, key_prefix=prefix) as saver:
        report = saver.sweep(policy)
    out.put((report.checkpoints, report.rows, report.bytes, report.seconds,
             report.threads_deleted, report.threads_pruned))


def _live(saver: DurableSaver, stop: threading.Event, puts: list[float],
          gets: list[float], rng: random.Random) -> None:
    chain = CheckpointChain(saver, f"live-{uuid.uuid4()}", _messages(10, rng))
    while not stop.is_set():
        args = chain.prepare()
        start = time.perf_counter()
        stored = saver.put(args.config, args.checkpoint, args.metadata, args.new_versions)
        puts.append(time.perf_counter() - start)
        chain.commit(args, stored)
        start = time.perf_counter()
        saver.get_tuple({"configurable": {"thread_id": chain.thread_id, "checkpoint_ns": ""}})
        gets.append(time.perf_counter() - start)


def _live_phase(saver: DurableSaver, workers: int, during: Any) -> tuple[list[float], ...]:
    """Run the live threads while ``during()`` runs (or for 5 s when it is ``None``)."""
    stop = threading.Event()
    puts: list[float] = []
    gets: list[float] = []
    threads = [threading.Thread(target=_live, args=(saver, stop, puts, gets, random.Random(i)))
               for i in range(workers)]
    for t in threads:
        t.start()
    time.sleep(1.0)  # warm-up, dropped
    del puts[:], gets[:]
    if during is None:
        time.sleep(5.0)
    else:
        during()
    stop.set()
    for t in threads:
        t.join()
    return puts, gets


def sweep_section(checkpoints: int, workers: int) -> None:
    threads = max(1, checkpoints // PER_THREAD)
    for name, policy in (("max_idle=1 day", Retention(max_idle=86400.0)),
                         ("keep_last=2", Retention(keep_last=2))):
        run = uuid.uuid4().hex[:8]
        schema, prefix = f"lgdbench_ret_{run}", f"lgdbench.ret.{run}"
        try:
            with DurableSaver(REDIS_URL, POSTGRES_URL, schema=schema, key_prefix=prefix) as saver:
                saver.setup()
                started = time.perf_counter()
                _seed(saver, threads)
                print(f"\n## sweep, {name}: {threads * PER_THREAD:,} checkpoints in {threads:,}"
                      f" threads (seeded in {time.perf_counter() - started:.1f}s)")
                puts, gets = _live_phase(saver, workers, None)
                print(f"live put, no sweep:        {_percentiles(puts)}")
                print(f"live get_tuple, no sweep:  {_percentiles(gets)}")
                ctx = multiprocessing.get_context("spawn")
                out = ctx.Queue()
                proc = ctx.Process(target=_sweeper, args=(schema, prefix, policy, out))

                def during(proc: Any = proc) -> None:
                    proc.start()
                    proc.join()

                puts, gets = _live_phase(saver, workers, during)
                deleted, rows, size, seconds, gone, pruned = out.get(timeout=10)
                print(f"live put, during sweep:    {_percentiles(puts)}")
                print(f"live get_tuple, during:    {_percentiles(gets)}")
                print(f"sweep: {deleted:,} checkpoints ({rows:,} rows, {size / 2**20:.1f} MiB;"
                      f" {gone:,} threads deleted, {pruned:,} pruned) in {seconds:.1f}s ="
                      f" {deleted / seconds:,.0f} checkpoints/s, {rows / seconds:,.0f} rows/s")
        finally:
            _drop(schema, prefix)


# ------------------------------------------------------------------------------ compression

def _vocabulary(rng: random.Random) -> list[str]:
    letters = "etaoinshrdlucmfwypvbgkjqxz"
    weights = [26 - i for i in range(26)]
    return ["".join(rng.choices(letters, weights, k=rng.randint(2, 9))) for _ in range(2000)]


_WORDS = _vocabulary(random.Random(7))


def _messages(count: int, rng: random.Random) -> list[AnyMessage]:
    out: list[AnyMessage] = []
    for i in range(count):
        cls = HumanMessage if i % 2 == 0 else AIMessage
        text = " ".join(rng.choices(_WORDS, k=rng.randint(40, 120)))
        out.append(cls(content=text, id=str(uuid.uuid4())))
    return out


def _schema_bytes(schema: str) -> int:
    with psycopg.connect(POSTGRES_URL) as conn:
        row = conn.execute(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c"
            " JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = %s AND c.relkind IN ('r', 'm')", (schema,)).fetchone()
    return int(row[0]) if row else 0


def _redis_bytes(prefix: str) -> int:
    client = redis.Redis.from_url(REDIS_URL)
    try:
        return sum(int(client.memory_usage(k) or 0)  # type: ignore[arg-type]
                   for k in client.scan_iter(match=f"{prefix}*", count=1000))
    finally:
        client.close()


def _postgres_saver(schema: str) -> tuple[PostgresSaver, psycopg.Connection[Any]]:
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    conn = psycopg.connect(POSTGRES_URL, autocommit=True, prepare_threshold=0,
                           row_factory=dict_row, options=f"-c search_path={schema}")
    saver = PostgresSaver(conn)  # type: ignore[arg-type]
    saver.setup()
    return saver, conn  # type: ignore[return-value]


def compression_section(messages: int, rounds: int) -> None:
    run = uuid.uuid4().hex[:8]
    variants = {"compress_above=0 (off)": 0, "compress_above=4096 (default)": 4096,
                "PostgresSaver (reference)": -1}
    names = {label: (f"lgdbench_zstd_{run}_{i}", f"lgdbench.zstd.{run}.{i}")
             for i, label in enumerate(variants)}
    savers: dict[str, Any] = {}
    connection = None
    try:
        chains = {}
        base = _messages(messages, random.Random(3))
        for label, threshold in variants.items():
            schema, prefix = names[label]
            if threshold < 0:
                saver, connection = _postgres_saver(schema)
            else:
                saver = DurableSaver(REDIS_URL, POSTGRES_URL, schema=schema, key_prefix=prefix,
                                     compress_above=threshold, hot_checkpoints=0)
                saver.setup()
                savers[label] = saver
            chains[label] = CheckpointChain(saver, "large", base)
            chains[label].extend(3)  # warm-up
        start_bytes = {label: (_schema_bytes(names[label][0]), _redis_bytes(names[label][1]))
                       for label in variants}
        samples: dict[str, list[float]] = {label: [] for label in variants}
        for _ in range(rounds):
            for label in variants:
                chain = chains[label]
                args = chain.prepare()
                started = time.perf_counter()
                stored = chain.saver.put(args.config, args.checkpoint, args.metadata,
                                         args.new_versions)
                samples[label].append(time.perf_counter() - started)
                chain.commit(args, stored)
        size = len(_messages_bytes(base))
        print(f"\n## compression: {messages}-message thread ({size / 1024:.0f} KiB serialized),"
              f" {rounds} puts each (write-through; each put stores the whole messages channel)")
        for label in variants:
            schema, prefix = names[label]
            cold = (_schema_bytes(schema) - start_bytes[label][0]) / rounds
            hot = (_redis_bytes(prefix) - start_bytes[label][1]) / rounds
            print(f"{label:31} Postgres {cold / 1024:7.1f} KiB/step, Redis {hot / 1024:7.1f}"
                  f" KiB/step, put {_percentiles(samples[label])}")
    finally:
        for saver in savers.values():
            saver.close()
        if connection is not None:
            connection.close()
        for schema, prefix in names.values():
            _drop(schema, prefix)


def _messages_bytes(messages: list[AnyMessage]) -> bytes:
    from langgraph_durable._core.strict import StrictSerializer

    return StrictSerializer().dumps_typed(messages)[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoints", type=int, default=100_000)
    parser.add_argument("--live-threads", type=int, default=8)
    parser.add_argument("--messages", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--section", choices=("sweep", "compression", "all"), default="all")
    args = parser.parse_args()
    if args.section in ("sweep", "all"):
        sweep_section(args.checkpoints, args.live_threads)
    if args.section in ("compression", "all"):
        compression_section(args.messages, args.rounds)


if __name__ == "__main__":
    main()
