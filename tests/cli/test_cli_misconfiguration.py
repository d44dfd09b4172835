"""A Postgres that refuses the password is a misconfiguration for the command line: exit
code 2, as docs/cli.md says, not 3 (a server unreachable)."""

from __future__ import annotations

from pathlib import Path

import psycopg
from psycopg.conninfo import conninfo_to_dict

from tests.cli.test_cli import one_line_error
from tests.support.cli_runner import cli_for
from tests.support.deployment_servers import pgbouncer_args, process
from tests.support.faults import Proxy, free_port
from tests.support.servers import POSTGRES_URL, postgres_address


def test_a_wrong_postgres_password_is_a_misconfiguration(
        namespace: tuple[str, str], tmp_path: Path) -> None:
    """A Postgres that refuses the password (a pgbouncer asking for one in front of the
    test database): `doctor` and a command that opens the saver exit 2, misconfiguration,
    naming the reason and the setting to fix, not 3 (a server unreachable)."""
    database = str(conninfo_to_dict(POSTGRES_URL).get("dbname") or "postgres")
    port = free_port()

    def ready() -> bool:
        with psycopg.connect(f"postgresql://postgres:right@127.0.0.1:{port}/{database}",
                             connect_timeout=1) as conn:
            return conn.execute("SELECT 1").fetchone() == (1,)

    wrong = f"postgresql://postgres:wrong@127.0.0.1:{port}/{database}"
    cli = cli_for(namespace)
    # the embedded servers' Postgres listens on a Unix socket pgbouncer may not enter
    address = postgres_address()
    forwarder = Proxy(address) if isinstance(address, str) else None
    if forwarder is not None:
        forwarder.start()
    backend = ("127.0.0.1", forwarder.port) if forwarder is not None else None
    try:
        with process(pgbouncer_args(tmp_path, port, database, backend, password="right"),
                     ready, log=tmp_path / "pgbouncer.log"):
            for command in (["doctor"], ["threads"]):
                result = cli(*command, "--postgres-url", wrong)
                assert result.exit_code == 2, (command, result.output)
                line = one_line_error(result)
                assert "password authentication failed" in line, line
                assert "LGD_POSTGRES_URL" in line and ":wrong@" not in line
    finally:
        if forwarder is not None:
            forwarder.cut()
