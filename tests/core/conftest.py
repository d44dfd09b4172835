"""Fixtures of the server-free core tests: a `Context` on dead URLs, nothing to connect to."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from langgraph_durable._core.context import Breaker, Context
from langgraph_durable._core.sql import Statements
from langgraph_durable.config import SaverConfig

DEAD_REDIS = "redis://127.0.0.1:1/0"
DEAD_POSTGRES = "postgresql://x@127.0.0.1:1/x"


@pytest.fixture
def make_ctx() -> Callable[..., Context]:
    """A factory of contexts: ``make_ctx(write_mode="behind", flush_policy="latest")``."""

    def factory(**options: Any) -> Context:
        config = SaverConfig(redis_url=DEAD_REDIS, postgres_url=DEAD_POSTGRES,
                             key_prefix="t", schema="s", **options)
        return Context(config=config, statements=Statements(config.schema),
                       serde=JsonPlusSerializer(), breaker=Breaker(60.0), consumer="host:1:c")

    return factory


@pytest.fixture
def ctx(make_ctx: Callable[..., Context]) -> Context:
    """A write-through context."""
    return make_ctx()
