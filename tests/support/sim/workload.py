"""What the simulated processes do: seeded workloads written as generators of calls.

An actor yields a `Call` (a saver operation built for its process's context), and gets
back the call's `Record` once the scheduler has driven it to its end, so a writer can
put a checkpoint whose parent is what its read returned, as LangGraph does.
"""

from __future__ import annotations

import random
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    empty_checkpoint,
)
from langgraph.checkpoint.base.id import UUID

from langgraph_durable._core.lineage import RUN_KEY
from tests.support.sim.core import Context, Op, journal, ops, recover_hot

READS = ("get_latest", "get_by_id", "list", "list_filter")
DESTROYS = ("delete", "prune")


@dataclass(slots=True)
class Call:
    """One saver operation a process starts, with what the checkers need to know of it."""

    kind: str  # a READS or DESTROYS name, "put", "put_writes", "flush", "probe"
    thread: str
    ns: str
    op: Op[Any]
    checkpoint_id: str = ""  # put: the new id; get_by_id: the id asked; put_writes: target
    parent_id: str = ""  # put: the parent the writer read
    fork: bool = False  # put: the caller asked for a fork (time travel)
    writes: tuple[tuple[str, int, str], ...] = ()  # put_writes: (task_id, idx, channel)
    filter: dict[str, Any] | None = None  # list_filter: the metadata filter
    step: int = -1  # put: the "step" in the checkpoint's metadata
    basis: int = -1  # put: the record whose result gave the parent (a read, or a put)


@dataclass(slots=True)
class Record:
    """What became of one call: scheduler steps at its start and end, and its outcome.

    ``acked`` is True only when the operation returned; one that raised may or may not
    have taken effect. ``hot_written`` tells whether a hot write script of it ran;
    ``wrote`` is the step of its last request that ran and that it waited for (a put's
    commit: an update sent without waiting comes after it but does not order it).
    """

    id: int
    proc: int
    call: Call
    start: int
    end: int = -1
    acked: bool = False
    error: str = ""
    result: Any = None
    hot_written: bool = False
    wrote: int = -1

    @property
    def finished(self) -> bool:
        return self.end >= 0

    def ends_before(self, step: int) -> bool:
        return 0 <= self.end < step


Actor = Generator[Call, Record, None]


def config(thread: str, ns: str, checkpoint_id: str | None = None) -> RunnableConfig:
    """The config LangGraph passes for a thread, namespace and (optional) checkpoint."""
    configurable: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ns}
    if checkpoint_id is not None:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}


def tuple_id(tup: CheckpointTuple | None) -> str | None:
    """The checkpoint id of a tuple, or None."""
    return None if tup is None else str(tup.config["configurable"]["checkpoint_id"])


@dataclass(slots=True)
class Workload:
    """The seeded choices of one run: threads, ids, values, and the mix of tasks."""

    rng: random.Random
    threads: list[str]
    mode: str
    ticks: int = 0x01B21DD213814000 + 1_790_000_000 * 10**7
    known: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    counter: int = 0
    writes_first: float = 0.0  # see `Params.writes_first`

    def checkpoint_id(self) -> str:
        """A uuid6 id from a seeded clock: later calls sort after earlier ones."""
        self.ticks += self.rng.randint(1, 10_000)
        t = self.ticks
        value = ((t >> 12) & 0xFFFFFFFFFFFF) << 80 | (t & 0x0FFF) << 64
        value |= self.rng.getrandbits(14) << 48 | self.rng.getrandbits(48)
        return str(UUID(int=value, version=6))

    def token(self, what: str) -> str:
        self.counter += 1
        return f"{what}{self.counter}"

    def where(self) -> tuple[str, str]:
        """A thread and namespace to work on (mostly the root namespace)."""
        return self.rng.choice(self.threads), ("" if self.rng.random() < 0.85 else "inner")

    def checkpoint(self, cid: str, step: int, proc: int) -> tuple[Checkpoint, ChannelVersions]:
        """A real checkpoint with one channel whose new version it introduces."""
        cp, versions = self.checkpoint_of(cid, step, proc)
        cp["ts"] = f"2026-01-01T00:00:{self.ticks % 60:02d}+00:00"
        return cp, versions

    @staticmethod
    def checkpoint_of(cid: str, step: int, proc: int) -> tuple[Checkpoint, ChannelVersions]:
        """The checkpoint `checkpoint` makes (but its timestamp), and its new versions: the
        versions as ``get_next_version`` makes them (a 32-digit counter)."""
        version = f"{step + 1:032}.{proc:016}"
        cp = empty_checkpoint()
        cp["id"] = cid
        cp["channel_values"] = {"counter": step, "who": f"p{proc}"}
        cp["channel_versions"] = {"counter": version, "who": version}
        return cp, {"counter": version, "who": version}

    def task_writes(self) -> list[tuple[str, Any]]:
        """A task's writes: ordinary channels, or special ones (twice in one call, sometimes)."""
        roll = self.rng.random()
        if roll < 0.15:
            return [("__interrupt__", self.token("i")), ("__interrupt__", self.token("i"))]
        if roll < 0.3:
            return [("__interrupt__", self.token("i"))]
        return [("counter", self.token("v")), ("log", self.token("l"))][: self.rng.randint(1, 2)]


def run_config(
    run: object, thread: str, ns: str, checkpoint_id: str | None = None
) -> RunnableConfig:
    """The config of a read or write made inside one LangGraph run: LangGraph passes the
    run's runtime object in every one of them (`_core.lineage`)."""
    made = config(thread, ns, checkpoint_id)
    made["configurable"][RUN_KEY] = run
    return made


def put_call(
    w: Workload, ctx: Context, proc: int, where: tuple[str, str], parent_id: str | None,
    step: int, *, fork: bool, basis: int, run: object, cid: str = "",
) -> Call:
    """A put of a new checkpoint at ``step`` (``cid``, else a new id), child of
    ``parent_id``, made by ``run``."""
    thread, ns = where
    cid = cid or w.checkpoint_id()
    cp, versions = w.checkpoint(cid, step, proc)
    metadata: CheckpointMetadata = {"source": "fork" if fork else "loop", "step": step,
                                    "parents": {}}
    w.known.setdefault(where, []).append(cid)
    op = ops.put(ctx, run_config(run, thread, ns, parent_id), cp, metadata, versions)
    return Call("put", thread, ns, op, checkpoint_id=cid, parent_id=parent_id or "", fork=fork,
                step=step, basis=basis)


def writes_call(w: Workload, ctx: Context, thread: str, ns: str, cid: str) -> Call:
    """One task's ``put_writes`` on checkpoint ``cid``."""
    task = w.token("task")
    writes = w.task_writes()
    shape = tuple((task, WRITES_IDX_MAP.get(ch, i), ch) for i, (ch, _) in enumerate(writes))
    op = ops.put_writes(ctx, config(thread, ns, cid), writes, task, "")
    return Call("put_writes", thread, ns, op, checkpoint_id=cid, writes=shape)


def writer_turn(w: Workload, ctx: Context, proc: int) -> Actor:
    """A LangGraph-like turn: read the head (or, rarely, time-travel to an older
    checkpoint), put a child of it, its tasks' writes, then the next checkpoint."""
    thread, ns = w.where()
    known = w.known.get((thread, ns), [])
    fork = bool(known) and w.rng.random() < 0.1
    run = object()  # this turn's runtime, as LangGraph makes one per run
    if fork:
        base = w.rng.choice(known)
        read = yield Call("get_by_id", thread, ns,
                          ops.get_tuple(ctx, run_config(run, thread, ns, base)),
                          checkpoint_id=base)
    else:
        read = yield Call("get_latest", thread, ns,
                          ops.get_tuple(ctx, run_config(run, thread, ns)))
    if not read.acked or (fork and read.result is None):
        return
    head: CheckpointTuple | None = read.result
    step = int(head.metadata.get("step", -1)) + 1 if head else 0
    put = yield put_call(w, ctx, proc, (thread, ns), tuple_id(head), step, fork=fork,
                         basis=read.id, run=run)
    if not put.acked:
        return
    for _ in range(w.rng.randint(1, 3)):
        if not (yield writes_call(w, ctx, thread, ns, put.call.checkpoint_id)).acked:
            return
    # a forked run goes on along its own branch, extending what it wrote
    cid = ""
    if w.writes_first and w.rng.random() < w.writes_first:  # its writes arrive first
        cid = w.checkpoint_id()
        if not (yield writes_call(w, ctx, thread, ns, cid)).acked:
            return
    yield put_call(w, ctx, proc, (thread, ns), put.call.checkpoint_id, step + 1, fork=False,
                   basis=put.id, run=run, cid=cid)


def reader(w: Workload, ctx: Context) -> Actor:
    """One read: the head, a checkpoint by id, or the history (with a metadata filter)."""
    thread, ns = w.where()
    known = w.known.get((thread, ns), [])
    roll = w.rng.random()
    if roll < 0.5 or (roll < 0.7 and not known):
        yield Call("get_latest", thread, ns, ops.get_tuple(ctx, config(thread, ns)))
    elif roll < 0.7:
        cid = w.rng.choice(known)
        yield Call("get_by_id", thread, ns, ops.get_tuple(ctx, config(thread, ns, cid)),
                   checkpoint_id=cid)
    elif roll < 0.85:
        op = ops.list_checkpoints(ctx, config(thread, ns), filter=None, before=None, limit=None)
        yield Call("list", thread, ns, op)
    else:
        flt: dict[str, Any] = w.rng.choice([{"source": "loop"}, {"step": w.rng.randint(0, 3)}])
        op = ops.list_checkpoints(ctx, config(thread, ns), filter=flt, before=None, limit=None)
        yield Call("list_filter", thread, ns, op, filter=flt)


def destroyer(w: Workload, ctx: Context) -> Actor:
    """A destructive call: delete a thread, or prune it to its latest checkpoint."""
    thread = w.rng.choice(w.threads)
    if w.rng.random() < 0.5:
        yield Call("delete", thread, "", ops.delete_threads(ctx, [thread]))
    else:
        yield Call("prune", thread, "", ops.prune(ctx, [thread], "keep_latest"))


def probe(ctx: Context) -> Call:
    """The breaker's recovery, as a saver runs it once the cooldown has passed."""
    return Call("probe", "", "", recover_hot(ctx))


def process_main(w: Workload, ctx: Context, proc: int) -> Actor:
    """A process's foreground: an endless seeded mix of turns, reads, flushes, deletes."""
    while True:
        if ctx.breaker.is_open and w.rng.random() < 0.5:
            yield probe(ctx)
        roll = w.rng.random()
        if roll < 0.5:
            yield from writer_turn(w, ctx, proc)
        elif roll < 0.85:
            yield from reader(w, ctx)
        elif roll < 0.93 or w.mode != "behind":
            yield from destroyer(w, ctx)
        else:
            yield Call("flush", "", "", journal.flush(ctx, timeout=None))


def process_flusher(w: Workload, ctx: Context) -> Actor:
    """A write-behind process's background flusher: one batch at a time."""
    while True:
        if ctx.breaker.is_open and w.rng.random() < 0.5:
            yield probe(ctx)
        yield Call("flush_batch", "", "", journal.flush_batch(ctx))
