"""Restarts: a fresh saver with Redis emptied resumes every thread; a killed process too."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis

from langgraph_durable import DurableSaver
from langgraph_durable._core import ops
from langgraph_durable._core.keys import ThreadKeys
from tests.support.graphs import approval_graph, chat_graph
from tests.support.kill_worker import build
from tests.support.servers import REDIS_URL, drop_prefix

ROOT = Path(__file__).parents[2]


def _fresh(saver: DurableSaver, **options: Any) -> DurableSaver:
    return DurableSaver(saver.config.redis_url, saver.config.postgres_url,
                        key_prefix=saver.config.key_prefix, schema=saver.config.schema,
                        write_mode=saver.config.write_mode, **options)


def test_new_saver_with_redis_emptied_resumes_every_thread(saver: DurableSaver) -> None:
    """After Redis lost everything, each thread continues from its last checkpoint."""
    graph = chat_graph(saver)
    configs = [{"configurable": {"thread_id": f"t-{uuid.uuid4()}"}} for _ in range(5)]
    for config in configs:
        graph.invoke({"messages": [("user", "first")]}, config)
    paused = {"configurable": {"thread_id": f"t-{uuid.uuid4()}"}}
    approval_graph(saver).invoke({"request": "x", "decision": ""}, paused)
    saver.close()

    drop_prefix(saver.config.key_prefix)
    restarted = _fresh(saver)
    try:
        graph = chat_graph(restarted)
        for config in configs:
            out = graph.invoke({"messages": [("user", "second")]}, config)
            assert [m.content for m in out["messages"]][:5] == [
                "first", "plan #1", "act #2", "finish #3", "second"]
        from langgraph.types import Command

        assert approval_graph(restarted).invoke(Command(resume="ok"), paused)["decision"] == "ok"
    finally:
        restarted.close()


@pytest.mark.parametrize("write_mode", ["through"])  # the write-through protocol
def test_writer_that_died_after_commit_never_leaves_redis_stale(saver: DurableSaver) -> None:
    """A put whose process died between the Postgres commit and the Redis update is seen
    at once (from Postgres) and re-warmed into Redis once the writer's deadline passed."""
    quick = _fresh(saver, write_deadline=0.3)
    graph = chat_graph(quick)
    config = {"configurable": {"thread_id": f"t-{uuid.uuid4()}"}}
    graph.invoke({"messages": [("user", "hi")]}, config)
    head = quick.get_tuple(config)
    assert head is not None

    # Drive a put through its intent and its commit, then abandon it: a crash there.
    checkpoint = dict(head.checkpoint)
    checkpoint["id"] = str(uuid.UUID(int=uuid.UUID(head.checkpoint["id"]).int + 1))
    op = ops.put(quick.engine.context, head.config, checkpoint,  # type: ignore[arg-type]
                 {"source": "update", "step": 99}, {})
    tiers = quick.engine.tiers()
    request = next(op)
    request = op.send(tiers.execute(request, _no_effect))  # the intent
    tiers.execute(request, _no_effect)  # the commit; the Redis update never happens
    op.close()

    keys = ThreadKeys(quick.config.key_prefix, config["configurable"]["thread_id"])
    client = redis.Redis.from_url(REDIS_URL)
    assert client.zcard(keys.intents) == 1
    assert client.zrange(keys.index(""), -1, -1) == [head.config["configurable"]
                                                     ["checkpoint_id"].encode()]
    for reader in (quick, _fresh(saver)):
        tup = reader.get_tuple(config)
        assert tup is not None and tup.checkpoint["id"] == checkpoint["id"]
    time.sleep(0.4)
    assert quick.get_tuple(config).checkpoint["id"] == checkpoint["id"]  # type: ignore[union-attr]
    assert client.zcard(keys.intents) == 0
    assert client.zrange(keys.index(""), -1, -1) == [checkpoint["id"].encode()]
    client.close()
    quick.close()


def test_killed_process_resumes_from_last_acknowledged_checkpoint(
    saver: DurableSaver, namespace: tuple[str, str]
) -> None:
    """SIGKILL a real process mid-run; a new process's saver holds every acknowledged
    checkpoint and finishes the run from there."""
    schema, prefix = namespace
    for attempt in range(3):
        thread = f"kill-{uuid.uuid4()}"
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.kill_worker", thread, schema, prefix,
             saver.config.write_mode, "200"],
            cwd=ROOT, stdout=subprocess.PIPE, text=True,
        )
        assert proc.stdout is not None
        acked: list[str] = []
        for line in proc.stdout:
            if line.startswith("ack "):
                acked.append(line.split()[1])
            if len(acked) >= 20 + attempt * 15:
                proc.send_signal(signal.SIGKILL)
                break
        proc.wait(timeout=30)
        assert proc.returncode == -signal.SIGKILL

        config = {"configurable": {"thread_id": thread}, "recursion_limit": 10_000}
        resumed = _fresh(saver)
        try:
            head = resumed.get_tuple(config)
            assert head is not None
            assert head.checkpoint["id"] >= acked[-1]
            stored = {t.checkpoint["id"] for t in resumed.list(config)}
            assert set(acked) <= stored
            out = build(resumed, 200).invoke(None, config, durability="sync")
            assert out["count"] == 200
            assert out["trail"] == list(range(1, 201))
        finally:
            resumed.close()


def _no_effect(request: object) -> None:
    """Storage operations yield no tool effects."""
    raise AssertionError(f"unexpected effect {request!r}")
