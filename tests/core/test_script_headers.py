"""The Lua scripts' headers against their builders and their own code: each builder's call
has the keys and arguments its script's header names, the code reads no key or argument
position the header does not give, and the registry refuses a header that skips one."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

import langgraph_durable
from langgraph_durable._core.keys import Layout
from langgraph_durable._core.requests import Hot
from langgraph_durable._core.scripts import shards, store, thread
from langgraph_durable._core.scripts.registry import SCRIPTS, Script, _parse
from tests.core.script import arg

LAYOUT = Layout("p")
KEYS = LAYOUT.thread("t")
JOURNAL = thread.Journal("j", "jb", b"payload", 10, 100)
PAIRS = ["ch\x001", b"blob", "ch\x002", b"blob"]  # two blob pairs
WRITES = ["w:0:t", b"v", "n", "w:1:t", b"v", "r", "w:2:t", b"v", "n"]  # three writes


FIELDS = thread.CheckpointFields(checkpoint_id="c", frame=b"f", metadata=b"{}", parent="",
                                 refs="[]", blob_pairs=PAIRS, keep=0, token_v="v")


# Each script's call through its builder, with the values its sequences got (in order).
CALLS: dict[str, tuple[Hot, list[list[Any]]]] = {
    "get": (thread.get(KEYS, "ns", "", 0, "ticket"), []),
    "known_empty": (thread.known_empty(KEYS, "ns", b"ticket"), []),
    "warm": (thread.warm(KEYS, "ns", checkpoint_id="c", now=1, ttl=0, frame=b"f",
                         metadata=b"{}", parent="", refs="[]", version=1, mode="head",
                         ticket=b"t", blob_pairs=PAIRS, fields=["v", "tok"]),
             [PAIRS, ["v", "tok"]]),
    "list_unflushed": (thread.list_unflushed(KEYS), []),
    "intent": (thread.intent(KEYS, "tok", 1, 0, ""), []),
    "release": (thread.release(KEYS, "tok"), []),
    "fence": (thread.fence(KEYS, "tok", 2, 1), []),
    "drop_thread": (thread.drop_thread(KEYS, "", 1, 0, only_flushed=True), []),
    # the write-through calls with the values of their write-behind twins, so that the two
    # compare (test_the_journal_entry_follows_the_write)
    "put": (thread.put_through(KEYS, "ns", FIELDS, token="", ttl=-1, version=0, head=False,
                             writes=False),
            [PAIRS]),
    "put_behind": (thread.put_behind(KEYS, "ns", FIELDS, extends=False, journal=JOURNAL),
                   [PAIRS]),
    "put_writes": (thread.put_writes_through(KEYS, "ns", "c", WRITES, token="", ttl=-1,
                                             token_v="v", version=0, stored=False), [WRITES]),
    "put_writes_behind": (thread.put_writes_behind(KEYS, "ns", "c", WRITES, token_v="v",
                                                   journal=JOURNAL), [WRITES]),
    "marks": (shards.marks(LAYOUT, 0, 5), []),
    "flush_read": (shards.flush_read(LAYOUT, 0, group="g", consumer="c", count=1, reclaim=1,
                                     cap=1, forget=0), []),
    "flush_ack": (shards.flush_ack(LAYOUT, 0, group="g", ttl=0, entries=[1, 2, 3, 4, 5],
                                   rejected=[1, "why"], versions=[]),
                  [[1, 2, 3, 4, 5], [1, "why"], []]),
    "journal_state": (shards.journal_state(LAYOUT, 0), []),
    "incarnation": (shards.incarnation(LAYOUT, "check", "run", "tok", 1000), []),
    "incarnation_scan": (shards.incarnation_scan(LAYOUT, "tok", 1000, "0", 10), []),
    "journal_leave": (shards.journal_leave(LAYOUT, 0, "g", "c"), []),
    "journal_release": (shards.journal_release(LAYOUT, 0, "g", "c", 10, ["1-0", "2-0"]),
                        [["1-0", "2-0"]]),
    "dead_letters": (shards.dead_letters(LAYOUT, 0, "-", 10), []),
    "store_get": (store.get("e", "t", 30_000), []),
    "store_fill": (store.fill("e", "t", 1, "d", 60), []),
    "store_hold": (store.hold("e", 1000), []),
    "store_wrote": (store.wrote("e", 1, "d", 60), []),
    "dead_letter": (shards.dead_letter(LAYOUT, 0, unflushed="u", letter="1-0", action="drop",
                                       member="m"), []),
    "stale_index": (thread.stale_index(KEYS, "ns", "c"), []),
    "repair": (thread.repairs(thread.release(KEYS, "tok"), "p", 0)[0], []),
}


def test_every_script_has_a_builder_here() -> None:
    """The table above covers the registry: a new script comes with its builder's check."""
    assert set(CALLS) == set(SCRIPTS)


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_a_builder_passes_what_its_header_names(name: str) -> None:
    """The call has one key per KEYS line and one argument per ARGV line (a sequence: the
    values given), and runs the script it was built for."""
    request, sequences = CALLS[name]
    script = SCRIPTS[name]
    assert request.script is script
    assert len(request.keys) == len(script.keys)
    fixed = [slot for slot in script.args if not slot.many]
    assert len(request.args) == len(fixed) + sum(len(values) for values in sequences)
    assert sum(slot.many for slot in script.args) == len(sequences)


@pytest.mark.parametrize(("name", "sequence", "stride"), [
    ("put", PAIRS, 2), ("put_behind", PAIRS, 2), ("warm", PAIRS, 2),
    ("put_writes", WRITES, 3), ("put_writes_behind", WRITES, 3)])
def test_a_count_matches_its_sequence(name: str, sequence: list[Any], stride: int) -> None:
    """A count argument ``n`` says how many groups its sequence holds."""
    assert arg(CALLS[name][0], "n") == len(sequence) // stride


def test_the_journal_entry_follows_the_write() -> None:
    """A write-behind call is its write-through twin's, then the journal's keys and the
    entry's payload, member and bounds."""
    for through, behind in (("put", "put_behind"), ("put_writes", "put_writes_behind")):
        plain, journaled = CALLS[through][0], CALLS[behind][0]
        assert list(journaled.keys) == [*plain.keys, JOURNAL.key, JOURNAL.bytes_key]
        assert list(journaled.args) == [*plain.args, JOURNAL.payload,
                                        KEYS.unflushed_member("ns", "c"),
                                        JOURNAL.max_entries, JOURNAL.max_bytes]


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_the_code_reads_only_what_its_header_gives(name: str) -> None:
    """Every ``KEYS[i]`` and ``ARGV[i]`` with a number in the code is a position the header
    gives (``ARGV``: before its first sequence)."""
    script: Script = SCRIPTS[name]
    keys = {int(i) for i in re.findall(r"KEYS\[(\d+)\]", script.source)}
    args = {int(i) for i in re.findall(r"ARGV\[(\d+)\]", script.source)}
    before = next((i for i, slot in enumerate(script.args) if slot.many), len(script.args))
    assert keys <= set(range(1, len(script.keys) + 1))
    assert args <= set(range(1, before + 1))


def test_a_header_that_skips_a_position_does_not_load() -> None:
    """Positions are checked as the scripts load: a gap or a repeat fails the import."""
    with pytest.raises(ValueError, match=r"KEYS\[3\]"):
        _parse("bad", "", "-- KEYS[1] a\n-- KEYS[3] b\n")
    with pytest.raises(ValueError, match=r"ARGV\[1\]"):
        _parse("bad", "", "-- KEYS[1] a\n-- ARGV[1] b\n-- ARGV[1] c\n")
    with pytest.raises(ValueError, match="twice"):
        _parse("bad", "", "-- KEYS[1] a\n-- ARGV[1] a\n")


PACKAGE = Path(langgraph_durable.__file__).parent
SCRIPT_CALL = re.compile(r'SCRIPTS\["(\w+)"\]')


def test_each_script_has_one_builder_and_nothing_else_builds_a_call() -> None:
    """A script's name appears once in the package's Python, in its builder; no other
    module makes a `Hot` request by hand."""
    named: list[str] = []
    makers: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text()
        named += SCRIPT_CALL.findall(text)
        if re.search(r"\bHot\(", text):
            makers.add(str(path.relative_to(PACKAGE)))
    assert sorted(named) == sorted(SCRIPTS)
    assert makers == {"_core/requests.py", "_core/scripts/registry.py"}
