"""The cold tier's statements rendered once for one schema (`Statements`).

The templates live by kind beside this module (`reads`, `writes`, `flush`, `threads`,
`marks`); an attribute is named after its constant (``PUT_CHECKPOINT_SQL`` ->
``put_checkpoint_sql``).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from psycopg import sql

from langgraph_durable._core.sql import flush, marks, reads, threads, writes
from langgraph_durable._core.sql.render import Rendered, render

_TEMPLATES = {
    name.lower(): template
    for kind in (reads, writes, flush, threads, marks)
    for name, template in vars(kind).items()
    if name.endswith("_SQL") and isinstance(template, str)
}


@dataclass(frozen=True, slots=True, init=False, eq=False)
class Statements(Rendered):
    """Every statement of the cold tier rendered for one schema; each is declared here, so
    the type checker catches a misspelled name."""

    TEMPLATES: ClassVar[Mapping[str, str]] = _TEMPLATES

    bump_thread_sql: sql.SQL
    copy_source_blobs_sql: sql.SQL
    copy_source_checkpoints_sql: sql.SQL
    copy_source_writes_sql: sql.SQL
    copy_thread_resealed_sql: sql.SQL
    copy_thread_sql: sql.SQL
    delete_for_runs_sql: sql.SQL
    delete_orphan_blobs_sql: sql.SQL
    delete_threads_sql: sql.SQL
    delta_chain_sql: sql.SQL
    delta_seeds_sql: sql.SQL
    delta_writes_sql: sql.SQL
    flush_blobs_sql: sql.SQL
    flush_checkpoints_sql: sql.SQL
    flush_heads_sql: sql.SQL
    flush_special_writes_sql: sql.SQL
    extend_deleted_sql: sql.SQL
    flush_writes_sql: sql.SQL
    forget_deleted_sql: sql.SQL
    forget_marks_sql: sql.SQL
    get_by_id_sql: sql.SQL
    get_latest_sql: sql.SQL
    head_sql: sql.SQL
    known_types_sql: sql.SQL
    lock_heads_sql: sql.SQL
    lock_heads_table_sql: sql.SQL
    lock_heads_for_writes_sql: sql.SQL
    mark_hot_stale_sql: sql.SQL
    newest_mark_sql: sql.SQL
    order_marks_sql: sql.SQL
    no_jit_sql: sql.SQL
    pending_marks_sql: sql.SQL
    renumber_marks_sql: sql.SQL
    prune_delete_sql: sql.SQL
    prune_scan_sql: sql.SQL
    put_checkpoint_sql: sql.SQL
    put_ordinary_writes_sql: sql.SQL
    put_writes_sql: sql.SQL
    rebuild_heads_sql: sql.SQL
    record_types_sql: sql.SQL
    repair_blob_sql: sql.SQL
    repair_checkpoint_sql: sql.SQL
    threads_of_runs_sql: sql.SQL
    tombstone_sql: sql.SQL

    def list_sql(self, present: frozenset[str], limited: bool) -> sql.SQL:
        """`reads.list_template` rendered for this schema (memoized)."""
        return _list_sql(self.schema, present, limited)


@functools.lru_cache(maxsize=256)
def _list_sql(schema: str, present: frozenset[str], limited: bool) -> sql.SQL:
    return render(reads.list_template(present, limited), schema)
