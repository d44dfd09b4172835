"""The notebooks in notebooks/ run top to bottom against the real servers.

Each is executed by nbclient in a fresh kernel of this interpreter, with LGD_REDIS_URL and
LGD_POSTGRES_URL pointing at the test servers; every notebook creates its own schema and
key prefix, asserts what it claims, and drops them at the end. The files are not modified.
"""

from __future__ import annotations

import os
from pathlib import Path

import nbclient
import nbformat
import pytest

from tests.conftest import POSTGRES_URL, REDIS_URL

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"

pytestmark = pytest.mark.timeout(300)


def execute(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run one notebook in a new kernel; a failing cell fails the test with its traceback."""
    monkeypatch.setenv("LGD_REDIS_URL", REDIS_URL)
    monkeypatch.setenv("LGD_POSTGRES_URL", POSTGRES_URL)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    notebook = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    client = nbclient.NotebookClient(notebook, timeout=240, kernel_name="python3",
                                     resources={"metadata": {"path": str(NOTEBOOKS)}})
    client.execute(env=dict(os.environ))


def test_01_quickstart(monkeypatch: pytest.MonkeyPatch) -> None:
    """Drop-in for MemorySaver: same graph, sync and async on one saver, read back anew."""
    execute("01_quickstart", monkeypatch)


def test_02_crash_and_resume(monkeypatch: pytest.MonkeyPatch) -> None:
    """A subprocess killed with SIGKILL mid-run is resumed by another; time travel works."""
    execute("02_crash_and_resume", monkeypatch)


def test_03_idempotent_tools(monkeypatch: pytest.MonkeyPatch) -> None:
    """Replay, and each policy for a call whose process died mid-call: one real charge."""
    execute("03_idempotent_tools", monkeypatch)


def test_04_tiers_and_metrics(monkeypatch: pytest.MonkeyPatch) -> None:
    """Hot vs cold read latency, storage per step, flush lag and OpenTelemetry metrics."""
    execute("04_tiers_and_metrics", monkeypatch)
