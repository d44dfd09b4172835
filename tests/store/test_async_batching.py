"""Concurrent async calls of one event loop run together: ``asyncio.gather`` of many store
calls costs a few batches, each call gets its own result, and a call whose value Postgres
refuses fails alone."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from langgraph_durable import DurableStore, WriteRejectedError
from tests.store.conftest import MakeStore


def _counting(store: DurableStore) -> list[int]:
    """Record the size of every batch the store runs in an event loop."""
    sizes: list[int] = []
    run = store._abatch_now

    async def counted(ops: list[Any]) -> Any:
        sizes.append(len(ops))
        return await run(ops)

    store._abatch_now = counted  # type: ignore[method-assign]
    return sizes


def test_gathered_calls_run_as_a_few_batches_with_their_own_results(
        store: DurableStore) -> None:
    """300 ``aput`` then 300 ``aget`` gathered: every value reads back as put, in far fewer
    batches than calls."""
    ns = (f"g{uuid.uuid4().hex[:8]}",)
    sizes = _counting(store)

    async def scenario() -> list[Any]:
        await asyncio.gather(*(store.aput(ns, f"k{n}", {"n": n}) for n in range(300)))
        return await asyncio.gather(*(store.aget(ns, f"k{n}") for n in range(300)))

    items = asyncio.run(scenario())
    assert [item.value["n"] if item else None for item in items] == list(range(300))
    assert sum(sizes) == 600 and len(sizes) <= 20, sizes
    assert asyncio.run(store.aget(ns, "k7")).value == {"n": 7}  # a second loop, its own batcher


def test_a_call_whose_value_postgres_refuses_fails_alone(store: DurableStore) -> None:
    """One gathered ``aput`` holds a string Postgres cannot store in jsonb (a NUL): that call
    raises `WriteRejectedError`, every other one is stored."""
    ns = (f"r{uuid.uuid4().hex[:8]}",)

    async def scenario() -> list[Any]:
        calls = [store.aput(ns, f"k{n}", {"n": n}) for n in range(20)]
        calls.insert(7, store.aput(ns, "bad", {"text": "a\x00b"}))
        return await asyncio.gather(*calls, return_exceptions=True)

    outcomes = asyncio.run(scenario())
    failed = [o for o in outcomes if isinstance(o, BaseException)]
    assert len(failed) == 1 and isinstance(failed[0], WriteRejectedError), outcomes
    assert outcomes.index(failed[0]) == 7
    assert [i.key for i in store.search(ns, limit=100)] == sorted(
        (f"k{n}" for n in range(20)), key=lambda k: -int(k[1:]))
    assert store.get(ns, "bad") is None


def test_calls_made_in_turn_see_each_other(make_store: MakeStore) -> None:
    """Batching never reorders one caller's calls: a get after a put returns the put, a get
    after a delete nothing."""
    store = make_store()
    ns = (f"t{uuid.uuid4().hex[:8]}",)

    async def caller(n: int) -> bool:
        await store.aput(ns, f"k{n}", {"n": n})
        seen = await store.aget(ns, f"k{n}")
        await store.adelete(ns, f"k{n}")
        return seen is not None and seen.value == {"n": n} and (
            await store.aget(ns, f"k{n}")) is None

    async def scenario() -> list[bool]:
        return await asyncio.gather(*(caller(n) for n in range(50)))

    assert asyncio.run(scenario()) == [True] * 50
    with pytest.raises(ValueError):
        asyncio.run(store.aput((), "k", {"n": 1}))  # checked before it waits for a batch
