"""Redis key names. Every key of one thread shares the hash tag ``{<thread>}``.

Thread ids and namespaces are user input. Both are base64url-encoded inside key names, so
no id can close the hash tag, add a separator, or collide with another id's keys::

    <prefix>:{<b64 thread>}:k                  SET   every key of the thread (for deletion)
    <prefix>:{<b64 thread>}:in                 ZSET  write intents: token -> deadline (ms)
    <prefix>:{<b64 thread>}:i:<b64 ns>         ZSET  checkpoint ids (score 0, ordered by id)
    <prefix>:{<b64 thread>}:b:<b64 ns>         HASH  blobs: "<channel>\\0<version>" -> frame
    <prefix>:{<b64 thread>}:c:<b64 ns>:<id>    HASH  one checkpoint: c, m, p, bk, w:<idx>:<task>
    <prefix>:{<b64 thread>}:u                  HASH  write-behind: "<b64 ns>:<id>" -> entries
                                                     of that checkpoint not yet in Postgres
    <prefix>:{<b64 thread>}:v                  HASH  "<b64 ns>" -> newest version of the
                                                     namespace seen; "*" -> tombstone;
                                                     "!" -> warm ticket (see GET_SCRIPT)
    <prefix>:journal                           STREAM write-behind flush journal
    <prefix>:journal:bytes                     STRING payload bytes the journal holds
    <prefix>:dead                              STREAM journal entries Postgres rejected
    <prefix>:marks                             STRING highest stale mark applied

The registry lists the keys that make up the thread's copy; a key it does not list is a
leftover (of an eviction or a drop) and is never served. Versions come from a Postgres
sequence: every commit that changes a namespace gives it a new, larger one.

A checkpoint id is the last component, after a base64 namespace that holds no ``:``, so it
can be used verbatim.
"""

from __future__ import annotations

import base64

from langgraph_durable.errors import ConfigurationError


def b64(value: str) -> str:
    """Encode a user string for use inside a key name (no ``{}:``, injective)."""
    return base64.urlsafe_b64encode(value.encode()).decode().rstrip("=")


def unb64(value: str | bytes) -> str:
    """Invert `b64`."""
    text = value.decode() if isinstance(value, bytes) else value
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode()


# Postgres indexes each row's key columns in a btree whose entries hold at most 2,704
# bytes. These bounds keep the widest key (thread, namespace, checkpoint id, task id and
# index of a write; thread, namespace, channel and version of a blob) below it, whatever
# the values are: Postgres compresses long keys, so a repetitive 10 KB id may fit where a
# random 3 KB one does not, and a bound on the raw size is the only one a caller can rely on.
MAX_ID_BYTES = 1024  # thread ids and checkpoint namespaces (UTF-8)
MAX_NAME_BYTES = 256  # checkpoint ids, task ids, channel names, channel versions, run ids


def check_text(value: object, what: str, limit: int | None = None) -> str:
    """Return ``value`` as text both tiers can store, or raise `ConfigurationError`.

    ``limit`` bounds its UTF-8 size in bytes (see `MAX_ID_BYTES`).
    """
    if not isinstance(value, (str, int)) or isinstance(value, bool):
        raise ConfigurationError(f"{what} must be a string, got {type(value).__name__}")
    text = str(value)
    if "\x00" in text:
        raise ConfigurationError(f"{what} must not contain NUL characters: {text[:80]!r}")
    try:
        size = len(text.encode())
    except UnicodeEncodeError as exc:
        raise ConfigurationError(f"{what} is not valid unicode text: {text[:80]!r}") from exc
    if limit is not None and size > limit:
        raise ConfigurationError(
            f"{what} is {size} bytes long; at most {limit} bytes (UTF-8) can be stored, "
            f"as Postgres indexes it: {text[:80]!r}..."
        )
    return text


def blob_field(channel: str, version: str | int | float) -> str:
    """Field of one channel version inside the thread's blob hash."""
    return f"{channel}\x00{version}"


def write_field(task_id: str, idx: int) -> str:
    """Field of one pending write inside a checkpoint hash."""
    return f"w:{idx}:{task_id}"


def parse_write_field(field: str) -> tuple[str, int]:
    """Return ``(task_id, idx)`` from a `write_field`."""
    _, idx, task_id = field.split(":", 2)
    return task_id, int(idx)


class ThreadKeys:
    """The key names of one thread."""

    __slots__ = ("base", "intents", "registry", "thread_id", "unflushed", "versions")

    def __init__(self, prefix: str, thread_id: str) -> None:
        self.thread_id = thread_id
        self.base = f"{prefix}:{{{b64(thread_id)}}}"
        self.registry = f"{self.base}:k"
        self.intents = f"{self.base}:in"
        self.unflushed = f"{self.base}:u"
        self.versions = f"{self.base}:v"

    def index(self, ns: str) -> str:
        return f"{self.base}:i:{b64(ns)}"

    def blobs(self, ns: str) -> str:
        return f"{self.base}:b:{b64(ns)}"

    def checkpoint_prefix(self, ns: str) -> str:
        return f"{self.base}:c:{b64(ns)}:"

    def checkpoint(self, ns: str, checkpoint_id: str) -> str:
        return f"{self.base}:c:{b64(ns)}:{checkpoint_id}"

    @staticmethod
    def version_field(ns: str) -> str:
        """Field of a namespace inside the thread's versions hash."""
        return f"{b64(ns)}:"

    @staticmethod
    def unflushed_member(ns: str, checkpoint_id: str) -> str:
        """Member of the unflushed hash; also the checkpoint key's suffix after ``:c:``."""
        return f"{b64(ns)}:{checkpoint_id}"


def marks_key(prefix: str) -> str:
    """Key of the highest stale mark this Redis has applied (see `hot.apply_marks`)."""
    return f"{prefix}:marks"


def journal_key(prefix: str) -> str:
    """Key of the write-behind flush journal (a Redis Stream)."""
    return f"{prefix}:journal"


def journal_bytes_key(prefix: str) -> str:
    """Key of the count of payload bytes the journal holds (for ``max_unflushed_bytes``)."""
    return f"{prefix}:journal:bytes"


def dead_letter_key(prefix: str) -> str:
    """Key of the dead letters: journal entries Postgres rejected (a Redis Stream)."""
    return f"{prefix}:dead"
