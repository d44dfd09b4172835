"""The coherence invariants of DESIGN.md §2, checked on a run's history and final state.

Steps are the scheduler's clock: a call *acknowledged before* a read ended at a step
smaller than the read's start. A call that raised is not acknowledged, but its effect
may exist, so it never counts as a floor and never counts as absent.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from langgraph.checkpoint.base import CheckpointTuple

from tests.support.sim.core import Cold, Op, Tiers, execute, ops, run
from tests.support.sim.scheduler import Sim, short
from tests.support.sim.workload import DESTROYS, READS, Record, Workload, config, tuple_id


@dataclass(frozen=True, slots=True)
class Violation:
    """One broken invariant: which, where, what, and at which step."""

    invariant: str  # I1..I5, "C" (a read returned other content than was put), "E" (an
    # error the protocol must not raise), "L" (stuck)
    where: str
    message: str
    step: int

    def __str__(self) -> str:
        return f"{self.invariant} at step {self.step} [{self.where}]: {self.message}"


def _ids(record: Record) -> list[str]:
    """Checkpoint ids a read returned."""
    result = record.result
    if isinstance(result, list):
        return [i for i in (tuple_id(t) for t in result) if i]
    return [i for i in [tuple_id(result)] if i]


def _overlaps(d: Record, start: int, end: int) -> bool:
    """Whether call ``d`` ran at any point of ``[start, end]`` (unfinished: forever)."""
    return d.start <= end and (d.end < 0 or d.end >= start)


class Checker:
    """Judges one finished `Sim`."""

    def __init__(self, sim: Sim, allowance: int = 0) -> None:
        self.sim, self.allowance = sim, allowance
        self.history = sim.history
        self.puts = {r.call.checkpoint_id: r for r in self.history if r.call.kind == "put"}
        self.out: list[Violation] = []

    def report(self, invariant: str, record: Record | None, message: str) -> None:
        where = place(record.call.thread, record.call.ns) if record else "-"
        step = record.end if record else self.sim.clock
        self.out.append(Violation(invariant, where, message, step))

    def _same(self, r: Record, thread: str, ns: str | None = None) -> bool:
        return r.call.thread == thread and (ns is None or r.call.ns == ns)

    def _destroys(self, thread: str, kinds: Iterable[str] = DESTROYS) -> list[Record]:
        return [d for d in self.history if d.call.kind in kinds and d.call.thread == thread]

    # ------------------------------------------------------------------ I1

    def _floor(self, read: Record, *, for_list: bool) -> list[Record]:
        """Acknowledged puts the read must see (newest first)."""
        t, ns = read.call.thread, read.call.ns
        deletes, prunes = self._destroys(t, ["delete"]), self._destroys(t, ["prune"])
        acked = [p for p in self.puts.values() if p.acked and self._same(p, t, ns)]
        # the newest a prune may have kept: of every put acknowledged before the read
        # ended, or that may have committed unacknowledged (its reply lost, or still
        # running): a prune keeps the namespace's latest, whoever wrote it
        newest = max((p.call.checkpoint_id for p in self.puts.values()
                      if self._same(p, t, ns) and p.start <= read.end
                      and (p.end <= read.end if p.acked else self._may_have_committed(p))),
                     default=None)
        out = []
        for p in (p for p in acked if p.ends_before(read.start)):
            if p.id in self.sim.lost or any(_overlaps(d, p.start, read.end) for d in deletes):
                continue
            # a prune may drop old ones from a list; never the namespace's newest
            if (for_list and p.call.checkpoint_id != newest
                    and any(_overlaps(d, p.start, read.end) for d in prunes)):
                continue
            if self._unseen_for_now(p, read):
                continue
            out.append(p)
        return sorted(out, key=lambda p: p.call.checkpoint_id, reverse=True)

    @staticmethod
    def _may_have_committed(put: Record) -> bool:
        """Whether an unacknowledged put may be in Postgres: a request of it ran, and it
        did not end with a refusal that stores nothing."""
        return put.wrote >= 0 and "ThreadConflictError" not in put.error

    def _unseen_for_now(self, write: Record, read: Record) -> bool:
        """The documented exception of I1: a write that bypassed Redis, read by another
        process before its next stale-mark poll (within the allowance)."""
        return bool(self.allowance and not write.hot_written and write.proc != read.proc
                    and read.start - write.end <= self.allowance)

    def never_older(self) -> None:
        """I1: a read of the head started after a put was acknowledged is not older than
        it, carries the acknowledged pending writes, and a list holds every such put."""
        for r in self.history:
            if not r.acked or r.call.kind not in ("get_latest", "list", "list_filter"):
                continue
            got = _ids(r)
            if r.call.kind == "get_latest":
                floor = self._floor(r, for_list=False)
                if floor and (not got or got[0] < floor[0].call.checkpoint_id):
                    self.report("I1", r, f"#{r.id} read {_short(got)} but #{floor[0].id} "
                                f"acknowledged {_short([floor[0].call.checkpoint_id])} before")
                elif got:
                    self._writes_carried(r, got[0])
                continue
            flt = r.call.filter or {}
            for p in self._floor(r, for_list=True):
                meta = {"source": "fork" if p.call.fork else "loop", "step": p.call.step}
                if all(meta.get(k) == v for k, v in flt.items()) and (
                        p.call.checkpoint_id not in got):
                    self.report("I1", r, f"#{r.id} {r.call.kind}({flt}) misses "
                                f"{_short([p.call.checkpoint_id])} acknowledged by #{p.id}")

    def _writes_carried(self, read: Record, cid: str) -> None:
        tup: CheckpointTuple = read.result
        have = {(task, ch) for task, ch, _ in tup.pending_writes or []}
        deletes = self._destroys(read.call.thread, ["delete"])
        for w in self.history:
            if not (w.acked and w.call.kind == "put_writes" and w.call.checkpoint_id == cid
                    and w.ends_before(read.start) and w.id not in self.sim.lost
                    and self._same(w, read.call.thread, read.call.ns)):
                continue
            if any(_overlaps(d, w.start, read.end) for d in deletes):
                continue
            if self._unseen_for_now(w, read):
                continue
            missing = [(t, ch) for t, _, ch in w.call.writes if (t, ch) not in have]
            if missing:
                self.report("I1", read, f"#{read.id} read {_short([cid])} without pending "
                            f"writes {missing} acknowledged by #{w.id}")

    # ------------------------------------------------------------------ I2

    def nothing_lost(self, cold: set[tuple[str, ...]]) -> None:
        """I2: after the drain, every acknowledged checkpoint and write is in Postgres.
        Writes sent ahead of their checkpoint are removed when its put is refused as
        extending a deleted history (docs/failure-model.md, "A thread deleted while a run
        is mid-step")."""
        refused = {(r.call.thread, r.call.ns, r.call.checkpoint_id) for r in self.history
                   if r.call.kind == "put" and r.error == "ThreadConflictError(deleted)"}
        for r in self.history:
            if not r.acked or r.call.kind not in ("put", "put_writes") or r.id in self.sim.lost:
                continue
            if any(_overlaps(d, r.start, 1 << 30) for d in self._destroys(r.call.thread)):
                continue
            c = r.call
            if c.kind == "put_writes" and (c.thread, c.ns, c.checkpoint_id) in refused:
                continue
            wanted = ([(c.thread, c.ns, c.checkpoint_id)] if c.kind == "put" else
                      [(c.thread, c.ns, c.checkpoint_id, t, str(i)) for t, i, _ in c.writes])
            missing = [w for w in wanted if w not in cold]
            if missing:
                self.report("I2", r, f"#{r.id} {c.kind} {_short([c.checkpoint_id])} acknowledged"
                            f" but {len(missing)} of {len(wanted)} rows missing in Postgres")

    # ------------------------------------------------------------------ I3

    def converge(self, tiers: Tiers) -> None:
        """I3: after quiescence Redis serves each thread's head as Postgres holds it,
        pending writes included."""
        raced = self._raced_roots()
        for thread, ns in self.sim.places():
            if (thread, ns) in raced:
                continue
            hot_ctx, cold_ctx = self.sim.reader(), self.sim.reader("through")
            cold_ctx.breaker.failure()  # bypass Redis: Postgres alone
            served, hot = _hot_only(tiers, ops.get_tuple(hot_ctx, config(thread, ns)))
            cold = run(tiers, ops.get_tuple(cold_ctx, config(thread, ns)))
            where = place(thread, ns)
            if not served:
                if cold is not None:
                    self.out.append(Violation("I3", where, "Redis misses the head "
                                              f"{_short([tuple_id(cold)])} after a warming read",
                                              self.sim.clock))
                continue
            if tuple_id(hot) != tuple_id(cold) or _writes(hot) != _writes(cold):
                self.out.append(Violation(
                    "I3", where, f"Redis serves {_short([tuple_id(hot)])} with "
                    f"{len(_writes(hot))} writes, Postgres {_short([tuple_id(cold)])} with "
                    f"{len(_writes(cold))}", self.sim.clock))

    # ------------------------------------------------------------------ I4

    def deleted_is_deleted(self, cold: set[tuple[str, ...]]) -> None:
        """I4: after an acknowledged delete, nothing written before it is served, by any
        read or by Postgres at the end."""
        for d in self.history:
            if not (d.acked and d.call.kind == "delete"):
                continue
            for r in self.history:
                if not (r.acked and r.call.kind.startswith(("get", "list"))
                        and self._same(r, d.call.thread) and r.start > d.end):
                    continue
                if self._unseen_for_now(d, r):  # a delete that bypassed Redis: within a poll
                    continue
                old = [i for i in _ids(r) if i in self.puts and self.puts[i].ends_before(d.start)
                       and self.puts[i].id not in self.sim.lost]  # see the Postgres check
                if old:
                    self.report("I4", r, f"#{r.id} {r.call.kind} served {_short(old)} "
                                f"deleted by #{d.id}")
            # A write-behind entry a flusher held when Redis was wiped (in the wipe's loss
            # window) may still commit, even after a delete: docs/failure-model.md.
            left = [row[2] for row in cold if len(row) == 3 and row[0] == d.call.thread
                    and row[2] in self.puts and self.puts[row[2]].ends_before(d.start)
                    and self.puts[row[2]].id not in self.sim.lost]
            if left:
                self.report("I4", d, f"Postgres still holds {_short(left)} after delete #{d.id}")
            # nor writes of the deleted history, which a run mid-step may still send after
            # the delete (docs/failure-model.md, "A thread deleted while a run is mid-step")
            orphans = [row[2] for row in cold if len(row) == 5 and row[0] == d.call.thread
                       and row[2] in self.puts and self.puts[row[2]].ends_before(d.start)
                       and self.puts[row[2]].id not in self.sim.lost
                       and (row[0], row[1], row[2]) not in cold]
            if orphans:
                self.report("I4", d, f"Postgres holds writes of {_short(orphans)}, whose "
                            f"history delete #{d.id} removed")

    # ------------------------------------------------------------------ I5

    def _raced_roots(self) -> set[tuple[str, str]]:
        """Namespaces two runs started at once (more than one root put): they
        are not serialized, and the tiers may disagree on which root's line is the head
        until it is next written (docs/failure-model.md)."""
        count: dict[tuple[str, str], int] = {}
        for p in self.puts.values():  # a root whose reply was lost may exist all the same
            if not p.call.parent_id:
                key = (p.call.thread, p.call.ns)
                count[key] = count.get(key, 0) + 1
        return {key for key, n in count.items() if n > 1}

    def one_history(self) -> None:
        """I5: per thread and namespace, each acknowledged checkpoint descends from the one
        acknowledged before it (in the order they were written: an acknowledgement may come
        later, after an update sent without waiting), except at a fork the workload asked
        for, across a delete (whatever its outcome), or for a root checkpoint (two runs that
        both start a namespace with no checkpoint yet are not serialized:
        docs/failure-model.md)."""
        parent = {cid: r.call.parent_id for cid, r in self.puts.items()}
        roots = self._raced_roots()
        last: dict[tuple[str, str], Record] = {}
        for r in sorted((p for p in self.puts.values() if p.acked), key=lambda p: p.wrote):
            key = (r.call.thread, r.call.ns)
            prev = last.get(key)
            last[key] = r
            deletes = self._destroys(r.call.thread, ["delete"])
            if prev is None or r.call.fork or not r.call.parent_id or not prev.call.parent_id:
                continue  # a fork asked for, or a root (roots are not serialized)
            if key in roots:
                continue  # two runs started the namespace at once: two lines, documented
            if prev.id in self.sim.lost:
                continue  # lost with a wiped Redis before it reached Postgres
            if any(_overlaps(d, prev.start, r.end) for d in deletes):
                continue
            if _descends(parent, prev.call.checkpoint_id, r.call.checkpoint_id):
                continue  # acknowledged late: a child of it was read from Postgres and
                # extended (and acknowledged) before this reply arrived; one line still
            if self._through_fork(parent, r.call.checkpoint_id, prev.call.checkpoint_id):
                continue  # extends a fork asked for since, whose reply was lost: it
                # committed all the same, and a read of the head found it
            if prev.call.fork and self._fork_left_behind(parent, r, prev):
                continue  # the fork was not the newest when it committed: a branch
            if not _descends(parent, r.call.checkpoint_id, prev.call.checkpoint_id):
                basis = self.history[r.call.basis]
                why = ("its writer's read began after that: a stale read"
                       if prev.ends_before(basis.start) and basis.call.kind != "put"
                       else "concurrent writers: the second one should get ThreadConflictError")
                self.report("I5", r, f"#{r.id} put {_short([r.call.checkpoint_id])} (parent "
                            f"{_short([r.call.parent_id])}) does not descend from "
                            f"{_short([prev.call.checkpoint_id])} acknowledged by #{prev.id}; "
                            + why)

    def _fork_left_behind(self, parent: dict[str, str | None], r: Record, fork: Record) -> bool:
        """Whether ``r``'s line holds a checkpoint made after ``fork``'s (a greater id: the
        workload's ids sort by the time they were made, as LangGraph's do) and written
        before the fork committed. The fork then never was the thread's latest: it stays
        a branch beside that line, which goes on (docs/failure-model.md, "One history per
        thread"); a fork that is the newest when it commits makes the other line's next
        write conflict."""
        node: str | None = r.call.parent_id
        seen: set[str] = set()
        while node and node not in seen:
            seen.add(node)
            put = self.puts.get(node)
            if (put is not None and 0 <= put.wrote < fork.wrote
                    and node > fork.call.checkpoint_id):
                return True
            node = parent.get(node)
        return False

    def _through_fork(self, parent: dict[str, str | None], child: str, other: str) -> bool:
        """Whether ``child``'s line meets ``other``'s only above a fork put, acknowledged or
        not, that began after ``other``'s put ended (a fork the workload asked for)."""
        above = set()
        node: str | None = other
        while node and node not in above:
            above.add(node)
            node = parent.get(node)
        done = self.puts[other].end
        node = child
        while node and node not in above:
            put = self.puts.get(node)
            if put is not None and put.call.fork and put.start >= done:
                return True
            node = parent.get(node)
        return False

    # ------------------------------------------------------------------ all

    # ------------------------------------------------------------------ C
    def as_put(self) -> None:
        """C: every checkpoint a read returned is the one its put sent: its channel values
        and its versions, string for string (`Workload.checkpoint` made them from the
        put's step and process), whichever tier and whichever encoding it was read from."""
        for r in self.history:
            if r.call.kind not in READS or not r.acked:
                continue
            for tup in r.result if isinstance(r.result, list) else [r.result]:
                put = self.puts.get(tuple_id(tup) or "")
                if tup is None or put is None:
                    continue
                sent, versions = Workload.checkpoint_of(put.call.checkpoint_id, put.call.step,
                                                        put.proc)
                got = tup.checkpoint
                if (got["channel_values"], got["channel_versions"]) != (
                        sent["channel_values"], versions):
                    self.report("C", r, f"#{r.id} {r.call.kind} read {_short([tuple_id(tup)])}"
                                f" with {got['channel_values']} {got['channel_versions']}, "
                                f"not what #{put.id} put")

    def run(self) -> list[Violation]:
        """Every check, on the history and on both tiers' final state."""
        sim = self.sim
        for r in self.history:
            if r.error.startswith("UNEXPECTED"):
                self.report("E", r, f"#{r.id} {r.call.kind} raised {r.error[11:]}")
        if sim.stuck:
            self.report("L", None, "calls still in flight (or journal not drained) long "
                        "after the workload stopped")
            return self.out
        cold = cold_rows(sim)
        self.never_older()
        self.nothing_lost(cold)
        self.converge(sim.env.tiers)
        self.deleted_is_deleted(cold)
        self.one_history()
        self.as_put()
        return self.out


def cold_rows(sim: Sim) -> set[tuple[str, ...]]:
    """Postgres's rows of the run's threads, queried directly: ``(thread, ns, id)`` for
    checkpoints, ``(thread, ns, id, task, idx)`` for writes."""
    schema = sim.env.schema
    rows: set[tuple[str, ...]] = set()
    for r in sim.env.pg.execute(
        f'SELECT thread_id, checkpoint_ns, checkpoint_id FROM "{schema}".lgd_checkpoints '
        "WHERE thread_id = ANY(%s)", [sim.threads]).fetchall():
        rows.add((r[0], r[1], r[2]))
    for r in sim.env.pg.execute(
        f'SELECT thread_id, checkpoint_ns, checkpoint_id, task_id, idx FROM "{schema}".'
        "lgd_writes WHERE thread_id = ANY(%s)", [sim.threads]).fetchall():
        rows.add((r[0], r[1], r[2], r[3], str(r[4])))
    return rows


def _hot_only(tiers: Tiers, op: Op[Any]) -> tuple[bool, Any]:
    """Drive a read on Redis alone: ``(False, None)`` as soon as it turns to Postgres."""
    request = next(op)
    while True:
        if isinstance(request, Cold):
            op.close()
            return False, None
        try:
            request = op.send(execute(tiers, request))
        except StopIteration as stop:
            return True, stop.value


def _writes(tup: CheckpointTuple | None) -> set[tuple[str, str, str]]:
    return {(t, c, repr(v)) for t, c, v in (tup.pending_writes or [])} if tup else set()


def place(thread: str, ns: str) -> str:
    """``t0`` or ``t0/inner``."""
    return short(thread) + (f"/{ns}" if ns else "")


def _descends(parent: dict[str, str | None], child: str, ancestor: str) -> bool:
    """Whether ``child`` is ``ancestor`` or descends from it."""
    node: str | None = child
    for _ in range(10_000):
        if not node or node == ancestor:
            break
        node = parent.get(node)
    return node == ancestor


def _short(ids: Sequence[str | None]) -> str:
    return ",".join("…" + i[-6:] if i else "None" for i in ids) or "nothing"
