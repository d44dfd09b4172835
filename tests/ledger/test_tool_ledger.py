"""The tool ledger in one process: tools run once in a ToolNode and an agent, every result
shape replayed, conflicting keys, failures and retries, interrupts, inspection, keys
without a tool call id, misuse, and the ledger following the thread (copy, delete,
prune). Leases and concurrent callers are in ``test_tool_ledger_leases.py``, a call asked
for again in ``test_tool_ledger_reruns.py``, crash recovery across processes in
``test_tool_ledger_crash.py``."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langchain_core.tools import InjectedToolCallId, tool
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode, ToolRuntime
from langgraph.types import Command, RetryPolicy, interrupt

from langgraph_durable import (
    ConfigurationError,
    CorruptStateError,
    DurableSaver,
    IdempotencyConflictError,
    ToolCallError,
    current_idempotency_key,
    durable_tool,
)
from langgraph_durable._core.ledger.keys import derive_key
from tests.support import ledger_app as app
from tests.support.graphs import fails_once_after
from tests.support.tool_calls import echo_tool, new_thread, sql, thread_config, tool_call

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning",
                                        "ignore:.*create_react_agent.*")


def _shop(saver: DurableSaver, flavour: str, calls: list[str]) -> list[Any]:
    """``charge`` and ``lookup`` as plain sync or async functions."""
    if flavour == "sync":
        def charge(order_id: str, cents: int) -> str:
            """Charge."""
            calls.append(current_idempotency_key())
            return f"charged {cents}"

        def lookup(order_id: str) -> str:
            """Look up."""
            calls.append(current_idempotency_key())
            return f"{order_id} paid"
    else:
        async def charge(order_id: str, cents: int) -> str:  # type: ignore[misc]
            """Charge."""
            calls.append(current_idempotency_key())
            return f"charged {cents}"

        async def lookup(order_id: str) -> str:  # type: ignore[misc]
            """Look up."""
            calls.append(current_idempotency_key())
            return f"{order_id} paid"
    return [durable_tool(charge, saver=saver), durable_tool(lookup, saver=saver)]


@pytest.mark.parametrize("kind", ["graph", "agent"])
@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_tools_run_once_in_toolnode_and_agent(saver: DurableSaver, kind: str,
                                              flavour: str) -> None:
    """Sync tools under ``invoke`` and async tools under ``ainvoke``, in parallel tool calls
    of a ToolNode graph and of ``create_react_agent``: each runs once and is recorded with
    the key it saw, made of the thread, the tool-call id and the checkpoint the tool step
    ran from (the one that holds the model's message)."""
    calls: list[str] = []
    tools = _shop(saver, flavour, calls)
    graph = app.BUILDERS[kind](saver, tools)
    thread = new_thread()
    if flavour == "sync":
        result = graph.invoke(app.START_INPUT, thread_config(thread))
    else:
        result = asyncio.run(graph.ainvoke(app.START_INPUT, thread_config(thread)))
    assert "charged 1250" in str(result["messages"][-1].content)
    records = {r.tool: r for r in saver.ledger.list(thread)}
    assert {t: (r.status, r.attempts) for t, r in records.items()} == {
        "charge": ("succeeded", 1), "lookup": ("succeeded", 1)}
    assert sorted(calls) == sorted(r.key for r in records.values())
    decided = next(s.config["configurable"]["checkpoint_id"]
                   for s in graph.get_state_history(thread_config(thread)) if "tools" in s.next)
    assert records["charge"].checkpoint_id == decided
    assert records["charge"].key == saver.ledger.key_for(thread, "call_charge",
                                                         checkpoint_id=decided)
    assert records["charge"].result.content == "charged 1250"


class _ShapesState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    note: str


def test_every_result_shape_works_in_toolnode_and_replays(saver: DurableSaver) -> None:
    """Tools returning a string, a ToolMessage, content and artifact, and a Command work in a
    ToolNode (ToolRuntime and InjectedToolCallId injected); when the step runs again from
    the same checkpoint (here: it failed after the tools ran), each returns its recorded
    result without running."""
    calls: list[str] = []

    def text(x: int) -> str:
        """Text."""
        calls.append("text")
        return f"text {x}"

    def message(x: int, runtime: ToolRuntime) -> ToolMessage:
        """Message (with LangGraph's ToolRuntime injected)."""
        calls.append("message")
        assert runtime.tool_call_id is not None
        return ToolMessage(f"message {x}", tool_call_id=runtime.tool_call_id, artifact={"x": x})

    @tool(response_format="content_and_artifact")
    def artifact(x: int) -> tuple[str, dict[str, Any]]:
        """Artifact."""
        calls.append("artifact")
        return f"artifact {x}", {"raw": [x, x]}

    def command(x: int, tool_call_id: Annotated[str, InjectedToolCallId]) -> Command[Any]:
        """Command."""
        calls.append("command")
        return Command(update={"note": f"note {x}", "messages": [
            ToolMessage(f"command {x}", tool_call_id=tool_call_id)]})

    tools = [durable_tool(t, saver=saver) for t in (text, message, artifact, command)]
    tool_calls = [tool_call(t.name, {"x": i}, f"id-{t.name}") for i, t in enumerate(tools)]


    builder = StateGraph(_ShapesState)
    builder.add_node("plan", lambda s: {"messages": [AIMessage("", tool_calls=tool_calls)]})
    builder.add_node("tools", fails_once_after(ToolNode(tools)))
    builder.add_edge(START, "plan")
    builder.add_edge("plan", "tools")
    builder.add_edge("tools", END)
    thread = new_thread()
    graph = builder.compile(checkpointer=saver)
    with pytest.raises(RuntimeError, match="fails once"):
        graph.invoke({"messages": [HumanMessage("go")], "note": ""}, thread_config(thread))
    assert sorted(calls) == ["artifact", "command", "message", "text"]
    state = graph.invoke(None, thread_config(thread))
    replies = {m.tool_call_id: m for m in state["messages"] if isinstance(m, ToolMessage)}
    assert replies["id-artifact"].artifact == {"raw": [2, 2]}
    assert replies["id-message"].artifact == {"x": 1}
    assert state["note"] == "note 3" and replies["id-command"].content == "command 3"
    assert sorted(calls) == ["artifact", "command", "message", "text"]  # all replayed
    assert {r.status for r in saver.ledger.list(thread)} == {"succeeded"}


def test_same_key_with_other_arguments_or_tool_is_a_conflict(saver: DurableSaver) -> None:
    """Reusing a key with other arguments, or for another tool, raises
    `IdempotencyConflictError` instead of replaying the wrong result."""
    calls: list[int] = []
    echo = echo_tool(saver, calls)
    thread = new_thread()
    echo.invoke(tool_call("echo", {"x": 1}), thread_config(thread))
    with pytest.raises(IdempotencyConflictError) as raised:
        echo.invoke(tool_call("echo", {"x": 2}), thread_config(thread))
    assert raised.value.key == saver.ledger.key_for(thread, "c1")
    assert calls == [1]

    @durable_tool(saver=saver, key=lambda args: f"order-{thread}")
    def other(x: int) -> str:
        """Another tool with an explicit key."""
        return "other"

    first = echo_tool(saver, calls, key=lambda args: f"order-{thread}")
    first.invoke({"x": 5}, thread_config(thread))
    with pytest.raises(IdempotencyConflictError, match="tool"):
        other.invoke({"x": 5}, thread_config(thread))


def test_retryable_failure_runs_again_terminal_failure_is_replayed(saver: DurableSaver) -> None:
    """A retryable failure (ConnectionError by default) lets the same call run again; a
    terminal one is raised again from the ledger without calling the tool."""
    calls: list[str] = []

    @durable_tool(saver=saver)
    def flaky(x: int) -> str:
        """Fails once with a connection error."""
        calls.append("flaky")
        if len(calls) == 1:
            raise ConnectionError("network blip")
        return "ok"

    @durable_tool(saver=saver, retry_on=lambda exc: False)
    def declined(x: int) -> str:
        """Always declined."""
        calls.append("declined")
        raise ValueError("card declined")

    thread = new_thread()
    with pytest.raises(ConnectionError):
        flaky.invoke(tool_call("flaky", {"x": 1}), thread_config(thread))
    record = saver.ledger.get(saver.ledger.key_for(thread, "c1"))
    assert record is not None
    assert (record.status, record.retryable, record.error) == ("failed", True, "network blip")
    assert flaky.invoke(tool_call("flaky", {"x": 1}), thread_config(thread)).content == "ok"
    record = saver.ledger.get(record.key)
    assert record is not None and (record.status, record.attempts) == ("succeeded", 2)

    for _ in range(2):
        with pytest.raises(ValueError, match="card declined") as raised:
            declined.invoke(tool_call("declined", {"x": 1}, "c2"), thread_config(thread))
    assert calls == ["flaky", "flaky", "declined"]
    assert any("replayed from the tool ledger" in n for n in raised.value.__notes__)


def test_graph_retry_policy_retries_only_the_failed_call(saver: DurableSaver) -> None:
    """Under a LangGraph RetryPolicy the whole ToolNode task runs again; the ledger replays
    the sibling that already succeeded and runs only the retryable failure again."""
    calls: list[str] = []

    def charge(order_id: str, cents: int) -> str:
        """Charge, failing once."""
        calls.append("charge")
        if calls.count("charge") == 1:
            raise ConnectionError("blip")
        return "charged"

    def lookup(order_id: str) -> str:
        """Look up."""
        calls.append("lookup")
        return "paid"

    builder = StateGraph(app.State)
    builder.add_node("plan", lambda s: {"messages": [AIMessage("", tool_calls=app.CALLS)]})
    builder.add_node("tools", ToolNode([durable_tool(charge, saver=saver),
                                        durable_tool(lookup, saver=saver)]),
                     retry_policy=RetryPolicy(initial_interval=0.01, jitter=False,
                                              retry_on=ConnectionError))
    builder.add_edge(START, "plan")
    builder.add_edge("plan", "tools")
    builder.add_edge("tools", END)
    thread = new_thread()
    builder.compile(checkpointer=saver).invoke(app.START_INPUT, thread_config(thread))
    assert calls.count("charge") == 2 and calls.count("lookup") == 1
    assert {r.tool: r.attempts for r in saver.ledger.list(thread)} == {"charge": 2, "lookup": 1}


def test_interrupt_inside_a_tool_runs_it_again_on_resume(saver: DurableSaver) -> None:
    """A tool that calls ``interrupt()`` is paused, not failed for good: on resume it runs
    again, gets the answer, and its outcome is recorded."""
    calls: list[str] = []

    @durable_tool(saver=saver)
    def charge(order_id: str, cents: int) -> str:
        """Charge after approval."""
        calls.append("charge")
        answer = interrupt({"approve": order_id})
        return f"charged ({answer})"

    @durable_tool(saver=saver)
    def lookup(order_id: str) -> str:
        """Look up."""
        calls.append("lookup")
        return "paid"

    graph = app.build_graph(saver, [charge, lookup])
    thread = new_thread()
    paused = graph.invoke(app.START_INPUT, thread_config(thread))
    assert paused["__interrupt__"][0].value == {"approve": app.ORDER}
    record = {r.tool: r for r in saver.ledger.list(thread)}["charge"]
    assert (record.status, record.retryable) == ("failed", True)
    done = graph.invoke(Command(resume="yes"), thread_config(thread))
    assert "charged (yes)" in str(done["messages"][-1].content)
    records = {r.tool: r for r in saver.ledger.list(thread)}
    assert (records["charge"].status, records["charge"].attempts) == ("succeeded", 2)
    assert calls.count("lookup") == 1


async def test_ledger_inspection_sync_and_async(saver: DurableSaver) -> None:
    """``get``/``list``/``counts`` and their async twins return the same records."""
    calls: list[int] = []
    echo = echo_tool(saver, calls, retry_on=())
    thread = new_thread()
    await echo.ainvoke(tool_call("echo", {"x": 1}, "a"), thread_config(thread))
    key = saver.ledger.key_for(thread, "a")
    listed = saver.ledger.list(thread)
    assert [r.key for r in listed] == [key] == [r.key for r in await saver.ledger.alist(thread)]
    record = saver.ledger.get(key)
    assert record == await saver.ledger.aget(key) == listed[0]
    assert record is not None
    assert (record.thread_id, record.checkpoint_ns, record.tool_call_id) == (thread, "", "a")
    assert record.tool == "echo" and record.finished_at is not None and record.error is None
    assert len(record.args_fingerprint) == 64 and record.lease_owner is not None
    assert saver.ledger.get("lgd-missing") is None
    expected = {"started": 0, "succeeded": 1, "failed": 0, "uncertain": 0}
    assert saver.ledger.counts(thread) == expected == await saver.ledger.acounts(thread)
    assert saver.ledger.counts()["succeeded"] >= 1
    with pytest.raises(ToolCallError, match="nothing to settle"):
        saver.ledger.resolve(key, "failed")


def test_delete_and_copy_thread_follow_the_ledger(saver: DurableSaver) -> None:
    """Copying a thread copies its ledger under the target's keys (so the copy replays
    instead of repeating); deleting a thread deletes its ledger unless told not to;
    ``prune(strategy="delete")`` too."""
    calls: list[str] = []
    tools = _shop(saver, "sync", calls)
    thread, copy = f"fil-é-{new_thread()}-🙂", f"copie-{new_thread()}"
    app.build_graph(saver, tools).invoke(app.START_INPUT, thread_config(thread))
    saver.copy_thread(thread, copy)
    copied = {r.tool: r for r in saver.ledger.list(copy)}
    step = copied["charge"].checkpoint_id
    assert step is not None and step == {r.tool: r for r in saver.ledger.list(thread)}[
        "charge"].checkpoint_id  # the copied checkpoints keep their ids
    assert copied["charge"].key == saver.ledger.key_for(copy, "call_charge", checkpoint_id=step)
    assert copied["charge"].key == derive_key(copy, "", "call_charge", step)
    assert len(calls) == 2
    saver.delete_thread(thread)
    assert saver.ledger.list(thread) == [] and len(saver.ledger.list(copy)) == 2
    saver.delete_thread(copy, keep_ledger=True)
    assert len(saver.ledger.list(copy)) == 2
    saver.prune([copy], strategy="delete")
    assert saver.ledger.list(copy) == []


def test_a_fork_of_a_run_that_stored_only_its_end_keeps_the_calls_it_holds(
        saver: DurableSaver) -> None:
    """Under ``durability="exit"`` a run stores only its last checkpoint, so the
    checkpoint its tools ran from never reaches Postgres. A fork at that last checkpoint
    (`langgraph-durable fork`) holds the calls' results in its state, and its ledger
    keeps their records as the source's does (before, a record went only with its step's
    checkpoint, so a fork of such a run lost the record of every call it held). A fork
    before the tools' step leaves them out, so its run makes its own."""
    calls: list[str] = []
    thread = new_thread()
    graph = app.build_graph(saver, _shop(saver, "sync", calls))
    graph.invoke(app.START_INPUT, thread_config(thread), durability="exit")
    head = saver.get_tuple(thread_config(thread))
    assert head is not None
    records = {r.tool: r for r in saver.ledger.list(thread)}
    ran_from = records["charge"].checkpoint_id
    assert ran_from is not None and saver.get_tuple(
        {"configurable": {"thread_id": thread, "checkpoint_id": ran_from}}) is None
    at_end, before = f"{thread}-end", f"{thread}-before"
    saver.copy_thread(thread, at_end, up_to=head.config["configurable"]["checkpoint_id"])
    assert {r.tool: (r.status, r.idempotency_key) for r in saver.ledger.list(at_end)} == {
        tool: ("succeeded", r.key) for tool, r in records.items()}
    stepped = new_thread()  # stored step by step: a fork before the tools' step
    graph.invoke(app.START_INPUT, thread_config(stepped))
    tools_from = {r.tool: r for r in saver.ledger.list(stepped)}["charge"].checkpoint_id
    step = saver.get_tuple({"configurable": {"thread_id": stepped, "checkpoint_id": tools_from}})
    assert step is not None and step.parent_config is not None
    saver.copy_thread(stepped, before,
                      up_to=step.parent_config["configurable"]["checkpoint_id"])
    assert saver.ledger.list(before) == []


def test_damaged_result_raises_corrupt_state_error(saver: DurableSaver,
                                                   namespace: tuple[str, str]) -> None:
    """A stored result carries a checksum: a flipped byte is reported, never replayed."""
    echo = echo_tool(saver, [])
    thread = new_thread()
    echo.invoke(tool_call("echo", {"x": 1}), thread_config(thread))
    sql(f'UPDATE "{namespace[0]}".lgd_tool_calls SET result = '
        "overlay(result placing '\\xff'::bytea from 20 for 1) WHERE thread_id = %s", thread)
    with pytest.raises(CorruptStateError, match="damaged"):
        echo.invoke(tool_call("echo", {"x": 1}), thread_config(thread))


def test_calls_without_a_tool_call_id_use_task_position_or_explicit_key(
        saver: DurableSaver) -> None:
    """Inside a node, calls without a tool call id are keyed by task id and position; an
    explicit ``key=`` is used as is, across threads."""
    calls: list[int] = []
    echo = echo_tool(saver, calls)
    keyed = echo_tool(saver, calls, key=lambda args: f"refund-{args['x']}-{run}")
    run = new_thread()

    def node(state: app.State) -> dict[str, Any]:
        echo.invoke({"x": 1})
        echo.invoke({"x": 2})
        keyed.invoke({"x": 3})
        return {"messages": [AIMessage("ok")]}

    builder = StateGraph(app.State)
    builder.add_node("node", node)
    builder.add_edge(START, "node")
    builder.add_edge("node", END)
    graph = builder.compile(checkpointer=saver)
    threads = [new_thread(), new_thread()]
    for thread in threads:
        graph.invoke(app.START_INPUT, thread_config(thread))
    records = saver.ledger.list(threads[0])
    tasks = {r.task_id for r in records if r.key.startswith("lgd-")}
    assert len(tasks) == 1 and all(r.tool_call_id is None for r in records)
    task = tasks.pop()
    assert task is not None
    step = next(r.checkpoint_id for r in records if r.key.startswith("lgd-"))
    assert {r.key for r in records} == {
        derive_key(threads[0], "", f"task:{task}:0", step),
        derive_key(threads[0], "", f"task:{task}:1", step), f"refund-3-{run}"}
    assert calls == [1, 2, 3, 1, 2]  # the explicit key ran once for both threads


def test_misuse_is_reported(saver: DurableSaver) -> None:
    """Invalid options, a missing saver or thread, and `current_idempotency_key` outside a
    call raise clear errors."""
    with pytest.raises(ConfigurationError):
        durable_tool(saver=saver, on_uncertain="later")  # type: ignore[call-overload]
    with pytest.raises(ConfigurationError):
        durable_tool(saver=saver, lease=0)
    with pytest.raises(ToolCallError):
        current_idempotency_key()
    def identity(x: int) -> int:
        """Identity."""
        return x

    orphan = durable_tool(identity)
    with pytest.raises(ConfigurationError, match="DurableSaver"):
        orphan.invoke(tool_call(orphan.name, {"x": 1}), thread_config(new_thread()))
    echo = echo_tool(saver, [])
    with pytest.raises(ConfigurationError, match="thread_id"):
        echo.invoke(tool_call("echo", {"x": 1}), {})


def test_a_call_whose_step_redis_lost_fails_at_once_not_after_write_deadline(
    namespace: tuple[str, str], tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Written behind, the checkpoint that decided a durable tool's step is lost before it
    reached Postgres (Redis restarts from a snapshot taken before it). The tool does not
    run, and says so as soon as a drain shows the checkpoint in neither tier, instead of
    polling Postgres for ``write_deadline`` (a worker agent that retries failed tools
    waited that long on every call)."""
    import time

    from langgraph_durable._core import journal
    from tests.support.faults import PrivateRedis
    from tests.support.graphs import CHARGE_CALL, charge_card_graph
    from tests.support.servers import POSTGRES_URL

    server = PrivateRedis(tmp_path)
    server.start()
    schema, prefix = namespace
    saver = DurableSaver(server.url, POSTGRES_URL, key_prefix=prefix, schema=schema,
                         write_mode="behind", write_deadline=30.0, background_flush=False)
    try:
        saver.setup()
        server.save()  # nothing of the thread in it
        drain = journal.flush
        restarted: list[bool] = []

        def lost_then_drain(*args: Any, **kwargs: Any) -> Any:
            if not restarted:  # the step's checkpoint is in Redis alone: lose it
                restarted.append(True)
                server.kill()
                server.start()
            return (yield from drain(*args, **kwargs))

        monkeypatch.setattr(journal, "flush", lost_then_drain)
        calls: list[int] = []
        graph = charge_card_graph(saver, calls)
        started = time.monotonic()
        with pytest.raises(ToolCallError, match="neither in Postgres nor in Redis's journal"):
            graph.invoke({"messages": [AIMessage("", tool_calls=[CHARGE_CALL])]},
                         thread_config(new_thread()), durability="sync")
        assert time.monotonic() - started < 10.0
        assert restarted and calls == []
    finally:
        saver.close()
        server.stop()


def test_a_call_whose_step_never_reaches_postgres_gives_up_within_write_deadline(
    make_saver: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Written behind, a durable tool first waits for the checkpoint that decided its step
    to reach Postgres, draining the journal at each look. When it never does (here each
    drain takes 0.3 s and moves nothing), the tool does not run and `ToolCallError` comes
    within ``write_deadline`` of wall time. (The bound once counted only the pauses
    between looks, not the drains: a tool in the chaos soak waited 12 minutes instead of
    30 s.)"""
    import time

    from langgraph_durable._core import journal
    from tests.support.graphs import CHARGE_CALL, charge_card_graph

    saver = make_saver(write_mode="behind", write_deadline=1.0, flush_interval=3600)

    def slow_drain(*args: Any, **kwargs: Any) -> Any:
        time.sleep(0.3)
        return 0
        yield  # a generator, as the real one is

    monkeypatch.setattr(journal, "flush", slow_drain)
    calls: list[int] = []
    graph = charge_card_graph(saver, calls)
    started = time.monotonic()
    with pytest.raises(ToolCallError, match="write_deadline"):
        graph.invoke({"messages": [AIMessage("", tool_calls=[CHARGE_CALL])]},
                     thread_config(new_thread()))
    assert time.monotonic() - started < 3.0
    assert calls == []
