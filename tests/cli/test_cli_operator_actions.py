"""Operator actions from the command line, against the real servers: settle an uncertain
tool call (`resolve`), branch a thread from a past checkpoint (`fork`), find threads by
their metadata (`threads --where`). Each is checked by what the graph does next."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from typer.testing import Result

from langgraph_durable import DurableSaver, ToolOutcomeUncertainError, durable_tool
from tests.support.cli_runner import cli_for
from tests.support.graphs import chat_graph, model_then_tool_graph
from tests.support.servers import POSTGRES_URL, REDIS_URL


@pytest.fixture
def cli(namespace: tuple[str, str]) -> Callable[..., Result]:
    """``langgraph-durable`` on this module's schema and prefix, 80 columns wide."""
    return cli_for(namespace, columns=80)


def error_line(result: Result) -> str:
    """The one ``error:`` line a refused command printed on stderr."""
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, result.stderr
    return lines[0]


def cells(output: str, needle: str) -> list[str]:
    """The cells of the table row that contains ``needle``."""
    row = next(line for line in output.splitlines() if needle in line)
    return [c.strip() for c in row.strip("│ ").split("│")]


# ----------------------------------------------------------------------------- resolve

@pytest.fixture(scope="module")
def killed_calls(namespace: tuple[str, str]) -> Iterator[dict[str, str]]:
    """Three threads whose ``wire_money`` call was running when its process got SIGKILL:
    each call is ``started`` with a dead owner. Yields name -> thread id."""
    schema, prefix = namespace
    with DurableSaver(REDIS_URL, POSTGRES_URL, schema=schema, key_prefix=prefix) as saver:
        saver.setup()
    threads = {name: f"wire-{name}-{uuid.uuid4().hex[:6]}"
               for name in ("succeeded", "failed", "retry")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.slow_call", schema, prefix, *threads.values()],
        stdout=subprocess.PIPE, text=True, cwd=Path(__file__).parents[2],
        env={**os.environ, "LGD_REDIS_URL": REDIS_URL, "LGD_POSTGRES_URL": POSTGRES_URL})
    try:
        assert proc.stdout is not None
        assert [proc.stdout.readline() for _ in threads] == ["calling\n"] * len(threads)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    yield threads


def wire_money(saver: DurableSaver, runs: list[int]) -> Any:
    """The killed tool again, in this process: it raises when its call is uncertain."""

    @durable_tool(saver=saver, on_uncertain="raise")
    def wire_money(cents: int) -> str:
        """Wire money."""
        runs.append(cents)
        return "sent again"

    return wire_money


def call_again(tool: Any, thread: str) -> Any:
    return tool.invoke({"name": "wire_money", "args": {"cents": 100}, "id": "call_w",
                        "type": "tool_call"}, config={"configurable": {"thread_id": thread}})


def uncertain_key(saver: DurableSaver, tool: Any, thread: str) -> str:
    """Resume the killed call: the ledger finds its owner dead and says uncertain."""
    with pytest.raises(ToolOutcomeUncertainError) as raised:
        call_again(tool, thread)
    record = saver.ledger.get(raised.value.key)
    assert record is not None and record.status == "uncertain"
    return raised.value.key


@pytest.mark.parametrize("write_mode", ["through"])
def test_resolve_succeeded_replays_the_given_result(cli: Callable[..., Result],
                                                    saver: DurableSaver,
                                                    killed_calls: dict[str, str]) -> None:
    """`resolve KEY succeeded --result JSON` settles the call; the graph's next execution
    returns that result and the tool does not run again. `ledger` names the command."""
    runs: list[int] = []
    tool = wire_money(saver, runs)
    thread = killed_calls["succeeded"]
    key = uncertain_key(saver, tool, thread)
    listed = cli("ledger", thread)
    assert "langgraph-durable resolve" in listed.stdout and key in listed.stdout
    result = cli("resolve", key, "succeeded", "--result", '"wired by the bank, ref 77"')
    assert result.exit_code == 0, result.output
    assert "uncertain → succeeded" in " ".join(result.stdout.split())
    assert call_again(tool, thread).content == "wired by the bank, ref 77"
    assert runs == []
    again = cli("resolve", key, "retry")
    assert again.exit_code == 1
    assert "is succeeded, not uncertain: nothing to settle" in error_line(again)


@pytest.mark.parametrize("write_mode", ["through"])
def test_resolve_failed_and_retry(cli: Callable[..., Result], saver: DurableSaver,
                                  killed_calls: dict[str, str]) -> None:
    """`failed --error TEXT` records the failure (the tool does not run); `retry` runs the
    tool once more under the same key."""
    runs: list[int] = []
    tool = wire_money(saver, runs)
    failed_key = uncertain_key(saver, tool, killed_calls["failed"])
    result = cli("resolve", failed_key, "failed", "--error", "bank says: not sent")
    assert result.exit_code == 0, result.output
    record = saver.ledger.get(failed_key)
    assert record is not None and (record.status, record.error) == ("failed",
                                                                    "bank says: not sent")
    retry_key = uncertain_key(saver, tool, killed_calls["retry"])
    result = cli("resolve", retry_key, "retry")
    assert result.exit_code == 0, result.output
    assert call_again(tool, killed_calls["retry"]).content == "sent again"
    assert runs == [100]
    record = saver.ledger.get(retry_key)
    assert record is not None and record.status == "succeeded"


@pytest.mark.parametrize("write_mode", ["through"])
def test_resolve_refuses_unknown_keys_and_misfit_options(cli: Callable[..., Result],
                                                         saver: DurableSaver) -> None:
    """An unknown key exits 1 with one error line; --result that is not JSON, --result
    with another outcome, or an unknown outcome exit 2; nothing is changed."""
    unknown = cli("resolve", "no-such-key", "retry")
    assert unknown.exit_code == 1
    assert "no tool call has key 'no-such-key'" in error_line(unknown)
    not_json = cli("resolve", "k", "succeeded", "--result", "not json")
    assert not_json.exit_code == 2 and "--result must be JSON" in error_line(not_json)
    misfit = cli("resolve", "k", "retry", "--result", "1")
    assert misfit.exit_code == 2 and "--result goes with 'succeeded'" in error_line(misfit)
    assert cli("resolve", "k", "maybe").exit_code == 2


# ----------------------------------------------------------------------------- fork


def checkpoint_at(saver: DurableSaver, thread: str, step: int) -> str:
    """The id of the thread's root checkpoint of ``step``."""
    return next(t.config["configurable"]["checkpoint_id"]
                for t in saver.list({"configurable": {"thread_id": thread, "checkpoint_ns": ""}})
                if t.metadata["step"] == step)


def test_fork_branches_a_thread_that_resumes_from_the_checkpoint(
        cli: Callable[..., Result], make_saver: Callable[..., DurableSaver]) -> None:
    """`fork THREAD CHECKPOINT --to NEW` makes NEW hold the history up to that checkpoint
    (plan done): NEW resumes from there and runs act and finish, the source is untouched,
    and the printed config is the one to resume with."""
    saver = make_saver()
    graph = chat_graph(saver)
    thread = f"src-{uuid.uuid4().hex[:6]}"
    graph.invoke({"messages": [HumanMessage("hi")]}, {"configurable": {"thread_id": thread}})
    after_plan = checkpoint_at(saver, thread, 1)
    new = f"{thread}-branch"
    result = cli("fork", thread, after_plan[-12:], "--to", new)
    assert result.exit_code == 0, result.output
    assert f"into thread '{new}' (3 checkpoints)" in " ".join(result.stdout.split())
    config_line = next(line for line in result.stdout.splitlines() if "config =" in line)
    config = json.loads(config_line.split("=", 1)[1])
    assert config == {"configurable": {"thread_id": new}}
    head = graph.get_state(config)
    assert head.config["configurable"]["checkpoint_id"] == after_plan
    assert head.next == ("act",)
    done = graph.invoke(None, config)
    assert [m.content for m in done["messages"]] == ["hi", "plan #1", "act #2", "finish #3"]
    assert len(list(saver.list({"configurable": {"thread_id": thread}}))) == 5


@pytest.mark.parametrize("keys", [{}, {"secret": "correct horse battery staple"}],
                         ids=["checksummed", "sealed"])
def test_copy_thread_up_to_is_the_fork_the_cli_makes(make_saver: Callable[..., DurableSaver],
                                                     keys: dict[str, Any]) -> None:
    """``saver.copy_thread(source, new, up_to=id)`` (what `fork` runs), with frames sealed
    for their thread too: the copy holds the checkpoints up to that one and resumes from
    it."""
    saver = make_saver(**keys)
    graph = chat_graph(saver)
    thread = f"sealed-{uuid.uuid4().hex[:6]}"
    graph.invoke({"messages": [HumanMessage("hi")]}, {"configurable": {"thread_id": thread}})
    new = f"{thread}-copy"
    saver.copy_thread(thread, new, up_to=checkpoint_at(saver, thread, 2))
    config = {"configurable": {"thread_id": new}}
    assert [t.metadata["step"] for t in saver.list(config)] == [2, 1, 0, -1]
    assert graph.get_state(config).next == ("finish",)
    done = graph.invoke(None, config)
    assert [m.content for m in done["messages"]][-1] == "finish #3"


def test_fork_does_not_repeat_a_recorded_tool_call(cli: Callable[..., Result],
                                                   saver: DurableSaver) -> None:
    """Forked from the checkpoint before the tools ran, the branch runs the tool step again,
    and the durable tool replays its recorded result: the charge happens once."""
    charges: list[str] = []

    @durable_tool(saver=saver)
    def charge(order: str) -> str:
        """Charge an order."""
        charges.append(order)
        return f"charged {order}"

    graph = model_then_tool_graph(saver, charge, {"order": "A-1"}, lambda: "call_c")
    thread = f"shop-{uuid.uuid4().hex[:6]}"
    graph.invoke({"messages": [HumanMessage("buy")]}, {"configurable": {"thread_id": thread}})
    result = cli("fork", thread, checkpoint_at(saver, thread, 1))  # model done
    assert result.exit_code == 0, result.output
    new = json.loads(next(line for line in result.stdout.splitlines()
                          if "config =" in line).split("=", 1)[1])
    assert new["configurable"]["thread_id"].startswith(f"{thread}-fork-")
    assert graph.get_state(new).next == ("tools",)
    done = graph.invoke(None, new)
    assert done["messages"][-1].content == "charged A-1"
    assert charges == ["A-1"]


def test_fork_refuses_an_existing_target_and_an_unknown_checkpoint(
        cli: Callable[..., Result], saver: DurableSaver,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A --to thread that has checkpoints (written behind: in Redis only), or a checkpoint
    the thread does not have, exits 1 with one error line; --to naming the source itself
    exits 2. Nothing is written."""
    monkeypatch.setattr(saver, "_start_flusher", lambda: None)  # behind: stay in Redis
    graph = chat_graph(saver)
    first, second = (f"t-{uuid.uuid4().hex[:6]}" for _ in range(2))
    for thread in (first, second):
        graph.invoke({"messages": [HumanMessage("hi")]}, {"configurable": {"thread_id": thread}})
    point = checkpoint_at(saver, first, 1)
    taken = cli("fork", first, point, "--to", second)
    assert taken.exit_code == 1
    assert f"thread '{second}' already has checkpoints" in error_line(taken)
    assert len(list(saver.list({"configurable": {"thread_id": second}}))) == 5
    unknown = cli("fork", first, "ffffffffffff")
    assert unknown.exit_code == 1 and "no checkpoint matching" in error_line(unknown)
    itself = cli("fork", first, point, "--to", first)
    assert itself.exit_code == 2 and "--to must name a new thread" in error_line(itself)


# ----------------------------------------------------------------------------- threads --where


def test_threads_where_matches_metadata_like_list_filter(
        cli: Callable[..., Result], make_saver: Callable[..., DurableSaver],
        write_mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """`threads --where user=X` lists exactly the threads whose checkpoints carry that
    metadata, as `list(filter=)` finds them, including (written behind) threads Redis
    alone holds; several --where must all match; a malformed one exits 2."""
    saver = make_saver()
    monkeypatch.setattr(saver, "_start_flusher", lambda: None)  # behind: stay in Redis
    graph = chat_graph(saver)
    tag = uuid.uuid4().hex[:6]
    made = {}
    for name, user, team in (("a1", "alice", 1), ("a2", "alice", 2), ("b1", "bob", 1)):
        made[name] = f"{name}-{tag}"
        graph.invoke({"messages": [HumanMessage("hi")]},
                     {"configurable": {"thread_id": made[name]},
                      "metadata": {"user": f"{user}-{tag}", "team": team}})
    result = cli("threads", "--where", f"user=alice-{tag}")
    assert result.exit_code == 0, result.output
    listed = {t for t in made.values() if t in result.stdout}
    assert listed == {made["a1"], made["a2"]}
    expected = {t.config["configurable"]["thread_id"]
                for t in saver.list(None, filter={"user": f"alice-{tag}"})}
    assert listed == expected
    if write_mode == "behind":
        assert cells(result.stdout, made["a1"])[4] == "redis"  # not flushed, still found
    both = cli("threads", "--where", f"user=alice-{tag}", "--where", "team=2")
    assert {t for t in made.values() if t in both.stdout} == {made["a2"]}
    assert "1 of 1 threads with metadata" in " ".join(both.stdout.split())
    none = cli("threads", "--where", "user=nobody")
    assert none.exit_code == 0 and "0 of 0 threads" in " ".join(none.stdout.split())
    bad = cli("threads", "--where", "user")
    assert bad.exit_code == 2 and "--where takes KEY=VALUE" in error_line(bad)
