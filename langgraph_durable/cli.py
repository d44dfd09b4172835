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
    langgraph-durable store namespaces [NS]       # the store's namespaces (--max-depth)
    langgraph-durable store items NS              # its items under a namespace, newest first
    langgraph-durable store get NS KEY            # one item's value
    langgraph-durable demo                        # kill an agent mid-run, resume it

``--json`` on the read commands prints one JSON document instead of a table
(docs/cli.md lists its fields).

Servers come from ``--redis-url`` / ``--postgres-url`` or ``LGD_REDIS_URL`` /
``LGD_POSTGRES_URL``; ``--schema`` and ``--prefix`` (``LGD_SCHEMA``, ``LGD_KEY_PREFIX``)
pick the saver's (and the store's) tables and keys.

Exit codes: 0 success; 1 the command failed (no such thread, a call not uncertain or
changed before resolve-all settled it, a fork target that exists, a demo check failed);
2 misconfiguration (bad URL or option, schema not set up); 3 a server is unreachable;
4 ``doctor``'s checks passed with warnings; 130 interrupted.
"""

from __future__ import annotations

import logging
from typing import Annotated

import typer
from rich.console import Console

from langgraph_durable._cli import (
    ledger_commands,
    operate_commands,
    read_commands,
    server_commands,
    store_commands,
)
from langgraph_durable._cli.shell import out, piped_width
from langgraph_durable._cli.target import Target
from langgraph_durable.metrics import log_to_stderr

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
store_app = typer.Typer(
    help="Read the long-term memory a DurableStore holds.\n\nIts namespaces, the items "
         "under one, one item.",
    no_args_is_help=True, rich_markup_mode=None)
app.add_typer(store_app, name="store")


@app.callback()
def _root(
    verbose: Annotated[bool, typer.Option("--verbose", "-v",
                                          help="Log the package's messages to stderr.")] = False,
) -> None:
    """Inspect and operate langgraph-durable checkpoints (Redis hot tier over Postgres)."""
    # Made per run: picks up COLUMNS and redirections.
    out.console = Console(highlight=False, emoji=False, width=piped_width())
    out.errors = Console(stderr=True, highlight=False, emoji=False)
    if verbose:
        log_to_stderr(logging.INFO)


# The commands, in the order `--help` lists them.
app.command()(read_commands.threads)
app.command()(read_commands.history)
app.command()(read_commands.show)
app.command()(read_commands.diff)
app.command()(read_commands.ledger)
app.command()(ledger_commands.resolve)
app.command(name="resolve-all")(ledger_commands.resolve_all)
app.command()(operate_commands.fork)
app.command()(operate_commands.flush)
app.command()(operate_commands.sweep)
dead_letters_app.command("list")(operate_commands.dead_letters_list)
dead_letters_app.command("retry")(operate_commands.dead_letter_command(
    "retry", "Put dead letters back on the journal, once what Postgres rejected was fixed."))
dead_letters_app.command("drop")(operate_commands.dead_letter_command(
    "drop", "Delete dead letters for good (their checkpoints or writes never reach Postgres)."))
app.command(name="migrate")(operate_commands.migrate_command)
app.command()(operate_commands.prune)
store_app.command("namespaces")(store_commands.namespaces)
store_app.command("items")(store_commands.items)
store_app.command("get")(store_commands.get)
app.command()(server_commands.doctor)
app.command()(server_commands.demo)
embedded_app.command("up")(server_commands.embedded_up)


def main() -> None:
    """Entry point of the ``langgraph-durable`` script."""
    app(prog_name="langgraph-durable")


__all__ = ["Target", "app", "main"]
