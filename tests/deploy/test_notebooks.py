"""The notebooks in notebooks/ run top to bottom against the real servers, and are
committed executed.

Each is executed by nbclient in a fresh kernel of this interpreter, with LGD_REDIS_URL and
LGD_POSTGRES_URL pointing at the test servers; every notebook creates its own schema and
key prefix, asserts what it claims, and drops them at the end. Executing never rewrites
the committed file, which carries the outputs of a run (``python -m tests.support.notebook_runner``
refreshes them) and nothing of the machine that ran it.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from tests.support.notebook_runner import NOTEBOOKS, execute, machine_details
from tests.support.servers import POSTGRES_URL, REDIS_URL

pytestmark = pytest.mark.timeout(300)

COMMITTED = sorted(NOTEBOOKS.glob("*.ipynb"))


def run(name: str) -> None:
    """Run one notebook in a new kernel; a failing cell fails the test with its traceback.
    The committed file is left as it was."""
    path = NOTEBOOKS / f"{name}.ipynb"
    before = path.read_bytes()
    execute(name, {"LGD_REDIS_URL": REDIS_URL, "LGD_POSTGRES_URL": POSTGRES_URL})
    assert path.read_bytes() == before


def test_01_quickstart() -> None:
    """Drop-in for MemorySaver: same graph, sync and async on one saver, read back anew."""
    run("01_quickstart")


def test_02_crash_and_resume() -> None:
    """A subprocess killed with SIGKILL mid-run is resumed by another; time travel works."""
    run("02_crash_and_resume")


def test_03_idempotent_tools() -> None:
    """Replay, and each policy for a call whose process died mid-call: one real charge."""
    run("03_idempotent_tools")


def test_04_tiers_and_metrics() -> None:
    """Hot vs cold read latency, storage per step, flush lag and OpenTelemetry metrics."""
    run("04_tiers_and_metrics")


def test_05_multi_agent() -> None:
    """A supervisor and two worker subgraphs, killed mid-handoff with SIGKILL: one resume
    finishes every agent and each tracked side effect happened once; the CLI shows the
    namespaces and each agent's tool calls."""
    run("05_multi_agent")


def test_06_create_agent() -> None:
    """A create_agent agent with DurableMiddleware, SIGKILLed after its model answered and
    resumed in a new process: the recorded answer replays (no model call paid twice, the
    same tool-call id) and the card is charged once; without recorded model calls the
    model is paid three times."""
    run("06_create_agent")


def test_07_long_term_memory() -> None:
    """DurableStore: memories read across threads of a user, none lost by a SIGKILLed
    writer, reads and writes through Postgres while a private Redis is dead, and that
    Redis filled again once restarted."""
    run("07_long_term_memory")


@pytest.mark.parametrize("path", COMMITTED, ids=[p.stem for p in COMMITTED])
def test_committed_notebook_has_its_outputs_and_names_no_machine(path: Path) -> None:
    """A reader sees results without running anything: every code cell was executed, in
    order, without an error; the notebook shows output, a figure for every plot; and no
    output holds an absolute path of the machine that ran it, a process name of that
    host, a password, or a terminal escape code (a reader's viewer shows them raw)."""
    notebook = nbformat.read(path, as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert [cell.execution_count for cell in code] == list(range(1, len(code) + 1)), (
        f"{path.name} is not committed executed: run python -m tests.support.notebook_runner")
    outputs = [output for cell in code for output in cell.outputs]
    assert outputs and not [o for o in outputs if o.output_type == "error"]
    for cell in code:
        if "plt.show()" in cell.source:
            assert any("image/png" in o.get("data", {}) for o in cell.outputs), cell.source
    assert machine_details(notebook) == []
    escaped = [o for o in outputs if "\x1b[" in "".join(o.get("text", ""))]
    assert escaped == [], f"{path.name}: an output holds terminal escape codes"
