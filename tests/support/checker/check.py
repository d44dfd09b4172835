"""The history checker: reads the merged history of a run (every worker's operations, the
nemesis's faults, the final reads) and finds what the failure model
(`docs/failure-model.md`) says cannot happen.

An operation is ``ok`` (acknowledged), ``fail`` (surely without effect: a
`ThreadConflictError`) or unknown (``info``: another error, or no completion because the
process was killed). Only acknowledged operations constrain what reads may return; an
unknown one may or may not have taken effect, so reads may show it or not.

The checks, per thread:

1. **Stale read.** A read of the latest checkpoint (``read``, the first entry of ``list``)
   returns nothing older than a checkpoint whose ``put`` was acknowledged before the read
   was invoked ("latest" is the newest checkpoint id, as for every LangGraph saver), unless
   a delete may have come between. The bounded exception: a write that may have bypassed
   Redis (its process's breaker was open, or the nemesis was cutting, slowing or
   restarting that process's Redis) marks the thread stale, and another process applies
   the mark at most ``stale_poll_interval`` later: its reads invoked within `STALE_BOUND`
   of the write's acknowledgement are exempt. A reader paused (SIGSTOP) in that window is
   held to the bound from its first operation after it resumes. Stale reads inside a
   window are counted and their lag is reported (the measured bound).
2. **Lost.** Every acknowledged checkpoint is in the final ``list`` of its thread, read by
   a fresh saver once every fault healed, unless a delete or prune may have removed it.
   Write-behind with Redis killed under ``appendfsync everysec``: the documented window
   (`AOF_WINDOW` before the kill) is exempt.
3. **Pending writes.** A read returning a checkpoint carries every pending write
   acknowledged for it before the read was invoked (same bounded exception).
4. **Deleted stays deleted.** No read invoked after a delete completed returns a
   checkpoint acknowledged before the delete was invoked (same bounded exception).
5. **No silent fork.** No two acknowledged puts extend the same checkpoint (each worker
   thread reads the latest and extends it, a compare-and-set), no two roots are
   acknowledged without a delete between them (two first runs of a thread), and the final
   head's parent chain holds every checkpoint acknowledged since the thread's last delete.

Across the run:

6. **Bounded latency.** Every completed operation ended within `LATENCY_BOUND` of its
   invocation, its own process's pauses not counted, whatever tier was frozen or lost
   (written behind, `RECLAIM_AFTER` longer within that long of a kill, `TIER_TIMEOUT`
   longer per Redis restart it overlaps; after a restart, `CHECK_LEASE` longer if
   another process was killed since, as long as others were paused).
7. **No raw driver error.** No operation failed with one of `RAW_ERRORS`.

A violation is printed with the history slice around it: the operations on its thread in
a window around the violating read, and the faults then.
"""

from __future__ import annotations

import bisect
import itertools
import json
import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langgraph_durable._core.hot import CHECK_LEASE_MS
from tests.support.checker.worker import BREAKER_COOLDOWN, STALE_POLL_INTERVAL

SLACK = 0.5
"""Seconds of scheduling slack on a loaded machine (two cores shared by many processes):
between a read's recorded invocation and the mark poll inside it, and in the poll's own
round trips."""
STALE_BOUND = STALE_POLL_INTERVAL + SLACK
"""The bound the checker enforces: a read in another process invoked more than this long
after a write that bypassed Redis was acknowledged must see it."""
BYPASS_MARGIN = BREAKER_COOLDOWN + SLACK
"""A Redis fault this long before a write may still keep its process's breaker open."""
AOF_WINDOW = 1.5
"""Write-behind, Redis killed with ``appendfsync everysec``: acknowledged writes this long
before the kill may be lost (documented)."""
WRITES = ("put", "put_writes", "delete", "prune", "copy")
TIER_TIMEOUT = 3.0
"""The workers' ``tier_timeout``: the default."""
LATENCY_BOUND = TIER_TIMEOUT + 3.0
"""The longest an operation may take, a fault or not, its own process's pauses not
counted: a frozen or lost tier costs a call at most ``tier_timeout`` on top of its work
(docs/failure-model.md), and its work here is a few round trips on a loaded machine."""
RECLAIM_AFTER = 10.0
"""The workers' ``reclaim_after`` (the default): written behind, a call that drains the
journal (a delete, a copy, a prune) waits for the batch a killed process's flusher held
until it is reclaimed, so within this long of a kill its bound is this much longer."""
RESTARTS = ("redis_restart", "redis_snapshot", "redis_failover")
"""A new Redis process: every call waits for its check (docs/failure-model.md), which,
written behind, takes over the batches flushers held once idle for ``tier_timeout``; a
call within `LATENCY_BOUND` of one has that much longer (more for restarts in a row)."""
CHECK_LEASE = CHECK_LEASE_MS / 1000
"""A new Redis process is checked by one process under a lease; killed midway, every
other waits for the lease to end, paused, for as long as it is paused: a call within
`LATENCY_BOUND` of a Redis restart has that much longer when another process was killed
or paused since."""
FREEZES = ("redis_freeze", "pg_freeze")
"""Each costs a call at most ``tier_timeout``: a call that meets more has that much more."""
RAW_ERRORS = ("ResponseError", "WRONGTYPE", "DataError", "InterfaceError")
"""Driver errors no call may end with: the saver turns what a tier answers into its own
errors (a key of another type is a damaged copy, a dead server a `TierUnavailableError`)."""


@dataclass
class Op:
    """One operation of the history."""

    id: str
    proc: str
    pid: int
    worker: str
    op: str
    thread: str
    args: dict[str, Any]
    t0: float
    t1: float = math.inf  # inf: never completed (the process was killed)
    kind: str = "unknown"  # ok, fail, info, unknown
    result: dict[str, Any] = field(default_factory=dict)
    error: str = ""
    breaker: bool = False

    @property
    def ok(self) -> bool:
        return self.kind == "ok"

    @property
    def may_have_happened(self) -> bool:
        return self.kind != "fail"

    def line(self, start: float) -> str:
        end = "   ..." if self.t1 == math.inf else f"{self.t1 - start:7.3f}"
        what = {k: v for k, v in self.result.items() if v not in (None, [], "")}
        if self.op == "list":
            what = {"ids": [i[-12:] for i in what.get("ids", [])]}
        elif "id" in what:
            what["id"] = str(what["id"])[-12:]
            if what.get("parent"):
                what["parent"] = str(what["parent"])[-12:]
        args = {k: (v[-12:] if isinstance(v, str) and k in ("id", "parent", "checkpoint")
                    else v) for k, v in self.args.items()}
        outcome = self.kind + (f" {self.error[:60]}" if self.error else "")
        return (f"  {self.t0 - start:7.3f} {end} {self.worker:<10} {self.op:<10} "
                f"{json.dumps(args)} -> {outcome} {json.dumps(what) if what else ''}"
                f"{' [breaker open]' if self.breaker else ''}")


@dataclass
class Fault:
    """One nemesis event: what, on which process slot (None: every process), when."""

    kind: str
    slot: str | None
    t0: float
    t1: float
    detail: dict[str, Any] = field(default_factory=dict)

    def line(self, start: float) -> str:
        return (f"  {self.t0 - start:7.3f} {self.t1 - start:7.3f} nemesis    {self.kind:<10} "
                f"{self.slot or 'all'} {json.dumps(self.detail) if self.detail else ''}")


@dataclass
class Violation:
    check: str
    thread: str
    text: str
    at: float
    slice: str = ""


@dataclass
class Report:
    ops: int = 0
    by_kind: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    faults: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    violations: list[Violation] = field(default_factory=list)
    windowed: int = 0  # stale reads inside the bounded window
    max_windowed_lag: float = 0.0
    max_stale_lag: float = 0.0  # the longest a violating read lagged its acknowledged put
    longest: dict[str, float] = field(default_factory=dict)  # per fault kind ("none")
    checked_reads: int = 0
    start: float = 0.0

    def summary(self) -> str:
        checks: dict[str, int] = defaultdict(int)
        for v in self.violations:
            checks[v.check] += 1
        lines = [
            f"operations: {self.ops} "
            f"({', '.join(f'{k} {n}' for k, n in sorted(self.by_kind.items()))})",
            f"nemesis events: {sum(self.faults.values())} "
            f"({', '.join(f'{k} {n}' for k, n in sorted(self.faults.items()))})",
            f"reads checked: {self.checked_reads}; stale inside the bounded window "
            f"({STALE_BOUND:.1f} s after a write that bypassed Redis): {self.windowed}, "
            f"longest lag {self.max_windowed_lag:.3f} s",
            f"violations: {len(self.violations)}"
            + (f" ({', '.join(f'{k} {n}' for k, n in sorted(checks.items()))}); "
               f"longest stale lag {self.max_stale_lag:.3f} s" if self.violations else ""),
            "longest operation: " + ", ".join(
                f"{kind} {took:.2f} s" for kind, took in sorted(
                    self.longest.items(), key=lambda kv: -kv[1]))
            + f" (bound {LATENCY_BOUND:.1f} s)",
        ]
        return "\n".join(lines)


def load(paths: Iterable[Path], nemesis: Path | None) -> tuple[list[Op], list[Fault]]:
    """The operations of every history file, paired invoke with completion, and the
    nemesis's faults."""
    ops: dict[str, Op] = {}
    for path in paths:
        for raw in path.read_text().splitlines():
            if not raw.strip():
                continue
            try:
                rec = json.loads(raw)
            except json.JSONDecodeError:
                continue  # a torn line cannot happen (one write each); be lenient anyway
            if rec["type"] == "invoke":
                ops[rec["id"]] = Op(rec["id"], rec["proc"], rec["pid"], rec["worker"],
                                    rec["op"], rec["thread"], rec["args"], rec["t"])
            elif rec["type"] in ("ok", "fail", "info") and rec["id"] in ops:
                op = ops[rec["id"]]
                op.t1, op.kind, op.result = rec["t"], rec["type"], rec.get("result") or {}
                op.error, op.breaker = rec.get("error", ""), bool(rec.get("breaker"))
    faults: list[Fault] = []
    if nemesis is not None and nemesis.exists():
        for raw in nemesis.read_text().splitlines():
            if raw.strip():
                rec = json.loads(raw)
                faults.append(Fault(rec["kind"], rec.get("slot"), rec["t0"], rec["t1"],
                                    rec.get("detail") or {}))
    return sorted(ops.values(), key=lambda o: o.t0), faults


def slot_of(proc: str) -> str:
    """A process's slot (``p1`` of ``p1@2``): the proxies and faults belong to the slot,
    each incarnation is a process of its own."""
    return proc.split("@", 1)[0]


class Checker:
    """Runs the checks over one history."""

    def __init__(self, ops: list[Op], faults: list[Fault], write_mode: str) -> None:
        self.ops = ops
        self.faults = faults
        self.write_mode = write_mode
        self.start = min((o.t0 for o in ops), default=0.0)
        self.report = Report(start=self.start)
        self.by_thread: dict[str, list[Op]] = defaultdict(list)
        for op in ops:
            self.by_thread[op.thread].append(op)
        self.by_proc: dict[str, list[float]] = defaultdict(list)  # invocation times
        for op in ops:
            self.by_proc[op.proc].append(op.t0)
        self.copies: dict[str, list[Op]] = defaultdict(list)  # acknowledged, by target
        for op in ops:
            if op.op == "copy" and op.ok and op.args.get("target"):
                self.copies[op.args["target"]].append(op)
        self._puts_by_t0: dict[str, tuple[list[Op], list[float]]] = {}
        self._removals: dict[str, tuple[list[float], list[float]]] = {}
        self.pauses: dict[str, list[Fault]] = defaultdict(list)
        for f in faults:
            if f.kind == "pause" and f.detail.get("proc"):
                self.pauses[f.detail["proc"]].append(f)

    # -- the bounded window ------------------------------------------------------------

    def may_bypass(self, write: Op) -> bool:
        """Whether ``write`` may have gone to Postgres alone (with a stale mark)."""
        if write.breaker or write.kind == "unknown":
            return True
        for f in self.faults:
            if f.kind in ("redis_cut", "redis_slow", "redis_restart") and (
                    f.slot is None or f.slot == slot_of(write.proc)) and (
                    f.t0 <= write.t1 and f.t1 >= write.t0 - BYPASS_MARGIN):
                return True
        return False

    def window_end(self, write: Op, reader: str) -> float:
        """Until when a read by process ``reader`` may miss ``write`` (which may have
        bypassed Redis): `STALE_BOUND` after its acknowledgement, moved to the reader's
        first operation after it resumed when it was paused meanwhile."""
        end = write.t1 + STALE_BOUND
        for pause in sorted(self.pauses.get(reader, []), key=lambda f: f.t0):
            if pause.t0 <= end and pause.t1 >= write.t0:
                times = self.by_proc[reader]  # in order: the ops are sorted by invocation
                i = bisect.bisect_left(times, pause.t1)
                first = times[i] if i < len(times) else pause.t1
                end = max(end, first + STALE_BOUND)
        return end

    def exempt(self, write: Op, read: Op) -> bool:
        """Whether ``read`` may miss ``write`` under the failure model's bounded window."""
        return (read.proc != write.proc and self.may_bypass(write)
                and read.t0 <= self.window_end(write, read.proc))

    # -- the checks --------------------------------------------------------------------

    def run(self) -> Report:
        r = self.report
        r.ops = len(self.ops)
        for op in self.ops:
            r.by_kind[f"{op.op} {op.kind}"] += 1
        for f in self.faults:
            r.faults[f.kind] += 1
        for thread, ops in self.by_thread.items():
            self.check_thread(thread, ops)
        self.check_latency()
        self.check_errors()
        return r

    def check_latency(self) -> None:
        """Every completed operation ended within `LATENCY_BOUND`, its own process's
        pauses not counted; the longest is reported per fault kind it overlapped."""
        longest = self.report.longest
        faults = sorted(self.faults, key=lambda f: f.t0)
        starts = [f.t0 for f in faults]
        reach = max((f.t1 - f.t0 for f in faults), default=0.0) + RECLAIM_AFTER
        for op in self.ops:
            if op.t1 == math.inf or op.proc == "final":
                continue
            paused = sum(max(0.0, min(op.t1, f.t1) - max(op.t0, f.t0))
                         for f in self.pauses.get(op.proc, []))
            took = op.t1 - op.t0 - paused
            # the faults that began before the op ended and may reach into it
            near = faults[bisect.bisect_left(starts, op.t0 - reach):
                          bisect.bisect_right(starts, op.t1)]
            during = sorted({f.kind for f in near if f.t1 >= op.t0 and f.kind != "pause"})
            for kind in during or ["none"]:
                longest[kind] = max(longest.get(kind, 0.0), took)
            met = sum(f.kind in FREEZES and f.t0 < op.t1 and f.t1 > op.t0 for f in near)
            bound = LATENCY_BOUND + TIER_TIMEOUT * max(0, met - 1)
            restarted = [f.t0 for f in near
                         if f.kind in RESTARTS and op.t0 <= f.t1 + LATENCY_BOUND]
            if restarted:  # every call waits for one process's check of the new Redis
                since = min(restarted)
                holders = [f for f in near if f.t0 >= since and f.slot != slot_of(op.proc)]
                bound += CHECK_LEASE * any(f.kind == "kill" for f in holders)
                bound += sum(f.t1 - f.t0 for f in holders if f.kind == "pause")
            if self.write_mode == "behind":
                bound += RECLAIM_AFTER * any(
                    f.kind == "kill" and op.t0 <= f.t1 + RECLAIM_AFTER for f in near)
                bound += TIER_TIMEOUT * sum(
                    f.kind in RESTARTS and op.t0 <= f.t1 + LATENCY_BOUND for f in near)
            if took > bound:
                self.violation("latency", op, f"{op.op} by {op.worker} took {took:.1f} s "
                               f"(bound {bound:.1f} s) during "
                               f"{', '.join(during) or 'no fault'}: {op.kind} {op.error}",
                               0.0, before=1.0)

    def check_errors(self) -> None:
        """No operation failed with a raw driver error."""
        for op in self.ops:
            if any(name in op.error for name in RAW_ERRORS):
                self.violation("raw error", op, f"{op.op} by {op.worker}: {op.error}", 0.0,
                               before=1.0)

    def check_thread(self, thread: str, ops: list[Op]) -> None:
        puts = [o for o in ops if o.op == "put" and o.ok]
        virtual = self.copied_puts(thread)
        puts += virtual
        deletes = [o for o in ops if o.op == "delete" and o.may_have_happened]
        prunes = [o for o in ops if o.op == "prune" and o.may_have_happened]
        by_t0 = sorted(puts, key=lambda o: o.t0)
        t0s = [o.t0 for o in by_t0]
        put_of = {o.args["id"]: o for o in ops if o.op == "put" and o.may_have_happened}
        writes: dict[str, list[Op]] = defaultdict(list)
        for o in ops:
            if o.op == "put_writes" and o.ok:
                writes[o.args["checkpoint"]].append(o)
        ok_deletes = sorted((d for d in deletes if d.ok), key=lambda d: d.t0)
        ok_begun = [d.t0 for d in ok_deletes]

        # deletes by invocation, with the latest completion among those invoked so far
        begun = sorted(deletes, key=lambda d: d.t0)
        begun_at = [d.t0 for d in begun]
        ended_by = list(itertools.accumulate((d.t1 for d in begun), max, initial=-math.inf))

        def since_delete(read: Op) -> float:
            """The latest a delete invoked before ``read`` ended may have ended: an
            operation invoked before then may have been deleted before the read."""
            return ended_by[bisect.bisect_left(begun_at, read.t1)]

        def deleted_between(p: Op, read: Op) -> bool:
            return since_delete(read) > p.t0

        for read in ops:
            if not read.ok or read.op not in ("read", "list", "by_id", "final"):
                continue
            got = read.result.get("id")
            self.report.checked_reads += 1
            if read.op in ("read", "list", "final"):  # 1. stale read
                # the puts invoked after every delete that may lie before the read, and
                # before the read began (a put acknowledged before it was invoked then)
                first = bisect.bisect_left(t0s, since_delete(read))
                for p in by_t0[first:bisect.bisect_left(t0s, read.t0)]:
                    if p.t1 >= read.t0 or (got and p.args["id"] <= got):
                        continue
                    lag = read.t0 - p.t1
                    if self.exempt(p, read):
                        self.report.windowed += 1
                        self.report.max_windowed_lag = max(self.report.max_windowed_lag, lag)
                        continue
                    self.violation("stale read", read, f"returned {got} ({self.who(read)}), "
                                   f"older than {p.args['id']} (writer {p.args['w']} n="
                                   f"{p.args['n']}) acknowledged {lag:.3f} s before the read "
                                   f"was invoked, by {p.proc}"
                                   f"{' (may have bypassed Redis)' if self.may_bypass(p) else ''}",
                                   lag)
                    break
            if got is None:
                continue
            for w in writes.get(got, []):  # 3. pending writes
                if w.t1 < read.t0 and w.args["task"] not in read.result.get("tasks", []) \
                        and read.op != "list" and not self.exempt(w, read) \
                        and not deleted_between(w, read):
                    self.violation("pending writes", read, f"returned {got} without task "
                                   f"{w.args['task']} acknowledged {read.t0 - w.t1:.3f} s "
                                   f"before, by {w.proc}; tasks served: "
                                   f"{read.result.get('tasks')}", read.t0 - w.t1)
            stored = put_of.get(got)  # 4. deleted stays deleted
            if stored is not None and stored.ok:
                for d in ok_deletes[bisect.bisect_right(ok_begun, stored.t1):
                                    bisect.bisect_left(ok_begun, read.t0)]:
                    if d.t1 < read.t0 and not self.exempt(d, read):
                        self.violation("deleted came back", read, f"returned {got}, "
                                       f"acknowledged before the delete by {d.proc} that "
                                       f"completed {read.t0 - d.t1:.3f} s before the read",
                                       read.t0 - d.t1)
                        break
        self.check_forks(thread, ops, puts, put_of, deletes)
        self.check_final(thread, ops, puts, deletes, prunes)

    def copied_puts(self, thread: str) -> list[Op]:
        """A copy made ``thread`` (a fresh target): the source's newest checkpoint
        acknowledged before the copy began counts as acknowledged on the target when the
        copy was."""
        out = []
        for copy in self.copies.get(thread, []):
            puts, begun = self.puts_by_t0(copy.thread)
            begun_at, ended_by = self.removals(copy.thread)
            # a put invoked before a delete or prune that began before the copy ended
            # ended may be gone
            since = ended_by[bisect.bisect_left(begun_at, copy.t1)]
            acked = [p for p in puts[bisect.bisect_left(begun, since):
                                     bisect.bisect_left(begun, copy.t0)]
                     if p.ok and p.t1 < copy.t0 and not since > p.t0]
            if acked:
                newest = max(acked, key=lambda o: o.args["id"])
                out.append(Op(f"{copy.id}/copied", copy.proc, copy.pid, copy.worker, "put",
                              thread, dict(newest.args), copy.t0, copy.t1, "ok",
                              breaker=copy.breaker or newest.breaker))
        return out

    def removals(self, thread: str) -> tuple[list[float], list[float]]:
        """The invocation times of the deletes and prunes of ``thread`` that may have
        happened, in order, and the latest completion among the first n of them (kept)."""
        if thread not in self._removals:
            gone = sorted((o for o in self.by_thread[thread]
                           if o.op in ("delete", "prune") and o.may_have_happened),
                          key=lambda o: o.t0)
            self._removals[thread] = ([o.t0 for o in gone], list(itertools.accumulate(
                (o.t1 for o in gone), max, initial=-math.inf)))
        return self._removals[thread]

    def puts_by_t0(self, thread: str) -> tuple[list[Op], list[float]]:
        """The puts on ``thread`` by invocation, and their invocation times (kept)."""
        if thread not in self._puts_by_t0:
            puts = sorted((o for o in self.by_thread[thread] if o.op == "put"),
                          key=lambda o: o.t0)
            self._puts_by_t0[thread] = (puts, [o.t0 for o in puts])
        return self._puts_by_t0[thread]

    def check_forks(self, thread: str, ops: list[Op], puts: list[Op], put_of: dict[str, Op],
                    deletes: list[Op]) -> None:
        """5. No two acknowledged puts extend the same checkpoint, and no two roots were
        acknowledged without a delete between them (two first runs of a thread: each read
        it empty, the second to commit must find a head)."""
        roots = sorted((p for p in puts if not p.args.get("parent")
                        and not p.id.endswith("/copied")), key=lambda o: o.t1)
        for first, second in itertools.pairwise(roots):
            # each took effect somewhere in its own interval, in either order when the two
            # overlap (a root acknowledged last may have been stored first): a delete that
            # may lie between the two effects, either way round, separates them
            if not any((d.t1 >= first.t0 and d.t0 <= second.t1)
                       or (d.t1 >= second.t0 and d.t0 <= first.t1) for d in deletes):
                self.violation("fork", second, f"roots {first.args['id']} ({first.proc}) "
                               f"and {second.args['id']} ({second.proc}) were both "
                               "acknowledged with no delete between them", 0.0,
                               around=first, before=max(0.0, first.t0 - second.t0) + 1.0,
                               after=max(0.0, second.t0 - first.t1) + 0.5,
                               workers={first.worker, second.worker})
        children: dict[str, list[Op]] = defaultdict(list)
        for p in puts:
            if p.args.get("parent") and not p.id.endswith("/copied"):
                children[p.args["parent"]].append(p)
        for parent, kids in children.items():
            if len(kids) > 1:
                first, second = sorted(kids, key=lambda o: o.t1)[:2]
                # the window holds both puts and the reads they extended, never cut short
                self.violation("fork", second, f"{first.args['id']} ({first.proc}) and "
                               f"{second.args['id']} ({second.proc}) were both acknowledged "
                               f"extending {parent}", 0.0, around=first,
                               before=max(0.0, first.t0 - second.t0) + 1.0,
                               after=max(0.0, second.t0 - first.t1) + 0.5,
                               workers={first.worker, second.worker})

    def check_final(self, thread: str, ops: list[Op], puts: list[Op], deletes: list[Op],
                    prunes: list[Op]) -> None:
        """2. Nothing acknowledged is lost; 5. the final head descends from every
        checkpoint acknowledged since the last delete."""
        final = [o for o in ops if o.op == "final" and o.ok]
        if not final:
            return
        last = final[-1]
        stored = set(last.result.get("ids", []))
        parents = {o.args["id"]: o.args.get("parent") for o in ops if o.op == "put"}
        chain: set[str] = set()
        at = last.result.get("id")
        while at and at not in chain:
            chain.add(at)
            at = parents.get(at)

        def root(checkpoint_id: str) -> str | None:
            seen: set[str] = set()
            at: str | None = checkpoint_id
            while at and at not in seen and parents.get(at):
                seen.add(at)
                at = parents.get(at)
            return at

        head_root = root(last.result["id"]) if last.result.get("id") else None
        for p in puts:
            if p.id.endswith("/copied"):
                continue
            removed = any(d.t1 > p.t0 for d in deletes) or any(q.t1 > p.t0 for q in prunes)
            if removed:
                continue
            if self.write_mode == "behind" and any(
                    f.kind == "redis_restart" and f.detail.get("appendfsync") == "everysec"
                    and f.t0 - AOF_WINDOW <= p.t1 <= f.t0 for f in self.faults):
                continue
            if p.args["id"] not in stored:
                self.violation("lost", last, f"acknowledged {p.args['id']} (writer "
                               f"{p.args['w']} n={p.args['n']}, by {p.proc}) is not in the "
                               "final list", 0.0, around=p)
            elif p.args["id"] not in chain and root(p.args["id"]) == head_root:
                # a second root (two puts on an empty thread: neither read a checkpoint,
                # so neither is compared, as with every saver) is a branch beside the
                # line, not a fork of it
                self.violation("fork", last, f"final head {last.result.get('id')} does not "
                               f"descend from acknowledged {p.args['id']} ({p.proc})", 0.0,
                               around=p)

    # -- reporting ----------------------------------------------------------------------

    @staticmethod
    def who(read: Op) -> str:
        res = read.result
        return f"writer {res.get('w')} n={res.get('n')}" if res.get("id") else "nothing"

    def violation(self, check: str, read: Op, text: str, lag: float,
                  around: Op | None = None, before: float = 4.0,
                  after: float = 0.5, workers: set[str] | None = None) -> None:
        self.report.max_stale_lag = max(self.report.max_stale_lag, lag)
        focus = around or read
        self.report.violations.append(Violation(check, read.thread, text, read.t0,
                                                self.slice(read.thread, focus, read,
                                                           before, after, workers)))

    def slice(self, thread: str, focus: Op, read: Op, before: float = 4.0,
              after: float = 0.5, workers: set[str] | None = None) -> str:
        """The operations on ``thread`` (and the faults) in a window around ``focus``;
        with ``workers``, only theirs and the changes of the whole thread (put, delete,
        prune, copy), so that the lines that decide a violation are not cut."""
        lo, hi = focus.t0 - before, min(read.t1, focus.t1) + after
        lines = [f"history of {thread} from {lo - self.start:.3f} s to {hi - self.start:.3f} s"
                 " (invoked, completed, worker, op, args -> outcome result):"]
        events: list[tuple[float, str]] = []
        for op in self.by_thread[thread]:
            if workers is not None and op.worker not in workers and op.op not in (
                    "put", "delete", "prune", "copy"):
                continue
            if lo <= op.t0 <= hi or (op.t0 < lo and op.t1 >= lo):
                mark = "  <== " if op is read or op is focus else ""
                events.append((op.t0, op.line(self.start) + mark))
        for f in self.faults:
            if (f.t1 >= lo and f.t0 <= hi and f.kind != "evict") or (
                    f.kind == "evict" and f.detail.get("thread") == thread and lo <= f.t0 <= hi):
                events.append((f.t0, f.line(self.start)))
        lines += [text for _, text in sorted(events, key=lambda e: e[0])]
        if len(lines) > 120:
            lines = [*lines[:30], f"  ... {len(lines) - 110} lines ...", *lines[-80:]]
        return "\n".join(lines)


def check(paths: Iterable[Path], nemesis: Path | None, write_mode: str) -> Report:
    """Check the history in ``paths`` (and the nemesis log) of one write mode."""
    ops, faults = load(paths, nemesis)
    return Checker(ops, faults, write_mode).run()
