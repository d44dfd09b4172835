"""What sealing costs per operation: no key (checksums), a secret (HMAC-SHA256), encryption
(AES-256-GCM). Median microseconds and the ratio to no key.

    python -m benchmarks.trust_overhead [--rounds 200] [--messages 10,100]

Each round, for each seal in turn (interleaved, so machine noise hits all alike): ``put``
of a new checkpoint of a ``--messages``-message thread (write-through), then ``get_tuple``
of it from Redis (hot: the first read of a new checkpoint, so it is transferred, verified
and decoded, not served from the decoded cache), then ``get_tuple`` again with the
thread's Redis keys deleted (cold: Postgres, verify, decode, warm). Each seal works on a
private schema and key prefix, removed at the end. Last, the seal alone: sealing and
opening the messages channel's frame in process, without I/O.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import uuid
from typing import Any

import psycopg
import redis

from benchmarks.workloads import CheckpointChain, make_messages
from langgraph_durable import DurableSaver
from langgraph_durable._core.codec import frame_body
from langgraph_durable._core.seal import Seal, blob_place
from langgraph_durable._core.strict import StrictSerializer

REDIS_URL = os.environ.get("LGD_REDIS_URL", "redis://127.0.0.1:6379/0")
POSTGRES_URL = os.environ.get("LGD_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")

SEALS: dict[str, dict[str, Any]] = {
    "checksum (no key)": {},
    "HMAC (secret)": {"secret": os.urandom(32)},
    "AES-GCM (encryption)": {"encryption": {"k1": os.urandom(32)}},
}
OPS = ("put", "get_tuple hot", "get_tuple cold")


def _drop_keys(client: redis.Redis, prefix: str) -> None:
    keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
    if keys:
        client.unlink(*keys)


def _round(
    chain: CheckpointChain, client: redis.Redis, prefix: str, samples: dict[str, list[float]]
) -> None:
    saver = chain.saver
    args = chain.prepare()
    start = time.perf_counter()
    stored = saver.put(args.config, args.checkpoint, args.metadata, args.new_versions)
    samples["put"].append(time.perf_counter() - start)
    chain.commit(args, stored)
    start = time.perf_counter()
    hot = saver.get_tuple(stored)
    samples["get_tuple hot"].append(time.perf_counter() - start)
    _drop_keys(client, prefix)
    start = time.perf_counter()
    cold = saver.get_tuple(stored)
    samples["get_tuple cold"].append(time.perf_counter() - start)
    for found in (hot, cold):
        if found is None or found.checkpoint["id"] != args.checkpoint["id"]:
            raise AssertionError("a read returned the wrong checkpoint")


def measure(rounds: int, messages: int) -> dict[str, dict[str, float]]:
    """Median seconds per operation for each seal."""
    tag = uuid.uuid4().hex[:8]
    client = redis.Redis.from_url(REDIS_URL)
    savers: dict[str, tuple[DurableSaver, CheckpointChain, str]] = {}
    samples = {name: {op: [] for op in OPS} for name in SEALS}
    try:
        for i, (name, keys) in enumerate(SEALS.items()):
            schema, prefix = f"lgdbench_trust_{tag}_{i}", f"lgdbench-trust-{tag}-{i}"
            saver = DurableSaver(REDIS_URL, POSTGRES_URL, schema=schema, key_prefix=prefix, **keys)
            saver.setup()
            chain = CheckpointChain(saver, f"bench-{tag}", make_messages(messages))
            savers[name] = (saver, chain, prefix)
        for r in range(rounds + 10):  # the first 10 rounds warm pools and caches
            names = list(SEALS)
            names = names[r % len(names) :] + names[: r % len(names)]
            for name in names:
                saver, chain, prefix = savers[name]
                into = samples[name] if r >= 10 else {op: [] for op in OPS}
                _round(chain, client, prefix, into)
        return {
            name: {op: statistics.median(s) for op, s in by_op.items()}
            for name, by_op in samples.items()
        }
    finally:
        for saver, _, prefix in savers.values():
            saver.close()
            _drop_keys(client, prefix)
            with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{saver.config.schema}" CASCADE')
        client.close()


def seal_only(messages: int, n: int = 2000) -> dict[str, tuple[float, float, int]]:
    """Median seconds to seal and to open one frame of ``messages`` messages, and its size."""
    body = frame_body(*StrictSerializer().dumps_typed(make_messages(messages)))
    place = blob_place("thread", "", "messages", "00000000000000000000000000000001.1")
    out = {}
    for name, keys in SEALS.items():
        seal = Seal(keys.get("secret"), keys.get("encryption"))
        sealing, opening = [], []
        for _ in range(n):
            start = time.perf_counter()
            frame = seal.seal(body, place)
            sealing.append(time.perf_counter() - start)
            start = time.perf_counter()
            seal.open(frame, place)
            opening.append(time.perf_counter() - start)
        out[name] = (statistics.median(sealing), statistics.median(opening), len(body))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--messages", default="10,100")
    options = parser.parse_args()
    for count in (int(m) for m in options.messages.split(",")):
        medians = measure(options.rounds, count)
        base = medians["checksum (no key)"]
        print(f"\n{count} messages, median us over {options.rounds} rounds (ratio to no key)")
        print("| seal | " + " | ".join(OPS) + " |")
        print("|---|" + "---|" * len(OPS))
        for name, by_op in medians.items():
            cells = [f"{by_op[op] * 1e6:.0f} ({by_op[op] / base[op]:.2f}x)" for op in OPS]
            print(f"| {name} | " + " | ".join(cells) + " |")
        print(f"\nthe seal alone, {count} messages: median us to seal / open one frame")
        for name, (sealing, opening, size) in seal_only(count).items():
            print(f"| {name} | {size} bytes | {sealing * 1e6:.1f} | {opening * 1e6:.1f} |")


if __name__ == "__main__":
    main()
