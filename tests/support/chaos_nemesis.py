"""The faults a chaos run (`tests.support.chaos`) injects besides its SIGKILLs: a private
Redis SIGKILLed and restarted, every Postgres connection cut for a moment by the proxy the
workers reach it through, and the command line run as an operator would while calls are
in flight: ``fork`` of a running supervisor thread, ``resolve-all --dry-run`` on a thread
just killed mid-call, and ``resolve`` of every cut-off call, settled from the provider's
log.
"""

from __future__ import annotations

import json
import random
import time
from datetime import datetime

import psycopg

from langgraph_durable import DurableSaver
from tests.support.chaos_checks import Fork, Run, Tally, order_of
from tests.support.faults import PrivateRedis, Proxy, cli, cli_json
from tests.support.servers import POSTGRES_URL


class Nemesis:
    """The faults of one chaos run, on its servers, proxy and savers; what they did is
    counted in ``tally`` (what they found wrong, as its violations)."""

    def __init__(self, *, redis: dict[str, PrivateRedis], proxy: Proxy,
                 savers: dict[tuple[str, str], DurableSaver], schema: str, prefix: str,
                 rng: random.Random, tally: Tally) -> None:
        self.redis = redis
        self.proxy = proxy
        self.savers = savers
        self.schema, self.prefix = schema, prefix
        self.rng = rng
        self.tally = tally

    def _env(self, mode: str, kind: str) -> dict[str, str]:
        return {"LGD_REDIS_URL": self.redis[kind].url, "LGD_POSTGRES_URL": POSTGRES_URL,
                "LGD_SCHEMA": self.schema, "LGD_KEY_PREFIX": self.prefix,
                "LGD_WRITE_MODE": mode}

    def fork(self, r: Run, mode: str, kind: str) -> None:
        """``langgraph-durable fork`` of a supervisor thread whose worker is running, at its
        latest acknowledged root checkpoint or an earlier one; its resume comes after the
        round, with the source's."""
        roots = [cid for ns, cid in r.acks if ns == ""]
        at = roots[-1] if self.rng.random() < 0.5 else self.rng.choice(roots[1:])
        target = f"{r.thread_id}-fork"
        code, out = cli(["fork", r.thread_id, at, "--to", target], self._env(mode, kind))
        if code != 0:
            self.tally.violation(r, f"fork at {at} exited {code}: {out.strip()}")
            return
        r.fork = Fork(target, at)
        for record in self.savers[kind, mode].ledger.list(target):
            if record.tool == "ship":
                r.fork.copied[order_of(record.tool_call_id)] = record.idempotency_key
        self.tally.faults["cli fork (calls in flight)"] += 1

    def resolve_in_flight(self, r: Run, mode: str, kind: str) -> None:
        """``resolve-all retry --dry-run`` on a thread just killed in the middle of a call:
        the command lists only cut-off calls (uncertain, or a lease that ran out), never a
        ``started`` call whose lease was live when it looked. (Settling a call whose lease
        ran out as ``retry`` when its effect happened is the operator's error, not checked.)"""
        code, listed, out = cli_json(["resolve-all", "retry", "--tool", "ship", "--thread",
                                      r.thread_id, "--dry-run", "--json"], self._env(mode, kind))
        # the command looked at some moment before it returned: a lease that outlived its
        # return was live then (one that ran out while the command started may be listed)
        with psycopg.connect(POSTGRES_URL) as conn:
            after = conn.execute("SELECT clock_timestamp()").fetchone()[0]  # type: ignore[index]
        if code != 0:
            self.tally.violation(r, f"resolve-all --dry-run exited {code}: {out.strip()[:500]}")
            return
        live = [c["key"] for c in listed["calls"] if c["status"] == "started"
                and datetime.fromisoformat(c["lease_expires_at"]) > after]
        if live:
            self.tally.violation(r, f"resolve-all listed calls whose lease was live: {live}")
        self.tally.faults["cli resolve-all (call in flight)"] += 1

    def resolve(self, mode: str, kind: str, *, in_flight: bool) -> None:
        """``langgraph-durable resolve-all --dry-run`` lists every cut-off ship call (calls
        still running hold live leases: they must not be listed); the operator settles each
        with ``resolve KEY``, from the provider's log: ``succeeded`` (with the receipt) when
        the provider has the shipment under the call's key, else ``retry``."""
        env = self._env(mode, kind)
        code, listed, out = cli_json(
            ["resolve-all", "retry", "--tool", "ship", "--dry-run", "--json"], env)
        if code != 0:
            self.tally.violations.append(f"resolve-all --dry-run exited {code}: {out.strip()}")
            return
        calls = listed["calls"]
        with psycopg.connect(POSTGRES_URL) as conn:
            shipped = {row[0] for row in conn.execute(
                f'SELECT idem_key FROM "{self.schema}".chaos_shipments WHERE idem_key = ANY(%s)',
                ([c["idempotency_key"] for c in calls],)).fetchall()}
        for call in calls:
            outcome = "succeeded" if call["idempotency_key"] in shipped else "retry"
            args = ["resolve", call["key"], outcome]
            if outcome == "succeeded":
                args += ["--result", json.dumps(f"shipped {order_of(call['tool_call_id'])}")]
            code, out = cli(args, env)
            if code != 0:
                self.tally.violations.append(f"resolve {call['key']} {outcome} exited {code}: "
                                             f"{out.strip()}")
            self.tally.resolved[outcome] += 1
        self.tally.faults["cli resolve" + (" (calls in flight)" if in_flight else "")] += 1

    def fault(self, fault: str, kind: str, runs: list[Run], offsets: list[int]) -> None:
        """The round's fault: ``redis``, the round's Redis SIGKILLed and restarted (every
        ack its workers wrote so far read first); ``snapshot``, the same after an RDB
        written a moment before, which the restart loads (a Redis back in time, with a new
        run id); or ``postgres``, every connection cut for a moment."""
        if fault in ("redis", "snapshot"):
            server = self.redis[kind]
            if fault == "snapshot":  # the workers go on a moment after an RDB is written
                server.save()
                time.sleep(self.rng.uniform(0.3, 1.0))
            for i, r in enumerate(runs):  # every ack written so far, read before the kill
                offsets[i] = r.read_acks(offsets[i])
                r.redis_killed_at = time.monotonic()
            server.kill()
            time.sleep(self.rng.uniform(0.1, 0.5))
            server.start()
            self.tally.faults[f"redis {kind} killed+restarted" if fault == "redis" else
                              f"redis {kind} restarted from an older snapshot"] += 1
        elif fault == "postgres":
            self.proxy.cut()
            time.sleep(self.rng.uniform(0.3, 1.0))
            self.proxy.restore()
            self.tally.faults["postgres cut"] += 1
