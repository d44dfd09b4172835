"""A ``create_agent`` agent with `DurableMiddleware` that the model-call tests kill and resume.

    python -m tests.support.model_calls_app SCHEMA PREFIX THREAD WRITE_MODE DURABILITY MODEL_CALLS
        KILL_AT

The model counts its calls in a table of the test's schema (the saver never sees it) and
mints a new random tool-call id each time, as real models do; ``charge_card`` charges an
"outside world" that dedupes by idempotency key and logs every attempt. KILL_AT is where
the process SIGKILLs itself: ``after_model`` (the first model call returned, before its
step's writes are stored), ``in_tool`` (the charge happened, its outcome not recorded) or
``none``. A run finds the thread's state: it resumes a thread with a pending step
(``invoke(None)``), else sends the request (again, when an earlier run stored nothing).
The last line printed is the agent's answer.
"""

from __future__ import annotations

import os
import signal
import sys
import uuid
from typing import Any

import psycopg
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool

from langgraph_durable import DurableSaver, current_idempotency_key
from langgraph_durable.middleware import DurableMiddleware
from tests.support.servers import POSTGRES_URL, REDIS_URL

REQUEST = "charge order A-7"

OUTSIDE_SQL = """
CREATE TABLE IF NOT EXISTS "{schema}".model_calls (id serial, thread_id text);
CREATE TABLE IF NOT EXISTS "{schema}".charges (idem_key text PRIMARY KEY, thread_id text);
CREATE TABLE IF NOT EXISTS "{schema}".charge_attempts (id serial, thread_id text, idem_key text);
"""


def setup_outside(schema: str) -> None:
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(OUTSIDE_SQL.format(schema=schema))


def counts(schema: str, thread_id: str) -> dict[str, int]:
    """What the outside world saw of a thread: model calls, charges, charge attempts."""
    with psycopg.connect(POSTGRES_URL) as conn:
        return {table: int(conn.execute(
            f'SELECT count(*) FROM "{schema}".{table} WHERE thread_id = %s',
            (thread_id,)).fetchone()[0])  # type: ignore[index]
            for table in ("model_calls", "charges", "charge_attempts")}


def _outside(schema: str, sql: str, *params: Any) -> None:
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(sql.format(schema=schema), params)


def build(saver: DurableSaver, schema: str, thread_id: str, model_calls: bool,
          kill_at: str) -> Any:
    class CountingModel(BaseChatModel):
        """Asks for one charge under a new random tool-call id, then reports it."""

        @property
        def _llm_type(self) -> str:
            return "counting"

        def bind_tools(self, tools: Any, **kwargs: Any) -> CountingModel:  # type: ignore[override]
            return self

        def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                      run_manager: CallbackManagerForLLMRun | None = None,
                      **kwargs: Any) -> ChatResult:
            _outside(schema, 'INSERT INTO "{schema}".model_calls (thread_id) VALUES (%s)',
                     thread_id)
            if isinstance(messages[-1], ToolMessage):
                reply = AIMessage(f"done: {messages[-1].content}")
            else:
                reply = AIMessage("", tool_calls=[{
                    "name": "charge_card", "args": {"order_id": "A-7", "cents": 4200},
                    "id": f"call_{uuid.uuid4().hex}", "type": "tool_call"}])
            return ChatResult(generations=[ChatGeneration(message=reply)])

    @tool
    def charge_card(order_id: str, cents: int) -> str:
        """Charge the customer's card."""
        key = current_idempotency_key()
        _outside(schema, 'INSERT INTO "{schema}".charge_attempts (thread_id, idem_key) '
                 "VALUES (%s, %s)", thread_id, key)
        _outside(schema, 'INSERT INTO "{schema}".charges VALUES (%s, %s) '
                 "ON CONFLICT DO NOTHING", key, thread_id)
        if kill_at == "in_tool":
            os.kill(os.getpid(), signal.SIGKILL)
        return f"charged {cents} for {order_id}"

    class KillAfterModel(AgentMiddleware):
        def wrap_model_call(self, request: Any, handler: Any) -> Any:
            response = handler(request)
            if kill_at == "after_model":
                os.kill(os.getpid(), signal.SIGKILL)
            return response

    durable = DurableMiddleware(saver, tools={"charge_card": {"idempotent": True}},
                                model_calls=model_calls)
    return create_agent(CountingModel(), [charge_card], checkpointer=saver,
                        middleware=[KillAfterModel(), durable])


def main(argv: list[str]) -> None:
    schema, prefix, thread_id, write_mode, durability, model_calls, kill_at = argv
    with DurableSaver(REDIS_URL, POSTGRES_URL, schema=schema, key_prefix=prefix,
                      write_mode=write_mode) as saver:  # type: ignore[arg-type]
        agent = build(saver, schema, thread_id, model_calls == "on", kill_at)
        config = {"configurable": {"thread_id": thread_id}}
        # A thread with a checkpoint resumes with invoke(None): killed between a step's writes
        # and its next checkpoint, its state shows next == () mid-turn.
        stored = saver.get_tuple(config) is not None
        request = None if stored else {"messages": [("user", REQUEST)]}
        out = agent.invoke(request, config, durability=durability)  # type: ignore[arg-type]
        saver.flush()
    print(out["messages"][-1].content)


if __name__ == "__main__":
    main(sys.argv[1:])
