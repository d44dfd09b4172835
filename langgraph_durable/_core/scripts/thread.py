"""Calls of the scripts on one thread's keys, and their replies: one builder per script
(keys and arguments by the names of its header, see `registry`) and a parser where a reply
is more than a number."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from langgraph_durable._core.keys import (
    INTENTS,
    ThreadKeys,
    key_kind,
    key_type,
    parse_write_field,
)
from langgraph_durable._core.records import StoredWrite, unpack_write
from langgraph_durable._core.requests import Hot
from langgraph_durable._core.scripts.registry import SCRIPTS, Arg, Reply
from langgraph_durable.errors import TierUnavailableError


@dataclass(frozen=True, slots=True)
class Journal:
    """Where a write-behind write's journal entry goes, and the entry."""

    key: str  # the shard's journal
    bytes_key: str  # its byte counter
    payload: bytes
    max_entries: int  # the shard's bounds
    max_bytes: int


def _journal(journal: Journal, member: str) -> dict[str, Arg]:
    return {"journal": journal.key, "journal_bytes": journal.bytes_key,
            "payload": journal.payload, "member": member,
            "max_entries": journal.max_entries, "max_bytes": journal.max_bytes}


# ------------------------------------------------------------------------------ reads


@dataclass(frozen=True, slots=True)
class HotRecord:
    """One checkpoint as get.lua and list_unflushed.lua return it:
    ``id, field, value, ..., BLOBS, blob field, frame, ...``."""

    checkpoint_id: str
    fields: dict[bytes, bytes]  # c (frame), m (metadata), p (parent), bk, v (version)
    writes: list[StoredWrite]
    blobs: list[tuple[str, bytes]]  # ("<channel>\\0<version>", frame)

    @classmethod
    def parse(cls, reply: Sequence[Any]) -> HotRecord:
        fields: dict[bytes, bytes] = {}
        writes: list[StoredWrite] = []
        i = 1
        while reply[i] != Reply.BLOBS:
            name, value = reply[i], reply[i + 1]
            if name.startswith(b"w:"):
                task_id, idx = parse_write_field(name.decode())
                writes.append(unpack_write(task_id, idx, value))
            else:
                fields[name] = value
            i += 2
        blobs = [(reply[j].decode(), reply[j + 1]) for j in range(i + 1, len(reply), 2)]
        return cls(reply[0].decode(), fields, writes, blobs)

    @property
    def version(self) -> str:
        return self.fields.get(b"v", b"").decode()


def get(keys: ThreadKeys, ns: str, checkpoint_id: str, ttl: int, ticket: str,
        held: str = "", held_version: str = "") -> Hot:
    """Read ``checkpoint_id`` ("": the latest) of namespace ``ns``; ``held``: the id whose
    decoded copy the caller holds, at ``held_version``."""
    return SCRIPTS["get"].call(
        intents=keys.intents, index=keys.index(ns), blobs=keys.blobs(ns),
        registry=keys.registry, unflushed=keys.unflushed, versions=keys.versions,
        checkpoint_prefix=keys.checkpoint_prefix(ns), checkpoint_id=checkpoint_id, ttl=ttl,
        held=held, held_version=held_version, member_prefix=keys.unflushed_member(ns, ""),
        ticket=ticket,
    )


@dataclass(frozen=True, slots=True)
class Found:
    """get.lua's reply."""

    reply: Reply  # HIT, SAME, MISS or BUSY
    checkpoint_id: str = ""  # HIT, SAME
    dirty: bool = False  # MISS, BUSY: the namespace has entries not yet flushed
    ticket: bytes = b""  # MISS, BUSY: the warm ticket
    hit: Sequence[Any] = ()  # HIT: the checkpoint, as `record` reads it

    def record(self) -> HotRecord:
        """The checkpoint of a HIT.

        Raises:
            Damaged: a pending write's value does not decode.
        """
        return HotRecord.parse(self.hit)


def found(reply: Sequence[Any]) -> Found:
    """Parse get.lua's reply."""
    code = Reply(reply[0])
    if code is Reply.HIT:
        return Found(code, reply[1].decode(), hit=reply[1:])
    if code is Reply.SAME:
        return Found(code, reply[1].decode())
    return Found(code, dirty=bool(int(reply[1])), ticket=reply[2])


def known_empty(keys: ThreadKeys, ns: str, ticket: bytes) -> Hot:
    """Mark namespace ``ns`` read empty, unless anything happened since ``ticket``."""
    return SCRIPTS["known_empty"].call(
        intents=keys.intents, registry=keys.registry, unflushed=keys.unflushed,
        versions=keys.versions, index=keys.index(ns), ticket=ticket,
        field=keys.version_field(ns), member_prefix=keys.unflushed_member(ns, ""),
    )


def warm(keys: ThreadKeys, ns: str, *, checkpoint_id: str, now: int, ttl: int, frame: bytes,
         metadata: str | bytes, parent: str, refs: str, version: int, mode: str, ticket: bytes,
         blob_pairs: Sequence[Arg], fields: Sequence[Arg]) -> Hot:
    """Load a checkpoint read from Postgres (``mode`` "head" or "repair")."""
    return SCRIPTS["warm"].call(
        intents=keys.intents, index=keys.index(ns), blobs=keys.blobs(ns),
        checkpoint=keys.checkpoint(ns, checkpoint_id), registry=keys.registry,
        unflushed=keys.unflushed, versions=keys.versions, now=now, ttl=ttl,
        checkpoint_id=checkpoint_id, frame=frame, metadata=metadata, parent=parent, refs=refs,
        version=version, field=keys.version_field(ns), mode=mode,
        n=len(blob_pairs) // 2, ticket=ticket, blob_pairs=blob_pairs, fields=fields,
    )


def list_unflushed(keys: ThreadKeys) -> Hot:
    """Every checkpoint of the thread with entries not yet flushed."""
    return SCRIPTS["list_unflushed"].call(
        unflushed=keys.unflushed, checkpoints=keys.checkpoints, blobs=keys.blob_hashes)


def unflushed_records(reply: Sequence[Any]) -> tuple[bool, list[tuple[bytes, HotRecord]]]:
    """Parse list_unflushed.lua's reply: whether Redis holds every checkpoint with
    unflushed entries, and (b64 namespace, record) per checkpoint it holds."""
    return bool(int(reply[0])), [(rec[0], HotRecord.parse(rec[1:])) for rec in reply[1:]]


# ----------------------------------------------------------------------------- intents


def intent(keys: ThreadKeys, token: str, deadline: int, ttl: int, member_prefix: str) -> Hot:
    """Announce a write-through write (``member_prefix``: of the namespace it writes,
    "" for any)."""
    return SCRIPTS["intent"].call(
        intents=keys.intents, unflushed=keys.unflushed, versions=keys.versions, token=token,
        deadline=deadline, ttl=ttl, member_prefix=member_prefix)


def release(keys: ThreadKeys, token: str) -> Hot:
    """Clear a write intent (and its mark) that committed nothing, or a sweep's claim."""
    return SCRIPTS["release"].call(intents=keys.intents, versions=keys.versions, token=token)


def fence(keys: ThreadKeys, token: str, deadline: int, now: int) -> Hot:
    """A sweep's claim on the thread."""
    return SCRIPTS["fence"].call(intents=keys.intents, unflushed=keys.unflushed, token=token,
                                 deadline=deadline, now=now)


def drop_thread(keys: ThreadKeys, token: str, tombstone: int, ttl: int, *,
                only_flushed: bool) -> Hot:
    """Drop the thread's copy, leaving ``tombstone``; replies how many keys it had, or -1
    (``only_flushed``: the thread has entries not yet flushed)."""
    return SCRIPTS["drop_thread"].call(
        intents=keys.intents, registry=keys.registry, versions=keys.versions,
        unflushed=keys.unflushed, token=token, tombstone=tombstone, ttl=ttl,
        only_flushed="1" if only_flushed else "")


# ------------------------------------------------------------------------------ writes


@dataclass(frozen=True, slots=True)
class CheckpointFields:
    """What put.lua and put_behind.lua store of one checkpoint."""

    checkpoint_id: str
    frame: bytes
    metadata: str | bytes
    parent: str  # its parent's id, or ""
    refs: str  # its blob fields, a JSON array
    blob_pairs: Sequence[Arg]  # blob field, frame, ...
    keep: int  # checkpoints kept hot per namespace (0: all)
    token_v: str  # a new cache token


def _put_values(keys: ThreadKeys, ns: str, fields: CheckpointFields, *, token: str, ttl: int,
                version: int, head: bool, writes: bool = False) -> dict[str, Any]:
    return dict(
        intents=keys.intents, index=keys.index(ns), blobs=keys.blobs(ns),
        checkpoint=keys.checkpoint(ns, fields.checkpoint_id), registry=keys.registry,
        unflushed=keys.unflushed, versions=keys.versions, token=token, ttl=ttl,
        checkpoint_id=fields.checkpoint_id, frame=fields.frame, metadata=fields.metadata,
        parent=fields.parent, refs=fields.refs, keep=fields.keep,
        member_prefix=keys.unflushed_member(ns, ""), token_v=fields.token_v, version=version,
        head="1" if head else "0", field=keys.version_field(ns), writes="1" if writes else "0",
        n=len(fields.blob_pairs) // 2, blob_pairs=fields.blob_pairs,
    )


def put_through(keys: ThreadKeys, ns: str, fields: CheckpointFields, *, token: str, ttl: int,
                version: int, head: bool, writes: bool) -> Hot:
    """Store a checkpoint after its commit at ``version`` (``head``: committed as the
    namespace's head; ``writes``: Postgres holds pending writes of it) and clear the
    writer's intent ``token``."""
    return SCRIPTS["put"].call(**_put_values(keys, ns, fields, token=token, ttl=ttl,
                                             version=version, head=head, writes=writes))


def put_behind(keys: ThreadKeys, ns: str, fields: CheckpointFields, *, extends: bool,
               journal: Journal) -> Hot:
    """Store a checkpoint until its ``journal`` entry is flushed (``extends``: it must
    extend the namespace's head)."""
    values = _put_values(keys, ns, fields, token="", ttl=-1, version=0, head=extends)
    member = keys.unflushed_member(ns, fields.checkpoint_id)
    return SCRIPTS["put_behind"].call(**values, **_journal(journal, member))


def _writes_values(keys: ThreadKeys, ns: str, checkpoint_id: str, writes: Sequence[Arg], *,
                   token: str, ttl: int, token_v: str, version: int,
                   stored: bool = False) -> dict[str, Any]:
    return dict(
        intents=keys.intents, checkpoint=keys.checkpoint(ns, checkpoint_id),
        registry=keys.registry, unflushed=keys.unflushed, index=keys.index(ns),
        blobs=keys.blobs(ns), versions=keys.versions, token=token, ttl=ttl, token_v=token_v,
        version=version, field=keys.version_field(ns), stored=checkpoint_id if stored else "",
        n=len(writes) // 3, writes=writes,
    )


def put_writes_through(keys: ThreadKeys, ns: str, checkpoint_id: str, writes: Sequence[Arg],
                       *, token: str, ttl: int, token_v: str, version: int,
                       stored: bool) -> Hot:
    """Store pending writes (``writes``: field, value, mode per write) after their commit
    at ``version``, and clear the writer's intent ``token`` (``stored``: Postgres held
    their checkpoint)."""
    return SCRIPTS["put_writes"].call(**_writes_values(
        keys, ns, checkpoint_id, writes, token=token, ttl=ttl, token_v=token_v,
        version=version, stored=stored))


def stale_index(keys: ThreadKeys, ns: str, head: str) -> Hot:
    """Leave the namespace to Postgres if its copy ends before ``head``, Postgres's head
    (`stale_index.lua`)."""
    return SCRIPTS["stale_index"].call(registry=keys.registry, index=keys.index(ns), head=head)


def put_writes_behind(keys: ThreadKeys, ns: str, checkpoint_id: str, writes: Sequence[Arg],
                      *, token_v: str, journal: Journal) -> Hot:
    """Store pending writes until their ``journal`` entry is flushed."""
    values = _writes_values(keys, ns, checkpoint_id, writes, token="", ttl=-1,
                            token_v=token_v, version=0)
    member = keys.unflushed_member(ns, checkpoint_id)
    return SCRIPTS["put_writes_behind"].call(**values, **_journal(journal, member))


def refusal(reply: Any, journal: Journal) -> tuple[Reply, str] | None:
    """Parse a write-behind write's reply: ``None`` once journaled, else ``(COLD, "")`` or
    ``(CONFLICT, head)``.

    Raises:
        TierUnavailableError: the journal is full (``tier="cold"``: Postgres has not been
            taking its entries).
    """
    if not isinstance(reply, list):
        return None
    code = Reply(reply[0])
    if code is Reply.BACKLOG:
        entries, held = int(reply[1]), int(reply[2])
        full = (f"{journal.max_entries} entries Postgres has not taken yet"
                if entries >= journal.max_entries else
                f"{held} bytes Postgres has not taken yet (max_unflushed_bytes "
                f"{journal.max_bytes})")
        raise TierUnavailableError(
            f"Postgres (cold tier) is not taking writes and the write-behind journal holds "
            f"{full}; writes resume once it is back", tier="cold")
    return (code, reply[1].decode()) if code is Reply.CONFLICT else (code, "")


def repairs(request: Hot, prefix: str, lost_deadline: int) -> list[Hot]:
    """The calls that delete the keys of ``prefix`` that ``request`` names (among its keys
    and arguments; and the members of a thread's registry among them) when they hold
    another type than the scripts keep there (`keys.key_kind`). A thread's intents key is
    replaced by one intent until ``lost_deadline`` (ms since epoch; see `repair.lua`)."""
    named: dict[str, str | None] = {}
    for value in (*request.keys, *request.args):
        key = value.decode(errors="replace") if isinstance(value, bytes) else str(value)
        named[key] = key_kind(prefix, key) if key.startswith(prefix) else None
    return [SCRIPTS["repair"].call(key=key, expected=key_type(prefix, key),
                                   lost=lost_deadline if kind == INTENTS else "")
            for key, kind in named.items() if kind is not None]


def repaired(reply: Sequence[Any]) -> list[tuple[str, str, str]]:
    """The keys a `repairs` call deleted: ``(key, type found, type expected)`` each."""
    text = [item.decode() if isinstance(item, bytes) else str(item) for item in reply]
    return [(text[i], text[i + 1], text[i + 2]) for i in range(0, len(text), 3)]
