"""Semantic search: `DurableStore` against `PostgresStore`, both with the same index on one
Postgres with pgvector. Median and p95 microseconds, and whether each found the true top ten.

    python -m benchmarks.semantic_search [--dims 1536] [--items 1000,10000] [--rounds 300]

The Postgres is ``LGD_VECTOR_POSTGRES_URL``, else an embedded one started for the run (its
build ships pgvector); Redis is ``LGD_REDIS_URL``. Items are ``{"text": ...}`` in one
user's namespace, embedded by a deterministic model (random unit-free vectors, one per
text); each round, both stores (interleaved) answer ``search(query=..., limit=10)`` for a
new query. The true top ten of the first query is computed in Python (cosine similarity
over every item), and each store's answer is compared with it: `DurableStore` ranks
exactly; `PostgresStore` orders by its HNSW index. Random vectors are the hard case for an
approximate index; real embeddings cluster, and recall is higher there. Also timed: a
``put`` that embeds its item. Everything is made in schemas of a fresh database and
dropped at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import random
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import psycopg
import redis
from langgraph.store.base import BaseStore, PutOp
from langgraph.store.postgres import PostgresStore
from psycopg.rows import dict_row

from langgraph_durable import DurableStore
from langgraph_durable.embedded import EmbeddedServers

REDIS_URL = os.environ.get("LGD_REDIS_URL", "redis://127.0.0.1:6379/0")
NAMESPACE = ("users", "ada", "memories")


@contextlib.contextmanager
def vector_postgres() -> Iterator[str]:
    """``LGD_VECTOR_POSTGRES_URL``, else an embedded Postgres, stopped after."""
    given = os.environ.get("LGD_VECTOR_POSTGRES_URL")
    if given:
        yield given
        return
    folder = Path(tempfile.mkdtemp(prefix="lgd-semantic-bench-"))
    folder.chmod(0o711)  # PostgreSQL's own account (as root) enters it
    with EmbeddedServers(folder / "servers", startup_timeout=60) as servers:
        yield servers.postgres_url


class Model:
    """A deterministic embedding model: a random vector per text, fixed by a seed."""

    def __init__(self, dims: int) -> None:
        self.dims = dims
        self.vectors: dict[str, list[float]] = {}

    def __call__(self, texts: Sequence[str]) -> list[list[float]]:
        return [self.vector(text) for text in texts]

    def vector(self, text: str) -> list[float]:
        if text not in self.vectors:
            rnd = random.Random(text)
            self.vectors[text] = [rnd.gauss(0, 1) for _ in range(self.dims)]
        return self.vectors[text]


def true_top(model: Model, texts: Sequence[str], query: str) -> list[str]:
    """The keys of the ten items closest to ``query`` by cosine similarity."""
    q = model.vector(query)

    def cosine(v: list[float]) -> float:
        return sum(a * b for a, b in zip(v, q, strict=True)) / (math.hypot(*v) * math.hypot(*q))

    ranked = sorted(range(len(texts)), key=lambda i: -cosine(model.vector(texts[i])))
    return [f"k{i}" for i in ranked[:10]]


def run(url: str, dims: int, items: int, rounds: int) -> None:
    model = Model(dims)
    texts = [f"memory {i}: " + "x" * 50 for i in range(items)]
    index = {"dims": dims, "embed": model, "fields": ["text"]}
    tag = uuid.uuid4().hex[:8]
    database = f"lgd_semantic_bench_{tag}"
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{database}"')
    db_url = psycopg.conninfo.make_conninfo(url, dbname=database)
    durable = DurableStore(REDIS_URL, db_url, schema="durable", key_prefix=f"lgdb-sem-{tag}",
                           index=index)
    conn = psycopg.connect(db_url, autocommit=True, prepare_threshold=0, row_factory=dict_row)
    try:
        durable.setup()
        official = PostgresStore(conn, index=index)  # type: ignore[arg-type]
        official.setup()
        stores: dict[str, BaseStore] = {"DurableStore": durable, "PostgresStore": official}
        ops = [PutOp(NAMESPACE, f"k{i}", {"text": t}) for i, t in enumerate(texts)]
        for store in stores.values():
            for start in range(0, len(ops), 500):
                store.batch(ops[start:start + 500])
        searches: dict[str, list[int]] = {name: [] for name in stores}
        puts: dict[str, list[int]] = {name: [] for name in stores}
        for n in range(rounds):
            for name, store in stores.items():
                began = time.perf_counter_ns()
                found = store.search(NAMESPACE[:2], query=f"question {n}", limit=10)
                searches[name].append(time.perf_counter_ns() - began)
                assert len(found) == 10, name
                began = time.perf_counter_ns()
                store.put(("users", "bob"), f"p{n}", {"text": texts[n % items]})
                puts[name].append(time.perf_counter_ns() - began)
        exact = true_top(model, texts, "question 0")
        print(f"\n{items:,} items of {dims} dimensions, {rounds} rounds (p50 / p95 µs)")
        for name, store in stores.items():
            keys = [item.key for item in store.search(NAMESPACE[:2], query="question 0",
                                                      limit=10)]
            print(f"  {name:13}  search {_p(searches[name])}  put {_p(puts[name])}  "
                  f"true top ten found: {len(set(keys) & set(exact))}/10")
    finally:
        durable.close()
        conn.close()
        client = redis.Redis.from_url(REDIS_URL)
        for key in client.scan_iter(match=f"lgdb-sem-{tag}:*", count=1000):
            client.delete(key)
        client.close()
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')


def _p(samples: list[int]) -> str:
    kept = sorted(samples[len(samples) // 10:])  # the first tenth warms up
    return f"{statistics.median(kept) / 1000:>8,.0f} / {kept[int(len(kept) * 0.95)] / 1000:,.0f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dims", type=int, default=1536)
    parser.add_argument("--items", default="1000,10000")
    parser.add_argument("--rounds", type=int, default=300)
    args = parser.parse_args()
    with vector_postgres() as url:
        for items in (int(n) for n in args.items.split(",")):
            run(url, args.dims, items, args.rounds)


if __name__ == "__main__":
    main()
