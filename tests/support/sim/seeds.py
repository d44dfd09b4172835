"""Running the simulation on real tiers: the tiers and raw clients a run of seeds shares
(`sim_env`), one seeded run checked (`run_seed`), and a violation's report with the command
that replays its seed (`explain`).

Environment (see `tests/faults/test_simulation.py`): ``LGD_SIM_FAULTS``, ``LGD_SIM_ALLOWANCE``.
"""

from __future__ import annotations

import dataclasses
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import redis

from langgraph_durable import DurableSaver
from tests.support.servers import POSTGRES_URL
from tests.support.sim.core import MARK_INTERVAL, Latencies, SaverConfig, Tiers
from tests.support.sim.invariants import Checker, Violation
from tests.support.sim.scheduler import FAULTS, Env, Params, Sim

ALLOWANCE = int(os.environ.get("LGD_SIM_ALLOWANCE", str(MARK_INTERVAL)))
TRACE_LINES = 60
# Short enough that the stale marks the seeds leave behind (kept for twice the hot TTL)
# stay few, long enough that no key expires within a seed (a seed lasts ~0.1 s).
SIM_TTL = 10.0
# A batch whose flusher failed mid-way is taken over after this long (real time, which
# passes only while the run finishes): short, so a seed drains in well under a second.
SIM_RECLAIM = 0.2
FAULT_KINDS = tuple(os.environ.get("LGD_SIM_FAULTS", ",".join(FAULTS)).split(","))


@contextmanager
def sim_env(redis_url: str, schema: str, prefix: str, *, cluster: bool = False,
            journal_shards: int | None = None) -> Iterator[Env]:
    """Real tiers and raw clients on a schema and prefix, shared by all seeds; on a Redis
    Cluster with ``cluster``, with ``journal_shards`` journals when given."""
    layout = {"redis_cluster": cluster, "journal_shards": journal_shards}
    with DurableSaver(redis_url, POSTGRES_URL, key_prefix=prefix, schema=schema,
                      **layout) as saver:  # type: ignore[arg-type]
        saver.setup()
    configs = {
        mode: SaverConfig(redis_url=redis_url, postgres_url=POSTGRES_URL, write_mode=mode,
                          key_prefix=prefix, schema=schema, background_flush=False,
                          hot_ttl=SIM_TTL, reclaim_after=SIM_RECLAIM,
                          **layout)  # type: ignore[arg-type]
        for mode in ("through", "behind")
    }
    tiers = Tiers(configs["through"], latencies=Latencies())
    tiers.open()
    client = (redis.RedisCluster if cluster else redis.Redis).from_url(redis_url)
    pg = psycopg.connect(POSTGRES_URL, autocommit=True)
    try:
        yield Env(configs, tiers, client, pg)  # type: ignore[arg-type]
    finally:
        tiers.close()
        client.close()
        pg.close()


def run_seed(env: Env, seed: int, mode: str, *, writes_first: float = 0.0,
             faults: tuple[str, ...] = FAULT_KINDS) -> tuple[Sim, list[Violation]]:
    """One seeded run and its violations (``writes_first``: `Params.writes_first`;
    ``faults``: the kinds that may strike, ``LGD_SIM_FAULTS``'s by default)."""
    env.forget_marks()
    params = dataclasses.replace(Params.draw(seed, mode, faults), writes_first=writes_first)
    sim = Sim(env, params, tag=f"{uuid.uuid4().hex[:6]}-s{seed}")
    sim.run()
    violations = Checker(sim, ALLOWANCE).run()
    env.clear_hot()  # keep the keyspace small: faults SCAN it
    return sim, violations


def explain(seed: int, mode: str, sim: Sim, violations: list[Violation]) -> str:
    """A violation's report: what broke, the replay command, the interleaving."""
    first = violations[0]
    lines = [str(v) for v in violations[:8]]
    thread = first.where.split("/")[0]
    trace = [t for t in sim.trace if int(t[:4]) <= first.step and (
        f"[{thread}" in t or any(w in t for w in ("----", "probe", "flush")))][-TRACE_LINES:]
    return "\n".join([
        f"seed {seed} ({mode}): {len(violations)} violation(s)",
        *("  " + line for line in lines),
        f"  replay: LGD_SIM_SEED={seed} LGD_SIM_MODE={mode} "
        + (f"LGD_SIM_WRITES_FIRST={sim.p.writes_first} " if sim.p.writes_first
           else "") + "pytest tests/faults/test_simulation.py -k replay",
        f"  interleaving on {thread} (and faults, probes, flushes) up to the first violation"
        " (step process #call op[thread] request):",
        *("    " + t for t in trace),
    ])
