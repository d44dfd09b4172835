"""Helpers that several sections share: per-saver fixtures and latency columns and rows."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TypeVar

from benchmarks.report import NOTE, RATIO_COLUMNS, Cell, Column, Row, error_row
from benchmarks.savers import OpenSavers, Saver
from benchmarks.timing import Series, Summary, reporting_in, summarize

F = TypeVar("F")
P = TypeVar("P")
T = TypeVar("T")

SAMPLES = Column("n", "n", "int")
"""How many measured samples a row summarizes."""


def quantile_columns(key: str = "", *, before: str = "", after: str = "") -> tuple[Column, ...]:
    """The p50 and p95 columns of a latency in µs: keys ``<key>p50`` and ``<key>p95``,
    headers ``<before>p50 µs<after>`` and ``<before>p95 µs<after>``."""
    return tuple(Column(f"{key}{q}", f"{before}{q} µs{after}", "us") for q in ("p50", "p95"))


def quantile_cells(summary: Summary, key: str = "") -> Row:
    """The cells of :func:`quantile_columns` with the same ``key``."""
    return {f"{key}p50": summary.p50, f"{key}p95": summary.p95}


LATENCY_COLUMNS = (*quantile_columns(), *RATIO_COLUMNS, SAMPLES)


def build_fixtures(
    opened: OpenSavers, build: Callable[[Saver], F]
) -> tuple[dict[str, F], dict[str, str]]:
    """Build a fixture (seeded threads, …) per open saver; a saver that raises gets an error.

    Returns the fixtures and the errors, the latter including ``opened.errors``.
    """
    fixtures: dict[str, F] = {}
    errors = dict(opened.errors)
    for name, saver in opened.savers.items():
        with reporting_in(errors, name):
            fixtures[name] = build(saver)
    return fixtures, errors


def latency_row(saver: str, series: Series[int], **cells: Cell) -> Row:
    """p50/p95/n of one saver's samples, or its error row."""
    if series.error is not None:
        return error_row(saver, series.error, **cells)
    if not series.values:
        return {"saver": saver, **cells, NOTE: "no samples"}
    summary = summarize(series.values)
    return {"saver": saver, **cells, **quantile_cells(summary), "n": summary.n}


def latency_rows(series: Mapping[str, Series[int]], **cells: Cell) -> list[Row]:
    """:func:`latency_row` for every saver in ``series``."""
    return [latency_row(name, entry, **cells) for name, entry in series.items()]


def per_point(
    savers: Mapping[str, Saver],
    fixtures: Mapping[str, Mapping[P, F]],
    probe: Callable[[Saver, F], Callable[[int], T]],
) -> dict[tuple[str, P], Callable[[int], T]]:
    """One probe per saver and point of a fixture grid (thread length, state size, …),
    keyed ``(saver, point)``, for one interleaved ``round_robin`` over all of them."""
    return {
        (name, point): probe(savers[name], fixture)
        for name, by_point in fixtures.items()
        for point, fixture in by_point.items()
    }
