"""Redis behind Sentinel: the saver finds the primary through ``redis+sentinel://`` and
follows it when the primary dies and a replica is promoted. In write-through mode nothing
acknowledged is lost (Postgres is the record) and reads never go back in time."""

from __future__ import annotations

import asyncio
import contextlib
import re
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from langgraph_durable import DurableSaver, Retention
from langgraph_durable.errors import TierUnavailableError
from tests.support.checkpoints import cold_checkpoints, put_value
from tests.support.cli_runner import cli_for
from tests.support.deployment_servers import pings, process, redis_args, redis_binary, wait_until
from tests.support.faults import Proxy, free_port
from tests.support.servers import POSTGRES_URL

pytestmark = pytest.mark.timeout(90)

SERVICE = "lgdmaster"
Procs = dict[str, subprocess.Popen[bytes]]  # the servers' processes by role


@dataclass
class Watched:
    """A primary and its replica on their own ports, and a sentinel watching them."""

    primary: int
    replica: int
    sentinel: int
    stack: ExitStack

    @property
    def url(self) -> str:
        return f"redis+sentinel://127.0.0.1:{self.sentinel}/{SERVICE}/0"


@contextlib.contextmanager
def primary_and_replica(tmp_path: Path, stack: ExitStack, link: Proxy | None = None
                        ) -> Iterator[tuple[int, int, Procs]]:
    """A primary and a replica in sync; with ``link`` (a proxy to the primary's port, not
    started) the replica replicates through it, so the test can cut replication."""
    primary, replica = (link.target[1], free_port()) if link else (free_port(), free_port())
    if link is not None:
        link.start()
    upstream = link.port if link else primary
    procs = {}
    for name, port, extra in (
        ("primary", primary, ()),
        ("replica", replica, ("--replicaof", "127.0.0.1", str(upstream))),
    ):
        workdir = tmp_path / name
        workdir.mkdir()
        procs[name] = stack.enter_context(process(
            redis_args(workdir, port, *extra), pings(port=port), log=workdir / "log"))
    wait_until(lambda: redis.Redis(port=replica).info("replication")
               .get("master_link_status") == "up")
    yield primary, replica, procs


@pytest.fixture
def watched(tmp_path: Path) -> Iterator[tuple[Watched, Procs]]:
    """`primary_and_replica` and a sentinel watching them (quorum 1, down after 1 s)."""
    sentinel = free_port()
    with ExitStack() as stack, primary_and_replica(tmp_path, stack) as (primary, replica,
                                                                          procs):
        conf = tmp_path / "sentinel.conf"
        conf.write_text(
            f"port {sentinel}\nbind 127.0.0.1\ndir {tmp_path}\n"
            f"sentinel monitor {SERVICE} 127.0.0.1 {primary} 1\n"
            f"sentinel down-after-milliseconds {SERVICE} 1000\n"
            f"sentinel failover-timeout {SERVICE} 10000\n")
        stack.enter_context(process([redis_binary(tmp_path), str(conf), "--sentinel"],
                                    _knows_replica(sentinel), log=tmp_path / "sentinel.log"))
        yield Watched(primary, replica, sentinel, stack), procs


def _knows_replica(port: int) -> Callable[[], bool]:
    """Whether the sentinel is connected to the replica and has its state (it would not
    promote one it has not heard from)."""
    def ready() -> bool:
        client = redis.Redis(port=port, socket_timeout=1, decode_responses=True)
        try:
            replicas = client.sentinel_slaves(SERVICE)
        finally:
            client.close()
        return any(r.get("flags") == "slave" and r.get("master-link-status") == "ok"
                   for r in replicas)
    return ready


def _head(saver: DurableSaver, thread_id: str) -> object:
    found = saver.get_tuple({"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}})
    assert found is not None
    return found.checkpoint["channel_values"]["value"]


def test_writes_go_on_after_the_primary_dies_and_nothing_acknowledged_is_lost(
        watched: tuple[Watched, Procs], namespace: tuple[str, str]) -> None:
    """A write-through saver on the Sentinel URL writes to the primary; the primary is
    SIGKILLed and the sentinel promotes the replica. Writes during the failover go on
    (Postgres alone, Redis bypassed); after it the saver writes to the new primary, every
    acknowledged checkpoint is in Postgres, and each thread reads back its newest one,
    from blocking and async callers."""
    servers, procs = watched
    schema, prefix = namespace
    acknowledged: dict[str, int] = {}  # each thread's newest acknowledged value
    count = {"a": 0, "b": 0}  # and how many puts were acknowledged
    with DurableSaver(servers.url, POSTGRES_URL, schema=schema, key_prefix=prefix,
                      breaker_cooldown=0.2) as saver:
        saver.setup()
        for step in range(5):
            for thread in ("a", "b"):
                put_value(saver, thread, step)
                acknowledged[thread] = step
                count[thread] += 1
        old = redis.Redis(port=servers.primary)
        assert any(True for _ in old.scan_iter(match=f"{prefix}*"))
        old.close()

        procs["primary"].kill()
        # the sentinel sees it down after 1 s and promotes the replica (quorum 1)
        new = redis.Redis(port=servers.replica)
        wait_until(lambda: new.info("replication")["role"] == "master", timeout=20)

        deadline = time.monotonic() + 20
        step = 5
        while time.monotonic() < deadline:  # until a write lands on the new primary
            for thread in ("a", "b"):
                put_value(saver, thread, step)  # Redis or not, write-through goes on
                acknowledged[thread] = step
                count[thread] += 1
            time.sleep(0.05)
            step += 1
            if any(True for _ in new.scan_iter(match=f"{prefix}*")) and step > 8:
                break
        assert any(True for _ in new.scan_iter(match=f"{prefix}*")), "never wrote to it"
        new.close()
        for thread, last in acknowledged.items():
            assert _head(saver, thread) == last
            found = asyncio.run(saver.aget_tuple(
                {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}))
            assert found is not None and found.checkpoint["channel_values"]["value"] == last
            assert cold_checkpoints(schema, thread) >= count[thread]


def test_doctor_reaches_the_primary_through_the_sentinel(
        watched: tuple[Watched, Procs], namespace: tuple[str, str]) -> None:
    """``langgraph-durable doctor --redis-url redis+sentinel://...`` asks the sentinel for
    the primary and checks it like any Redis."""
    servers, _ = watched
    result = cli_for(namespace)("doctor", "--redis-url", servers.url)
    line = next(line for line in result.stdout.splitlines() if servers.url in line)
    assert re.search(r"\b(Redis|Valkey) \d", line) and "✔" in line  # either server's brand


def test_the_sentinel_pool_makes_callers_wait_at_its_bound(
        watched: tuple[Watched, Procs], namespace: tuple[str, str]) -> None:
    """``redis_max_connections`` bounds the connections to the primary as with a plain URL:
    eight threads writing at once through a pool of two all succeed (they wait for a
    connection rather than fail) and the primary never sees more than two of the saver's."""
    servers, _ = watched
    schema, prefix = namespace
    primary = redis.Redis(port=servers.primary, decode_responses=True, client_name="control")
    seen: list[int] = []
    one_at_a_time = threading.Lock()  # the test's own client keeps one connection

    def saver_clients() -> int:
        with one_at_a_time:
            return sum(1 for c in primary.client_list() if "S" not in c["flags"]
                       and not c.get("name", "").startswith(("sentinel", "control")))

    url = f"{servers.url}?socket_timeout=2.5"  # read as redis-py reads a plain URL's query
    with DurableSaver(url, POSTGRES_URL, schema=schema, key_prefix=f"{prefix}-bound",
                      redis_max_connections=2) as saver:
        saver.setup()

        def write(n: int) -> None:
            for step in range(5):
                put_value(saver, f"bound-{n}", step)
                seen.append(saver_clients())

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(write, range(8)))
        assert all(_head(saver, f"bound-{n}") == 4 for n in range(8))
    primary.close()
    assert max(seen) <= 2


@pytest.mark.parametrize("write_mode", ["through", "behind"])
def test_a_primary_that_refuses_writes_without_replicas_is_an_unavailable_hot_tier(
        tmp_path: Path, namespace: tuple[str, str], write_mode: str) -> None:
    """A primary set with ``min-replicas-to-write 1`` and no replica in reach refuses
    writes (``NOREPLICAS``): the saver takes it as an unavailable hot tier, as it does a
    down one. Write-through goes on from Postgres; write-behind raises
    `TierUnavailableError` rather than acknowledge a write no replica holds."""
    schema, prefix = namespace
    port = free_port()
    args = redis_args(tmp_path, port, "--min-replicas-to-write", "1")
    with process(args, pings(port=port)), DurableSaver(
            f"redis://127.0.0.1:{port}/0", POSTGRES_URL, schema=schema,
            key_prefix=f"{prefix}-{write_mode}", write_mode=write_mode) as saver:
        saver.setup()
        if write_mode == "through":
            put_value(saver, "guarded", 1)
            assert _head(saver, "guarded") == 1
            assert cold_checkpoints(schema, "guarded") == 1
        else:
            with pytest.raises(TierUnavailableError, match="Redis"):
                put_value(saver, "guarded", 1)


@pytest.mark.parametrize("acks", [0, 1])
def test_replica_acks_keep_a_promoted_replica_from_serving_an_older_checkpoint(
        tmp_path: Path, namespace: tuple[str, str], acks: int) -> None:
    """A failover never serves what the promoted replica missed. Replication is cut, a
    write-through put is acknowledged, the primary dies, and the replica (which never saw
    that put) is promoted. Without ``redis_replica_acks`` the replica holds the thread's
    previous checkpoint, but it is another Redis process than the one the saver's data was
    checked in: a new process drops its copies before its first read and reads the
    acknowledged checkpoint from Postgres (`hot.check_redis`). With
    ``redis_replica_acks=1`` the put's intent reached no replica in time, so the put went to
    Postgres with a stale mark, applied before the read."""
    schema, prefix = namespace
    prefix, thread = f"{prefix}-acks{acks}", f"t-acks{acks}"
    link = Proxy(("127.0.0.1", free_port()))
    with ExitStack() as stack, primary_and_replica(tmp_path, stack, link) as (
            primary, replica, procs):
        stack.callback(link.cut)
        writer = stack.enter_context(DurableSaver(
            f"redis://127.0.0.1:{primary}/0", POSTGRES_URL, schema=schema, key_prefix=prefix,
            redis_replica_acks=acks, redis_replica_timeout=0.3))
        writer.setup()
        put_value(writer, thread, "before")
        source, follower = redis.Redis(port=primary), redis.Redis(port=replica)
        offset = source.info("replication")["master_repl_offset"]
        wait_until(lambda: follower.info("replication")["slave_repl_offset"] >= offset)
        link.cut()  # the replica sees nothing from here on
        put_value(writer, thread, "after")  # acknowledged
        procs["primary"].kill()
        follower.execute_command("REPLICAOF", "NO", "ONE")
        source.close()
        with DurableSaver(f"redis://127.0.0.1:{replica}/0", POSTGRES_URL, schema=schema,
                          key_prefix=prefix) as reader:
            assert cold_checkpoints(schema, thread) == 2  # Postgres has both, always
            assert _head(reader, thread) == "after"
        follower.close()


def test_write_behind_with_replica_acks_loses_nothing_acknowledged_in_a_failover(
        tmp_path: Path, namespace: tuple[str, str]) -> None:
    """Write-behind with ``redis_replica_acks=1``: a put is acknowledged only once its
    journal entry is on the replica. Replication is cut: the next put raises
    `TierUnavailableError` instead of acknowledging. The primary dies before any flush, the
    replica is promoted, and a saver on it flushes every acknowledged checkpoint to Postgres."""
    schema, prefix = namespace
    prefix, thread = f"{prefix}-behind", "t-behind"
    link = Proxy(("127.0.0.1", free_port()))
    with ExitStack() as stack, primary_and_replica(tmp_path, stack, link) as (
            primary, replica, procs):
        stack.callback(link.cut)
        writer = DurableSaver(f"redis://127.0.0.1:{primary}/0", POSTGRES_URL, schema=schema,
                              key_prefix=prefix, write_mode="behind", background_flush=False,
                              redis_replica_acks=1, redis_replica_timeout=0.3)
        writer.setup()
        put_value(writer, thread, "seed")  # a thread Redis holds: later puts are journaled
        writer.flush()
        for step in range(3):
            put_value(writer, thread, step)
        link.cut()
        with pytest.raises(TierUnavailableError):
            put_value(writer, thread, "unacknowledged")
        procs["primary"].kill()
        follower = redis.Redis(port=replica)
        follower.execute_command("REPLICAOF", "NO", "ONE")
        follower.close()
        assert cold_checkpoints(schema, thread) == 1  # only the seed was flushed
        with DurableSaver(f"redis://127.0.0.1:{replica}/0", POSTGRES_URL, schema=schema,
                          key_prefix=prefix, write_mode="behind") as survivor:
            survivor.flush()
            assert _head(survivor, thread) == 2
        assert cold_checkpoints(schema, thread) == 4
        writer.engine.close()  # its Redis is gone: nothing of its own left to flush


def test_a_sweep_claims_no_thread_that_no_replica_holds_the_claim_of(
        tmp_path: Path, namespace: tuple[str, str]) -> None:
    """A sweep claims each thread in Redis before it deletes any of it; with
    ``redis_replica_acks`` that claim must reach the replicas like a write's intent, or a
    failover would hand writers a primary without it. No replica acknowledges here: the
    sweep deletes nothing and says Redis is unavailable."""
    schema, prefix = namespace
    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"
    with process(redis_args(tmp_path, port), pings(port=port)):
        with DurableSaver(url, POSTGRES_URL, schema=schema, key_prefix=f"{prefix}-sweep") as writer:
            writer.setup()
            for value in range(3):
                put_value(writer, "swept", value)
        with DurableSaver(url, POSTGRES_URL, schema=schema, key_prefix=f"{prefix}-sweep",
                          redis_replica_acks=1, redis_replica_timeout=0.1) as sweeper, (
                pytest.raises(TierUnavailableError, match="Redis")):
            sweeper.sweep(Retention(keep_last=1))
        assert cold_checkpoints(schema, "swept") == 3
