"""The command line shows stored strings as they are, never as rich markup.

Thread ids, state values, tool call ids and results are user data. Read as markup, a
thread id ``chat-[/]`` would crash ``threads`` for everyone, and ``[link=…]`` or
``[bold]`` would restyle an operator's output or vanish from it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode
from typer.testing import Result

from langgraph_durable import DurableSaver, durable_tool
from tests.support.cli_runner import cli_for
from tests.support.graphs import approval_graph, chat_graph

TRICKY = ["chat-[/]", "[bold]x[/bold]", "[link=http://x]y[/link]", "emoji :thumbs_up:"]


@pytest.fixture
def cli(namespace: tuple[str, str]) -> Callable[..., Result]:
    """Run a command on this module's schema and prefix."""
    return cli_for(namespace)


def ok(result: Result) -> str:
    """The output of a command that must have succeeded."""
    assert result.exit_code == 0, (result.output, result.exception)
    return result.stdout


@pytest.mark.parametrize("thread", TRICKY)
def test_thread_ids_and_values_with_markup_are_shown_literally(
        thread: str, cli: Callable[..., Result], saver: DurableSaver) -> None:
    """threads, history, show and diff print a thread id and a message that look like
    markup exactly as stored, and none of them fails."""
    text = f"hi {' '.join(TRICKY)}"
    config = {"configurable": {"thread_id": thread}}
    graph = chat_graph(saver)
    graph.invoke({"messages": [HumanMessage("hello")]}, config)
    first = saver.get_tuple(config)
    graph.invoke({"messages": [HumanMessage(text)]}, config)
    saver.flush()
    assert first is not None
    assert thread in ok(cli("threads"))
    assert f"history of thread {thread!r}" in ok(cli("history", thread))
    shown = ok(cli("show", thread))
    assert thread in shown and f"human: {text}" in shown
    diff = ok(cli("diff", thread, first.config["configurable"]["checkpoint_id"],
                  graph.get_state(config).config["configurable"]["checkpoint_id"]))
    assert f"+ human: {text}" in diff
    pruned = ok(cli("prune", thread, "--yes"))
    assert f"{thread}: " in pruned and " → 1 checkpoints" in pruned


def test_an_interrupt_and_a_state_value_with_markup_are_shown_literally(
        cli: Callable[..., Result], saver: DurableSaver) -> None:
    """show prints a state value and the interrupt question containing ``[/]`` as they are."""
    request = "refund [/] [bold]5[/bold] [link=http://x]now[/link]"
    approval_graph(saver).invoke({"request": request, "decision": ""},
                                 {"configurable": {"thread_id": "approve-[/]"}})
    saver.flush()
    shown = ok(cli("show", "approve-[/]"))
    assert repr(request) in shown
    assert f"approve {request}?" in shown


def test_the_ledger_shows_tool_call_ids_and_results_literally(
        cli: Callable[..., Result], saver: DurableSaver) -> None:
    """ledger prints a call id and a recorded result that look like markup as they are."""

    @durable_tool(saver=saver)
    def refund(order: str) -> str:
        """Refund an order."""
        return f"[bold]refunded[/bold] {order} [/]"

    call = {"name": "refund", "args": {"order": "[link=http://x]A-1[/link]"},
            "id": "call-[/]", "type": "tool_call"}
    builder = StateGraph(MessagesState)
    builder.add_node("tools", ToolNode([refund]))
    builder.add_edge(START, "tools")
    builder.compile(checkpointer=saver).invoke(
        {"messages": [AIMessage("", tool_calls=[call])]},
        {"configurable": {"thread_id": "[bold]ledger[/bold]"}})
    out = ok(cli("ledger", "[bold]ledger[/bold]"))
    assert "tool calls of thread '[bold]ledger[/bold]'" in out
    assert "call-[/]" in out
    assert "[bold]refunded[/bold] [link=http://x]A-1[/link] [/]" in out


def test_an_error_naming_a_thread_with_markup_is_one_literal_line(
        cli: Callable[..., Result], saver: DurableSaver) -> None:
    """The one-line error for an unknown thread repeats its id exactly."""
    result = cli("history", "missing-[/][bold]")
    assert result.exit_code == 1
    assert "thread 'missing-[/][bold]' has no checkpoints" in result.stderr


@pytest.mark.parametrize("thread", TRICKY)
def test_operator_actions_show_ids_and_metadata_literally(
        thread: str, cli: Callable[..., Result], saver: DurableSaver) -> None:
    """fork prints the source and new thread ids and the config to resume with exactly as
    given; threads --where shows a metadata value that looks like markup as text; resolve
    names an unknown key that looks like markup literally, on one error line."""
    thread = f"{thread}-{uuid.uuid4().hex[:6]}"  # each write mode's run its own
    source = f"{thread}-src"
    chat_graph(saver).invoke({"messages": [HumanMessage("hi")]},
                             {"configurable": {"thread_id": source},
                              "metadata": {"note": thread}})
    forked = ok(cli("fork", source, saver.get_tuple(
        {"configurable": {"thread_id": source}}).config["configurable"]["checkpoint_id"],
        "--to", f"{thread}-new"))
    assert f"forked thread {source!r}" in forked and f"into thread '{thread}-new'" in forked
    assert f'"thread_id": "{thread}-new"' in forked
    found = ok(cli("threads", "--where", f"note={thread}"))
    assert source in found and f'with metadata {{"note": "{thread}"}}' in found
    refused = cli("resolve", thread, "retry")
    assert refused.exit_code == 1
    assert f"no tool call has key {thread!r}" in refused.stderr
