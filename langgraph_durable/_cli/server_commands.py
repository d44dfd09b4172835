"""The commands about the servers: doctor, demo, embedded up."""

from __future__ import annotations

import shlex
import signal
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.text import Text

from langgraph_durable._cli import documents, views
from langgraph_durable._cli.shell import (
    EXIT_FAILED,
    EXIT_WARNINGS,
    DataDir,
    JsonOutput,
    Mode,
    PostgresUrl,
    Prefix,
    RedisUrl,
    Schema,
    boxed_console,
    failures,
    make_target,
    out,
    print_json,
)
from langgraph_durable._embedded.layout import default_data_dir
from langgraph_durable.errors import (
    ConfigurationError,
)


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

    checks, code = run_checks(make_target(redis_url, postgres_url, schema, prefix, write_mode))
    problems = [c for c in checks if c.status == "fail"]
    warnings = [c for c in checks if c.status == "warn"]
    code = code or (EXIT_WARNINGS if warnings else 0)
    if as_json:
        print_json(documents.checks_document(checks, code))
    else:  # the first failure's detail is the error line on stderr, said once
        out.console.print(views.checks_table([
            replace(c, detail="failed: see the error line") if problems and c is problems[0]
            else c for c in checks]))
    if problems:
        out.errors.print(f"[bold red]error:[/] {escape(problems[0].detail)}", soft_wrap=True)
        raise typer.Exit(code)
    if as_json:
        raise typer.Exit(code)
    if warnings:
        names = ", ".join(c.name for c in warnings)
        out.console.print(f"[yellow]checks passed with {len(warnings)} "
                      f"warning{'s' * (len(warnings) != 1)}[/] ({names})")
        raise typer.Exit(EXIT_WARNINGS)
    out.console.print("[green]all checks passed[/]")


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

    with failures():
        if (redis_url is None) != (postgres_url is None):
            raise ConfigurationError("give both --redis-url and --postgres-url (or both "
                                     "LGD_REDIS_URL and LGD_POSTGRES_URL), or neither to use "
                                     "the embedded servers")
        target = make_target(redis_url, postgres_url, schema, prefix)
        if redis_url is None:
            from langgraph_durable._embedded.supervisor import DataDirInUseError
            from langgraph_durable.embedded import EmbeddedServers, start_embedded

            folder = data_dir or default_data_dir()
            try:
                with out.console.status(_starting(folder)):
                    servers = start_embedded(folder)
            except DataDirInUseError as busy:
                # `embedded up` (or another program) serves this folder: use its servers.
                running = EmbeddedServers(folder)
                out.console.print(f"using the embedded servers that process {escape(busy.holder)} "
                              f"runs in {escape(str(folder))}")
                target = replace(target, redis_url=running.redis_url,
                                 postgres_url=running.postgres_url)
                ok = run_demo(boxed_console(), target, embedded_dir=folder, slow=slow)
            else:
                with servers:
                    target = replace(target, redis_url=servers.redis_url,
                                     postgres_url=servers.postgres_url)
                    ok = run_demo(boxed_console(), target, embedded_dir=folder, slow=slow)
        else:
            ok = run_demo(boxed_console(), target, embedded_dir=None, slow=slow)
    if not ok:
        raise typer.Exit(EXIT_FAILED)


def _starting(folder: Path) -> str:
    return f"starting embedded PostgreSQL and Valkey in {escape(str(folder))}…"


def embedded_up(data_dir: DataDir = None) -> None:
    """Start embedded PostgreSQL and Valkey in the foreground; Ctrl-C stops both."""
    from langgraph_durable.embedded import start_embedded

    folder = data_dir or default_data_dir()
    stop = threading.Event()
    with failures():
        with out.console.status(_starting(folder)):
            started = time.monotonic()
            servers = start_embedded(folder)
        with servers:
            out.console.print(f"[green]embedded servers are up[/] in {escape(str(folder))} "
                          f"(started in {time.monotonic() - started:.2f}s; Ctrl-C stops both)")
            out.console.print("# in another shell:")
            # Plain lines, never wrapped or boxed, so that they can be copied as they are.
            for name, url in (("LGD_REDIS_URL", servers.redis_url),
                              ("LGD_POSTGRES_URL", servers.postgres_url)):
                out.console.print(Text(f"export {name}={shlex.quote(url)}"), soft_wrap=True)

            def _stop(signum: int, frame: Any) -> None:
                stop.set()

            previous = {s: signal.signal(s, _stop) for s in (signal.SIGINT, signal.SIGTERM)}
            try:
                while not stop.wait(0.5):
                    pass
            finally:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)
            out.console.print("stopping…")
    out.console.print("stopped")
