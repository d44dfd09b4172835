"""Seals: what makes a stored frame trustworthy whichever tier returns it.

Every frame (a checkpoint body, a channel value, a pending write) and every write-behind
journal entry is sealed over its bytes *and its place* (`place`): the thread, namespace,
checkpoint, channel and version or task it belongs to. A frame copied to another place
fails to open, as does one written by anyone without the key. Three seals, one per frame
version byte:

- ``1`` checksum (no key configured): ``1 | xxh3_64(body) | body``. Catches damage, not
  forgery: Redis is then trusted.
- ``2`` HMAC (``secret``): ``2 | HMAC-SHA256(secret, place | body) | body``.
- ``3`` AES-GCM (``encryption``): ``3 | len(key id) | key id | nonce(12) | ciphertext``,
  the place as associated data. Any listed key opens; the current one seals.

A saver opens only its own kind: with a key, a checksummed (plaintext) frame is refused,
so nobody without the key can substitute one.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Mapping
from typing import Any

from langgraph.checkpoint.serde.base import SerializerProtocol

from langgraph_durable._core.codec import (
    FRAME_VERSION,
    FrameError,
    checksummed,
    frame_body,
    split_body,
    verify_checksum,
)
from langgraph_durable.config import SaverConfig

CHECKSUM, HMAC, AEAD = FRAME_VERSION, 2, 3
_NAMES = {CHECKSUM: "checksummed (unkeyed)", HMAC: "HMAC-sealed", AEAD: "encrypted"}
_MAC = 32
_NONCE = 12


def place(kind: str, *parts: str) -> bytes:
    """The identity a frame is bound to: ``kind`` then its parts, each length-prefixed,
    so no two places share an encoding."""
    out = bytearray((len(parts),))
    for part in (kind, *parts):
        data = part.encode()
        out += len(data).to_bytes(4, "big") + data
    return bytes(out)


def checkpoint_place(thread_id: str, ns: str, checkpoint_id: str, parent_id: str | None) -> bytes:
    return place("checkpoint", thread_id, ns, checkpoint_id, parent_id or "")


def blob_place(thread_id: str, ns: str, channel: str, version: str) -> bytes:
    return place("blob", thread_id, ns, channel, version)


def write_place(
    thread_id: str, ns: str, checkpoint_id: str, task_id: str, idx: int, channel: str, path: str
) -> bytes:
    return place("write", thread_id, ns, checkpoint_id, task_id, str(idx), channel, path)


def journal_place(key_prefix: str) -> bytes:
    return place("journal", key_prefix)


class Seal:
    """Seals and opens frames with the configured key; a checksum without one."""

    def __init__(
        self,
        secret: bytes | str | None = None,
        keys: Mapping[str, bytes] | None = None,
        key_id: str | None = None,
    ) -> None:
        if isinstance(secret, str):
            secret = secret.encode()
        self._mac = hmac.new(secret, digestmod=hashlib.sha256) if secret else None
        self._ciphers: dict[bytes, Any] = {}
        if keys:  # imported only when encryption is configured
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM

            self._ciphers = {k.encode(): AESGCM(v) for k, v in keys.items()}
        current = key_id or (next(iter(keys)) if keys else None)
        self._current = current.encode() if current else b""
        self.kind = AEAD if self._ciphers else HMAC if self._mac else CHECKSUM

    @classmethod
    def of(cls, config: SaverConfig) -> Seal:
        return cls(config.secret, config.encryption, config.encryption_key_id)

    @property
    def keyed(self) -> bool:
        """Whether frames carry a key (HMAC or AES-GCM), not just a checksum."""
        return self.kind != CHECKSUM

    def __repr__(self) -> str:
        return f"Seal({_NAMES[self.kind]})"

    def seal(self, body: bytes, where: bytes) -> bytes:
        """A frame of ``body`` bound to ``where`` (see `place`)."""
        if self.kind == AEAD:
            nonce = secrets.token_bytes(_NONCE)
            sealed: bytes = self._ciphers[self._current].encrypt(nonce, body, where)
            return bytes((AEAD, len(self._current))) + self._current + nonce + sealed
        if self.kind == HMAC:
            return bytes((HMAC,)) + self._tag(body, where) + body
        return checksummed(body)

    def open(self, frame: bytes, where: bytes) -> bytes | memoryview:
        """The body of a frame sealed for ``where``.

        Raises:
            FrameError: the frame is damaged, forged, of another kind than this saver
                writes, or was sealed for another place.
        """
        if not frame:
            raise FrameError("empty frame")
        if frame[0] != self.kind:
            found = _NAMES.get(frame[0], f"of unknown version {frame[0]}")
            raise FrameError(f"frame is {found}, expected {_NAMES[self.kind]}")
        if self.kind == AEAD:
            return self._decrypt(frame, where)
        if self.kind == HMAC:
            body = memoryview(frame)[1 + _MAC :]
            if len(frame) < 1 + _MAC or not hmac.compare_digest(
                frame[1 : 1 + _MAC], self._tag(body, where)
            ):
                raise FrameError("authentication failed (forged, or moved from another place)")
            return body
        return verify_checksum(frame)

    def key_id(self, frame: bytes) -> str | None:
        """The id of the key an encrypted frame was sealed with."""
        if not frame or frame[0] != AEAD or len(frame) < 2:
            return None
        return frame[2 : 2 + frame[1]].decode(errors="replace")

    def _tag(self, body: bytes | memoryview, where: bytes) -> bytes:
        assert self._mac is not None
        mac = self._mac.copy()
        mac.update(where)
        mac.update(body)
        return mac.digest()

    def _decrypt(self, frame: bytes, where: bytes) -> bytes:
        if len(frame) < 2:
            raise FrameError("frame truncated")
        start = 2 + frame[1]
        key_id = frame[2:start]
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            raise FrameError(f"encrypted with key {key_id.decode(errors='replace')!r}, not listed")
        from cryptography.exceptions import InvalidTag

        nonce = frame[start : start + _NONCE]
        try:
            body: bytes = cipher.decrypt(nonce, frame[start + _NONCE :], where)
            return body
        except (InvalidTag, ValueError) as exc:
            raise FrameError(
                "decryption failed (forged, damaged, or moved from another place)"
            ) from exc


class Codec(SerializerProtocol):
    """The saver's serializer and seal together: values in, sealed frames out.

    It is also the serializer itself (``dumps_typed`` / ``loads_typed`` delegate), for the
    parts of the saver that store values only in Postgres (the tool ledger).
    """

    def __init__(
        self, serde: SerializerProtocol, seal: Seal | None = None, compress_above: int = 0
    ) -> None:
        self.serde = serde
        self.seal = seal or Seal()
        self.compress_above = compress_above

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        return self.serde.dumps_typed(obj)

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        return self.serde.loads_typed(data)

    def dump(self, value: Any, where: bytes) -> bytes:
        """A sealed frame of ``value`` (the serializer's errors propagate)."""
        return self.frame(*self.serde.dumps_typed(value), where)

    def frame(self, type_: str, payload: bytes, where: bytes) -> bytes:
        """A sealed frame of a serialized ``(type, payload)``, compressed when large."""
        return self.seal.seal(frame_body(type_, payload, self.compress_above), where)

    def open(self, frame: bytes, where: bytes) -> tuple[str, bytes]:
        """The ``(type, payload)`` of a frame sealed for ``where``.

        Raises:
            FrameError: the frame fails its seal.
        """
        return split_body(self.seal.open(frame, where))
