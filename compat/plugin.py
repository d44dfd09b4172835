"""pytest plugin of the compat run (``-p compat.plugin``).

- Refuses to run unless every item that uses a checkpointer or store fixture carries our
  param, so an upstream refactor can never silently test upstream's savers or stores
  instead of ours.
- Deselects the items that use none of them.
- Counts the outcomes and writes a JSON summary to ``$LGC_SUMMARY``.
- Parity check (``$LGC_DUMP``): writes the selected items to that file. With
  ``$LGC_UPSTREAM=1`` (the pristine upstream suite) it selects the items whose checkpointer
  param is upstream's ``memory`` one and store param its ``in_memory`` one, and checks
  nothing.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path

import pytest

from compat import (
    DUMP_ENV,
    FIXTURES,
    MODE_ENV,
    PARAM_ID,
    SUMMARY_ENV,
    UPSTREAM_ENV,
    UPSTREAM_PARAM_ID,
    UPSTREAM_STORE_PARAM_ID,
)


@dataclass
class _Tally:
    """What the session selected and how its tests ended."""

    started: float = field(default_factory=time.monotonic)
    deselected: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    failed: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


_tally = _Tally()


def _checkpointer_params(item: pytest.Item) -> dict[str, object]:
    """The params of the replaced fixtures the item uses (None: not parametrised)."""
    callspec = getattr(item, "callspec", None)
    params = callspec.params if callspec is not None else {}
    names = getattr(item, "fixturenames", ())
    return {name: params.get(name) for name in FIXTURES if name in names}


def _dump(items: list[pytest.Item], path: str) -> None:
    """Write each item as [test function, its other params] (the parity check's key)."""
    rows = []
    for item in items:
        callspec = getattr(item, "callspec", None)
        params = callspec.params if callspec is not None else {}
        others = sorted((k, str(v)) for k, v in params.items() if k not in FIXTURES)
        rows.append([item.nodeid.partition("[")[0], others])
    Path(path).write_text(json.dumps(rows))


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Check the override, deselect the items without a checkpointer (see module doc)."""
    dump = os.environ.get(DUMP_ENV)
    if dump and os.environ.get(UPSTREAM_ENV) == "1":
        _dump([item for item in items if (params := _checkpointer_params(item))
               and all(p in (UPSTREAM_PARAM_ID, UPSTREAM_STORE_PARAM_ID)
                       for p in params.values())], dump)
        return
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    stray: list[str] = []
    for item in items:
        params = _checkpointer_params(item)
        stray += [f"{item.nodeid} ({name}={p!r})" for name, p in params.items() if p != PARAM_ID]
        (keep if params else drop).append(item)
    if stray:
        raise pytest.UsageError(
            f"compat: the checkpointer or store fixture override is NOT active for {len(stray)} "
            f"item(s), e.g. {stray[:3]}; refusing to run")
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
    _tally.deselected = len(drop)
    if dump:
        _dump(items, dump)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Count a test's outcome once: its call, or its setup when that failed or skipped."""
    outcomes = _tally.outcomes
    xfail = hasattr(report, "wasxfail")
    if report.when == "call":
        if xfail:
            outcomes["xfailed" if report.skipped else "xpassed"] += 1
        elif report.failed:
            outcomes["failed"] += 1
            _tally.failed.append(report.nodeid)
        else:
            outcomes["passed" if report.passed else "skipped"] += 1
    elif report.failed:  # setup or teardown
        outcomes["errors"] += 1
        _tally.errors.append(f"{report.nodeid} ({report.when})")
    elif report.when == "setup" and report.skipped:
        outcomes["xfailed" if xfail else "skipped"] += 1


def pytest_report_header(config: pytest.Config) -> str:
    """Say which saver and write mode the run tests."""
    return (f"compat: DurableSaver, write mode {os.environ.get(MODE_ENV, 'through')}, "
            f"param id {PARAM_ID!r}, langgraph {version('langgraph')}")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Write the JSON summary (when asked for and not a collection-only run)."""
    path = os.environ.get(SUMMARY_ENV)
    if not path or session.config.option.collectonly:
        return
    outcomes = _tally.outcomes
    summary = {
        "mode": os.environ.get(MODE_ENV, "through"),
        "langgraph": version("langgraph"),
        "collected": session.testscollected,
        "deselected_no_checkpointer": _tally.deselected,
        "selected": len(session.items),
        **{key: outcomes[key] for key in
           ("passed", "failed", "errors", "skipped", "xfailed", "xpassed")},
        "exitstatus": int(exitstatus),
        "session_s": round(time.monotonic() - _tally.started, 1),
        "failed_ids": _tally.failed,
        "error_ids": _tally.errors,
    }
    Path(path).write_text(json.dumps(summary, indent=2) + "\n")
