"""Kill -9, many times: every checkpoint a write-behind process had acknowledged reaches
Postgres and the thread resumes; a Redis killed with AOF keeps what its policy promises."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint

from langgraph_durable import DurableSaver
from tests.support.checkpoints import cold_ids
from tests.support.faults import private_redis
from tests.support.kills import kill_workers
from tests.support.servers import POSTGRES_URL

KILLS = 30


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
        stored = cold_ids(schema, thread)
        assert set(old) <= stored
        if fsync == "always":
            assert set(recent) <= stored
        saver.close()
