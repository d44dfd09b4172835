"""The commands that settle uncertain tool calls: resolve, resolve-all."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import typer
from rich.text import Text

from langgraph_durable import LedgerRecord
from langgraph_durable._cli import actions, documents, views
from langgraph_durable._cli.shell import (
    JsonOutput,
    PostgresUrl,
    Prefix,
    RedisUrl,
    Schema,
    failures,
    make_target,
    open_saver,
    out,
    print_json,
)
from langgraph_durable._cli.target import parse_duration
from langgraph_durable.errors import (
    ConfigurationError,
)


class Verdict(StrEnum):
    """What an operator found out about an uncertain tool call."""

    succeeded = "succeeded"
    failed = "failed"
    retry = "retry"


_NEXT = {"succeeded": "its next execution returns the recorded result instead of running",
         "failed": "its next execution raises the recorded error",
         "retry": "its next execution runs the tool again under the same key"}


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
    with failures(), open_saver(make_target(redis_url, postgres_url, schema, prefix)) as saver:
        before, after = actions.settle(saver, key, outcome.value, result=result, error=error)
        out.console.print(Text(f"{_settled_line(before, after)}; {_NEXT[outcome.value]}"))


def _settled_line(before: LedgerRecord, after: LedgerRecord) -> str:
    return (f"tool call {after.key} ({after.tool}, thread {after.thread_id!r}): "
            f"{before.status} → {after.status}")


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
    with failures(), open_saver(make_target(redis_url, postgres_url, schema, prefix)) as saver:
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
                out.console.print("no uncertain tool calls match")
                return
            out.console.print(views.unsettled_table(
                f"{len(calls)} tool call(s) to settle as {verdict}", calls))
        if dry_run or not calls:
            if as_json:
                print_json(documents.settled_document(
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
            print_json(documents.settled_document(verdict, settled, dry_run=False,
                                                   filters=filters))
        else:
            for done in settled:
                if done.after is not None:
                    out.console.print(Text(_settled_line(done.before, done.after)))
            out.console.print(Text(f"settled {len(settled) - len(refused)} of {len(settled)}; "
                               f"{_NEXT[verdict]}"))
        if refused:
            raise actions.Refused(f"{len(refused)} of {len(settled)} calls changed before they "
                                  f"were settled and were left as they are; first: "
                                  f"{refused[0].refused}")
