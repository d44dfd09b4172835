"""Real-process chaos: SIGKILLed agent processes, Redis killed and restarted, Postgres cut,
asyncio cancellations, forks and resolves from the command line while calls are in flight.

    python -m tests.support.chaos --kills 200 [--seed N]

Runs rounds of three (``--workers``) worker processes (`tests.support.chaos_worker`: a
counter loop and a supervisor handing orders to parallel worker agents, a scripted model and
a durable tool),
in both write modes, on three private ``redis-server`` instances (AOF ``appendfsync
always``, ``everysec``, none) and the shared Postgres reached through a TCP proxy. Each
thread draws its `Options`: LangGraph's durability ("sync", "async", "exit"), the driver
(``invoke``, or ``ainvoke`` the worker cancels at random points, mid-tool too, and resumes),
the tool's policy (``verify=`` or ``idempotent=True``), ``handle_tool_errors`` and
`durable_model`. In a round the harness SIGKILLs each worker at a random acknowledged
checkpoint (under "exit", which acknowledges none before the end, after a random time) and
injects the round's faults: Redis SIGKILLed and restarted, or every Postgres connection cut
for a moment; and, while calls run, the command line's ``fork`` of a running supervisor
thread, or ``resolve-all`` / ``resolve`` of every cut-off call, settled as an honest
operator would (``succeeded`` when the provider has the shipment, ``retry`` when not).

After each round, for each thread: every checkpoint the worker acknowledged is in Postgres
(after a drain), the thread resumes to its end, the resume is classified (where it resumed
from and why), and, for the supervisor: no order reached the provider twice (a ``verify=``
tool: two requests; an idempotent one: two keys, as the provider dedupes by key), a fork
included (an order whose call the fork copied is one order across both threads); no call is
left ``started`` or ``uncertain`` (its policy, or the operator, settled it); with
`durable_model`, the model answered no call the ledger had recorded; under "exit", the
ledger warned. Prints a summary table and a summary line with the faults per kind; exits 1
on any violation. Needs ``redis-server`` on the PATH; never touches the shared Redis.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg

from langgraph_durable import DurableSaver, TierUnavailableError
from tests.support import forked
from tests.support.chaos_worker import EFFECTS_SQL, INPUTS, Options, build, finished, items, run
from tests.support.faults import PrivateRedis, Proxy, cli
from tests.support.servers import POSTGRES_DATABASE, POSTGRES_URL, drop_schema, postgres_address

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
# The command line's fault of a round, by round number: a fork of a running supervisor
# thread, or resolve-all of every cut-off call.
CLI_FAULTS = ("fork", "resolve")
LEASE_OUT = 1.3  # seconds after a kill: the dead worker's leases (1 s) have run out


@dataclass
class Fork:
    """A fork the command line made of a running thread: its copied calls, by order."""

    thread_id: str
    checkpoint_id: str
    copied: dict[str, str] = field(default_factory=dict)  # order -> key the provider saw


@dataclass
class Run:
    """One thread: how its worker ended and how it resumed."""

    thread_id: str
    workload: str
    mode: str
    redis_kind: str
    ack_path: Path
    kill_at: int
    options: Options = field(default_factory=Options)
    kill_after: float | None = None  # seconds: durability "exit" acknowledges nothing before
    kill_at_request: int | None = None  # a supervisor killed mid-call: at its n-th request
    acks: list[tuple[str, str]] = field(default_factory=list)
    ack_read_at: dict[tuple[str, str], float] = field(default_factory=dict)
    redis_killed_at: float | None = None  # when the round's fault killed this run's Redis
    error: str = ""
    exit: str = ""
    resume: str = ""
    head_step: int | None = None
    faults: Counter[str] = field(default_factory=Counter)  # the worker's own (cancellations)
    warned_exit: bool = False
    fork: Fork | None = None

    @property
    def durability(self) -> str:
        return self.options.durability

    def line(self) -> str:
        """One log line: the thread, how its worker ended, where it resumed and why."""
        acked = sum(1 for ns, _ in self.acks if ns == "")
        o = self.options
        kill = (f"kill_at_request={self.kill_at_request}" if self.kill_at_request
                else f"kill_after={self.kill_after:.2f}s" if self.kill_after
                else f"kill_at={self.kill_at}")
        return (f"{self.thread_id} mode={self.mode} durability={self.durability} "
                f"driver={o.driver} tool={o.tool} handle_errors={o.handle_errors} "
                f"durable_model={o.durable_model} {_fmt(self.faults)} "
                f"fork={self.fork.thread_id if self.fork else '-'} "
                f"redis={self.redis_kind} {kill} acks={len(self.acks)} root_acks={acked} "
                f"resumed_at_step={self.head_step} | {self.resume}")


@dataclass
class Tally:
    """What a chaos run did and found."""

    kills: Counter[str] = field(default_factory=Counter)
    exits: Counter[str] = field(default_factory=Counter)
    faults: Counter[str] = field(default_factory=Counter)
    threads: Counter[str] = field(default_factory=Counter)
    classes: Counter[str] = field(default_factory=Counter)
    draws: Counter[str] = field(default_factory=Counter)  # supervisor threads' options
    resolved: Counter[str] = field(default_factory=Counter)  # the operator's outcomes
    acknowledged: int = 0
    lost: int = 0
    lost_in_window: int = 0
    orders: int = 0  # orders shipped (a fork's own orders included)
    repeated: int = 0  # orders that reached the provider twice (or more)
    effects: int = 0  # requests the provider received
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
                ("supervisor threads' draws", _fmt(self.draws)),
                ("cut-off calls the operator resolved", _fmt(self.resolved)),
                ("orders / provider requests / orders reached twice",
                 f"{self.orders} / {self.effects} / {self.repeated}"),
                ("threads resumed / completed", f"{self.resumed} / {self.completed}"),
                ("violations", str(len(self.violations))),
                ("duration", f"{self.seconds:.0f} s")]
        width = max(len(k) for k, _ in rows)
        lines = [f"{k:<{width}}  {v}" for k, v in rows]
        lines.append("resume classes:")
        lines += [f"  {n:>4}  {c}" for c, n in sorted(self.classes.items(), key=lambda x: -x[1])]
        lines += [f"VIOLATION {v}" for v in self.violations]
        lines.append(self.summary())
        return "\n".join(lines)

    def summary(self) -> str:
        """One line: kills, faults per kind, orders and what reached the provider twice."""
        return (f"summary: {sum(self.kills.values())} kills ({_fmt(self.kills)}), "
                f"{sum(self.faults.values())} faults ({_fmt(self.faults)}), "
                f"{self.orders} orders, {self.effects} provider requests, "
                f"{self.repeated} reached twice, {self.lost} acknowledged checkpoints lost, "
                f"{len(self.violations)} violations, {self.seconds:.0f} s")


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
            options = self._draw()
            run_ = Run(thread_id=f"chaos-{number}-{i}-{workload}-{uuid.uuid4().hex[:6]}",
                       workload=workload, mode=mode, redis_kind=kind,
                       ack_path=self.workdir / f"acks-{number}-{i}",
                       kill_at=self.rng.randint(4, 30), options=options)
            if options.driver == "async" and workload == "supervisor":
                # late enough for its cancellations to come first
                run_.kill_at = self.rng.randint(20, 40)
            elif workload == "supervisor" and self.rng.random() < 0.5:
                run_.kill_at_request = self.rng.randint(1, len(items()))
            elif options.durability == "exit":
                run_.kill_after = self.rng.uniform(0.2, 2.0)
            runs.append(run_)
        # the round's fault follows its first kill (an async run is left to its cancellations)
        next((r for r in runs if r.options.driver == "sync"), runs[0]).kill_at = \
            self.rng.randint(1, 8)
        pending_cli: str | None = CLI_FAULTS[number % len(CLI_FAULTS)]
        resolved = next((r for r in runs if r.workload == "supervisor"), None)
        if pending_cli == "resolve" and resolved is not None:
            # the operator's resolve follows this supervisor's kill in the middle of a call
            resolved.options = replace(resolved.options, driver="sync", cancels=0)
            resolved.kill_at_request = self.rng.randint(1, len(items()))
            resolved.kill_after = None
        elif resolved is not None:  # a fork round: its first supervisor is cancelled mid-tool
            resolved.options = replace(resolved.options, driver="async", aim=1.0,
                                       cancels=max(1, resolved.options.cancels))
            resolved.kill_at, resolved.kill_at_request, resolved.kill_after = \
                self.rng.randint(20, 40), None, None
        for o in (r.options for r in runs if r.workload == "supervisor"):
            self.tally.draws.update([f"durability {o.durability}", f"driver {o.driver}",
                                     f"tool {o.tool}"] + ["handle_tool_errors"] * o.handle_errors
                                    + ["durable_model"] * o.durable_model)
        procs = [forked.start(run, {
            "workload": r.workload, "write_mode": mode, "redis_url": self.redis[kind].url,
            "postgres_url": self.proxy_url, "outside_url": POSTGRES_URL,
            "schema": self.schema, "prefix": self.prefix, "thread_id": r.thread_id,
            "ack_path": str(r.ack_path), "options": r.options.spec()}) for r in runs]
        pending_fault = fault != "none"
        cut_off: float | None = None  # when the resolve's supervisor (or any) was killed
        offsets = [0] * len(runs)
        started = time.monotonic()
        deadline = started + ROUND_TIMEOUT
        requests: dict[str, int] = {}
        polled = 0.0
        while any(p.is_alive() for p in procs):
            if time.monotonic() - polled >= 0.01 and any(
                    r.kill_at_request for r, p in zip(runs, procs, strict=True) if p.is_alive()):
                requests, polled = self._requests_by_thread(), time.monotonic()
            for i, (r, p) in enumerate(zip(runs, procs, strict=True)):
                offsets[i] = self._read_acks(r, offsets[i])
                if r.kill_at_request is not None:  # right after a request: the call is running
                    due = requests.get(r.thread_id, 0) >= r.kill_at_request
                elif r.kill_after is not None:
                    due = time.monotonic() - started >= r.kill_after
                else:
                    due = len(r.acks) >= r.kill_at
                if p.is_alive() and (due or time.monotonic() > deadline):
                    p.kill()
                    p.join()
                    r.exit = "killed" if time.monotonic() <= deadline else "killed (stuck)"
                    if r is resolved and pending_cli == "resolve":
                        self._resolve_in_flight(r, mode, kind)
                    if r is resolved or resolved is None:
                        cut_off = cut_off or time.monotonic()
            if pending_fault and any(not p.is_alive() for p in procs):
                self._fault(fault, kind, runs, offsets)
                pending_fault = False
            if pending_cli == "fork":
                live = [r for r, p in zip(runs, procs, strict=True) if p.is_alive()
                        and r.workload == "supervisor" and r.fork is None
                        and sum(1 for ns, _ in r.acks if ns == "") >= 3]
                if live:
                    self._fork(live[0], mode, kind)
                    pending_cli = None
            elif (pending_cli == "resolve" and cut_off is not None
                  and time.monotonic() - cut_off >= LEASE_OUT):
                self._resolve(mode, kind, in_flight=any(p.is_alive() for p in procs))
                pending_cli = None
            time.sleep(0.002)
        if pending_fault:  # every worker ended at once: inject it anyway
            self._fault(fault, kind, runs, offsets)
        if pending_cli == "resolve":  # every worker ended before the leases ran out
            if cut_off is not None:
                time.sleep(max(0.0, LEASE_OUT - (time.monotonic() - cut_off)))
            self._resolve(mode, kind, in_flight=False)
        for i, (r, p) in enumerate(zip(runs, procs, strict=True)):
            p.join()
            self._read_acks(r, offsets[i])
            if not r.exit:
                r.exit = "finished" if p.exitcode == 0 else f"failed ({r.error or p.exitcode})"
            if r.exit == "killed":
                self.tally.kills[mode] += 1
            self.tally.exits[r.exit.split(" (")[0] + (f" ({r.error})" if r.error else "")] += 1
            self.tally.threads[f"{r.workload} {mode}"] += 1
            self.tally.faults.update(r.faults)
        if mode == "behind":  # every acknowledged entry to Postgres before the checks
            self.savers[kind, mode].flush(timeout=60)
            _await_hot(self.savers[kind, mode], runs[0].thread_id)
        for r in runs:
            self._check(r)
            if self.log is not None:
                self.log.write(r.line() + "\n")

    def _draw(self) -> Options:
        """A thread's options: LangGraph's durability, the driver, the tool's policy, whether
        tool errors are shown to the model, and durable model calls."""
        rng = self.rng
        driver = "async" if rng.random() < 0.5 else "sync"
        options = Options(
            durability=rng.choice(("sync", "async", "exit")), driver=driver,
            cancels=rng.randint(1, 3) if driver == "async" else 0,
            tool=rng.choice(("verify", "idempotent")), handle_errors=rng.random() < 0.5,
            durable_model=rng.random() < 0.5, seed=rng.randrange(2**31))
        return options

    def _env(self, mode: str, kind: str) -> dict[str, str]:
        return {"LGD_REDIS_URL": self.redis[kind].url, "LGD_POSTGRES_URL": POSTGRES_URL,
                "LGD_SCHEMA": self.schema, "LGD_KEY_PREFIX": self.prefix,
                "LGD_WRITE_MODE": mode}

    def _fork(self, r: Run, mode: str, kind: str) -> None:
        """``langgraph-durable fork`` of a supervisor thread whose worker is running, at its
        latest acknowledged root checkpoint or an earlier one; its resume comes after the
        round, with the source's."""
        roots = [cid for ns, cid in r.acks if ns == ""]
        at = roots[-1] if self.rng.random() < 0.5 else self.rng.choice(roots[1:])
        target = f"{r.thread_id}-fork"
        code, out = cli(["fork", r.thread_id, at, "--to", target], self._env(mode, kind))
        if code != 0:
            self._violation(r, f"fork at {at} exited {code}: {out.strip()}")
            return
        r.fork = Fork(target, at)
        for record in self.savers[kind, mode].ledger.list(target):
            if record.tool == "ship":
                r.fork.copied[_order(record.tool_call_id)] = record.idempotency_key
        self.tally.faults["cli fork (calls in flight)"] += 1

    def _resolve_in_flight(self, r: Run, mode: str, kind: str) -> None:
        """``resolve-all retry --dry-run`` on a thread just killed in the middle of a call:
        the command lists only cut-off calls (uncertain, or a lease that ran out), never a
        ``started`` call whose lease was live when it looked. (Settling a call whose lease
        ran out as ``retry`` when its effect happened is the operator's error, not checked.)"""
        with psycopg.connect(POSTGRES_URL) as conn:
            before = conn.execute("SELECT clock_timestamp()").fetchone()[0]  # type: ignore[index]
        code, out = cli(["resolve-all", "retry", "--tool", "ship", "--thread", r.thread_id,
                         "--dry-run", "--json"], self._env(mode, kind))
        if code != 0:
            self._violation(r, f"resolve-all --dry-run exited {code}: {out.strip()[:500]}")
            return
        live = [c["key"] for c in json.loads(out)["calls"] if c["status"] == "started"
                and datetime.fromisoformat(c["lease_expires_at"]) > before]
        if live:
            self._violation(r, f"resolve-all listed calls whose lease was live: {live}")
        self.tally.faults["cli resolve-all (call in flight)"] += 1

    def _resolve(self, mode: str, kind: str, *, in_flight: bool) -> None:
        """``langgraph-durable resolve-all --dry-run`` lists every cut-off ship call (calls
        still running hold live leases: they must not be listed); the operator settles each
        with ``resolve KEY``, from the provider's log: ``succeeded`` (with the receipt) when
        the provider has the shipment under the call's key, else ``retry``."""
        env = self._env(mode, kind)
        code, out = cli(["resolve-all", "retry", "--tool", "ship", "--dry-run", "--json"], env)
        if code != 0:
            self.tally.violations.append(f"resolve-all --dry-run exited {code}: {out.strip()}")
            return
        calls = json.loads(out)["calls"]
        with psycopg.connect(POSTGRES_URL) as conn:
            shipped = {row[0] for row in conn.execute(
                f'SELECT idem_key FROM "{self.schema}".chaos_shipments WHERE idem_key = ANY(%s)',
                ([c["idempotency_key"] for c in calls],)).fetchall()}
        for call in calls:
            outcome = "succeeded" if call["idempotency_key"] in shipped else "retry"
            args = ["resolve", call["key"], outcome]
            if outcome == "succeeded":
                args += ["--result", json.dumps(f"shipped {_order(call['tool_call_id'])}")]
            code, out = cli(args, env)
            if code != 0:
                self.tally.violations.append(f"resolve {call['key']} {outcome} exited {code}: "
                                             f"{out.strip()}")
            self.tally.resolved[outcome] += 1
        self.tally.faults["cli resolve" + (" (calls in flight)" if in_flight else "")] += 1

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
            elif word == "fault":
                r.faults[{"cancel": "asyncio cancel (timeout)",
                          "cancel-mid-tool": "asyncio cancel mid-tool"}[rest]] += 1
            elif word == "warned":
                r.warned_exit = True
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
        graph = build(r.workload, saver, self.schema, POSTGRES_URL, r.thread_id, r.options)
        config: dict[str, Any] = {"configurable": {"thread_id": r.thread_id},
                                  "recursion_limit": 1000}
        r.resume = f"{r.exit.split(' (')[0]}{f' on {r.error}' if r.error else ''}, " \
            + self._classify(r, saver, graph, config)
        self.tally.classes[r.resume] += 1
        if r.durability == "exit" and not r.warned_exit and self._requests(r.thread_id):
            self._violation(r, "a durable tool ran under durability 'exit' without the "
                               "ledger's warning")
        if not self._run_to_end(r, graph, config):
            return
        if r.workload == "supervisor":
            self._check_effects(r, saver)

    def _run_to_end(self, r: Run, graph: Any, config: Any) -> bool:
        """Resume ``config``'s thread to its end (as the operator would after a crash)."""
        state = graph.get_state(config)
        if not finished(r.workload, state.values):
            self.tally.resumed += 1
            try:
                graph.invoke(None if state.created_at else INPUTS[r.workload], config,
                             durability=r.durability)
            except Exception as exc:  # every failure to resume is reported
                self._violation(r, f"resume of {config['configurable']['thread_id']} raised "
                                   f"{type(exc).__name__}: {exc}")
                return False
        if finished(r.workload, graph.get_state(config).values):
            self.tally.completed += 1
            return True
        self._violation(r, f"{config['configurable']['thread_id']} did not reach its end")
        return False

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

    def _requests_by_thread(self) -> dict[str, int]:
        """How many requests the provider received from each thread so far."""
        with psycopg.connect(POSTGRES_URL) as conn:
            rows = conn.execute(f'SELECT thread_id, count(*) FROM "{self.schema}".chaos_effects '
                                "GROUP BY thread_id").fetchall()
        return {thread: int(n) for thread, n in rows}

    def _requests(self, thread_id: str) -> dict[str, list[str]]:
        """The requests the provider received from ``thread_id``: the keys, by order."""
        with psycopg.connect(POSTGRES_URL) as conn:
            rows = conn.execute(f'SELECT item, idem_key FROM "{self.schema}".chaos_effects '
                                "WHERE thread_id = %s ORDER BY id", (thread_id,)).fetchall()
        requests: dict[str, list[str]] = {}
        for item, key in rows:
            requests.setdefault(item, []).append(key)
        return requests

    def _check_effects(self, r: Run, saver: DurableSaver) -> None:
        """No order reached the provider twice: a ``verify=`` tool's provider applies each
        request, so one request per order; an idempotent tool's provider dedupes by key, so
        one key per order. A fork shares with its source the orders whose calls it copied
        (it must present the key the provider saw); the others are its own. Every ship call
        is settled; with `durable_model`, the model answered no call the ledger recorded."""
        source = self._requests(r.thread_id)
        fork: dict[str, list[str]] = {}
        if r.fork is not None:
            graph = build(r.workload, saver, self.schema, POSTGRES_URL, r.fork.thread_id,
                          r.options)
            config = {"configurable": {"thread_id": r.fork.thread_id}, "recursion_limit": 1000}
            if self._run_to_end(r, graph, config):
                fork = self._requests(r.fork.thread_id)
                self._check_ledger(r, saver, r.fork.thread_id, strict=False)
        for item in items():
            orders = [(r.thread_id, source.get(item, []))]
            if r.fork is not None and item in r.fork.copied:
                orders = [(f"{r.thread_id} and its fork", source.get(item, [])
                           + fork.get(item, []))]
            elif r.fork is not None:
                orders.append((r.fork.thread_id, fork.get(item, [])))
            for who, keys in orders:
                n = len(keys) if r.options.tool == "verify" else len(set(keys))
                self.tally.effects += len(keys)
                self.tally.orders += 1
                if n == 0 and not (who == r.fork.thread_id if r.fork else False):
                    self._violation(r, f"order {item} never reached the provider ({who})")
                elif n > 1:
                    self.tally.repeated += 1
                    self._violation(r, f"order {item} reached the provider {n} times ({who}, "
                                       f"{r.options.tool} tool, keys {keys}); ledger: "
                                       + self._rows(r, item))
        self._check_ledger(r, saver, r.thread_id)
        if r.options.durable_model:
            with psycopg.connect(POSTGRES_URL) as conn:
                answered = conn.execute(
                    f'SELECT count(*) FROM "{self.schema}".chaos_model_calls '
                    "WHERE thread_id = %s", (r.thread_id,)).fetchone()[0]  # type: ignore[index]
            attempts = sum(rec.attempts for rec in saver.ledger.list(r.thread_id)
                           if rec.tool.startswith("model:"))
            if answered > attempts:
                self._violation(r, f"the model answered {answered} times, the ledger recorded "
                                   f"{attempts} attempts: a recorded answer was asked again")

    def _rows(self, r: Run, item: str) -> str:
        """The ship calls of ``item`` in ``r``'s thread and its fork, for a violation."""
        threads = [r.thread_id] + ([r.fork.thread_id] if r.fork else [])
        with psycopg.connect(POSTGRES_URL) as conn:
            rows = conn.execute(
                "SELECT thread_id, key, COALESCE(idempotency_key, key), checkpoint_ns, step, "
                "status, attempts, duplicate_of, lease_owner, started_at, finished_at "
                f'FROM "{self.schema}".lgd_tool_calls WHERE thread_id = ANY(%s) '
                "AND tool_call_id LIKE %s ORDER BY started_at",
                (threads, f"ship-{item}-%")).fetchall()
        return "; ".join(" ".join(str(v) for v in row) for row in rows)

    def _check_ledger(self, r: Run, saver: DurableSaver, thread_id: str, *,
                      strict: bool = True) -> None:
        """Every ship call of the thread settled (none left started or uncertain: its policy
        or the operator applied), one succeeded per order; ``strict`` and without errors
        shown to the model, one row per order (a call re-run under a new id is that call;
        a fork re-running a step in a new namespace may replay the copy under a new row)."""
        records: dict[str, list[str]] = {}
        for record in saver.ledger.list(thread_id):
            if record.tool == "ship":
                records.setdefault(_order(record.tool_call_id), []).append(record.status)
        for item in items():
            statuses = records.get(item, [])
            unsettled = [s for s in statuses if s in ("started", "uncertain")]
            if unsettled or "succeeded" not in statuses or (
                    strict and not r.options.handle_errors and statuses != ["succeeded"]):
                self._violation(r, f"{thread_id}: order {item} has ledger rows "
                                   f"{statuses or 'none'}: " + self._rows(r, item))


def _order(tool_call_id: str | None) -> str:
    """The order a ship call acts on, from its tool-call id (``ship-<order>-<random>``)."""
    return (tool_call_id or "").removeprefix("ship-").rsplit("-", 1)[0]


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
