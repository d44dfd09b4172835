"""Result tables, the ratio columns, and their JSON and Markdown renderings."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from benchmarks.savers import MEMORY, POSTGRES

Cell = str | int | float | None
Row = dict[str, Cell]
Format = Literal["text", "int", "us", "ms", "ratio", "bytes", "rate", "number"]

NOTE = "note"
"""Key of the free-text column that carries errors and caveats; rendered last."""


@dataclass(frozen=True, slots=True)
class Column:
    """One column: the row key it shows, its header, and how its numbers are formatted."""

    key: str
    header: str
    format: Format = "text"


@dataclass(slots=True)
class Table:
    """A titled table of rows (dicts keyed by column key) with notes under it."""

    section: str
    title: str
    columns: Sequence[Column]
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


SAVER = Column("saver", "saver")
RATIO_COLUMNS = (Column("x_memory", "vs mem", "ratio"), Column("x_postgres", "vs pg", "ratio"))


ERROR = "ERROR"
"""How every error note starts."""


def error_row(saver: str | None, error: str, **cells: Cell) -> Row:
    """A row that says ``saver`` (or the whole section) could not be measured, and why."""
    return {"saver": saver, **cells, NOTE: f"{ERROR} {error}"}


def add_ratios(rows: Iterable[Row], value: str, *, group: Sequence[str] = ()) -> None:
    """Set ``x_memory`` / ``x_postgres``: each row's ``value`` over its baseline row's.

    The baseline of a row is the row with the same ``group`` cells whose saver is
    ``memory`` (resp. ``postgres``). Values are costs (latency, µs per step, bytes), so a
    ratio above 1 means slower or bigger than the baseline.
    """
    rows = list(rows)
    baselines: dict[tuple[str, tuple[Cell, ...]], float] = {}
    for row in rows:
        number = row.get(value)
        if isinstance(number, int | float) and number > 0:
            baselines[(str(row["saver"]), tuple(row.get(key) for key in group))] = float(number)
    for row in rows:
        number = row.get(value)
        for saver, key in ((MEMORY, "x_memory"), (POSTGRES, "x_postgres")):
            base = baselines.get((saver, tuple(row.get(k) for k in group)))
            row[key] = number / base if isinstance(number, int | float) and base else None


def _number(value: float) -> str:
    """A count or size per unit of work: three significant figures, thousands grouped."""
    if abs(value) < 10:
        return f"{value:,.2f}"
    return f"{value:,.1f}" if abs(value) < 100 else f"{value:,.0f}"


def format_cell(value: Cell, kind: Format) -> str:
    """A cell as the Markdown shows it: ``—`` for no value, numbers by ``kind``."""
    if value is None:
        return "—"
    if isinstance(value, str) or kind == "text":
        return str(value)
    formatters: Mapping[Format, Callable[[float], str]] = {
        "int": lambda v: f"{v:,.0f}",
        "us": lambda v: f"{v:,.1f}" if v < 100 else f"{v:,.0f}",
        "ms": lambda v: f"{v:,.2f}" if v < 100 else f"{v:,.0f}",
        "ratio": lambda v: f"{v:.2f}x" if v < 100 else f"{v:,.0f}x",
        "bytes": lambda v: f"{v:,.0f}",
        "rate": lambda v: f"{v:,.0f}",
        "number": _number,
    }
    return formatters[kind](float(value))


def _escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def table_markdown(table: Table) -> str:
    """One table as GitHub Markdown, with a note column when any row has a note."""
    columns = list(table.columns)
    if any(row.get(NOTE) for row in table.rows):
        columns.append(Column(NOTE, NOTE))
    lines = [f"### {table.title}", ""]
    lines.append("| " + " | ".join(column.header for column in columns) + " |")
    lines.append("|" + "|".join(":--" if c.format == "text" else "--:" for c in columns) + "|")
    for row in table.rows:
        cells = (_escape(format_cell(row.get(column.key), column.format)) for column in columns)
        lines.append("| " + " | ".join(cells) + " |")
    lines.extend(f"\n{note}" for note in table.notes)
    return "\n".join(lines) + "\n"


@dataclass(slots=True)
class Report:
    """Everything one run produced."""

    meta: dict[str, Any]
    tables: list[Table] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def markdown(self) -> str:
        """The report as Markdown: header, legend, tables by section, problems."""
        meta = self.meta
        lines = [f"# Checkpointer benchmark — {meta['date']}", ""]
        lines.append(f"- profile: `{meta['profile']}`, sections: {', '.join(meta['sections'])}")
        lines.extend(f"- {key}: {value}" for key, value in meta["machine"].items())
        lines.append("- savers:")
        lines.extend(f"  - `{name}`: {label}" for name, label in meta["savers"].items())
        lines.append(
            "- latencies are µs unless stated; `vs mem` / `vs pg` divide a cost (latency, µs "
            "per step, bytes) by InMemorySaver's / PostgresSaver's: above 1x is slower or bigger"
        )
        lines.append("")
        section = None
        for table in self.tables:
            if table.section != section:
                section = table.section
                lines.extend([f"## {section}", ""])
            lines.append(table_markdown(table))
        if self.problems:
            lines.extend(["## problems", ""])
            lines.extend(f"- {_escape(problem)}" for problem in self.problems)
        return "\n".join(lines).rstrip() + "\n"

    def has_errors(self) -> bool:
        """Whether any row is an error row or anything was logged as a problem."""
        notes = (str(row.get(NOTE) or "") for table in self.tables for row in table.rows)
        return bool(self.problems) or any(note.startswith(ERROR) for note in notes)

    def as_json(self) -> dict[str, Any]:
        """The report as plain data; numbers unrounded."""
        return {
            "meta": self.meta,
            "tables": [asdict(table) for table in self.tables],
            "problems": self.problems,
        }

    def write(self, directory: Path, stem: str = "latest") -> tuple[Path, Path]:
        """Write ``<stem>.json`` and ``<stem>.md`` into ``directory``; return both paths."""
        directory.mkdir(parents=True, exist_ok=True)
        json_path, md_path = directory / f"{stem}.json", directory / f"{stem}.md"
        json_path.write_text(json.dumps(self.as_json(), indent=2, default=str) + "\n")
        md_path.write_text(self.markdown())
        return json_path, md_path
