"""``--json`` on the read commands, against the real servers: each test stores something
(checkpoints, tool calls, a dead letter), runs the command with ``--json``, parses standard
output with `json.loads` and checks the documented field names and their values."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from typer.testing import Result

from langgraph_durable import DurableSaver
from tests.support.checkpoints import put_value, refusing
from tests.support.cli_runner import cli_for
from tests.support.graphs import CHARGE_CALL, approval_graph, charge_card_graph, chat_graph

THREAD_FIELDS = {"thread_id", "checkpoints", "namespaces", "bytes", "last_update", "in_redis",
                 "in_postgres", "unflushed"}
CHECKPOINT_FIELDS = {"checkpoint_id", "checkpoint_ns", "step", "source", "updated_channels",
                     "time", "added_bytes", "pending_writes", "interrupts", "in_redis"}
CALL_FIELDS = {"key", "idempotency_key", "thread_id", "checkpoint_ns", "tool", "tool_call_id",
               "task_id", "status", "attempts", "started_at", "finished_at", "lease_owner",
               "lease_expires_at", "error", "error_type", "retryable", "duplicate_of",
               "args_fingerprint"}


@pytest.fixture
def write_mode() -> str:
    """Write-through: these tests are about the output, not the write path."""
    return "through"


@pytest.fixture
def cli(namespace: tuple[str, str]) -> Callable[..., Result]:
    """``langgraph-durable`` on this module's schema and prefix, 80 columns wide (JSON is
    never wrapped to it)."""
    return cli_for(namespace, columns=80)


def document(result: Result) -> Any:
    """The one JSON document a command printed: one line, no colour codes, nothing else."""
    assert result.exit_code == 0, result.output
    assert result.stdout.count("\n") == 1 and result.stdout.endswith("\n"), result.stdout
    assert "\x1b" not in result.stdout
    return json.loads(result.stdout)


def utc(text: str) -> datetime:
    """An ISO 8601 time the CLI printed, checked to be in UTC."""
    moment = datetime.fromisoformat(text)
    assert moment.utcoffset() == timedelta(0), text
    return moment


def odd_thread() -> str:
    """A thread id with spaces, quotes, markup and characters beyond ASCII."""
    return f"order 7 · café ☕ \"[bold]x[/]\" {uuid.uuid4().hex[:6]}"


def chat(saver: DurableSaver, thread: str) -> list[str]:
    """Run the chat graph (5 checkpoints) on ``thread``; its checkpoint ids, newest first."""
    chat_graph(saver).invoke({"messages": [HumanMessage("hi")]},
                             {"configurable": {"thread_id": thread}})
    return [t.config["configurable"]["checkpoint_id"]
            for t in saver.list({"configurable": {"thread_id": thread}})]


def test_threads_json_lists_each_thread_with_documented_fields(
        cli: Callable[..., Result], saver: DurableSaver) -> None:
    """A thread with spaces and non-ASCII characters in its id comes back whole, with its 5
    checkpoints, its bytes as an integer and its last update in UTC."""
    thread = odd_thread()
    chat(saver, thread)
    before = datetime.now(UTC)
    doc = document(cli("threads", "--json", "--limit", "1000"))
    assert set(doc) == {"threads", "total", "where", "schema", "prefix",
                        "unflushed_journal_entries"}
    assert doc["schema"] == saver.config.schema and doc["where"] == {}
    assert doc["total"] >= len(doc["threads"]) >= 1
    (row,) = [r for r in doc["threads"] if r["thread_id"] == thread]
    assert set(row) == THREAD_FIELDS
    assert (row["checkpoints"], row["namespaces"], row["in_postgres"], row["unflushed"]) == (
        5, 1, True, 0)
    assert isinstance(row["bytes"], int) and row["bytes"] > 0
    assert isinstance(row["in_redis"], bool)
    assert abs(utc(row["last_update"]) - before) < timedelta(minutes=1)
    matching = document(cli("threads", "--json", "--where", "source=input"))
    assert matching["where"] == {"source": "input"}
    assert thread in [r["thread_id"] for r in matching["threads"]]


def test_history_json_gives_whole_checkpoint_ids_newest_first(
        cli: Callable[..., Result], saver: DurableSaver) -> None:
    """history --json lists the checkpoints saver.list gives, ids whole, steps as numbers."""
    thread = odd_thread()
    ids = chat(saver, thread)
    doc = document(cli("history", thread, "--json"))
    assert doc["thread_id"] == thread and doc["checkpoint_ns"] is None
    rows = doc["checkpoints"]
    assert all(set(r) == CHECKPOINT_FIELDS for r in rows)
    assert [r["checkpoint_id"] for r in rows] == ids
    assert [r["step"] for r in rows] == [3, 2, 1, 0, -1]
    assert [r["source"] for r in rows] == ["loop"] * 4 + ["input"]
    assert rows[0]["updated_channels"] == ["messages"]
    assert all(isinstance(r["added_bytes"], int) and r["checkpoint_ns"] == "" for r in rows)
    assert utc(rows[0]["time"]) >= utc(rows[-1]["time"])


def test_show_json_gives_values_pending_writes_and_interrupts(
        cli: Callable[..., Result], saver: DurableSaver) -> None:
    """Messages come as their JSON dump; a value with no JSON form (a set) comes as its repr
    under ``values_repr``; pending writes and interrupts carry their values."""
    thread = odd_thread()
    config = put_value(saver, thread, {"seen": {1, 2}})
    saver.put_writes(config, [("value", [1, "two"]), ("other", {3})], "task-1")  # type: ignore[arg-type]
    doc = document(cli("show", thread, "--json"))
    assert doc["thread_id"] == thread and doc["checkpoint_ns"] == ""
    assert doc["checkpoint_id"] == config["configurable"]["checkpoint_id"]  # type: ignore[index]
    assert doc["values"] == {} and doc["values_repr"] == {"value": repr({"seen": {1, 2}})}
    assert doc["pending_writes"] == [
        {"task_id": "task-1", "channel": "value", "value": [1, "two"]},
        {"task_id": "task-1", "channel": "other", "value_repr": repr({3})}]
    assert doc["interrupts"] == [] and doc["parent_checkpoint_id"] is None

    chatted = odd_thread()
    ids = chat(saver, chatted)
    doc = document(cli("show", chatted, ids[-1][-12:], "--json"))
    assert doc["checkpoint_id"] == ids[-1] and doc["step"] == -1 and doc["source"] == "input"
    assert doc["metadata"]["source"] == "input"
    utc(doc["time"])
    latest = document(cli("show", chatted, "--json"))
    assert latest["parent_checkpoint_id"] == ids[1]
    assert [(m["type"], m["content"]) for m in latest["values"]["messages"]] == [
        ("human", "hi"), ("ai", "plan #1"), ("ai", "act #2"), ("ai", "finish #3")]

    paused = odd_thread()
    approval_graph(saver).invoke({"request": "refund $5", "decision": ""},
                                 {"configurable": {"thread_id": paused}})
    doc = document(cli("show", paused, "--json"))
    assert doc["values"]["request"] == "refund $5"
    (question,) = doc["interrupts"]
    assert question["value"] == {"question": "approve refund $5?"} and question["id"]


def test_diff_json_gives_the_appended_messages(cli: Callable[..., Result],
                                               saver: DurableSaver) -> None:
    """diff --json names both checkpoints whole and lists the messages appended between."""
    thread = odd_thread()
    ids = chat(saver, thread)
    doc = document(cli("diff", thread, ids[3], ids[0], "--json"))
    assert doc["thread_id"] == thread and doc["checkpoint_ns"] == ""
    assert doc["from"] == {"checkpoint_id": ids[3], "step": 0}
    assert doc["to"] == {"checkpoint_id": ids[0], "step": 3}
    (change,) = doc["changes"]
    assert (change["channel"], change["kind"], change["before_length"]) == (
        "messages", "appended", 1)
    assert [m["content"] for m in change["appended"]] == ["plan #1", "act #2", "finish #3"]
    assert document(cli("diff", thread, ids[0], ids[0], "--json"))["changes"] == []


def test_ledger_json_gives_each_call_whole(cli: Callable[..., Result],
                                           saver: DurableSaver) -> None:
    """ledger --json gives the call's whole key, status, attempts, times and result."""
    thread = odd_thread()
    charge_card_graph(saver).invoke({"messages": [AIMessage("", tool_calls=[CHARGE_CALL])]},
                                    {"configurable": {"thread_id": thread}})
    (record,) = saver.ledger.list(thread)
    doc = document(cli("ledger", thread, "--json"))
    assert doc["thread_id"] == thread
    (call,) = doc["calls"]
    assert set(call) == CALL_FIELDS | {"result"}
    assert (call["key"], call["idempotency_key"]) == (record.key, record.key)
    assert (call["tool"], call["tool_call_id"], call["status"], call["attempts"]) == (
        "charge_card", "call_1", "succeeded", 1)
    assert call["result"]["content"] == "charged 500 for A-1"
    assert call["result"]["type"] == "tool"
    assert utc(call["started_at"]) <= utc(call["finished_at"])
    assert call["lease_expires_at"] is None and call["error"] is None


def test_doctor_json_lists_each_check(cli: Callable[..., Result], saver: DurableSaver) -> None:
    """On working servers: every check with a status, and the exit code it exits with."""
    result = cli("doctor", "--json")
    assert result.exit_code in (0, 4), result.output
    doc = json.loads(result.stdout)
    assert set(doc) == {"checks", "exit_code"} and doc["exit_code"] == result.exit_code
    assert all(set(c) == {"name", "status", "detail"} for c in doc["checks"])
    status = {c["name"]: c["status"] for c in doc["checks"]}
    assert status["redis"] == status["postgres"] == status["schema"] == "ok"
    assert set(status.values()) <= {"ok", "warn", "fail", "info"}


def test_doctor_json_on_an_unreachable_postgres_exits_3_and_shows_no_password(
        cli: Callable[..., Result]) -> None:
    """A Postgres URL with a password nothing listens on: exit code 3, one line on stderr,
    the JSON document on stdout, and the password in neither."""
    result = cli("doctor", "--json",
                 "--postgres-url", "postgresql://admin:hunter2-secret@127.0.0.1:1/test")
    assert result.exit_code == 3
    assert "hunter2" not in result.stdout + result.stderr
    assert len([line for line in result.stderr.splitlines() if line.strip()]) == 1
    assert result.stderr.startswith("error: cannot connect to Postgres")
    doc = json.loads(result.stdout)
    assert doc["exit_code"] == 3
    (postgres,) = [c for c in doc["checks"] if c["name"] == "postgres"]
    assert postgres["status"] == "fail" and "admin:***@127.0.0.1:1" in postgres["detail"]


def test_errors_stay_one_line_on_stderr_with_json(cli: Callable[..., Result],
                                                  saver: DurableSaver) -> None:
    """An unknown thread under --json: nothing on stdout, one error line, exit code 1."""
    for command in ("history", "show", "ledger"):
        result = cli(command, "no such thread", "--json")
        assert result.exit_code == 1 and result.stdout == ""
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_dead_letters_list_json(namespace: tuple[str, str],
                                make_saver: Callable[..., DurableSaver]) -> None:
    """A checkpoint Postgres refused is listed with its whole thread and checkpoint ids, its
    size in bytes and Postgres' reason."""
    saver = make_saver(write_mode="behind", flush_interval=3600.0)
    cli = cli_for(namespace)
    refused = odd_thread()
    with refusing(saver, refused):
        config = put_value(saver, refused, "refused value")
        saver.flush()
    doc = document(cli("dead-letters", "list", "--json"))
    assert doc["prefix"] == saver.config.key_prefix
    (letter,) = [d for d in doc["dead_letters"] if d["thread_id"] == refused]
    assert set(letter) == {"id", "entry_id", "kind", "thread_id", "checkpoint_ns",
                           "checkpoint_id", "bytes", "reason"}
    assert letter["checkpoint_id"] == config["configurable"]["checkpoint_id"]  # type: ignore[index]
    assert letter["kind"] == "checkpoint" and isinstance(letter["bytes"], int)
    assert "lgd_test_refuse" in letter["reason"]
    assert cli("dead-letters", "drop", letter["id"]).exit_code == 0
    remaining = document(cli("dead-letters", "list", "--json"))["dead_letters"]
    assert letter["id"] not in [d["id"] for d in remaining]
