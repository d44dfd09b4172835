"""`DeltaChannel` history: the parent chain's writes and seed per channel in a few
queries, whatever the chain's length.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    DeltaChannelHistory,
    PendingWrite,
    writes_sort_key,
)

from langgraph_durable._core import journal
from langgraph_durable._core.context import Context
from langgraph_durable._core.reads import get_tuple
from langgraph_durable._core.records import (
    Damaged,
    Location,
    corrupt,
    load,
    locate,
    sealed_to,
)
from langgraph_durable._core.requests import Cold, Op
from langgraph_durable._core.seal import blob_place, write_place
from langgraph_durable.errors import TierUnavailableError


def delta_channel_history(
    ctx: Context, config: RunnableConfig, channels: Sequence[str]
) -> Op[dict[str, DeltaChannelHistory]]:
    """Per-channel writes and seed along the parent chain, in two or three round trips
    whatever the chain's length (the default walks one `get_tuple` per ancestor)."""
    if not channels:
        return {}
    if ctx.config.write_mode == "behind":
        try:  # the walk below reads Postgres: bring it up to date first
            yield from journal.flush(ctx, timeout=None)
        except TierUnavailableError as exc:
            if exc.tier != "cold":
                raise
            return (yield from _walk_delta_history(ctx, config, channels))
    where = locate(config)
    target = where.checkpoint_id
    if target is None:
        latest = yield from get_tuple(ctx, config)
        if latest is None:
            return {ch: {"writes": []} for ch in channels}
        target = latest.config["configurable"]["checkpoint_id"]
    base = {"thread_id": where.thread_id, "checkpoint_ns": where.checkpoint_ns}
    chain = (
        yield Cold.one(
            ctx.statements.delta_chain_sql,
            {**base, "checkpoint_id": target, "channels": list(channels)},
            fetch=True,
        )
    )[0]
    walked, seed_at = _walk_chain(chain, channels)
    needed_ids = sorted({cid for ids in walked.values() for cid in ids})
    writes_rows = []
    if needed_ids:
        writes_rows = (
            yield Cold.one(
                ctx.statements.delta_writes_sql,
                {**base, "checkpoint_ids": needed_ids, "channels": list(channels)},
                fetch=True,
            )
        )[0]
    seeds: dict[str, Any] = {}
    if seed_at:
        seed_rows = (
            yield Cold.one(
                ctx.statements.delta_seeds_sql,
                {**base, "seed_ids": list(seed_at.values()), "seed_channels": list(seed_at)},
                fetch=True,
            )
        )[0]
        for row in seed_rows:
            ch = row["channel"]
            place = sealed_to(
                ctx.codec, blob_place, where.thread_id, where.checkpoint_ns, ch, row["version"]
            )
            seeds[ch] = _load_cold(ctx, where, target, row["blob"], place, "blob", ch)
    return _histories(ctx, where, channels, chain, walked, writes_rows, seeds)


def _walk_chain(
    chain: Sequence[Mapping[str, Any]], channels: Sequence[str]
) -> tuple[dict[str, list[str]], dict[str, str]]:
    """For each channel, the checkpoints of the parent chain (nearest first) whose writes
    it replays: down to the first that stores a value of it, which is its seed."""
    remaining = set(channels)
    walked: dict[str, list[str]] = {ch: [] for ch in channels}
    seed_at: dict[str, str] = {}
    for row in chain:
        if not remaining:
            break
        for ch in remaining:
            walked[ch].append(row["checkpoint_id"])
        for ch in set(row["stored"] or []) & remaining:
            seed_at[ch] = row["checkpoint_id"]
            remaining.discard(ch)
    return walked, seed_at


def _histories(
    ctx: Context,
    where: Location,
    channels: Sequence[str],
    chain: Sequence[Mapping[str, Any]],
    walked: Mapping[str, list[str]],
    writes_rows: Sequence[dict[str, Any]],
    seeds: Mapping[str, Any],
) -> dict[str, DeltaChannelHistory]:
    """Each channel's writes along its walked checkpoints, oldest first, and its seed."""
    order = {cid: depth for depth, cid in enumerate(r["checkpoint_id"] for r in chain)}
    result: dict[str, DeltaChannelHistory] = {}
    for ch in channels:
        on_path = set(walked[ch])
        mine = [r for r in writes_rows if r["channel"] == ch and r["checkpoint_id"] in on_path]
        # oldest ancestor first; within one checkpoint, live execution's order
        mine.sort(
            key=lambda r: (
                -order[r["checkpoint_id"]],
                writes_sort_key(r["task_path"], r["task_id"], r["idx"]),
            )
        )
        entry: DeltaChannelHistory = {
            "writes": [(r["task_id"], ch, _write_value(ctx, where, r)) for r in mine]
        }
        if ch in seeds:
            entry["seed"] = seeds[ch]
        result[ch] = entry
    return result


def _walk_delta_history(
    ctx: Context, config: RunnableConfig, channels: Sequence[str]
) -> Op[dict[str, DeltaChannelHistory]]:
    """LangGraph's reference walk, one `get_tuple` per ancestor: served by Redis when
    Postgres is unreachable in write-behind mode."""
    collected: dict[str, list[PendingWrite]] = {c: [] for c in channels}
    seeds: dict[str, Any] = {}
    remaining = set(channels)
    target = yield from get_tuple(ctx, config)
    cursor = target.parent_config if target else None
    while cursor is not None and remaining:
        tup = yield from get_tuple(ctx, cursor)
        if tup is None:
            break
        for write in reversed(tup.pending_writes or []):
            if write[1] in remaining:
                collected[write[1]].append(write)
        for ch in [c for c in remaining if c in tup.checkpoint["channel_values"]]:
            seeds[ch] = tup.checkpoint["channel_values"][ch]
            remaining.discard(ch)
        cursor = tup.parent_config
    result: dict[str, DeltaChannelHistory] = {}
    for ch in channels:
        entry: DeltaChannelHistory = {"writes": list(reversed(collected[ch]))}
        if ch in seeds:
            entry["seed"] = seeds[ch]
        result[ch] = entry
    return result


def _write_value(ctx: Context, where: Location, row: dict[str, Any]) -> Any:
    place = sealed_to(
        ctx.codec,
        write_place,
        where.thread_id,
        where.checkpoint_ns,
        row["checkpoint_id"],
        row["task_id"],
        row["idx"],
        row["channel"],
        row["task_path"],
    )
    return _load_cold(ctx, where, row["checkpoint_id"], row["blob"], place, "write", row["channel"])


def _load_cold(
    ctx: Context,
    where: Location,
    checkpoint_id: str,
    frame: bytes,
    place: bytes,
    part: str,
    channel: str,
) -> Any:
    """A value read from Postgres for a delta history; damage raises `CorruptStateError`."""
    try:
        return load(ctx.codec, frame, place, part, channel)
    except Damaged as damage:
        raise corrupt(where, checkpoint_id, damage, "cold") from damage


PendingWrites = list[PendingWrite]
