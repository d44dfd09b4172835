"""Benchmark LangGraph checkpointers side by side, in one process, interleaved.

All savers run in this one process, interleaved per measurement (see
:mod:`benchmarks.timing`). The report goes to ``benchmarks/results/latest.{json,md}`` and
the Markdown is printed too. A saver that cannot be imported, opened or measured appears
as an error row; it never disappears from the table.
"""

from __future__ import annotations

import argparse
import dataclasses
import faulthandler
import logging
import secrets
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from benchmarks import infra
from benchmarks.context import Context
from benchmarks.goals import goals_table
from benchmarks.machine import describe_machine, now
from benchmarks.report import Report, Table, error_row
from benchmarks.savers import SPECS, SPECS_BY_NAME
from benchmarks.sections import (
    history,
    ledger,
    load,
    macro,
    micro,
    restart,
    scaling,
    storage,
    store,
)
from benchmarks.settings import DEFAULT_DATABASE, FULL, QUICK, Profile, Settings, scratch_database
from benchmarks.timing import describe

SECTIONS: dict[str, Callable[[Context], list[Table]]] = {
    "micro": micro.run,
    "history": history.run,
    "macro": macro.run,
    "restart": restart.run,
    "storage": storage.run,
    "ledger": ledger.run,
    "store": store.run,
    "scaling": scaling.run,
    "load": load.run,
}
RESULTS_DIR = Path(__file__).resolve().parent / "results"

log = logging.getLogger("benchmarks")


class _Problems(logging.Handler):
    """Keeps every warning and error logged during the run, for the report's last section."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(f"{record.name}: {record.getMessage()}")


def _choices(known: Sequence[str]) -> Callable[[str], tuple[str, ...]]:
    """An argparse type: a comma-separated subset of ``known``, returned in ``known`` order."""

    def parse(text: str) -> tuple[str, ...]:
        chosen = {item.strip() for item in text.split(",") if item.strip()}
        unknown = chosen - set(known)
        if unknown or not chosen:
            raise argparse.ArgumentTypeError(
                f"unknown {', '.join(sorted(unknown)) or 'empty list'}; choose from "
                f"{', '.join(known)}"
            )
        return tuple(name for name in known if name in chosen)

    return parse


def _database(name: str) -> str:
    """An argparse type: a name :func:`scratch_database` accepts."""
    try:
        return scratch_database(name)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line; ``--help`` lists the savers and sections."""
    savers, sections = [spec.name for spec in SPECS], list(SECTIONS)
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.run",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    parser.add_argument("--quick", action="store_true", help="small counts, for a smoke test")
    parser.add_argument(
        "--only",
        type=_choices(savers),
        default=tuple(savers),
        metavar="SAVER[,SAVER]",
        help=f"savers to run (default: all): {', '.join(savers)}; the ratio columns need "
        "memory and postgres",
    )
    parser.add_argument(
        "--section",
        type=_choices(sections),
        default=tuple(sections),
        metavar="NAME[,NAME]",
        help=f"sections to run (default: all): {', '.join(sections)}",
    )
    parser.add_argument("--output-dir", type=Path, default=RESULTS_DIR, help="report directory")
    parser.add_argument(
        "--database",
        type=_database,
        default=DEFAULT_DATABASE,
        help="scratch Postgres database, dropped and recreated; its name must start with "
        "lgd_bench (default: %(default)s)",
    )
    parser.add_argument(
        "--keep-data",
        action="store_true",
        help="leave the scratch database and this run's Redis keys in place afterwards",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="dump every thread's stack and exit after this many seconds "
        "(default: 3600, or 300 with --quick)",
    )
    parser.add_argument(
        "--strict", action="store_true", help="exit 1 if any saver or section reported an error"
    )
    return parser.parse_args(argv)


def _run_section(name: str, run: Callable[[], list[Table]]) -> list[Table]:
    """Run one section; a crash becomes a one-row table instead of ending the run."""
    started = time.monotonic()
    log.info("section %s: start", name)
    try:
        tables = run()
    except Exception as exc:
        log.exception("section %s failed", name)
        tables = [Table(name, f"{name}: section failed", (), [error_row(None, describe(exc))])]
    log.info("section %s: %.1f s", name, time.monotonic() - started)
    return tables


def _meta(args: argparse.Namespace, settings: Settings, profile: Profile) -> dict[str, Any]:
    """The report's header: what ran, where, with which versions and counts."""
    return {
        "date": now(),
        "run_id": settings.run_id,
        "profile": profile.name,
        "sections": list(args.section),
        "savers": {name: SPECS_BY_NAME[name].label for name in args.only},
        "machine": describe_machine(settings),
        "counts": dataclasses.asdict(profile),
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Run the selected sections on the selected savers; write and print the report."""
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    problems = _Problems()
    logging.getLogger().addHandler(problems)
    profile = QUICK if args.quick else FULL
    faulthandler.dump_traceback_later(args.timeout or (300 if args.quick else 3600), exit=True)
    specs = tuple(SPECS_BY_NAME[name] for name in args.only)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="lgdbench-") as workdir:
        settings = Settings.from_env(
            run_id=secrets.token_hex(4),
            workdir=Path(workdir),
            database=args.database,
            keep_data=args.keep_data,
        )
        report = Report(meta=_meta(args, settings, profile))
        ctx = Context(settings=settings, profile=profile, specs=specs)
        try:
            infra.recreate_database(settings.postgres_url, settings.database)
        except Exception as exc:
            log.error("cannot recreate database %s: %s", settings.database, describe(exc))
        try:
            for name in args.section:
                report.tables.extend(_run_section(name, partial(SECTIONS[name], ctx)))
        finally:
            if not args.keep_data:
                _clean_up(settings)
    goals = partial(goals_table, report.tables, args.section, args.only)
    report.tables[:0] = _run_section("goals", lambda: [goals()])
    report.meta["duration_s"] = round(time.monotonic() - started, 1)
    report.problems = problems.messages
    json_path, md_path = report.write(args.output_dir)
    print(report.markdown())
    log.info("wrote %s and %s in %.0f s", json_path, md_path, report.meta["duration_s"])
    figure = scaling.plot(report.tables, args.output_dir)
    if figure is not None:
        log.info("wrote %s", figure)
    return 1 if args.strict and report.has_errors() else 0


def _clean_up(settings: Settings) -> None:
    """Delete this run's Redis keys and the scratch database; log what fails."""
    try:
        deleted = infra.delete_prefix(settings.redis_url, f"{settings.key_prefix}.")
        log.info("deleted %d Redis keys under %s.", deleted, settings.key_prefix)
    except Exception as exc:
        log.error("cannot delete Redis keys under %s: %s", settings.key_prefix, describe(exc))
    try:
        infra.drop_database(settings.postgres_url, settings.database)
    except Exception as exc:
        log.error("cannot drop database %s: %s", settings.database, describe(exc))


if __name__ == "__main__":
    sys.exit(main())
