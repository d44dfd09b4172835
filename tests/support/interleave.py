"""Interleavings forced step by step: an operation run request by request (`Stepped`), a
call run in a thread whose errors the test sees (`in_thread`), a wait until some session
waits for a lock the test holds (`wait_until_blocked_by`), and inserts stopped at the
point where their statement has drawn its values but taken no row lock (`paused_inserts`)."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

from langgraph_durable import DurableSaver
from langgraph_durable._core.requests import Hot
from tests.support.servers import POSTGRES_URL


def no_effects(request: Any) -> Any:
    """The effects handler of a checkpoint operation: it asks for none."""
    raise AssertionError(f"a checkpoint operation asked for a tool effect: {request!r}")


class Stepped:
    """An operation run request by request with a saver's real driver, so a test can stop
    it at any request and let other processes act first."""

    def __init__(self, saver: DurableSaver, op: Any) -> None:
        self.op, self.tiers = op, saver.engine.tiers()
        self.request = next(op)

    def until(self, stop: Callable[[Any], bool]) -> Any:
        """Run requests until ``stop(request)`` holds; that request is next (not run)."""
        while not stop(self.request):
            self.request = self.op.send(self.tiers.execute(self.request, no_effects))
        return self.request

    def finish(self) -> Any:
        """Run the rest (the next request executed and waited for); the op's result."""
        try:
            while True:
                request = self.request
                if isinstance(request, Hot):  # what was sent without waiting, lands now
                    request = Hot(request.script, request.keys, request.args)
                self.request = self.op.send(self.tiers.execute(request, no_effects))
        except StopIteration as done:
            return done.value


def script(name: str) -> Callable[[Any], bool]:
    """A `Stepped.until` stop: the next request runs the script ``name``."""
    return lambda request: isinstance(request, Hot) and request.script.name == name


class InThread:
    """A call running in a thread; `joined` waits for it and fails with what it raised."""

    def __init__(self, target: Callable[[], object]) -> None:
        self.errors: list[BaseException] = []
        self.thread = threading.Thread(target=self._run, args=(target,))
        self.thread.start()

    def _run(self, target: Callable[[], object]) -> None:
        try:
            target()
        except BaseException as error:  # reported by `joined`
            self.errors.append(error)

    def joined(self, timeout: float = 30) -> None:
        self.thread.join(timeout=timeout)
        assert not self.thread.is_alive(), "the call in the thread did not return"
        assert not self.errors, self.errors


def in_thread(target: Callable[[], object]) -> InThread:
    """Start ``target`` in a thread."""
    return InThread(target)


def wait_until_blocked_by(blocker: psycopg.Connection[Any], timeout: float = 10) -> None:
    """Until some session waits for a lock ``blocker``'s session holds (a row lock, an
    advisory lock)."""
    pid = blocker.info.backend_pid
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            row = conn.execute("SELECT count(*) FROM pg_stat_activity "
                               "WHERE %s = ANY(pg_blocking_pids(pid))", (pid,)).fetchone()
            if row and row[0]:
                return
            time.sleep(0.01)
    raise AssertionError("no session came to wait for the test's lock")


class Pause:
    """Inserts held at a trigger until `release` (see `paused_inserts`)."""

    def __init__(self, blocker: psycopg.Connection[Any], lock: int) -> None:
        self.blocker, self.lock, self.held = blocker, lock, True

    def reached(self) -> None:
        """Until some insert waits at the trigger."""
        wait_until_blocked_by(self.blocker)

    def release(self) -> None:
        """Let the held inserts go on."""
        if self.held:
            self.blocker.execute("SELECT pg_advisory_unlock(%s)", (self.lock,))
            self.held = False


@contextmanager
def paused_inserts(table: str, when: str) -> Iterator[Pause]:
    """While inside, and until `Pause.release`, every insert into ``table`` (schema-
    qualified) whose new row meets ``when`` (SQL over ``NEW``) waits in a ``BEFORE INSERT``
    trigger: its statement has drawn the values of its ``VALUES`` or ``SELECT`` (a
    version from a sequence, say) and has not yet checked for a conflicting row or taken
    its lock. The trigger is dropped on the way out."""
    lock = random.randrange(1, 2**31)
    schema = table.rpartition(".")[0]
    function = f"{schema}.lgd_test_pause_{lock}"
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(f"""
            CREATE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF {when} THEN PERFORM pg_advisory_xact_lock({lock}); END IF;
                RETURN NEW;
            END $$""")
        conn.execute(f"CREATE TRIGGER lgd_test_pause_{lock} BEFORE INSERT ON {table} "
                     f"FOR EACH ROW EXECUTE FUNCTION {function}()")
    try:
        with psycopg.connect(POSTGRES_URL, autocommit=True) as blocker:
            blocker.execute("SELECT pg_advisory_lock(%s)", (lock,))
            pause = Pause(blocker, lock)
            try:
                yield pause
            finally:
                pause.release()
    finally:
        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            conn.execute(f"DROP TRIGGER lgd_test_pause_{lock} ON {table}")
            conn.execute(f"DROP FUNCTION {function}()")
