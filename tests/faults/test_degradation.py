"""Degradation with real faults: a private Redis that dies and comes back, and a Postgres
behind a proxy the test cuts. The table in docs/failure-model.md is what these check."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from langgraph.checkpoint.base import empty_checkpoint

from langgraph_durable import DurableSaver, TierUnavailableError
from tests.support.checkpoints import cold_ids
from tests.support.cli_runner import cli_for
from tests.support.faults import Proxy, private_redis
from tests.support.graphs import chat_graph
from tests.support.servers import POSTGRES_DATABASE, POSTGRES_URL, postgres_address


def _saver(namespace: tuple[str, str], write_mode: str, redis_url: str,
           postgres_url: str = POSTGRES_URL, **options: Any) -> DurableSaver:
    schema, prefix = namespace
    saver = DurableSaver(redis_url, postgres_url, schema=schema, key_prefix=prefix,
                         write_mode=write_mode, breaker_cooldown=0.1,  # type: ignore[arg-type]
                         pool_timeout=2, **options)
    saver.setup()
    return saver


def _put(saver: DurableSaver, config: dict[str, Any], value: str) -> dict[str, Any]:
    checkpoint = empty_checkpoint()
    version = saver.get_next_version(None, None)
    checkpoint["channel_values"] = {"value": value}
    checkpoint["channel_versions"] = {"value": version}
    return saver.put({"configurable": {**config["configurable"], "checkpoint_ns": ""}},
                     checkpoint, {"source": "loop", "step": 0}, {"value": version})


def _value(saver: DurableSaver, thread: str) -> Any:
    tup = saver.get_tuple({"configurable": {"thread_id": thread}})
    return tup.checkpoint["channel_values"]["value"] if tup else None


def test_redis_down_serves_from_postgres_and_recovers(
    namespace: tuple[str, str], write_mode: str, tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Redis dies: write-through graphs keep running on Postgres alone; write-behind ones
    fail closed with TierUnavailableError(tier="hot") rather than fork the thread from
    Postgres's older state; health says so. Redis returns: the breaker closes, the hot tier
    serves again, and the thread goes on from its last acknowledged checkpoint."""
    with private_redis(tmp_path) as server:
        saver = _saver(namespace, write_mode, server.url)
        graph = chat_graph(saver)
        config = {"configurable": {"thread_id": f"t-{uuid.uuid4()}"}}
        graph.invoke({"messages": [("user", "before")]}, config)
        saver.flush()
        server.kill()
        with caplog.at_level(logging.WARNING, logger="langgraph_durable"):
            if write_mode == "behind":
                with pytest.raises(TierUnavailableError) as raised:
                    graph.invoke({"messages": [("user", "during")]}, config)
                assert raised.value.tier == "hot"
            else:
                out = graph.invoke({"messages": [("user", "during")]}, config)
                assert len(out["messages"]) == 8
        assert any("cannot be reached" in r.message for r in caplog.records)
        health = saver.health()
        assert health["hot"]["breaker"] == "open" and health["hot"]["trips"] >= 1
        assert health["cold"]["reachable"]

        server.start()
        time.sleep(0.15)
        out = graph.invoke({"messages": [("user", "after")]}, config)
        turns = 3 if write_mode == "through" else 2
        assert [m.content for m in out["messages"]][-4:] == [
            "after", f"plan #{4 * turns - 3}", f"act #{4 * turns - 2}", f"finish #{4 * turns - 1}"
        ]
        health = saver.health()
        assert health["hot"]["breaker"] == "closed" and health["hot"]["recoveries"] >= 1
        saver.close()


def test_redis_back_with_old_data_is_not_trusted(
    namespace: tuple[str, str], write_mode: str, tmp_path: Path
) -> None:
    """Redis restarts from its AOF holding an older state than Postgres (a write-through
    process wrote Postgres while it was down): the old hot copy is dropped before Redis is
    used again, by that process and by one (of either mode) that never saw the outage."""
    with private_redis(tmp_path, appendonly="always") as server:
        saver = _saver(namespace, "through", server.url)
        config = {"configurable": {"thread_id": f"t-{uuid.uuid4()}"}}
        _put(saver, config, "old")
        saver.flush()
        server.stop()  # clean shutdown: the AOF keeps "old"
        _put(saver, config, "new")  # bypasses Redis, marks the thread stale in Postgres
        assert _value(saver, config["configurable"]["thread_id"]) == "new"
        server.start()
        other = _saver(namespace, write_mode, server.url)  # never saw the outage
        time.sleep(0.15)
        assert _value(saver, config["configurable"]["thread_id"]) == "new"  # recovers first
        assert _value(other, config["configurable"]["thread_id"]) == "new"
        saver.close()
        other.close()


def test_redis_that_lost_its_scripts_keeps_serving(
    namespace: tuple[str, str], write_mode: str, tmp_path: Path
) -> None:
    """Redis forgets its Lua scripts (SCRIPT FLUSH, as after a restart without the process
    noticing): the saver's next calls, blocking and asyncio, send the scripts again and are
    served by Redis; the breaker never opens."""
    with private_redis(tmp_path) as server:
        saver = _saver(namespace, write_mode, server.url)
        config = {"configurable": {"thread_id": f"t-{uuid.uuid4()}"}}
        thread = config["configurable"]["thread_id"]
        _put(saver, config, "one")
        assert _value(saver, thread) == "one"
        admin = redis.Redis(port=server.port)
        admin.script_flush()
        _put(saver, config, "two")
        assert _value(saver, thread) == "two"

        async def twice() -> Any:
            version = saver.get_next_version(None, None)
            await saver.aput(
                {"configurable": {"thread_id": thread, "checkpoint_ns": ""}},
                {**empty_checkpoint(), "channel_values": {"value": "three"},
                 "channel_versions": {"value": version}},
                {"source": "loop", "step": 1}, {"value": version})
            admin.script_flush()
            return await saver.aget_tuple({"configurable": {"thread_id": thread}})

        tup = asyncio.run(twice())
        assert tup is not None and tup.checkpoint["channel_values"]["value"] == "three"
        health = saver.health()
        assert health["hot"]["breaker"] == "closed" and health["hot"]["trips"] == 0
        admin.close()
        saver.close()


@pytest.fixture
def proxy() -> Iterator[Proxy]:
    p = Proxy(postgres_address())
    p.start()
    yield p
    p.cut()


@pytest.mark.parametrize("write_mode", ["behind"])
def test_postgres_down_write_behind_accepts_up_to_bound_then_drains(
    namespace: tuple[str, str], write_mode: str, proxy: Proxy
) -> None:
    """Postgres unreachable: write-behind keeps acknowledging writes up to max_unflushed,
    then raises TierUnavailableError; once Postgres is back, everything acknowledged drains."""
    from tests.support.servers import REDIS_URL

    saver = _saver(namespace, write_mode, REDIS_URL, proxy.url(POSTGRES_DATABASE), max_unflushed=20,
                   flush_interval=0.05)
    thread = f"t-{uuid.uuid4()}"
    config = {"configurable": {"thread_id": thread}}
    assert saver.get_tuple(config) is None  # as a run's first read: Redis learns it is new
    proxy.cut()
    acked = []
    with pytest.raises(TierUnavailableError) as info:
        for i in range(100):
            acked.append(_put(saver, config, f"v{i}")["configurable"]["checkpoint_id"])
    assert info.value.tier == "cold" and "20 entries" in str(info.value)
    assert len(acked) == 20
    assert _value(saver, thread) == "v19"  # served from Redis meanwhile
    proxy.restore()
    saver.flush(timeout=30)
    assert cold_ids(namespace[0], thread) == set(acked)
    saver.close()


@pytest.mark.parametrize("write_mode", ["through"])
def test_postgres_down_write_through_raises_and_leaves_no_partial_state(
    namespace: tuple[str, str], write_mode: str, proxy: Proxy
) -> None:
    """Postgres unreachable: a write-through put raises TierUnavailableError and neither
    tier shows it, then or after Postgres returns."""
    from tests.support.servers import REDIS_URL

    saver = _saver(namespace, write_mode, REDIS_URL, proxy.url(POSTGRES_DATABASE))
    thread = f"t-{uuid.uuid4()}"
    config = {"configurable": {"thread_id": thread}}
    first = _put(saver, config, "committed")
    proxy.cut()
    with pytest.raises(TierUnavailableError) as info:
        _put(saver, config, "lost")
    assert info.value.tier == "cold"
    proxy.restore()
    time.sleep(0.15)  # past the breaker's cooldown: calls fail at once within it
    assert _value(saver, thread) == "committed"
    assert cold_ids(namespace[0], thread) == {first["configurable"]["checkpoint_id"]}
    saver.close()


@contextlib.contextmanager
def not_redis() -> Iterator[str]:
    """A TCP server that answers every connection as a web server would: a Redis URL
    pointing at the wrong port of the wrong host."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn:
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"redis://127.0.0.1:{server.getsockname()[1]}/0"
    finally:
        stop.set()
        thread.join()
        server.close()


def test_a_redis_url_naming_another_kind_of_server_is_an_unavailable_hot_tier(
        namespace: tuple[str, str]) -> None:
    """Redis answering in another protocol is a hot tier that cannot be used, said in one
    line: write-through goes on from Postgres, write-behind refuses, the CLI explains."""
    with not_redis() as url:
        through = _saver(namespace, "through", url)
        try:
            config = {"configurable": {"thread_id": f"t-{uuid.uuid4().hex[:6]}"}}
            _put(through, config, "kept")
            got = through.get_tuple(config)
            assert got is not None and got.checkpoint["channel_values"] == {"value": "kept"}
        finally:
            through.close()
        behind = _saver(namespace, "behind", url)
        try:
            with pytest.raises(TierUnavailableError, match="Redis") as refused:
                _put(behind, {"configurable": {"thread_id": "t-behind"}}, "refused")
            assert refused.value.tier == "hot"
        finally:
            behind.close()
        result = cli_for(namespace)("threads", "--redis-url", url)
        assert "Traceback" not in result.output, result.output
        assert "Redis" in result.output, result.output
