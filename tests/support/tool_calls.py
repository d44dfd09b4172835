"""Tool calls made by hand, the way the one-process tool-ledger tests need them: a call, a
thread's config, a new thread, SQL on the ledger's tables, and an ``echo`` tool that
counts its runs."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg

from langgraph_durable import DurableSaver, durable_tool
from tests.support.servers import POSTGRES_URL


def tool_call(name: str, args: dict[str, Any], call_id: str = "c1") -> dict[str, Any]:
    """A tool call as a model asks for it (what ``ToolNode`` hands the tool)."""
    return {"type": "tool_call", "name": name, "args": args, "id": call_id}


def thread_config(thread: str) -> Any:
    """The config of a run on ``thread``."""
    return {"configurable": {"thread_id": thread}}


def new_thread() -> str:
    """A thread id no other test uses."""
    return uuid.uuid4().hex


def sql(query: str, *params: Any) -> list[Any]:
    """Run ``query`` on the test database (autocommit); its rows, if it returns any."""
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        cursor = conn.execute(query, params)
        return cursor.fetchall() if cursor.description else []


def echo_tool(saver: DurableSaver, calls: list[Any], **options: Any) -> Any:
    """A durable ``echo(x)`` (with ``options``) that appends ``x`` to ``calls`` each run."""
    @durable_tool(saver=saver, **options)
    def echo(x: int) -> str:
        """Echo x."""
        calls.append(x)
        return f"echo {x}"
    return echo
