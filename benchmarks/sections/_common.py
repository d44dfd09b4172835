"""Helpers that several sections share: per-saver fixtures and latency rows."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TypeVar

from benchmarks.report import NOTE, RATIO_COLUMNS, Cell, Column, Row, error_row
from benchmarks.savers import OpenSavers, Saver
from benchmarks.timing import Series, describe, summarize

F = TypeVar("F")

LATENCY_COLUMNS = (
    Column("p50", "p50 µs", "us"),
    Column("p95", "p95 µs", "us"),
    *RATIO_COLUMNS,
    Column("n", "n", "int"),
)


def build_fixtures(
    opened: OpenSavers, build: Callable[[Saver], F]
) -> tuple[dict[str, F], dict[str, str]]:
    """Build a fixture (seeded threads, …) per open saver; a saver that raises gets an error.

    Returns the fixtures and the errors, the latter including ``opened.errors``.
    """
    fixtures: dict[str, F] = {}
    errors = dict(opened.errors)
    for name, saver in opened.savers.items():
        try:
            fixtures[name] = build(saver)
        except Exception as exc:
            errors[name] = describe(exc)
    return fixtures, errors


def latency_row(saver: str, series: Series[int], **cells: Cell) -> Row:
    """p50/p95/n of one saver's samples, or its error row."""
    if series.error is not None:
        return error_row(saver, series.error, **cells)
    if not series.values:
        return {"saver": saver, **cells, NOTE: "no samples"}
    summary = summarize(series.values)
    return {"saver": saver, **cells, "p50": summary.p50, "p95": summary.p95, "n": summary.n}


def latency_rows(series: Mapping[str, Series[int]], **cells: Cell) -> list[Row]:
    """:func:`latency_row` for every saver in ``series``."""
    return [latency_row(name, entry, **cells) for name, entry in series.items()]
