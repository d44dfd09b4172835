"""A Redis that restarts from an older snapshot (an RDB taken before the last turns, an
AOF's last second, a replica promoted in its place) holds copies of threads older than
Postgres. The saver tells a new Redis process by its run id and, before its first script
there, drops every thread's copy (after the thread's write-behind entries reached
Postgres): reads serve the acknowledged state, the next turn extends it, history stays one
line, in the process that lived through the restart and in a new one. A private
redis-server of the test's own, restarted with SIGKILL; the shared one is never touched."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff
from redis.retry import Retry

from langgraph_durable import DurableSaver
from tests.support.checkpoints import config_of, put_after, put_line, put_value, value_of
from tests.support.faults import PrivateRedis, Proxy
from tests.support.servers import POSTGRES_DATABASE, POSTGRES_URL, postgres_address


@pytest.fixture
def server(tmp_path: Path) -> Iterator[PrivateRedis]:
    redis_server = PrivateRedis(tmp_path)
    redis_server.start()
    try:
        yield redis_server
    finally:
        redis_server.stop()


def _restart_from_snapshot(server: PrivateRedis) -> None:
    """Kill the server (no save on the way down) and start it again: it loads the RDB
    that `_snapshot` wrote, and the run id of a new process."""
    server.kill()
    server.start()


def _snapshot(server: PrivateRedis) -> str:
    """Write an RDB of the server's data now; returns its run id."""
    client = redis.Redis.from_url(server.url)
    try:
        client.save()
        return str(client.info("server")["run_id"])
    finally:
        client.close()


def _saver(server: PrivateRedis, namespace: tuple[str, str], write_mode: str,
           **options: Any) -> DurableSaver:
    schema, prefix = namespace
    saver = DurableSaver(server.url, POSTGRES_URL, key_prefix=prefix, schema=schema,
                         write_mode=write_mode, **options)  # type: ignore[arg-type]
    saver.setup()
    return saver


def _history(saver: DurableSaver, thread: str) -> list[Any]:
    return [t.checkpoint["channel_values"]["value"] for t in saver.list(config_of(thread))]


def test_a_turn_acknowledged_after_the_snapshot_is_served_and_extended(
        server: PrivateRedis, namespace: tuple[str, str], write_mode: str) -> None:
    """Turn 1, a snapshot, turn 2 acknowledged (write-behind: flushed), Redis killed and
    restarted from the snapshot. The process that lived through it and a new one read
    turn 2, turn 3 extends it, and history is one line: no ThreadConflictError, no turn
    dropped out of the line."""
    saver = _saver(server, namespace, write_mode)
    thread = f"t-{uuid.uuid4()}"
    (first,) = put_line(saver, thread, ["v1"])
    assert value_of(saver, config_of(thread)) == "v1"
    before = _snapshot(server)
    put_after(saver, first, "v2")
    saver.flush()
    assert value_of(saver, config_of(thread)) == "v2"
    _restart_from_snapshot(server)
    stale = redis.Redis.from_url(server.url)
    assert str(stale.info("server")["run_id"]) != before  # a new process, the old data
    assert stale.keys(f"{namespace[1]}:*"), "the snapshot holds the thread's turn 1"
    stale.close()

    assert value_of(saver, config_of(thread)) == "v2"
    newcomer = _saver(server, namespace, write_mode)
    assert value_of(newcomer, config_of(thread)) == "v2"
    put_after(saver, saver.get_tuple(config_of(thread)).config, "v3")
    saver.flush()
    assert value_of(newcomer, config_of(thread)) == "v3"
    assert _history(newcomer, thread) == ["v3", "v2", "v1"]
    newcomer.close()
    saver.close()


def test_write_behind_entries_still_in_the_snapshot_reach_postgres_before_the_drop(
        server: PrivateRedis, namespace: tuple[str, str]) -> None:
    """Write-behind, nothing flushed: turn 1 only in Redis's journal when the snapshot is
    taken, Redis restarts from it. The check moves turn 1 to Postgres before it drops the
    copy, so the turn stays (its only copy was the journal), and the thread goes on."""
    saver = _saver(server, namespace, "behind", background_flush=False)
    thread = f"t-{uuid.uuid4()}"
    put_line(saver, thread, ["v1"])
    _snapshot(server)
    _restart_from_snapshot(server)
    latest = saver.get_tuple(config_of(thread))
    assert latest is not None and latest.checkpoint["channel_values"]["value"] == "v1"
    put_after(saver, latest.config, "v2")
    saver.flush()
    assert _history(saver, thread) == ["v2", "v1"]
    saver.close()


def test_a_batch_another_flusher_took_before_the_restart_holds_the_check_up_briefly(
        server: PrivateRedis, namespace: tuple[str, str]) -> None:
    """Write-behind: another process's flusher took turn 1's entry when Redis restarted,
    and that flusher waits for the check like every caller. The check takes the batch over
    once it sat idle for tier_timeout (the bound of that flusher's commit), not after
    reclaim_after (10 s), and every caller meanwhile waits as long."""
    saver = _saver(server, namespace, "behind", background_flush=False, tier_timeout=1.0)
    thread = f"t-{uuid.uuid4()}"
    put_value(saver, thread, "v1")
    layout = saver.engine.context.layout
    client = redis.Redis.from_url(server.url)
    client.xgroup_create(layout.journal(0), "flushers", id="0")
    assert client.xreadgroup("flushers", "another-process", {layout.journal(0): ">"})
    client.close()
    _snapshot(server)
    _restart_from_snapshot(server)
    started = time.monotonic()
    latest = saver.get_tuple(config_of(thread))
    took = time.monotonic() - started
    assert latest is not None and latest.checkpoint["channel_values"]["value"] == "v1"
    assert took < 3.0, f"the first read after the restart took {took:.1f} s"
    assert _history(saver, thread) == ["v1"]
    saver.close()


def test_async_callers_wait_for_one_check_and_then_see_the_acknowledged_turn(
        server: PrivateRedis, namespace: tuple[str, str], write_mode: str,
        caplog: pytest.LogCaptureFixture) -> None:
    """Ten concurrent ``aget_tuple`` of ten threads right after the restart: each is
    served its acknowledged turn 2, and the copies were dropped once (one process checks,
    the others wait for it)."""
    saver = _saver(server, namespace, write_mode)
    threads = [f"t-{uuid.uuid4()}" for _ in range(10)]
    firsts = [put_line(saver, t, ["v1"])[0] for t in threads]
    _snapshot(server)
    for first in firsts:
        put_after(saver, first, "v2")
    saver.flush()
    _restart_from_snapshot(server)

    async def read_all() -> list[Any]:
        tuples = await asyncio.gather(*(saver.aget_tuple(config_of(t)) for t in threads))
        return [t.checkpoint["channel_values"]["value"] if t else None for t in tuples]

    with caplog.at_level(logging.WARNING, logger="langgraph_durable"):
        assert asyncio.run(read_all()) == ["v2"] * 10
    said = [r.getMessage() for r in caplog.records if "were dropped" in r.getMessage()]
    assert len(said) == 1 and "copies of 10 threads" in said[0], said
    client = redis.Redis.from_url(server.url)
    try:
        assert client.get(f"{namespace[1]}:incarnation") == client.info("server")[
            "run_id"].encode()
    finally:
        client.close()
    saver.close()


def test_a_new_prefix_needs_no_check_and_a_known_process_is_checked_once(
        server: PrivateRedis, namespace: tuple[str, str]) -> None:
    """A prefix new to a Redis records that Redis as checked when it lays out its keys;
    a second saver on it, and the same saver after a reconnection to the same process,
    drop nothing."""
    saver = _saver(server, namespace, "through")
    thread = f"t-{uuid.uuid4()}"
    put_line(saver, thread, ["v1"])
    client = redis.Redis.from_url(server.url)
    try:
        run_id = client.info("server")["run_id"]
        assert client.get(f"{namespace[1]}:incarnation") == run_id.encode()
        hot = client.keys(f"{namespace[1]}:*:k")
        assert hot, "turn 1 has a hot copy"
        client.client_kill_filter(_type="normal", skipme=True)  # every other connection
        second = _saver(server, namespace, "through")
        assert value_of(second, config_of(thread)) == "v1"
        assert value_of(saver, config_of(thread)) == "v1"
        assert client.keys(f"{namespace[1]}:*:k") == hot  # the copy was not dropped
        second.close()
    finally:
        client.close()
    saver.close()


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_a_connection_its_health_check_reconnected_is_checked_before_the_read(
        server: PrivateRedis, namespace: tuple[str, str], write_mode: str,
        flavour: str) -> None:
    """A Redis client pings a connection idle past its ``health_check_interval`` before
    the next command, and with retries (as the saver's own clients have), a failed
    ``PING`` reconnects it to whichever Redis process answers now. Turn 1, a snapshot,
    turn 2 acknowledged and read (the connection kept), Redis restarted from the
    snapshot, the interval passes: the next read serves turn 2, as the reconnected
    connection reached a process the saver checks first (no stale-mark poll or flusher
    runs meanwhile to check it instead, or to find the old connection closed and open
    the breaker)."""
    idle = 0.5
    retrying = {"health_check_interval": idle, "retry": Retry(NoBackoff(), 2),
                "retry_on_error": [redis.ConnectionError]}
    if flavour == "sync":
        client: Any = redis.Redis.from_url(server.url, **retrying)
        saver = _saver(server, namespace, write_mode, redis_client=client,
                       stale_poll_interval=3600, background_flush=False)
    else:
        client = redis.asyncio.Redis.from_url(
            server.url, **retrying | {"retry": AsyncRetry(NoBackoff(), 2)})
        saver = _saver(server, namespace, write_mode, aredis_client=client,
                       stale_poll_interval=3600, background_flush=False)
    thread = f"t-{uuid.uuid4()}"
    (first,) = put_line(saver, thread, ["v1"])
    _snapshot(server)
    put_after(saver, first, "v2")
    saver.flush()

    def value(latest: Any) -> Any:
        return latest.checkpoint["channel_values"]["value"] if latest else None

    if flavour == "sync":
        assert value_of(saver, config_of(thread)) == "v2"
        _restart_from_snapshot(server)
        time.sleep(idle * 2)
        assert value(saver.get_tuple(config_of(thread))) == "v2"
    else:
        async def read_restart_read() -> list[Any]:
            before = value(await saver.aget_tuple(config_of(thread)))
            _restart_from_snapshot(server)
            await asyncio.sleep(idle * 2)
            return [before, value(await saver.aget_tuple(config_of(thread)))]

        assert asyncio.run(read_restart_read()) == ["v2", "v2"]
    saver.close()


def test_a_check_cancelled_midway_releases_its_lock_at_once(
        server: PrivateRedis, namespace: tuple[str, str]) -> None:
    """An ``aget_tuple`` cancelled (a client gone, a run cancelled) while it checks a
    restarted Redis, here waiting for Postgres to take a write-behind turn the snapshot
    still journals: its lock goes with it, so the next caller checks at once instead of
    waiting ``tier_timeout`` and failing while the lock runs out (10 s); the turn is
    served and nothing is lost. (No stale-mark poll runs meanwhile to check instead.)"""
    schema, prefix = namespace
    proxy = Proxy(postgres_address())
    proxy.start()
    saver = DurableSaver(server.url, proxy.url(POSTGRES_DATABASE), key_prefix=prefix,
                         schema=schema, write_mode="behind", background_flush=False,
                         tier_timeout=5.0, stale_poll_interval=3600)
    saver.setup()
    thread = f"t-{uuid.uuid4()}"
    put_line(saver, thread, ["v1", "v2"])  # a root goes through Postgres; v2 is journaled
    _snapshot(server)
    _restart_from_snapshot(server)
    lock = f"{prefix}:incarnation:lock"
    client = redis.Redis.from_url(server.url)

    async def cancelled_midway() -> None:
        proxy.freeze()  # the check's move of turn 1 to Postgres waits
        read = asyncio.ensure_future(saver.aget_tuple(config_of(thread)))
        deadline = time.monotonic() + 5
        while not client.exists(lock) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert client.exists(lock), "the check took its lock"
        await asyncio.sleep(0.2)
        read.cancel()
        with pytest.raises(asyncio.CancelledError):
            await read

    try:
        asyncio.run(cancelled_midway())
        assert not client.exists(lock), f"lock left for {client.pttl(lock)} ms"
        proxy.thaw()
        newcomer = _saver(server, namespace, "behind", tier_timeout=1.0)
        assert value_of(newcomer, config_of(thread)) == "v2"
        newcomer.close()
    finally:
        proxy.thaw()
        client.close()
        saver.close()
        proxy.cut()


def test_a_connection_kept_from_a_process_gone_has_no_check_run_for_that_process(
        server: PrivateRedis, namespace: tuple[str, str],
        caplog: pytest.LogCaptureFixture) -> None:
    """A connection kept while Redis restarted (its socket dead, not yet known so, used
    again within the health-check interval) still names the process it reached first,
    after the saver checked the new one on another connection. Its next script finds the
    process that answers now, already checked: no check runs for the process gone, which
    would record it as checked and have every thread's copy dropped again."""
    saver = _saver(server, namespace, "through", stale_poll_interval=3600)
    thread = f"t-{uuid.uuid4()}"
    put_line(saver, thread, ["v1"])
    assert value_of(saver, config_of(thread)) == "v1"
    tiers = saver.engine.tiers()
    kept = list(tiers._held)  # the connection that reached the first process
    assert kept, "a read keeps its connection for the next script"
    tiers._held.clear()
    _restart_from_snapshot(server)
    assert value_of(saver, config_of(thread)) == "v1"  # a new connection: checked
    client = redis.Redis.from_url(server.url)
    try:
        current = client.info("server")["run_id"].encode()
        assert client.get(f"{namespace[1]}:incarnation") == current
        tiers._held.clear()  # the next script takes the connection kept from before
        tiers._held.extend(kept)
        with caplog.at_level(logging.WARNING, logger="langgraph_durable"):
            assert value_of(saver, config_of(thread)) == "v1"
        dropped = [r.getMessage() for r in caplog.records if "were dropped" in r.getMessage()]
        assert not dropped, dropped
        assert client.get(f"{namespace[1]}:incarnation") == current
    finally:
        client.close()
    saver.close()
