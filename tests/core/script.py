"""A scripted fake driver for the sans-I/O core: no server, no socket.

A script is a list of steps ``(expect, answer)``. The driver checks each request the
operation yields with ``expect`` (an assertion on the request), then sends ``answer`` back
— or throws it in, when it is an exception (e.g. ``TierUnavailableError``). The operation
must yield exactly the scripted requests: one more, or one fewer, fails the test.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from typing import Any

from langgraph_durable._core.keys import Layout
from langgraph_durable._core.requests import Cold, Hot, Pause
from langgraph_durable._core.scripts.registry import SCRIPTS
from langgraph_durable.errors import TierUnavailableError

Expect = Callable[[Any], None]
Step = tuple[Expect, Any]


class Script:
    """Drives one operation through its scripted steps; keeps every request it saw."""

    def __init__(self, steps: Sequence[Step]) -> None:
        self.steps = list(steps)
        self.requests: list[Any] = []

    def run(self, op: Generator[Any, Any, Any]) -> Any:
        """The operation's return value (or its exception, raised)."""
        request = next(op)
        for i, (expect, answer) in enumerate(self.steps):
            expect(request)
            self.requests.append(request)
            try:
                thrown = isinstance(answer, BaseException)
                request = op.throw(answer) if thrown else op.send(answer)
            except StopIteration as stop:
                assert i == len(self.steps) - 1, (
                    f"the operation ended after step {i}, before {self.steps[i + 1:]}")
                return stop.value
        raise AssertionError(f"the operation yielded {request!r} beyond the script")

    @property
    def done(self) -> bool:
        """Whether every step was used."""
        return len(self.requests) == len(self.steps)


def hot(script: str, keys: Sequence[str] | None = None) -> Expect:
    """Expect a Lua script call (and its keys, when given)."""

    def check(request: Any) -> None:
        assert isinstance(request, Hot), f"expected Hot({script!r}), got {request!r}"
        assert request.script.name == script, (
            f"expected script {script!r}, got {request.script.name!r}")
        if keys is not None:
            assert list(request.keys) == list(keys)

    return check


def empty_journal(prefix: str) -> Step:
    """The journal probe a whole-thread change starts with (it drains the journal first):
    journal, byte counter and dead letters read, answered with an empty journal."""
    layout = Layout(prefix)
    keys = [layout.journal(0), layout.journal_bytes(0), layout.dead(0)]
    return hot("journal_state", keys), [b"", b"", 0, 0, 0]


def cold(*queries: Any) -> Expect:
    """Expect one Postgres transaction of exactly these statements, in this order."""

    def check(request: Any) -> None:
        assert isinstance(request, Cold), f"expected Cold, got {request!r}"
        assert [s.query for s in request.statements] == list(queries), (
            f"expected {len(queries)} statement(s), got {[s.query for s in request.statements]}")

    return check


def pause() -> Expect:
    """Expect a wait."""

    def check(request: Any) -> None:
        assert isinstance(request, Pause), f"expected Pause, got {request!r}"

    return check


def effect(kind: type, **fields: Any) -> Expect:
    """Expect a tool effect of this type, with these field values."""

    def check(request: Any) -> None:
        assert isinstance(request, kind), f"expected {kind.__name__}, got {request!r}"
        for name, value in fields.items():
            assert getattr(request, name) == value, (
                f"{kind.__name__}.{name}: expected {value!r}, got {getattr(request, name)!r}")

    return check


def hot_down() -> TierUnavailableError:
    """What the driver throws in when Redis is unreachable."""
    error = TierUnavailableError("Redis (hot tier) is unavailable: refused", tier="hot")
    error.__cause__ = ConnectionRefusedError("refused")
    return error


def cold_down() -> TierUnavailableError:
    """What the driver throws in when Postgres is unreachable."""
    error = TierUnavailableError("Postgres (cold tier) is unavailable: refused", tier="cold")
    error.__cause__ = ConnectionRefusedError("refused")
    return error


def arg(request: Hot, name: str) -> Any:
    """The value ``request`` passes its script as argument ``name`` (one placed before any
    sequence, as the script's header numbers it)."""
    slots = list(SCRIPTS[request.script.name].args)
    position = [slot.name for slot in slots].index(name)
    assert not any(slot.many for slot in slots[:position]), f"{name} follows a sequence"
    return request.args[position]
