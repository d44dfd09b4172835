"""LangGraph's official checkpointer conformance suite: every capability, async and sync."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES

from langgraph_durable import DurableSaver
from tests.support.servers import POSTGRES_URL, REDIS_URL
from tests.support.sync_methods import SyncMethods


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
