"""Crash tests of the tool ledger: a real process is SIGKILLed at three points of a tool
step, and a new process (this one) resumes the thread.

(a) before any tool runs, (b) inside ``charge`` after its effect committed, (c) inside
``lookup`` after ``charge``'s outcome was recorded; for a plain graph
(plan -> ToolNode -> finish) and for ``create_react_agent``. Every crashed process is
started at once (module fixture), so the whole module costs one process start-up.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langgraph.types import Command

from langgraph_durable import DurableSaver, ToolOutcomeUncertainError
from tests.support import ledger_app as app
from tests.support.servers import POSTGRES_URL, REDIS_URL

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning",
                                        "ignore:.*create_react_agent.*")

ROOT = Path(__file__).parents[2]
SCENARIOS = [
    ("graph", "before_tools", "raise"), ("agent", "before_tools", "raise"),
    ("graph", "in_lookup", "raise"), ("agent", "in_lookup", "raise"),
    ("graph", "in_charge", "verify"), ("graph", "in_charge", "idempotent"),
    ("graph", "in_charge", "raise"), ("graph", "in_charge", "interrupt"),
    ("agent", "in_charge", "idempotent"), ("agent", "in_charge", "interrupt"),
    ("graph", "in_charge", "fork"),
]
Crashed = dict[tuple[str, str, str], str]


@pytest.fixture
def write_mode() -> str:
    """Each crashed thread is resumed once: by a write-through saver, as the crashed process
    used (ledger writes ignore ``write_mode``; the one-process ledger tests run both modes)."""
    return "through"


@pytest.fixture(scope="module")
def crashed(namespace: tuple[str, str], tmp_path_factory: pytest.TempPathFactory,
            ) -> Iterator[Crashed]:
    """Start one process per scenario, SIGKILL each at its point; yield their thread ids
    (this also sets up the schema and the outside world for every test here)."""
    schema, prefix = namespace
    with DurableSaver(REDIS_URL, POSTGRES_URL, schema=schema, key_prefix=prefix) as saver:
        saver.setup()
    app.setup_outside(schema)
    tmp = tmp_path_factory.mktemp("crash")
    procs = {}
    for scenario in SCENARIOS:
        name = "-".join(scenario)
        thread = f"{name}-{uuid.uuid4().hex[:6]}"
        signal_file = tmp / f"{name}.ready"
        log = (tmp / f"{name}.log").open("w")
        procs[scenario] = (thread, signal_file, log, subprocess.Popen(
            [sys.executable, "-m", "tests.support.ledger_app", schema, prefix, thread, scenario[0],
             scenario[1], str(signal_file)], stdout=log, stderr=subprocess.STDOUT, cwd=ROOT))
    deadline = time.monotonic() + 90
    try:
        for scenario, (_, signal_file, log, proc) in procs.items():
            while not signal_file.exists():
                if proc.poll() is not None or time.monotonic() > deadline:
                    log.flush()
                    output = Path(log.name).read_text()
                    pytest.fail(f"{scenario}: the helper never reached its kill point:\n{output}")
                time.sleep(0.02)
            proc.send_signal(signal.SIGKILL)
            proc.wait()
    finally:
        for _, _, log, proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            log.close()
    yield {scenario: thread for scenario, (thread, _, _, _) in procs.items()}


def _resume(saver: DurableSaver, schema: str, scenario: tuple[str, str, str], thread: str,
            command: Any = None) -> Any:
    graph = app.BUILDERS[scenario[0]](saver, app.make_tools(saver, schema, policy=scenario[2]))
    return graph.invoke(command, {"configurable": {"thread_id": thread}})


def _by_tool(saver: DurableSaver, thread_id: str) -> dict[str, Any]:
    return {r.tool: r for r in saver.ledger.list(thread_id)}


def _final_text(result: dict[str, Any]) -> str:
    return str(result["messages"][-1].content)


@pytest.mark.parametrize("kind", ["graph", "agent"])
def test_kill_before_any_tool_runs_each_tool_exactly_once(
        saver: DurableSaver, namespace: tuple[str, str], kind: str,
        crashed: Crashed) -> None:
    """(a) Killed after the model's step, before any tool: resuming runs each tool once."""
    schema, _ = namespace
    scenario = (kind, "before_tools", "raise")
    thread = crashed[scenario]
    assert saver.ledger.list(thread) == []
    result = _resume(saver, schema, scenario, thread)
    assert "charged 1250 cents" in _final_text(result)
    assert len(app.attempts(schema, thread, "charge")) == 1
    assert len(app.attempts(schema, thread, "lookup")) == 1
    assert app.charges(schema, thread) == 1
    assert {r.tool: (r.status, r.attempts) for r in saver.ledger.list(thread)} == {
        "charge": ("succeeded", 1), "lookup": ("succeeded", 1)}


@pytest.mark.parametrize("kind", ["graph", "agent"])
def test_kill_in_sibling_after_charge_replays_charge(
        saver: DurableSaver, namespace: tuple[str, str], kind: str,
        crashed: Crashed) -> None:
    """(c) Killed inside ``lookup`` after ``charge`` returned: ``charge`` is not run again
    (its recorded result is replayed, or LangGraph kept its writes); ``lookup``, uncertain,
    is retried because it is idempotent."""
    schema, _ = namespace
    scenario = (kind, "in_lookup", "raise")
    thread = crashed[scenario]
    before = _by_tool(saver, thread)
    assert before["charge"].status == "succeeded"
    assert before["lookup"].status == "started"
    result = _resume(saver, schema, scenario, thread)
    assert "charged 1250 cents" in _final_text(result)
    assert "is paid" in _final_text(result)
    assert len(app.attempts(schema, thread, "charge")) == 1
    assert app.charges(schema, thread) == 1
    after = _by_tool(saver, thread)
    assert (after["charge"].status, after["charge"].attempts) == ("succeeded", 1)
    assert (after["lookup"].status, after["lookup"].attempts) == ("succeeded", 2)
    assert len(app.attempts(schema, thread, "lookup")) == 2


def test_kill_inside_charge_verify_finds_the_effect(
        saver: DurableSaver, namespace: tuple[str, str], crashed: Crashed) -> None:
    """(b) + ``verify``: the ledger found the call uncertain, ``verify`` saw the charge in
    the outside world, so the call is recorded succeeded and never runs again."""
    schema, _ = namespace
    scenario = ("graph", "in_charge", "verify")
    thread = crashed[scenario]
    assert _by_tool(saver, thread)["charge"].status == "started"
    result = _resume(saver, schema, scenario, thread)
    assert "outcome was confirmed" in _final_text(result)
    record = _by_tool(saver, thread)["charge"]
    assert (record.status, record.attempts) == ("succeeded", 1)
    assert len(app.attempts(schema, thread, "charge")) == 1
    assert app.charges(schema, thread) == 1


@pytest.mark.parametrize("kind", ["graph", "agent"])
def test_kill_inside_charge_idempotent_retries_with_the_same_key(
        saver: DurableSaver, namespace: tuple[str, str], kind: str,
        crashed: Crashed) -> None:
    """(b) + ``idempotent=True``: the uncertain call runs again under the same key, which
    the outside world dedupes: two attempts, one charge."""
    schema, _ = namespace
    scenario = (kind, "in_charge", "idempotent")
    thread = crashed[scenario]
    result = _resume(saver, schema, scenario, thread)
    assert "charged 1250 cents" in _final_text(result)
    keys = app.attempts(schema, thread, "charge")
    assert len(keys) == 2 and keys[0] == keys[1]
    assert app.charges(schema, thread) == 1
    record = _by_tool(saver, thread)["charge"]
    assert (record.key, record.status, record.attempts) == (keys[0], "succeeded", 2)


def test_a_fork_retries_a_cut_off_call_under_the_key_the_provider_saw(
        saver: DurableSaver, namespace: tuple[str, str], crashed: Crashed) -> None:
    """(b), then the thread is forked at its last checkpoint, before the tools (what
    `langgraph-durable fork` does), and the fork resumes with ``idempotent=True``: its
    retry presents the key the outside world saw for the original call, so it dedupes it:
    one charge across both threads."""
    schema, _ = namespace
    thread = crashed[("graph", "in_charge", "fork")]
    head = saver.get_tuple({"configurable": {"thread_id": thread}})
    assert head is not None
    fork = f"{thread}-fork"
    saver.copy_thread(thread, fork, up_to=head.config["configurable"]["checkpoint_id"])
    copied = _by_tool(saver, fork)["charge"]
    original = app.attempts(schema, thread, "charge")
    assert copied.key != original[0] and copied.idempotency_key == original[0]
    result = _resume(saver, schema, ("graph", "in_charge", "idempotent"), fork)
    assert "charged 1250 cents" in _final_text(result)
    assert app.attempts(schema, fork, "charge") == original
    assert app.charges(schema, thread) + app.charges(schema, fork) == 1


def test_kill_inside_charge_raise_then_operator_settles(
        saver: DurableSaver, namespace: tuple[str, str], crashed: Crashed) -> None:
    """(b) + ``on_uncertain="raise"``: resuming raises `ToolOutcomeUncertainError` and the
    ledger says ``uncertain``; once an operator settles it, the graph finishes without a
    second charge."""
    schema, _ = namespace
    scenario = ("graph", "in_charge", "raise")
    thread = crashed[scenario]
    with pytest.raises(ToolOutcomeUncertainError) as raised:
        _resume(saver, schema, scenario, thread)
    record = _by_tool(saver, thread)["charge"]
    assert record.status == "uncertain" and raised.value.key == record.key
    with pytest.raises(ToolOutcomeUncertainError):  # still uncertain: raises again
        _resume(saver, schema, scenario, thread)
    saver.ledger.resolve(record.key, "succeeded", result="charged (settled by an operator)")
    result = _resume(saver, schema, scenario, thread)
    assert "settled by an operator" in _final_text(result)
    assert len(app.attempts(schema, thread, "charge")) == 1
    assert app.charges(schema, thread) == 1


@pytest.mark.parametrize("kind", ["graph", "agent"])
def test_kill_inside_charge_interrupt_waits_for_a_human(
        saver: DurableSaver, namespace: tuple[str, str], kind: str,
        crashed: Crashed) -> None:
    """(b) + ``on_uncertain="interrupt"``: the graph pauses with a payload naming the call;
    the human's ``"succeeded"`` resumes it without a second charge."""
    schema, _ = namespace
    scenario = (kind, "in_charge", "interrupt")
    thread = crashed[scenario]
    paused = _resume(saver, schema, scenario, thread)
    (question,) = paused["__interrupt__"]
    record = _by_tool(saver, thread)["charge"]
    assert record.status == "uncertain"
    assert question.value["type"] == "langgraph_durable/uncertain_tool_call"
    assert question.value["key"] == record.key
    assert question.value["args"] == {"order_id": app.ORDER, "cents": app.CENTS}
    result = _resume(saver, schema, scenario, thread, Command(resume="succeeded"))
    assert "outcome was confirmed" in _final_text(result)
    assert _by_tool(saver, thread)["charge"].status == "succeeded"
    assert len(app.attempts(schema, thread, "charge")) == 1
    assert app.charges(schema, thread) == 1


def test_two_processes_claim_one_call(namespace: tuple[str, str], tmp_path: Path,
                                      crashed: Crashed) -> None:
    """Two processes run the same tool call at the same moment: one runs it, the other
    waits on its live lease and returns the recorded result; the tool ran once."""
    schema, prefix = namespace
    thread = f"race-{uuid.uuid4().hex[:6]}"
    outs = [tmp_path / "one", tmp_path / "two"]
    procs = [subprocess.Popen(
        [sys.executable, "-m", "tests.support.ledger_app", schema, prefix, thread, "-", "race",
         str(out)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        for out in outs]
    deadline = time.monotonic() + 60
    while not all(Path(f"{out}.ready").exists() for out in outs):
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs)
        time.sleep(0.01)
    for out in outs:
        Path(f"{out}.go").touch()
    for proc in procs:
        output, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0, output.decode()
    assert outs[0].read_text() == outs[1].read_text() == "charged 1250 cents for order-7"
    assert len(app.attempts(schema, thread, "charge")) == 1
    assert app.charges(schema, thread) == 1
