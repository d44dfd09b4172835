"""`langgraph_durable.metrics`: the health report as OpenTelemetry instruments; a quiet logger.

Metrics are read with the OpenTelemetry SDK's in-memory reader, as an exporter would
collect them: once from a real saver on the test servers, and once from a fixed report
(to pin the mapping of every documented key, including ones a healthy saver leaves empty).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from langgraph_durable import DurableSaver
from langgraph_durable.metrics import instrument, logger
from tests.support.graphs import chat_graph


def collect(source: Any, **options: Any) -> dict[str, list[tuple[dict[str, Any], float]]]:
    """Register `instrument` on a fresh provider, collect once: name -> [(attributes, value)]."""
    reader = InMemoryMetricReader()
    instrument(source, meter_provider=MeterProvider(metric_readers=[reader]),
               **options)
    found: dict[str, list[tuple[dict[str, Any], float]]] = {}
    data = reader.get_metrics_data()
    for resource in data.resource_metrics if data is not None else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                found[metric.name] = [(dict(p.attributes or {}), p.value)
                                      for p in metric.data.data_points]
    return found


class FixedReport:
    """A health source that returns one report and counts the calls."""

    def __init__(self, report: Mapping[str, Any]) -> None:
        self.report = report
        self.calls = 0

    def health(self) -> Mapping[str, Any]:
        """The fixed report."""
        self.calls += 1
        return self.report


def test_every_documented_key_becomes_an_observation() -> None:
    """Each key of the documented report maps to its instrument and attributes; one
    collection calls health() once for all instruments."""
    source = FixedReport({
        "hot": {"reachable": True, "breaker": "open", "trips": 3},
        "cold": {"reachable": False},
        "flush": {"lag_seconds": 1.5, "unflushed": 7, "unflushed_bytes": 900,
                  "dead_letters": 2},
        "latency_ms": {"hot_p50": 0.4, "hot_p99": 2.0, "cold_p50": 1.2, "cold_p99": None},
        "ledger": {"succeeded": 4, "uncertain": 1},
        "retention": {"rows_reclaimed": 12, "bytes_reclaimed": 4096, "threads_deleted": 2},
    })
    found = collect(source, attributes={"service": "test"})
    assert source.calls == 1
    prefix = "langgraph_durable."
    assert sorted(found[prefix + "tier.reachable"], key=str) == [
        ({"service": "test", "tier": "cold"}, 0.0), ({"service": "test", "tier": "hot"}, 1.0)]
    assert found[prefix + "hot.breaker.open"] == [({"service": "test"}, 1.0)]
    assert found[prefix + "hot.breaker.trips"] == [({"service": "test"}, 3.0)]
    assert found[prefix + "flush.lag"] == [({"service": "test"}, 1.5)]
    assert found[prefix + "flush.unflushed"] == [({"service": "test"}, 7.0)]
    assert found[prefix + "flush.unflushed_bytes"] == [({"service": "test"}, 900.0)]
    assert found[prefix + "flush.dead_letters"] == [({"service": "test"}, 2.0)]
    latency = {(a["tier"], a["quantile"]): v for a, v in found[prefix + "persist.latency"]}
    assert latency == {("hot", "p50"): 0.4, ("hot", "p99"): 2.0, ("cold", "p50"): 1.2}
    ledger = {a["status"]: v for a, v in found[prefix + "ledger.calls"]}
    assert ledger == {"succeeded": 4.0, "uncertain": 1.0}
    assert found[prefix + "retention.rows_reclaimed"] == [({"service": "test"}, 12.0)]
    assert found[prefix + "retention.bytes_reclaimed"] == [({"service": "test"}, 4096.0)]
    assert found[prefix + "retention.threads_deleted"] == [({"service": "test"}, 2.0)]


def test_a_failing_health_report_yields_no_observations(caplog: pytest.LogCaptureFixture) -> None:
    """If health() raises, the collection is empty and a warning is logged, not raised."""
    class Broken:
        def health(self) -> Mapping[str, Any]:
            raise RuntimeError("boom")

    with caplog.at_level(logging.WARNING, logger="langgraph_durable"):
        found = collect(Broken())
    assert all(points == [] for points in found.values())  # (the SDK may report nothing)
    assert "saver.health() failed" in caplog.text


def test_a_real_saver_reports_reachable_tiers_and_latency(saver: DurableSaver) -> None:
    """A working saver on the test servers: both tiers reachable, breaker closed, latency
    percentiles present, and every observation names the saver's schema and prefix."""
    chat_graph(saver).invoke({"messages": [("user", "hi")]},
                             {"configurable": {"thread_id": "metrics-1"}})
    found = collect(saver)
    reachable = {a["tier"]: v for a, v in found["langgraph_durable.tier.reachable"]}
    assert reachable == {"hot": 1.0, "cold": 1.0}
    assert [v for _, v in found["langgraph_durable.hot.breaker.open"]] == [0.0]
    assert found["langgraph_durable.persist.latency"]
    for points in found.values():
        for attributes, _ in points:
            assert attributes["lgd.schema"] == saver.config.schema
            assert attributes["lgd.key_prefix"] == saver.config.key_prefix


def test_the_package_logger_is_quiet_by_default() -> None:
    """The `langgraph_durable` logger has a NullHandler, so nothing reaches stderr unless
    the application configures logging."""
    assert any(isinstance(h, logging.NullHandler) for h in logger.handlers)
