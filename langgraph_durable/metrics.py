"""Metrics and logging: ``saver.health()`` as OpenTelemetry instruments; a quiet logger.

`instrument` publishes a saver's health report as observable OpenTelemetry instruments,
read when your exporter (Prometheus, OTLP, ...) collects; it needs the ``[otel]`` extra
(``pip install opentelemetry-api opentelemetry-sdk``, the ``[otel]`` extra)::

    from langgraph_durable.metrics import instrument

    instrument(saver)                       # the global MeterProvider
    instrument(saver, meter_provider=mp)    # or yours

============================================ ============== ======== ============================
instrument                                   kind           unit     attributes
============================================ ============== ======== ============================
langgraph_durable.tier.reachable             gauge          1        tier = hot | cold
langgraph_durable.hot.breaker.open           gauge          1
langgraph_durable.hot.breaker.trips          counter        {trip}
langgraph_durable.flush.lag                  gauge          s        (absent when nothing waits)
langgraph_durable.flush.unflushed            up-down count  {entry}
langgraph_durable.persist.latency            gauge          ms       tier, quantile = p50 | p99
langgraph_durable.ledger.calls               up-down count  {call}   status
langgraph_durable.retention.rows_reclaimed   counter        {row}
langgraph_durable.retention.bytes_reclaimed  counter        By
langgraph_durable.retention.threads_deleted  counter        {thread}
============================================ ============== ======== ============================

Every observation also carries ``lgd.schema`` and ``lgd.key_prefix``, so several savers in
one process stay apart. One collection calls ``saver.health()`` once (it is cached for
``max_age`` seconds across the instruments).

The ``langgraph_durable`` logger has a `logging.NullHandler`: the package says nothing
until the application configures logging; `log_to_stderr` is a shortcut for scripts.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from langgraph_durable.errors import ConfigurationError

if TYPE_CHECKING:
    from opentelemetry.metrics import CallbackOptions, Meter, MeterProvider, Observation

__all__ = ["Instrumentation", "SupportsHealth", "instrument", "log_to_stderr", "logger"]

logger = logging.getLogger("langgraph_durable")
if not any(isinstance(h, logging.NullHandler) for h in logger.handlers):
    logger.addHandler(logging.NullHandler())

Report = Mapping[str, Any]
Attributes = dict[str, str]


class SupportsHealth(Protocol):
    """Anything with a ``health()`` report, such as a `DurableSaver`."""

    def health(self) -> Report:
        """The health report (see `DurableSaver.health`)."""
        ...


class _Snapshot:
    """``health()`` called at most once per ``max_age`` seconds, shared by the callbacks."""

    def __init__(self, source: SupportsHealth, max_age: float) -> None:
        self._source = source
        self._max_age = max_age
        self._lock = threading.Lock()
        self._at = float("-inf")
        self._report: Report | None = None

    def get(self) -> Report | None:
        with self._lock:
            if time.monotonic() - self._at >= self._max_age:
                self._at = time.monotonic()
                try:
                    self._report = self._source.health()
                except Exception as exc:  # a collection must not crash the exporter
                    logger.warning("saver.health() failed; no metrics this time: %s", exc)
                    self._report = None
            return self._report


def _section(report: Report, name: str) -> Mapping[str, Any]:
    value = report.get(name)
    return value if isinstance(value, Mapping) else {}


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) \
        else None


# Each reader turns a report into (value, extra attributes) pairs.
Reader = Callable[[Report], Iterable[tuple[float, Attributes]]]


def _reachable(report: Report) -> Iterable[tuple[float, Attributes]]:
    for tier in ("hot", "cold"):
        flag = _section(report, tier).get("reachable")
        if isinstance(flag, bool):
            yield float(flag), {"tier": tier}


def _breaker_open(report: Report) -> Iterable[tuple[float, Attributes]]:
    state = _section(report, "hot").get("breaker")
    if state in ("open", "closed"):
        yield float(state == "open"), {}


def _breaker_trips(report: Report) -> Iterable[tuple[float, Attributes]]:
    if (trips := _number(_section(report, "hot").get("trips"))) is not None:
        yield trips, {}


def _flush_lag(report: Report) -> Iterable[tuple[float, Attributes]]:
    if (lag := _number(_section(report, "flush").get("lag_seconds"))) is not None:
        yield lag, {}


def _field(section: str, key: str) -> Reader:
    """A reader of one number of one section of the report."""

    def read(report: Report) -> Iterable[tuple[float, Attributes]]:
        if (value := _number(_section(report, section).get(key))) is not None:
            yield value, {}

    return read


def _latency(report: Report) -> Iterable[tuple[float, Attributes]]:
    for name, value in _section(report, "latency_ms").items():
        tier, _, quantile = str(name).partition("_")
        if (ms := _number(value)) is not None and quantile:
            yield ms, {"tier": tier, "quantile": quantile}


def _ledger(report: Report) -> Iterable[tuple[float, Attributes]]:
    for status, count in _section(report, "ledger").items():
        if (value := _number(count)) is not None:
            yield value, {"status": str(status)}


# name, kind, unit, description, reader
_INSTRUMENTS: tuple[tuple[str, str, str, str, Reader], ...] = (
    ("tier.reachable", "gauge", "1", "1 when the tier answered the last probe", _reachable),
    ("hot.breaker.open", "gauge", "1", "1 while the hot tier is bypassed", _breaker_open),
    ("hot.breaker.trips", "counter", "{trip}", "times the hot tier's breaker opened",
     _breaker_trips),
    ("flush.lag", "gauge", "s", "age of the oldest write not yet in Postgres", _flush_lag),
    ("flush.unflushed", "updown", "{entry}", "write-behind journal entries not yet in Postgres",
     _field("flush", "unflushed")),
    ("flush.unflushed_bytes", "updown", "By", "payload bytes of those entries",
     _field("flush", "unflushed_bytes")),
    ("flush.dead_letters", "updown", "{entry}",
     "write-behind entries Postgres rejected, waiting for an operator",
     _field("flush", "dead_letters")),
    ("persist.latency", "gauge", "ms", "request latency percentiles per tier", _latency),
    ("ledger.calls", "updown", "{call}", "tool calls in the ledger by status", _ledger),
    ("retention.rows_reclaimed", "counter", "{row}",
     "rows this process's sweeps deleted (checkpoints, writes, values, tool calls)",
     _field("retention", "rows_reclaimed")),
    ("retention.bytes_reclaimed", "counter", "By", "stored bytes of those rows",
     _field("retention", "bytes_reclaimed")),
    ("retention.threads_deleted", "counter", "{thread}", "idle threads sweeps deleted",
     _field("retention", "threads_deleted")),
)


@dataclass(frozen=True, slots=True)
class Instrumentation:
    """What `instrument` registered.

    Attributes:
        meter: the meter the instruments belong to.
        instruments: the observable instruments, in the order of the module's table.
        attributes: the attributes every observation carries.
    """

    meter: Meter
    instruments: tuple[Any, ...]
    attributes: Attributes


def instrument(saver: SupportsHealth, *, meter_provider: MeterProvider | None = None,
               max_age: float = 1.0,
               attributes: Mapping[str, str] | None = None) -> Instrumentation:
    """Publish ``saver.health()`` as OpenTelemetry observable instruments.

    Args:
        saver: a `DurableSaver` (anything with ``health()``).
        meter_provider: where to register; default the global provider.
        max_age: seconds one ``health()`` report serves the instruments of a collection.
        attributes: attributes for every observation; default ``lgd.schema`` and
            ``lgd.key_prefix`` of the saver.

    Returns:
        The meter and the instruments registered.

    Raises:
        ConfigurationError: OpenTelemetry is not installed (the ``[otel]`` extra).
    """
    try:
        from opentelemetry import metrics as otel
        from opentelemetry.metrics import Observation
    except ImportError as exc:
        raise ConfigurationError(
            "langgraph_durable.metrics needs OpenTelemetry: "
            "pip install opentelemetry-api opentelemetry-sdk (or, in a checkout, "
            "pip install '.[otel]')") from exc
    package = "langgraph_durable"
    if attributes is None:
        config = getattr(saver, "config", None)
        attributes = {} if config is None else {
            "lgd.schema": str(config.schema), "lgd.key_prefix": str(config.key_prefix)}
    common = dict(attributes)
    provider = meter_provider or otel.get_meter_provider()
    meter = provider.get_meter(package)
    snapshot = _Snapshot(saver, max_age)

    def callback(reader: Reader) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def observe(options: CallbackOptions) -> Iterable[Observation]:
            report = snapshot.get()
            if report is None:
                return []
            return [Observation(value, {**common, **extra}) for value, extra in reader(report)]

        return observe

    create = {
        "gauge": meter.create_observable_gauge,
        "counter": meter.create_observable_counter,
        "updown": meter.create_observable_up_down_counter,
    }
    instruments = tuple(
        create[kind](f"{package}.{name}", callbacks=[callback(reader)], unit=unit,
                     description=description)
        for name, kind, unit, description, reader in _INSTRUMENTS
    )
    return Instrumentation(meter, instruments, common)


def log_to_stderr(level: int | str = logging.INFO) -> logging.Handler:
    """Print the package's log records at ``level`` and above to stderr; returns the
    handler (remove it with ``logger.removeHandler``)."""
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(level)
    return handler
