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

This module runs the rounds; the faults besides the kills are `chaos_nemesis`, what a run
records and the checks after each round `chaos_checks`.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sys
import tempfile
import time
import uuid
from dataclasses import replace
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

import psycopg
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from langgraph_durable import DurableSaver
from tests.support import forked
from tests.support.chaos_checks import MODES, Checker, Run, Tally, await_served, retried
from tests.support.chaos_nemesis import Nemesis
from tests.support.chaos_worker import EFFECTS_SQL, Options, items, run
from tests.support.faults import PrivateRedis, Proxy
from tests.support.servers import POSTGRES_DATABASE, POSTGRES_URL, drop_schema, postgres_address

REDIS_KINDS = {"always": "always", "everysec": "everysec", "none": None}
# (write mode, fault, Redis kind), cycled round after round. Write-behind with a Redis
# without persistence loses its unflushed tail by design, so it is not among them; nor is
# it restored from an older snapshot (what was acknowledged after it is gone, as there).
# Write-through restored from one loses nothing: Postgres holds every acknowledged turn.
SCHEDULE = (
    ("through", "redis", "always"), ("behind", "redis", "always"),
    ("through", "postgres", "everysec"), ("behind", "postgres", "always"),
    ("through", "redis", "everysec"), ("behind", "redis", "everysec"),
    ("through", "snapshot", "none"), ("behind", "none", "everysec"),
    ("through", "none", "none"), ("behind", "postgres", "everysec"),
    ("through", "postgres", "none"), ("behind", "redis", "always"),
)
WORKERS_PER_ROUND = 3
ROUND_TIMEOUT = 180.0
# The command line's fault of a round, by round number: a fork of a running supervisor
# thread, or resolve-all of every cut-off call.
CLI_FAULTS = ("fork", "resolve")
LEASE_OUT = 1.3  # seconds after a kill: the dead worker's leases (1 s) have run out


def _stacks_of(proc: BaseProcess, ack_path: Path) -> str:
    """Every thread's stack in a live worker (its SIGUSR1 handler writes them), and the
    last of what the saver logged in it (warnings, and the ledger's waits)."""
    stacks = Path(f"{ack_path}.stacks")
    if proc.pid is not None:
        os.kill(proc.pid, signal.SIGUSR1)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not stacks.stat().st_size:
        time.sleep(0.05)
    time.sleep(0.2)  # the other threads' stacks after the first
    ops = Path(f"{ack_path}.ops")
    if proc.pid is not None:
        os.kill(proc.pid, signal.SIGUSR2)
    while time.monotonic() < deadline + 5 and not ops.exists():
        time.sleep(0.05)
    time.sleep(0.2)
    log = Path(f"{ack_path}.log")
    said = log.read_text().splitlines()[-40:] if log.exists() else []
    return (stacks.read_text()
            + "\nthe saver's suspended operations (generator, where it waits):\n"
            + (ops.read_text() if ops.exists() else "(no answer)\n")
            + "what the saver logged last:\n" + "\n".join(said))


class Chaos:
    """The servers, proxy and savers of one chaos run, and its rounds."""

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
        self.clients: list[redis.Redis] = []  # the savers' Redis clients (closed here)
        self.tally = Tally()
        self.log: Any = None
        self.nemesis = Nemesis(redis=self.redis, proxy=self.proxy, savers=self.savers,
                               schema=self.schema, prefix=self.prefix, rng=self.rng,
                               tally=self.tally)
        self.checker = Checker(self.schema, self.savers, self.tally)

    def __enter__(self) -> Chaos:
        for server in self.redis.values():
            server.start()
        self.proxy.start()
        for kind, server in self.redis.items():
            for mode in MODES:
                # the checks' savers sit idle between rounds: their client pings a
                # connection idle past a second, and a failed PING reconnects it to the
                # Redis a round's fault restarted (as an application's client set up so
                # does), which must be checked before a script goes out on it
                client = redis.Redis.from_url(
                    server.url, health_check_interval=1, retry=Retry(NoBackoff(), 2),
                    retry_on_error=[redis.ConnectionError])
                self.clients.append(client)
                saver = DurableSaver(server.url, POSTGRES_URL, schema=self.schema,
                                     key_prefix=self.prefix, write_mode=mode,  # type: ignore[arg-type]
                                     breaker_cooldown=0.2, redis_client=client)
                saver.setup()
                self.savers[kind, mode] = saver
        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            conn.execute(EFFECTS_SQL.format(schema=self.schema))
        return self

    def __exit__(self, *exc: object) -> None:
        for saver in self.savers.values():
            saver.close()
        for client in self.clients:
            client.close()
        self.proxy.cut()
        for server in self.redis.values():
            server.kill()
        drop_schema(self.schema)

    def round(self, number: int) -> None:
        """One round: draw its threads, start a worker for each, kill each at its point
        while the nemesis injects the round's faults, then count and check every thread."""
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
                requests, polled = self.checker.requests_by_thread(), time.monotonic()
            for i, (r, p) in enumerate(zip(runs, procs, strict=True)):
                offsets[i] = r.read_acks(offsets[i])
                if r.kill_at_request is not None:  # right after a request: the call is running
                    due = requests.get(r.thread_id, 0) >= r.kill_at_request
                elif r.kill_after is not None:
                    due = time.monotonic() - started >= r.kill_after
                else:
                    due = len(r.acks) >= r.kill_at
                if p.is_alive() and (due or time.monotonic() > deadline):
                    stuck = time.monotonic() > deadline
                    r.exit = "killed (stuck)" if stuck else "killed"
                    if stuck:
                        self.checker.stuck(r, ROUND_TIMEOUT, _stacks_of(p, r.ack_path))
                    p.kill()
                    p.join()
                    if r is resolved and pending_cli == "resolve":
                        self.nemesis.resolve_in_flight(r, mode, kind)
                    if r is resolved or resolved is None:
                        cut_off = cut_off or time.monotonic()
            if pending_fault and any(not p.is_alive() for p in procs):
                self.nemesis.fault(fault, kind, runs, offsets)
                pending_fault = False
            if pending_cli == "fork":
                live = [r for r, p in zip(runs, procs, strict=True) if p.is_alive()
                        and r.workload == "supervisor" and r.fork is None
                        and sum(1 for ns, _ in r.acks if ns == "") >= 3]
                if live:
                    self.nemesis.fork(live[0], mode, kind)
                    pending_cli = None
            elif (pending_cli == "resolve" and cut_off is not None
                  and time.monotonic() - cut_off >= LEASE_OUT):
                self.nemesis.resolve(mode, kind, in_flight=any(p.is_alive() for p in procs))
                pending_cli = None
            time.sleep(0.002)
        if pending_fault:  # every worker ended at once: inject it anyway
            self.nemesis.fault(fault, kind, runs, offsets)
        if pending_cli == "resolve":  # every worker ended before the leases ran out
            if cut_off is not None:
                time.sleep(max(0.0, LEASE_OUT - (time.monotonic() - cut_off)))
            self.nemesis.resolve(mode, kind, in_flight=False)
        for i, (r, p) in enumerate(zip(runs, procs, strict=True)):
            p.join()
            r.read_acks(offsets[i])
            if not r.exit:
                r.exit = "finished" if p.exitcode == 0 else f"failed ({r.error or p.exitcode})"
            if r.exit == "killed":
                self.tally.kills[mode] += 1
            self.tally.exits[r.exit.split(" (")[0] + (f" ({r.error})" if r.error else "")] += 1
            self.tally.threads[f"{r.workload} {mode}"] += 1
            self.tally.faults.update(r.faults)
        if mode == "behind":  # every acknowledged entry to Postgres before the checks
            retried(lambda: self.savers[kind, mode].flush(timeout=60))
            await_served(self.savers[kind, mode], runs[0].thread_id)
        for r in runs:
            self.checker.check(r)
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


def soak(kills: int, seed: int = 0, log: Path | None = None,
         workers: int = WORKERS_PER_ROUND) -> Tally:
    """Rounds until half of ``kills`` workers were SIGKILLed in each write mode (and the
    first seven rounds' faults ran: a Redis restart and a Postgres cut in each mode, and a
    write-through Redis restored from an older snapshot)."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="lgd-chaos-") as tmp, \
            Chaos(Path(tmp), seed, workers) as chaos:
        chaos.log = log.open("w", buffering=1) if log else None
        number = 0
        while min(chaos.tally.kills[m] for m in MODES) * 2 < kills or number < 7:
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
