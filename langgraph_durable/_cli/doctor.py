"""``langgraph-durable doctor``: every check that tells a working set-up from a broken one."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import redis.exceptions

from langgraph_durable._cli.views import Check
from langgraph_durable._tiers.probes import (
    RedisFacts,
    forget_unanswered,
    hot_view,
    probe_postgres,
    probe_redis,
)
from langgraph_durable.config import SaverConfig, mask_url, seconds
from langgraph_durable.errors import ConfigurationError, DurableError, TierUnavailableError
from langgraph_durable.saver import DurableSaver

if TYPE_CHECKING:
    from langgraph_durable._cli.target import Target

EXIT_FAILED, EXIT_CONFIG, EXIT_UNAVAILABLE = 1, 2, 3
STALE_INTERVALS, STALE_MIN = 4, 2.0
_TIER_NAMES = {"hot": "redis", "cold": "postgres"}


def run_checks(target: Target) -> tuple[list[Check], int]:
    """Run every check; return the findings and the exit code (0 when none failed)."""
    try:
        config = target.config()
    except ConfigurationError as exc:
        return [Check("configuration", "fail", str(exc))], EXIT_CONFIG
    forget_unanswered()
    timeout = seconds(config.tier_timeout)
    checks = [Check("configuration", "ok", f"schema {config.schema}, key prefix "
                    f"{config.key_prefix}, write mode {config.write_mode}")]
    code = 0
    facts: RedisFacts | None = None
    try:
        facts = probe_redis(config.redis_url, timeout=timeout)
        checks.append(Check("redis", "ok", f"{facts.server} ({facts.mode}) at "
                            f"{mask_url(config.redis_url)}"))
    except TierUnavailableError as exc:
        checks.append(Check("redis", "fail", str(exc)))
        code = EXIT_UNAVAILABLE
    postgres_up = False
    try:
        version = probe_postgres(config.postgres_url, timeout=timeout)
        checks.append(Check("postgres", "ok", f"PostgreSQL {version} at "
                            f"{mask_url(config.postgres_url)}"))
        postgres_up = True
    except ConfigurationError as exc:  # refused for good: a wrong password, no such role
        checks.append(Check("postgres", "fail", str(exc)))
        code = code or EXIT_CONFIG
    except TierUnavailableError as exc:
        checks.append(Check("postgres", "fail", str(exc)))
        code = code or EXIT_UNAVAILABLE
    if facts is not None:
        behind: str | None = None
        if config.write_mode == "behind":
            behind = "write-behind"
        elif _journal_present(config):
            behind = f"write-behind (prefix {config.key_prefix!r} has a journal)"
        checks += _persistence_checks(facts, behind)
    if not postgres_up:
        return checks, code
    saver = target.saver()
    try:
        schema_check, ready = _schema_check(saver)
        checks.append(schema_check)
        if schema_check.status == "fail":
            code = code or EXIT_CONFIG
        if ready and facts is not None:
            checks += _health_checks(saver)
            if any(c.status == "fail" for c in checks):
                code = code or EXIT_FAILED
    finally:
        saver.close()
    return checks, code


def _journal_present(config: SaverConfig) -> bool:
    try:
        with hot_view(config) as view:
            return view.journal_present()
    except redis.exceptions.RedisError:
        return False


def _persistence_checks(facts: RedisFacts, behind: str | None) -> list[Check]:
    """AOF and eviction settings, judged by what the write mode needs from Redis;
    ``behind`` says why write-behind is in use (``None``: it is not)."""
    checks: list[Check] = []
    fsync = f", appendfsync {facts.appendfsync}" if facts.appendfsync else ""
    snapshots = f"; RDB save {facts.save!r}" if facts.save else "; no RDB snapshots"
    if facts.appendonly is None:
        checks.append(Check(
            "redis persistence", "warn" if behind else "info",
            "cannot read the persistence settings (CONFIG GET and INFO persistence refused)"
            + (f"; {behind} needs appendonly yes" if behind else "")))
    elif facts.appendonly:
        checks.append(Check("redis persistence", "ok", f"AOF on{fsync}{snapshots}"))
    elif behind:
        checks.append(Check(
            "redis persistence", "warn",
            f"{behind} runs without AOF (appendonly no): a Redis crash loses every "
            "acknowledged write not flushed yet; set appendonly yes, appendfsync everysec"))
    else:
        checks.append(Check("redis persistence", "ok",
                            f"AOF off{snapshots} (fine for write-through: Postgres holds every "
                            "acknowledged write)"))
    policy = facts.maxmemory_policy
    if policy and policy.startswith("allkeys") and behind:
        checks.append(Check("redis eviction", "warn",
                            f"maxmemory-policy {policy} may evict {behind} writes not flushed "
                            "yet; use noeviction or a volatile-* policy"))
    elif policy:
        checks.append(Check("redis eviction", "ok", f"maxmemory-policy {policy}"))
    return checks


def _schema_check(saver: DurableSaver) -> tuple[Check, bool]:
    schema = saver.config.schema
    try:
        version = saver.engine.schema_version()
    except DurableError as exc:
        return Check("schema", "fail", str(exc)), False
    latest = max((m.version for m in saver.migrations), default=0)
    if version == 0:
        return Check("schema", "warn", f"{schema!r} is not set up: run `langgraph-durable "
                     f"migrate --schema {schema}`"), False
    if version > latest:
        return Check("schema", "fail", f"{schema!r} is at version {version}, newer than this "
                     f"langgraph-durable knows ({latest}): upgrade the package"), False
    if version < latest:
        return Check("schema", "warn", f"{schema!r} is at version {version} of {latest}: run "
                     f"`langgraph-durable migrate --schema {schema}`"), True
    return Check("schema", "ok", f"{schema!r} at version {version} (up to date)"), True


def _health_checks(saver: DurableSaver) -> list[Check]:
    """Breaker, flush lag and latencies from ``saver.health()``."""
    try:
        report = saver.health()
    except DurableError as exc:
        return [Check("health", "warn", f"saver.health() failed: {exc}")]
    checks: list[Check] = []
    hot: Mapping[str, Any] = report.get("hot", {})
    if hot.get("breaker") == "open":
        checks.append(Check("hot tier breaker", "warn",
                            f"open (tripped {hot.get('trips', '?')} times): serving from "
                            "Postgres alone"))
    else:
        checks.append(Check("hot tier breaker", "ok", f"closed ({hot.get('trips', 0)} trips)"))
    flush: Mapping[str, Any] = report.get("flush", {})
    checks.append(_flush_check(flush, seconds(saver.config.flush_interval)))
    dead = flush.get("dead_letters", 0)
    if dead:
        checks.append(Check("dead letters", "fail",
                            f"{dead} write-behind journal entries were rejected by Postgres and "
                            "wait in the dead letters: `langgraph-durable dead-letters list` "
                            "(see docs/failure-model.md)"))
    checks.append(_latency_check(report.get("latency_ms", {})))
    return checks


def stale_after(flush_interval: float) -> float:
    """Age past which the oldest unflushed write means no flusher is keeping up: a few
    flush intervals, and never less than `STALE_MIN` seconds."""
    return max(STALE_MIN, STALE_INTERVALS * flush_interval)


def _flush_check(flush: Mapping[str, Any], flush_interval: float) -> Check:
    """Write-behind backlog: a warning once its oldest entry waited past `stale_after`."""
    lag, unflushed = flush.get("lag_seconds"), flush.get("unflushed", 0)
    if not unflushed:
        return Check("flush lag", "ok", "nothing waiting to be flushed")
    limit = stale_after(flush_interval)
    detail = (f"oldest unflushed write {'unknown' if lag is None else f'{lag:.2f}s'} old; "
              f"{unflushed} entries waiting")
    if lag is not None and lag <= limit:
        return Check("flush lag", "ok", detail)
    return Check("flush lag", "warn", f"{detail}, more than {limit:g}s (flush interval "
                 f"{flush_interval:g}s): no flusher is keeping up; run one "
                 "(`langgraph-durable flush --follow`, or a saver with background_flush)")


def _latency_check(latency: Mapping[str, Any]) -> Check:
    """Round trips of doctor's own few requests: the slowest one per tier, because a
    percentile of a handful of samples says no more than that."""
    measured = {key.rpartition("_")[0]: value for key, value in latency.items()
                if key.endswith("_p99") and isinstance(value, int | float)}
    if not measured:
        return Check("latency", "info", "no requests measured")
    return Check("latency", "info", ", ".join(
        f"{_TIER_NAMES.get(tier, tier)} {value:.1f}ms" for tier, value in measured.items())
        + " (slowest round trip of this check's requests)")
