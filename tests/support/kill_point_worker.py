"""A process that SIGKILLs itself at an exact point of a graph run, for comparing savers.

    python -m tests.support.kill_point_worker SAVER SCHEMA PREFIX THREAD STEP WHEN

SAVER is ``postgres`` (LangGraph's `PostgresSaver`) or ``through`` / ``behind`` (a
`DurableSaver` in that write mode). The process runs two turns of `chat_graph` on THREAD
with ``durability="sync"``: the first to its end, then the second, in which it sends
itself SIGKILL ``before`` or ``after`` the pending writes of the task that runs on the
checkpoint of STEP were stored (and after that checkpoint's ``put`` returned). Checkpoints
of later steps are held back, so the kill lands at the same point of LangGraph's loop
whatever the saver and the thread timing.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from typing import Any

import psycopg
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.postgres import PostgresSaver

from langgraph_durable import DurableSaver
from tests.support.graphs import chat_graph
from tests.support.servers import POSTGRES_URL, REDIS_URL, postgres_url

FIRST, SECOND = "first", "second"


class KillPoint:
    """Where to die: around the writes of the task that runs on the checkpoint of ``step``
    (of the root graph; with ``subgraph``, of a subgraph's namespace)."""

    def __init__(self, step: int, when: str, subgraph: bool = False) -> None:
        self.step, self.when, self.subgraph = step, when, subgraph
        self.armed = False
        self.steps: dict[str, int] = {}  # checkpoint id -> step, once its put returned
        self.changed = threading.Condition()

    def _counts(self, namespace: str) -> bool:
        return bool(namespace) == self.subgraph

    def before_put(self, metadata: Any, namespace: str = "") -> None:
        if self.armed and self._counts(namespace) and metadata.get("step", -1) > self.step:
            threading.Event().wait()  # held back until the kill

    def acknowledged_put(self, checkpoint_id: str, metadata: Any, namespace: str = "") -> None:
        with self.changed:
            self.steps[checkpoint_id] = metadata.get("step", -1) if self._counts(namespace) \
                else -2  # a step of another namespace: never the kill point
            self.changed.notify_all()

    def around_writes(self, checkpoint_id: str, when: str) -> None:
        if not self.armed:
            return
        with self.changed:
            self.changed.wait_for(lambda: checkpoint_id in self.steps, timeout=30)
        if self.steps.get(checkpoint_id) == self.step and when == self.when:
            time.sleep(0.05)  # let a concurrent write of the same step land, as a crash may
            os.kill(os.getpid(), signal.SIGKILL)


def postgres_saver_url(schema: str) -> str:
    """The Postgres URL with ``schema`` as the search path (PostgresSaver has no schema option)."""
    return postgres_url(query={"options": f"-csearch_path={schema}"})


def open_saver(kind: str, schema: str, prefix: str,
               point: KillPoint | None = None) -> BaseCheckpointSaver[Any]:
    """A set-up saver of ``kind``; with ``point``, one that kills the process there."""
    if kind == "postgres":
        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
        conn = psycopg.connect(postgres_saver_url(schema), autocommit=True,
                               prepare_threshold=0)
        saver = killing(PostgresSaver, point)(conn) if point else PostgresSaver(conn)  # type: ignore[arg-type]
    else:
        cls = killing(DurableSaver, point) if point else DurableSaver
        # A killed worker's flusher may hold journal entries: reclaim them after 1 s.
        saver = cls(REDIS_URL, POSTGRES_URL, schema=schema, key_prefix=prefix,
                    write_mode=kind, reclaim_after=1.0)
    saver.setup()
    return saver  # type: ignore[no-any-return]


def close_saver(saver: BaseCheckpointSaver[Any]) -> None:
    """Close a saver `open_saver` returned (PostgresSaver: its connection)."""
    if isinstance(saver, DurableSaver):
        saver.close()
    else:
        saver.conn.close()  # type: ignore[attr-defined]


def killing(base: type[Any], point: KillPoint) -> type[Any]:
    """A subclass of the saver class ``base`` that kills its process at ``point``."""
    class Killing(base):  # type: ignore[valid-type, misc]
        def put(self, config: Any, checkpoint: Any, metadata: Any, versions: Any) -> Any:
            namespace = config["configurable"].get("checkpoint_ns", "")
            point.before_put(metadata, namespace)
            stored = super().put(config, checkpoint, metadata, versions)
            point.acknowledged_put(checkpoint["id"], metadata, namespace)
            return stored

        def put_writes(self, config: Any, *args: Any, **kwargs: Any) -> None:
            checkpoint_id = config["configurable"]["checkpoint_id"]
            point.around_writes(checkpoint_id, "before")
            super().put_writes(config, *args, **kwargs)
            point.around_writes(checkpoint_id, "after")

    return Killing


def main(argv: list[str]) -> None:
    kind, schema, prefix, thread, step, when = argv
    point = KillPoint(int(step), when)
    graph = chat_graph(open_saver(kind, schema, prefix, point))
    config = {"configurable": {"thread_id": thread}}
    graph.invoke({"messages": [("user", FIRST)]}, config, durability="sync")
    point.armed = True
    graph.invoke({"messages": [("user", SECOND)]}, config, durability="sync")
    raise SystemExit("the second turn ended before its kill point")


if __name__ == "__main__":
    main(sys.argv[1:])
