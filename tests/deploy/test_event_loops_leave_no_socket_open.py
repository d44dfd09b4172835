"""A script that calls ``asyncio.run`` more than once (each run a new event loop) leaves no
client of an ended loop open: not one ResourceWarning under ``python -X dev -W error``, so a
user's ``pytest -W error`` stays green."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support.servers import POSTGRES_URL, REDIS_URL

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import asyncio, sys
from langchain_core.messages import HumanMessage
from langgraph_durable import DurableSaver
from tests.support.graphs import chat_graph

redis_url, postgres_url, prefix, schema, mode = sys.argv[1:]
saver = DurableSaver(redis_url, postgres_url, key_prefix=prefix, schema=schema, write_mode=mode)
saver.setup()
graph = chat_graph(saver)
config = {"configurable": {"thread_id": "twice-" + mode}}
for text in ("hello", "again"):
    state = asyncio.run(graph.ainvoke({"messages": [HumanMessage(text)]}, config))
print(len(state["messages"]))
saver.close()
"""


def test_asyncio_run_twice_then_close_warns_nothing(namespace: tuple[str, str],
                                                    write_mode: str) -> None:
    """Two ``asyncio.run(graph.ainvoke(...))`` on one saver, then ``saver.close()``: both runs
    answer, the thread keeps its history across loops, and nothing is reported unclosed."""
    schema, prefix = namespace
    done = subprocess.run(
        [sys.executable, "-X", "dev", "-W", "error::ResourceWarning", "-c", SCRIPT,
         REDIS_URL, POSTGRES_URL, prefix, schema, write_mode],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["8"]  # 2 human + 2 x 3 AI messages
    assert "ResourceWarning" not in done.stderr, done.stderr
    assert "Exception ignored" not in done.stderr, done.stderr
