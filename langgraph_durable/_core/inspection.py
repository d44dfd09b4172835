"""Read-only queries for operators (the CLI, notebooks), written as sans-I/O operations.

Nothing here writes. The statements are `_core.sql.inspection`'s, rendered once per
schema; every operation yields `Cold`
requests and is run by the engine (``saver.engine``), e.g. `Engine.thread_summaries`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from langgraph_durable._core.requests import Cold, Op, Statement
from langgraph_durable._core.sql.inspection import statements


@dataclass(frozen=True, slots=True)
class ThreadSummary:
    """One thread as Postgres holds it.

    Attributes:
        thread_id: the thread.
        checkpoints: checkpoints in every namespace.
        namespaces: distinct checkpoint namespaces (1 without subgraphs).
        last_update: when its newest checkpoint was stored.
        bytes: payload bytes of its checkpoints, blobs and pending writes.
    """

    thread_id: str
    checkpoints: int
    namespaces: int
    last_update: datetime
    bytes: int


@dataclass(frozen=True, slots=True)
class CheckpointSize:
    """When a checkpoint was stored and the bytes it added to Postgres.

    Attributes:
        checkpoint_ns: its namespace.
        checkpoint_id: its id.
        created_at: when Postgres stored it.
        checkpoint_bytes: its frame (with its small scalar values) and metadata.
        blob_bytes: the other channel values it introduced.
        write_bytes: its pending writes.
    """

    checkpoint_ns: str
    checkpoint_id: str
    created_at: datetime
    checkpoint_bytes: int
    blob_bytes: int
    write_bytes: int

    @property
    def total(self) -> int:
        """Every byte the checkpoint added."""
        return self.checkpoint_bytes + self.blob_bytes + self.write_bytes


def thread_summaries(
    schema: str,
    *,
    thread_ids: Sequence[str] | None = None,
    metadata: Mapping[str, Any] | None = None,
    limit: int = 50,
) -> Op[tuple[int, list[ThreadSummary]]]:
    """The schema's thread count and up to ``limit`` threads, most recently active first;
    with ``metadata``, only (and the count of) the threads with a checkpoint whose metadata
    contains it, as ``list(filter=metadata)`` matches."""
    pattern = json.dumps(dict(metadata)) if metadata else None
    count_rows, rows = yield Cold(
        (
            Statement(statements(schema).thread_count, {"metadata": pattern}, fetch=True),
            Statement(
                statements(schema).thread_summary,
                {
                    "thread_ids": list(thread_ids) if thread_ids is not None else None,
                    "metadata": pattern,
                    "limit": limit,
                },
                fetch=True,
            ),
        )
    )
    summaries = [
        ThreadSummary(
            r["thread_id"],
            int(r["checkpoints"]),
            int(r["namespaces"]),
            r["last_update"],
            int(r["bytes"]),
        )
        for r in rows
    ]
    return int(count_rows[0]["threads"]), summaries


def checkpoint_sizes(
    schema: str, thread_id: str, *, checkpoint_ns: str | None = None, limit: int | None = None
) -> Op[list[CheckpointSize]]:
    """The bytes each checkpoint of a thread added, newest first."""
    rows = (
        yield Cold.one(
            statements(schema).checkpoint_sizes,
            {
                "thread_id": thread_id,
                "checkpoint_ns": checkpoint_ns,
                "limit": limit,
            },
            fetch=True,
        )
    )[0]
    return [
        CheckpointSize(
            r["checkpoint_ns"],
            r["checkpoint_id"],
            r["created_at"],
            int(r["checkpoint_bytes"]),
            int(r["blob_bytes"]),
            int(r["write_bytes"]),
        )
        for r in rows
    ]


def match_checkpoint(
    schema: str, thread_id: str, checkpoint_ns: str, fragment: str
) -> Op[list[str]]:
    """Ids of the thread's checkpoints containing ``fragment`` (at most 10, newest first)."""
    escaped = fragment.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    rows = (
        yield Cold.one(
            statements(schema).match_checkpoint,
            {
                "thread_id": thread_id,
                "checkpoint_ns": checkpoint_ns,
                "pattern": f"%{escaped}%",
            },
            fetch=True,
        )
    )[0]
    return [str(r["checkpoint_id"]) for r in rows]
