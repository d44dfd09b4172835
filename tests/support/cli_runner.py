"""Running the command line in-process on a test module's own schema and key prefix."""

from __future__ import annotations

from collections.abc import Callable

from typer.testing import CliRunner, Result

from langgraph_durable.cli import app
from tests.support.servers import POSTGRES_URL, REDIS_URL


def cli_for(namespace: tuple[str, str], *, columns: int = 250) -> Callable[..., Result]:
    """A function running ``langgraph-durable ARGS`` on ``namespace`` (schema, prefix)
    against the test servers, in a terminal ``columns`` wide; ``input=`` is what is typed
    at its prompts."""
    schema, prefix = namespace
    env = {"LGD_REDIS_URL": REDIS_URL, "LGD_POSTGRES_URL": POSTGRES_URL,
           "LGD_SCHEMA": schema, "LGD_KEY_PREFIX": prefix, "COLUMNS": str(columns)}

    def run(*args: str, input: str | None = None) -> Result:
        return CliRunner().invoke(app, list(args), env=env, input=input)

    return run
