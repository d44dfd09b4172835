"""One Redis node against a three-primary Redis Cluster (``tests/support/cluster.py``, six local
processes): throughput of concurrent chat graphs in each write mode, what each step costs
the servers (Redis CPU, summed over the primaries; Postgres transactions), and the hot keys
and bytes a thread costs on each: the inputs of the capacity model in docs/deployments.md.

    python -m benchmarks.cluster [--seconds 8] [--concurrency 16]

Prints a Markdown table. Everything (the agents, every Redis process, Postgres) shares
this machine's cores, so the cluster's extra primaries add no CPU: the figures show what
routing and slot-split batches cost, not how a cluster scales.
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from typing import Any

import psycopg
import redis

from benchmarks.workloads import chat_config, chat_graph, chat_input
from langgraph_durable import DurableSaver
from tests.support.cluster import TestCluster

POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/test"
REDIS_URL = "redis://127.0.0.1:6379/0"


async def _throughput(saver: DurableSaver, seconds: float, concurrency: int) -> float:
    """Graph steps (checkpoints) per second at ``concurrency`` concurrent ``ainvoke``s."""
    graph = chat_graph(async_nodes=True).compile(checkpointer=saver)
    steps = 0
    deadline = time.monotonic() + seconds

    async def agent(i: int) -> None:
        nonlocal steps
        thread, turn = f"bench-{i}-{uuid.uuid4().hex[:6]}", 0
        while time.monotonic() < deadline:
            await graph.ainvoke(chat_input(thread, turn), chat_config(thread))
            steps += 5  # input + 3 nodes + the end: 5 checkpoints a turn
            turn += 1

    started = time.monotonic()
    await asyncio.gather(*(agent(i) for i in range(concurrency)))
    return steps / (time.monotonic() - started)


def _redis_cpu(client: Any) -> float:
    """Seconds of CPU the Redis server (every primary of a cluster) has used."""
    info = client.info("cpu")
    nodes = info.values() if all(isinstance(v, dict) for v in info.values()) else [info]
    return sum(float(n["used_cpu_sys"]) + float(n["used_cpu_user"]) for n in nodes)


def _postgres_commits(database: str = "test") -> int:
    """Transactions committed in ``database`` so far (every client's)."""
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        row = conn.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = %s",
                           (database,)).fetchone()
    return int(row[0]) if row else 0


def _thread_footprint(saver: DurableSaver, client: Any) -> tuple[int, int]:
    """Keys and bytes (``MEMORY USAGE``) of one thread after one chat turn, flushed."""
    thread = f"size-{uuid.uuid4().hex[:6]}"
    graph = chat_graph(async_nodes=False).compile(checkpointer=saver)
    graph.invoke(chat_input(thread, 0), chat_config(thread))
    saver.flush()
    keys = saver.engine.context.layout.thread(thread)
    names = [*(m.decode() for m in client.smembers(keys.registry)), keys.registry,
             keys.versions, keys.unflushed]
    present = [n for n in names if client.exists(n)]
    return len(present), sum(int(client.memory_usage(n) or 0) for n in present)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    cluster = TestCluster().start()
    schema = f"bench_cluster_{uuid.uuid4().hex[:6]}"
    rows = []
    try:
        for where, url in (("one node", REDIS_URL), ("cluster (3 primaries)", cluster.url)):
            client: Any = (redis.RedisCluster if url == cluster.url else redis.Redis).from_url(url)
            for mode in ("through", "behind"):
                prefix = f"bench-{uuid.uuid4().hex[:6]}"
                with DurableSaver(url, POSTGRES_URL, key_prefix=prefix, schema=schema,
                                  write_mode=mode) as saver:  # type: ignore[arg-type]
                    saver.setup()
                    cpu, commits = _redis_cpu(client), _postgres_commits()
                    started = time.monotonic()
                    rate = asyncio.run(_throughput(saver, args.seconds, args.concurrency))
                    saver.flush()
                    steps = rate * (time.monotonic() - started)
                    cpu_us = (_redis_cpu(client) - cpu) / steps * 1e6
                    per_step = (_postgres_commits() - commits) / steps
                    keys, size = _thread_footprint(saver, client)
                    layout = saver.engine.context.layout
                    rows.append((where, mode, rate, cpu_us, per_step, layout.shards, keys, size))
                for key in client.scan_iter(match=f"{prefix}*", count=1000):
                    client.delete(key)
            client.close()
    finally:
        cluster.stop()
        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    print(f"| Redis | mode | steps/s at {args.concurrency} concurrent ainvoke "
          "| Redis CPU µs per step | Postgres commits per step | journal shards "
          "| hot keys per thread | hot bytes per thread |")
    print("|---|---|---|---|---|---|---|---|")
    for where, mode, rate, cpu_us, per_step, shards, keys, size in rows:
        print(f"| {where} | {mode} | {rate:.0f} | {cpu_us:.0f} | {per_step:.2f} | {shards} "
              f"| {keys} | {size} |")


if __name__ == "__main__":
    main()
