"""What the CLI reads to build its tables: the saver's API plus its engine's operator
queries (`Engine.thread_summaries`, …)."""

from __future__ import annotations

from typing import Any

import redis.exceptions
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple

from langgraph_durable._cli.views import HistoryRow, ThreadRow, interrupts_of, moment
from langgraph_durable._tiers.probes import HotThread, HotView
from langgraph_durable.errors import ConfigurationError, DurableError
from langgraph_durable.saver import DurableSaver


class NotFound(DurableError):
    """A thread or checkpoint the user named does not exist."""


def hot_threads(hot: HotView | None, thread_ids: list[str]) -> dict[str, HotThread] | None:
    """The hot keys of some threads; ``None`` when Redis cannot be read."""
    if hot is None:
        return None
    try:
        return hot.threads(thread_ids)
    except redis.exceptions.RedisError:
        return None


def thread_rows(saver: DurableSaver, hot: HotView | None, *, limit: int,
                where: dict[str, Any] | None = None) -> tuple[int, list[ThreadRow]]:
    """The schema's thread count and its threads, Postgres and Redis merged; with
    ``where``, only the threads with a checkpoint whose metadata contains it.

    A thread only Redis holds (written behind, not flushed yet) is listed too; ``unflushed``
    counts a thread's checkpoints with write-behind entries not yet in Postgres.
    """
    total, summaries = saver.engine.thread_summaries(metadata=where, limit=limit)
    ids = [s.thread_id for s in summaries]
    hot_only: list[str] = []
    if hot is not None:
        try:
            listed = set(ids)
            candidates = [t for t in hot.thread_ids() if t not in listed]
        except redis.exceptions.RedisError:
            hot, candidates = None, []
        if candidates:  # threads beyond the page are in Postgres too; keep the others
            _, present = saver.engine.thread_summaries(thread_ids=candidates,
                                                       limit=len(candidates))
            in_cold = {p.thread_id for p in present}
            hot_only = [t for t in candidates if t not in in_cold]
            if where and hot_only:
                hot_only = _hot_matching(saver, hot_threads(hot, hot_only) or {}, where)
            hot_only = hot_only[: max(0, limit - len(ids))]
    found = hot_threads(hot, ids + hot_only)
    unflushed = {t: h.unflushed for t, h in (found or {}).items()}
    rows = [
        ThreadRow(s.thread_id, s.checkpoints, s.namespaces, s.bytes, s.last_update,
                  None if found is None else s.thread_id in found, True,
                  None if found is None else unflushed.get(s.thread_id, 0))
        for s in summaries
    ]
    for thread_id in hot_only:
        hot_thread = (found or {}).get(thread_id)
        count = len(hot_thread.checkpoint_keys()) if hot_thread else None
        rows.append(ThreadRow(thread_id, count, None, None, None, True, False,
                              unflushed.get(thread_id, 0)))
    return total + len(hot_only), rows


def _hot_matching(saver: DurableSaver, threads: dict[str, HotThread],
                  where: dict[str, Any]) -> list[str]:
    """The threads (Redis only) with a hot checkpoint whose metadata contains ``where``,
    matched as Postgres will match them once flushed."""
    matching = []
    for thread_id, hot_thread in threads.items():
        for _, ns, cid in hot_thread.checkpoint_keys():
            tup = saver.get_tuple({"configurable": {"thread_id": thread_id, "checkpoint_ns": ns,
                                                    "checkpoint_id": cid}})
            if tup is not None and saver.engine.metadata_matches(tup.metadata, where):
                matching.append(thread_id)
                break
    return matching


def history_rows(saver: DurableSaver, hot: HotView | None, thread_id: str, *,
                 checkpoint_ns: str | None, limit: int | None) -> list[HistoryRow]:
    """A thread's checkpoints newest first, with the bytes each added and where it lives.

    Raises:
        NotFound: the thread has no checkpoint.
    """
    configurable: dict[str, Any] = {"thread_id": thread_id}
    if checkpoint_ns is not None:
        configurable["checkpoint_ns"] = checkpoint_ns
    tuples = list(saver.list({"configurable": configurable}, limit=limit))
    if not tuples:
        raise NotFound(f"thread {thread_id!r} has no checkpoints in schema "
                       f"{saver.config.schema!r}")
    sizes = {(s.checkpoint_ns, s.checkpoint_id): s.total for s in saver.engine.checkpoint_sizes(
        thread_id, checkpoint_ns=checkpoint_ns, limit=limit)}
    found = hot_threads(hot, [thread_id])
    hot_ids = set() if found is None or thread_id not in found else {
        (ns, cid) for _, ns, cid in found[thread_id].checkpoint_keys()}
    rows = []
    for tup in tuples:
        conf = tup.config["configurable"]
        key = (conf.get("checkpoint_ns", ""), conf["checkpoint_id"])
        meta = tup.metadata or {}
        updated = [c for c in tup.checkpoint.get("updated_channels") or []
                   if not c.startswith("branch:")]
        step, source = meta.get("step"), meta.get("source")
        rows.append(HistoryRow(
            checkpoint_id=key[1], checkpoint_ns=key[0],
            step=step if isinstance(step, int) else None,
            source=None if source is None else str(source), updated_channels=tuple(sorted(updated)),
            time=moment(tup.checkpoint.get("ts")), added_bytes=sizes.get(key),
            pending_writes=len(tup.pending_writes or []), interrupts=len(interrupts_of(tup)),
            hot=None if found is None else key in hot_ids,
        ))
    return rows


def checkpoint(saver: DurableSaver, thread_id: str, ref: str | None, *,
               checkpoint_ns: str = "") -> CheckpointTuple:
    """The checkpoint ``ref`` names: a full id, a unique fragment of one, or the latest.

    Raises:
        NotFound: no such thread or checkpoint.
        ConfigurationError: the fragment matches several checkpoints.
    """
    config: RunnableConfig = {"configurable": {"thread_id": thread_id,
                                               "checkpoint_ns": checkpoint_ns}}
    if ref is None:
        latest = saver.get_tuple(config)
        if latest is None:
            raise NotFound(f"thread {thread_id!r} has no checkpoints in schema "
                           f"{saver.config.schema!r}")
        return latest
    exact = saver.get_tuple({"configurable": {**config["configurable"], "checkpoint_id": ref}})
    if exact is not None:
        return exact
    matches = saver.engine.match_checkpoint(thread_id, checkpoint_ns, ref)
    if not matches:
        raise NotFound(f"thread {thread_id!r} has no checkpoint matching {ref!r} "
                       "(see `langgraph-durable history`)")
    if len(matches) > 1:
        raise ConfigurationError(f"{ref!r} matches {len(matches)} checkpoints of thread "
                                 f"{thread_id!r} ({', '.join(matches[:3])}, …); give more of it")
    found = saver.get_tuple({"configurable": {**config["configurable"],
                                              "checkpoint_id": matches[0]}})
    if found is None:  # deleted between the two reads
        raise NotFound(f"checkpoint {matches[0]!r} of thread {thread_id!r} is gone")
    return found
