"""LangGraph's own test suite, run against `DurableSaver` (see compat/README.md).

The names below are shared by the runner (`compat.run`), the replacement fixtures
(`compat.fixtures`, imported by the patched upstream conftest) and the pytest plugin
(`compat.plugin`), which run in different processes and talk through the environment.
"""

from __future__ import annotations

PARAM_ID = "durable"
"""The single param of the replacement fixtures: test ids read ``test_x[durable]``."""

UPSTREAM_PARAM_ID = "memory"
"""Upstream's param whose selection (and snapshots) ours must match."""

FIXTURES = ("sync_checkpointer", "async_checkpointer", "sync_store", "async_store")
"""The upstream fixtures that are replaced: the savers', and the long-term memory stores'
(a `DurableStore`) of the graph-level store tests."""

UPSTREAM_STORE_PARAM_ID = "in_memory"
"""Upstream's store param (an InMemoryStore) whose selection ours must match."""

MODE_ENV = "LGD_WRITE_MODE"
"""The write mode of the savers the fixtures make: ``through`` or ``behind``."""

SUMMARY_ENV = "LGC_SUMMARY"
"""Where the plugin writes its JSON summary."""

DUMP_ENV = "LGC_DUMP"
"""Parity check: where the plugin writes the selected items instead of running them."""

UPSTREAM_ENV = "LGC_UPSTREAM"
"""Parity check: ``1`` when collecting the pristine upstream suite (no override)."""


class CompatError(Exception):
    """A problem of the runner or of its setup (not of a test): exit status 2."""
