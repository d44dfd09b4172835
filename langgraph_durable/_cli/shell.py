"""What every command of the command line shares: its output, options, exit codes, and
how it opens a saver or a store and turns the package's errors into an exit code."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from langgraph_durable._cli import documents
from langgraph_durable._cli.target import Target, parse_duration
from langgraph_durable._embedded.layout import DATA_DIR_ENV, default_data_dir
from langgraph_durable._tiers import probes
from langgraph_durable._tiers.probes import HotView, probe_postgres, probe_redis
from langgraph_durable.config import Retention, SaverConfig, mask_url, seconds
from langgraph_durable.errors import (
    ConfigurationError,
    DurableError,
    SchemaVersionError,
    TierUnavailableError,
)
from langgraph_durable.saver import DurableSaver
from langgraph_durable.store import DurableStore


@dataclass(slots=True)
class Output:
    """Standard output and standard error of the command that runs (made per run by the
    app's callback: it picks up COLUMNS and redirections)."""

    console: Console
    errors: Console


out = Output(console=Console(highlight=False, emoji=False),
             errors=Console(stderr=True, highlight=False, emoji=False))

EXIT_FAILED, EXIT_CONFIG, EXIT_UNAVAILABLE, EXIT_WARNINGS, EXIT_INTERRUPTED = 1, 2, 3, 4, 130

RedisUrl = Annotated[str | None, typer.Option(
    "--redis-url", envvar="LGD_REDIS_URL", show_envvar=True, metavar="URL",
    help="Hot tier URL (default: redis://127.0.0.1:6379/0).")]
PostgresUrl = Annotated[str | None, typer.Option(
    "--postgres-url", envvar="LGD_POSTGRES_URL", show_envvar=True, metavar="URL",
    help="Cold tier URL (default: postgresql://postgres@127.0.0.1:5432/postgres).")]
Schema = Annotated[str, typer.Option(
    "--schema", envvar="LGD_SCHEMA", show_envvar=True, metavar="NAME",
    help="Postgres schema of the tables.")]
Prefix = Annotated[str, typer.Option(
    "--prefix", envvar="LGD_KEY_PREFIX", show_envvar=True, metavar="PREFIX",
    help="Redis key prefix.")]
Mode = Annotated[str, typer.Option(
    "--write-mode", envvar="LGD_WRITE_MODE", show_envvar=True, metavar="through|behind",
    help="The savers' write mode: through or behind.")]
Namespace = Annotated[str | None, typer.Option(
    "--ns", metavar="NS", help="Checkpoint namespace (subgraphs); default: the root graph's.")]
MaxIdle = Annotated[str | None, typer.Option(
    "--max-idle", envvar="LGD_MAX_IDLE", show_envvar=True, metavar="DURATION",
    help="Delete threads not written for this long (e.g. 30d, 12h, 3600).")]
MaxAge = Annotated[str | None, typer.Option(
    "--max-age", envvar="LGD_MAX_AGE", show_envvar=True, metavar="DURATION",
    help="Delete checkpoints older than this, keeping each namespace's latest.")]
KeepLast = Annotated[int | None, typer.Option(
    "--keep-last", envvar="LGD_KEEP_LAST", show_envvar=True, metavar="N",
    help="Keep the newest N checkpoints of each namespace.")]
JsonOutput = Annotated[bool, typer.Option(
    "--json", help="Print one JSON document instead of the table (docs/cli.md lists its "
                   "fields).")]
DataDir = Annotated[Path | None, typer.Option(
    "--data-dir", envvar=DATA_DIR_ENV, show_envvar=True, metavar="DIR",
    show_default=str(default_data_dir()),
    help="Data directory of the embedded servers.")]


# ----------------------------------------------------------------------------- plumbing


def fail(message: str, code: int) -> NoReturn:
    out.errors.print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True)
    raise typer.Exit(code)


@contextmanager
def failures() -> Iterator[None]:
    """Turn the package's errors into one line on stderr and an exit code."""
    probes.forget_unanswered()  # a command asks every tier afresh
    try:
        yield
    except (ConfigurationError, SchemaVersionError) as exc:
        fail(str(exc), EXIT_CONFIG)
    except TierUnavailableError as exc:
        fail(str(exc), EXIT_UNAVAILABLE)
    except DurableError as exc:
        fail(str(exc), EXIT_FAILED)
    except KeyboardInterrupt:
        fail("interrupted", EXIT_INTERRUPTED)


def _latest_version(saver: DurableSaver) -> int:
    return max((m.version for m in saver.migrations), default=0)


@contextmanager
def open_saver(target: Target, *, need_schema: bool = True) -> Iterator[DurableSaver]:
    """A saver on the target, after a quick connection check (and a schema check)."""
    saver = target.saver()
    try:
        probe_postgres(saver.config.postgres_url, timeout=seconds(saver.config.tier_timeout))
        if need_schema:
            _check_schema(saver.engine.schema_version(), _latest_version(saver),
                          saver.config)
        yield saver
    finally:
        saver.close()


def _check_schema(version: int, latest: int, config: SaverConfig, *,
                  store_table: int = 0) -> None:
    """Refuse a schema not set up, newer than ``latest``, or (for the store's commands)
    older than version ``store_table``, which creates the store's table; warn about one
    older than ``latest``."""
    how = f"run `langgraph-durable migrate --schema {config.schema}`"
    if version == 0:
        raise ConfigurationError(
            f"schema {config.schema!r} at {mask_url(config.postgres_url)} is not set up: {how}")
    if version > latest:
        raise SchemaVersionError(
            f"schema {config.schema!r} is at version {version}, newer than this "
            f"langgraph-durable knows ({latest}); upgrade the package")
    if version < store_table:
        raise ConfigurationError(
            f"schema {config.schema!r} at {mask_url(config.postgres_url)} is at version "
            f"{version}, before the store's table (version {store_table}): {how}")
    if version < latest:
        out.errors.print(f"[yellow]warning:[/] schema {config.schema!r} is at "
                         f"version {version} of {latest}: run `langgraph-durable "
                         "migrate`")


@contextmanager
def open_store(target: Target, *, hot: bool = False) -> Iterator[DurableStore]:
    """A store on the target, after a quick connection check and a schema check (its table
    is there). ``hot``: the command reads Redis too (gets); a Redis that does not answer is
    then said once, on stderr, and the store reads Postgres only."""
    config = target.config()
    if hot:
        try:
            probe_redis(config.redis_url, timeout=seconds(config.tier_timeout))
        except TierUnavailableError as exc:
            out.errors.print(f"[yellow]warning:[/] {escape(str(exc))}; reading Postgres only")
    store = target.store()
    try:
        probe_postgres(config.postgres_url, timeout=seconds(config.tier_timeout))
        latest = max(m.version for m in store.migrations)
        _check_schema(store.engine.schema_version(), latest, config,
                      store_table=store.table_version)
        yield store
    finally:
        store.close()


@contextmanager
def hot_view(saver: DurableSaver) -> Iterator[HotView | None]:
    """A read-only view of the prefix's Redis keys, or ``None`` (with a warning) if down."""
    try:
        probe_redis(saver.config.redis_url, timeout=seconds(saver.config.tier_timeout))
    except TierUnavailableError as exc:
        out.errors.print(f"[yellow]warning:[/] {escape(str(exc))}; Redis columns show '?'")
        yield None
        return
    with probes.hot_view(saver.config) as view:
        yield view


def make_target(redis_url: str | None, postgres_url: str | None, schema: str, prefix: str,
            write_mode: str = "through", retention: Retention | None = None) -> Target:
    return Target(redis_url, postgres_url, schema, prefix, write_mode, retention)


def retention_policy(max_idle: str | None, max_age: str | None, keep_last: int | None,
               **options: Any) -> Retention | None:
    """The policy the options describe (``None`` when they set none)."""
    if max_idle is None and max_age is None and keep_last is None:
        return None
    return Retention(
        max_idle=None if max_idle is None else parse_duration(max_idle, "--max-idle"),
        max_age=None if max_age is None else parse_duration(max_age, "--max-age"),
        keep_last=keep_last, **options)


def print_json(document: documents.Document) -> None:
    """Write ``document`` to standard output as one line of JSON (non-ASCII escaped, so
    that any terminal or pipe encoding takes it)."""
    typer.echo(json.dumps(document))


UNWRAPPED = 100_000
"""Standard output's width when it is a pipe or a file: no line is wrapped."""


def boxed_console() -> Console:
    """Standard output for what is drawn to the width (section rules, boxes: the demo):
    `out.console`, or, printing unwrapped (a pipe, a file, a CI log), one 80 columns
    wide, so a rule is not a 100,000-character line."""
    if out.console.width < UNWRAPPED:
        return out.console
    return Console(highlight=False, emoji=False, width=80)


def piped_width() -> int | None:
    """`UNWRAPPED` when standard output is not a terminal and ``COLUMNS`` does not set a
    width, so ``threads | grep ID`` finds whole ids; None (the terminal's width) else."""
    if sys.stdout.isatty() or os.environ.get("COLUMNS", "").strip():
        return None
    return UNWRAPPED
