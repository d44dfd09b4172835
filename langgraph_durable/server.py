"""Entry points for LangGraph's server (``langgraph dev``, the Agent Server).

The server takes a custom checkpointer and a custom long-term memory store from
``langgraph.json``::

    {
      "dependencies": ["."],
      "graphs": {"agent": "./agent.py:graph"},
      "checkpointer": {"path": "langgraph_durable.server.checkpointer"},
      "store": {"path": "langgraph_durable.server.store"}
    }

It enters `checkpointer` (an async context manager) when it starts, once per event loop
that runs graphs, and leaves it when it stops; it enters `store` the same way (see its
docstring for what the server does with it). Both are configured from the environment, as
the CLI is: ``LGD_REDIS_URL``, ``LGD_POSTGRES_URL``, ``LGD_SCHEMA``, ``LGD_KEY_PREFIX``, the
keys and settings `SaverConfig.from_env` reads, and for the saver ``LGD_WRITE_MODE``.
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
from langgraph_durable.store import DurableStore

_OPTIONS_FROM_ENV = {
    "LGD_WRITE_MODE": "write_mode",
    "LGD_SCHEMA": "schema",
    "LGD_KEY_PREFIX": "key_prefix",
}
"""The saver's arguments read from the environment here (the CLI's names); the URLs,
keys and the other ``LGD_*`` settings are read by `SaverConfig.from_env`."""

_STORE_OPTIONS_FROM_ENV = {
    "LGD_SCHEMA": "schema",
    "LGD_KEY_PREFIX": "key_prefix",
}
"""The store's arguments read from the environment here: the saver's, less the write
mode (a store has none)."""


def saver_options(**overrides: Any) -> dict[str, Any]:
    """The `DurableSaver` arguments the environment sets (``LGD_WRITE_MODE``,
    ``LGD_SCHEMA``, ``LGD_KEY_PREFIX``), with ``overrides`` on top.

    Raises:
        ConfigurationError: ``LGD_WRITE_MODE`` is neither ``through`` nor ``behind``.
    """
    options = _from_env(_OPTIONS_FROM_ENV)
    mode = options.get("write_mode", "through")
    if mode not in ("through", "behind"):
        raise ConfigurationError(f"LGD_WRITE_MODE must be 'through' or 'behind', got {mode!r}")
    options.update(overrides)
    return options


def store_options(**overrides: Any) -> dict[str, Any]:
    """The `DurableStore` arguments the environment sets (``LGD_SCHEMA``,
    ``LGD_KEY_PREFIX``), with ``overrides`` on top.

    ``LGD_WRITE_MODE`` is not one of them: a store's write returns once Postgres committed
    it, whatever mode the saver beside it uses.
    """
    options = _from_env(_STORE_OPTIONS_FROM_ENV)
    options.update(overrides)
    return options


def _from_env(names: dict[str, str]) -> dict[str, Any]:
    """The options whose variable (a key of ``names``) is set and not blank."""
    options: dict[str, Any] = {}
    for variable, option in names.items():
        value = os.environ.get(variable, "").strip()
        if value:
            options[option] = value
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


@asynccontextmanager
async def store() -> AsyncIterator[DurableStore]:
    """A set-up `DurableStore` configured from the ``LGD_*`` environment, closed on exit.

    Name it in ``langgraph.json``: ``"store": {"path": "langgraph_durable.server.store"}``.

    What the server expects, from LangSmith's "custom store" guide (a path to an async
    context manager that yields a `BaseStore`, whose lifecycle the server manages; an
    alpha feature) and from langgraph-api 0.16.7's ``langgraph_api/store.py``:

    - the path is split at its last dot for a module (``module.attribute``; a colon only
      for a file, ``./my_store.py:store``), as for the checkpointer;
    - the server calls the function with no argument and enters what it returns as an
      async context manager, at startup, before it loads the graphs; the store it yields
      serves the ``/store`` HTTP API and every run (``get_store()``, ``runtime.store``,
      ``InjectedStore``);
    - it enters it once per thread that asks for the store (a thread-local), and at
      shutdown leaves the one its main thread entered;
    - ``index`` and ``ttl`` of ``langgraph.json``'s ``store`` configure only the server's
      built-in store: the server passes nothing to a custom one and runs no TTL sweeper
      for it. So this one runs its own (`DurableStore.astart_ttl_sweeper`), every
      ``LGD_STORE_SWEEP_MINUTES`` (default 5; ``0``: none): each replica runs one, and
      they sweep once per interval between them.

    Raises:
        ConfigurationError: a setting is invalid.
        TierUnavailableError: Postgres cannot be reached.
        SchemaVersionError: the schema was migrated by a newer release.
    """
    durable = DurableStore(**store_options())
    minutes = _sweep_minutes()
    try:
        await durable.asetup()
        if minutes:
            await durable.astart_ttl_sweeper(minutes)
        yield durable
    finally:
        await durable.aclose()


def _sweep_minutes() -> float:
    """``LGD_STORE_SWEEP_MINUTES``: the server store's TTL sweep interval (0: none).

    Raises:
        ConfigurationError: it is not a number of minutes.
    """
    text = os.environ.get("LGD_STORE_SWEEP_MINUTES", "").strip() or "5"
    try:
        minutes = float(text)
    except ValueError:
        minutes = -1.0
    if not 0 <= minutes <= 7 * 24 * 60:
        raise ConfigurationError(
            f"LGD_STORE_SWEEP_MINUTES must be a number of minutes (0: no sweeper), got {text!r}")
    return minutes
