"""Conversions between LangGraph's objects and the stored form, shared by both tiers.

Encoding happens before any I/O, so a value the serializer rejects leaves nothing behind.
Decoding verifies every frame; a damaged one raises `Damaged`, which names the part.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import ormsgpack
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_serializable_checkpoint_metadata,
    writes_sort_key,
)

from langgraph_durable._core.codec import FrameError, dumps_metadata, type_tag, unstorable_json
from langgraph_durable._core.keys import MAX_ID_BYTES, MAX_NAME_BYTES, blob_field, check_text
from langgraph_durable._core.seal import Codec, blob_place, checkpoint_place, write_place
from langgraph_durable._core.strict import StrictSerializer, TypeKey, named_types
from langgraph_durable.errors import (
    ConfigurationError,
    CorruptStateError,
    RefusedTypeError,
    SerializationError,
)


@dataclass(frozen=True, slots=True)
class Location:
    """Where a checkpoint lives."""

    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str | None

    def config(self, checkpoint_id: str | None = None) -> RunnableConfig:
        return {
            "configurable": {
                "thread_id": self.thread_id,
                "checkpoint_ns": self.checkpoint_ns,
                "checkpoint_id": checkpoint_id or self.checkpoint_id,
            }
        }


def locate(config: RunnableConfig | None, *, need_id: bool = False) -> Location:
    """Read thread, namespace and checkpoint id from a config, validated.

    Raises:
        ConfigurationError: no ``thread_id``, or an id both tiers cannot store.
    """
    configurable = (config or {}).get("configurable") or {}
    if configurable.get("thread_id") is None:
        raise ConfigurationError(
            "config has no configurable.thread_id: pass "
            '{"configurable": {"thread_id": "..."}} to invoke/stream/get_state'
        )
    thread_id = check_text(configurable["thread_id"], "thread_id", MAX_ID_BYTES)
    ns = check_text(configurable.get("checkpoint_ns") or "", "checkpoint_ns", MAX_ID_BYTES)
    checkpoint_id = configurable.get("checkpoint_id")
    if checkpoint_id is not None:
        checkpoint_id = check_text(checkpoint_id, "checkpoint_id", MAX_NAME_BYTES)
    elif need_id:
        raise ConfigurationError("config has no configurable.checkpoint_id")
    return Location(thread_id, ns, checkpoint_id)


@dataclass(slots=True)
class StoredCheckpoint:
    """One checkpoint in stored form, as both tiers hold it."""

    where: Location
    checkpoint_id: str
    parent_id: str | None
    run_id: str | None
    frame: bytes
    metadata: str
    # JSON of the versions of the channels whose values are blobs (they have a value,
    # not `is_inline`)
    channel_versions: str
    # (channel, version, frame) for the versions this put introduces
    blobs: list[tuple[str, str, bytes]] = field(default_factory=list)
    # blob fields of every channel the checkpoint has a blob value for
    refs: list[str] = field(default_factory=list)
    # the types its values rebuild by name (`_core.stored_types`)
    types: set[TypeKey] = field(default_factory=set)


@dataclass(slots=True)
class StoredWrite:
    task_id: str
    idx: int
    channel: str
    task_path: str
    frame: bytes
    types: set[TypeKey] = field(default_factory=set)  # as `StoredCheckpoint.types`

    @property
    def special(self) -> bool:
        return self.idx < 0


class Damaged(Exception):
    """A stored frame failed verification; names the part that did."""

    def __init__(self, part: str, detail: str, channel: str | None = None) -> None:
        super().__init__(f"{part}: {detail}")
        self.part = part
        self.channel = channel


class Refused(Damaged):
    """A stored frame is genuine but names a type the serializer does not allow (yet)."""

    def __init__(self, part: str, error: RefusedTypeError, channel: str | None = None) -> None:
        super().__init__(part, str(error), channel)
        self.type_key = error.type_key


def _serialize(
    codec: Codec,
    value: Any,
    where: Location,
    checkpoint_id: str | None,
    channel: str | None,
    types: set[TypeKey],
) -> tuple[str, bytes]:
    """``value`` serialized; the types it rebuilds by name are added to ``types``."""
    try:
        typed = codec.dumps_typed(value)
        type_tag(typed[0])  # a frame holds it (checked before anything is stored)
        if isinstance(codec.serde, StrictSerializer):
            types |= named_types(typed)
        return typed
    except Exception as exc:
        raise SerializationError(
            f"cannot serialize the value of channel {channel!r} "
            f"(thread {where.thread_id!r}, namespace {where.checkpoint_ns!r}): {exc}",
            thread_id=where.thread_id,
            checkpoint_ns=where.checkpoint_ns,
            checkpoint_id=checkpoint_id,
            channel=channel,
        ) from exc


def _dump(
    codec: Codec,
    value: Any,
    place: bytes,
    where: Location,
    checkpoint_id: str | None,
    channel: str | None,
    types: set[TypeKey],
) -> bytes:
    return codec.frame(*_serialize(codec, value, where, checkpoint_id, channel, types), place)


def _check_size(
    sizes: dict[str | None, int], limit: int, where: Location, checkpoint_id: str
) -> None:
    """Refuse a checkpoint whose serialized values (``None``: the checkpoint's own body)
    add up to more than ``limit`` bytes, naming its largest channel."""
    total = sum(sizes.values())
    if total <= limit:
        return
    channel = max(sizes, key=lambda c: sizes[c])
    part = "the checkpoint itself" if channel is None else f"channel {channel!r}"
    raise SerializationError(
        f"checkpoint {checkpoint_id!r} of thread {where.thread_id!r} (namespace "
        f"{where.checkpoint_ns!r}) would store {total:,} serialized bytes, over "
        f"max_checkpoint_bytes ({limit:,}); the largest part is {part} with "
        f"{sizes[channel]:,} bytes. Keep large data outside the graph state (store a "
        "reference), or raise max_checkpoint_bytes",
        thread_id=where.thread_id,
        checkpoint_ns=where.checkpoint_ns,
        checkpoint_id=checkpoint_id,
        channel=channel,
    )


INLINE_STR_CHARS = 64
"""The longest string a checkpoint holds inline rather than as a blob (`is_inline`)."""


def is_inline(value: Any) -> bool:
    """Whether a channel value is stored inside its checkpoint rather than as a blob of
    its own: ``None``, a bool, a 64-bit int, a float or a short string. LangGraph's
    routing channels (``branch:to:<node>``) hold ``None``, so most steps write one blob
    row fewer; such a value is re-stored with every checkpoint, so long strings stay blobs.
    The test is on exact types (an ``IntEnum`` or a ``str`` subclass keeps its blob), and
    depends on the value alone, so a channel's value is inline in every checkpoint that
    holds it or in none."""
    kind = type(value)
    if value is None or kind is bool or kind is float:
        return True
    if kind is int:
        return bool(-(2**63) <= value < 2**63)
    return kind is str and len(value) <= INLINE_STR_CHARS


VERSION_DIGITS = 32
"""The zero-padded width of a version's counter (``get_next_version``: ``"0…03.0.63…"``)."""
_UNPADDED = {"channel_versions": "lgd_cv", "versions_seen": "lgd_vs"}
"""Where a frame holds a checkpoint's versions with their counters' padding left out."""
_PADDED = {short: name for name, short in _UNPADDED.items()}


class _Unpadded(Exception):
    """A version is a string not of ``get_next_version``'s form: keep the padding."""


def _unpad(version: Any) -> Any:
    if type(version) is not str:
        return version
    counter = version[:VERSION_DIGITS]
    if version[VERSION_DIGITS : VERSION_DIGITS + 1] != "." or not (
        counter.isascii() and counter.isdigit()
    ):
        raise _Unpadded
    return counter.lstrip("0") + version[VERSION_DIGITS:]


def _pad(version: Any) -> Any:
    if type(version) is not str:
        return version
    counter, dot, rest = version.partition(".")
    return counter.zfill(VERSION_DIGITS) + dot + rest


def _each_version(
    fn: Callable[[Any], Any], versions: dict[str, Any], seen: dict[str, dict[str, Any]]
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """``fn`` applied to every version of ``channel_versions`` and ``versions_seen``."""
    return (
        {ch: fn(v) for ch, v in versions.items()},
        {node: {ch: fn(v) for ch, v in by_channel.items()} for node, by_channel in seen.items()},
    )


def checkpoint_body(checkpoint: Checkpoint, inline: dict[str, Any]) -> dict[str, Any]:
    """What a checkpoint's frame holds: the checkpoint with ``inline`` as its channel
    values and, when every string version is of ``get_next_version``'s form, its versions
    without the zero padding of their counters, under other keys (`_UNPADDED`: about 30
    bytes a version, a third of a chat graph's frame; a process too old to restore them
    finds no ``channel_versions`` and fails rather than compare versions wrongly).
    `stored_checkpoint` restores them exactly."""
    try:
        versions, seen = _each_version(_unpad, checkpoint.get("channel_versions", {}),
                                       checkpoint.get("versions_seen", {}))
    except _Unpadded:
        renamed: dict[str, str] = {}
        unpadded: dict[str, Any] = {}
    else:
        renamed, unpadded = _UNPADDED, {"channel_versions": versions, "versions_seen": seen}
    body = {renamed.get(k, k): unpadded.get(k, v) for k, v in checkpoint.items()}
    body["channel_values"] = inline
    return body


def stored_checkpoint(body: dict[str, Any]) -> Checkpoint:
    """The checkpoint a frame's body holds (`checkpoint_body`), its versions padded again;
    a body written before versions were stored unpadded is the checkpoint itself."""
    if _UNPADDED["channel_versions"] not in body:
        return cast(Checkpoint, body)
    versions, seen = _each_version(_pad, body[_UNPADDED["channel_versions"]],
                                   body.get(_UNPADDED["versions_seen"], {}))
    padded = {_UNPADDED["channel_versions"]: versions, _UNPADDED["versions_seen"]: seen}
    return cast(Checkpoint, {_PADDED.get(k, k): padded.get(k, v) for k, v in body.items()})


def encode_checkpoint(
    codec: Codec,
    config: RunnableConfig,
    checkpoint: Checkpoint,
    metadata: CheckpointMetadata,
    new_versions: ChannelVersions,
    max_bytes: int = 64 * 1024 * 1024,
) -> StoredCheckpoint:
    """Encode a ``put``'s arguments; raises before any I/O if a value cannot be stored or
    the put would store more than ``max_bytes`` serialized bytes."""
    where = locate(config)
    checkpoint_id = check_text(checkpoint["id"], "checkpoint id", MAX_NAME_BYTES)
    values: dict[str, Any] = checkpoint["channel_values"]
    versions: ChannelVersions = checkpoint["channel_versions"]
    inline = {ch: v for ch, v in values.items() if ch in versions and is_inline(v)}
    body = checkpoint_body(checkpoint, inline)
    for channel, version in versions.items():
        check_text(channel, "channel name", MAX_NAME_BYTES)
        check_text(str(version), f"version of channel {channel!r}", MAX_NAME_BYTES)
    t, ns = where.thread_id, where.checkpoint_ns
    types: set[TypeKey] = set()
    serialized = {
        channel: (
            str(version),
            _serialize(codec, values[channel], where, checkpoint_id, channel, types),
        )
        for channel, version in new_versions.items()
        if channel in values and channel not in inline
    }
    try:
        body_typed = _serialize(codec, body, where, checkpoint_id, None, types)
    except SerializationError:
        for channel, value in inline.items():  # name the value that failed, if one did
            _serialize(codec, value, where, checkpoint_id, channel, set())
        raise
    sizes: dict[str | None, int] = {c: len(typed[1]) for c, (_, typed) in serialized.items()}
    sizes[None] = len(body_typed[1])
    _check_size(sizes, max_bytes, where, checkpoint_id)
    blobs = [
        (ch, version, codec.frame(*typed, sealed_to(codec, blob_place, t, ns, ch, version)))
        for ch, (version, typed) in serialized.items()
    ]
    meta = get_serializable_checkpoint_metadata(config, metadata)
    metadata_json = _metadata_json(meta, where, checkpoint_id)
    run_id = meta.get("run_id")
    # The channels with a blob value: what Postgres looks blobs up by. A channel with no
    # value here (a routing channel its step consumed, most of them at most steps) has
    # no blob to find, and its version is in the frame with every other.
    blobbed = [ch for ch in values if ch in versions and ch not in inline]
    return StoredCheckpoint(
        where=where,
        checkpoint_id=checkpoint_id,
        parent_id=where.checkpoint_id,
        run_id=check_text(str(run_id), "metadata run_id", MAX_NAME_BYTES)
        if run_id is not None
        else None,
        frame=codec.frame(
            *body_typed,
            sealed_to(codec, checkpoint_place, t, ns, checkpoint_id, where.checkpoint_id),
        ),
        metadata=metadata_json,
        channel_versions=json.dumps({ch: str(versions[ch]) for ch in blobbed}),
        blobs=blobs,
        refs=[blob_field(ch, versions[ch]) for ch in blobbed],
        types=types,
    )


def _metadata_json(meta: CheckpointMetadata, where: Location, checkpoint_id: str) -> str:
    """``meta`` as JSON text Postgres ``jsonb`` can hold. The text is checked; the value
    is walked for what ``jsonb`` refuses (`unstorable_json` names it) only when the text
    may hold some: NaN or an infinity fail the encoding, an unpaired surrogate fails the
    text's, a NUL character is escaped as ``\\u0000``.

    Raises:
        SerializationError: the metadata is not JSON, is nested too deep to encode, or
            ``jsonb`` refuses it.
    """
    try:
        text = dumps_metadata(meta)
        text.encode()
    except RecursionError:  # the encoder walks nested values on Python's stack
        raise SerializationError(
            "checkpoint metadata is nested too deep to encode as JSON (deeper than Python's "
            "recursion limit); store deeply nested data in the graph's state instead",
            thread_id=where.thread_id,
            checkpoint_ns=where.checkpoint_ns,
            checkpoint_id=checkpoint_id,
        ) from None
    except (TypeError, ValueError) as exc:  # UnicodeEncodeError is a ValueError
        _refuse_unstorable(meta, where, checkpoint_id)
        raise SerializationError(
            f"checkpoint metadata is not JSON-serializable: {exc}",
            thread_id=where.thread_id,
            checkpoint_ns=where.checkpoint_ns,
            checkpoint_id=checkpoint_id,
        ) from exc
    if "\\u0000" in text:  # a NUL, or an escaped backslash before "u0000"
        _refuse_unstorable(meta, where, checkpoint_id)
    return text


def _refuse_unstorable(meta: CheckpointMetadata, where: Location, checkpoint_id: str) -> None:
    if problem := unstorable_json(meta, "metadata"):
        raise SerializationError(
            f"checkpoint metadata cannot be stored (Postgres jsonb refuses it): {problem}",
            thread_id=where.thread_id,
            checkpoint_ns=where.checkpoint_ns,
            checkpoint_id=checkpoint_id,
        )


def encode_writes(
    codec: Codec,
    where: Location,
    writes: Sequence[tuple[str, Any]],
    task_id: str,
    task_path: str,
) -> list[StoredWrite]:
    """Encode a ``put_writes``'s writes, with LangGraph's indices for special channels.

    A special channel written twice in one call (two ``interrupt()`` in one node) keeps the
    last value, as LangGraph's own savers do.
    """
    task_id = check_text(task_id, "task_id", MAX_NAME_BYTES)
    task_path = check_text(task_path, "task_path")
    checkpoint_id = where.checkpoint_id or ""
    by_idx: dict[int, StoredWrite] = {}
    for position, (channel, value) in enumerate(writes):
        idx = WRITES_IDX_MAP.get(channel, position)
        check_text(channel, "channel name", MAX_NAME_BYTES)
        place = sealed_to(
            codec,
            write_place,
            where.thread_id,
            where.checkpoint_ns,
            checkpoint_id,
            task_id,
            idx,
            channel,
            task_path,
        )
        types: set[TypeKey] = set()
        frame = _dump(codec, value, place, where, where.checkpoint_id, channel, types)
        by_idx[idx] = StoredWrite(task_id, idx, channel, task_path, frame, types)
    return list(by_idx.values())


def pack_write(write: StoredWrite) -> bytes:
    """The hot tier's value for one write (the frame keeps its own checksum)."""
    return ormsgpack.packb([write.channel, write.task_path, write.frame])


def unpack_write(task_id: str, idx: int, value: bytes) -> StoredWrite:
    try:
        channel, task_path, frame = ormsgpack.unpackb(value)
    except (ormsgpack.MsgpackDecodeError, ValueError) as exc:
        raise Damaged("write", f"task {task_id} idx {idx}: undecodable envelope") from exc
    return StoredWrite(task_id, idx, channel, task_path, frame)


def sealed_to(codec: Codec, make: Callable[..., bytes], *parts: Any) -> bytes:
    """The place (`seal.place`) a frame is sealed to, made by ``make`` from ``parts``. A
    checksum binds no place, so without a key none is built (building one costs as much as
    checking the frame)."""
    return make(*parts) if codec.seal.keyed else b""


def load(codec: Codec, frame: bytes, place: bytes, part: str, channel: str | None = None) -> Any:
    """Verify a frame against its place, then decode it.

    Raises:
        Refused: the value names a type the serializer does not allow.
        Damaged: the frame fails its seal, or its value cannot be decoded.
    """
    try:
        typed = codec.open(frame, place)
    except FrameError as exc:
        raise Damaged(part, str(exc), channel) from exc
    try:
        return codec.loads_typed(typed)
    except RefusedTypeError as exc:
        raise Refused(part, exc, channel) from exc
    except Exception as exc:
        raise Damaged(part, f"cannot deserialize: {exc}", channel) from exc


def load_write(codec: Codec, where: Location, checkpoint_id: str, write: StoredWrite) -> Any:
    """The value of a pending write of ``checkpoint_id``, verified against its place."""
    place = sealed_to(
        codec,
        write_place,
        where.thread_id,
        where.checkpoint_ns,
        checkpoint_id,
        write.task_id,
        write.idx,
        write.channel,
        write.task_path,
    )
    return load(codec, write.frame, place, "write", write.channel)


def build_tuple(
    codec: Codec,
    where: Location,
    checkpoint_id: str,
    parent_id: str | None,
    frame: bytes,
    metadata: dict[str, Any],
    blobs: Iterable[tuple[str, str, bytes]],
    writes: Iterable[StoredWrite],
) -> CheckpointTuple:
    """Decode a checkpoint's stored parts into a `CheckpointTuple`; ``blobs`` are
    ``(channel, version, frame)``. Each frame is verified against its place first.

    Raises:
        Damaged: a frame failed verification or could not be decoded.
    """
    t, ns = where.thread_id, where.checkpoint_ns
    place = sealed_to(codec, checkpoint_place, t, ns, checkpoint_id, parent_id)
    checkpoint = stored_checkpoint(load(codec, frame, place, "checkpoint"))
    # small scalars ride inline in the checkpoint (`is_inline`); a checkpoint stored
    # before they did has none there, and a blob for each
    checkpoint["channel_values"] = {
        **checkpoint.get("channel_values", {}),
        **{
            ch: load(codec, b, sealed_to(codec, blob_place, t, ns, ch, version), "blob", ch)
            for ch, version, b in blobs
        },
    }
    ordered = sorted(writes, key=lambda w: writes_sort_key(w.task_path, w.task_id, w.idx))
    pending = [(w.task_id, w.channel, load_write(codec, where, checkpoint_id, w)) for w in ordered]
    return CheckpointTuple(
        config=where.config(checkpoint_id),
        checkpoint=checkpoint,
        metadata=metadata,  # type: ignore[arg-type]
        parent_config=where.config(parent_id) if parent_id else None,
        pending_writes=pending,
    )


def corrupt(
    where: Location, checkpoint_id: str, damage: Damaged, tier: str
) -> CorruptStateError | RefusedTypeError:
    """The public error for damage no other tier could repair (`RefusedTypeError` for a
    type refused: the frame is genuine, its type is not allowed)."""
    if isinstance(damage, Refused):
        name = ".".join(damage.type_key)
        return RefusedTypeError(
            f"stored {damage.part} of thread {where.thread_id!r}, namespace "
            f"{where.checkpoint_ns!r}, checkpoint {checkpoint_id!r}"
            + (f", channel {damage.channel!r}" if damage.channel else "")
            + f" names type {name}, a refused type: the application never stored it "
            "through this schema, so it was not decoded. If the application stores it, "
            f"allow it with DurableSaver(allowed_types=[{name}])",
            type_key=damage.type_key,
            thread_id=where.thread_id,
            checkpoint_ns=where.checkpoint_ns,
            checkpoint_id=checkpoint_id,
            channel=damage.channel,
        )
    return CorruptStateError(
        f"stored {damage.part} of thread {where.thread_id!r}, namespace "
        f"{where.checkpoint_ns!r}, checkpoint {checkpoint_id!r}"
        + (f", channel {damage.channel!r}" if damage.channel else "")
        + f" is damaged in the {tier} tier ({damage}) and no good copy exists",
        thread_id=where.thread_id,
        checkpoint_ns=where.checkpoint_ns,
        checkpoint_id=checkpoint_id,
        channel=damage.channel,
    )
