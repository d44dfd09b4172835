"""One checker run: a private Redis, worker processes each behind its own Redis and Postgres
proxies, a nemesis on its own schedule, then healing, a final read by a fresh saver, and
the history check (`tests.support.checker.check`).

Scenarios:

- ``general``: three worker processes of three mixed threads on six shared thread ids;
  the nemesis picks among every fault below, one at a time, every 0.3-1 s.
- ``stale-after-recovery`` (issue 24, case 1; write-through): process ``p0`` has four
  writer threads and its Redis link drops for 0.15 s at the start of every 3 s cycle,
  while it writes (its breaker opens, writes go to Postgres with stale marks); writes stop
  0.5 s into the cycle, and the readers of processes ``p1``-``p3`` keep reading every
  thread. p0's Postgres link is slowed by 5 ms (a database a few round trips away), so
  its concurrent commits take a while. Once `STALE_BOUND` passed since a write, every
  read must show it.

Faults (the nemesis log names each with its slot and times):

- ``redis_cut``: one process's Redis link cut for 0.15 s (its breaker opens);
- ``redis_slow``: one process's Redis link delayed 20-200 ms per chunk for 1-2 s;
- ``pg_cut``: one process's Postgres link cut for 0.3-1 s;
- ``pause``: SIGSTOP, 0.3-2 s, SIGCONT (a long GC pause);
- ``kill``: SIGKILL, and a new incarnation of the process started;
- ``redis_restart``: the private Redis SIGKILLed and restarted, in one of its persistence
  modes (write-through: AOF ``always``, ``everysec`` or none; write-behind: ``always`` or
  ``everysec``, as a Redis without persistence loses unflushed writes by design);
- ``evict``: some of one thread's Redis keys deleted, as the eviction policy each write
  mode supports may delete them: write-through any key (``allkeys-*``), write-behind only
  keys with a TTL (``volatile-*``; `doctor` warns against ``allkeys-*`` there, as those
  policies may evict writes not flushed yet, which write-behind keeps without a TTL);
- ``redis_snapshot`` (write-through): a snapshot kept (an RDB, or a copy of the AOF), a
  moment of writes, then Redis killed and started from the snapshot: back in time;
- ``redis_failover`` (write-through): a replica in sync stops reading its link for
  0.3-1.5 s of writes, the primary is killed and the replica promoted in its place;
- ``redis_freeze``: the private Redis SIGSTOPped for 10-30 s (an eighth of a short run at
  most; its port still accepts connections, nothing answers), then SIGCONT;
- ``pg_freeze``: every process's Postgres link keeps its connections and accepts new ones
  but forwards nothing for as long (a Postgres that stopped answering), then forwards again;
- ``redis_pollute``: one of a thread's keys overwritten with a value of another type, as
  another client of the same Redis may write it (write-behind: only a key with a TTL, a
  copy of what Postgres holds, as another client's write there loses data by design).

Besides the history checks, every operation must end within `LATENCY_BOUND` of its start
(its own process's pauses not counted), a fault or not, and none may fail with a raw
driver error (`check.Checker.check_latency`, `check.Checker.check_errors`).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import time
import uuid
from dataclasses import dataclass, field
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

import redis
from langchain_core.runnables import RunnableConfig

from langgraph_durable import DurableSaver
from langgraph_durable._core.keys import ThreadKeys
from tests.support import forked
from tests.support.checker import worker
from tests.support.checker.check import Report, check
from tests.support.faults import PrivateRedis, Proxy
from tests.support.servers import POSTGRES_DATABASE, POSTGRES_URL, drop_schema, postgres_address

SCENARIOS = ("general", "stale-after-recovery")
FAULTS = {"redis_cut": 12, "redis_slow": 4, "pg_cut": 4, "pause": 4, "kill": 4,
          "redis_restart": 2, "evict": 4, "redis_snapshot": 2, "redis_failover": 1,
          "redis_pollute": 4,
          "redis_freeze": 1, "pg_freeze": 1}
FREEZE = (10.0, 30.0)  # seconds a frozen tier stays frozen (cut short at the nemesis's end)
PERSISTENCE = {"through": ("always", "everysec", None), "behind": ("always", "everysec")}
# stale-after-recovery: seconds per cycle, of which writing, and when p0's link is cut
CYCLE, ACTIVE, CUT_AT = 3.0, 0.5, 0.1
PG_DELAY = 0.005  # stale-after-recovery: p0's Postgres link, seconds per chunk each way
# The eviction nemesis: delete the keys given, under "volatile" only those with a TTL at the
# moment of deletion, as Redis's volatile-* policies do (the check and the delete in one step).
EVICT = """
local n = 0
for _, key in ipairs(KEYS) do
  if ARGV[1] == 'all' or redis.call('PTTL', key) > 0 then n = n + redis.call('DEL', key) end
end
return n
"""
# The pollution nemesis: another client writes a value of another type where a key of the
# saver lives (under "volatile" only a key with a TTL, as for eviction).
POLLUTE = """
local key = KEYS[1]
if ARGV[1] ~= 'all' and redis.call('PTTL', key) <= 0 then return 0 end
local was = redis.call('TYPE', key)['ok']
redis.call('DEL', key)
if was == 'string' then redis.call('RPUSH', key, ARGV[2]) else redis.call('SET', key, ARGV[2]) end
return 1
"""


@dataclass
class Slot:
    """One worker process slot: its proxies, and its current incarnation."""

    name: str
    roles: list[str]
    redis_proxy: Proxy
    pg_proxy: Proxy
    proc: BaseProcess | None = None
    incarnation: int = 0

    @property
    def current(self) -> str:
        return f"{self.name}@{self.incarnation}"


@dataclass
class CheckerRun:
    """The servers, processes and nemesis of one run in one write mode."""

    workdir: Path
    mode: str
    seed: int
    seconds: float
    scenario: str = "general"
    rng: random.Random = field(init=False)
    tag: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    slots: list[Slot] = field(default_factory=list)
    histories: list[Path] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rng = random.Random(f"{self.seed}-{self.mode}-{self.scenario}")
        self.schema = f"lgdt_checker_{self.tag}"
        self.prefix = f"lgdt-checker-{self.tag}"
        self.redis = PrivateRedis(self.workdir, appendonly="always")
        self.nemesis_log = self.workdir / "nemesis.jsonl"
        if self.scenario == "stale-after-recovery":
            self.threads = [f"{self.tag}-t{i}" for i in range(24)]
        else:
            self.threads = [f"{self.tag}-t{i}" for i in range(6)]

    # -- processes ---------------------------------------------------------------------

    def spawn(self, slot: Slot, until: float, epoch: float) -> None:
        slot.incarnation += 1
        history = self.workdir / f"history-{slot.current}.jsonl"
        self.histories.append(history)
        spec: dict[str, Any] = {
            "proc": slot.current, "seed": self.seed, "schema": self.schema,
            "prefix": self.prefix, "write_mode": self.mode, "threads": self.threads,
            "roles": slot.roles, "until": until, "history": str(history), "epoch": epoch,
            "redis_url": f"redis://127.0.0.1:{slot.redis_proxy.port}/0",
            "postgres_url": slot.pg_proxy.url(POSTGRES_DATABASE),
        }
        if self.scenario == "stale-after-recovery":
            spec["write_window"] = (CYCLE, ACTIVE)
            spec["pace"] = 0.005
        slot.proc = forked.start(worker.run, spec)

    def fault(self, kind: str, slot: str | None, t0: float, **detail: Any) -> None:
        with self.nemesis_log.open("a") as f:
            f.write(json.dumps({"kind": kind, "slot": slot, "t0": t0, "t1": time.time(),
                                "detail": detail}) + "\n")

    # -- the run -------------------------------------------------------------------------

    def run(self) -> Report:
        self.redis.start()
        try:
            return self._run()
        finally:
            for slot in self.slots:
                if slot.proc is not None and slot.proc.is_alive():
                    _signal(slot.proc.pid, signal.SIGCONT)
                    slot.proc.kill()
                slot.redis_proxy.cut()
                slot.pg_proxy.cut()
            self.redis.kill()
            drop_schema(self.schema)

    def _run(self) -> Report:
        setup = DurableSaver(self.redis.url, POSTGRES_URL, schema=self.schema,
                             key_prefix=self.prefix, write_mode=self.mode)  # type: ignore[arg-type]
        setup.setup()
        setup.close()
        if self.scenario == "stale-after-recovery":
            layout = [["writer"] * 4, ["reader"] * 2, ["reader"] * 2, ["reader"] * 2]
        else:
            layout = [["mixed"] * 3 for _ in range(3)]
        for i, roles in enumerate(layout):
            redis_proxy = Proxy(("127.0.0.1", self.redis.port))
            pg_proxy = Proxy(postgres_address())
            redis_proxy.start()
            pg_proxy.start()
            self.slots.append(Slot(f"p{i}", roles, redis_proxy, pg_proxy))
        epoch = time.time()
        until = epoch + self.seconds
        for slot in self.slots:
            self.spawn(slot, until, epoch)
        if self.scenario == "stale-after-recovery":
            self.cycles(until, epoch)
        else:
            self.nemesis(until - 1.0, until)
        self.heal(until)
        self.final()
        return check(self.histories, self.nemesis_log, self.mode)

    def cycles(self, stop: float, epoch: float) -> None:
        """Case 1: cut p0's Redis link for 0.15 s just after each cycle's writes began, so
        that most of the cycle's writes go to Postgres alone, with stale marks."""
        slot = self.slots[0]
        slot.pg_proxy.delay = PG_DELAY  # its commits take a few round trips of this
        t_slow = time.time()
        k = 0
        while True:
            at = epoch + k * CYCLE + CUT_AT
            if at + 0.15 > stop - CYCLE + ACTIVE:
                break
            time.sleep(max(0.0, at - time.time()))
            t0 = time.time()
            slot.redis_proxy.cut()
            time.sleep(0.15)
            slot.redis_proxy.restore()
            self.fault("redis_cut", slot.name, t0)
            k += 1
        slot.pg_proxy.delay = 0.0
        self.fault("pg_slow", slot.name, t_slow, delay=PG_DELAY)

    def nemesis(self, stop: float, until: float) -> None:
        kinds, weights = zip(*FAULTS.items(), strict=True)
        client = redis.Redis(port=self.redis.port)
        while time.time() < stop:
            time.sleep(self.rng.uniform(0.3, 1.0))
            if time.time() >= stop:
                break
            kind = self.rng.choices(kinds, weights)[0]
            slot = self.rng.choice(self.slots)
            t0 = time.time()
            if kind == "redis_cut":
                slot.redis_proxy.cut()
                time.sleep(0.15)
                slot.redis_proxy.restore()
                self.fault(kind, slot.name, t0)
            elif kind == "redis_slow":
                delay = self.rng.uniform(0.02, 0.2)
                slot.redis_proxy.delay = delay
                time.sleep(self.rng.uniform(1.0, 2.0))
                slot.redis_proxy.delay = 0.0
                self.fault(kind, slot.name, t0, delay=round(delay, 3))
            elif kind == "pg_cut":
                slot.pg_proxy.cut()
                time.sleep(self.rng.uniform(0.3, 1.0))
                slot.pg_proxy.restore()
                self.fault(kind, slot.name, t0)
            elif kind == "pause" and slot.proc is not None and slot.proc.pid:
                proc = slot.current
                _signal(slot.proc.pid, signal.SIGSTOP)
                time.sleep(self.rng.uniform(0.3, 2.0))
                _signal(slot.proc.pid, signal.SIGCONT)
                self.fault(kind, slot.name, t0, proc=proc)
            elif kind == "kill" and slot.proc is not None:
                proc = slot.current
                slot.proc.kill()
                slot.proc.join()
                self.fault(kind, slot.name, t0, proc=proc)
                self.spawn(slot, until, t0)
            elif kind == "redis_restart":
                fsync = self.rng.choice(PERSISTENCE[self.mode])
                self.redis.kill()
                time.sleep(self.rng.uniform(0.1, 0.5))
                self.redis.appendonly = fsync
                self.redis.start()
                client.close()
                client = redis.Redis(port=self.redis.port)
                self.fault(kind, None, t0, appendfsync=fsync or "none")
            elif kind == "redis_snapshot" and self.mode == "through":
                # a snapshot now (an RDB, or a copy of the AOF when Redis keeps one), a
                # moment of writes after it, then a restart that loads it: Redis back in
                # time, as a restore from a backup or an old snapshot is (write-behind loses
                # what it acknowledged after the snapshot, by design)
                form = self.snapshot(client)
                time.sleep(self.rng.uniform(0.3, 1.5))
                self.restore(form)
                client.close()
                client = redis.Redis(port=self.redis.port)
                self.fault(kind, None, t0, form=form)
            elif kind == "redis_failover" and self.mode == "through":
                lag = self.failover()
                client.close()
                client = redis.Redis(port=self.redis.port)
                self.fault(kind, None, t0, lag=round(lag, 3))
            elif kind == "redis_freeze":
                # SIGSTOP: the port still accepts connections and nothing answers
                self.redis.freeze()
                time.sleep(self.freeze_for(stop))
                self.redis.thaw()
                self.fault(kind, None, t0)
            elif kind == "pg_freeze":
                for each in self.slots:
                    each.pg_proxy.freeze()
                time.sleep(self.freeze_for(stop))
                for each in self.slots:
                    each.pg_proxy.thaw()
                self.fault(kind, None, t0)
            elif kind == "redis_pollute":
                thread = self.rng.choice(self.threads)
                keys = self.keys_of(client, thread)
                polluted = None
                if keys:
                    key = self.rng.choice(keys)
                    if client.eval(POLLUTE, 1, key, "volatile" if self.mode == "behind"
                                   else "all", "another client's value"):
                        polluted = key.decode()
                self.fault(kind, None, t0, thread=thread, key=polluted)
            elif kind == "evict":
                thread = self.rng.choice(self.threads)
                keys = self.keys_of(client, thread)
                doomed = [k for k in keys if self.rng.random() < 0.5]
                evicted = 0
                if doomed:
                    # one script, as Redis evicts: a key a write just made persistent
                    # (write-behind, not flushed yet) is not evicted under volatile-*
                    evicted = int(client.eval(EVICT, len(doomed), *doomed,
                                              "volatile" if self.mode == "behind" else "all"))
                self.fault(kind, None, t0, thread=thread, keys=evicted)
        client.close()

    def snapshot(self, client: redis.Redis) -> str:
        """Keep a snapshot of the private Redis: a copy of its AOF (taken while it is
        stopped, so that nothing appends meanwhile) or an RDB; returns which."""
        aof = self.redis.dir / "appendonlydir"
        if self.redis.appendonly and aof.exists() and self.rng.random() < 0.5:
            self.redis.freeze()
            try:
                shutil.rmtree(self.workdir / "aof-snapshot", ignore_errors=True)
                shutil.copytree(aof, self.workdir / "aof-snapshot")
            finally:
                self.redis.thaw()
            return "aof"
        client.save()
        return "rdb"

    def restore(self, form: str) -> None:
        """Kill the private Redis and start it from the snapshot ``form`` kept."""
        self.redis.kill()
        if form == "aof":
            aof = self.redis.dir / "appendonlydir"
            shutil.rmtree(aof)
            shutil.copytree(self.workdir / "aof-snapshot", aof)
        else:
            self.redis.appendonly = None  # it loads the RDB
        self.redis.start()

    def failover(self) -> float:
        """A lagging replica promoted: a replica of the private Redis, in sync, stops
        reading its link for a moment of writes; the primary is killed, the replica made
        primary and every process's proxy turned to it (their connections dropped, as a
        failover drops them). Returns how long the replica lagged."""
        replica = PrivateRedis(self.workdir / f"replica-{uuid.uuid4().hex[:6]}",
                               appendonly=self.redis.appendonly or "always",
                               replica_of=self.redis.port)
        replica.dir.mkdir()
        replica.start()
        link = redis.Redis(port=replica.port)
        deadline = time.time() + 30
        while time.time() < deadline:
            info = link.info("replication")
            if info.get("master_link_status") == "up" and not info.get(
                    "master_sync_in_progress"):
                break
            time.sleep(0.05)
        lag = self.rng.uniform(0.3, 1.5)
        replica.freeze()
        time.sleep(lag)
        self.redis.kill()
        replica.thaw()
        link.replicaof("NO", "ONE")
        link.close()
        replica.replica_of = None  # a restart brings it back as the primary it now is
        self.redis = replica
        for slot in self.slots:
            slot.redis_proxy.target = ("127.0.0.1", replica.port)
            slot.redis_proxy.cut()
            slot.redis_proxy.restore()
        return lag

    def freeze_for(self, stop: float) -> float:
        """How long a tier stays frozen: `FREEZE`, in a short run an eighth of it at most
        (so that the other faults still come), ended by the nemesis's end."""
        return max(0.0, min(self.rng.uniform(*FREEZE), self.seconds / 8, stop - time.time()))

    def keys_of(self, client: redis.Redis, thread: str) -> list[bytes]:
        """The Redis keys of ``thread`` now."""
        base = ThreadKeys(self.prefix, thread).base
        return list(client.scan_iter(match=base.replace("{", "[{]").replace("}", "[}]") + "*"))

    def heal(self, until: float) -> None:
        """Every fault healed; the workers end at ``until`` (killed 30 s later)."""
        self.redis.thaw()
        for slot in self.slots:
            slot.redis_proxy.delay = 0.0
            slot.pg_proxy.thaw()
            if slot.proc is not None and slot.proc.pid:
                _signal(slot.proc.pid, signal.SIGCONT)
        for slot in self.slots:
            if slot.proc is not None:
                slot.proc.join(timeout=max(0.0, until + 30 - time.time()))
                if slot.proc.is_alive():
                    slot.proc.kill()
                    slot.proc.join()

    def final(self) -> None:
        """A fresh saver (a process that saw no fault) reads every thread: the head and
        the whole list, recorded as ``final`` operations."""
        time.sleep(worker.STALE_POLL_INTERVAL + 0.2)
        saver = worker.make_saver({"redis_url": self.redis.url, "postgres_url": POSTGRES_URL,
                                   "schema": self.schema, "prefix": self.prefix,
                                   "write_mode": self.mode})
        path = self.workdir / "history-final.jsonl"
        self.histories.append(path)
        history = worker.History(str(path), "final")
        if self.mode == "behind":
            saver.flush(timeout=60)
        for thread in self.threads:
            config: RunnableConfig = {"configurable": {"thread_id": thread,
                                                       "checkpoint_ns": ""}}
            op_id = history.invoke("final", "final", thread, {})
            tup = saver.get_tuple(config)
            ids = [t.checkpoint["id"] for t in saver.list(config)]
            history.complete(op_id, "ok", {**worker.summary(tup), "ids": ids})
        saver.close()


def _signal(pid: int | None, sig: signal.Signals) -> None:
    """Send ``sig`` to a worker, which may have ended meanwhile (killed, or its time up)."""
    if pid:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def run(seconds: float, seed: int, mode: str, scenario: str, workdir: Path) -> Report:
    """One run in ``mode`` for ``seconds``; the history stays in ``workdir``."""
    workdir.mkdir(parents=True, exist_ok=True)
    return CheckerRun(workdir, mode, seed, seconds, scenario).run()
