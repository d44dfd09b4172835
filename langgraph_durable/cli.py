"""The ``langgraph-durable`` command line (also ``python -m langgraph_durable``).

Look at what a `DurableSaver` stored, check the servers, run the crash-and-resume demo::

    langgraph-durable doctor                      # servers, versions, persistence, schema
    langgraph-durable threads [--where K=V]       # every thread (or those whose metadata match)
    langgraph-durable history THREAD              # its checkpoints, newest first
    langgraph-durable show THREAD [CHECKPOINT]    # state values, pending writes, interrupts
    langgraph-durable diff THREAD A B             # what changed between two checkpoints
    langgraph-durable ledger THREAD               # tool calls: status and attempts
    langgraph-durable resolve KEY OUTCOME         # settle an uncertain tool call
    langgraph-durable resolve-all OUTCOME --dry-run  # every uncertain call (--tool, --older-than)
    langgraph-durable fork THREAD CHECKPOINT      # a new thread that resumes from a checkpoint
    langgraph-durable dead-letters list           # write-behind entries Postgres rejected
    langgraph-durable sweep --max-idle 30d        # apply a retention policy (--dry-run)
    langgraph-durable demo                        # kill an agent mid-run, resume it

``--json`` on the read commands prints one JSON document instead of a table
(docs/cli.md lists its fields).

Servers come from ``--redis-url`` / ``--postgres-url`` or ``LGD_REDIS_URL`` /
``LGD_POSTGRES_URL``; ``--schema`` and ``--prefix`` (``LGD_SCHEMA``, ``LGD_KEY_PREFIX``)
pick the saver's tables and keys.

Exit codes: 0 success; 1 the command failed (no such thread, a call not uncertain or
changed before resolve-all settled it, a fork target that exists, a demo check failed);
2 misconfiguration (bad URL or option, schema not set up); 3 a server is unreachable;
4 ``doctor``'s checks passed with warnings; 130 interrupted.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from rich.text import Text

from langgraph_durable import LedgerRecord
from langgraph_durable._cli import actions, documents, queries, views
from langgraph_durable._cli.target import Target, parse_duration
from langgraph_durable._embedded.layout import DATA_DIR_ENV, default_data_dir
from langgraph_durable._tiers.probes import HotView, hot_view, probe_postgres, probe_redis
from langgraph_durable.config import Retention, mask_url
from langgraph_durable.errors import (
    ConfigurationError,
    DurableError,
    SchemaVersionError,
    TierUnavailableError,
)
from langgraph_durable.flusher import run_flusher
from langgraph_durable.metrics import log_to_stderr
from langgraph_durable.saver import DurableSaver

app = typer.Typer(
    name="langgraph-durable",
    help="Inspect and operate langgraph-durable checkpoints (Redis hot tier over Postgres).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
    rich_markup_mode=None,  # plain help: whole sentences, no type tags such as <bool>
)
embedded_app = typer.Typer(help="Real PostgreSQL and Valkey servers from PyPI wheels.",
                           no_args_is_help=True, rich_markup_mode=None)
app.add_typer(embedded_app, name="embedded")
dead_letters_app = typer.Typer(
    help="Write-behind journal entries Postgres rejected.\n\nList, retry or drop them.",
    no_args_is_help=True, rich_markup_mode=None)
app.add_typer(dead_letters_app, name="dead-letters")

console = Console(highlight=False, emoji=False)
errors = Console(stderr=True, highlight=False, emoji=False)

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


def _fail(message: str, code: int) -> NoReturn:
    errors.print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True)
    raise typer.Exit(code)


@contextmanager
def _failures() -> Iterator[None]:
    """Turn the package's errors into one line on stderr and an exit code."""
    try:
        yield
    except (ConfigurationError, SchemaVersionError) as exc:
        _fail(str(exc), EXIT_CONFIG)
    except TierUnavailableError as exc:
        _fail(str(exc), EXIT_UNAVAILABLE)
    except DurableError as exc:
        _fail(str(exc), EXIT_FAILED)
    except KeyboardInterrupt:
        _fail("interrupted", EXIT_INTERRUPTED)


def _latest_version(saver: DurableSaver) -> int:
    return max((m.version for m in saver.migrations), default=0)


@contextmanager
def _open(target: Target, *, need_schema: bool = True) -> Iterator[DurableSaver]:
    """A saver on the target, after a quick connection check (and a schema check)."""
    saver = target.saver()
    try:
        probe_postgres(saver.config.postgres_url)
        if need_schema:
            version = saver.engine.schema_version()
            latest = _latest_version(saver)
            if version == 0:
                raise ConfigurationError(
                    f"schema {saver.config.schema!r} at {mask_url(saver.config.postgres_url)} is "
                    f"not set up: run `langgraph-durable migrate --schema {saver.config.schema}`")
            if version > latest:
                raise SchemaVersionError(
                    f"schema {saver.config.schema!r} is at version {version}, newer than this "
                    f"langgraph-durable knows ({latest}); upgrade the package")
            if version < latest:
                errors.print(f"[yellow]warning:[/] schema {saver.config.schema!r} is at version "
                             f"{version} of {latest}: run `langgraph-durable migrate`")
        yield saver
    finally:
        saver.close()


@contextmanager
def _hot_view(saver: DurableSaver) -> Iterator[HotView | None]:
    """A read-only view of the prefix's Redis keys, or ``None`` (with a warning) if down."""
    try:
        probe_redis(saver.config.redis_url)
    except TierUnavailableError as exc:
        errors.print(f"[yellow]warning:[/] {escape(str(exc))}; Redis columns show '?'")
        yield None
        return
    with hot_view(saver.config) as view:
        yield view


def _target(redis_url: str | None, postgres_url: str | None, schema: str, prefix: str,
            write_mode: str = "through", retention: Retention | None = None) -> Target:
    return Target(redis_url, postgres_url, schema, prefix, write_mode, retention)


def _retention(max_idle: str | None, max_age: str | None, keep_last: int | None,
               **options: Any) -> Retention | None:
    """The policy the options describe (``None`` when they set none)."""
    if max_idle is None and max_age is None and keep_last is None:
        return None
    return Retention(
        max_idle=None if max_idle is None else parse_duration(max_idle, "--max-idle"),
        max_age=None if max_age is None else parse_duration(max_age, "--max-age"),
        keep_last=keep_last, **options)


def _print_json(document: documents.Document) -> None:
    """Write ``document`` to standard output as one line of JSON (non-ASCII escaped, so
    that any terminal or pipe encoding takes it)."""
    typer.echo(json.dumps(document))


UNWRAPPED = 100_000
"""Standard output's width when it is a pipe or a file: no line is wrapped."""


def _piped_width() -> int | None:
    """`UNWRAPPED` when standard output is not a terminal and ``COLUMNS`` does not set a
    width, so ``threads | grep ID`` finds whole ids; None (the terminal's width) else."""
    if sys.stdout.isatty() or os.environ.get("COLUMNS", "").strip():
        return None
    return UNWRAPPED


# ----------------------------------------------------------------------------- commands


@app.callback()
def _root(
    verbose: Annotated[bool, typer.Option("--verbose", "-v",
                                          help="Log the package's messages to stderr.")] = False,
) -> None:
    """Inspect and operate langgraph-durable checkpoints (Redis hot tier over Postgres)."""
    global console, errors
    # Made per run: picks up COLUMNS and redirections.
    console = Console(highlight=False, emoji=False, width=_piped_width())
    errors = Console(stderr=True, highlight=False, emoji=False)
    if verbose:
        log_to_stderr(logging.INFO)


@app.command()
def threads(
    limit: Annotated[int, typer.Option(
        min=1, metavar="N", help="Show at most this many threads.")] = 50,
    where: Annotated[list[str] | None, typer.Option(
        "--where", metavar="KEY=VALUE",
        help="Only threads with a checkpoint whose metadata holds KEY=VALUE (VALUE read as "
             "JSON, else text); repeat to require several. Matches as list(filter=) does.",
    )] = None,
    as_json: JsonOutput = False,
    redis_url: RedisUrl = None, postgres_url: PostgresUrl = None,
    schema: Schema = "public", prefix: Prefix = "lgd", write_mode: Mode = "through",
) -> None:
    """List threads, newest first.

    Each with its checkpoints, size, last update, where it lives and unflushed checkpoints.
    """
    with _failures(), _open(_target(redis_url, postgres_url, schema, prefix, write_mode)) as saver:
        pattern = actions.metadata_pattern(where or [])
        with _hot_view(saver) as hot:
            total, rows = queries.thread_rows(saver, hot, limit=limit, where=pattern or None)
        unflushed = saver.health()["flush"]["unflushed"]
        if as_json:
            _print_json(documents.threads_document(rows, total=total, where=pattern,
                                                   schema=schema, prefix=prefix,
                                                   unflushed=unflushed))
            return
        matching = f" with metadata {json.dumps(pattern)}" if pattern else ""
        caption = (f"{len(rows)} of {total} threads{matching} · schema {schema} · "
                   f"prefix {prefix} · unflushed journal entries: {unflushed}")
        console.print(views.threads_table(f"threads in {mask_url(saver.config.postgres_url)}",
                                          rows, caption))


@app.command()
def history(
    thread: Annotated[str, typer.Argument(help="Thread id.")],
    ns: Namespace = None,
    limit: Annotated[int, typer.Option(
        min=1, metavar="N", help="Show at most this many checkpoints.")] = 50,
    as_json: JsonOutput = False,
    redis_url: RedisUrl = None, postgres_url: PostgresUrl = None,
    schema: Schema = "public", prefix: Prefix = "lgd", write_mode: Mode = "through",
) -> None:
    """List a thread's checkpoints, newest first.

    Every namespace's, unless --ns names one.
    """
    with _failures(), _open(_target(redis_url, postgres_url, schema, prefix, write_mode)) as saver:
        with _hot_view(saver) as hot:
            rows = queries.history_rows(saver, hot, thread, checkpoint_ns=ns, limit=limit)
        if as_json:
            _print_json(documents.history_document(thread, ns, rows))
            return
        console.print(views.history_table(f"history of thread {thread!r}", rows,
                                          width=console.width))


@app.command()
def show(
    thread: Annotated[str, typer.Argument(help="Thread id.")],
    checkpoint: Annotated[str | None, typer.Argument(
        help="Checkpoint id or a unique part of one; default: the latest.")] = None,
    ns: Namespace = None,
    full: Annotated[bool, typer.Option(
        "--full", help="Show every value whole instead of cut to the terminal's width.")] = False,
    as_json: JsonOutput = False,
    redis_url: RedisUrl = None, postgres_url: PostgresUrl = None,
    schema: Schema = "public", prefix: Prefix = "lgd", write_mode: Mode = "through",
) -> None:
    """Show a checkpoint's values, pending writes, interrupts."""
    with _failures(), _open(_target(redis_url, postgres_url, schema, prefix, write_mode)) as saver:
        tup = queries.checkpoint(saver, thread, checkpoint, checkpoint_ns=ns or "")
        if as_json:
            _print_json(documents.checkpoint_document(tup))
            return
        width = UNWRAPPED if full else max(60, console.width - 20)
        console.print(views.checkpoint_view(tup, width=width))


@app.command()
def diff(
    thread: Annotated[str, typer.Argument(help="Thread id.")],
    a: Annotated[str, typer.Argument(help="Older checkpoint (id or unique part).")],
    b: Annotated[str, typer.Argument(help="Newer checkpoint (id or unique part).")],
    ns: Namespace = None,
    as_json: JsonOutput = False,
    redis_url: RedisUrl = None, postgres_url: PostgresUrl = None,
    schema: Schema = "public", prefix: Prefix = "lgd", write_mode: Mode = "through",
) -> None:
    """Show how the values changed from checkpoint A to B."""
    with _failures(), _open(_target(redis_url, postgres_url, schema, prefix, write_mode)) as saver:
        first = queries.checkpoint(saver, thread, a, checkpoint_ns=ns or "")
        second = queries.checkpoint(saver, thread, b, checkpoint_ns=ns or "")
        changes = views.diff_changes(first, second)
        if as_json:
            _print_json(documents.diff_document(first, second, changes))
            return
        console.print(views.diff_view(first, second, changes))


@app.command()
def ledger(
    thread: Annotated[str, typer.Argument(help="Thread id.")],
    as_json: JsonOutput = False,
    redis_url: RedisUrl = None, postgres_url: PostgresUrl = None,
    schema: Schema = "public", prefix: Prefix = "lgd", write_mode: Mode = "through",
) -> None:
    """List a thread's durable tool calls.

    Each with its status, attempts and outcome.
    """
    with _failures(), _open(_target(redis_url, postgres_url, schema, prefix, write_mode)) as saver:
        records = saver.ledger.list(thread)
        if not records:
            raise queries.NotFound(f"the ledger has no tool calls for thread {thread!r} "
                                   f"in schema {schema!r}")
        if as_json:
            _print_json(documents.ledger_document(thread, records))
            return
        console.print(views.ledger_table(f"tool calls of thread {thread!r}", records))


class Verdict(StrEnum):
    """What an operator found out about an uncertain tool call."""

    succeeded = "succeeded"
    failed = "failed"
    retry = "retry"


_NEXT = {"succeeded": "its next execution returns the recorded result instead of running",
         "failed": "its next execution raises the recorded error",
         "retry": "its next execution runs the tool again under the same key"}


@app.command()
def resolve(
    key: Annotated[str, typer.Argument(
        metavar="KEY",
        help="The call's ledger key (`ledger THREAD` prints the keys of unsettled calls).")],
    outcome: Annotated[Verdict, typer.Argument(
        metavar="succeeded|failed|retry",
        help="succeeded: it happened; failed: it did not and must not be retried; "
             "retry: it did not happen, run it again.")],
    result: Annotated[str | None, typer.Option(
        "--result", metavar="JSON",
        help="With succeeded: what the tool returned, as JSON (default: a note).")] = None,
    error: Annotated[str | None, typer.Option(
        "--error", metavar="TEXT", help="With failed: the failure's message.")] = None,
    redis_url: RedisUrl = None, postgres_url: PostgresUrl = None,
    schema: Schema = "public", prefix: Prefix = "lgd",
) -> None:
    """Settle an uncertain tool call.

    A call whose process died mid-call is settled as succeeded, failed or to retry; exits 1
    if the call is not uncertain.
    """
    with _failures(), _open(_target(redis_url, postgres_url, schema, prefix)) as saver:
        before, after = actions.settle(saver, key, outcome.value, result=result, error=error)
        console.print(Text(f"{_settled_line(before, after)}; {_NEXT[outcome.value]}"))


def _settled_line(before: LedgerRecord, after: LedgerRecord) -> str:
    return (f"tool call {after.key} ({after.tool}, thread {after.thread_id!r}): "
            f"{before.status} → {after.status}")


@app.command(name="resolve-all")
def resolve_all(
    outcome: Annotated[Verdict, typer.Argument(
        metavar="succeeded|failed|retry",
        help="What happened, for every call picked (as resolve takes it).")],
    tool: Annotated[str | None, typer.Option(
        "--tool", metavar="NAME", help="Only the calls of this tool.")] = None,
    older_than: Annotated[str | None, typer.Option(
        "--older-than", metavar="DURATION",
        help="Only the calls first started at least this long ago (e.g. 90m, 12h, 2d).")] = None,
    thread: Annotated[str | None, typer.Option(
        "--thread", metavar="ID", help="Only the calls of this thread.")] = None,
    result: Annotated[str | None, typer.Option(
        "--result", metavar="JSON",
        help="With succeeded: what the tool returned, as JSON (default: a note).")] = None,
    error: Annotated[str | None, typer.Option(
        "--error", metavar="TEXT", help="With failed: the failure's message.")] = None,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Only list the calls it would settle; change nothing.")] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    as_json: JsonOutput = False,
    redis_url: RedisUrl = None, postgres_url: PostgresUrl = None,
    schema: Schema = "public", prefix: Prefix = "lgd",
) -> None:
    """Settle every uncertain tool call the filters pick.

    Across threads: the uncertain calls, and the started ones whose lease ran out, each
    settled as resolve settles one. Asks first unless --yes (--json needs --yes or
    --dry-run); exits 1 if a call changed before it was settled (it is left as it is).
    """
    with _failures(), _open(_target(redis_url, postgres_url, schema, prefix)) as saver:
        verdict = outcome.value
        actions.verdict_options(outcome.value, result=result, error=error)
        if as_json and not (yes or dry_run):
            raise ConfigurationError("resolve-all --json needs --yes (or --dry-run): it has no "
                                     "one to ask, and its output is the JSON document alone")
        age = None if older_than is None else parse_duration(older_than, "--older-than")
        calls = saver.ledger.unsettled(tool=tool, thread_id=thread, older_than=age)
        filters = {"tool": tool, "thread_id": thread, "older_than_seconds": age}
        if not as_json:
            if not calls:
                console.print("no uncertain tool calls match")
                return
            console.print(views.unsettled_table(
                f"{len(calls)} tool call(s) to settle as {verdict}", calls))
        if dry_run or not calls:
            if as_json:
                _print_json(documents.settled_document(
                    verdict, [actions.Settled(c) for c in calls], dry_run=dry_run,
                    filters=filters))
            return
        if not yes:
            typer.confirm(f"settle {len(calls)} tool call(s) as {verdict} in schema "
                          f"{schema!r}?", abort=True)
        settled = actions.settle_all(saver, calls, outcome.value, result=result,
                                     error=error)
        refused = [s for s in settled if s.refused]
        if as_json:
            _print_json(documents.settled_document(verdict, settled, dry_run=False,
                                                   filters=filters))
        else:
            for done in settled:
                if done.after is not None:
                    console.print(Text(_settled_line(done.before, done.after)))
            console.print(Text(f"settled {len(settled) - len(refused)} of {len(settled)}; "
                               f"{_NEXT[verdict]}"))
        if refused:
            raise actions.Refused(f"{len(refused)} of {len(settled)} calls changed before they "
                                  f"were settled and were left as they are; first: "
                                  f"{refused[0].refused}")


@app.command()
def fork(
    thread: Annotated[str, typer.Argument(help="Thread id.")],
    checkpoint: Annotated[str, typer.Argument(
        help="A checkpoint of the root graph (id or unique part; see `history`).")],
    to: Annotated[str | None, typer.Option(
        "--to", metavar="NEW_THREAD", help="The new thread's id (default: THREAD-fork-XXXX).",
    )] = None,
    redis_url: RedisUrl = None, postgres_url: PostgresUrl = None,
    schema: Schema = "public", prefix: Prefix = "lgd", write_mode: Mode = "through",
) -> None:
    """Branch a thread at a past checkpoint.

    A new thread holds the history up to it (and the ledger, so recorded tool calls are not
    repeated), and resumes from there.
    """
    with _failures(), _open(_target(redis_url, postgres_url, schema, prefix, write_mode)) as saver:
        point = queries.checkpoint(saver, thread, checkpoint)
        made = actions.fork(saver, thread, point.config["configurable"]["checkpoint_id"], to)
        console.print(Text(f"forked thread {made.source!r} at checkpoint {made.checkpoint_id} "
                           f"into thread {made.thread_id!r} ({made.checkpoints} checkpoints)"))
        console.print("resume it with this config (e.g. graph.invoke(None, config)):")
        config = {"configurable": {"thread_id": made.thread_id}}
        console.print(Text(f"  config = {json.dumps(config)}"), soft_wrap=True)


@app.command()
def flush(
    follow: Annotated[bool, typer.Option(
        "--follow", help="Keep draining as new writes arrive, until Ctrl-C.")] = False,
    max_idle: MaxIdle = None, max_age: MaxAge = None, keep_last: KeepLast = None,
    sweep_every: Annotated[str, typer.Option(
        "--sweep-every", metavar="DURATION",
        help="With --follow and a policy: how often to sweep.")] = "5m",
    redis_url: RedisUrl = None, postgres_url: PostgresUrl = None,
    schema: Schema = "public", prefix: Prefix = "lgd",
) -> None:
    """Drain the write-behind journal into Postgres.

    Once, or continuously with --follow, sweeping by the retention policy given.
    """
    with _failures():
        retention = _retention(max_idle, max_age, keep_last,
                               interval=parse_duration(sweep_every, "--sweep-every"))
        target = _target(redis_url, postgres_url, schema, prefix, "behind", retention)
        with _open(target) as saver:
            before = saver.health()["flush"]["unflushed"]
            started = time.monotonic()
            if follow:
                swept = "" if retention is None else f", sweeping every {sweep_every}"
                console.print(f"flushing the journal of prefix {prefix!r} into schema "
                              f"{schema!r} every flush interval{swept}; Ctrl-C stops")
                moved = run_flusher(saver, follow=True)  # returns on SIGINT / SIGTERM
            else:
                with console.status("flushing the write-behind journal…"):
                    moved = run_flusher(saver, follow=False)
            after = saver.health()["flush"]["unflushed"]
            console.print(f"flushed in {time.monotonic() - started:.2f}s: {moved} journal "
                          f"entries; unflushed {before} → {after}")


@app.command()
def sweep(
    max_idle: MaxIdle = None, max_age: MaxAge = None, keep_last: KeepLast = None,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Only count what a sweep would delete.")] = False,
    expire_interrupted: Annotated[bool, typer.Option(
        "--expire-interrupted", help="--max-idle deletes threads waiting at an interrupt "
        "too.")] = False,
    keep_ledger: Annotated[bool, typer.Option(
        "--keep-ledger", help="Keep the tool ledger records of deleted threads.")] = False,
    redis_url: RedisUrl = None, postgres_url: PostgresUrl = None,
    schema: Schema = "public", prefix: Prefix = "lgd",
) -> None:
    """Apply a retention policy once.

    Deletes idle threads and old checkpoints from both tiers, keeping what DeltaChannel
    values and pending interrupts need.
    """
    with _failures():
        retention = _retention(max_idle, max_age, keep_last,
                               keep_interrupted=not expire_interrupted, keep_ledger=keep_ledger)
        if retention is None:
            raise ConfigurationError("sweep needs a policy: --max-idle, --max-age or --keep-last")
        with _open(_target(redis_url, postgres_url, schema, prefix)) as saver:
            with console.status("sweeping…"):
                report = saver.sweep(retention, dry_run=dry_run)
            console.print(views.sweep_summary(report), markup=False)


@dead_letters_app.command("list")
def dead_letters_list(
    limit: Annotated[int, typer.Option(metavar="N", help="Show at most this many.")] = 100,
    as_json: JsonOutput = False,
    redis_url: RedisUrl = None, postgres_url: PostgresUrl = None,
    schema: Schema = "public", prefix: Prefix = "lgd",
) -> None:
    """List the journal entries Postgres rejected (oldest first) and why."""
    from langgraph_durable._cli import dead_letters

    with _failures(), _open(_target(redis_url, postgres_url, schema, prefix)) as saver:
        found = dead_letters.letters(saver, limit)
        if as_json:
            _print_json(documents.dead_letters_document(prefix, found))
            return
        if not found:
            console.print(f"no dead letters under prefix {prefix!r}")
            return
        console.print(dead_letters.letters_table(found))


def _dead_letter_command(action: str, summary: str) -> Any:
    """The ``dead-letters retry`` / ``drop`` command (they differ in the action alone)."""

    def command(
        letter_ids: Annotated[list[str], typer.Argument(
            metavar="ID...", help="Dead letter ids, or 'all'.")],
        redis_url: RedisUrl = None, postgres_url: PostgresUrl = None,
        schema: Schema = "public", prefix: Prefix = "lgd",
    ) -> None:
        from langgraph_durable._cli import dead_letters

        target = _target(redis_url, postgres_url, schema, prefix)
        with _failures(), _open(target) as saver:
            if letter_ids == ["all"]:
                letter_ids = [letter.id for letter in dead_letters.letters(saver, 100_000)]
            for letter_id in letter_ids:
                console.print(dead_letters.resolve(saver, letter_id, action))

    command.__doc__ = summary
    return command


dead_letters_app.command("retry")(_dead_letter_command(
    "retry", "Put dead letters back on the journal, once what Postgres rejected was fixed."))
dead_letters_app.command("drop")(_dead_letter_command(
    "drop", "Delete dead letters for good (their checkpoints or writes never reach Postgres)."))


@app.command(name="migrate")
def migrate_command(
    redis_url: RedisUrl = None, postgres_url: PostgresUrl = None,
    schema: Schema = "public", prefix: Prefix = "lgd",
) -> None:
    """Create the schema and apply missing migrations.

    Safe to run any time, from several processes at once.
    """
    with _failures(), _open(_target(redis_url, postgres_url, schema, prefix),
                            need_schema=False) as saver:
        before = saver.engine.schema_version()
        with console.status(f"migrating schema {schema!r}…"):
            applied = saver.engine.migrate(saver.migrations)
        now = saver.engine.schema_version()
        if applied:
            console.print(f"schema {schema!r}: applied migrations "
                          f"{', '.join(map(str, applied))}; version {before} → {now}")
        else:
            console.print(f"schema {schema!r} is up to date (version {now})")


@app.command()
def prune(
    thread_ids: Annotated[list[str], typer.Argument(metavar="THREAD...", help="Thread ids.")],
    strategy: Annotated[str, typer.Option(
        metavar="keep_latest|delete",
        help="keep_latest: keep each namespace's latest checkpoint (and what it needs); "
             "delete: delete the threads.")] = "keep_latest",
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    redis_url: RedisUrl = None, postgres_url: PostgresUrl = None,
    schema: Schema = "public", prefix: Prefix = "lgd", write_mode: Mode = "through",
) -> None:
    """Prune threads' history, or delete threads.

    In both tiers: --strategy keep_latest prunes, delete deletes.
    """
    with _failures(), _open(_target(redis_url, postgres_url, schema, prefix, write_mode)) as saver:
        if strategy not in ("keep_latest", "delete"):
            raise ConfigurationError(f"--strategy must be keep_latest or delete, not {strategy!r}")
        if not yes:
            typer.confirm(f"{strategy} {len(thread_ids)} thread(s) in schema {schema!r}?",
                          abort=True)
        _, summaries = saver.engine.thread_summaries(thread_ids=thread_ids,
                                                     limit=len(thread_ids))
        before = {s.thread_id: s for s in summaries}
        with typer.progressbar(thread_ids, label="pruning") as progress:
            for thread in progress:
                saver.prune([thread], strategy=strategy)
        _, summaries = saver.engine.thread_summaries(thread_ids=thread_ids,
                                                     limit=len(thread_ids))
        after = {s.thread_id: s for s in summaries}
        for thread in thread_ids:
            old, new = before.get(thread), after.get(thread)
            console.print(
                f"{thread}: {old.checkpoints if old else 0} → {new.checkpoints if new else 0} "
                f"checkpoints, {views.human_bytes(old.bytes if old else 0)} → "
                f"{views.human_bytes(new.bytes if new else 0)}", markup=False)


@app.command()
def doctor(
    as_json: JsonOutput = False,
    redis_url: RedisUrl = None, postgres_url: PostgresUrl = None,
    schema: Schema = "public", prefix: Prefix = "lgd", write_mode: Mode = "through",
) -> None:
    """Check the servers, the schema and the flush lag.

    Connectivity, server versions, Redis persistence, schema version and flush lag. Exits
    0 when every check passed, 4 when some only warned, 2 or 3 when one failed.
    """
    from langgraph_durable._cli.doctor import run_checks

    checks, code = run_checks(_target(redis_url, postgres_url, schema, prefix, write_mode))
    problems = [c for c in checks if c.status == "fail"]
    warnings = [c for c in checks if c.status == "warn"]
    code = code or (EXIT_WARNINGS if warnings else 0)
    if as_json:
        _print_json(documents.checks_document(checks, code))
    else:  # the first failure's detail is the error line on stderr, said once
        console.print(views.checks_table([
            replace(c, detail="failed: see the error line") if problems and c is problems[0]
            else c for c in checks]))
    if problems:
        errors.print(f"[bold red]error:[/] {escape(problems[0].detail)}", soft_wrap=True)
        raise typer.Exit(code)
    if as_json:
        raise typer.Exit(code)
    if warnings:
        names = ", ".join(c.name for c in warnings)
        console.print(f"[yellow]checks passed with {len(warnings)} "
                      f"warning{'s' * (len(warnings) != 1)}[/] ({names})")
        raise typer.Exit(EXIT_WARNINGS)
    console.print("[green]all checks passed[/]")


@app.command()
def demo(
    data_dir: DataDir = None,
    slow: Annotated[float, typer.Option(
        metavar="SECONDS",
        help="Seconds the slow tool takes (the worker is killed while it runs).")] = 3.0,
    redis_url: RedisUrl = None, postgres_url: PostgresUrl = None,
    schema: Schema = "lgd_demo", prefix: Prefix = "lgd-demo",
) -> None:
    """Crash an agent after it charged a card; charged once.

    Runs an agent, SIGKILLs it after its durable tool charged a card, and resumes it in a
    new process: the card is charged once. Uses the servers of --redis-url/--postgres-url
    (or LGD_*) when both are given, otherwise starts the embedded servers.
    """
    from langgraph_durable._cli.demo import run_demo

    with _failures():
        if (redis_url is None) != (postgres_url is None):
            raise ConfigurationError("give both --redis-url and --postgres-url (or both "
                                     "LGD_REDIS_URL and LGD_POSTGRES_URL), or neither to use "
                                     "the embedded servers")
        target = _target(redis_url, postgres_url, schema, prefix)
        if redis_url is None:
            from langgraph_durable._embedded.supervisor import DataDirInUseError
            from langgraph_durable.embedded import EmbeddedServers, start_embedded

            folder = data_dir or default_data_dir()
            try:
                with console.status(_starting(folder)):
                    servers = start_embedded(folder)
            except DataDirInUseError as busy:
                # `embedded up` (or another program) serves this folder: use its servers.
                running = EmbeddedServers(folder)
                console.print(f"using the embedded servers that process {escape(busy.holder)} "
                              f"runs in {escape(str(folder))}")
                target = replace(target, redis_url=running.redis_url,
                                 postgres_url=running.postgres_url)
                ok = run_demo(console, target, embedded_dir=folder, slow=slow)
            else:
                with servers:
                    target = replace(target, redis_url=servers.redis_url,
                                     postgres_url=servers.postgres_url)
                    ok = run_demo(console, target, embedded_dir=folder, slow=slow)
        else:
            ok = run_demo(console, target, embedded_dir=None, slow=slow)
    if not ok:
        raise typer.Exit(EXIT_FAILED)


def _starting(folder: Path) -> str:
    return f"starting embedded PostgreSQL and Valkey in {escape(str(folder))}…"


@embedded_app.command("up")
def embedded_up(data_dir: DataDir = None) -> None:
    """Start embedded PostgreSQL and Valkey in the foreground; Ctrl-C stops both."""
    from langgraph_durable.embedded import start_embedded

    folder = data_dir or default_data_dir()
    stop = threading.Event()
    with _failures():
        with console.status(_starting(folder)):
            started = time.monotonic()
            servers = start_embedded(folder)
        with servers:
            console.print(f"[green]embedded servers are up[/] in {escape(str(folder))} "
                          f"(started in {time.monotonic() - started:.2f}s; Ctrl-C stops both)")
            console.print("# in another shell:")
            # Plain lines, never wrapped or boxed, so that they can be copied as they are.
            for name, url in (("LGD_REDIS_URL", servers.redis_url),
                              ("LGD_POSTGRES_URL", servers.postgres_url)):
                console.print(Text(f"export {name}={shlex.quote(url)}"), soft_wrap=True)

            def _stop(signum: int, frame: Any) -> None:
                stop.set()

            previous = {s: signal.signal(s, _stop) for s in (signal.SIGINT, signal.SIGTERM)}
            try:
                while not stop.wait(0.5):
                    pass
            finally:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)
            console.print("stopping…")
    console.print("stopped")


def main() -> None:
    """Entry point of the ``langgraph-durable`` script."""
    app(prog_name="langgraph-durable")


__all__ = ["Target", "app", "main"]
