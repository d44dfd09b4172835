"""One worker process of the real-process checker: a `DurableSaver` of its own on the shared
servers, reached through the proxies the nemesis controls, and a few threads that call it
directly on a small set of shared thread ids, recording every call in a history file.

Each call is two JSON lines on an ``O_APPEND`` descriptor, each written with one
``os.write`` (so a line is whole or absent whenever the process is killed): ``invoke``
before the call, then ``ok`` (it took effect), ``fail`` (it surely did not: a
`ThreadConflictError`) or ``info`` (unknown: any other error). A call with no completion
line was cut short by a SIGKILL and is unknown too.

What a call records (``args`` on the invoke line, ``result`` on the completion line):

- ``put``: ``id`` (the new checkpoint's id), ``parent``, ``w`` (the writer: process,
  incarnation and thread) and ``n`` (that writer's counter on that thread, one more per
  put, carried in the channel value, so a read says whose how-many-th put it returns).
- ``put_writes``: ``checkpoint`` and ``task`` (a task id used once).
- ``read`` (``get_tuple`` of the latest, or ``by_id``) and ``list``: ``id``, ``w``, ``n``,
  ``parent`` and ``tasks`` (the pending writes' task ids) of what came back.
- ``delete``, ``prune`` (keep_latest), ``copy`` (``target``: a fresh thread id, read right
  after and then deleted).

Each worker thread passes a runtime object of its own in its configs, as LangGraph does for
a run, so its read-then-put is a compare-and-set on the head (`_core/lineage.py`): two puts
that extend the same checkpoint cannot both be acknowledged. Reads by id use a second
runtime object, so they never turn the thread's next put into a fork. ``run`` makes a short
run under a runtime object of its own (a process serving many runs); ``update`` reads by id
and then updates outside any run (``update_state`` after a UI's read by id).
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
import uuid
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple, empty_checkpoint

from langgraph_durable import DurableSaver, ThreadConflictError
from langgraph_durable._core.lineage import RUN_KEY

BREAKER_COOLDOWN = 0.2
STALE_POLL_INTERVAL = 1.0  # the default; the checker's bound is derived from it
POOL_TIMEOUT = 3.0
RETRY_AFTER = 0.05  # seconds a worker waits after a call failed on an unavailable tier

# How often each kind of thread picks each operation (weights).
ROLES: dict[str, dict[str, int]] = {
    "mixed": {"put": 30, "put_writes": 15, "read": 30, "by_id": 8, "list": 10,
              "delete": 1, "copy": 2, "prune": 2, "run": 6, "update": 3},
    "writer": {"put": 1},
    "reader": {"read": 1},
}


class History:
    """The history file of one process incarnation (see the module docstring)."""

    def __init__(self, path: str, proc: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.proc = proc
        self.pid = os.getpid()
        self._count = 0
        self._lock = threading.Lock()

    def invoke(self, worker: str, op: str, thread: str, args: dict[str, Any]) -> str:
        with self._lock:
            self._count += 1
            op_id = f"{self.proc}.{self._count}"
        self._write({"type": "invoke", "id": op_id, "proc": self.proc, "pid": self.pid,
                     "worker": worker, "op": op, "thread": thread, "args": args,
                     "t": time.time()})
        return op_id

    def complete(self, op_id: str, kind: str, result: dict[str, Any] | None = None,
                 error: str = "", **extra: Any) -> None:
        self._write({"type": kind, "id": op_id, "t": time.time(), "result": result or {},
                     "error": error, **extra})

    def note(self, **fields: Any) -> None:
        self._write({"type": "note", "proc": self.proc, "pid": self.pid, "t": time.time(),
                     **fields})

    def _write(self, record: dict[str, Any]) -> None:
        os.write(self.fd, (json.dumps(record, separators=(",", ":")) + "\n").encode())


def summary(tup: CheckpointTuple | None) -> dict[str, Any]:
    """What a read returned, as the checker compares it."""
    if tup is None:
        return {"id": None}
    value = tup.checkpoint["channel_values"].get("value") or {}
    parent = (tup.parent_config or {}).get("configurable", {}).get("checkpoint_id")
    return {"id": tup.checkpoint["id"], "w": value.get("w"), "n": value.get("n"),
            "parent": parent, "tasks": sorted({t for t, _, _ in tup.pending_writes or []})}


def make_saver(spec: dict[str, Any]) -> DurableSaver:
    return DurableSaver(spec["redis_url"], spec["postgres_url"], schema=spec["schema"],
                        key_prefix=spec["prefix"], write_mode=spec["write_mode"],
                        breaker_cooldown=BREAKER_COOLDOWN, pool_timeout=POOL_TIMEOUT,
                        stale_poll_interval=STALE_POLL_INTERVAL)


class Worker:
    """One thread of a worker process: picks operations at random and records them."""

    def __init__(self, saver: DurableSaver, history: History, spec: dict[str, Any],
                 index: int, role: str) -> None:
        self.saver = saver
        self.history = history
        self.spec = spec
        self.name = f"{spec['proc']}.{index}"
        self.rng = random.Random(f"{spec['seed']}-{self.name}")
        self.weights = ROLES[role]
        self.role = role
        self.runtime = object()  # this thread's "run": its puts extend what it read
        self.by_id_runtime = object()  # reads by id, kept apart so they fork nothing
        self.counters: dict[str, int] = {}
        self.seen: dict[str, list[str]] = {}  # checkpoint ids this thread saw, per thread

    def config(self, thread: str, checkpoint_id: str | None = None,
               runtime: object | None = None, *, in_run: bool = True) -> RunnableConfig:
        """A config of this thread's run (``runtime``: another run's), or with ``in_run``
        false one of a call outside any run (``update_state``, a UI's read by id)."""
        conf: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ""}
        if in_run:
            conf[RUN_KEY] = runtime or self.runtime
        if checkpoint_id is not None:
            conf["checkpoint_id"] = checkpoint_id
        return {"configurable": conf}

    def writing(self) -> bool:
        """Whether writes are allowed now: ``write_window`` = (period, active seconds)
        confines them to the start of each period, so reads then run on a quiet store."""
        window = self.spec.get("write_window")
        if not window:
            return True
        period, active = window
        return bool((time.time() - self.spec["epoch"]) % period < active)

    def run(self, until: float) -> None:
        ops, weights = zip(*self.weights.items(), strict=True)
        while time.time() < until:
            op = self.rng.choices(ops, weights)[0]
            if op in ("put", "put_writes", "delete", "copy", "prune") and not self.writing():
                if self.role == "writer":
                    time.sleep(0.02)
                    continue
                op = "read"
            thread = self.rng.choice(self.spec["threads"])
            try:
                getattr(self, f"op_{op}")(thread)
            except Exception as exc:  # recorded on the op's line; the thread goes on
                self.history.note(worker=self.name, error=f"{type(exc).__name__}: {exc}"[:300])
                time.sleep(0.05)
            if self.spec.get("pace"):
                time.sleep(self.spec["pace"])

    def call(self, op: str, thread: str, args: dict[str, Any], fn: Any) -> tuple[bool, Any]:
        """Record ``fn()`` as one operation; returns whether it succeeded, and its value."""
        breaker = self.saver.engine.context.breaker
        op_id = self.history.invoke(self.name, op, thread, args)
        open_before = breaker.is_open
        try:
            value = fn()
        except ThreadConflictError as exc:
            self.history.complete(op_id, "fail", error=f"ThreadConflictError: {exc}"[:300])
            return False, None
        except Exception as exc:
            self.history.complete(op_id, "info", error=f"{type(exc).__name__}: {exc}"[:300],
                                  breaker=open_before or breaker.is_open)
            time.sleep(RETRY_AFTER)  # as an agent would before it tries again
            return False, None
        result = summary(value) if op in ("read", "by_id") else {}
        if op == "list":
            result = {"ids": [t.checkpoint["id"] for t in value],
                      **(summary(value[0]) if value else {"id": None})}
        self.history.complete(op_id, "ok", result, breaker=open_before or breaker.is_open)
        return True, value

    # -- operations ------------------------------------------------------------------

    def read_latest(self, thread: str) -> tuple[bool, CheckpointTuple | None]:
        ok, tup = self.call("read", thread, {},
                            lambda: self.saver.get_tuple(self.config(thread)))
        if isinstance(tup, CheckpointTuple):
            self.seen.setdefault(thread, []).append(tup.checkpoint["id"])
        return ok, tup

    def op_read(self, thread: str) -> None:
        self.read_latest(thread)

    def op_by_id(self, thread: str) -> None:
        seen = self.seen.get(thread)
        if not seen:
            return self.op_read(thread)
        checkpoint_id = self.rng.choice(seen[-20:])
        config = self.config(thread, checkpoint_id, self.by_id_runtime)
        self.call("by_id", thread, {"id": checkpoint_id}, lambda: self.saver.get_tuple(config))
        return None

    def op_list(self, thread: str) -> None:
        self.call("list", thread, {"limit": 3},
                  lambda: list(self.saver.list(self.config(thread), limit=3)))

    def op_put(self, thread: str) -> None:
        ok, tup = self.read_latest(thread)
        if not ok:  # the head is unknown: no put follows
            return
        self.put_on(thread, tup, lambda parent: self.config(thread, parent))

    def put_on(self, thread: str, tup: CheckpointTuple | None,
               config: Any) -> CheckpointTuple | None:
        """Put a child of ``tup`` (a root when ``None``) with the config ``config(parent)``
        gives; returns the new checkpoint as a tuple once acknowledged, else ``None``."""
        n = self.counters.get(thread, 0) + 1
        self.counters[thread] = n
        checkpoint = empty_checkpoint()
        previous = tup.checkpoint["channel_versions"].get("value") if tup else None
        version = self.saver.get_next_version(None if previous is None else str(previous),
                                              None)
        checkpoint["channel_values"] = {"value": {"w": self.name, "n": n}}
        checkpoint["channel_versions"] = {"value": version}
        parent = tup.checkpoint["id"] if tup else None
        conf = config(parent)
        ok, _ = self.call("put", thread, {"id": checkpoint["id"], "parent": parent,
                                          "w": self.name, "n": n},
                          lambda: self.saver.put(conf, checkpoint,
                                                 {"source": "loop", "step": n, "parents": {}},
                                                 {"value": version}))
        return CheckpointTuple(conf, checkpoint, {}) if ok else None

    def op_run(self, thread: str) -> None:
        """A short run of its own, as a worker serving many runs makes them: a runtime
        object of its own, a read of the latest, then one to three steps, each extending
        the one before, some after a pause (a slow tool call)."""
        runtime = object()
        ok, tup = self.call("read", thread, {}, lambda: self.saver.get_tuple(
            self.config(thread, runtime=runtime)))
        if not ok:
            return
        for _ in range(self.rng.randint(1, 3)):
            if self.rng.random() < 0.3:
                time.sleep(self.rng.uniform(0.0, 0.05))
            tup = self.put_on(thread, tup, lambda parent: self.config(thread, parent, runtime))
            if tup is None:
                return

    def op_update(self, thread: str) -> None:
        """``update_state`` after a UI showed a checkpoint by id, both outside any run: a
        read by id, a read of the latest, a put extending it."""
        seen = self.seen.get(thread)
        if seen:
            checkpoint_id = self.rng.choice(seen[-20:])
            config = self.config(thread, checkpoint_id, in_run=False)
            self.call("by_id", thread, {"id": checkpoint_id},
                      lambda: self.saver.get_tuple(config))
        ok, tup = self.call("read", thread, {}, lambda: self.saver.get_tuple(
            self.config(thread, in_run=False)))
        if ok:
            self.put_on(thread, tup, lambda parent: self.config(thread, parent, in_run=False))

    def op_put_writes(self, thread: str) -> None:
        _, tup = self.read_latest(thread)
        if tup is None:
            return
        task = f"task-{self.name}-{uuid.uuid4().hex[:8]}"
        value = {"w": self.name, "task": task}
        self.call("put_writes", thread, {"checkpoint": tup.checkpoint["id"], "task": task},
                  lambda: self.saver.put_writes(tup.config, [("value", value)], task))

    def op_delete(self, thread: str) -> None:
        self.call("delete", thread, {}, lambda: self.saver.delete_thread(thread))

    def op_prune(self, thread: str) -> None:
        self.call("prune", thread, {}, lambda: self.saver.prune([thread]))

    def op_copy(self, thread: str) -> None:
        target = f"{thread}-copy-{uuid.uuid4().hex[:8]}"
        ok, _ = self.call("copy", thread, {"target": target},
                          lambda: self.saver.copy_thread(thread, target))
        if not ok:
            return
        self.call("read", target, {"copy_of": thread},
                  lambda: self.saver.get_tuple(self.config(target)))
        self.call("delete", target, {}, lambda: self.saver.delete_thread(target))


def run(spec: dict[str, Any]) -> None:
    """A worker process: ``spec`` holds proc (its name, with its incarnation), seed,
    redis_url, postgres_url (its proxies), schema, prefix, write_mode, threads (the shared
    thread ids), roles (one per worker thread), until (wall-clock end), history (its
    file), and optionally write_window, epoch and pace."""
    history = History(spec["history"], spec["proc"])
    saver = make_saver(spec)
    history.note(event="start")
    workers = [Worker(saver, history, spec, i, role) for i, role in enumerate(spec["roles"])]
    threads = [threading.Thread(target=w.run, args=(spec["until"],), daemon=True)
               for w in workers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    history.note(event="stop")
    try:
        saver.close()
    except Exception as exc:  # the run is over; what close met is only noted
        history.note(event="close", error=f"{type(exc).__name__}: {exc}"[:300])
    os._exit(0)
