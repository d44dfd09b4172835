"""The saver's operations, written once as sans-I/O generators (see `requests`).

Each returns an `Op` that a driver runs: `hot` (Redis plumbing and the write-through
protocol), `reads`, `writes`, `delta`; this module gathers them for the saver and adds
`health` and the record of the puts that failed (`put`).
"""

from __future__ import annotations

import time
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import ChannelVersions, Checkpoint, CheckpointMetadata

from langgraph_durable._core import journal, ledger, writes
from langgraph_durable._core.context import Context
from langgraph_durable._core.delta import delta_channel_history
from langgraph_durable._core.hot import poll_marks, recover_hot
from langgraph_durable._core.prune import prune
from langgraph_durable._core.reads import get_tuple, list_checkpoints
from langgraph_durable._core.records import locate
from langgraph_durable._core.requests import Op
from langgraph_durable._core.sweep import sweep
from langgraph_durable._core.writes import (
    copy_thread,
    delete_for_runs,
    delete_threads,
    put_writes,
)
from langgraph_durable.errors import ConfigurationError, TierUnavailableError

__all__ = [
    "copy_thread",
    "delete_for_runs",
    "delete_threads",
    "delta_channel_history",
    "get_tuple",
    "health",
    "list_checkpoints",
    "poll_marks",
    "prune",
    "put",
    "put_writes",
    "recover_hot",
    "sweep",
]


def put(ctx: Context, config: RunnableConfig, checkpoint: Checkpoint,
        metadata: CheckpointMetadata, new_versions: ChannelVersions) -> Op[RunnableConfig]:
    """`writes.put`, and whether it failed, in the marks of the LangGraph run that made it
    (`Marks.put_failed`: a durable tool of the run then knows its step's checkpoint is not
    on its way). A put stopped midway (a cancelled ``ainvoke``) is not noted: it may have
    committed."""
    try:
        stored = yield from writes.put(ctx, config, checkpoint, metadata, new_versions)
    except Exception as exc:
        _put_failed(ctx, config, checkpoint, exc)
        raise
    run = ctx.lineage.run(config)  # marks only a failed put or a durable tool made
    if run is not None:
        configurable = stored["configurable"]
        run.put_stored(configurable["thread_id"], configurable["checkpoint_ns"])
    return stored


def _put_failed(ctx: Context, config: RunnableConfig, checkpoint: Checkpoint,
                exc: Exception) -> None:
    """Note in the run's marks that the put of ``checkpoint`` failed with ``exc``, in the
    namespace `writes.put` reads from ``config`` (a config it refused names none)."""
    run = ctx.lineage.run(config, make=True)
    checkpoint_id = checkpoint.get("id")
    if run is None or not isinstance(checkpoint_id, str):
        return
    try:
        where = locate(config)
    except ConfigurationError:
        return
    run.put_failed(where.thread_id, where.checkpoint_ns, checkpoint_id,
                   f"{type(exc).__name__}: {exc}")


def health(ctx: Context) -> Op[dict[str, Any]]:
    """Reachability, breaker, flush backlog and lag, latency per tier, ledger outcome
    counts and what this process's sweeps reclaimed, without raising when a tier is down."""
    report: dict[str, Any] = {"write_mode": ctx.config.write_mode}
    try:
        state = yield from journal.journal_state(ctx)
        hot_ok = True
    except TierUnavailableError:
        state, hot_ok = journal.JournalState("", "", 0, 0, 0), False
    oldest = state.oldest
    try:
        report["ledger"] = yield from ledger.counts(ctx, None)
        cold_ok = True
    except TierUnavailableError:
        cold_ok = False
    lag = max(0.0, time.time() - journal.stream_order(oldest)[0] / 1000) if oldest else 0.0
    report["hot"] = {
        "reachable": hot_ok,
        "breaker": ctx.breaker.state(),
        "trips": ctx.breaker.trips,
        "recoveries": ctx.breaker.recoveries,
    }
    report["cold"] = {"reachable": cold_ok}
    report["flush"] = {
        "unflushed": state.length,
        "unflushed_bytes": state.bytes,
        "dead_letters": state.dead_letters,
        "lag_seconds": round(lag, 3),
        "policy": ctx.config.flush_policy,
    }
    report["latency_ms"] = ctx.latencies.percentiles()
    report["retention"] = ctx.sweeps.snapshot()
    return report
