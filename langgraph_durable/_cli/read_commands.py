"""The commands that read what a saver stored: threads, history, show, diff, ledger."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from langgraph_durable._cli import actions, documents, queries, views
from langgraph_durable._cli.shell import (
    UNWRAPPED,
    JsonOutput,
    Mode,
    Namespace,
    PostgresUrl,
    Prefix,
    RedisUrl,
    Schema,
    failures,
    hot_view,
    make_target,
    open_saver,
    out,
    print_json,
)
from langgraph_durable.config import mask_url


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
    with failures(), open_saver(
            make_target(redis_url, postgres_url, schema, prefix, write_mode)) as saver:
        pattern = actions.metadata_pattern(where or [])
        with hot_view(saver) as hot:
            total, rows = queries.thread_rows(saver, hot, limit=limit, where=pattern or None)
        unflushed = saver.health()["flush"]["unflushed"]
        if as_json:
            print_json(documents.threads_document(rows, total=total, where=pattern,
                                                   schema=schema, prefix=prefix,
                                                   unflushed=unflushed))
            return
        matching = f" with metadata {json.dumps(pattern)}" if pattern else ""
        caption = (f"{len(rows)} of {total} threads{matching} · schema {schema} · "
                   f"prefix {prefix} · unflushed journal entries: {unflushed}")
        out.console.print(views.threads_table(f"threads in {mask_url(saver.config.postgres_url)}",
                                          rows, caption))


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
    with failures(), open_saver(
            make_target(redis_url, postgres_url, schema, prefix, write_mode)) as saver:
        with hot_view(saver) as hot:
            rows = queries.history_rows(saver, hot, thread, checkpoint_ns=ns, limit=limit)
        if as_json:
            print_json(documents.history_document(thread, ns, rows))
            return
        out.console.print(views.history_table(f"history of thread {thread!r}", rows,
                                          width=out.console.width))


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
    with failures(), open_saver(
            make_target(redis_url, postgres_url, schema, prefix, write_mode)) as saver:
        tup = queries.checkpoint(saver, thread, checkpoint, checkpoint_ns=ns or "")
        if as_json:
            print_json(documents.checkpoint_document(tup))
            return
        width = UNWRAPPED if full else max(60, out.console.width - 20)
        out.console.print(views.checkpoint_view(tup, width=width))


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
    with failures(), open_saver(
            make_target(redis_url, postgres_url, schema, prefix, write_mode)) as saver:
        first = queries.checkpoint(saver, thread, a, checkpoint_ns=ns or "")
        second = queries.checkpoint(saver, thread, b, checkpoint_ns=ns or "")
        changes = views.diff_changes(first, second)
        if as_json:
            print_json(documents.diff_document(first, second, changes))
            return
        out.console.print(views.diff_view(first, second, changes))


def ledger(
    thread: Annotated[str, typer.Argument(help="Thread id.")],
    as_json: JsonOutput = False,
    redis_url: RedisUrl = None, postgres_url: PostgresUrl = None,
    schema: Schema = "public", prefix: Prefix = "lgd", write_mode: Mode = "through",
) -> None:
    """List a thread's durable tool calls.

    Each with its status, attempts and outcome.
    """
    with failures(), open_saver(
            make_target(redis_url, postgres_url, schema, prefix, write_mode)) as saver:
        records = saver.ledger.list(thread)
        if not records:
            raise queries.NotFound(f"the ledger has no tool calls for thread {thread!r} "
                                   f"in schema {schema!r}")
        if as_json:
            print_json(documents.ledger_document(thread, records))
            return
        out.console.print(views.ledger_table(f"tool calls of thread {thread!r}", records))
