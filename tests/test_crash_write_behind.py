"""Kill -9, many times: every checkpoint a write-behind process had acknowledged reaches
Postgres and the thread resumes; a Redis killed with AOF keeps what its policy promises."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from langgraph.checkpoint.base import empty_checkpoint

from langgraph_durable import DurableSaver
from tests.conftest import POSTGRES_URL
from tests.faults import private_redis
from tests.kill_worker import build

ROOT = Path(__file__).parent.parent
KILLS = 30


def _cold_ids(schema: str, thread: str) -> set[str]:
    with psycopg.connect(POSTGRES_URL) as conn:
        rows = conn.execute(f'SELECT checkpoint_id FROM "{schema}".lgd_checkpoints '
                            "WHERE thread_id = %s", (thread,)).fetchall()
    return {r[0] for r in rows}


# Long enough that no worker of a wave finishes before the test reaches its kill point.
STEPS = 120


def _start(thread: str, schema: str, prefix: str, mode: str,
           redis_url: str | None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.kill_worker", thread, schema, prefix, mode, str(STEPS),
         *([redis_url] if redis_url else [])],
        cwd=ROOT, stdout=subprocess.PIPE, text=True)


def kill_workers(kills: int, schema: str, prefix: str, mode: str, saver: DurableSaver,
                 redis_url: str | None = None, seed: int = 1234) -> None:
    """``kills`` worker processes SIGKILLed at random acknowledged checkpoints; then every
    checkpoint they had acknowledged is in Postgres (after ``saver`` drained the journal),
    and threads resume to their end from where they stopped."""
    rng = random.Random(seed)
    runs: list[tuple[str, list[str]]] = []
    for wave in range(0, kills, 3):  # three at a time keeps both cores busy
        procs = []
        for _ in range(min(3, kills - wave)):
            thread = f"kill-{uuid.uuid4()}"
            runs.append((thread, []))
            procs.append((runs[-1], _start(thread, schema, prefix, mode, redis_url)))
        for (thread, acked), proc in procs:
            assert proc.stdout is not None
            kill_at = rng.randint(1, 45)
            for line in proc.stdout:
                if line.startswith("ack "):
                    acked.append(line.split()[1])
                if len(acked) >= kill_at:
                    proc.send_signal(signal.SIGKILL)
                    break
            proc.wait(timeout=60)
            assert proc.returncode == -signal.SIGKILL, f"{thread} ended before its kill"

    saver.flush(timeout=60)
    assert len(runs) == kills
    for thread, acked in runs:
        assert acked and set(acked) <= _cold_ids(schema, thread), thread
    for thread, _ in runs[:5]:
        config = {"configurable": {"thread_id": thread}, "recursion_limit": 1000}
        out = build(saver, STEPS).invoke(None, config, durability="sync")
        assert out["count"] == STEPS and out["trail"] == list(range(1, STEPS + 1))


@pytest.mark.parametrize("write_mode", ["behind"])
def test_thirty_kills_lose_no_acknowledged_checkpoint(
    namespace: tuple[str, str], write_mode: str, make_saver: Any
) -> None:
    """30 worker processes SIGKILLed at random points; a flusher then moves everything they
    had acknowledged to Postgres, and each thread runs to its end from where it stopped."""
    schema, prefix = namespace
    kill_workers(KILLS, schema, prefix, write_mode, make_saver())


def _put(saver: DurableSaver, thread: str, i: int) -> str:
    checkpoint = empty_checkpoint()
    version = saver.get_next_version(None, None)
    checkpoint["channel_values"] = {"i": i}
    checkpoint["channel_versions"] = {"i": version}
    config = saver.put({"configurable": {"thread_id": thread, "checkpoint_ns": ""}},
                       checkpoint, {"source": "loop", "step": i}, {"i": version})
    return str(config["configurable"]["checkpoint_id"])


@pytest.mark.parametrize("write_mode", ["behind"])
@pytest.mark.parametrize("fsync", ["always", "everysec"])
def test_redis_kill_with_aof_loses_at_most_its_window(
    namespace: tuple[str, str], write_mode: str, fsync: str, tmp_path: Path
) -> None:
    """Writes acknowledged in Redis survive a SIGKILL of Redis itself: all of them with
    appendfsync=always, all but the last second with everysec."""
    schema, prefix = namespace
    with private_redis(tmp_path, appendonly=fsync) as server:
        saver = DurableSaver(server.url, POSTGRES_URL, schema=schema, key_prefix=prefix,
                             write_mode="behind", flush_interval=3600, breaker_cooldown=0.1)
        saver.setup()
        thread = f"t-{uuid.uuid4()}"
        old = [_put(saver, thread, i) for i in range(20)]
        time.sleep(1.5 if fsync == "everysec" else 0)
        recent = [_put(saver, thread, 20 + i) for i in range(5)]
        server.kill()
        server.start()
        saver.flush(timeout=30)
        stored = _cold_ids(schema, thread)
        assert set(old) <= stored
        if fsync == "always":
            assert set(recent) <= stored
        saver.close()
