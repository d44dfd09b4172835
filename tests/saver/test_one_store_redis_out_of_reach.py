"""The two tiers behave as one store while a process cannot reach Redis (its Redis reached
through a `Proxy` the test cuts): a write it sends through Postgres alone is seen by every
process within ``stale_poll_interval`` and extended instead of forked, write-behind fails
closed, and its stale marks are applied again to a Redis restored from an older state and
when one commits after a newer one. Separate saver objects stand in for separate
processes."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import psycopg
import pytest
import redis

from langgraph_durable import DurableSaver, ThreadConflictError, TierUnavailableError
from tests.support.checkpoints import (
    config_of,
    put_after,
    put_line,
    put_value,
    restore_hot,
    snapshot_hot,
    value_of,
)
from tests.support.faults import Proxy
from tests.support.servers import POSTGRES_URL, REDIS_URL, redis_address


def _through_proxy(proxy: Proxy, namespace: tuple[str, str]) -> DurableSaver:
    """A set-up saver (a process of its own) that reaches Redis through ``proxy``, so the
    test can cut it off; its breaker stays open once tripped."""
    schema, prefix = namespace
    saver = DurableSaver(f"redis://127.0.0.1:{proxy.port}/0", POSTGRES_URL, key_prefix=prefix,
                         schema=schema, breaker_cooldown=60, pool_timeout=2)
    saver.setup()
    return saver


@pytest.mark.parametrize("write_mode", ["through"])
def test_write_that_bypassed_redis_is_seen_by_every_process(
    namespace: tuple[str, str], make_saver: Any
) -> None:
    """A process that cannot reach Redis writes Postgres; a process that can, and one
    started later, see that write within stale_poll_interval, and the next turn extends
    it instead of forking the thread."""
    proxy = Proxy(redis_address())
    proxy.start()
    try:
        cut_off = _through_proxy(proxy, namespace)
        reader = make_saver(write_mode="through", stale_poll_interval=0.2)
        thread = f"t-{uuid.uuid4()}"
        (first,) = put_line(cut_off, thread, ["v1"])
        assert value_of(reader, config_of(thread)) == "v1"
        proxy.cut()
        second = put_after(cut_off, first, "v2")  # Redis unreachable: Postgres alone
        time.sleep(0.3)
        assert value_of(reader, config_of(thread)) == "v2"
        assert value_of(make_saver(write_mode="through"), config_of(thread)) == "v2"
        third = put_after(reader, reader.get_tuple(config_of(thread)).config, "v3")
        assert value_of(reader, config_of(thread)) == "v3"
        tup = reader.get_tuple(third)
        assert tup is not None and tup.parent_config is not None
        assert tup.parent_config["configurable"]["checkpoint_id"] == (
            second["configurable"]["checkpoint_id"])
        cut_off.close()
    finally:
        proxy.cut()


def test_write_behind_with_redis_unreachable_fails_closed_and_keeps_one_line(
    namespace: tuple[str, str]
) -> None:
    """Write-behind, with an unflushed turn in Redis and Redis unreachable for a moment:
    reads and writes raise TierUnavailableError(tier="hot") instead of serving Postgres's
    older state or writing on top of it; once Redis answers, the thread goes on from the
    unflushed turn and its history is one line."""
    schema, prefix = namespace
    proxy = Proxy(redis_address())
    proxy.start()
    try:
        saver = DurableSaver(f"redis://127.0.0.1:{proxy.port}/0", POSTGRES_URL,
                             key_prefix=prefix, schema=schema, write_mode="behind",
                             breaker_cooldown=0.1, background_flush=False, pool_timeout=2)
        saver.setup()
        thread = f"t-{uuid.uuid4()}"
        _, second = put_line(saver, thread, ["v1", "v2"])
        proxy.cut()
        with pytest.raises(TierUnavailableError) as read_error:
            saver.get_tuple(config_of(thread))
        assert read_error.value.tier == "hot"
        with pytest.raises(TierUnavailableError) as write_error:
            put_after(saver, second, "v3-during")
        assert write_error.value.tier == "hot"
        proxy.restore()
        time.sleep(0.15)
        latest = saver.get_tuple(config_of(thread))
        assert latest is not None and latest.checkpoint["channel_values"]["value"] == "v2"
        put_after(saver, latest.config, "v3")
        saver.flush()
        history = [t.checkpoint["channel_values"]["value"]
                   for t in saver.list(config_of(thread))]
        assert history == ["v3", "v2", "v1"]
        saver.close()
    finally:
        proxy.cut()


@pytest.mark.parametrize("write_mode", ["through"])
def test_marks_are_applied_again_to_a_redis_restored_from_an_older_state(
    namespace: tuple[str, str], make_saver: Any
) -> None:
    """A process wrote v2 while it could not reach Redis; the mark was applied (the hot copy
    dropped); then Redis comes back from a snapshot taken before: it holds v1 and the older
    applied-mark, so the mark is applied again and no process is served v1."""
    _, prefix = namespace
    proxy = Proxy(redis_address())
    proxy.start()
    client = redis.Redis.from_url(REDIS_URL)
    try:
        cut_off = _through_proxy(proxy, namespace)
        thread = f"t-{uuid.uuid4()}"
        (first,) = put_line(cut_off, thread, ["v1"])
        snapshot = snapshot_hot(client, prefix, thread)
        proxy.cut()
        put_after(cut_off, first, "v2")
        assert value_of(make_saver(write_mode="through"), config_of(thread)) == "v2"
        restore_hot(client, prefix, thread, snapshot)  # Redis restored from the snapshot
        assert value_of(make_saver(write_mode="through"), config_of(thread)) == "v2"
        cut_off.close()
    finally:
        client.close()
        proxy.cut()


@pytest.mark.parametrize("write_mode", ["through"])
def test_a_mark_committed_after_a_newer_one_is_still_applied(
    namespace: tuple[str, str], make_saver: Any
) -> None:
    """Two writes bypass Redis at once. The one on thread X takes its stale mark's number
    first but commits last (here its transaction waits for a row lock after the mark, as it
    would for a slow round trip); meanwhile another process applies the marks it sees,
    the newer mark on Y, and records that number as applied. X's mark, committed below the
    number applied, must still be applied: the other process must not serve X's older hot
    copy past ``stale_poll_interval`` (found by the real-process checker,
    `tests/support/checker`)."""
    schema, _ = namespace
    proxy = Proxy(redis_address())
    proxy.start()
    try:
        cut_off = _through_proxy(proxy, namespace)
        reader = make_saver(write_mode="through", stale_poll_interval=0.2)
        x, y = f"x-{uuid.uuid4()}", f"y-{uuid.uuid4()}"
        (x1,) = put_line(cut_off, x, ["x1"])
        put_after(cut_off, {"configurable": {"thread_id": x, "checkpoint_ns": "sub"}},
                  "sub")  # a second namespace: its head row is what X's commit will wait for
        (y1,) = put_line(cut_off, y, ["y1"])
        assert value_of(reader, config_of(x)) == "x1" and value_of(reader, config_of(y)) == "y1"
        proxy.cut()
        with psycopg.connect(POSTGRES_URL) as blocker:
            blocker.execute(f'SELECT 1 FROM "{schema}".lgd_heads WHERE thread_id = %s AND '
                            "checkpoint_ns = 'sub' FOR UPDATE", (x,))
            done: list[Any] = []
            writer = threading.Thread(target=lambda: done.append(put_after(cut_off, x1, "x2")))
            writer.start()  # marks X, then waits to give X's namespaces newer versions
            deadline = time.monotonic() + 10
            while not _waiting_for_lock(schema) and time.monotonic() < deadline:
                time.sleep(0.01)
            put_after(cut_off, y1, "y2")  # a newer mark, committed first
            time.sleep(0.25)
            assert value_of(reader, config_of(y)) == "y2"  # the reader applied Y's mark
            blocker.rollback()  # X's write commits, its mark numbered below Y's
        writer.join(timeout=10)
        assert done, "the write on X did not complete"
        time.sleep(0.5)
        assert value_of(reader, config_of(x)) == "x2"
        cut_off.close()
    finally:
        proxy.cut()


def _waiting_for_lock(schema: str) -> bool:
    """Whether a session waits for a row lock (the write held back by the test)."""
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = "
                           "'Lock' AND query LIKE %s", (f'%"{schema}".lgd_heads%',)).fetchone()
    return bool(row and row[0])


def _deadlocks() -> int:
    """The deadlocks Postgres broke in the test database so far (its statistics are sent
    within a second)."""
    time.sleep(1.1)
    with psycopg.connect(POSTGRES_URL) as conn:
        row = conn.execute("SELECT deadlocks FROM pg_stat_database "
                           "WHERE datname = current_database()").fetchone()
    assert row is not None
    return int(row[0])


def test_writes_that_bypass_redis_and_prunes_of_their_thread_do_not_deadlock(
    namespace: tuple[str, str]
) -> None:
    """With Redis out of reach, puts that extend a thread (each locking the thread's head
    rows first) and prunes of the same thread (each holding the heads table against writes,
    then those rows) run at once: a put used to hold a row the prune waited for while it
    waited for the prune's table lock (Postgres's "deadlock detected", a second lost each
    time, then TierUnavailableError when the retries ran out)."""
    proxy = Proxy(redis_address())
    proxy.start()
    writers = [_through_proxy(proxy, namespace) for _ in range(2)]
    pruner = _through_proxy(proxy, namespace)
    try:
        thread = f"t-{uuid.uuid4()}"
        put_value(writers[0], thread, "v0")
        proxy.cut()
        failures: list[BaseException] = []
        done = threading.Event()

        def write(saver: DurableSaver) -> None:
            for n in range(30):
                try:
                    latest = saver.get_tuple(config_of(thread))
                    assert latest is not None
                    put_after(saver, latest.config, f"v{n}")
                except ThreadConflictError:
                    pass  # the other writer extended it first
                except Exception as exc:  # every other failure is the test's
                    failures.append(exc)

        def prune() -> None:
            while not done.is_set():
                try:
                    pruner.prune([thread])
                except Exception as exc:
                    failures.append(exc)

        deadlocks = _deadlocks()
        workers = [threading.Thread(target=write, args=(saver,)) for saver in writers]
        pruning = threading.Thread(target=prune)
        pruning.start()
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        done.set()
        pruning.join()
        assert failures == []
        assert _deadlocks() == deadlocks, "Postgres broke deadlocks (a second lost each)"
    finally:
        for saver in (*writers, pruner):
            saver.close()
        proxy.cut()


def test_writes_to_namespaces_of_one_thread_that_bypass_redis_do_not_deadlock(
    namespace: tuple[str, str]
) -> None:
    """A subgraph's parallel tasks write pending writes to several namespaces of one
    thread at once. With Redis out of reach, each such write also marks the thread and
    gives every namespace of it a new version, in the same transaction: two of them used
    to hold one head row each and wait for the other's (Postgres's "deadlock detected",
    which reached the caller as TierUnavailableError)."""
    proxy = Proxy(redis_address())
    proxy.start()
    savers = [_through_proxy(proxy, namespace) for _ in range(4)]
    try:
        thread = f"t-{uuid.uuid4()}"
        configs = [put_value(saver, thread, "v", ns=f"worker:{i}")
                   for i, saver in enumerate(savers)]
        proxy.cut()
        failures: list[BaseException] = []
        start = threading.Barrier(len(savers))

        def task(saver: DurableSaver, config: dict[str, Any]) -> None:
            start.wait()
            for n in range(40):
                try:
                    saver.put_writes(config, [("value", n)], task_id=f"task-{n}")
                except Exception as exc:  # every failure is the test's
                    failures.append(exc)

        workers = [threading.Thread(target=task, args=pair)
                   for pair in zip(savers, configs, strict=True)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        assert failures == []
        with psycopg.connect(POSTGRES_URL) as conn:
            written = conn.execute(
                f'SELECT count(*) FROM "{namespace[0]}".lgd_writes WHERE thread_id = %s',
                (thread,)).fetchone()
        assert written == (len(savers) * 40,)
    finally:
        for saver in savers:
            saver.close()
        proxy.cut()
