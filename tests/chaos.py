"""Real-process chaos: SIGKILLed agent processes, Redis killed and restarted, Postgres cut.

    python -m tests.chaos --kills 200 [--seed N]

Runs rounds of three (``--workers``) worker processes (`tests.chaos_worker`: a counter loop and a
supervisor handing work to parallel worker-agent subgraphs with a durable tool), in both
write modes, on three private ``redis-server`` instances (AOF ``appendfsync always``,
``everysec``, none) and the shared Postgres reached through a TCP proxy. In a round the
harness SIGKILLs each worker at a random acknowledged checkpoint and injects the round's
fault: Redis SIGKILLed and restarted, or every Postgres connection cut for a moment. Each
thread runs, and resumes, under LangGraph's durability "sync" or "async" (drawn per thread).

After each round, for each thread: every checkpoint the worker acknowledged is in Postgres
(after a drain), the thread resumes to its end, the resume is classified (where it resumed
from and why), and, for the supervisor, each item's side effect ran once (the outside
world's execution log, and the tool ledger says succeeded). Prints a summary table; exits
1 on any violation. Needs ``redis-server`` on the PATH; never touches the shared Redis.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from langgraph_durable import DurableSaver, TierUnavailableError
from tests import forked
from tests.chaos_worker import EFFECTS_SQL, INPUTS, build, finished, items, run
from tests.conftest import POSTGRES_DATABASE, POSTGRES_URL, drop_schema, postgres_address
from tests.faults import PrivateRedis, Proxy

MODES = ("through", "behind")
AOF_WINDOW = 1.5  # seconds: appendfsync everysec's loss window, with a margin
REDIS_KINDS = {"always": "always", "everysec": "everysec", "none": None}
# (write mode, fault, Redis kind), cycled round after round. Write-behind with a Redis
# without persistence loses its unflushed tail by design, so it is not among them.
SCHEDULE = (
    ("through", "redis", "always"), ("behind", "redis", "always"),
    ("through", "postgres", "everysec"), ("behind", "postgres", "always"),
    ("through", "redis", "everysec"), ("behind", "redis", "everysec"),
    ("through", "redis", "none"), ("behind", "none", "everysec"),
    ("through", "none", "none"), ("behind", "postgres", "everysec"),
    ("through", "postgres", "none"), ("behind", "redis", "always"),
)
WORKERS_PER_ROUND = 3
ROUND_TIMEOUT = 180.0


@dataclass
class Run:
    """One thread: how its worker ended and how it resumed."""

    thread_id: str
    workload: str
    mode: str
    redis_kind: str
    ack_path: Path
    kill_at: int
    durability: str = "sync"  # LangGraph's, for the worker's run and its resume
    acks: list[tuple[str, str]] = field(default_factory=list)
    ack_read_at: dict[tuple[str, str], float] = field(default_factory=dict)
    redis_killed_at: float | None = None  # when the round's fault killed this run's Redis
    error: str = ""
    exit: str = ""
    resume: str = ""
    head_step: int | None = None

    def line(self) -> str:
        """One log line: the thread, how its worker ended, where it resumed and why."""
        acked = sum(1 for ns, _ in self.acks if ns == "")
        return (f"{self.thread_id} mode={self.mode} durability={self.durability} "
                f"redis={self.redis_kind} kill_at="
                f"{self.kill_at} acks={len(self.acks)} root_acks={acked} resumed_at_step="
                f"{self.head_step} | {self.resume}")


@dataclass
class Tally:
    """What a chaos run did and found."""

    kills: Counter[str] = field(default_factory=Counter)
    exits: Counter[str] = field(default_factory=Counter)
    faults: Counter[str] = field(default_factory=Counter)
    threads: Counter[str] = field(default_factory=Counter)
    classes: Counter[str] = field(default_factory=Counter)
    acknowledged: int = 0
    lost: int = 0
    lost_in_window: int = 0
    repeated: int = 0
    effects: int = 0
    resumed: int = 0
    completed: int = 0
    violations: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def table(self) -> str:
        rows = [("kills (SIGKILL of an agent process)",
                 ", ".join(f"{m} {self.kills[m]}" for m in MODES)
                 + f" = {sum(self.kills.values())}"),
                ("worker exits", _fmt(self.exits)),
                ("faults", _fmt(self.faults)),
                ("threads", _fmt(self.threads)),
                ("acknowledged checkpoints", str(self.acknowledged)),
                ("acknowledged checkpoints lost", str(self.lost)),
                ("  ... in AOF everysec's last second (documented)", str(self.lost_in_window)),
                ("side effects (ship) / repeated", f"{self.effects} / {self.repeated}"),
                ("threads resumed / completed", f"{self.resumed} / {self.completed}"),
                ("violations", str(len(self.violations))),
                ("duration", f"{self.seconds:.0f} s")]
        width = max(len(k) for k, _ in rows)
        lines = [f"{k:<{width}}  {v}" for k, v in rows]
        lines.append("resume classes:")
        lines += [f"  {n:>4}  {c}" for c, n in sorted(self.classes.items(), key=lambda x: -x[1])]
        lines += [f"VIOLATION {v}" for v in self.violations]
        return "\n".join(lines)


def _fmt(counter: Counter[str]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(counter.items())) or "-"


def _await_hot(saver: DurableSaver, thread_id: str, timeout: float = 60.0) -> None:
    """Wait until ``saver`` serves ``thread_id`` again: after this round's Redis restart, a
    write-behind saver whose breaker opened refuses reads (fail closed) until its cooldown
    has passed and a probe found Redis back, as an application would see it."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            saver.get_tuple({"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}})
            return
        except TierUnavailableError as exc:
            if exc.tier != "hot" or time.monotonic() > deadline:
                raise
            time.sleep(0.1)


class Chaos:
    """The servers, proxy and savers of one chaos run."""

    def __init__(self, workdir: Path, seed: int, workers: int) -> None:
        self.workdir = workdir
        self.workers = workers
        self.rng = random.Random(seed)
        tag = uuid.uuid4().hex[:8]
        self.schema, self.prefix = f"lgdt_chaos_{tag}", f"lgdt-chaos-{tag}"
        self.redis: dict[str, PrivateRedis] = {}
        for kind, fsync in REDIS_KINDS.items():
            (workdir / kind).mkdir(parents=True, exist_ok=True)
            self.redis[kind] = PrivateRedis(workdir / kind, appendonly=fsync)
        self.proxy = Proxy(postgres_address())
        self.proxy_url = self.proxy.url(POSTGRES_DATABASE)
        self.savers: dict[tuple[str, str], DurableSaver] = {}
        self.tally = Tally()
        self.log: Any = None

    def __enter__(self) -> Chaos:
        for server in self.redis.values():
            server.start()
        self.proxy.start()
        for kind, server in self.redis.items():
            for mode in MODES:
                saver = DurableSaver(server.url, POSTGRES_URL, schema=self.schema,
                                     key_prefix=self.prefix, write_mode=mode,  # type: ignore[arg-type]
                                     breaker_cooldown=0.2)
                saver.setup()
                self.savers[kind, mode] = saver
        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            conn.execute(EFFECTS_SQL.format(schema=self.schema))
        return self

    def __exit__(self, *exc: object) -> None:
        for saver in self.savers.values():
            saver.close()
        self.proxy.cut()
        for server in self.redis.values():
            server.kill()
        drop_schema(self.schema)

    # -- one round -----------------------------------------------------------------------

    def round(self, number: int) -> None:
        mode, fault, kind = SCHEDULE[number % len(SCHEDULE)]
        runs = []
        for i in range(self.workers):
            workload = "supervisor" if (number + i) % 3 == 0 else "counter"
            run_ = Run(thread_id=f"chaos-{number}-{i}-{workload}-{uuid.uuid4().hex[:6]}",
                       workload=workload, mode=mode, redis_kind=kind,
                       ack_path=self.workdir / f"acks-{number}-{i}",
                       kill_at=self.rng.randint(4, 30),
                       durability=self.rng.choice(("sync", "async")))
            runs.append(run_)
        runs[0].kill_at = self.rng.randint(1, 8)  # the round's fault follows its first kill
        procs = [forked.start(run, {
            "workload": r.workload, "write_mode": mode, "redis_url": self.redis[kind].url,
            "postgres_url": self.proxy_url, "outside_url": POSTGRES_URL,
            "schema": self.schema, "prefix": self.prefix, "thread_id": r.thread_id,
            "ack_path": str(r.ack_path), "durability": r.durability}) for r in runs]
        pending_fault = fault != "none"
        offsets = [0] * len(runs)
        deadline = time.monotonic() + ROUND_TIMEOUT
        while any(p.is_alive() for p in procs):
            for i, (r, p) in enumerate(zip(runs, procs, strict=True)):
                offsets[i] = self._read_acks(r, offsets[i])
                if p.is_alive() and (len(r.acks) >= r.kill_at or time.monotonic() > deadline):
                    p.kill()
                    p.join()
                    r.exit = "killed" if time.monotonic() <= deadline else "killed (stuck)"
            if pending_fault and any(not p.is_alive() for p in procs):
                self._fault(fault, kind, runs, offsets)
                pending_fault = False
            time.sleep(0.002)
        if pending_fault:  # every worker ended at once: inject it anyway
            self._fault(fault, kind, runs, offsets)
        for i, (r, p) in enumerate(zip(runs, procs, strict=True)):
            p.join()
            self._read_acks(r, offsets[i])
            if not r.exit:
                r.exit = "finished" if p.exitcode == 0 else f"failed ({r.error or p.exitcode})"
            if r.exit == "killed":
                self.tally.kills[mode] += 1
            self.tally.exits[r.exit.split(" (")[0] + (f" ({r.error})" if r.error else "")] += 1
            self.tally.threads[f"{r.workload} {mode}"] += 1
        if mode == "behind":  # every acknowledged entry to Postgres before the checks
            self.savers[kind, mode].flush(timeout=60)
            _await_hot(self.savers[kind, mode], runs[0].thread_id)
        for r in runs:
            self._check(r)
            if self.log is not None:
                self.log.write(r.line() + "\n")

    def _read_acks(self, r: Run, offset: int) -> int:
        try:
            with r.ack_path.open("rb") as f:
                f.seek(offset)
                data = f.read()
        except FileNotFoundError:
            return offset
        end = data.rfind(b"\n") + 1
        for line in data[:end].decode().splitlines():
            word, _, rest = line.partition(" ")
            if word == "ack":
                ns, _, checkpoint_id = rest.rpartition(" ")
                r.acks.append((ns, checkpoint_id))
                r.ack_read_at.setdefault((ns, checkpoint_id), time.monotonic())
            elif word == "error":
                r.error = rest.split(" ", 1)[0]
        return offset + end

    def _fault(self, fault: str, kind: str, runs: list[Run], offsets: list[int]) -> None:
        if fault == "redis":
            server = self.redis[kind]
            for i, r in enumerate(runs):  # every ack written so far, read before the kill
                offsets[i] = self._read_acks(r, offsets[i])
                r.redis_killed_at = time.monotonic()
            server.kill()
            time.sleep(self.rng.uniform(0.1, 0.5))
            server.start()
            self.tally.faults[f"redis {kind} killed+restarted"] += 1
        elif fault == "postgres":
            self.proxy.cut()
            time.sleep(self.rng.uniform(0.3, 1.0))
            self.proxy.restore()
            self.tally.faults["postgres cut"] += 1

    # -- checks --------------------------------------------------------------------------

    def _stored(self, thread_id: str) -> set[tuple[str, str]]:
        with psycopg.connect(POSTGRES_URL) as conn:
            rows = conn.execute(f'SELECT checkpoint_ns, checkpoint_id FROM "{self.schema}".'
                                "lgd_checkpoints WHERE thread_id = %s", (thread_id,)).fetchall()
        return {(ns, cid) for ns, cid in rows}

    def _violation(self, r: Run, what: str) -> None:
        self.tally.violations.append(f"{r.thread_id} ({r.mode}, redis {r.redis_kind}, "
                                     f"{r.exit}): {what}")

    def _check(self, r: Run) -> None:
        saver = self.savers[r.redis_kind, r.mode]
        self.tally.acknowledged += len(r.acks)
        lost = set(r.acks) - self._stored(r.thread_id)
        if r.mode == "behind" and r.redis_kind == "everysec" and r.redis_killed_at is not None:
            # README "Guarantees": Redis killed with appendfsync everysec loses about the
            # last second of writes acknowledged from it
            killed = r.redis_killed_at
            window = {a for a in lost if killed - AOF_WINDOW <= r.ack_read_at[a] <= killed}
            self.tally.lost_in_window += len(window)
            lost -= window
        if lost:
            self.tally.lost += len(lost)
            self._violation(r, f"{len(lost)} acknowledged checkpoint(s) not in Postgres")
        graph = build(r.workload, saver, self.schema, POSTGRES_URL, r.thread_id)
        config: dict[str, Any] = {"configurable": {"thread_id": r.thread_id},
                                  "recursion_limit": 1000}
        r.resume = f"{r.exit.split(' (')[0]}{f' on {r.error}' if r.error else ''}, " \
            + self._classify(r, saver, graph, config)
        self.tally.classes[r.resume] += 1
        state = graph.get_state(config)
        if not finished(r.workload, state.values):
            self.tally.resumed += 1
            try:
                graph.invoke(None if state.created_at else INPUTS[r.workload], config,
                             durability=r.durability)  # type: ignore[arg-type]
            except Exception as exc:  # every failure to resume is reported
                self._violation(r, f"resume raised {type(exc).__name__}: {exc}")
                return
        if finished(r.workload, graph.get_state(config).values):
            self.tally.completed += 1
        else:
            self._violation(r, "did not reach its end")
        if r.workload == "supervisor":
            self._check_effects(r, saver)

    def _classify(self, r: Run, saver: DurableSaver, graph: Any, config: Any) -> str:
        """Where the thread resumes from, and why."""
        head = saver.get_tuple({"configurable": {"thread_id": r.thread_id,
                                                 "checkpoint_ns": ""}})
        acked = [cid for ns, cid in r.acks if ns == ""]
        if head is None:
            if acked:
                self._violation(r, "no checkpoint, though some were acknowledged")
                return "LOST: no checkpoint"
            return "from its input: it stored no checkpoint before it ended"
        head_id = head.checkpoint["id"]
        if acked and head_id < acked[-1]:
            self._violation(r, f"resumes from {head_id}, older than acknowledged {acked[-1]}")
            return "LOST: behind its last acknowledged checkpoint"
        if acked and head_id == acked[-1]:
            where = "at its last acknowledged checkpoint"
        else:
            line = _line(saver, r.thread_id, head_id)
            if acked and acked[-1] not in line:
                self._violation(r, f"head {head_id} does not descend from {acked[-1]}")
                return "FORK: head not on the acknowledged line"
            past = line.index(acked[-1]) if acked else len(line)
            where = (f"{past} checkpoint(s) past its last ack (stored, the process died "
                     "before it acknowledged them)")
        state = graph.get_state(config)
        finished_tasks = {tid for tid, _, _ in head.pending_writes or []}
        if finished(r.workload, state.values):
            step = "complete"
        elif not state.next:
            step = "its step done, next checkpoint not written: invoke(None) applies it"
        elif finished_tasks & {t.id for t in state.tasks}:
            step = "mid-step: finished tasks' writes kept, the rest re-run"
        else:
            step = "at a step boundary"
        inside = sum(1 for t in state.tasks if t.state is not None and t.name == "worker")
        nested = f", {inside} worker agent(s) resume in their subgraph" if inside else ""
        r.head_step = head.metadata.get("step", -1)
        return f"{where}; {step}{nested}"

    def _check_effects(self, r: Run, saver: DurableSaver) -> None:
        with psycopg.connect(POSTGRES_URL) as conn:
            rows = conn.execute(f'SELECT item, count(*) FROM "{self.schema}".chaos_effects '
                                "WHERE thread_id = %s GROUP BY item", (r.thread_id,)).fetchall()
        runs = {item: int(n) for item, n in rows}
        records: dict[str, list[str]] = {}  # item -> the statuses of its ledger rows
        for record in saver.ledger.list(r.thread_id):
            item = (record.tool_call_id or "").removeprefix("ship-").rsplit("-", 1)[0]
            records.setdefault(item, []).append(record.status)
        for item in items():
            self.tally.effects += runs.get(item, 0)
            if runs.get(item, 0) > 1:
                self.tally.repeated += runs[item] - 1
                self._violation(r, f"ship({item}) ran {runs[item]} times")
            statuses = records.get(item, [])
            if runs.get(item, 0) == 0 or statuses != ["succeeded"]:
                self._violation(r, f"ship({item}) ran {runs.get(item, 0)} times, ledger rows "
                                   f"{statuses or 'none'} (one logical call, one row)")


def _line(saver: DurableSaver, thread_id: str, head_id: str) -> list[str]:
    """The root namespace's checkpoint ids from ``head_id`` back to the first, by parent."""
    parents = {t.checkpoint["id"]: (t.parent_config or {}).get("configurable", {})
               .get("checkpoint_id") for t in saver.list(
                   {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}})}
    line: list[str] = []
    at: str | None = head_id
    while at is not None and at not in line:
        line.append(at)
        at = parents.get(at)
    return line


def soak(kills: int, seed: int = 0, log: Path | None = None,
         workers: int = WORKERS_PER_ROUND) -> Tally:
    """Rounds until half of ``kills`` workers were SIGKILLed in each write mode (and the
    first four rounds' faults ran: a Redis restart and a Postgres cut in each mode)."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="lgd-chaos-") as tmp, \
            Chaos(Path(tmp), seed, workers) as chaos:
        chaos.log = log.open("w", buffering=1) if log else None
        number = 0
        while min(chaos.tally.kills[m] for m in MODES) * 2 < kills or number < 4:
            chaos.round(number)
            number += 1
        chaos.tally.seconds = time.monotonic() - started
        if chaos.log is not None:
            chaos.log.close()
        return chaos.tally


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kills", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=WORKERS_PER_ROUND,
                        help="worker processes per round")
    parser.add_argument("--log", type=Path, help="write one line per thread: how its "
                        "worker ended, where it resumed and why")
    args = parser.parse_args(argv)
    tally = soak(args.kills, args.seed, args.log, args.workers)
    print(tally.table())
    return 1 if tally.violations else 0


if __name__ == "__main__":
    sys.exit(main())
