"""doctor warns when the write-behind backlog is old: no flusher is keeping up."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import pytest
from langchain_core.messages import HumanMessage
from typer.testing import Result

from langgraph_durable import DurableSaver
from langgraph_durable._cli.doctor import stale_after
from tests.support.cli_runner import cli_for
from tests.support.graphs import chat_graph


@pytest.fixture
def doctor(namespace: tuple[str, str]) -> Callable[[], Result]:
    """Run `doctor` on this module's schema and prefix."""
    cli = cli_for(namespace)
    return lambda: cli("doctor")


def flush_line(result: Result) -> str:
    """doctor's flush lag line."""
    return next(line for line in result.stdout.splitlines() if "flush lag" in line)


@pytest.mark.parametrize("write_mode", ["behind"])
def test_doctor_warns_about_a_backlog_no_flusher_drains(
        doctor: Callable[[], Result], make_saver: Callable[..., DurableSaver]) -> None:
    """Writes acknowledged behind with no flusher running: a fresh backlog is fine, one
    older than 4 flush intervals (at least 2 s) is a warning naming the fix, and doctor
    exits 4 (passed with warnings) instead of 0; once flushed, the warning is gone."""
    saver = make_saver(background_flush=False)
    chat_graph(saver).invoke({"messages": [HumanMessage("hi")]},
                             {"configurable": {"thread_id": f"t-{uuid.uuid4().hex[:8]}"}})
    fresh = doctor()
    assert "✔" in flush_line(fresh) and "entries waiting" in flush_line(fresh)
    time.sleep(stale_after(0.25) + 0.5)
    stale = doctor()
    line = flush_line(stale)
    assert line.lstrip().startswith("!"), stale.stdout
    assert "no flusher is keeping up" in line and "flush --follow" in line
    assert stale.exit_code == 4, stale.output
    assert "warning" in stale.stdout.splitlines()[-1] and "flush lag" in stale.stdout
    saver.flush()
    assert "nothing waiting to be flushed" in flush_line(doctor())


def test_the_backlog_threshold_follows_the_flush_interval() -> None:
    """The threshold is 4 flush intervals, and never below 2 seconds."""
    assert stale_after(0.25) == 2.0
    assert stale_after(5.0) == 20.0
