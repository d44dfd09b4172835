"""The hot tier's Lua scripts, read from the ``.lua`` files of this package.

Each ``<name>.lua`` beside this module is one script, named by its file; ``includes/``
holds the text scripts share. A script's header says what it does and gives its keys and
arguments by position and name, one per line, then its replies::

    -- KEYS[1] intents     the thread's write intents
    -- ARGV[1] token       ...
    -- ARGV[4] n           number of pairs that follow
    -- ARGV[5..] pairs...  field, value (n pairs)
    -- ARGV[5+2n] payload  (a position after a sequence: any text in the brackets)

A name written ``name...`` is a sequence of values laid out flat from that position on;
the positions after it depend on its length. Numbered positions are checked when the
scripts load: a header that skips or repeats one fails the import. Header lines of an
included file count where the include stands (a write-behind script includes the write
whose keys and arguments come first). Directives:

    --!include <file>   the text of ``includes/<file>`` here (``replies``: the `Reply`
                        codes, as Lua locals of the same names)
    --!replicated       with ``redis_replica_acks``, its effect must reach the replicas
                        before the operation goes on (the drivers send ``WAIT`` after
                        it): a write intent keeps readers off a copy a failover could
                        leave behind, and a journal entry is the write itself until flushed

Redis gets a script's code without its comment lines.

`Script.call` lays out a call's keys and arguments in header order from their names, so a
position is written once, in the header; the builders of `scripts.thread` and
`scripts.shards` (and `scripts.store`, the long-term memory store's) are the only callers.
"""

from __future__ import annotations

import enum
import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Any

from langgraph_durable._core.requests import Hot

Arg = str | bytes | int


class Reply(enum.IntEnum):
    """The codes of the scripts' replies, where Python tells replies or their parts apart
    (each script's header says which it returns, and where)."""

    HIT = 1  # the checkpoint, with its blobs and writes
    SAME = 2  # the caller's decoded copy is current
    MISS = 3  # the copy does not hold it
    BUSY = 4  # a write is in flight: read Postgres
    COLD = 5  # the write goes through Postgres
    CONFLICT = 6  # the write does not extend the namespace's head
    BACKLOG = 7  # the write-behind journal is full
    BLOBS = 8  # in a checkpoint record: its blobs follow (its fields come before)


@dataclass(frozen=True, slots=True)
class Slot:
    """One argument of a script: a value, or (``many``) a sequence laid out flat."""

    name: str
    many: bool = False


@dataclass(frozen=True, slots=True)
class Script:
    """One script: its name, keys and arguments in order, and its text."""

    name: str
    keys: tuple[str, ...]
    args: tuple[Slot, ...]
    replicated: bool
    source: str = field(repr=False)
    sha: str = field(repr=False)
    names: frozenset[str] = field(repr=False)  # of its keys and arguments
    sequences: bool = field(repr=False)  # whether an argument is a sequence

    def call(self, **values: Any) -> Hot:
        """The request that runs this script with ``values`` (every key and argument of
        the header, by name; a sequence's values are laid out flat).

        Raises:
            TypeError: a name is missing or not in the header.
        """
        try:
            keys = [values[name] for name in self.keys]
            if not self.sequences:
                args = [values[slot.name] for slot in self.args]
            else:
                args = []
                for slot in self.args:
                    if slot.many:
                        args.extend(values[slot.name])
                    else:
                        args.append(values[slot.name])
        except KeyError:
            missing = sorted(self.names - set(values))
            raise TypeError(f"{self.name} script: no value for {missing}") from None
        if len(values) != len(self.names):
            unknown = sorted(set(values) - self.names)
            raise TypeError(f"{self.name} script: {unknown} not in its header")
        return Hot(self, keys, args)


_HEADER = re.compile(r"^-- (KEYS|ARGV)\[([^\]]+)\] (\w+)(\.\.\.)?(?:\s|$)")
_INCLUDE = "--!include "


def _replies() -> str:
    return "".join(f"local {reply.name} = {reply.value}\n" for reply in Reply)


def _expand(text: str, includes: Traversable, depth: int = 0) -> str:
    """``text`` with each include directive replaced by the included text."""
    if depth > 4:
        raise ValueError("includes nest too deep")
    out = []
    for line in text.splitlines(keepends=True):
        if line.startswith(_INCLUDE):
            name = line[len(_INCLUDE):].strip()
            included = _replies() if name == "replies" else (includes / name).read_text()
            out.append(_expand(included, includes, depth + 1))
        else:
            out.append(line)
    return "".join(out)


def _parse(name: str, text: str, source: str) -> Script:
    """The script ``name`` from its file's ``text`` (``source``: with includes expanded).

    Raises:
        ValueError: the header's positions skip or repeat one, or a name repeats.
    """
    keys: list[str] = []
    args: list[Slot] = []
    for line in source.splitlines():  # an included write's header comes first
        found = _HEADER.match(line)
        if found is None:
            continue
        kind, position, label, many = found.groups()
        if kind == "KEYS":
            if position != str(len(keys) + 1):
                raise ValueError(
                    f"{name}.lua: KEYS[{position}] {label} is not KEYS[{len(keys) + 1}]")
            keys.append(label)
            continue
        counted = not any(slot.many for slot in args)
        first = re.match(r"\d+", position)
        if counted and (first is None or int(first.group()) != len(args) + 1):
            raise ValueError(f"{name}.lua: ARGV[{position}] {label} is not ARGV[{len(args) + 1}]")
        if counted and position.isdigit() != (many is None):
            raise ValueError(f"{name}.lua: ARGV[{position}] {label}: a sequence spans positions")
        args.append(Slot(label, many is not None))
    names = keys + [slot.name for slot in args]
    if len(set(names)) != len(names):
        raise ValueError(f"{name}.lua: a name appears twice among its keys and arguments")
    # what Redis gets: the code, without the comment lines (sent with every batch)
    code = "".join(line for line in source.splitlines(keepends=True)
                   if not line.lstrip().startswith("--"))
    return Script(name, tuple(keys), tuple(args), "--!replicated" in text.splitlines(),
                  code, hashlib.sha1(code.encode()).hexdigest(), frozenset(names),
                  any(slot.many for slot in args))


def _load() -> dict[str, Script]:
    folder = resources.files(__package__)
    includes = folder / "includes"
    scripts = {}
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".lua"):
            name = entry.name.removesuffix(".lua")
            text = entry.read_text()
            scripts[name] = _parse(name, text, _expand(text, includes))
    return scripts


SCRIPTS: Mapping[str, Script] = _load()
