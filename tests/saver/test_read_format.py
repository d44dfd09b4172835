"""The tuple reads fetch their rows in Postgres's binary format (a ``bytea`` then arrives
as its bytes, not as hex text to decode); the rows must be exactly those of the text
format, value for value and type for type, or a read would decode something else."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
from psycopg.rows import dict_row

from langgraph_durable import DurableSaver
from tests.support.graphs import chat_graph
from tests.support.servers import POSTGRES_URL


def _rows(query: Any, params: dict[str, Any], *, binary: bool) -> list[dict[str, Any]]:
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        cursor = conn.cursor(row_factory=dict_row, binary=binary)
        return cursor.execute(query, params).fetchall()


def test_binary_rows_equal_text_rows(saver: DurableSaver) -> None:
    """Every column of the get and list queries (frames, arrays of frames and of write
    indexes, metadata text, the head's version and id, NULL arrays of a checkpoint
    without writes) reads the same in both formats."""
    thread_id = f"t-{uuid.uuid4()}"
    config = {"configurable": {"thread_id": thread_id}}
    chat_graph(saver).invoke({"messages": [("user", "hi")]}, config)
    saver.flush()
    statements = saver.engine.context.statements
    ids = {"thread_id": thread_id, "checkpoint_ns": ""}
    oldest = _rows(statements.list_sql(frozenset(ids), False), ids, binary=False)[-1]
    reads = [
        (statements.get_latest_sql, ids),
        (statements.get_by_id_sql, {**ids, "checkpoint_id": oldest["checkpoint_id"]}),
        (statements.list_sql(frozenset(ids), True), {**ids, "limit": 10}),
    ]
    _same_in_both_formats(reads)  # the latest checkpoint has no writes: NULL arrays
    assert _rows(statements.get_latest_sql, ids, binary=True)[0]["write_idxs"] is None
    latest = saver.get_tuple(config)
    assert latest is not None
    saver.put_writes(latest.config, [("messages", "pending"), ("other", 7)], "task-x")
    saver.flush()
    _same_in_both_formats(reads)
    newest = _rows(statements.get_latest_sql, ids, binary=True)[0]
    assert newest["write_idxs"] == [0, 1] and isinstance(newest["blobs"][0], bytes)


def _same_in_both_formats(reads: list[tuple[Any, dict[str, Any]]]) -> None:
    for query, params in reads:
        text, binary = _rows(query, params, binary=False), _rows(query, params, binary=True)
        assert text and binary == text
        for text_row, binary_row in zip(text, binary, strict=True):
            assert {k: type(v) for k, v in binary_row.items()} == {
                k: type(v) for k, v in text_row.items()}
