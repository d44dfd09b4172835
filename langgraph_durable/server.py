"""Entry points for LangGraph's server (``langgraph dev``, the Agent Server).

The server takes a custom checkpointer from ``langgraph.json``::

    {
      "dependencies": ["."],
      "graphs": {"agent": "./agent.py:graph"},
      "checkpointer": {"path": "langgraph_durable.server:checkpointer"}
    }

It enters `checkpointer` (an async context manager) when it starts, once per event loop
that runs graphs, and leaves it when it stops. The saver is configured from the
environment, as the CLI is: ``LGD_REDIS_URL``, ``LGD_POSTGRES_URL``, ``LGD_WRITE_MODE``,
``LGD_SCHEMA``, ``LGD_KEY_PREFIX`` and the keys and settings `SaverConfig.from_env` reads.
See docs/langgraph-server.md.

This module imports nothing of the server's: the server's packages are not this
library's dependencies.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from langgraph_durable.errors import ConfigurationError
from langgraph_durable.saver import DurableSaver

_OPTIONS_FROM_ENV = {
    "LGD_WRITE_MODE": "write_mode",
    "LGD_SCHEMA": "schema",
    "LGD_KEY_PREFIX": "key_prefix",
}
"""The saver's arguments read from the environment here (the CLI's names); the URLs,
keys and the other ``LGD_*`` settings are read by `SaverConfig.from_env`."""


def saver_options(**overrides: Any) -> dict[str, Any]:
    """The `DurableSaver` arguments the environment sets (``LGD_WRITE_MODE``,
    ``LGD_SCHEMA``, ``LGD_KEY_PREFIX``), with ``overrides`` on top.

    Raises:
        ConfigurationError: ``LGD_WRITE_MODE`` is neither ``through`` nor ``behind``.
    """
    options: dict[str, Any] = {}
    for variable, option in _OPTIONS_FROM_ENV.items():
        value = os.environ.get(variable, "").strip()
        if value:
            options[option] = value
    mode = options.get("write_mode", "through")
    if mode not in ("through", "behind"):
        raise ConfigurationError(f"LGD_WRITE_MODE must be 'through' or 'behind', got {mode!r}")
    options.update(overrides)
    return options


@asynccontextmanager
async def checkpointer() -> AsyncIterator[DurableSaver]:
    """A set-up `DurableSaver` configured from the ``LGD_*`` environment, closed on exit
    (a write-behind saver drains what it acknowledged to Postgres first).

    Name it in ``langgraph.json``: ``"checkpointer": {"path":
    "langgraph_durable.server:checkpointer"}``.

    Raises:
        ConfigurationError: a setting is invalid.
        TierUnavailableError: Postgres cannot be reached.
        SchemaVersionError: the schema was migrated by a newer release.
    """
    saver = DurableSaver(**saver_options())
    try:
        await saver.asetup()
        yield saver
    finally:
        await saver.aclose()
