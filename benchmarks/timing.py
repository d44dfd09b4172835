"""Interleaved measurement: every round visits each contender once, in rotating order.

Measuring saver A a thousand times and then saver B a thousand times lets a burst of machine
noise land on one of them only. Here round ``r`` runs one probe of every contender, starting
at contender ``r mod n``, so noise and drift are shared alike and no saver is always first.
"""

from __future__ import annotations

import time
from collections.abc import (
    Awaitable,
    Callable,
    Hashable,
    Iterator,
    Mapping,
    MutableMapping,
    Sequence,
)
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from functools import partial
from operator import setitem
from statistics import fmean
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")
R = TypeVar("R")


def describe(exc: BaseException, limit: int = 240) -> str:
    """One line naming an exception, for a report cell."""
    text = f"{type(exc).__name__}: {exc}".splitlines()[0] if str(exc) else type(exc).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"


@contextmanager
def reporting(report: Callable[[str], object]) -> Iterator[None]:
    """Run the body; if it raises an ``Exception``, hand its :func:`describe` line to ``report``.

    The harness reports a failure (as a saver's error, or in the log) instead of raising it.
    """
    try:
        yield
    except Exception as exc:
        report(describe(exc))


def reporting_in(errors: MutableMapping[K, str], key: K) -> AbstractContextManager[None]:
    """:func:`reporting` that keeps the line as ``errors[key]``."""
    return reporting(partial(setitem, errors, key))


@dataclass(slots=True)
class Series(Generic[T]):
    """The samples of one contender; a contender that raised keeps its error and stops."""

    values: list[T] = field(default_factory=list)
    error: str | None = None

    def fail(self, error: str) -> None:
        """Record why the contender stopped."""
        self.error = error


def schedule(names: Sequence[K], rounds: int) -> Iterator[tuple[int, K]]:
    """Yield ``(round, name)`` pairs, rotating which name goes first each round."""
    for round_ in range(rounds):
        start = round_ % len(names) if names else 0
        for name in (*names[start:], *names[:start]):
            yield round_, name


def _turns(
    series: Mapping[K, Series[T]], *, rounds: int, warmup: int
) -> Iterator[tuple[int, K, list[T]]]:
    """The turns of ``warmup + rounds`` interleaved rounds, skipping contenders that failed.

    Each turn comes with the list its sample goes to: the contender's values, or a throwaway
    list during the warm-up.
    """
    for round_, name in schedule(list(series), warmup + rounds):
        entry = series[name]
        if entry.error is None:
            yield round_, name, entry.values if round_ >= warmup else []


def round_robin(
    probes: Mapping[K, Callable[[int], T]], *, rounds: int, warmup: int
) -> dict[K, Series[T]]:
    """Run ``warmup + rounds`` interleaved rounds; keep the samples after the warm-up.

    A probe receives the round index (warm-up rounds included) and returns its sample.
    A probe that raises is reported with its error and not called again.
    """
    series: dict[K, Series[T]] = {name: Series() for name in probes}
    for round_, name, samples in _turns(series, rounds=rounds, warmup=warmup):
        with reporting(series[name].fail):
            samples.append(probes[name](round_))
    return series


async def around_robin(
    probes: Mapping[K, Callable[[int], Awaitable[T]]], *, rounds: int, warmup: int
) -> dict[K, Series[T]]:
    """The async twin of :func:`round_robin`: one probe awaited at a time."""
    series: dict[K, Series[T]] = {name: Series() for name in probes}
    for round_, name, samples in _turns(series, rounds=rounds, warmup=warmup):
        with reporting(series[name].fail):
            samples.append(await probes[name](round_))
    return series


def timed(fn: Callable[[], R]) -> tuple[int, R]:
    """Call ``fn``; return its wall time in nanoseconds and its result."""
    start = time.perf_counter_ns()
    result = fn()
    return time.perf_counter_ns() - start, result


def timed_ns(fn: Callable[[], object]) -> int:
    """Call ``fn``; return its wall time in nanoseconds."""
    return timed(fn)[0]


@dataclass(frozen=True, slots=True)
class Summary:
    """Order statistics of a latency sample, in microseconds."""

    n: int
    p50: float
    p95: float
    mean: float
    min: float
    max: float


def percentile(ordered: Sequence[float], q: float) -> float:
    """The ``q``-quantile (0..1) of sorted data, interpolating linearly between ranks."""
    if not ordered:
        raise ValueError("percentile of an empty sample")
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def summarize(samples_ns: Sequence[int]) -> Summary:
    """Summarize nanosecond samples in microseconds."""
    ordered = sorted(value / 1000 for value in samples_ns)
    return Summary(
        n=len(ordered),
        p50=percentile(ordered, 0.50),
        p95=percentile(ordered, 0.95),
        mean=fmean(ordered),
        min=ordered[0],
        max=ordered[-1],
    )
