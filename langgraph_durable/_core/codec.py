"""Blob framing shared by both tiers: the same bytes live in Redis and in Postgres.

A frame's body is ``flags+len(type)(1) | type | payload``, where ``(type, payload)`` is what
the serializer's ``dumps_typed`` returned. The first byte's high bit (`COMPRESSED`) says the
payload is a zstd frame; type tags are at most 127 bytes, so bodies written before
compression existed read unchanged. Compression happens inside the body, so the checksum,
HMAC or encryption covers the compressed bytes and both tiers hold the same frame.
Without a key the frame is ``version(1) | xxh3_64(body)(8, big-endian) | body``; with one,
`_core.seal` seals the body to its place. Because both tiers hold identical frames, a blob
that fails verification in one tier can be repaired from the other byte for byte.
"""

from __future__ import annotations

import json
import math
from typing import Any

import xxhash
import zstandard

FRAME_VERSION = 1
_HEADER = 9
COMPRESSED = 0x80
_MAX_TYPE = 0x7F
# A compressed payload must say its size, and may not inflate past this (a bound on what
# a damaged or hostile frame can make a reader allocate).
MAX_INFLATED = 1 << 31
_LEVEL = 3


class FrameError(Exception):
    """A frame is truncated, of an unknown version, or fails its checksum."""


def type_tag(type_: str) -> bytes:
    """A serializer's type name as a frame stores it.

    Raises:
        ValueError: it is longer than a frame holds (127 bytes).
    """
    type_bytes = type_.encode()
    if len(type_bytes) > _MAX_TYPE:
        raise ValueError(f"serializer type tag too long: {type_!r}")
    return type_bytes


def frame_body(type_: str, payload: bytes, compress_above: int = 0) -> bytes:
    """``flags+len(type) | type | payload``: what a seal (`_core.seal`) protects. A payload
    longer than ``compress_above`` bytes (``0``: never) is stored zstd-compressed when
    that makes it smaller."""
    type_bytes = type_tag(type_)
    flags = len(type_bytes)
    if 0 < compress_above < len(payload):
        packed = zstandard.ZstdCompressor(level=_LEVEL).compress(payload)
        if len(packed) < len(payload):
            flags, payload = flags | COMPRESSED, packed
    return bytes((flags,)) + type_bytes + payload


def split_body(body: bytes | memoryview) -> tuple[str, bytes]:
    """The ``(type, payload)`` of a frame body, its payload decompressed if need be.

    Raises:
        FrameError: the body ends inside its type tag, or its compressed payload is
            damaged or would inflate past `MAX_INFLATED`.
    """
    if not body:
        raise FrameError("frame truncated inside its type tag")
    size = body[0] & _MAX_TYPE
    if 1 + size > len(body):
        raise FrameError("frame truncated inside its type tag")
    type_, payload = bytes(body[1 : 1 + size]).decode(), bytes(body[1 + size :])
    if body[0] & COMPRESSED:
        payload = _inflate(payload)
    return type_, payload


def _inflate(payload: bytes) -> bytes:
    try:
        size = zstandard.frame_content_size(payload)
        if not 0 <= size <= MAX_INFLATED:
            raise FrameError(f"compressed payload of unknown or excessive size ({size})")
        return zstandard.ZstdDecompressor().decompress(payload)
    except zstandard.ZstdError as exc:
        raise FrameError(f"compressed payload does not decompress: {exc}") from exc


def checksummed(body: bytes) -> bytes:
    """``version | xxh3_64(body) | body``."""
    return bytes((FRAME_VERSION,)) + xxhash.xxh3_64_digest(body) + body


def verify_checksum(frame: bytes) -> memoryview:
    """The body of a checksummed frame.

    Raises:
        FrameError: the frame is truncated, of another version, or fails its checksum.
    """
    if len(frame) < _HEADER + 1:
        raise FrameError(f"frame truncated ({len(frame)} bytes)")
    if frame[0] != FRAME_VERSION:
        raise FrameError(f"unknown frame version {frame[0]}")
    body = memoryview(frame)[_HEADER:]
    if xxhash.xxh3_64_digest(body) != frame[1:_HEADER]:
        raise FrameError("checksum mismatch")
    return body


def encode_frame(type_: str, payload: bytes) -> bytes:
    """Frame a serializer's ``(type, payload)`` pair with a checksum."""
    return checksummed(frame_body(type_, payload))


def decode_frame(frame: bytes) -> tuple[str, bytes]:
    """Verify a frame and return its ``(type, payload)``.

    Raises:
        FrameError: the frame is damaged.
    """
    return split_body(verify_checksum(frame))


def dumps_metadata(metadata: Any) -> str:
    """Encode checkpoint metadata as JSON text (stored as ``jsonb`` and in Redis).

    Raises:
        ValueError: it holds NaN or an infinite float (JSON has neither).
        TypeError: it holds a value JSON cannot.
    """
    return _METADATA_JSON.encode(metadata)


def unstorable_json(value: Any, path: str) -> str | None:
    """What in ``value`` Postgres ``jsonb`` cannot hold, with its path (``None`` if all is
    well): NaN and infinite floats, NUL characters and unpaired surrogates in strings."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"{path} is {value!r} (JSON has no NaN or Infinity; store it as a string)"
    if isinstance(value, str):
        if "\x00" in value:
            return f"{path} contains a NUL character"
        try:
            value.encode()
        except UnicodeEncodeError:
            return f"{path} contains an unpaired surrogate ({value[:40]!r})"
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            inner = f"{path}[{key!r}]"
            if problem := unstorable_json(key, f"a key of {path}") or unstorable_json(
                item, inner
            ):
                return problem
    elif isinstance(value, (list, tuple, set, frozenset)):
        for i, item in enumerate(value):
            if problem := unstorable_json(item, f"{path}[{i}]"):
                return problem
    return None


def loads_metadata(data: str | bytes | dict[str, Any]) -> dict[str, Any]:
    """Decode metadata from JSON text (Redis) or an already-decoded ``jsonb`` value."""
    if isinstance(data, dict):
        return data
    value = json.loads(data)
    if not isinstance(value, dict):
        raise FrameError("metadata is not a JSON object")
    return value


def _json_default(value: Any) -> Any:
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    raise TypeError(f"metadata value of type {type(value).__name__} is not JSON-serializable")


# made once: making an encoder costs about as much as encoding a step's metadata
_METADATA_JSON = json.JSONEncoder(
    separators=(",", ":"), ensure_ascii=False, allow_nan=False, default=_json_default)
