"""Every table stays readable in an 80-column terminal: no column disappears, long cells
fold or show a short id. (Piped output is not wrapped at all: `test_cli_piped.py`.)"""

from __future__ import annotations

import io
import re
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode
from rich.console import Console
from typer.testing import Result

from langgraph_durable import DurableSaver, durable_tool
from langgraph_durable._cli import views
from tests.support.cli_runner import cli_for
from tests.support.graphs import chat_graph, subgraph_graph


@pytest.fixture
def cli80(namespace: tuple[str, str]) -> Callable[..., Result]:
    """Run a command 80 columns wide on this module's schema and prefix."""
    cli = cli_for(namespace, columns=80)

    def run(*args: str) -> Result:
        result = cli(*args)
        assert result.exit_code == 0, result.output
        assert max(map(len, result.stdout.splitlines())) <= 80
        return result

    return run


def table(output: str, key: int = 0) -> tuple[list[str], list[list[str]]]:
    """A rendered table's column headers (wrapped headers joined) and its rows (each
    cell's wrapped lines joined, with no separator: a folded id comes back whole); a row
    starts on each line where column ``key`` (one that never wraps) has a value."""
    lines = output.splitlines()
    top = next(i for i, line in enumerate(lines) if line.startswith("┏"))
    rule = next(i for i, line in enumerate(lines) if line.startswith("┡"))
    bottom = next(i for i, line in enumerate(lines) if line.startswith("└"))

    def cells(line: str, bar: str) -> list[str]:
        return [c.strip() for c in line.strip()[1:-1].split(bar)]

    head = [cells(line, "┃") for line in lines[top + 1:rule]]
    headers = [" ".join(p for p in parts if p) for parts in zip(*head, strict=True)]
    rows: list[list[str]] = []
    for line in lines[rule + 1:bottom]:
        parts = cells(line, "│")
        if parts[key] or not rows:
            rows.append(parts)
        else:  # a continuation line of the row above
            rows[-1] = [a + b for a, b in zip(rows[-1], parts, strict=True)]
    return headers, rows


def chat(saver: DurableSaver, thread: str) -> None:
    """Five checkpoints on ``thread``, flushed."""
    chat_graph(saver).invoke({"messages": [HumanMessage("hi")]},
                             {"configurable": {"thread_id": thread}})
    saver.flush()


def test_history_keeps_every_column_and_shows_short_ids(cli80: Callable[..., Result],
                                                        saver: DurableSaver) -> None:
    """At 80 columns history shows step, checkpoint, source, channels, time, bytes,
    writes and redis for every checkpoint; each id is its last 10 characters, which
    `show` accepts."""
    thread = f"t-{uuid.uuid4().hex[:8]}"
    chat(saver, thread)
    ids = [t.config["configurable"]["checkpoint_id"]
           for t in saver.list({"configurable": {"thread_id": thread}})]
    headers, rows = table(cli80("history", thread).stdout)
    assert headers == ["step", "checkpoint", "source", "updated channels", "time", "added",
                       "writes", "redis"]
    assert [r[0] for r in rows] == ["3", "2", "1", "0", "-1"]
    assert [r[1] for r in rows] == [i[-10:] for i in ids]
    assert [r[2] for r in rows] == ["loop"] * 4 + ["input"]
    assert all(r[3] and r[4] and r[5] and r[6] and r[7] for r in rows)
    shown = cli80("show", thread, rows[-1][1])
    assert ids[-1] in shown.stdout


def test_history_of_a_subgraph_keeps_its_namespace_column(cli80: Callable[..., Result],
                                                          saver: DurableSaver) -> None:
    """With a namespace column too, nothing is dropped at 80 columns: namespaces and
    times fold, whole."""
    thread = f"t-{uuid.uuid4().hex[:8]}"
    subgraph_graph(saver).invoke({"messages": [HumanMessage("hi")]},
                                 {"configurable": {"thread_id": thread}})
    saver.flush()
    headers, rows = table(cli80("history", thread).stdout)
    assert [h.replace(" ", "") for h in headers] == [  # narrow columns fold their headers
        "step", "checkpoint", "namespace", "source", "updatedchannels", "time", "added",
        "writes", "redis"]
    assert {r[2].partition(":")[0] for r in rows} == {"(root)", "child"}
    assert {r[3] for r in rows} == {"loop", "input"}
    assert all(r[0] and re.fullmatch(r"\d\d:\d\d:\d\d", r[5]) for r in rows)


def test_threads_folds_a_long_thread_id_and_keeps_every_column(
        cli80: Callable[..., Result], saver: DurableSaver) -> None:
    """A 70-character thread id folds onto several lines; every header and value shows."""
    thread = f"customer-12345-conversation-67890-{uuid.uuid4().hex}"
    chat(saver, thread)
    headers, rows = table(cli80("threads").stdout, key=1)
    assert headers == ["thread", "checkpoints", "size", "last update", "stored in",
                       "unflushed"]
    row = next(r for r in rows if r[0] == thread)
    assert row[1] == "5" and row[4] == "redis,postgres" and row[5] == "0"


def ledger_row(cli80: Callable[..., Result], saver: DurableSaver, builder: Any,
               call: dict[str, Any]) -> list[str]:
    """Run ``builder``'s graph on a new thread with an AI message asking for ``call``; the
    one row `ledger` shows at 80 columns, after checking it kept all seven columns."""
    thread = f"t-{uuid.uuid4().hex[:8]}"
    builder.compile(checkpointer=saver).invoke(
        {"messages": [AIMessage("", tool_calls=[call])]}, {"configurable": {"thread_id": thread}})
    headers, rows = table(cli80("ledger", thread).stdout, key=2)
    assert headers == ["tool", "call", "status", "attempts", "started", "finished",
                       "result / error"]
    (row,) = rows
    return row


def test_ledger_keeps_every_column(cli80: Callable[..., Result], saver: DurableSaver) -> None:
    """The ledger of a call with a long tool name, call id and result keeps all seven
    columns at 80 columns."""

    @durable_tool(saver=saver)
    def charge_customer_card_for_order(order_id: str) -> str:
        """Charge a card."""
        return f"charged order {order_id}; receipt rcpt-{'x' * 40}"

    call = {"name": "charge_customer_card_for_order", "args": {"order_id": "A-1"},
            "id": f"call_{uuid.uuid4().hex}", "type": "tool_call"}
    builder = StateGraph(MessagesState)
    builder.add_node("tools", ToolNode([charge_customer_card_for_order]))
    builder.add_edge(START, "tools")
    row = ledger_row(cli80, saver, builder, call)
    assert row[0] == "charge_customer_card_for_order" and row[1] == call["id"]
    assert row[2:4] == ["succeeded", "1"] and row[4] and row[5]
    assert row[6].startswith("chargedorderA-1;receiptrcpt-xxx")  # words wrapped


def test_ledger_of_subgraph_calls_names_the_subgraph(cli80: Callable[..., Result],
                                                     saver: DurableSaver) -> None:
    """A call a durable tool made inside a subgraph (a worker agent) says, under the tool's
    name, which subgraph made it (its node name, without the task id); every column stays."""

    @durable_tool(saver=saver)
    def hold_seat(flight: str) -> str:
        """Hold a seat."""
        return f"seat held on {flight}"

    worker = StateGraph(MessagesState)
    worker.add_node("tools", ToolNode([hold_seat]))
    worker.add_edge(START, "tools")
    builder = StateGraph(MessagesState)
    builder.add_node("researcher", worker.compile())
    builder.add_edge(START, "researcher")
    call = {"name": "hold_seat", "args": {"flight": "LH 454"}, "id": "call_seat",
            "type": "tool_call"}
    row = ledger_row(cli80, saver, builder, call)
    assert row[0] == "hold_seatinresearcher"  # "hold_seat", then "in researcher" below it
    assert row[1:4] == ["call_seat", "succeeded", "1"]


def test_the_demos_history_fits_80_columns_with_its_note() -> None:
    """The demo's compact history (with the 'resumed from' note) in an 80-column console
    keeps step, checkpoint, source, time, bytes and the note."""
    ids = [str(uuid.uuid4()) for _ in range(3)]
    rows = [views.HistoryRow(checkpoint_id=cid, checkpoint_ns="", step=step, source=source,
                             updated_channels=("messages",),
                             time=datetime(2026, 1, 2, 10, 11, 12, tzinfo=UTC), added_bytes=900,
                             pending_writes=0, interrupts=0, hot=True)
            for cid, step, source in zip(ids, (1, 0, -1), ("loop", "loop", "input"),
                                         strict=True)]
    out = io.StringIO()
    Console(file=out, width=80).print(views.history_table(
        "history of thread 'order-1'", rows, {ids[1]: "◀ resumed from"}, compact=True,
        width=80))
    headers, cells = table(out.getvalue())
    assert headers == ["step", "checkpoint", "source", "time", "added", ""]
    assert [c[0] for c in cells] == ["1", "0", "-1"]
    assert [c[2] for c in cells] == ["loop", "loop", "input"]
    assert cells[1][5] == "◀ resumed from"
    assert all(len(line) <= 80 for line in out.getvalue().splitlines())
