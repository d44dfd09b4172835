"""A saver that cannot reach Redis says so, once, at WARNING: where (the URL, password
hidden), why, and what it does meanwhile; and again when Redis answers. A user who forgot
to export the URLs must not write into some other default server without a word. With
``redis_required`` set, ``setup()`` refuses to start on Postgres alone."""

from __future__ import annotations

import logging
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from langgraph_durable import DurableSaver, TierUnavailableError
from tests.support.checkpoints import put_value
from tests.support.faults import Proxy, free_port
from tests.support.servers import POSTGRES_URL, redis_address

PASSWORD = "hunter2-never-shown"


def _said(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "langgraph_durable" and r.levelno >= logging.WARNING]


def test_a_redis_that_never_answers_is_said_once_with_its_url_and_what_happens_meanwhile(
    namespace: tuple[str, str], write_mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Redis on a port nobody listens on: setup, a put and reads log one WARNING naming
    the URL with its password hidden, the reason, and the consequence for the write mode."""
    schema, prefix = namespace
    port = free_port()
    url = f"redis://:{PASSWORD}@127.0.0.1:{port}/0"
    caplog.set_level(logging.WARNING, logger="langgraph_durable")
    with DurableSaver(url, POSTGRES_URL, schema=schema, key_prefix=prefix,
                      write_mode=write_mode, breaker_cooldown=0.05) as saver:  # type: ignore[arg-type]
        saver.setup()
        thread = f"unreachable-{uuid.uuid4()}"
        if write_mode == "through":
            put_value(saver, thread, "one")
            for _ in range(3):
                time.sleep(0.06)  # past the cooldown: each read probes Redis again
                found = saver.get_tuple({"configurable": {"thread_id": thread}})
                assert found is not None and found.checkpoint["channel_values"]["value"] == "one"
        else:
            with pytest.raises(TierUnavailableError):
                put_value(saver, thread, "one")
    said = _said(caplog)
    assert len(said) == 1, said
    assert f"redis://:***@127.0.0.1:{port}/0" in said[0]
    assert "Connection refused" in said[0] or "connecting" in said[0]
    expected = ("Postgres alone" if write_mode == "through"
                else "raise TierUnavailableError")
    assert expected in said[0], said[0]
    assert not any(PASSWORD in text for text in caplog.text.splitlines())


def test_a_redis_that_comes_back_is_said_once_too(
    namespace: tuple[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    """Redis cut after setup, then restored: one WARNING when the outage starts, one when
    the probe finds it answering, and nothing in between however many calls."""
    schema, prefix = namespace
    proxy = Proxy(redis_address())
    proxy.start()
    caplog.set_level(logging.WARNING, logger="langgraph_durable")
    url = f"redis://127.0.0.1:{proxy.port}/0"
    try:
        with DurableSaver(url, POSTGRES_URL, schema=schema, key_prefix=prefix,
                          breaker_cooldown=0.05, pool_timeout=2) as saver:
            saver.setup()
            thread = f"back-{uuid.uuid4()}"
            put_value(saver, thread, "before")
            assert _said(caplog) == []
            proxy.cut()
            for i in range(5):
                put_value(saver, f"{thread}-{i}", i)
                time.sleep(0.06)
            proxy.restore()
            time.sleep(0.06)
            for _ in range(3):
                saver.get_tuple({"configurable": {"thread_id": thread}})
            assert saver.health()["hot"]["breaker"] == "closed"
    finally:
        proxy.cut()
    said = _said(caplog)
    assert len(said) == 2, said
    assert "cannot be reached" in said[0] and url in said[0]
    assert "answers again" in said[1] and url in said[1]


def test_redis_required_makes_setup_fail_fast_instead_of_starting_on_postgres_alone(
    namespace: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``redis_required=True`` (or ``LGD_REDIS_REQUIRED=1``): setup raises
    TierUnavailableError(tier="hot") naming the URL, password hidden, within seconds."""
    schema, prefix = namespace
    url = f"redis://:{PASSWORD}@127.0.0.1:{free_port()}/0"
    started = time.monotonic()
    saver = DurableSaver(url, POSTGRES_URL, schema=schema, key_prefix=prefix,
                         redis_required=True)
    with saver, pytest.raises(TierUnavailableError) as raised:
        saver.setup()
    assert raised.value.tier == "hot"
    assert "redis_required" in str(raised.value) and "127.0.0.1" in str(raised.value)
    assert PASSWORD not in str(raised.value)
    assert time.monotonic() - started < 10
    monkeypatch.setenv("LGD_REDIS_REQUIRED", "1")
    with DurableSaver(url, POSTGRES_URL, schema=schema, key_prefix=prefix) as saver:
        assert saver.config.redis_required
        with pytest.raises(TierUnavailableError):
            saver.setup()


def test_a_saver_without_its_hot_tier_says_so_where_a_person_sees_it(
    namespace: tuple[str, str]
) -> None:
    """A program that configures no logging (the Quickstart) and has a wrong Redis URL
    gets one DegradedWarning on stderr, however many calls run on Postgres alone; its
    answers are still right and it exits 0."""
    schema, prefix = namespace
    url = f"redis://127.0.0.1:{free_port()}/0"
    program = f"""
from langgraph_durable import DurableSaver
from tests.support.checkpoints import config_of, put_value
with DurableSaver({url!r}, {POSTGRES_URL!r}, schema={schema!r}, key_prefix={prefix!r},
                  breaker_cooldown=0.01) as saver:
    saver.setup()
    for step in range(3):
        put_value(saver, "quickstart", step)
        print(saver.get_tuple(config_of("quickstart")).checkpoint["channel_values"]["value"])
"""
    out = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                         timeout=60, cwd=Path(__file__).parents[2])
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["0", "1", "2"]
    said = [line for line in out.stderr.splitlines() if "DegradedWarning" in line]
    assert len(said) == 1, out.stderr
    assert f"127.0.0.1:{url.rsplit(':', 1)[1].split('/')[0]}" in said[0]
    assert "Postgres" in said[0] and "redis_required" in said[0]
