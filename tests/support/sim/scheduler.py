"""The scheduler: simulated processes advance one request at a time, in a seeded order,
against the real servers, with faults injected between steps.

A run has four phases. *Active*: at each step a seeded choice picks which in-flight
call advances by one request, and faults may strike first. *Finish*: no new work or
faults; in-flight calls run to their end. *Drain*: breakers recover, the journal is
flushed. *Quiesce*: intents expire, each thread is read once more (and so warmed).
The checkers (`invariants`) then judge the history this leaves.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field, replace
from typing import Any

import psycopg
import redis
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from tests.support.sim.core import (
    Cold,
    Context,
    Hot,
    Layout,
    Op,
    Pause,
    Request,
    SaverConfig,
    ThreadConflictError,
    Tiers,
    TierUnavailableError,
    execute,
    journal,
    layout_of,
    new_context,
    ops,
    poll_marks,
    recover_hot,
    run,
)
from tests.support.sim.workload import (
    Actor,
    Call,
    Record,
    Workload,
    config,
    process_flusher,
    process_main,
)

# Scripts whose run tells Redis of a write: a write that ran one is never excused from I1
# as one that bypassed Redis (a write-through intent keeps readers on Postgres until the
# update after the commit lands, and that update is sent without waiting).
HOT_WRITES = ("intent", "put", "put_writes", "put_behind", "put_writes_behind", "drop_thread")
EXPECTED_ERRORS = (TierUnavailableError, ThreadConflictError)
# Fault kinds: Redis wiped, a key evicted, a reply lost after the server applied the
# request, Redis unreachable from one process, a thread restored from an older Redis state
# (write-through only: an older AOF; "snapshot" takes the state that "restore" brings back).
# "restore" (a thread's keys rolled back to an older snapshot, with the applied-marks record
# of that time) is left out by default: a write-through write Redis had applied and then
# lost that way is served stale until the thread is next written or expires
# (docs/failure-model.md, "Redis restarted from an AOF"). Writes that bypassed Redis are
# covered; run it with LGD_SIM_FAULTS=...,restore.
FAULTS = ("wipe", "evict", "lost", "unreachable")
ALL_FAULTS = (*FAULTS, "restore")
# Chance, before each step, that one request sent without waiting lands.
LAND_RATE = 0.1
FINISH_LIMIT = 3000  # steps the finish phase may take before the run is called stuck


@dataclass(frozen=True, slots=True)
class Params:
    """The shape of one run, all drawn from its seed."""

    seed: int
    mode: str
    procs: int
    threads: int
    steps: int
    faults: tuple[str, ...] = FAULTS  # which fault kinds may strike
    fault_rate: float = 0.06  # chance of a fault between two steps
    lost_rate: float = 0.03  # chance that a request's reply is lost after it ran
    # chance that a turn's second checkpoint gets a task's writes before it is put, as
    # LangGraph's durability="async" may send them (0 keeps every seed's drawn history)
    writes_first: float = 0.0

    @classmethod
    def draw(cls, seed: int, mode: str, faults: tuple[str, ...] = FAULTS) -> Params:
        rng = random.Random(f"params-{seed}")
        return cls(seed, mode, rng.randint(2, 4), rng.randint(2, 3), rng.randint(20, 60),
                   faults)


@dataclass(slots=True)
class Env:
    """What every run of a module shares: configs, the real tiers, raw clients."""

    configs: dict[str, SaverConfig]
    tiers: Tiers
    redis: redis.Redis  # or a redis.RedisCluster: the same calls, routed by key
    pg: psycopg.Connection[Any]
    serde: JsonPlusSerializer = field(default_factory=JsonPlusSerializer)

    @property
    def layout(self) -> Layout:
        """Where the prefix's keys live (a cluster's, or a sharded one's, or one journal)."""
        config = self.configs["through"]
        return layout_of(config, cluster=config.redis_cluster is True)

    @property
    def prefix(self) -> str:
        return self.configs["through"].key_prefix

    @property
    def schema(self) -> str:
        return self.configs["through"].schema

    def forget_marks(self) -> None:
        """Delete the stale marks earlier seeds left, so a seed's polls see only its own
        (and replay identically)."""
        self.pg.execute(f'DELETE FROM "{self.schema}".lgd_hot_marks')

    def clear_hot(self) -> None:
        """Delete every key under the prefix (SCAN, never a FLUSHALL)."""
        keys = list(self.redis.scan_iter(match=f"{self.prefix}*", count=1000))
        if keys:
            self.redis.delete(*keys)


@dataclass(slots=True)
class Lane:
    """One thread of control of a process (its foreground, or its background flusher)."""

    proc: int
    name: str
    ctx: Context
    actor: Actor | None
    record: Record | None = None
    request: Request | None = None


class Sim:
    """One seeded run; `run` returns the history the checkers judge."""

    def __init__(self, env: Env, params: Params, tag: str) -> None:
        self.env, self.p = env, params
        self.rng = random.Random(params.seed)
        self.threads = [f"{tag}-t{i}" for i in range(params.threads)]
        self.work = Workload(random.Random(f"work-{params.seed}"), self.threads, params.mode,
                             writes_first=params.writes_first)
        self.config = env.configs[params.mode]
        self.clock = 0
        self.contexts = [new_context(self.config, f"{tag}-p{i}", env.serde, self.now)
                         for i in range(params.procs)]
        self.lanes: list[Lane] = []
        for i, ctx in enumerate(self.contexts):
            self.lanes.append(Lane(i, "", ctx, process_main(self.work, ctx, i)))
            if params.mode == "behind":
                self.lanes.append(Lane(i, "f", ctx, process_flusher(self.work, ctx)))
        self.clock = 0
        self.history: list[Record] = []
        self.trace: list[str] = []
        self.hot_down: dict[int, int] = {}  # process -> step its Redis outage ends
        self.snapshots: dict[str, dict[bytes, tuple[bytes, int]]] = {}
        self.lost: set[int] = set()  # records whose effect a Redis wipe may have taken
        self.stuck = False
        self.faults = True
        # hot requests sent without waiting (`Hot.wait` false): each lands at a later
        # step drawn from the seed, or never (its connection died first)
        self.in_flight: list[tuple[int, Record, Hot]] = []

    # ------------------------------------------------------------------ phases

    def run(self) -> list[Record]:
        """Active, finish, drain and quiesce phases; the full history."""
        for lane in self.lanes:
            self._next_call(lane, None)
        for _ in range(self.p.steps):
            if self.rng.random() < self.p.fault_rate:
                self._fault()
            if self.in_flight and self.rng.random() < LAND_RATE:
                self._land()
            self._step(self._pick(self.lanes))
        self.faults = False
        self.hot_down.clear()
        for lane in self.lanes:
            if lane.name == "":
                lane.actor = None
        for _ in range(FINISH_LIMIT):
            if self.in_flight and self.rng.random() < LAND_RATE:
                self._land()
            busy = [lane for lane in self.lanes if lane.record is not None]
            if not any(lane.name == "" for lane in busy):
                if not busy:
                    break
                for lane in busy:
                    lane.actor = None
            self._step(self._pick(busy))
        else:
            self.stuck = True
            return self.history
        while self.in_flight:
            self._land()
        self._drain()
        self._quiesce()
        return self.history

    def _pick(self, lanes: list[Lane]) -> Lane:
        busy = [lane for lane in lanes if lane.record is not None]
        weights = [1.0 if lane.name == "" else 0.3 for lane in busy]
        return self.rng.choices(busy, weights)[0]

    def _drain(self) -> None:
        """Every breaker recovers, then every process flushes until the journal is empty."""
        for ctx in self.contexts:
            if ctx.breaker.is_open:
                self._call(-1, ctx, Call("probe", "", "", recover_hot(ctx)))
        if self.p.mode != "behind":
            return
        for _ in range(50):
            for i, ctx in enumerate(self.contexts):
                self._call(i, ctx, Call("flush_batch", "", "", journal.flush_batch(ctx)))
            if run(self.env.tiers, journal.journal_state(self.contexts[0])).length == 0:
                return
            # entries a failed flush left pending are taken over once idle (reclaim_after)
            time.sleep(0.05)
        self.stuck = True

    def _quiesce(self) -> None:
        """Intents pass their deadline (a warm clears them); a fresh process reads every
        thread and namespace once."""
        for thread in self.threads:
            intents = self.env.layout.thread(thread).intents
            tokens: Any = self.env.redis.zrange(intents, 0, -1)
            if tokens:
                self.env.redis.zadd(intents, dict.fromkeys(tokens, 0))
        self.trace.append(f"{self.clock:4d} ---- quiesce: intents expired")
        ctx = self.reader()
        for where in self.places():
            self._call(-1, ctx, Call("get_latest", *where, ops.get_tuple(ctx, config(*where))))

    def places(self) -> list[tuple[str, str]]:
        """Every (thread, namespace) the run touched."""
        seen = {(r.call.thread, r.call.ns) for r in self.history if r.call.thread}
        return sorted(seen | {(t, "") for t in self.threads})

    def reader(self, mode: str | None = None) -> Context:
        """A fresh process's context (empty cache, closed breaker), of the run's write mode
        unless ``mode`` says otherwise."""
        config = self.env.configs[mode] if mode else self.config
        return new_context(config, "sim-reader", self.env.serde, self.now)

    def now(self) -> int:
        return self.clock

    def _call(self, proc: int, ctx: Context, call: Call) -> Record:
        """Run one call to its end, outside the interleaving and without faults."""
        lane = Lane(proc, "*", ctx, None)
        self._start(lane, call)
        record = self.history[-1]
        while lane.record is not None:
            self._step(lane)
        return record

    # ------------------------------------------------------------------ steps

    def _next_call(self, lane: Lane, done: Record | None) -> None:
        if lane.actor is None:
            return
        try:
            call = lane.actor.send(done) if done is not None else next(lane.actor)
        except StopIteration:  # pragma: no cover - actors are endless
            lane.actor = None
            return
        self._start(lane, call)

    def _start(self, lane: Lane, call: Call) -> None:
        if lane.proc >= 0 and call.kind != "probe" and lane.ctx.marks.due():
            call = replace(call, op=_after(poll_marks(lane.ctx), call.op))  # as the engine
        record = Record(len(self.history), lane.proc, call, self.clock)
        self.history.append(record)
        extra = f" {call.checkpoint_id[-8:]}<-{call.parent_id[-8:]}" if call.kind == "put" else ""
        self._log(lane, record, f"start{extra}{' fork' if call.fork else ''}")
        lane.record = record
        self._advance(lane, record, value=None, error=None, first=True)

    def _step(self, lane: Lane) -> None:
        """Advance one call by one request, with the faults this step draws."""
        record, request = lane.record, lane.request
        assert record is not None and request is not None
        self.clock += 1
        value: Any = None
        error: BaseException | None = None
        fault = ""
        if isinstance(request, Pause):
            if not self.faults:  # finishing: let real time pass, so idle batches reclaim
                time.sleep(request.seconds)
        elif isinstance(request, Hot) and self.hot_down.get(lane.proc, -1) > self.clock:
            fault, error = "unreachable", TierUnavailableError("injected outage", tier="hot")
        elif isinstance(request, Hot) and not request.wait:
            self.in_flight.append((lane.proc, record, request))  # lands later: `_land`
        else:
            try:
                value = execute(self.env.tiers, request)
            except Exception as exc:
                error = exc
            else:
                record.hot_written |= isinstance(request, Hot) and request.script.name in HOT_WRITES
                record.wrote = self.clock
                if (self.faults and lane.name != "*" and self.rng.random() < self.p.lost_rate
                        and "lost" in self.p.faults):
                    fault, error = "lost", TierUnavailableError(
                        "injected lost reply", tier="hot" if isinstance(request, Hot) else "cold")
        self._log(lane, record, describe(request) + (f" !{fault}" if fault else "")
                  + (f" -> {type(error).__name__}" if error and not fault else ""))
        self._advance(lane, record, value, error)

    def _advance(
        self, lane: Lane, record: Record, value: Any, error: BaseException | None,
        first: bool = False,
    ) -> None:
        op = record.call.op
        try:
            if first:
                lane.request = next(op)
            elif error is not None:
                lane.request = op.throw(error)
            else:
                lane.request = op.send(value)
            return
        except StopIteration as stop:
            record.acked, record.result = True, stop.value
        except EXPECTED_ERRORS as exc:
            detail = getattr(exc, "tier", "") or ("deleted" if getattr(exc, "deleted", False)
                                                  else "")
            record.error = f"{type(exc).__name__}({detail})"
        except Exception as exc:  # an error the protocol should never raise: a finding
            record.error = f"UNEXPECTED {type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
        record.end = self.clock
        self._log(lane, record, "ok" if record.acked else f"raised {record.error}")
        lane.record = lane.request = None
        self._next_call(lane, record)

    def _log(self, lane: Lane, record: Record, what: str) -> None:
        who = f"p{lane.proc}{lane.name}" if lane.proc >= 0 else "drain"
        call = record.call
        where = f"[{short(call.thread)}{'/' + call.ns if call.ns else ''}]" if call.thread else ""
        self.trace.append(f"{self.clock:4d} {who} #{record.id} {call.kind}{where} {what}")

    def _land(self) -> None:
        """A request sent without waiting reaches Redis (or, with the lost-reply rate while
        faults strike, never does: its connection died)."""
        proc, record, request = self.in_flight.pop(self.rng.randrange(len(self.in_flight)))
        lost = self.faults and "lost" in self.p.faults and self.rng.random() < self.p.lost_rate
        if lost:
            outcome = "!never"
        else:
            try:
                execute(self.env.tiers, Hot(request.script, request.keys, request.args))
            except Exception as exc:  # logged by the driver, never raised to the operation
                outcome = f"-> {type(exc).__name__}"
            else:
                outcome = "landed"
                record.hot_written |= request.script.name in HOT_WRITES
        self._log(Lane(proc, "", self.contexts[0], None), record,
                  f"H:{request.script.name} (sent earlier) {outcome}")

    # ------------------------------------------------------------------ faults

    def _fault(self) -> None:
        kinds = ["wipe", "evict", "evict", "evict", "unreachable", "unreachable"]
        if self.p.mode == "through":
            kinds += ["snapshot", "restore"]
        kind = self.rng.choice(kinds)
        if (kind if kind != "snapshot" else "restore") not in self.p.faults:
            return
        detail = getattr(self, f"_fault_{kind}")()
        self.trace.append(f"{self.clock:4d} ---- fault: {kind} {detail}")

    def _fault_wipe(self) -> str:
        """Redis lost everything under the prefix (never a FLUSHALL)."""
        if self.p.mode == "behind":
            self._mark_unflushed()
        self.env.clear_hot()
        return "(every key under the prefix)"

    def _mark_unflushed(self) -> None:
        """Write-behind: writes not yet in Postgres when Redis is lost are the documented
        loss window; remember them so I1 and I2 do not count them."""
        rows = self.env.pg.execute(
            f'SELECT checkpoint_id, task_id, idx FROM "{self.env.schema}".lgd_writes '
            f"WHERE thread_id = ANY(%(t)s) UNION ALL SELECT checkpoint_id, '', 0 FROM "
            f'"{self.env.schema}".lgd_checkpoints WHERE thread_id = ANY(%(t)s)',
            {"t": self.threads},
        ).fetchall()
        cold = {(r[0], r[1], r[2]) for r in rows}
        for r in self.history:
            if r.call.kind == "put" and (r.call.checkpoint_id, "", 0) not in cold:
                self.lost.add(r.id)
            if r.call.kind == "put_writes" and any(
                (r.call.checkpoint_id, t, i) not in cold for t, i, _ in r.call.writes
            ):
                self.lost.add(r.id)

    def _thread_keys(self, thread: str) -> list[bytes]:
        base = self.env.layout.thread(thread).base
        return sorted(self.env.redis.scan_iter(match=f"{base}:*", count=1000))

    def _fault_evict(self) -> str:
        """One key of a thread with a TTL is evicted, as a volatile-* eviction policy
        would (allkeys-* policies can evict what must not go; doctor warns about them)."""
        thread = self.rng.choice(self.threads)
        keys = [k for k in self._thread_keys(thread) if self.env.redis.pttl(k) > 0]
        if not keys:
            return "(nothing to evict)"
        key = self.rng.choice(keys)
        self.env.redis.delete(key)
        return key.decode().split("}", 1)[-1] + " of " + short(thread)

    def _fault_unreachable(self) -> str:
        """Redis is unreachable from one process for a few steps."""
        proc = self.rng.randrange(self.p.procs)
        self.hot_down[proc] = self.clock + self.rng.randint(3, 15)
        return f"p{proc} until {self.hot_down[proc]}"

    def _fault_snapshot(self) -> str:
        """Remember a thread's keys (DUMP), as an older AOF would hold them."""
        thread = self.rng.choice(self.threads)
        snap: dict[bytes, tuple[bytes, int]] = {}
        for key in [*self._thread_keys(thread), self._marks_key(thread)]:
            dump, ttl = self.env.redis.dump(key), self.env.redis.pttl(key)
            if dump is not None:
                snap[key] = (dump, max(ttl, 0))
        self.snapshots[thread] = snap
        return f"{short(thread)} ({len(snap)} keys)"

    def _marks_key(self, thread: str) -> bytes:
        """The applied-marks record that describes ``thread``'s keys (its shard's)."""
        layout = self.env.layout
        return layout.marks(layout.shard(thread)).encode()

    def _fault_restore(self) -> str:
        """Redis restarts from an older state of one thread (an AOF older than Postgres),
        with the applied-marks record of that time. A restart closes every connection, so
        no request sent to the Redis before it lands after it (`pipeline`: an owed script
        whose connection broke is not sent again)."""
        if not self.snapshots:
            return "(no snapshot)"
        thread = self.rng.choice(sorted(self.snapshots))
        snap = self.snapshots[thread]
        keys = [*self._thread_keys(thread), self._marks_key(thread)]
        self.env.redis.delete(*keys)
        for key, (dump, ttl) in snap.items():
            self.env.redis.restore(key, ttl, dump, replace=True)
        dropped, self.in_flight = self.in_flight, []
        for proc, record, request in dropped:
            self._log(Lane(proc, "", self.contexts[0], None), record,
                      f"H:{request.script.name} (sent earlier) !never (Redis restarted)")
        return f"{short(thread)} ({len(snap)} keys)"


def _after(first: Op[Any], then: Op[Any]) -> Op[Any]:
    yield from first
    return (yield from then)


def describe(request: Request) -> str:
    """A request in a few characters: ``H:put``, ``C:2 stmts``, ``pause``."""
    if isinstance(request, Hot):
        return f"H:{request.script.name}" + ("" if request.wait else " (sent)")
    if isinstance(request, Cold):
        return f"C:{len(request.statements)}"
    return "pause"


def short(thread: str) -> str:
    """A thread's name without the run's tag (``t0``), so traces of two runs compare."""
    return thread.rsplit("-", 1)[-1]
