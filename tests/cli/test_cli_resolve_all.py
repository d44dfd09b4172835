"""``resolve-all``: settling uncertain tool calls in bulk, against the real servers.

Uncertain calls are made as a crash leaves them: a durable tool's call is cut off mid-call
(cancelled; its row stays ``started``), and its next execution finds it so and, with
``on_uncertain="raise"``, marks it ``uncertain``. A call cut off under a short lease that
ran out stays ``started``: `resolve` takes it too, so ``resolve-all`` does.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from langchain_core.tools import BaseTool
from typer.testing import Result

from langgraph_durable import DurableSaver, ToolOutcomeUncertainError, durable_tool
from tests.support.cli_runner import cli_for


@pytest.fixture
def write_mode() -> str:
    """The ledger lives in Postgres whatever the write mode: one is enough."""
    return "through"


@pytest.fixture
def cli(namespace: tuple[str, str]) -> Callable[..., Result]:
    return cli_for(namespace, columns=120)


def durable(saver: DurableSaver, name: str, runs: list[str], *, hang: bool = False,
            lease: float = 30.0) -> BaseTool:
    """A durable tool called ``name`` that records each real run in ``runs`` (and, with
    ``hang``, sleeps until it is cancelled)."""

    async def tool(order: str) -> str:
        runs.append(order)
        if hang:
            await asyncio.sleep(60)
        return f"{name} ran for {order}"

    tool.__name__, tool.__doc__ = name, f"The {name} tool."
    return durable_tool(saver=saver, on_uncertain="raise", lease=lease)(tool)


def invoke(tool: BaseTool, thread: str, *, timeout: float = 30.0) -> Any:
    """Call ``tool`` as a model's tool call ``call_TOOL`` of ``thread``."""
    call = {"name": tool.name, "args": {"order": "A-1"}, "id": f"call_{tool.name}",
            "type": "tool_call"}
    return asyncio.run(asyncio.wait_for(
        tool.ainvoke(call, config={"configurable": {"thread_id": thread}}), timeout))


def cut_off(saver: DurableSaver, name: str, thread: str, *, lease: float = 30.0) -> str:
    """Start ``name`` on ``thread`` and cut it off mid-call; its key (the row: ``started``)."""
    with contextlib.suppress(TimeoutError):
        invoke(durable(saver, name, [], hang=True, lease=lease), thread, timeout=0.3)
    key = saver.ledger.key_for(thread, f"call_{name}")
    record = saver.ledger.get(key)
    assert record is not None and record.status == "started"
    return key


def uncertain(saver: DurableSaver, name: str, thread: str) -> str:
    """A call of ``name`` on ``thread`` left ``uncertain``; its key."""
    key = cut_off(saver, name, thread)
    with pytest.raises(ToolOutcomeUncertainError):
        invoke(durable(saver, name, []), thread)
    record = saver.ledger.get(key)
    assert record is not None and record.status == "uncertain"
    return key


def odd_thread() -> str:
    return f"order · café {uuid.uuid4().hex[:6]}"


def picked(cli: Callable[..., Result], *args: str) -> dict[str, str]:
    """Key -> status of the calls ``resolve-all retry --dry-run --json ARGS`` lists."""
    result = cli("resolve-all", "retry", "--dry-run", "--json", *args)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["dry_run"] is True and doc["settled"] == 0
    assert all(c["settled_status"] is None and c["refused"] is None for c in doc["calls"])
    assert doc["matched"] == len(doc["calls"])
    return {c["key"]: c["status"] for c in doc["calls"]}


def statuses(saver: DurableSaver, keys: list[str]) -> list[str]:
    return [record.status for key in keys if (record := saver.ledger.get(key))]


def test_the_filters_pick_the_right_calls_and_a_dry_run_changes_nothing(
        cli: Callable[..., Result], saver: DurableSaver) -> None:
    """--tool, --thread and --older-than pick calls as they say, together too; a started
    call whose lease ran out is picked, a finished one never; a dry run settles nothing."""
    tag = uuid.uuid4().hex[:6]
    wire, mail = f"wire_{tag}", f"mail_{tag}"
    t1, t2, t3, t4 = (odd_thread() for _ in range(4))
    a, b = uncertain(saver, wire, t1), uncertain(saver, mail, t1)
    c = cut_off(saver, wire, t2, lease=0.5)  # started; its lease runs out
    invoke(durable(saver, wire, []), t4)  # succeeded: never picked
    time.sleep(2.5)
    e = uncertain(saver, wire, t3)
    everything = picked(cli)
    assert {a: "uncertain", b: "uncertain", c: "started", e: "uncertain"}.items() <= (
        everything.items())
    assert saver.ledger.key_for(t4, f"call_{wire}") not in everything
    assert picked(cli, "--tool", wire) == {a: "uncertain", c: "started", e: "uncertain"}
    assert picked(cli, "--tool", wire, "--older-than", "2s") == {a: "uncertain", c: "started"}
    assert picked(cli, "--thread", t1) == {a: "uncertain", b: "uncertain"}
    assert picked(cli, "--thread", t2, "--tool", wire, "--older-than", "1") == {c: "started"}
    assert picked(cli, "--tool", wire, "--older-than", "1h") == {}
    shown = cli("resolve-all", "succeeded", "--thread", t1, "--dry-run")
    assert shown.exit_code == 0, shown.output
    assert a in shown.stdout and b in shown.stdout and mail in shown.stdout
    assert statuses(saver, [a, b, c, e]) == ["uncertain", "uncertain", "started", "uncertain"]


def test_settled_calls_replay_as_resolve_makes_them(cli: Callable[..., Result],
                                                    saver: DurableSaver) -> None:
    """A call settled by resolve-all replays as one settled by `resolve KEY` does:
    succeeded returns the same note without running the tool; retry runs it again (a
    started call whose lease ran out included)."""
    wire = f"wire_{uuid.uuid4().hex[:6]}"
    one, bulk, late = odd_thread(), odd_thread(), odd_thread()
    by_resolve, by_bulk = uncertain(saver, wire, one), uncertain(saver, wire, bulk)
    cut_off(saver, wire, late, lease=0.5)
    assert cli("resolve", by_resolve, "succeeded").exit_code == 0
    result = cli("resolve-all", "succeeded", "--thread", bulk, "--yes", "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert (doc["outcome"], doc["dry_run"], doc["matched"], doc["settled"]) == (
        "succeeded", False, 1, 1)
    assert doc["filters"] == {"tool": None, "thread_id": bulk, "older_than_seconds": None}
    (call,) = doc["calls"]
    assert (call["key"], call["status"], call["settled_status"]) == (
        by_bulk, "uncertain", "succeeded")
    runs: list[str] = []
    tool = durable(saver, wire, runs)
    assert invoke(tool, bulk).content == invoke(tool, one).content
    assert runs == []
    settled, resolved = saver.ledger.get(by_bulk), saver.ledger.get(by_resolve)
    assert settled is not None and resolved is not None
    assert (settled.status, settled.error, settled.attempts) == (
        resolved.status, resolved.error, resolved.attempts)

    time.sleep(0.6)  # the lease of the call on `late` runs out
    retried = cli("resolve-all", "retry", "--tool", wire, "--yes")
    assert retried.exit_code == 0, retried.output
    assert "started → failed" in retried.stdout and "settled 1 of 1" in retried.stdout
    assert invoke(tool, late).content == f"{wire} ran for A-1"
    assert runs == ["A-1"]


def test_resolve_all_asks_first_and_checks_its_options(cli: Callable[..., Result],
                                                       saver: DurableSaver) -> None:
    """Without --yes it asks, and a "no" changes nothing; with --json, which has no one to
    ask, it needs --yes or --dry-run. --error settles as failed with that message; an
    option that does not fit the outcome is refused (exit 2) before anything is listed."""
    thread = odd_thread()
    key = uncertain(saver, f"mail_{uuid.uuid4().hex[:6]}", thread)
    declined = cli("resolve-all", "failed", "--thread", thread, input="n\n")
    assert declined.exit_code == 1 and "settle 1 tool call(s) as failed" in declined.stdout
    assert statuses(saver, [key]) == ["uncertain"]
    misfit = cli("resolve-all", "retry", "--thread", thread, "--result", "1", "--dry-run")
    assert misfit.exit_code == 2 and "--result goes with 'succeeded'" in misfit.stderr
    unasked = cli("resolve-all", "failed", "--thread", thread, "--json", input="y\n")
    assert unasked.exit_code == 2 and unasked.stdout == ""
    assert "--json needs --yes" in unasked.stderr
    assert statuses(saver, [key]) == ["uncertain"]
    agreed = cli("resolve-all", "failed", "--thread", thread, "--error", "bank says no",
                 input="y\n")
    assert agreed.exit_code == 0, agreed.output
    assert "uncertain → failed" in agreed.stdout
    record = saver.ledger.get(key)
    assert record is not None and (record.status, record.error) == ("failed", "bank says no")
    nothing = cli("resolve-all", "retry", "--thread", thread)
    assert nothing.exit_code == 0 and "no uncertain tool calls match" in nothing.stdout
    empty = json.loads(cli("resolve-all", "retry", "--thread", thread, "--json",
                           "--yes").stdout)
    assert (empty["calls"], empty["matched"], empty["settled"]) == ([], 0, 0)
