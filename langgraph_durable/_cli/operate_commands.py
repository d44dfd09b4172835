"""The commands that change what a saver stored: fork, flush, sweep, dead letters,
migrate, prune."""

from __future__ import annotations

import json
import time
from typing import Annotated, Any

import typer
from rich.text import Text

from langgraph_durable._cli import actions, documents, queries, views
from langgraph_durable._cli.shell import (
    JsonOutput,
    KeepLast,
    MaxAge,
    MaxIdle,
    Mode,
    PostgresUrl,
    Prefix,
    RedisUrl,
    Schema,
    failures,
    make_target,
    open_saver,
    out,
    print_json,
    retention_policy,
)
from langgraph_durable._cli.target import parse_duration
from langgraph_durable.errors import (
    ConfigurationError,
)
from langgraph_durable.flusher import run_flusher


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
    with failures(), open_saver(
            make_target(redis_url, postgres_url, schema, prefix, write_mode)) as saver:
        point = queries.checkpoint(saver, thread, checkpoint)
        made = actions.fork(saver, thread, point.config["configurable"]["checkpoint_id"], to)
        out.console.print(Text(f"forked thread {made.source!r} at checkpoint {made.checkpoint_id} "
                           f"into thread {made.thread_id!r} ({made.checkpoints} checkpoints)"))
        out.console.print("resume it with this config (e.g. graph.invoke(None, config)):")
        config = {"configurable": {"thread_id": made.thread_id}}
        out.console.print(Text(f"  config = {json.dumps(config)}"), soft_wrap=True)


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
    with failures():
        retention = retention_policy(max_idle, max_age, keep_last,
                               interval=parse_duration(sweep_every, "--sweep-every"))
        target = make_target(redis_url, postgres_url, schema, prefix, "behind", retention)
        with open_saver(target) as saver:
            before = saver.health()["flush"]["unflushed"]
            started = time.monotonic()
            if follow:
                swept = "" if retention is None else f", sweeping every {sweep_every}"
                out.console.print(f"flushing the journal of prefix {prefix!r} into schema "
                              f"{schema!r} every flush interval{swept}; Ctrl-C stops")
                moved = run_flusher(saver, follow=True)  # returns on SIGINT / SIGTERM
            else:
                with out.console.status("flushing the write-behind journal…"):
                    moved = run_flusher(saver, follow=False)
            after = saver.health()["flush"]["unflushed"]
            out.console.print(f"flushed in {time.monotonic() - started:.2f}s: {moved} journal "
                          f"entries; unflushed {before} → {after}")


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
    with failures():
        retention = retention_policy(max_idle, max_age, keep_last,
                               keep_interrupted=not expire_interrupted, keep_ledger=keep_ledger)
        if retention is None:
            raise ConfigurationError("sweep needs a policy: --max-idle, --max-age or --keep-last")
        with open_saver(make_target(redis_url, postgres_url, schema, prefix)) as saver:
            with out.console.status("sweeping…"):
                report = saver.sweep(retention, dry_run=dry_run)
            out.console.print(views.sweep_summary(report), markup=False)


def dead_letters_list(
    limit: Annotated[int, typer.Option(metavar="N", help="Show at most this many.")] = 100,
    as_json: JsonOutput = False,
    redis_url: RedisUrl = None, postgres_url: PostgresUrl = None,
    schema: Schema = "public", prefix: Prefix = "lgd",
) -> None:
    """List the journal entries Postgres rejected (oldest first) and why."""
    from langgraph_durable._cli import dead_letters

    with failures(), open_saver(make_target(redis_url, postgres_url, schema, prefix)) as saver:
        found = dead_letters.letters(saver, limit)
        if as_json:
            print_json(documents.dead_letters_document(prefix, found))
            return
        if not found:
            out.console.print(f"no dead letters under prefix {prefix!r}")
            return
        out.console.print(dead_letters.letters_table(found))


def dead_letter_command(action: str, summary: str) -> Any:
    """The ``dead-letters retry`` / ``drop`` command (they differ in the action alone)."""

    def command(
        letter_ids: Annotated[list[str], typer.Argument(
            metavar="ID...", help="Dead letter ids, or 'all'.")],
        redis_url: RedisUrl = None, postgres_url: PostgresUrl = None,
        schema: Schema = "public", prefix: Prefix = "lgd",
    ) -> None:
        from langgraph_durable._cli import dead_letters

        target = make_target(redis_url, postgres_url, schema, prefix)
        with failures(), open_saver(target) as saver:
            if letter_ids == ["all"]:
                letter_ids = [letter.id for letter in dead_letters.letters(saver, 100_000)]
            for letter_id in letter_ids:
                out.console.print(dead_letters.resolve(saver, letter_id, action))

    command.__doc__ = summary
    return command



def migrate_command(
    redis_url: RedisUrl = None, postgres_url: PostgresUrl = None,
    schema: Schema = "public", prefix: Prefix = "lgd",
) -> None:
    """Create the schema and apply missing migrations.

    Safe to run any time, from several processes at once.
    """
    with failures(), open_saver(make_target(redis_url, postgres_url, schema, prefix),
                            need_schema=False) as saver:
        before = saver.engine.schema_version()
        with out.console.status(f"migrating schema {schema!r}…"):
            applied = saver.engine.migrate(saver.migrations)
        now = saver.engine.schema_version()
        if applied:
            out.console.print(f"schema {schema!r}: applied migrations "
                          f"{', '.join(map(str, applied))}; version {before} → {now}")
        else:
            out.console.print(f"schema {schema!r} is up to date (version {now})")


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
    with failures(), open_saver(
            make_target(redis_url, postgres_url, schema, prefix, write_mode)) as saver:
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
            out.console.print(
                f"{thread}: {old.checkpoints if old else 0} → {new.checkpoints if new else 0} "
                f"checkpoints, {views.human_bytes(old.bytes if old else 0)} → "
                f"{views.human_bytes(new.bytes if new else 0)}", markup=False)
