"""Write-behind poison containment: an entry Postgres rejects becomes a dead letter, and
every other entry keeps draining; operators see it (health, doctor) and retry or drop it."""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
import redis
from typer.testing import CliRunner, Result

from langgraph_durable import DurableSaver
from langgraph_durable._core.journal import pack_checkpoint_entry
from langgraph_durable._core.keys import Layout
from langgraph_durable._core.records import Location, StoredCheckpoint
from langgraph_durable.cli import app
from langgraph_durable.flusher import run_flusher
from tests.support.checkpoints import cold_checkpoints, put_value, refusing
from tests.support.servers import POSTGRES_URL, REDIS_URL

pytestmark = pytest.mark.parametrize("write_mode", ["behind"])

IDLE = 3600.0  # a flush interval that keeps the in-process flusher from draining


def _poison(saver: DurableSaver, thread_id: str, metadata: str) -> None:
    """Append a journal entry only an older or buggy writer could have made (validation
    refuses it at put): what Postgres does with it is the flusher's problem."""
    stored = StoredCheckpoint(Location(thread_id, "", None), str(uuid.uuid4()), None, None,
                              b"\x01", metadata, "{}")
    client = redis.Redis.from_url(REDIS_URL)
    try:
        client.xadd(Layout(saver.config.key_prefix).journal(0),
                    {"d": pack_checkpoint_entry(stored)})
    finally:
        client.close()


@pytest.fixture
def cli(namespace: tuple[str, str]) -> Callable[..., Result]:
    """Run a command on this module's schema and prefix."""
    schema, prefix = namespace
    env = {"LGD_REDIS_URL": REDIS_URL, "LGD_POSTGRES_URL": POSTGRES_URL,
           "LGD_SCHEMA": schema, "LGD_KEY_PREFIX": prefix, "COLUMNS": "250"}
    return lambda *args: CliRunner().invoke(app, list(args), env=env)


def test_rejected_entries_become_dead_letters_and_the_rest_drains(
    make_saver: Any, cli: Callable[..., Result]
) -> None:
    """Among 40 innocent threads, a NaN in metadata, a 3 KB random thread id (over the
    btree row limit) and an undecodable entry are each isolated; flush() returns, every
    innocent thread reaches Postgres, health() and doctor report the three dead letters."""
    saver = make_saver(flush_interval=IDLE)
    innocent = [f"t-{uuid.uuid4()}" for _ in range(40)]
    for i, thread in enumerate(innocent):
        put_value(saver, thread, thread)
        if i == 10:
            _poison(saver, f"t-{uuid.uuid4()}", '{"temperature":NaN}')
        if i == 20:
            _poison(saver, os.urandom(1500).hex(), "{}")
        if i == 30:
            redis.Redis.from_url(REDIS_URL).xadd(Layout(saver.config.key_prefix).journal(0),
                                                 {"d": b"\xc1 not msgpack"})
    saver.flush()
    assert all(cold_checkpoints(saver.config.schema, t) == 1 for t in innocent)
    report = saver.health()["flush"]
    assert report["unflushed"] == 0 and report["dead_letters"] == 3
    doctor = cli("doctor", "--write-mode", "behind")
    assert doctor.exit_code == 1, doctor.output
    assert "dead letters" in doctor.stdout and "3 write-behind journal entries" in doctor.stderr
    listing = cli("dead-letters", "list")
    assert listing.exit_code == 0, listing.output
    assert "NaN" in listing.stdout and "index row size" in listing.stdout
    assert "undecodable" in listing.stdout
    dropped = cli("dead-letters", "drop", "all")
    assert dropped.exit_code == 0 and dropped.stdout.count("dropped dead letter") == 3
    assert saver.health()["flush"]["dead_letters"] == 0
    after = cli("doctor", "--write-mode", "behind")
    assert after.exit_code in (0, 4), after.output  # 4: warnings only (e.g. AOF off)
    assert "dead letters" not in after.stdout


def test_retry_after_the_cause_is_fixed_reaches_postgres(
    make_saver: Any, cli: Callable[..., Result], caplog: pytest.LogCaptureFixture
) -> None:
    """The documented procedure: Postgres refuses a thread's rows (a constraint), the
    entry becomes a dead letter while other threads flush; after the constraint is
    dropped, `dead-letters retry ID` puts it back and the next flush stores it. An
    unknown id is a one-line error. The flusher logs a warning naming the entry."""
    saver = make_saver(flush_interval=IDLE)
    refused, other = f"refused-{uuid.uuid4()}", f"t-{uuid.uuid4()}"
    with refusing(saver, refused), caplog.at_level(logging.WARNING, "langgraph_durable"):
        put_value(saver, refused, refused)
        put_value(saver, other, other)
        saver.flush()
        assert "moved to the dead letters" in caplog.text and refused in caplog.text
        assert cold_checkpoints(saver.config.schema, other) == 1
        assert cold_checkpoints(saver.config.schema, refused) == 0
        put_value(saver, other, other)  # the thread keeps taking writes, and they keep draining
        saver.flush()
        assert cold_checkpoints(saver.config.schema, other) == 2
    listing = cli("dead-letters", "list")
    assert refused in listing.stdout and "lgd_test_refuse" in listing.stdout
    from langgraph_durable._cli.dead_letters import letters

    (letter,) = letters(saver, 10)
    assert letter.thread_id == refused and letter.kind == "checkpoint"
    retried = cli("dead-letters", "retry", letter.id)
    assert retried.exit_code == 0, retried.output
    assert "back on the journal" in retried.stdout
    saver.flush()
    assert cold_checkpoints(saver.config.schema, refused) == 1
    assert saver.health()["flush"]["dead_letters"] == 0
    missing = cli("dead-letters", "retry", letter.id)
    assert missing.exit_code == 2 and "no dead letter" in missing.stderr


def test_standalone_flusher_survives_a_rejected_entry(make_saver: Any) -> None:
    """`langgraph-durable flush --follow` (run_flusher) keeps running past a poison entry
    and drains what comes after it."""
    writer = make_saver(flush_interval=IDLE)
    worker = make_saver(flush_interval=0.05, background_flush=False)
    stop = threading.Event()
    moved: list[int] = []
    follower = threading.Thread(target=lambda: moved.append(
        run_flusher(worker, follow=True, stop=stop)))
    follower.start()
    try:
        _poison(writer, f"t-{uuid.uuid4()}", '{"x":Infinity}')
        after = [f"t-{uuid.uuid4()}" for _ in range(5)]
        for thread in after:
            put_value(writer, thread, thread)
        deadline = time.monotonic() + 20
        schema = writer.config.schema
        while time.monotonic() < deadline and not all(cold_checkpoints(schema, t) for t in after):
            time.sleep(0.05)
        assert all(cold_checkpoints(writer.config.schema, t) == 1 for t in after)
        assert follower.is_alive()
    finally:
        stop.set()
        follower.join(10)
    assert moved and moved[0] >= 6
    assert writer.health()["flush"]["dead_letters"] >= 1
    from langgraph_durable._cli.dead_letters import letters, resolve

    for letter in letters(writer, 100):
        assert "Infinity" in letter.reason
        resolve(writer, letter.id, "drop")


def test_delete_and_list_work_with_a_dead_letter_waiting(make_saver: Any) -> None:
    """A dead letter does not block the operations that drain the journal first
    (delete_thread, list across threads)."""
    saver = make_saver(flush_interval=IDLE)
    _poison(saver, f"t-{uuid.uuid4()}", '{"x":NaN}')
    thread = f"t-{uuid.uuid4()}"
    put_value(saver, thread, thread)
    kept = f"t-{uuid.uuid4()}"
    put_value(saver, kept, kept)
    saver.delete_thread(thread)
    listed = {t.config["configurable"]["thread_id"] for t in saver.list(None)}
    assert kept in listed and thread not in listed
    assert saver.get_tuple({"configurable": {"thread_id": thread}}) is None
    assert saver.health()["flush"]["dead_letters"] == 1
    from langgraph_durable._cli.dead_letters import letters, resolve

    for letter in letters(saver, 100):
        resolve(saver, letter.id, "drop")
