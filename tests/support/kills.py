"""Worker processes of `tests.support.kill_worker` SIGKILLed at random acknowledged
checkpoints, three at a time, and what they acknowledged checked in Postgres."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import uuid
from pathlib import Path

from langgraph_durable import DurableSaver
from tests.support.checkpoints import cold_ids
from tests.support.kill_worker import build

ROOT = Path(__file__).resolve().parents[2]
# Long enough that no worker of a wave finishes before the test reaches its kill point.
STEPS = 120


def _start(thread: str, schema: str, prefix: str, mode: str,
           redis_url: str | None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.support.kill_worker", thread, schema, prefix, mode,
         str(STEPS), *([redis_url] if redis_url else [])],
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
        assert acked and set(acked) <= cold_ids(schema, thread), thread
    for thread, _ in runs[:5]:
        config = {"configurable": {"thread_id": thread}, "recursion_limit": 1000}
        out = build(saver, STEPS).invoke(None, config, durability="sync")
        assert out["count"] == STEPS and out["trail"] == list(range(1, STEPS + 1))
