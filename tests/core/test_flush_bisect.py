"""The flush's poison containment, server-free: the sans-I/O `flush_batch` driven by a
scripted fake driver that plays Redis and a Postgres refusing one thread's rows."""

from __future__ import annotations

import math
from typing import Any

import ormsgpack
import pytest
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from langgraph_durable._core import journal
from langgraph_durable._core.context import Breaker, Context
from langgraph_durable._core.journal import pack_checkpoint_entry
from langgraph_durable._core.keys import Layout
from langgraph_durable._core.records import Location, StoredCheckpoint
from langgraph_durable._core.requests import Cold, Hot
from langgraph_durable._core.sql import Statements
from langgraph_durable._tiers import sync
from langgraph_durable._tiers.common import Effects, told
from langgraph_durable.config import SaverConfig
from langgraph_durable.errors import TierUnavailableError, WriteRejectedError


def no_effects(request: Any) -> Any:
    """A flush yields storage requests only: any tool effect is a bug."""
    raise AssertionError(f"a flush yielded a tool effect: {request!r}")


class ScriptedTiers(sync.Tiers):
    """The real driver loop (`sync.Tiers.run`) over a scripted ``execute``: hands out one
    journal batch, refuses (or drops) any transaction touching ``bad``, and records what
    was committed and acknowledged. No client is created."""

    def __init__(self, raw: list[Any], bad: str, error: Exception) -> None:
        self.raw, self.bad, self.error = raw, bad, error
        self.transactions = 0
        self.committed: set[str] = set()
        self.ack: list[Any] | None = None
        self.released: list[Any] | None = None
        self.learn = told(_ctx().config)

    def execute(self, request: Any, effects: Effects, built: Layout) -> Any:
        if isinstance(request, Hot):
            if request.script.name == "flush_read":
                return self.raw
            if request.script.name == "journal_release":
                self.released = list(request.args)
                return len(self.released) - 3
            self.ack = list(request.args)
            return 1
        assert isinstance(request, Cold)
        self.transactions += 1
        threads = {t for s in request.statements for t in s.params.get("thread_ids", [])}
        if self.bad in threads:
            raise self.error
        self.committed |= threads
        return [None] * (len(request.statements) - 1) + [[]]


def _raw(threads: list[str]) -> list[Any]:
    out = []
    for i, thread in enumerate(threads):
        stored = StoredCheckpoint(Location(thread, "", None), f"1f0-{i:04d}", None, None,
                                  b"\x01", "{}", "{}")
        out.append([f"{1000 + i}-0".encode(), [b"d", pack_checkpoint_entry(stored)]])
    return out


def _ctx() -> Context:
    config = SaverConfig(write_mode="behind", key_prefix="p")
    return Context(config=config, statements=Statements("public"),
                   serde=JsonPlusSerializer(), breaker=Breaker(1.0), consumer="c")


@pytest.mark.parametrize("position", [0, 77, 255])
def test_one_rejected_entry_of_256_is_isolated_in_log_steps(position: int) -> None:
    """256 entries, one of which Postgres refuses: every other thread is committed, the
    one entry is handed to the ack as rejected (with Postgres' reason), all 256 are
    acknowledged, and the split costs at most 2·log2(256)+1 transactions."""
    threads = [f"t{i}" for i in range(256)]
    tiers = ScriptedTiers(_raw(threads), threads[position],
                          WriteRejectedError("violates check constraint", sqlstate="23514"))
    moved = tiers.run(journal.flush_batch(_ctx()), no_effects)
    assert moved == 256
    assert tiers.committed == set(threads) - {threads[position]}
    assert tiers.transactions <= 2 * math.log2(256) + 1
    assert tiers.ack is not None
    _, _, n, rejected = tiers.ack[:4]
    assert (n, rejected) == (256, 1)
    entry_id, reason = tiers.ack[4 + 5 * 256: 4 + 5 * 256 + 2]
    assert entry_id == f"{1000 + position}-0"
    assert repr(threads[position]) in reason and "violates check constraint" in reason


def test_an_outage_is_not_split_and_acknowledges_nothing() -> None:
    """A connection failure is an outage, not a rejection: the batch is tried once, the
    error reaches the caller, and no entry is acknowledged: they stay pending, released
    for the next flusher or drain to take at once."""
    threads = [f"t{i}" for i in range(8)]
    tiers = ScriptedTiers(_raw(threads), threads[3],
                          TierUnavailableError("Postgres (cold tier) is unavailable", tier="cold"))
    with pytest.raises(TierUnavailableError):
        tiers.run(journal.flush_batch(_ctx()), no_effects)
    assert tiers.transactions == 1 and tiers.ack is None
    assert tiers.released is not None and tiers.released[3:] == [f"{1000 + i}-0" for i in range(8)]


def test_an_undecodable_entry_is_rejected_without_a_transaction_of_its_own() -> None:
    """Bytes that are not a journal entry go to the dead letters; the rest commit at once."""
    raw = _raw(["a", "b"])
    raw.insert(1, [b"1500-0", [b"d", ormsgpack.packb(["?", 1])]])
    tiers = ScriptedTiers(raw, "nobody", WriteRejectedError("unused"))
    assert tiers.run(journal.flush_batch(_ctx()), no_effects) == 3
    assert tiers.transactions == 1 and tiers.committed == {"a", "b"}
    assert tiers.ack is not None and tiers.ack[3] == 1
    assert tiers.ack[4 + 5 * 3] == "1500-0"
