"""Frame bodies: large payloads are zstd-compressed behind a flag bit; old bodies still read."""

from __future__ import annotations

import pytest
import zstandard

from langgraph_durable._core.codec import COMPRESSED, FrameError, frame_body, split_body
from langgraph_durable._core.seal import Seal


def test_a_payload_above_the_threshold_is_compressed_and_reads_back() -> None:
    """Above ``compress_above`` the payload is stored as a zstd frame, flagged in the
    body's first byte; splitting the body gives the original back."""
    payload = b"the same sentence again and again. " * 2000
    body = frame_body("msgpack", payload, compress_above=1024)
    assert body[0] & COMPRESSED and len(body) < len(payload) // 10
    assert split_body(body) == ("msgpack", payload)


def test_small_or_incompressible_payloads_are_left_as_they_are() -> None:
    """At or below the threshold, or when zstd would not make it smaller, the body is the
    uncompressed form byte for byte."""
    small = frame_body("json", b"{}" * 100, compress_above=1024)
    assert small == bytes((4,)) + b"json" + b"{}" * 100
    packed = zstandard.ZstdCompressor().compress(bytes(range(256)) * 50)  # incompressible
    body = frame_body("bytes", packed, compress_above=16)
    assert not body[0] & COMPRESSED
    assert split_body(body) == ("bytes", packed)
    assert frame_body("json", b"x" * 5000, compress_above=0)[0] == 4  # 0: never


def test_bodies_written_before_compression_existed_still_read() -> None:
    """An old body (``len(type) | type | payload``, no flag) splits as it always did, and
    so does a sealed frame of one."""
    old = bytes((7,)) + b"msgpack" + b"\x81\xa1a\x01"
    assert split_body(old) == ("msgpack", b"\x81\xa1a\x01")
    seal = Seal(secret="k" * 32)
    where = b"place"
    assert split_body(seal.open(seal.seal(old, where), where)) == ("msgpack", b"\x81\xa1a\x01")


def test_a_damaged_compressed_payload_is_a_frame_error() -> None:
    """A body flagged compressed whose payload is not zstd, or that claims to inflate past
    the bound, is refused as damaged rather than decoded or allocated."""
    with pytest.raises(FrameError, match="compressed payload"):
        split_body(bytes((COMPRESSED | 4,)) + b"json" + b"not zstd at all")
    huge = bytearray(zstandard.ZstdCompressor().compress(b"x" * 1000))
    with pytest.raises(FrameError):
        split_body(bytes((COMPRESSED | 4,)) + b"json" + bytes(huge[:-5]))


def test_type_tags_longer_than_127_bytes_are_refused() -> None:
    """The flag bit takes the top of the tag length byte."""
    with pytest.raises(ValueError, match="too long"):
        frame_body("t" * 128, b"")
