"""What a new user sees when Postgres is not there: one clear error within seconds, with the
URL (password masked), the reason and the setting to fix; nothing printed on its own."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from langgraph_durable import ConfigurationError, DurableSaver, TierUnavailableError
from tests.support.faults import free_port
from tests.support.servers import REDIS_URL, postgres_url

ROOT = Path(__file__).resolve().parents[2]


def test_setup_with_nothing_listening_fails_fast_with_the_reason() -> None:
    """Nothing listens on the port: setup() raises TierUnavailableError(tier="cold") in
    seconds, naming the masked URL and what to check, and how to start servers to try the
    saver with (the embedded ones)."""
    url = f"postgresql://postgres:hunter2@127.0.0.1:{free_port()}/test"
    saver = DurableSaver(REDIS_URL, url)
    started = time.monotonic()
    with pytest.raises(TierUnavailableError) as raised:
        saver.setup()
    assert time.monotonic() - started < 10
    message = str(raised.value)
    assert raised.value.tier == "cold"
    assert "hunter2" not in message and "***" in message
    assert "postgres_url" in message and "LGD_POSTGRES_URL" in message
    assert "langgraph-durable embedded up" in message
    saver.close()


async def test_asetup_with_a_missing_database_is_a_configuration_error() -> None:
    """A database that does not exist is permanent: ConfigurationError, no retries."""
    url = postgres_url(database="lgd_no_such_database")
    saver = DurableSaver(REDIS_URL, url)
    with pytest.raises(ConfigurationError) as raised:
        await saver.asetup()
    assert "lgd_no_such_database" in str(raised.value)
    await saver.aclose()


def test_setup_failure_prints_nothing_but_the_error() -> None:
    """A script whose setup() fails prints one traceback ending in the saver's error, and
    no log lines of the connection pool (quiet by default)."""
    code = (
        "from langgraph_durable import DurableSaver\n"
        f"DurableSaver({REDIS_URL!r}, 'postgresql://postgres@127.0.0.1:{free_port()}/x')"
        ".setup()\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 1
    assert "psycopg.pool" not in done.stderr and "WARNING" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith(
        "langgraph_durable.errors.TierUnavailableError: Postgres (cold tier) at")
