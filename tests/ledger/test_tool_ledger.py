"""The tool ledger in one process: replay, failures, leases, duplicates, inspection, and
retention following the thread. Crash recovery across processes is in
``test_tool_ledger_crash.py``."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import threading
import time
import uuid
from typing import Annotated, Any, TypedDict

import psycopg
import pytest
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langchain_core.tools import InjectedToolCallId, tool
from langgraph.config import get_config
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode, ToolRuntime
from langgraph.types import Command, RetryPolicy, Send, interrupt

from langgraph_durable import (
    ConfigurationError,
    CorruptStateError,
    DurableSaver,
    IdempotencyConflictError,
    ToolCallError,
    ToolCallInProgressError,
    ToolOutcomeUncertainError,
    current_idempotency_key,
    durable_tool,
)
from langgraph_durable._core.ledger.keys import derive_key
from langgraph_durable._tiers.host import owner_gone, process_owner
from tests.support import ledger_app as app
from tests.support.graphs import model_then_tool_graph
from tests.support.servers import POSTGRES_URL

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning",
                                        "ignore:.*create_react_agent.*")


def _call(name: str, args: dict[str, Any], call_id: str = "c1") -> dict[str, Any]:
    return {"type": "tool_call", "name": name, "args": args, "id": call_id}


def _config(thread: str) -> Any:
    return {"configurable": {"thread_id": thread}}


def _thread() -> str:
    return uuid.uuid4().hex


def _sql(query: str, *params: Any) -> list[Any]:
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        cursor = conn.execute(query, params)
        return cursor.fetchall() if cursor.description else []


def _cut_off(schema: str, key: str) -> None:
    """Make the finished call ``key`` look cut off mid-call: ``started``, its result gone,
    its lease held by a process of this host that has exited."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    _sql(f'UPDATE "{schema}".lgd_tool_calls SET status = \'started\', '
         "result = NULL, finished_at = NULL, lease_owner = %s, "
         "lease_expires_at = clock_timestamp() + interval '60 seconds' WHERE key = %s",
         f"{process_owner().host}:{gone.pid}:0123", key)


def _echo(saver: DurableSaver, calls: list[Any], **options: Any) -> Any:
    @durable_tool(saver=saver, **options)
    def echo(x: int) -> str:
        """Echo x."""
        calls.append(x)
        return f"echo {x}"
    return echo


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
    of a ToolNode graph and of ``create_react_agent``: each runs once, is recorded with the
    key it saw, and a later call with the same key replays without running."""
    calls: list[str] = []
    tools = _shop(saver, flavour, calls)
    graph = app.BUILDERS[kind](saver, tools)
    thread = _thread()
    if flavour == "sync":
        result = graph.invoke(app.START_INPUT, _config(thread))
    else:
        result = asyncio.run(graph.ainvoke(app.START_INPUT, _config(thread)))
    assert "charged 1250" in str(result["messages"][-1].content)
    records = {r.tool: r for r in saver.ledger.list(thread)}
    assert {t: (r.status, r.attempts) for t, r in records.items()} == {
        "charge": ("succeeded", 1), "lookup": ("succeeded", 1)}
    assert sorted(calls) == sorted(r.key for r in records.values())
    assert records["charge"].key == saver.ledger.key_for(thread, "call_charge")
    assert records["charge"].result.content == "charged 1250"
    again = tools[0].invoke(app.CALLS[0], _config(thread)) if flavour == "sync" else (
        asyncio.run(tools[0].ainvoke(app.CALLS[0], _config(thread))))
    assert again.content == "charged 1250" and again.tool_call_id == "call_charge"
    assert len(calls) == 2


class _ShapesState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    note: str


def test_every_result_shape_works_in_toolnode_and_replays(saver: DurableSaver) -> None:
    """Tools returning a string, a ToolMessage, content and artifact, and a Command work in a
    ToolNode (ToolRuntime and InjectedToolCallId injected); invoked again with the same key,
    each returns its recorded result without running."""
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
    tool_calls = [_call(t.name, {"x": i}, f"id-{t.name}") for i, t in enumerate(tools)]

    builder = StateGraph(_ShapesState)
    builder.add_node("plan", lambda s: {"messages": [AIMessage("", tool_calls=tool_calls)]})
    builder.add_node("tools", ToolNode(tools))
    builder.add_edge(START, "plan")
    builder.add_edge("plan", "tools")
    builder.add_edge("tools", END)
    thread = _thread()
    state = builder.compile(checkpointer=saver).invoke(
        {"messages": [HumanMessage("go")], "note": ""}, _config(thread))
    replies = {m.tool_call_id: m for m in state["messages"] if isinstance(m, ToolMessage)}
    assert replies["id-artifact"].artifact == {"raw": [2, 2]}
    assert replies["id-message"].artifact == {"x": 1}
    assert state["note"] == "note 3" and replies["id-command"].content == "command 3"
    assert sorted(calls) == ["artifact", "command", "message", "text"]
    for t, call in zip(tools, tool_calls, strict=True):
        replayed = t.invoke(call, _config(thread))
        if isinstance(replayed, Command):
            assert replayed.update["note"] == "note 3"  # type: ignore[index]
        else:
            assert replayed.content == replies[call["id"]].content
            assert replayed.artifact == replies[call["id"]].artifact
    assert len(calls) == 4


def test_same_key_with_other_arguments_or_tool_is_a_conflict(saver: DurableSaver) -> None:
    """Reusing a key with other arguments, or for another tool, raises
    `IdempotencyConflictError` instead of replaying the wrong result."""
    calls: list[int] = []
    echo = _echo(saver, calls)
    thread = _thread()
    echo.invoke(_call("echo", {"x": 1}), _config(thread))
    with pytest.raises(IdempotencyConflictError) as raised:
        echo.invoke(_call("echo", {"x": 2}), _config(thread))
    assert raised.value.key == saver.ledger.key_for(thread, "c1")
    assert calls == [1]

    @durable_tool(saver=saver, key=lambda args: f"order-{thread}")
    def other(x: int) -> str:
        """Another tool with an explicit key."""
        return "other"

    first = _echo(saver, calls, key=lambda args: f"order-{thread}")
    first.invoke({"x": 5}, _config(thread))
    with pytest.raises(IdempotencyConflictError, match="tool"):
        other.invoke({"x": 5}, _config(thread))


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

    thread = _thread()
    with pytest.raises(ConnectionError):
        flaky.invoke(_call("flaky", {"x": 1}), _config(thread))
    record = saver.ledger.get(saver.ledger.key_for(thread, "c1"))
    assert record is not None
    assert (record.status, record.retryable, record.error) == ("failed", True, "network blip")
    assert flaky.invoke(_call("flaky", {"x": 1}), _config(thread)).content == "ok"
    record = saver.ledger.get(record.key)
    assert record is not None and (record.status, record.attempts) == ("succeeded", 2)

    for _ in range(2):
        with pytest.raises(ValueError, match="card declined") as raised:
            declined.invoke(_call("declined", {"x": 1}, "c2"), _config(thread))
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
    thread = _thread()
    builder.compile(checkpointer=saver).invoke(app.START_INPUT, _config(thread))
    assert calls.count("charge") == 2 and calls.count("lookup") == 1
    assert {r.tool: r.attempts for r in saver.ledger.list(thread)} == {"charge": 2, "lookup": 1}


def test_live_call_elsewhere_is_waited_for_or_reported_in_progress(saver: DurableSaver) -> None:
    """While a call runs, the same key from another worker waits and then replays its
    result — or, past its wait bound, raises `ToolCallInProgressError`."""
    release, started = threading.Event(), threading.Event()
    calls: list[int] = []

    @durable_tool(saver=saver, lease=2.0)
    def slow(x: int) -> str:
        """Blocks until released."""
        calls.append(x)
        started.set()
        release.wait(10)
        return "done"

    impatient = durable_tool(slow.inner, saver=saver, wait=0.2)
    patient = durable_tool(slow.inner, saver=saver, wait=10.0)
    thread, results = _thread(), {}
    runner = threading.Thread(target=lambda: results.update(
        first=slow.invoke(_call("slow", {"x": 1}), _config(thread))))
    waiter = threading.Thread(target=lambda: results.update(
        second=patient.invoke(_call("slow", {"x": 1}), _config(thread))))
    runner.start()
    assert started.wait(10)
    waiter.start()
    with pytest.raises(ToolCallInProgressError):
        impatient.invoke(_call("slow", {"x": 1}), _config(thread))
    release.set()
    runner.join(10)
    waiter.join(10)
    assert results["first"].content == results["second"].content == "done"
    assert calls == [1]


def test_concurrent_calls_of_one_key_in_one_process_run_it_once(saver: DurableSaver) -> None:
    """Eight threads make the same call at the same moment: one runs it, the others wait
    for it (never taking the live call for a dead one) and return its result."""
    calls: list[int] = []
    barrier = threading.Barrier(8)

    @durable_tool(saver=saver, idempotent=True, wait=10.0)
    def once(x: int) -> str:
        """Slow enough for every caller to find it running."""
        calls.append(x)
        time.sleep(0.3)
        return "once"

    thread, results = _thread(), []

    def caller() -> None:
        barrier.wait()
        results.append(once.invoke(_call("once", {"x": 1}), _config(thread)).content)

    workers = [threading.Thread(target=caller) for _ in range(8)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(20)
    assert results == ["once"] * 8 and calls == [1]


async def test_cancelled_call_is_not_an_outcome(saver: DurableSaver) -> None:
    """A cancelled call writes nothing (it stays ``started``); run again in the same process,
    it is known dead at once (uncertain, not a lease-long wait) and, idempotent, retried."""
    calls: list[float] = []

    @durable_tool(saver=saver, idempotent=True, lease=30.0)
    async def slow(delay: float) -> str:
        """Sleeps (the first time)."""
        calls.append(delay)
        await asyncio.sleep(delay if len(calls) == 1 else 0)
        return "slept"

    thread = _thread()
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(slow.ainvoke(_call("slow", {"delay": 5.0}), _config(thread)), 0.3)
    record = saver.ledger.get(saver.ledger.key_for(thread, "c1"))
    assert record is not None and record.status == "started"
    started = time.monotonic()
    assert (await slow.ainvoke(_call("slow", {"delay": 5.0}), _config(thread))).content == "slept"
    assert time.monotonic() - started < 15
    record = saver.ledger.get(record.key)
    assert record is not None and (record.status, record.attempts) == ("succeeded", 2)


async def test_a_cancelled_caller_does_not_end_a_blocking_call_still_running(
        saver: DurableSaver) -> None:
    """A blocking tool runs in the event loop's executor; its caller times out. The thread
    goes on, so the call stays this process's: a retry started at once neither takes it for
    dead (``verify`` would say "not happened" yet) nor runs it again, but waits, and replays
    the outcome the thread recorded when the work ended. One effect."""
    effects: list[str] = []
    running = threading.Event()

    def verify(key: str, args: Any) -> Any:
        return ("succeeded", "charged") if effects else ("failed", "not charged")

    @durable_tool(saver=saver, verify=verify, wait=10.0)
    def charge(order: str) -> str:
        """Charge an order, slowly."""
        running.set()
        time.sleep(0.6)
        effects.append(order)
        return "charged"

    thread = _thread()
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(charge.ainvoke(_call("charge", {"order": "A"}), _config(thread)),
                               0.2)
    assert running.is_set() and effects == []
    retried = await charge.ainvoke(_call("charge", {"order": "A"}), _config(thread))
    assert retried.content == "charged"
    assert effects == ["A"]
    record = saver.ledger.get(saver.ledger.key_for(thread, "c1"))
    assert record is not None and (record.status, record.attempts) == ("succeeded", 1)


@pytest.mark.parametrize("durability", ["sync", "async", None])
def test_a_tool_runs_only_once_the_checkpoint_that_decided_it_is_in_postgres(
        make_saver: Any, namespace: tuple[str, str], durability: str | None) -> None:
    """The checkpoint holding the model's tool call (and so the call's id and key) is in
    Postgres before the tool's effect starts, in both write modes and with LangGraph's
    ``durability`` "sync", "async" or not given (LangGraph's default, "async", which it
    does not write into the config): written behind with a flusher that would wait a
    minute, the call drains the thread's journal first. A crash during the effect then
    resumes from that decision instead of asking the model again."""
    saver = make_saver(flush_interval=60.0)
    seen: list[int] = []

    @durable_tool(saver=saver)
    def charge(order: str) -> str:
        """Charge an order."""
        configurable = get_config()["configurable"]
        seen.append(len(_sql(
            f'SELECT 1 FROM "{namespace[0]}".lgd_checkpoints WHERE thread_id = %s '
            "AND checkpoint_ns = '' AND checkpoint_id = %s",
            configurable["thread_id"], configurable["checkpoint_map"][""])))
        return "charged"

    graph = model_then_tool_graph(saver, charge, {"order": "A"},
                                  lambda: f"call-{uuid.uuid4().hex}")
    given = {} if durability is None else {"durability": durability}
    graph.invoke({"messages": [("user", "buy")]}, _config(_thread()), **given)
    assert seen == [1]


@pytest.mark.parametrize("policy", ["raise", "idempotent", "finished"])
def test_a_call_re_run_under_a_new_tool_call_id_is_the_same_call(
        saver: DurableSaver, namespace: tuple[str, str], policy: str,
        caplog: pytest.LogCaptureFixture) -> None:
    """``charge`` was cut off mid-call (its process died before recording the outcome)
    and the run's checkpoints were lost with it (a machine that died with state not yet
    flushed: the thread is deleted here, its ledger kept); the run starts again from its
    input, and the model asks again with a new random tool-call id, so a new key. Same
    thread, namespace, step, tool and arguments:
    it is the same call, one row. Its policy applies to it, never a blind second run:
    ``on_uncertain="raise"`` raises without running; ``idempotent=True`` runs it again
    under the first call's idempotency key, the one the provider saw. A call that had
    finished (``finished``: only the checkpoints were lost) is replayed, whatever
    ``on_duplicate`` says. The same arguments in a later turn (a later step) are a new
    call."""
    keys: list[str] = []

    def charge(order: str) -> str:
        """Charge an order."""
        keys.append(current_idempotency_key())
        return f"charged {order}"

    tool = durable_tool(charge, saver=saver, idempotent=policy == "idempotent")
    graph = model_then_tool_graph(saver, tool, {"order": "A"},
                                  lambda: f"call-{uuid.uuid4().hex}")
    thread = _thread()
    graph.invoke({"messages": [("user", "buy")]}, _config(thread))
    (first,) = saver.ledger.list(thread)
    if policy != "finished":
        _cut_off(namespace[0], first.key)
    saver.delete_thread(thread, keep_ledger=True)
    again = {"messages": [("user", "buy")]}
    with caplog.at_level(logging.WARNING, "langgraph_durable"):
        if policy == "raise":
            with pytest.raises(ToolOutcomeUncertainError):
                graph.invoke(again, _config(thread))
        else:
            out = graph.invoke(again, _config(thread))
            assert out["messages"][-1].content == "charged A"
            assert out["messages"][-1].tool_call_id == out["messages"][-2].tool_calls[0]["id"]
    runs = {"raise": 1, "idempotent": 2, "finished": 1}[policy]
    assert keys == [first.idempotency_key] * runs
    assert "re-run under a new tool-call id" in caplog.text
    (row,) = saver.ledger.list(thread)
    assert row.key == first.key
    assert row.status == ("uncertain" if policy == "raise" else "succeeded")

    graph.invoke({"messages": [("user", "buy again")]}, _config(thread))
    assert len(saver.ledger.list(thread)) == 2 and len(set(keys)) == 2


@pytest.mark.parametrize("how", ["lost", "fork"])
def test_a_call_in_a_subgraph_re_run_from_an_older_checkpoint_is_the_same_call(
        saver: DurableSaver, namespace: tuple[str, str], how: str) -> None:
    """A worker agent (a subgraph the supervisor's ``Send`` runs) was cut off in ``charge``
    (its process died before recording the outcome). Its namespace ends with the id of the
    supervisor's task, which LangGraph derives from the checkpoint the step ran from; so
    when that step runs again from an older checkpoint, the task, hence the namespace, has
    a new id: ``lost``, the run's checkpoints were lost (``durability="exit"``, or a machine
    that died with state not yet flushed) and it starts again from its input; ``fork``, the
    thread is forked at its first checkpoint, copying the cut-off call. The model asks again
    with a new tool-call id. Same thread, graph path, step, tool and arguments: the same
    call, run again (``idempotent=True``) under the key the provider saw, never a blind
    second call under a new key."""
    keys: list[str] = []

    def charge(order: str) -> str:
        """Charge an order."""
        keys.append(current_idempotency_key())
        return f"charged {order}"

    tool = durable_tool(charge, saver=saver, idempotent=True)
    agent = model_then_tool_graph(None, tool, {"order": "A"},
                                  lambda: f"call-{uuid.uuid4().hex}")

    class Orders(TypedDict):
        done: Annotated[list[str], lambda a, b: a + b]

    def worker(assignment: dict[str, str]) -> dict[str, Any]:
        out = agent.invoke({"messages": [("user", f"ship {assignment['order']}")]})
        return {"done": [out["messages"][-1].content]}

    builder = StateGraph(Orders)
    builder.add_node("worker", worker)
    builder.add_conditional_edges(START, lambda _: [Send("worker", {"order": "A"})],
                                  ["worker"])
    builder.add_edge("worker", END)
    graph = builder.compile(checkpointer=saver)
    thread = _thread()
    graph.invoke({"done": []}, _config(thread))
    (first,) = saver.ledger.list(thread)
    _cut_off(namespace[0], first.key)
    if how == "lost":
        saver.delete_thread(thread, keep_ledger=True)
        out = graph.invoke({"done": []}, _config(thread))
    else:
        oldest = list(saver.list(_config(thread)))[-1].config["configurable"]["checkpoint_id"]
        thread, source = f"{thread}-fork", thread
        saver.copy_thread(source, thread, up_to=oldest)
        out = graph.invoke(None, _config(thread))
    assert out["done"] == ["charged A"]
    assert keys == [first.idempotency_key] * 2
    (row,) = saver.ledger.list(thread)
    assert row.status == "succeeded" and row.idempotency_key == first.idempotency_key


def test_durability_exit_is_said_loudly(saver: DurableSaver,
                                        caplog: pytest.LogCaptureFixture) -> None:
    """Under ``durability="exit"`` LangGraph writes no checkpoint before the run ends, so
    no decision can be durable before the effect: the tool runs, and a warning says what a
    crash would cost, once per process."""
    from langgraph_durable._core.ledger import protocol

    protocol._warned_exit = False
    calls: list[int] = []
    echo = _echo(saver, calls)
    builder = StateGraph(MessagesState)
    builder.add_node("tools", ToolNode([echo]))
    builder.add_edge(START, "tools")
    graph = builder.compile(checkpointer=saver)
    message = AIMessage("", tool_calls=[_call("echo", {"x": 1})])
    with caplog.at_level(logging.WARNING, logger="langgraph_durable"):
        for _ in range(2):
            graph.invoke({"messages": [message]}, _config(_thread()), durability="exit")
    assert calls == [1, 1]
    said = [r for r in caplog.records if "durability='exit'" in r.getMessage()]
    assert len(said) == 1


def test_expired_lease_of_another_host_is_taken_over(saver: DurableSaver,
                                                      namespace: tuple[str, str]) -> None:
    """A call another host started and stopped heartbeating becomes uncertain once its
    lease runs out (not before); an idempotent tool then runs again under the same key."""
    calls: list[int] = []
    echo = _echo(saver, calls, idempotent=True)
    thread = _thread()
    echo.invoke(_call("echo", {"x": 3}), _config(thread))
    key = saver.ledger.key_for(thread, "c1")
    _sql(f'UPDATE "{namespace[0]}".lgd_tool_calls SET status = \'started\', '
         "lease_owner = 'elsewhere~0:1:abc', "
         "lease_expires_at = clock_timestamp() + interval '0.4 seconds' WHERE key = %s", key)
    started = time.monotonic()
    assert echo.invoke(_call("echo", {"x": 3}), _config(thread)).content == "echo 3"
    assert time.monotonic() - started >= 0.3  # it waited for the lease
    record = saver.ledger.get(key)
    assert record is not None and (record.status, record.attempts) == ("succeeded", 2)
    assert calls == [3, 3]


def test_dead_owner_on_this_host_is_found_without_waiting_for_its_lease(
        saver: DurableSaver, namespace: tuple[str, str]) -> None:
    """A started call whose owner was a process of this host that no longer exists is
    uncertain at once, though its lease has a minute to run."""
    calls: list[int] = []
    echo = _echo(saver, calls, idempotent=True)
    thread = _thread()
    echo.invoke(_call("echo", {"x": 4}), _config(thread))
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    owner = f"{process_owner().host}:{gone.pid}:0123"
    _sql(f'UPDATE "{namespace[0]}".lgd_tool_calls SET status = \'started\', lease_owner = %s, '
         "lease_expires_at = clock_timestamp() + interval '60 seconds' WHERE thread_id = %s",
         owner, thread)
    started = time.monotonic()
    echo.invoke(_call("echo", {"x": 4}), _config(thread))
    assert time.monotonic() - started < 30
    assert calls == [4, 4]
    assert not owner_gone(process_owner().text.replace(process_owner().host, "other"), "k")


def test_heartbeat_keeps_a_long_call_alive(saver: DurableSaver, namespace: tuple[str, str],
                                           ) -> None:
    """A call that runs three times its lease keeps it alive by heartbeats: it is never
    taken for dead, and a concurrent caller replays its result."""
    started = threading.Event()
    calls: list[int] = []

    @durable_tool(saver=saver, lease=0.4, wait=5.0)
    def long(x: int) -> str:
        """Runs for 1.2 s."""
        calls.append(x)
        started.set()
        time.sleep(1.2)
        return "long done"

    thread, results = _thread(), {}
    runner = threading.Thread(target=lambda: results.update(
        first=long.invoke(_call("long", {"x": 1}), _config(thread))))
    runner.start()
    assert started.wait(10)
    time.sleep(0.8)
    (row,) = _sql(f'SELECT status, lease_expires_at > clock_timestamp() FROM '
                  f'"{namespace[0]}".lgd_tool_calls WHERE thread_id = %s', thread)
    assert row == ("started", True)
    second = long.invoke(_call("long", {"x": 1}), _config(thread))
    runner.join(10)
    assert second.content == results["first"].content == "long done"
    assert calls == [1]


def test_probable_duplicate_is_flagged_replayed_or_refused(
        saver: DurableSaver, caplog: pytest.LogCaptureFixture) -> None:
    """A new tool call id with the same thread, tool and arguments as a call that just
    succeeded: by default logged and recorded as ``duplicate_of`` and run; with
    ``on_duplicate="replay"`` answered from the first call; with ``"raise"`` refused."""
    calls: list[int] = []
    thread = _thread()
    echo = _echo(saver, calls)
    first = echo.invoke(_call("echo", {"x": 9}, "a"), _config(thread))
    with caplog.at_level(logging.WARNING, "langgraph_durable"):
        echo.invoke(_call("echo", {"x": 9}, "b"), _config(thread))
    assert "probably the model re-ran" in caplog.text
    flagged = saver.ledger.get(saver.ledger.key_for(thread, "b"))
    assert flagged is not None and flagged.duplicate_of == saver.ledger.key_for(thread, "a")
    assert calls == [9, 9]

    replay = _echo(saver, calls, on_duplicate="replay")
    replayed = replay.invoke(_call("echo", {"x": 9}, "c"), _config(thread))
    assert (replayed.content, replayed.tool_call_id) == (first.content, "c")
    record = saver.ledger.get(saver.ledger.key_for(thread, "c"))
    assert record is not None and (record.status, record.attempts) == ("succeeded", 0)

    refuse = _echo(saver, calls, on_duplicate="raise")
    for _ in range(2):
        with pytest.raises(IdempotencyConflictError, match="same arguments"):
            refuse.invoke(_call("echo", {"x": 9}, "d"), _config(thread))
    assert calls == [9, 9]
    ignore = _echo(saver, calls, on_duplicate="ignore")
    ignore.invoke(_call("echo", {"x": 9}, "e"), _config(thread))
    record = saver.ledger.get(saver.ledger.key_for(thread, "e"))
    assert record is not None and record.duplicate_of is None


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
    thread = _thread()
    paused = graph.invoke(app.START_INPUT, _config(thread))
    assert paused["__interrupt__"][0].value == {"approve": app.ORDER}
    record = {r.tool: r for r in saver.ledger.list(thread)}["charge"]
    assert (record.status, record.retryable) == ("failed", True)
    done = graph.invoke(Command(resume="yes"), _config(thread))
    assert "charged (yes)" in str(done["messages"][-1].content)
    records = {r.tool: r for r in saver.ledger.list(thread)}
    assert (records["charge"].status, records["charge"].attempts) == ("succeeded", 2)
    assert calls.count("lookup") == 1


async def test_ledger_inspection_sync_and_async(saver: DurableSaver) -> None:
    """``get``/``list``/``counts`` and their async twins return the same records."""
    calls: list[int] = []
    echo = _echo(saver, calls, retry_on=())
    thread = _thread()
    await echo.ainvoke(_call("echo", {"x": 1}, "a"), _config(thread))
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
    thread, copy = f"fil-é-{_thread()}-🙂", f"copie-{_thread()}"
    app.build_graph(saver, tools).invoke(app.START_INPUT, _config(thread))
    saver.copy_thread(thread, copy)
    copied = {r.tool: r for r in saver.ledger.list(copy)}
    assert copied["charge"].key == saver.ledger.key_for(copy, "call_charge")
    assert copied["charge"].key == derive_key(copy, "", "call_charge")
    assert tools[0].invoke(app.CALLS[0], _config(copy)).content == "charged 1250"
    assert len(calls) == 2
    saver.delete_thread(thread)
    assert saver.ledger.list(thread) == [] and len(saver.ledger.list(copy)) == 2
    saver.delete_thread(copy, keep_ledger=True)
    assert len(saver.ledger.list(copy)) == 2
    saver.prune([copy], strategy="delete")
    assert saver.ledger.list(copy) == []


def test_damaged_result_raises_corrupt_state_error(saver: DurableSaver,
                                                   namespace: tuple[str, str]) -> None:
    """A stored result carries a checksum: a flipped byte is reported, never replayed."""
    echo = _echo(saver, [])
    thread = _thread()
    echo.invoke(_call("echo", {"x": 1}), _config(thread))
    _sql(f'UPDATE "{namespace[0]}".lgd_tool_calls SET result = '
         "overlay(result placing '\\xff'::bytea from 20 for 1) WHERE thread_id = %s", thread)
    with pytest.raises(CorruptStateError, match="damaged"):
        echo.invoke(_call("echo", {"x": 1}), _config(thread))


def test_calls_without_a_tool_call_id_use_task_position_or_explicit_key(
        saver: DurableSaver) -> None:
    """Inside a node, calls without a tool call id are keyed by task id and position; an
    explicit ``key=`` is used as is, across threads."""
    calls: list[int] = []
    echo = _echo(saver, calls)
    keyed = _echo(saver, calls, key=lambda args: f"refund-{args['x']}-{run}")
    run = _thread()

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
    threads = [_thread(), _thread()]
    for thread in threads:
        graph.invoke(app.START_INPUT, _config(thread))
    records = saver.ledger.list(threads[0])
    tasks = {r.task_id for r in records if r.key.startswith("lgd-")}
    assert len(tasks) == 1 and all(r.tool_call_id is None for r in records)
    task = tasks.pop()
    assert task is not None
    assert {r.key for r in records} == {
        derive_key(threads[0], "", f"task:{task}:0"), derive_key(threads[0], "", f"task:{task}:1"),
        f"refund-3-{run}"}
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
        orphan.invoke(_call(orphan.name, {"x": 1}), _config(_thread()))
    echo = _echo(saver, [])
    with pytest.raises(ConfigurationError, match="thread_id"):
        echo.invoke(_call("echo", {"x": 1}), {})
