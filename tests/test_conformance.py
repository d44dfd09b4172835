"""LangGraph's official checkpointer conformance suite: every capability, async and sync."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from typing import Any

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES

from langgraph_durable import DurableSaver
from tests.conftest import POSTGRES_URL, REDIS_URL


class SyncMethods(BaseCheckpointSaver[str]):
    """Exposes a saver's SYNC methods under the async names the suite calls.

    Each call runs the sync method in a worker thread, so the suite exercises exactly the
    code path of ``graph.invoke``.
    """

    def __init__(self, inner: DurableSaver) -> None:
        super().__init__(serde=inner.serde)
        self.inner = inner

    async def aget_tuple(self, config: Any) -> Any:
        return await asyncio.to_thread(self.inner.get_tuple, config)

    async def alist(self, config: Any, **kwargs: Any) -> AsyncIterator[Any]:
        for item in await asyncio.to_thread(lambda: list(self.inner.list(config, **kwargs))):
            yield item

    async def aput(self, *args: Any) -> Any:
        return await asyncio.to_thread(self.inner.put, *args)

    async def aput_writes(self, *args: Any, **kwargs: Any) -> None:
        await asyncio.to_thread(self.inner.put_writes, *args, **kwargs)

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(self.inner.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await asyncio.to_thread(self.inner.delete_for_runs, run_ids)

    async def acopy_thread(self, source: str, target: str) -> None:
        await asyncio.to_thread(self.inner.copy_thread, source, target)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await asyncio.to_thread(self.inner.prune, thread_ids, strategy=strategy)

    def get_next_version(self, current: Any, channel: None) -> str:
        return self.inner.get_next_version(current, channel)


@pytest.mark.parametrize("flavour", ["async", "sync"])
async def test_conformance_all_capabilities(namespace: tuple[str, str], write_mode: str,
                                            flavour: str) -> None:
    """The official suite detects and passes all 8 capabilities, for both method flavours."""
    schema, prefix = namespace

    @checkpointer_test(name=f"DurableSaver[{write_mode},{flavour}]")
    async def factory() -> AsyncGenerator[BaseCheckpointSaver[Any], None]:
        saver = DurableSaver(REDIS_URL, POSTGRES_URL, key_prefix=f"{prefix}-{flavour}",
                             schema=schema, write_mode=write_mode)  # type: ignore[arg-type]
        await saver.asetup()
        yield saver if flavour == "async" else SyncMethods(saver)
        await saver.aclose()

    report = await validate(factory)
    failures = {cap: result.failures for cap, result in report.results.items()
                if not result.passed}
    assert not failures, failures
    assert sum(result.tests_passed for result in report.results.values()) >= 80
    assert {cap for cap, result in report.results.items() if result.passed} == {
        cap.value for cap in ALL_CAPABILITIES
    }
