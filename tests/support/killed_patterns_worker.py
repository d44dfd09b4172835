"""A process that plays an agent pattern of `tests/support/agent_patterns.py` on a
`DurableSaver` and SIGKILLs itself at an exact point, and one that resumes it.

    kill(schema, prefix, run, case)     # exits by SIGKILL at the case's point
    resume(schema, prefix, run, case)   # exit code 0, or UNCERTAIN

A `Run` says which pattern, write mode and ``durability`` the thread runs with; a `Case`,
which tool policy, in which turn to die and where: at a step boundary (`KillPoint`: after the
checkpoint of ``step`` was stored, ``before`` or ``after`` the writes of a task of that
step, in the root graph or in a subgraph) or ``mid-tool`` (inside the tool, once its effect
was stored outside, before it returns: the kill fires at the turn's first effect). Effects
are stored outside the saver, in a table of the test's schema (`Effects`), with the
idempotency key each ran under; the tool's ``verify=`` asks that table.

``resume`` runs the thread on with ``invoke(None)`` and then plays the turns after the one
that was killed. A `ToolOutcomeUncertainError` ends it with exit code `UNCERTAIN` (the test
settles the call with ``saver.ledger.resolve`` and resumes again).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg

from langgraph_durable import DurableSaver, ToolOutcomeUncertainError
from tests.support import agent_patterns as ap
from tests.support.kill_point_worker import KillPoint, killing
from tests.support.servers import POSTGRES_URL, REDIS_URL

UNCERTAIN = 17
"""The exit code of a resume that ended in `ToolOutcomeUncertainError`."""
NO_KILL = 5
"""The exit code of a killing run that ended before its kill point."""

POLICIES: dict[str, dict[str, Any]] = {
    "default": {},  # on_uncertain="raise"
    "idempotent": {"idempotent": True},  # the provider dedupes by key: retried under it
    "verify": {"verify": ap.happened},
}


@dataclass(frozen=True)
class Shape:
    """A pattern as a graph and the inputs of its turns."""

    build: Callable[..., Any]  # (saver, durable, **tool options) -> compiled graph
    turns: Callable[[], list[Any]]  # new input objects for each turn


SHAPES = {
    "two_calls_agent": Shape(ap.agent, lambda: [ap.ask("add apple x2")]),
    "order_lines_loop": Shape(ap.order_lines_graph, lambda: [{"lines": ["apple", "apple"]}]),
    "send_fan_out": Shape(ap.fan_out_graph, lambda: [{"items": ["apple", "apple"]}]),
    "sub_agent_two_turns": Shape(ap.sub_agent_graph,
                                 lambda: [ap.ask("add apple"), ap.ask("add apple")]),
}


@dataclass(frozen=True)
class Run:
    """One thread of a pattern: its id, the pattern, the saver's write mode, the runs'
    ``durability``."""

    thread_id: str
    pattern: str
    write_mode: str
    durability: str


@dataclass(frozen=True)
class Case:
    """Where a run dies: in ``turn`` (0-based), ``where`` = ``"root"`` or ``"subgraph"``
    (a step boundary of that namespace: ``step``, ``when`` = before/after its writes) or
    ``"mid-tool"``; the tool's ``policy`` (a key of `POLICIES`)."""

    where: str
    policy: str = "default"
    turn: int = 0
    step: int = 0
    when: str = "before"

    def __str__(self) -> str:
        point = "mid-tool" if self.where == "mid-tool" else \
            f"{self.where} step {self.step} {self.when} writes"
        return f"turn {self.turn} {point} ({self.policy})"


OUTSIDE_SQL = ('CREATE TABLE IF NOT EXISTS "{schema}".agent_effects '
               "(id serial, thread_id text, effect text, idem_key text)")


class Effects:
    """The provider's own table of effects (`agent_patterns.Outside`); with ``kill_armed``
    set, the process dies right after storing a ``cart:`` effect."""

    def __init__(self, schema: str) -> None:
        self.schema = schema
        self.kill_armed = False

    def setup(self) -> None:
        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            conn.execute(OUTSIDE_SQL.format(schema=self.schema))

    def record(self, thread_id: str, effect: str, key: str | None) -> None:
        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            conn.execute(f'INSERT INTO "{self.schema}".agent_effects (thread_id, effect, '
                         "idem_key) VALUES (%s, %s, %s)", (thread_id, effect, key))
        if self.kill_armed and effect.startswith("cart:"):
            os.kill(os.getpid(), signal.SIGKILL)

    def happened(self, key: str) -> bool:
        with psycopg.connect(POSTGRES_URL) as conn:
            row = conn.execute(f'SELECT count(*) FROM "{self.schema}".agent_effects '
                               "WHERE idem_key = %s", (key,)).fetchone()
        return bool(row and row[0])

    def count(self, thread_id: str, effect: str = ap.APPLE) -> tuple[int, int]:
        """How many ``effect`` happened on ``thread_id``, and under how many distinct keys
        (what a provider deduping by key holds)."""
        with psycopg.connect(POSTGRES_URL) as conn:
            row = conn.execute(f'SELECT count(*), count(DISTINCT idem_key) FROM '
                               f'"{self.schema}".agent_effects WHERE thread_id = %s '
                               "AND effect = %s", (thread_id, effect)).fetchone()
        assert row is not None
        return int(row[0]), int(row[1])


def open_saver(schema: str, prefix: str, write_mode: str,
               point: KillPoint | None = None) -> DurableSaver:
    """A saver of the test's schema; with ``point``, one that dies there."""
    cls = killing(DurableSaver, point) if point else DurableSaver
    # A killed worker's flusher may hold journal entries: reclaim them after 1 s.
    saver: DurableSaver = cls(REDIS_URL, POSTGRES_URL, schema=schema, key_prefix=prefix,
                              write_mode=write_mode, reclaim_after=1.0)
    saver.setup()
    return saver


def reference(pattern: str) -> int:
    """The pattern's apples with plain tools on LangGraph's ``InMemorySaver``, no faults."""
    from langgraph.checkpoint.memory import InMemorySaver

    shape, thread_id = SHAPES[pattern], f"reference-{os.urandom(8).hex()}"
    graph = shape.build(InMemorySaver(), False)
    for turn in shape.turns():
        graph.invoke(turn, ap.config(thread_id))
    return ap.effects(thread_id)


def kill(schema: str, prefix: str, run: Run, case: Case) -> None:
    """Play ``run`` from its first turn and die at ``case``'s point."""
    effects = Effects(schema)
    ap.count_outside(effects)
    point = None
    if case.where != "mid-tool":
        point = KillPoint(case.step, case.when, subgraph=case.where == "subgraph")
    saver = open_saver(schema, prefix, run.write_mode, point)
    shape = SHAPES[run.pattern]
    graph = shape.build(saver, True, **POLICIES[case.policy])
    for n, turn in enumerate(shape.turns()):
        if n == case.turn:
            if point is None:
                effects.kill_armed = True
            else:
                point.armed = True
        graph.invoke(turn, ap.config(run.thread_id), durability=run.durability)
    raise SystemExit(NO_KILL)


def resume(schema: str, prefix: str, run: Run, case: Case) -> None:
    """Resume ``run`` after its kill (``invoke(None)``), then play the turns after the
    killed one; exit `UNCERTAIN` on `ToolOutcomeUncertainError`."""
    ap.count_outside(Effects(schema))
    shape = SHAPES[run.pattern]
    with open_saver(schema, prefix, run.write_mode) as saver:
        graph = shape.build(saver, True, **POLICIES[case.policy])
        config = ap.config(run.thread_id)
        try:
            graph.invoke(None, config, durability=run.durability)
            for turn in shape.turns()[case.turn + 1:]:
                graph.invoke(turn, config, durability=run.durability)
        except ToolOutcomeUncertainError:
            raise SystemExit(UNCERTAIN) from None
        saver.flush()
