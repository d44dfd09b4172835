"""Durable model calls: an agent killed after its model call, or inside the tool the model
asked for, and resumed in a new process, pays for no model call twice and charges once.

The model counts its calls outside the saver and mints new random tool-call ids; the
payment provider counts attempts and dedupes charges by key (`tests/support/model_calls_app.py`).
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langgraph.graph import START, MessagesState, StateGraph
from pydantic import Field

from langgraph_durable import DurableSaver
from langgraph_durable.models import durable_model
from tests.support import model_calls_app as app
from tests.support.servers import POSTGRES_URL, REDIS_URL

ROOT = Path(__file__).parents[2]


@pytest.fixture
def outside(namespace: tuple[str, str]) -> tuple[str, str]:
    schema, prefix = namespace
    with DurableSaver(REDIS_URL, POSTGRES_URL, schema=schema, key_prefix=prefix) as saver:
        saver.setup()
    app.setup_outside(schema)
    return schema, prefix


def run(schema: str, prefix: str, thread_id: str, write_mode: str, durability: str,
        model_calls: bool, kill_at: str) -> subprocess.CompletedProcess[str]:
    """One process of the app; a killed one returns -9."""
    return subprocess.run(
        [sys.executable, "-m", "tests.support.model_calls_app", schema, prefix, thread_id,
         write_mode, durability, "on" if model_calls else "off", kill_at],
        cwd=ROOT, capture_output=True, text=True, timeout=120)


def crash_and_resume(outside: tuple[str, str], write_mode: str, durability: str,
                     model_calls: bool, kill_at: str) -> tuple[dict[str, int], str]:
    schema, prefix = outside
    thread_id = f"order-{uuid.uuid4().hex[:8]}"
    killed = run(schema, prefix, thread_id, write_mode, durability, model_calls, kill_at)
    assert killed.returncode == -9, killed.stderr
    resumed = run(schema, prefix, thread_id, write_mode, durability, model_calls, "none")
    assert resumed.returncode == 0, resumed.stderr
    return app.counts(schema, thread_id), resumed.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize("write_mode", ["through", "behind"])
def test_killed_after_the_model_call_the_resumed_agent_does_not_ask_again(
        outside: tuple[str, str], write_mode: str) -> None:
    """Killed once the model answered, before its step was stored: the resumed run gets the
    recorded answer (the same tool-call id), so the model is called twice in all (the
    tool call, then the final answer), not three times, and the card is charged once."""
    seen, answer = crash_and_resume(outside, write_mode, "sync", True, "after_model")
    assert seen == {"model_calls": 2, "charges": 1, "charge_attempts": 1}
    assert answer == "done: charged 4200 for A-7"


def test_killed_in_the_tool_with_nothing_stored_the_rerun_replays_model_and_key(
        outside: tuple[str, str]) -> None:
    """Under ``durability="exit"`` nothing is stored before the run ends: killed inside the
    charge, the request is sent again. The recorded model answer brings back the same
    tool-call id, hence the same key, which the provider already holds: one charge, and
    the model paid for twice in all."""
    seen, answer = crash_and_resume(outside, "through", "exit", True, "in_tool")
    assert seen == {"model_calls": 2, "charges": 1, "charge_attempts": 2}
    assert answer == "done: charged 4200 for A-7"


def test_without_durable_model_calls_the_model_is_asked_again(
        outside: tuple[str, str]) -> None:
    """The same crash without ``model_calls``: the resumed run asks the model again (three
    calls in all), which is what the option saves; the tool ledger still keeps the charge
    to one."""
    seen, _ = crash_and_resume(outside, "through", "sync", False, "after_model")
    assert seen == {"model_calls": 3, "charges": 1, "charge_attempts": 1}


class Counting(BaseChatModel):
    """Answers with a new random id each call, and counts its calls."""

    calls: list[str] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "counting"

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None,
                  **kwargs: Any) -> ChatResult:
        self.calls.append(str(messages[-1].content))
        return ChatResult(generations=[ChatGeneration(
            message=AIMessage(f"answer {uuid.uuid4().hex}"))])


@pytest.mark.parametrize("flavour", ["sync", "async"])
async def test_a_durable_model_in_a_plain_graph_answers_a_step_run_again_from_the_ledger(
        saver: DurableSaver, flavour: str) -> None:
    """``durable_model`` in a hand-built graph: a node whose step failed after its model
    answered runs again on resume and gets the recorded answer (one model call, the same
    message); a new turn asks the model again."""
    model = Counting()
    wrapped = durable_model(model)
    failed: list[bool] = []

    def ask(state: MessagesState) -> dict[str, Any]:
        answer = wrapped.invoke(state["messages"])
        if not failed:
            failed.append(True)
            raise RuntimeError("cut after the model answered")
        return {"messages": [answer]}

    async def aask(state: MessagesState) -> dict[str, Any]:
        answer = await wrapped.ainvoke(state["messages"])
        if not failed:
            failed.append(True)
            raise RuntimeError("cut after the model answered")
        return {"messages": [answer]}

    builder = StateGraph(MessagesState)
    builder.add_node("ask", ask if flavour == "sync" else aask)
    builder.add_edge(START, "ask")
    graph = builder.compile(checkpointer=saver)
    config = {"configurable": {"thread_id": f"plain-{uuid.uuid4().hex[:8]}"}}
    first = {"messages": [("user", "hello")]}
    with pytest.raises(RuntimeError, match="cut after"):
        if flavour == "sync":
            graph.invoke(first, config)
        else:
            await graph.ainvoke(first, config)
    resumed = graph.invoke(None, config) if flavour == "sync" else await graph.ainvoke(
        None, config)
    assert model.calls == ["hello"]
    records = saver.ledger.list(config["configurable"]["thread_id"])
    assert [(r.tool, r.status, r.attempts) for r in records] == [("model:Counting",
                                                                   "succeeded", 1)]
    assert resumed["messages"][-1].content == records[0].result.content
    again = {"messages": [("user", "again")]}
    if flavour == "sync":
        graph.invoke(again, config)
    else:
        await graph.ainvoke(again, config)
    assert model.calls == ["hello", "again"]
