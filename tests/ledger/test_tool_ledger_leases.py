"""The tool ledger's leases in one process: a call that meets the same call still running
(in another thread or worker) waits for it or says it is in progress, eight concurrent
callers run it once, a cancelled caller leaves it running or ``started``, an expired lease
of another host or a dead owner on this host is taken over, and heartbeats keep a long
call alive."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from typing import Any

import pytest

from langgraph_durable import DurableSaver, ToolCallInProgressError, durable_tool
from langgraph_durable._tiers.host import owner_gone, process_owner
from tests.support.tool_calls import echo_tool, new_thread, sql, thread_config, tool_call

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning",
                                        "ignore:.*create_react_agent.*")


def test_live_call_elsewhere_is_waited_for_or_reported_in_progress(saver: DurableSaver) -> None:
    """While a call runs, the same key from another worker waits and then replays its
    result — or, past its wait bound, raises `ToolCallInProgressError`."""
    release, started = threading.Event(), threading.Event()
    calls: list[int] = []

    @durable_tool(saver=saver, lease=2.0)
    def slow(x: int) -> str:
        """Blocks until released."""
        calls.append(x)
        started.set()
        release.wait(10)
        return "done"

    impatient = durable_tool(slow.inner, saver=saver, wait=0.2)
    patient = durable_tool(slow.inner, saver=saver, wait=10.0)
    thread, results = new_thread(), {}
    runner = threading.Thread(target=lambda: results.update(
        first=slow.invoke(tool_call("slow", {"x": 1}), thread_config(thread))))
    waiter = threading.Thread(target=lambda: results.update(
        second=patient.invoke(tool_call("slow", {"x": 1}), thread_config(thread))))
    runner.start()
    assert started.wait(10)
    waiter.start()
    with pytest.raises(ToolCallInProgressError):
        impatient.invoke(tool_call("slow", {"x": 1}), thread_config(thread))
    release.set()
    runner.join(10)
    waiter.join(10)
    assert results["first"].content == results["second"].content == "done"
    assert calls == [1]


def test_concurrent_calls_of_one_key_in_one_process_run_it_once(saver: DurableSaver) -> None:
    """Eight threads make the same call at the same moment: one runs it, the others wait
    for it (never taking the live call for a dead one) and return its result."""
    calls: list[int] = []
    barrier = threading.Barrier(8)

    @durable_tool(saver=saver, idempotent=True, wait=10.0)
    def once(x: int) -> str:
        """Slow enough for every caller to find it running."""
        calls.append(x)
        time.sleep(0.3)
        return "once"

    thread, results = new_thread(), []

    def caller() -> None:
        barrier.wait()
        results.append(once.invoke(tool_call("once", {"x": 1}), thread_config(thread)).content)

    workers = [threading.Thread(target=caller) for _ in range(8)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(20)
    assert results == ["once"] * 8 and calls == [1]


async def test_cancelled_call_is_not_an_outcome(saver: DurableSaver) -> None:
    """A cancelled call writes nothing (it stays ``started``); run again in the same process,
    it is known dead at once (uncertain, not a lease-long wait) and, idempotent, retried."""
    calls: list[float] = []

    @durable_tool(saver=saver, idempotent=True, lease=30.0)
    async def slow(delay: float) -> str:
        """Sleeps (the first time)."""
        calls.append(delay)
        await asyncio.sleep(delay if len(calls) == 1 else 0)
        return "slept"

    thread = new_thread()
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(
            slow.ainvoke(tool_call("slow", {"delay": 5.0}), thread_config(thread)), 0.3)
    record = saver.ledger.get(saver.ledger.key_for(thread, "c1"))
    assert record is not None and record.status == "started"
    started = time.monotonic()
    again = await slow.ainvoke(tool_call("slow", {"delay": 5.0}), thread_config(thread))
    assert again.content == "slept"
    assert time.monotonic() - started < 15
    record = saver.ledger.get(record.key)
    assert record is not None and (record.status, record.attempts) == ("succeeded", 2)


async def test_a_cancelled_caller_does_not_end_a_blocking_call_still_running(
        saver: DurableSaver) -> None:
    """A blocking tool runs in the event loop's executor; its caller times out. The thread
    goes on, so the call stays this process's: a retry started at once neither takes it for
    dead (``verify`` would say "not happened" yet) nor runs it again, but waits, and replays
    the outcome the thread recorded when the work ended. One effect."""
    effects: list[str] = []
    running = threading.Event()

    def verify(key: str, args: Any) -> Any:
        return ("succeeded", "charged") if effects else ("failed", "not charged")

    @durable_tool(saver=saver, verify=verify, wait=10.0)
    def charge(order: str) -> str:
        """Charge an order, slowly."""
        running.set()
        time.sleep(0.6)
        effects.append(order)
        return "charged"

    thread = new_thread()
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(
            charge.ainvoke(tool_call("charge", {"order": "A"}), thread_config(thread)), 0.2)
    assert running.is_set() and effects == []
    retried = await charge.ainvoke(tool_call("charge", {"order": "A"}), thread_config(thread))
    assert retried.content == "charged"
    assert effects == ["A"]
    record = saver.ledger.get(saver.ledger.key_for(thread, "c1"))
    assert record is not None and (record.status, record.attempts) == ("succeeded", 1)


def test_expired_lease_of_another_host_is_taken_over(saver: DurableSaver,
                                                      namespace: tuple[str, str]) -> None:
    """A call another host started and stopped heartbeating becomes uncertain once its
    lease runs out (not before); an idempotent tool then runs again under the same key."""
    calls: list[int] = []
    echo = echo_tool(saver, calls, idempotent=True)
    thread = new_thread()
    echo.invoke(tool_call("echo", {"x": 3}), thread_config(thread))
    key = saver.ledger.key_for(thread, "c1")
    sql(f'UPDATE "{namespace[0]}".lgd_tool_calls SET status = \'started\', '
        "lease_owner = 'elsewhere~0:1:abc', "
        "lease_expires_at = clock_timestamp() + interval '0.4 seconds' WHERE key = %s", key)
    started = time.monotonic()
    assert echo.invoke(tool_call("echo", {"x": 3}), thread_config(thread)).content == "echo 3"
    assert time.monotonic() - started >= 0.3  # it waited for the lease
    record = saver.ledger.get(key)
    assert record is not None and (record.status, record.attempts) == ("succeeded", 2)
    assert calls == [3, 3]


def test_dead_owner_on_this_host_is_found_without_waiting_for_its_lease(
        saver: DurableSaver, namespace: tuple[str, str]) -> None:
    """A started call whose owner was a process of this host that no longer exists is
    uncertain at once, though its lease has a minute to run."""
    calls: list[int] = []
    echo = echo_tool(saver, calls, idempotent=True)
    thread = new_thread()
    echo.invoke(tool_call("echo", {"x": 4}), thread_config(thread))
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    owner = f"{process_owner().host}:{gone.pid}:0123"
    sql(f'UPDATE "{namespace[0]}".lgd_tool_calls SET status = \'started\', lease_owner = %s, '
        "lease_expires_at = clock_timestamp() + interval '60 seconds' WHERE thread_id = %s",
        owner, thread)
    started = time.monotonic()
    echo.invoke(tool_call("echo", {"x": 4}), thread_config(thread))
    assert time.monotonic() - started < 30
    assert calls == [4, 4]
    assert not owner_gone(process_owner().text.replace(process_owner().host, "other"), "k", "k")


def test_heartbeat_keeps_a_long_call_alive(saver: DurableSaver, namespace: tuple[str, str],
                                           ) -> None:
    """A call that runs three times its lease keeps it alive by heartbeats: it is never
    taken for dead, and a concurrent caller replays its result."""
    started = threading.Event()
    calls: list[int] = []

    @durable_tool(saver=saver, lease=0.4, wait=5.0)
    def long(x: int) -> str:
        """Runs for 1.2 s."""
        calls.append(x)
        started.set()
        time.sleep(1.2)
        return "long done"

    thread, results = new_thread(), {}
    runner = threading.Thread(target=lambda: results.update(
        first=long.invoke(tool_call("long", {"x": 1}), thread_config(thread))))
    runner.start()
    assert started.wait(10)
    time.sleep(0.8)
    (row,) = sql(f'SELECT status, lease_expires_at > clock_timestamp() FROM '
                 f'"{namespace[0]}".lgd_tool_calls WHERE thread_id = %s', thread)
    assert row == ("started", True)
    second = long.invoke(tool_call("long", {"x": 1}), thread_config(thread))
    runner.join(10)
    assert second.content == results["first"].content == "long done"
    assert calls == [1]
