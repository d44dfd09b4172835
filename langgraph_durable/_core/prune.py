"""Prune: keep each namespace's latest checkpoint, with the ancestors its delta channels
need to rebuild their values, and delete the rest (or the whole thread), as one change of
whole threads (`writes.mutate_threads`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from langgraph_durable._core.context import Context
from langgraph_durable._core.records import locate
from langgraph_durable._core.requests import Cold, Op, Statement
from langgraph_durable._core.writes import claim_threads, delete_threads, mutate_threads
from langgraph_durable.errors import ConfigurationError

PRUNE_STRATEGIES = ("keep_latest", "delete")


def prune(ctx: Context, thread_ids: Sequence[str], strategy: str) -> Op[None]:
    """Keep the latest checkpoint of each namespace, with every ancestor a `DeltaChannel`
    needs to rebuild its value (back to its nearest stored snapshot) — or delete all."""
    if strategy not in PRUNE_STRATEGIES:
        raise ConfigurationError(
            f"prune strategy must be one of {PRUNE_STRATEGIES}, not {strategy!r}"
        )
    ids = [locate({"configurable": {"thread_id": t}}).thread_id for t in thread_ids]
    if not ids:
        return None
    if strategy == "delete":
        yield from delete_threads(ctx, ids)
        return None
    tokens = yield from claim_threads(ctx, ids)
    rows = yield from prune_scan(ctx, ids)
    yield from mutate_threads(ctx, ids, prune_statements(ctx, ids, rows), tokens=tokens)
    return None


def prune_scan(ctx: Context, thread_ids: Sequence[str]) -> Op[list[dict[str, Any]]]:
    """The shape of the threads' histories that `keep_set` walks."""
    scan = Statement(ctx.statements.prune_scan_sql, {"thread_ids": list(thread_ids)}, fetch=True)
    rows: list[dict[str, Any]] = (
        yield Cold((Statement(ctx.statements.no_jit_sql, {}), scan))
    )[1]
    return rows


# Which checkpoints of a namespace (id -> prune scan row) a prune keeps besides the ancestors
# their delta channels need; `latest_only` by default.
Roots = Callable[[dict[str, dict[str, Any]]], Iterable[str]]


def latest_only(checkpoints: dict[str, dict[str, Any]]) -> list[str]:
    """The namespace's newest checkpoint."""
    return [max(checkpoints)]


def prune_statements(
    ctx: Context, ids: Sequence[str], rows: list[dict[str, Any]], roots: Roots = latest_only
) -> list[Statement]:
    """The statements that delete what the keep-set of the scanned ``rows`` leaves out:
    checkpoints (with their writes) older than the latest the scan saw of their namespace,
    then blobs no remaining checkpoint refers to (`mutate_threads` locks the threads' head
    rows first). The last two return what they deleted."""
    keep = list(keep_set(rows, roots))
    latest: dict[tuple[str, str], str] = {}  # the latest checkpoint the scan saw per namespace
    for row in rows:
        space = (row["thread_id"], row["checkpoint_ns"])
        latest[space] = max(latest.get(space, ""), row["checkpoint_id"])
    return [
        Statement(ctx.statements.no_jit_sql, {}),
        Statement(
            ctx.statements.prune_delete_sql,
            {
                "thread_ids": list(ids),
                "keep_threads": [k[0] for k in keep],
                "keep_ns": [k[1] for k in keep],
                "keep_ids": [k[2] for k in keep],
                "latest_threads": [k[0] for k in latest],
                "latest_ns": [k[1] for k in latest],
                "latest_ids": list(latest.values()),
            },
            fetch=True,
        ),
        Statement(ctx.statements.delete_orphan_blobs_sql, {"thread_ids": list(ids)}, fetch=True),
    ]


def keep_set(
    rows: list[dict[str, Any]], roots: Roots = latest_only
) -> Iterator[tuple[str, str, str]]:
    """``(thread, namespace, checkpoint)`` of every checkpoint a prune keeps: the ``roots``
    of each namespace, each followed by the ancestors its delta channels need."""
    by_ns: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
    for row in rows:
        by_ns.setdefault((row["thread_id"], row["checkpoint_ns"]), {})[row["checkpoint_id"]] = row
    for (thread_id, ns), checkpoints in by_ns.items():
        kept: set[str] = set()
        for root in sorted(roots(checkpoints), reverse=True):
            if root not in kept:
                kept.add(root)
                yield thread_id, ns, root
            latest = checkpoints[root]
            delta_channels = set((latest["counters"] or {}).keys())
            current: dict[str, Any] | None = latest
            # Walk up until every delta channel found its stored value (its seed).
            while delta_channels and current is not None:
                delta_channels -= set(current["stored_channels"] or [])
                parent = current["parent_checkpoint_id"]
                current = checkpoints.get(parent) if parent else None
                if delta_channels and current is not None and current["checkpoint_id"] not in kept:
                    kept.add(current["checkpoint_id"])
                    yield thread_id, ns, current["checkpoint_id"]
