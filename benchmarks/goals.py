"""The speed goals of this release, judged from the tables of the same run.

:data:`GOALS` is the one definition: for each goal, where its figure is in the run's
tables (section, table, row, column), the baseline it is divided by, and the bound with its
direction. :func:`goals_table` turns a run's tables into the report's first table: one row
per goal and saver with the figure, the goal and ``met`` or ``gap``; ``not run`` when the
section or a saver the goal needs was not selected, ``no data`` when they were but the
table holds no figure (an error row, say).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from benchmarks.report import NOTE, SAVER, Cell, Column, Row, Table, format_cell
from benchmarks.savers import MEMORY, POSTGRES, POSTGRES_POOL

SECTION = "goals"
MET, GAP, NOT_RUN, NO_DATA = "met", "gap", "not run", "no data"
THROUGH, BEHIND = "durable-through", "durable-behind"
DURABLE = (THROUGH, BEHIND)


@dataclass(frozen=True, slots=True, kw_only=True)
class Goal:
    """One goal, and where a run's tables hold the figure it is judged by."""

    measure: str
    """What is measured, as the report names it."""
    section: str
    table: str
    """The start of the title of the section's table that holds the figure."""
    column: str
    """The key of the figure's column in that table."""
    rows: tuple[Mapping[str, Cell], ...] = ({},)
    """The cells (besides the saver) that pick the figure's row; several rows give a range,
    judged by its worst end."""
    savers: tuple[str, ...] = DURABLE
    """The savers judged, one goal row each."""
    label: str = "{}"
    """The saver's name in the table (``{}`` is the saver's name)."""
    against: str | None = None
    """The baseline saver: the figure is divided by this saver's in the same row cells."""
    bound: float
    at_most: bool
    """``True``: the figure must be at most ``bound`` (a cost); else at least (a rate)."""
    unit: Literal["ratio", "ms"] = "ratio"
    scale: float = 1.0
    """Multiplies a figure that is not a ratio into ``unit`` (``1e-3``: µs to ms)."""

    def goal_text(self) -> str:
        """The goal as the report shows it, e.g. ``≤ 1.5x``."""
        return f"{'≤' if self.at_most else '≥'} {_show(self.bound, self.unit)}"

    def met(self, low: float, high: float) -> bool:
        """Whether figures from ``low`` to ``high`` all meet the goal."""
        return high <= self.bound if self.at_most else low >= self.bound


def _macro(
    measure: str,
    runs: Sequence[tuple[str, str]],
    *,
    saver: str,
    against: str,
    bound: float,
) -> Goal:
    """A goal on the chat graph's steps/s over ``against``'s, in the (API, durability) rows
    ``runs``."""
    return Goal(
        measure=measure,
        section="macro",
        table="Macro (chat)",
        column="steps_per_s",
        rows=tuple({"api": api, "durability": durability} for api, durability in runs),
        savers=(saver,),
        against=against,
        bound=bound,
        at_most=False,
    )


def _micro(op: str, measure: str, *, bound: float, savers: tuple[str, ...] = DURABLE) -> Goal:
    """A goal on the p50 of one micro operation over InMemorySaver's."""
    return Goal(
        measure=measure,
        section="micro",
        table="Micro",
        column="p50",
        rows=({"op": op},),
        savers=savers,
        against=MEMORY,
        bound=bound,
        at_most=True,
    )


def _store(op: str, measure: str, *, bound: float) -> Goal:
    """A goal on the p50 of one store operation of ``DurableStore`` (its saver's name is
    write-through's) over ``PostgresStore``'s (``postgres``'s)."""
    return Goal(
        measure=measure,
        section="store",
        table="Store: single calls",
        column="p50",
        rows=({"op": op},),
        savers=(THROUGH,),
        against=POSTGRES,
        bound=bound,
        at_most=True,
    )


def _load(measure: str, column: str, bounds: Mapping[str, float], *, at_most: bool) -> list[Goal]:
    """One goal per write mode on a per-step figure of the load section, over the pooled
    ``AsyncPostgresSaver``'s (``bounds``: the bound of each mode)."""
    return [
        Goal(
            measure=f"load, {measure}, over the pooled AsyncPostgresSaver's",
            section="load",
            table="Load: per saver",
            column=column,
            savers=(saver,),
            against=POSTGRES_POOL,
            bound=bound,
            at_most=at_most,
        )
        for saver, bound in bounds.items()
    ]


FLAT = 1.25
"""A "flat" growth: the largest namespace's p50 at most this many times the smallest's."""

DURABILITIES = ("sync", "async")

WRITE_THROUGH_RUNS = (
    ("sync", "sync `invoke` one thread after another", 1.0),
    ("async", "`ainvoke` on every thread at once", 1.5),
)
"""The write-through graph goals: API, how the graph is run, the least steps/s ratio."""

GOALS: tuple[Goal, ...] = (
    *(
        _macro(
            f'write-through, chat, {how}, "{durability}": steps/s over PostgresSaver\'s',
            [(api, durability)],
            saver=THROUGH,
            against=POSTGRES,
            bound=bound,
        )
        for api, how, bound in WRITE_THROUGH_RUNS
        for durability in DURABILITIES
    ),
    _macro(
        "write-behind, chat, sync and async API, durability sync and async: steps/s over "
        "InMemorySaver's",
        [(api, durability) for api in ("sync", "async") for durability in DURABILITIES],
        saver=BEHIND,
        against=MEMORY,
        bound=0.6,
    ),
    _micro("put · 10 msgs", "write-behind `put`, 10 messages", bound=4.0, savers=(BEHIND,)),
    _micro(
        "get_tuple latest · 10 msgs", "hot `get_tuple` latest, 10 messages, read again", bound=1.3
    ),
    _micro(
        "get_tuple latest after its put · 10 msgs",
        "hot `get_tuple` latest, 10 messages, first read after its `put` (invoke start)",
        bound=1.6,
    ),
    _micro("get_tuple latest · 100 msgs", "hot `get_tuple` latest, 100 messages", bound=0.3),
    _micro("list limit=10 · 10 msgs", "`list(limit=10)`", bound=1.5),
    Goal(
        measure="a new process without setup(): construct + first `get_tuple`, over "
        "PostgresSaver's (its construct = connect)",
        section="restart",
        table="Restart: a new process",
        column="both_ms",
        label="{} (hot)",
        against=POSTGRES,
        bound=1.0,
        at_most=True,
    ),
    *(
        Goal(
            measure=f"`durable_tool` call, {variant}: time added over the plain tool",
            section="ledger",
            table="Ledger",
            column="overhead_p50",
            rows=({"variant": variant},),
            bound=bound,
            at_most=True,
            unit="ms",
            scale=1e-3,
        )
        for variant, bound in (("tracked", 1.5), ("replay", 0.3))
    ),
    _store(
        "get · item read before",
        "`DurableStore.get` of an item read before (Redis read tier), over PostgresStore's",
        bound=0.5,
    ),
    _store("put · new item", "`DurableStore.put` of a new item, over PostgresStore's", bound=1.0),
    _store(
        "search · numeric filter, limit=10",
        "`DurableStore.search` with a numeric filter, limit=10, over PostgresStore's",
        bound=1.2,
    ),
    Goal(
        measure="`DurableStore.get` as a namespace grows: p50 in the largest namespace over "
        'the smallest\'s ("flat")',
        section="store",
        table="Store: get p50 (µs) as a namespace grows",
        column="growth",
        savers=(THROUGH,),
        bound=FLAT,
        at_most=True,
    ),
    *_load(
        "Postgres CPU per node step (its backends)",
        "postgres_cpu_ms",
        {THROUGH: 1.0, BEHIND: 0.25},
        at_most=True,
    ),
    *_load(
        "WAL bytes per node step (the saver's database)",
        "wal_b",
        {THROUGH: 1.0, BEHIND: 0.7},
        at_most=True,
    ),
    *_load(
        "CPU of every process per node step",
        "cpu_ms",
        {THROUGH: 1.0, BEHIND: 0.7},
        at_most=True,
    ),
    *_load(
        "steps/s at many concurrent `ainvoke`",
        "steps_per_s",
        {THROUGH: 1.2, BEHIND: 2.0},
        at_most=False,
    ),
)

COLUMNS = (
    Column("measure", "measure"),
    SAVER,
    Column("measured", "measured"),
    Column("goal", "goal"),
    Column("status", "status"),
    Column("basis", "from the run's figures"),
)


def _show(value: float, unit: Literal["ratio", "ms"]) -> str:
    return f"{format_cell(value, unit)}{' ms' if unit == 'ms' else ''}"


def _find(tables: Sequence[Table], goal: Goal) -> Table | None:
    for table in tables:
        if table.section == goal.section and table.title.startswith(goal.table):
            return table
    return None


def _figure(table: Table, cells: Mapping[str, Cell], column: str) -> float | None:
    """The number in ``column`` of the first row holding ``cells``, if it has one."""
    for row in table.rows:
        if all(row.get(key) == value for key, value in cells.items()):
            number = row.get(column)
            if isinstance(number, int | float) and not isinstance(number, bool):
                return float(number)
    return None


def _judge(goal: Goal, saver: str, table: Table) -> Row:
    """The cells of one goal row computed from ``table``, or why there are none."""
    name = goal.label.format(saver)
    header, kind = next(
        ((c.header, c.format) for c in table.columns if c.key == goal.column),
        (goal.column, "text"),
    )
    figures: list[float] = []
    shown: list[str] = []
    for cells in goal.rows:
        value = _figure(table, {**cells, "saver": name}, goal.column)
        if value is None:
            return {"status": NO_DATA, NOTE: f"no {header} of {name} in the {goal.section} table"}
        if goal.against is None:
            figures.append(value * goal.scale)
            shown.append(format_cell(value, kind))
            continue
        base = _figure(table, {**cells, "saver": goal.against}, goal.column)
        if not base:
            missing = f"no {header} of {goal.against} in the {goal.section} table"
            return {"status": NO_DATA, NOTE: missing}
        figures.append(value / base)
        shown.append(f"{format_cell(value, kind)} vs {format_cell(base, kind)}")
    low, high = min(figures), max(figures)
    measured = _show(low, goal.unit)
    if high != low:
        measured = f"{format_cell(low, goal.unit)}-{_show(high, goal.unit)}"
    return {
        "measured": measured,
        "min": low,
        "max": high,
        "status": MET if goal.met(low, high) else GAP,
        "basis": f"{header}: {', '.join(shown)}",
    }


def goals_table(
    tables: Sequence[Table], sections: Collection[str], savers: Collection[str]
) -> Table:
    """The goals judged from ``tables``, the tables of a run of ``sections`` on ``savers``."""
    table = Table(
        SECTION,
        "Speed goals of this release, from this run's tables",
        COLUMNS,
        notes=[
            "Ratios are within this run: the saver's figure over the baseline's in the same "
            "table and row (same operation, or same API and durability). A steps/s ratio is a "
            "throughput (above 1x is faster); a latency ratio is a cost (above 1x is slower). "
            "A range is judged by its worst end. not run: the section or a saver the goal "
            "needs was not selected; no data: they were, but the table holds no figure.",
        ],
    )
    for goal in GOALS:
        for saver in goal.savers:
            needed = {saver, *([goal.against] if goal.against else [])}
            row: Row = {
                "measure": goal.measure,
                "saver": goal.label.format(saver),
                "goal": goal.goal_text(),
                "bound": goal.bound,
                "direction": "at most" if goal.at_most else "at least",
            }
            found = _find(tables, goal)
            if goal.section not in sections or not needed <= {*savers}:
                row["status"] = NOT_RUN
            elif found is None:
                row |= {"status": NO_DATA, NOTE: f"no {goal.section} table {goal.table!r}"}
            else:
                row |= _judge(goal, saver, found)
            table.rows.append(row)
    return table
