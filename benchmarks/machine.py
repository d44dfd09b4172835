"""The facts a reader needs to compare two reports: when, on what, with which versions."""

from __future__ import annotations

import os
import platform
import sqlite3
import subprocess
from collections.abc import Callable
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

from benchmarks import infra
from benchmarks.settings import Settings
from benchmarks.timing import describe

LIBRARIES = (
    "langgraph",
    "langgraph-checkpoint",
    "langgraph-checkpoint-postgres",
    "langgraph-checkpoint-sqlite",
    "langchain-core",
    "langgraph-durable",
    "redis",
    "hiredis",
    "psycopg",
    "psycopg-pool",
    "aiosqlite",
    "ormsgpack",
)


def now() -> str:
    """The current UTC time, to the second, ISO 8601."""
    return datetime.now(UTC).replace(microsecond=0).isoformat()


def _cpu_model() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "?"


def _library_versions() -> str:
    versions = []
    for name in LIBRARIES:
        try:
            versions.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            versions.append(f"{name} (not installed)")
    return ", ".join(versions)


def _git_revision() -> str:
    """``git rev-parse --short HEAD`` (read-only), or why there is none."""
    try:
        result = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).parent,
        )
    except (OSError, subprocess.CalledProcessError):
        return "unknown (no commit)"
    return result.stdout.strip()


def _probe(fn: Callable[[], str]) -> str:
    try:
        return fn()
    except Exception as exc:
        return f"unavailable ({describe(exc)})"


def describe_machine(settings: Settings) -> dict[str, str]:
    """Machine, servers and library versions, as report-ready strings."""
    return {
        "machine": f"nproc {len(os.sched_getaffinity(0))}, {_cpu_model()}, {platform.platform()}",
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "redis server": _probe(lambda: infra.redis_version(settings.redis_url)),
        "postgres server": _probe(lambda: infra.postgres_version(settings.postgres_url)),
        "sqlite": sqlite3.sqlite_version,
        "libraries": _library_versions(),
        "git revision": _git_revision(),
    }
