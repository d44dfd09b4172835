"""An asyncio call cancelled at any point (a timeout, a web request whose client left)
gives back every connection it held. Cancellation is everyday asyncio: a connection kept
by a cancelled call is lost to the pool for good, and after ``redis_max_connections`` of
them a healthy Redis is unusable (every hot call waits ``pool_timeout``, the breaker
stays open)."""

from __future__ import annotations

import asyncio
import random
from typing import Any

from langgraph_durable import DurableSaver
from tests.support.checkpoints import aput_value

CALLS = 3000
AT_ONCE = 8


async def _one_call(saver: DurableSaver, thread_id: str, i: int) -> None:
    """One of the calls a run makes: a put, a read then its pending writes, or a read."""
    config: Any = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    if i % 3 == 0:
        await aput_value(saver, thread_id, i)
    elif i % 3 == 1:
        latest = await saver.aget_tuple(config)
        assert latest is not None
        await saver.aput_writes(latest.config, [("value", i)], f"task-{i}")
    else:
        await saver.aget_tuple(config)


def test_calls_cancelled_at_random_points_leave_both_pools_whole(
    make_saver: type[DurableSaver], write_mode: str
) -> None:
    """3000 calls on 8 threads, most cancelled after a random number of event-loop turns
    (so inside a send, an owed reply's read, a Postgres statement, a pool checkout). Then
    no Redis connection is checked out beyond the ones the driver keeps for its next
    script, every Postgres slot is free, and the saver serves calls at once."""
    saver = make_saver(redis_max_connections=4, postgres_max_connections=4, pool_timeout=2.0)
    rng = random.Random(11)
    threads = [f"cancelled-{write_mode}-{i}" for i in range(AT_ONCE)]

    async def scenario() -> tuple[int, int, int, int, dict[str, Any]]:
        for thread_id in threads:
            await aput_value(saver, thread_id, "start")
        cancelled = 0
        for start in range(0, CALLS, AT_ONCE):
            tasks = [asyncio.create_task(_one_call(saver, threads[j], start + j))
                     for j in range(AT_ONCE)]
            for _ in range(rng.randrange(12)):
                await asyncio.sleep(0)
            for task in tasks:
                if rng.random() < 0.8:
                    task.cancel()
            outcomes = await asyncio.gather(*tasks, return_exceptions=True)
            failed = [o for o in outcomes
                      if isinstance(o, BaseException) and not isinstance(o, asyncio.CancelledError)]
            assert not failed, failed
            cancelled += sum(isinstance(o, asyncio.CancelledError) for o in outcomes)
        tiers = await saver.engine.atiers()
        pool: Any = tiers.redis.connection_pool
        checked_out, kept = len(pool._in_use_connections), len(tiers._held)
        free_slots = tiers.pool._slots._value
        for i in range(20):  # served at once, not after pool_timeout
            await asyncio.wait_for(aput_value(saver, threads[0], f"after-{i}"), 1.5)
        return cancelled, checked_out, kept, free_slots, (await saver.ahealth())["hot"]

    cancelled, checked_out, kept, free_slots, hot = asyncio.run(scenario())
    assert cancelled > CALLS // 4, cancelled  # the cancellations did land mid-call
    assert checked_out == kept, f"{checked_out - kept} Redis connection(s) lost to the pool"
    assert free_slots == 4, f"{4 - free_slots} Postgres slot(s) never given back"
    assert hot["reachable"] and hot["breaker"] == "closed", hot
