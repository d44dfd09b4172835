"""A tier that is frozen or unreachable costs each call at most ``tier_timeout`` (3 s by
default) on top of its work: ``setup()``, an invoke of a new and of an existing thread, in
both write modes, and ``langgraph-durable doctor``. A frozen Redis is a private
``redis-server`` stopped with SIGSTOP; a frozen Postgres is a proxy that keeps its
connections and accepts new ones but forwards nothing; an unreachable one refuses them.
What each call then returns or raises is the failure model's (docs/failure-model.md)."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from langgraph_durable import DurableSaver, TierUnavailableError
from langgraph_durable._core.scripts.registry import SCRIPTS
from langgraph_durable._core.writes import delete_threads
from tests.support.checkpoints import config_of, put_after, put_value, value_of
from tests.support.faults import PrivateRedis, Proxy, cli, lose_reply, private_redis
from tests.support.graphs import chat_graph
from tests.support.servers import (
    POSTGRES_DATABASE,
    POSTGRES_URL,
    REDIS_URL,
    postgres_address,
    redis_address,
)

BOUND = 3.0  # the default tier_timeout
MARGIN = 2.0  # the work itself, on a shared 2-core machine


@pytest.fixture
def proxy() -> Iterator[Proxy]:
    """A proxy in front of the shared Postgres, the test's to freeze or cut."""
    p = Proxy(postgres_address())
    p.start()
    yield p
    p.thaw()
    p.cut()


def _timed(call: Callable[[], Any]) -> tuple[float, Any]:
    """How long ``call`` took, and what it returned or raised."""
    started = time.monotonic()
    try:
        outcome: Any = call()
    except TierUnavailableError as exc:
        outcome = exc
    return time.monotonic() - started, outcome


def _hot_thread(namespace: tuple[str, str], mode: str, redis_url: str, postgres_url: str
                ) -> tuple[DurableSaver, Any, dict[str, Any]]:
    """A set-up saver (defaults but the background flusher) and a thread it ran, flushed."""
    schema, prefix = namespace
    saver = DurableSaver(redis_url, postgres_url, schema=schema, key_prefix=prefix,
                         write_mode=mode, background_flush=False)  # type: ignore[arg-type]
    saver.setup()
    graph = chat_graph(saver)
    config = {"configurable": {"thread_id": f"existing-{uuid.uuid4()}"}}
    graph.invoke({"messages": [("user", "before")]}, config)
    saver.flush()
    return saver, graph, config


def _fresh_calls(namespace: tuple[str, str], mode: str, redis_url: str, postgres_url: str,
                 existing: dict[str, Any]) -> dict[str, tuple[float, Any]]:
    """A new saver's ``setup()``, then invokes of a new and of the existing thread: how
    long each took and what it gave."""
    schema, prefix = namespace
    saver = DurableSaver(redis_url, postgres_url, schema=schema, key_prefix=prefix,
                         write_mode=mode, background_flush=False)  # type: ignore[arg-type]
    graph = chat_graph(saver)
    new = {"configurable": {"thread_id": f"new-{uuid.uuid4()}"}}
    try:
        return {
            "setup": _timed(saver.setup),
            "new": _timed(lambda: graph.invoke({"messages": [("user", "hi")]}, new)),
            "existing": _timed(lambda: graph.invoke({"messages": [("user", "on")]}, existing)),
        }
    finally:
        saver.engine.close()  # not saver.close(): its drain would wait for the frozen tier


def _within(times: dict[str, tuple[float, Any]], bound: float) -> None:
    slow = {name: round(took, 1) for name, (took, _) in times.items() if took > bound}
    assert not slow, f"over {bound} s: {slow}"


def _unavailable(outcome: Any, tier: str) -> bool:
    return isinstance(outcome, TierUnavailableError) and outcome.tier == tier


def test_a_frozen_redis_costs_each_call_at_most_the_tier_timeout(
    namespace: tuple[str, str], write_mode: str, tmp_path: Path
) -> None:
    """Redis stops answering (SIGSTOP) with the defaults: the running saver's next invoke,
    a new saver's setup(), and its invokes of a new and of an existing thread each finish
    within 3 s plus margin (before: 15 s, 90 s). Write-through runs them on Postgres;
    write-behind refuses them with TierUnavailableError(tier="hot")."""
    with private_redis(tmp_path) as server:
        running, graph, existing = _hot_thread(namespace, write_mode, server.url, POSTGRES_URL)
        server.freeze()
        try:
            times = {"mid-run": _timed(
                lambda: graph.invoke({"messages": [("user", "during")]}, existing))}
            times |= _fresh_calls(namespace, write_mode, server.url, POSTGRES_URL, existing)
        finally:
            server.thaw()
            running.close()
    _within(times, BOUND + MARGIN)
    assert times["setup"][1] is None
    for name in ("mid-run", "new", "existing"):
        outcome = times[name][1]
        if write_mode == "through":
            assert isinstance(outcome, dict) and outcome["messages"][-1].content.startswith(
                "finish"), (name, outcome)
        else:
            assert _unavailable(outcome, "hot"), (name, outcome)


@pytest.mark.parametrize("write_mode", ["behind"])
def test_changes_to_whole_threads_after_redis_froze_fail_at_once(
    namespace: tuple[str, str], write_mode: str, tmp_path: Path
) -> None:
    """Written behind, a delete, a copy, a prune and `flush()` drain the journal, which
    only Redis holds. The first call to meet a frozen Redis waits tier_timeout; the calls
    after it raise TierUnavailableError(tier="hot") at once, as reads and writes do (before:
    each drain asked Redis again and waited tier_timeout)."""
    with private_redis(tmp_path) as server:
        saver, _, existing = _hot_thread(namespace, write_mode, server.url, POSTGRES_URL)
        thread = existing["configurable"]["thread_id"]
        server.freeze()
        try:
            times = {"first": _timed(lambda: saver.delete_thread(thread))}
            times |= {
                "delete": _timed(lambda: saver.delete_thread(thread)),
                "copy": _timed(lambda: saver.copy_thread(thread, f"copy-{uuid.uuid4()}")),
                "prune": _timed(lambda: saver.prune([thread])),
                "flush": _timed(lambda: saver.flush()),
            }
        finally:
            server.thaw()
        try:  # Redis answers again: a call starts the breaker's probe, which closes it
            deadline = time.monotonic() + BOUND + MARGIN
            while _unavailable(_timed(lambda: saver.delete_thread(thread))[1], "hot"):
                assert time.monotonic() < deadline, "the breaker stayed open"
                time.sleep(0.1)
        finally:
            saver.close()
    assert all(_unavailable(outcome, "hot") for _, outcome in times.values()), times
    _within({"first": times.pop("first")}, BOUND + MARGIN)
    _within(times, 0.5)


def test_a_frozen_postgres_costs_each_call_at_most_the_tier_timeout(
    namespace: tuple[str, str], write_mode: str, proxy: Proxy
) -> None:
    """Postgres stops answering (its connections stay open, new ones are accepted, nothing
    is forwarded): setup() and every invoke that needs Postgres fail with
    TierUnavailableError(tier="cold") within 3 s plus margin, a write-through one mid-run
    too (before: it waited forever); a write-behind invoke of a thread Redis holds needs
    only Redis and runs at full speed."""
    url = proxy.url(POSTGRES_DATABASE)
    running, graph, existing = _hot_thread(namespace, write_mode, REDIS_URL, url)
    proxy.freeze()
    try:
        times = {"mid-run": _timed(
            lambda: graph.invoke({"messages": [("user", "during")]}, existing))}
        times |= _fresh_calls(namespace, write_mode, REDIS_URL, url, existing)
    finally:
        proxy.thaw()
        running.close()
    _within(times, BOUND + MARGIN)
    assert _unavailable(times["setup"][1], "cold")
    assert _unavailable(times["new"][1], "cold")
    for name in ("mid-run", "existing"):
        took, outcome = times[name]
        if write_mode == "through":
            assert _unavailable(outcome, "cold"), (name, outcome)
        else:
            assert isinstance(outcome, dict), (name, outcome)
            assert took < 1.0, f"{name} needs only Redis, took {took:.1f} s"


@pytest.mark.parametrize("write_mode", ["through"])
def test_a_reply_a_frozen_redis_owes_costs_the_next_call_one_tier_timeout(
    namespace: tuple[str, str], write_mode: str
) -> None:
    """Writing through, a put sends its Redis update after the commit without waiting for
    the reply, and the connection owes it; Redis stops answering before it answers. The
    next call reads that reply first: it fails over to Postgres after one tier_timeout
    (before: the broken connection was retried, and the retry's connect waited a second
    tier_timeout)."""
    schema, prefix = namespace
    proxy = Proxy(redis_address())
    proxy.start()
    saver = DurableSaver(f"redis://127.0.0.1:{proxy.port}/0", POSTGRES_URL, schema=schema,
                         key_prefix=prefix, write_mode=write_mode, tier_timeout=2.0,
                         background_flush=False)  # type: ignore[arg-type]
    try:
        saver.setup()
        thread = f"owed-{uuid.uuid4()}"
        first = put_value(saver, thread, "v1")
        proxy.delay = 0.3  # the update below is held this long on its way to Redis...
        put_after(saver, first, "v2")
        proxy.freeze()  # ...and Redis stops answering before it gets there
        took, value = _timed(lambda: value_of(saver, config_of(thread)))
    finally:
        proxy.thaw()
        proxy.delay = 0.0
        saver.close()
        proxy.cut()
    assert value == "v2"
    assert took < 2.0 + 1.0, f"the read took {took:.1f} s with tier_timeout 2 s"


def test_a_call_waiting_for_a_connection_a_frozen_postgres_holds_fails_when_it_is_freed(
    namespace: tuple[str, str], proxy: Proxy
) -> None:
    """One Postgres connection, Postgres frozen, two deletes at once: one waits for the
    connection the other's statement holds. When the watchdog frees it after tier_timeout,
    the waiting delete fails at once (before: it ran its statement on that connection and
    waited tier_timeout again)."""
    schema, prefix = namespace
    saver = DurableSaver(REDIS_URL, proxy.url(POSTGRES_DATABASE), schema=schema,
                         key_prefix=prefix, postgres_max_connections=1, tier_timeout=2.0,
                         background_flush=False)
    saver.setup()
    times: dict[str, tuple[float, Any]] = {}

    def delete(name: str) -> None:
        times[name] = _timed(lambda: saver.delete_thread(f"{name}-{uuid.uuid4()}"))

    proxy.freeze()
    try:
        calls = [threading.Thread(target=delete, args=(name,)) for name in ("a", "b")]
        for call in calls:
            call.start()
        for call in calls:
            call.join()
    finally:
        proxy.thaw()
        saver.close()
    assert all(_unavailable(outcome, "cold") for _, outcome in times.values()), times
    _within(times, 2.0 + 1.5)


@pytest.mark.parametrize("write_mode", ["behind"])
def test_a_drain_cut_short_by_a_frozen_postgres_holds_up_no_later_call(
    namespace: tuple[str, str], write_mode: str, proxy: Proxy
) -> None:
    """Written behind, a delete drains the thread's journal entries first. With Postgres
    frozen, the drain's commit fails within tier_timeout; once Postgres answers, the next
    delete takes those entries over at once (before: they waited with the failed drain
    until they sat idle for reclaim_after, 10 s). While Postgres stays frozen, a drain that
    waits for entries another flusher holds asks Postgres itself, and fails as soon."""
    schema, prefix = namespace
    saver = DurableSaver(REDIS_URL, proxy.url(POSTGRES_DATABASE), schema=schema,
                         key_prefix=prefix, write_mode=write_mode, breaker_cooldown=0.2,
                         background_flush=False)  # type: ignore[arg-type]
    saver.setup()
    thread = f"drained-{uuid.uuid4()}"
    try:
        put_value(saver, thread, "v1")
        proxy.freeze()
        try:
            first = _timed(lambda: saver.delete_thread(thread))
            time.sleep(0.3)  # past breaker_cooldown: Postgres is asked again
            again = _timed(lambda: saver.delete_thread(thread))
        finally:
            proxy.thaw()
        time.sleep(0.3)
        after = _timed(lambda: saver.delete_thread(thread))
        assert value_of(saver, config_of(thread)) is None
    finally:
        saver.close()
    _within({"first": first, "again": again}, BOUND + MARGIN)
    assert _unavailable(first[1], "cold") and _unavailable(again[1], "cold")
    assert after[1] is None and after[0] < 3.0, f"the delete took {after[0]:.1f} s"


@pytest.mark.parametrize("write_mode", ["behind"])
def test_a_drain_whose_read_redis_ran_unheard_holds_up_no_later_drain(
    namespace: tuple[str, str], write_mode: str
) -> None:
    """Written behind, a delete's drain reads a batch whose reply never reaches it (Redis
    froze, and ran the read once it thawed): Redis hands the entries to a drain that is
    gone. The saver's next drain releases them first, and takes a moment (before: it
    waited until they sat idle for reclaim_after, 10 s)."""
    schema, prefix = namespace
    saver = DurableSaver(REDIS_URL, POSTGRES_URL, schema=schema, key_prefix=prefix,
                         write_mode=write_mode, breaker_cooldown=0.2,
                         background_flush=False)  # type: ignore[arg-type]
    saver.setup()
    thread = f"unheard-{uuid.uuid4()}"
    try:
        put_after(saver, put_value(saver, thread, "v1"), "v2")  # v2 waits in the journal
        ctx = saver.engine.context
        with pytest.raises(TierUnavailableError):
            saver.engine.run(lose_reply(
                delete_threads(ctx, [thread]),
                lambda request: getattr(request, "script", None) is SCRIPTS["flush_read"],
                tier="hot"))
        time.sleep(0.3)  # past breaker_cooldown: the next call's probe finds Redis back
        took, outcome = _timed(lambda: saver.delete_thread(thread))
        assert outcome is None, outcome
        assert value_of(saver, config_of(thread)) is None
    finally:
        saver.close()
    assert took < 2.0, f"the delete took {took:.1f} s"


def test_a_batch_whose_flusher_lost_postgres_holds_up_no_drain_of_another_process(
    namespace: tuple[str, str], proxy: Proxy
) -> None:
    """Written behind, the flusher of a saver whose Postgres link froze takes a batch and
    fails to commit it within tier_timeout; it releases the batch, so another process's
    delete of the thread, which must drain it first, takes it over at once (before: the
    batch stayed with the failing flusher until it sat idle for reclaim_after, 10 s)."""
    schema, prefix = namespace
    cut_off = DurableSaver(REDIS_URL, proxy.url(POSTGRES_DATABASE), schema=schema,
                           key_prefix=prefix, write_mode="behind", tier_timeout=1.0,
                           flush_interval=0.05)
    other = DurableSaver(REDIS_URL, POSTGRES_URL, schema=schema, key_prefix=prefix,
                         write_mode="behind", background_flush=False)
    other.setup()
    thread = f"held-{uuid.uuid4()}"
    try:
        put_value(cut_off, thread, "v1")  # a new thread's root goes through Postgres
        cut_off.flush()
        proxy.freeze()
        try:
            put_value(cut_off, thread, "v2")  # acknowledged by Redis; its flusher takes it
            time.sleep(0.2)
            took, outcome = _timed(lambda: other.delete_thread(thread))
        finally:
            proxy.thaw()
        assert outcome is None, outcome
        assert value_of(other, config_of(thread)) is None
    finally:
        cut_off.close()
        other.close()
    assert took < 1.0 + MARGIN, f"the delete took {took:.1f} s"


@pytest.mark.parametrize("write_mode", ["behind"])
def test_calls_that_need_only_redis_never_wait_for_an_unreachable_postgres(
    namespace: tuple[str, str], write_mode: str, proxy: Proxy
) -> None:
    """Postgres refuses connections, Redis is fine: write-behind invokes of a hot thread,
    one after each stale-marks poll fell due, each take well under a second (before: the
    poll ran first and waited twice pool_timeout, 60 s with the defaults)."""
    running, graph, existing = _hot_thread(namespace, write_mode, REDIS_URL,
                                           proxy.url(POSTGRES_DATABASE))
    proxy.cut()
    try:
        for turn in range(3):
            time.sleep(1.1)  # past stale_poll_interval: a poll is due
            took, outcome = _timed(
                lambda: graph.invoke({"messages": [("user", "again")]}, existing))
            assert isinstance(outcome, dict), outcome
            assert took < 1.0, f"turn {turn} took {took:.1f} s"
    finally:
        proxy.restore()
        running.close()


def test_a_bound_the_user_sets_holds_for_async_calls(
    namespace: tuple[str, str], tmp_path: Path
) -> None:
    """tier_timeout=1: with Redis frozen, asetup() and ainvoke() of a new and of an
    existing thread, each in its own event loop (fresh clients every time), finish within
    1 s plus margin and run on Postgres (write-through)."""
    schema, prefix = namespace
    with private_redis(tmp_path) as server:
        saver = DurableSaver(server.url, POSTGRES_URL, schema=schema, key_prefix=prefix,
                             tier_timeout=1.0)
        graph = chat_graph(saver)
        existing = {"configurable": {"thread_id": f"existing-{uuid.uuid4()}"}}
        asyncio.run(saver.asetup())
        asyncio.run(graph.ainvoke({"messages": [("user", "before")]}, existing))
        server.freeze()
        try:
            times = {"asetup": _timed(lambda: asyncio.run(saver.asetup()))}
            for name, config in (("new", {"configurable": {"thread_id": f"n-{uuid.uuid4()}"}}),
                                 ("existing", existing)):
                times[name] = _timed(lambda config=config: asyncio.run(  # type: ignore[misc]
                    graph.ainvoke({"messages": [("user", "hi")]}, config)))
        finally:
            server.thaw()
            saver.close()
    _within(times, 1.0 + MARGIN)
    assert all(isinstance(out, dict) for name, (_, out) in times.items() if name != "asetup")


def test_a_large_checkpoint_sent_to_a_frozen_redis_costs_each_async_call_the_bound(
    namespace: tuple[str, str], write_mode: str, tmp_path: Path
) -> None:
    """Redis frozen while a thread's state grows by 8 MB a turn: what Redis does not read
    stays in the connection's buffer, and the invoke that sent it and each one after it
    in the same event loop (the same connections) finish within tier_timeout (1 s) plus
    margin: written through, on Postgres; written behind, refused."""
    schema, prefix = namespace

    async def turns(server: PrivateRedis) -> list[tuple[float, Any]]:
        saver = DurableSaver(server.url, POSTGRES_URL, schema=schema, key_prefix=prefix,
                             write_mode=write_mode, tier_timeout=1.0,  # type: ignore[arg-type]
                             background_flush=False)
        await saver.asetup()
        graph = chat_graph(saver)
        config = {"configurable": {"thread_id": f"large-{uuid.uuid4()}"}}
        await graph.ainvoke({"messages": [("user", "before")]}, config)
        server.freeze()
        took = []
        try:
            for turn in range(3):
                started = time.monotonic()
                try:
                    out: Any = await graph.ainvoke(
                        {"messages": [("user", f"{turn}" * 8_000_000)]}, config)
                except TierUnavailableError as exc:
                    out = exc
                took.append((time.monotonic() - started, out))
        finally:
            server.thaw()
            saver.engine.close()
        return took

    with private_redis(tmp_path) as server:
        took = asyncio.run(turns(server))
    assert [round(seconds, 1) for seconds, _ in took if seconds > 1.0 + MARGIN] == []
    for _, out in took:
        if write_mode == "through":
            assert isinstance(out, dict) and out["messages"][-1].content.startswith("finish")
        else:
            assert _unavailable(out, "hot"), out


@pytest.mark.parametrize("frozen", ["redis", "postgres"])
def test_doctor_reports_a_frozen_tier_within_the_tier_timeout(
    namespace: tuple[str, str], frozen: str, proxy: Proxy, tmp_path: Path
) -> None:
    """`langgraph-durable doctor` with one tier frozen says which one and exits 3 within
    3 s plus margin (before: 102 s for a frozen Redis)."""
    schema, prefix = namespace
    server = PrivateRedis(tmp_path)
    server.start()
    env = {"LGD_REDIS_URL": server.url, "LGD_POSTGRES_URL": proxy.url(POSTGRES_DATABASE),
           "LGD_SCHEMA": schema, "LGD_KEY_PREFIX": prefix}
    (server.freeze if frozen == "redis" else proxy.freeze)()
    try:
        took, (code, output) = _timed(lambda: cli(["doctor"], env))
    finally:
        server.thaw()
        server.kill()
    assert code == 3, output
    assert took < BOUND + MARGIN, f"doctor took {took:.1f} s"
    failed = [line for line in output.splitlines() if frozen in line.lower()]
    assert failed, output


def test_a_call_waiting_for_another_saver_to_check_a_restarted_redis_waits_at_most_the_bound(
    namespace: tuple[str, str], proxy: Proxy, tmp_path: Path
) -> None:
    """Redis restarts (a new process, whose data is checked against Postgres before it is
    used) while Postgres is frozen, written behind with entries to flush: one saver takes
    the check and fails it within its bound; a call of another saver that waits for that
    check gives up when it fails or after tier_timeout, instead of running one of its own
    after it, the third saver's after both (before: 2.0, 3.9 and 5.8 s with tier_timeout
    2 s; the real-process checker: two calls of 16.4 s, bound 9 s, in a Postgres freeze
    just after a Redis restart)."""
    schema, prefix = namespace
    with private_redis(tmp_path, appendonly="always") as server:
        savers = [DurableSaver(server.url, proxy.url(POSTGRES_DATABASE), schema=schema,
                               key_prefix=prefix, write_mode="behind", tier_timeout=2.0,
                               background_flush=False) for _ in range(3)]
        try:
            savers[0].setup()
            threads = [put_value(saver, f"check-{uuid.uuid4()}", "v1") for saver in savers]
            server.stop()
            server.start()  # the same data (AOF), a new Redis process
            proxy.freeze()
            took: dict[int, tuple[float, Any]] = {}

            def read(index: int) -> None:
                took[index] = _timed(lambda: value_of(savers[index], threads[index]))

            callers = [threading.Thread(target=read, args=(index,)) for index in range(3)]
            for caller in callers:
                caller.start()
                time.sleep(0.2)  # the first takes the check; the others wait for it
            for caller in callers:
                caller.join(30)
        finally:
            proxy.thaw()
            for saver in savers:
                saver.engine.close()
    assert len(took) == 3
    _within({str(index): outcome for index, outcome in took.items()}, 2.0 + MARGIN)
    assert all(_unavailable(outcome, "hot") for _, outcome in took.values()), took
