"""A saver's blocking methods under the async names, for suites that call only those."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver

from langgraph_durable import DurableSaver


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
