"""The kill, drain, empty-Redis, fresh-read loop (issue 34's point 6), written behind.

Each round: a worker process runs turns of a three-step graph on one thread of a private
Redis and the shared Postgres, writing each finished turn's message count to a file (one
``os.write`` a line), and is SIGKILLed at a random moment; a fresh saver drains the
journal (``flush()``); Redis is emptied (``FLUSHDB``); a fresh saver reads the thread. The
read must hold every turn the worker saw finish (its state no shorter), and resuming
(``invoke(None)``) must not find the thread empty (LangGraph's ``EmptyInputError``). The
thread grows round after round, as the one that showed the defect had (590 checkpoints).

    python -m tests.support.checker --drain-rounds 500
"""

from __future__ import annotations

import os
import random
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
from langchain_core.runnables import RunnableConfig

from langgraph_durable import DurableSaver
from tests.support import forked
from tests.support.faults import PrivateRedis
from tests.support.graphs import chat_graph
from tests.support.servers import POSTGRES_URL, drop_schema

RECLAIM_AFTER = 0.5  # a killed flusher's batch is the drain's after this long


def _saver(spec: dict[str, Any], **options: Any) -> DurableSaver:
    return DurableSaver(spec["redis_url"], POSTGRES_URL, schema=spec["schema"],
                        key_prefix=spec["prefix"], write_mode="behind",
                        reclaim_after=RECLAIM_AFTER, **options)


def work(spec: dict[str, Any]) -> None:
    """The worker: turns on ``spec["thread"]`` until killed, each finished turn's message
    count a line of ``spec["seen"]``."""
    graph = chat_graph(_saver(spec))
    config: RunnableConfig = {"configurable": {"thread_id": spec["thread"]}}
    fd = os.open(spec["seen"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    while True:
        state = graph.invoke({"messages": [("user", "next")]}, config)
        os.write(fd, f"{len(state['messages'])}\n".encode())


@dataclass
class Loop:
    """The rounds of one run, on a private Redis and a schema of their own."""

    workdir: Path
    seed: int
    rng: random.Random = field(init=False)
    failures: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        tag = uuid.uuid4().hex[:8]
        self.redis = PrivateRedis(self.workdir)
        self.spec = {"schema": f"lgdt_drain_{tag}", "prefix": f"lgdt-drain-{tag}",
                     "thread": f"drain-{tag}", "seen": str(self.workdir / "seen.txt")}

    def run(self, rounds: int) -> list[str]:
        self.redis.start()
        self.spec["redis_url"] = self.redis.url
        try:
            setup = _saver(self.spec)
            setup.setup()
            setup.close()
            for n in range(rounds):
                self.round(n)
        finally:
            self.redis.kill()
            drop_schema(self.spec["schema"])
        return self.failures

    def round(self, n: int) -> None:
        proc = forked.start(work, self.spec)
        time.sleep(self.rng.uniform(0.2, 0.8))
        proc.kill()
        proc.join()
        lines = Path(self.spec["seen"]).read_text().split()
        acknowledged = int(lines[-1]) if lines else 0
        drain = _saver(self.spec, background_flush=False)
        drain.flush(timeout=60)
        drain.close()
        client = redis.Redis.from_url(self.redis.url)
        client.flushdb()
        client.close()
        fresh = _saver(self.spec, background_flush=False)
        config: RunnableConfig = {"configurable": {"thread_id": self.spec["thread"]}}
        try:
            found = fresh.get_tuple(config)
            held = len(found.checkpoint["channel_values"].get("messages", [])) if found else 0
            if held < acknowledged:
                self.failures.append(f"round {n}: the fresh read holds {held} messages, "
                                     f"{acknowledged} were acknowledged")
            if found is not None:  # resume what the kill cut short, as an agent would
                chat_graph(fresh).invoke(None, config)
        except Exception as exc:
            self.failures.append(f"round {n}: {type(exc).__name__}: {exc}")
        finally:
            fresh.close()
