"""Concurrent ``abatch`` calls of one event loop run as one batch.

LangGraph's store methods (``aget``, ``aput``, ``asearch``...) each call ``abatch`` with one
op; an agent server gathers many at once. Run one by one, each is a round trip to Redis or
a Postgres transaction of its own. Here the calls a loop makes while a batch is in flight
wait for it and then go together (LangGraph's ``AsyncBatchedBaseStore`` does the same for
the official stores, but needs a running loop when the store is made, and this store also
serves blocking callers).

Each call keeps its own outcome: a combined batch that fails is run again call by call, so
a value Postgres refuses fails only the call that passed it. Reads of a combined batch see
the store as before it, like reads of one call's batch; calls that run at the same time had
no order between them anyway.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from langgraph.store.base import Op, Result

# A combined batch takes the calls waiting, up to this many ops (a call is never split).
MAX_OPS = 500
# Batches in flight at once per loop: a slow search does not hold every other call.
MAX_RUNNERS = 4

Run = Callable[[list[Op]], Awaitable[list[Result]]]


@dataclass
class _Call:
    ops: list[Op]
    done: asyncio.Future[list[Result]]


@dataclass
class Batcher:
    """The calls of one event loop waiting to run (``run`` runs one batch)."""

    run: Run
    waiting: list[_Call] = field(default_factory=list)
    runners: set[asyncio.Task[None]] = field(default_factory=set)  # held: the loop holds weakly

    async def submit(self, ops: list[Op]) -> list[Result]:
        call = _Call(ops, asyncio.get_running_loop().create_future())
        self.waiting.append(call)
        if len(self.runners) < MAX_RUNNERS:
            runner = asyncio.get_running_loop().create_task(self._runner())
            self.runners.add(runner)
            runner.add_done_callback(self.runners.discard)
        return await call.done

    async def _runner(self) -> None:
        while self.waiting:
            await self._one(self._take())

    def _take(self) -> list[_Call]:
        taken: list[_Call] = []
        size = 0
        while self.waiting and (not taken or size + len(self.waiting[0].ops) <= MAX_OPS):
            call = self.waiting.pop(0)
            if call.done.cancelled():
                continue
            taken.append(call)
            size += len(call.ops)
        return taken

    async def _one(self, calls: Sequence[_Call]) -> None:
        if not calls:
            return
        if len(calls) > 1:
            try:
                results: list[Result] | None = await self.run(
                    [op for call in calls for op in call.ops])
            except Exception:  # each call runs again below, and keeps its own outcome
                results = None
            if results is not None:
                at = 0
                for call in calls:
                    _settle(call, results[at:at + len(call.ops)])
                    at += len(call.ops)
                return
        for call in calls:
            try:
                _settle(call, await self.run(call.ops))
            except Exception as exc:  # the caller's, raised where it awaits
                if not call.done.done():
                    call.done.set_exception(exc)


def _settle(call: _Call, results: list[Result]) -> None:
    if not call.done.done():
        call.done.set_result(results)
