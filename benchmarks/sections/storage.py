"""Storage: bytes each store grows by per superstep of the chat graph."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import get_args

from benchmarks import infra
from benchmarks.context import Context
from benchmarks.report import NOTE, SAVER, Column, Row, Table, add_ratios, error_row
from benchmarks.savers import Namespace, SaverSpec, Store, drain, provisioned
from benchmarks.timing import describe
from benchmarks.workloads import (
    MESSAGES_PER_INVOKE,
    STEPS_PER_INVOKE,
    chat_config,
    chat_graph,
    chat_input,
)

SECTION = "storage"
STORES: tuple[Store, ...] = get_args(Store)
"""Postgres, Redis, SQLite: the order of the per-store columns."""

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Footprint:
    """Bytes per store at one moment (``None``: the saver does not use that store)."""

    sizes: dict[Store, int | None]
    redis_keys: int | None


def _footprint(spec: SaverSpec, ns: Namespace) -> Footprint:
    redis_keys, redis_bytes = (
        infra.prefix_usage(ns.redis_url, ns.key_prefix) if "redis" in spec.stores else (None, None)
    )
    sizes: dict[Store, int | None] = {
        "postgres": infra.schema_bytes(ns.postgres_url, ns.schema)
        if "postgres" in spec.stores
        else None,
        "redis": redis_bytes,
        "sqlite": infra.sqlite_bytes(ns.sqlite_path) if "sqlite" in spec.stores else None,
    }
    return Footprint(sizes, redis_keys)


def _per_step(after: int | None, before: int | None, steps: int) -> float | None:
    return None if after is None or before is None else (after - before) / steps


def _measure(spec: SaverSpec, ns: Namespace, threads: int, invokes: int) -> Row:
    """Run the workload and return the growth of each store, per step."""
    graph_builder = chat_graph(async_nodes=False)
    with spec.open(ns) as saver:
        before = _footprint(spec, ns)
        graph = graph_builder.compile(checkpointer=saver)
        for thread in range(threads):
            thread_id = f"storage-{thread}"
            for turn in range(invokes):
                graph.invoke(chat_input(thread_id, turn), chat_config(thread_id), durability="sync")
        drain(saver)
    after = _footprint(spec, ns)  # closed: SQLite has folded its WAL back
    steps = threads * invokes * STEPS_PER_INVOKE
    per_step = {
        f"{store}_b": _per_step(after.sizes[store], before.sizes[store], steps) for store in STORES
    }
    total = sum(value for value in per_step.values() if value is not None)
    return {
        "saver": spec.name,
        "steps": steps,
        **per_step,
        "total_b": total,
        "redis_keys": after.redis_keys,
    }


def run(ctx: Context) -> list[Table]:
    """Measure each persistent saver in turn (no timing here, so no interleaving)."""
    threads, invokes = ctx.profile.storage_threads, ctx.profile.macro_invokes
    table = Table(
        SECTION,
        "Storage: growth per superstep",
        (
            SAVER,
            Column("steps", "steps", "int"),
            *(Column(f"{store}_b", f"{store} B/step", "bytes") for store in STORES),
            Column("total_b", "total B/step", "bytes"),
            Column("x_postgres", "vs pg", "ratio"),
            Column("redis_keys", "redis keys", "int"),
        ),
        notes=[
            f"{threads} threads x {invokes} invocations of the chat graph (durability=sync), "
            f"{invokes * MESSAGES_PER_INVOKE} messages per thread at the end. Growth from "
            "right after setup() to after flush + close: Postgres = pg_total_relation_size of "
            "the saver's schema's tables (heap + indexes + TOAST, whole pages), Redis = "
            "MEMORY USAGE summed over the saver's prefix, SQLite = db + -wal + -shm files.",
        ],
    )
    for spec in ctx.specs:
        if spec.volatile:
            table.rows.append({"saver": spec.name, NOTE: "n/a: in-process"})
            continue
        log.info("%s: %s", SECTION, spec.name)
        try:
            table.rows.append(
                _measure(spec, provisioned(ctx.settings, spec, SECTION), threads, invokes)
            )
        except Exception as exc:
            table.rows.append(error_row(spec.name, describe(exc)))
    add_ratios(table.rows, "total_b")
    return [table]
