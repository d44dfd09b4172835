"""Redis key names. Every key of one thread shares one hash tag, so each of its scripts
runs on one Redis Cluster slot.

Thread ids and namespaces are user input. Both are base64url-encoded inside key names, so
no id can close the hash tag, add a separator, or collide with another id's keys.

Two layouts (`Layout`). On a single Redis node with one journal shard (the default there)
every key of a thread carries the thread's own tag, and the journal is one stream::

    <prefix>:{<b64 thread>}:k                  SET   every key of the thread (for deletion)
    <prefix>:{<b64 thread>}:in                 ZSET  write intents: token -> deadline (ms)
    <prefix>:{<b64 thread>}:i:<b64 ns>         ZSET  checkpoint ids (score 0, ordered by id)
    <prefix>:{<b64 thread>}:b:<b64 ns>         HASH  blobs: "<channel>\\0<version>" -> frame
    <prefix>:{<b64 thread>}:c:<b64 ns>:<id>    HASH  one checkpoint: c, m, p, bk, w:<idx>:<task>
    <prefix>:{<b64 thread>}:u                  HASH  write-behind: "<b64 ns>:<id>" -> entries
                                                     of that checkpoint not yet in Postgres
    <prefix>:{<b64 thread>}:v                  HASH  "<b64 ns>" -> newest version of the
                                                     namespace seen; "*" -> tombstone;
                                                     "!" -> warm ticket (see get.lua);
                                                     "^<token>" -> a write intent's mark;
                                                     "~<b64 ns>:" -> the namespace was
                                                     read empty (known_empty.lua)
    <prefix>:journal                           STREAM write-behind flush journal
    <prefix>:journal:bytes                     STRING payload bytes the journal holds
    <prefix>:dead                              STREAM journal entries Postgres rejected
    <prefix>:marks                             STRING highest stale mark applied
    <prefix>:incarnation                       STRING the run id of the Redis process whose
                                                     data was checked against Postgres
    <prefix>:incarnation:lock                  STRING held while one process checks it

Sharded (on a Redis Cluster, or with ``journal_shards`` > 1): the threads are spread over
S journal shards by a stable hash of the thread id (`Layout.shard`); a thread's keys carry
its shard's tag instead of its own, next to the shard's journal, so a write-behind script
(thread keys and journal entry) touches one slot::

    <prefix>:{<tag k>}:<b64 thread>:k ...      the thread's keys as above
    <prefix>:{<tag k>}:journal                 STREAM shard k's flush journal
    <prefix>:{<tag k>}:journal:bytes           STRING its payload bytes
    <prefix>:{<tag k>}:dead                    STREAM its dead letters
    <prefix>:{<tag k>}:marks                   STRING highest stale mark applied to its threads
    <prefix>:layout                            STRING how many shards the prefix uses

``<tag k>`` is ``<prefix>.j<k>.<n>``, with the smallest ``n`` that puts it in the k-th
of S equal ranges of the 16384 cluster slots: shards spread evenly over the primaries of a
cluster whose slots were assigned in even ranges, and two prefixes never share a slot.
(A base64 thread id holds no ``.`` or ``:``, so no thread key is ever a shard's key.)

The registry lists the keys that make up the thread's copy; a key it does not list is a
leftover (of an eviction or a drop) and is never served. Versions come from a Postgres
sequence: every commit that changes a namespace gives it a new, larger one.

A checkpoint id is the last component, after a base64 namespace that holds no ``:``, so it
can be used verbatim.
"""

from __future__ import annotations

import base64
import functools

import xxhash

from langgraph_durable.errors import ConfigurationError


@functools.lru_cache(maxsize=1024)
def b64(value: str) -> str:
    """Encode a user string for use inside a key name (no ``{}:``, injective). The
    strings in use are remembered: every key of a thread's calls repeats its id and
    namespace."""
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


def thread_base(prefix: str, name: str, tag: str | None) -> str:
    """What every key of the thread ``name`` (base64) starts with: its own hash tag, or its
    shard's ``tag`` (see `Layout`)."""
    return f"{prefix}:{{{name}}}" if tag is None else f"{prefix}:{{{tag}}}:{name}"


class ThreadKeys:
    """The key names of one thread; shared by the operations on it (`Layout.thread`), so
    never changed once made."""

    __slots__ = ("base", "blob_hashes", "checkpoints", "intents", "registry", "thread_id",
                 "unflushed", "versions")

    def __init__(self, prefix: str, thread_id: str, tag: str | None = None) -> None:
        self.thread_id = thread_id
        self._place(thread_base(prefix, b64(thread_id), tag))

    @classmethod
    def at(cls, base: str) -> ThreadKeys:
        """Thread-shaped keys of no thread, named under ``base`` (see `Layout.nobody`)."""
        keys = cls.__new__(cls)
        keys.thread_id = ""
        keys._place(base)
        return keys

    def _place(self, base: str) -> None:
        self.base = base
        self.registry = f"{self.base}:k"
        self.intents = f"{self.base}:in"
        self.unflushed = f"{self.base}:u"
        self.versions = f"{self.base}:v"
        self.checkpoints = f"{self.base}:c:"  # + `unflushed_member`: a checkpoint's key
        self.blob_hashes = f"{self.base}:b:"  # + "<b64 ns>": a namespace's blob hash

    def index(self, ns: str) -> str:
        return f"{self.base}:i:{b64(ns)}"

    def index_namespace(self, key: str) -> str | None:
        """The namespace whose `index` ``key`` is, or ``None`` if it is no index key of the
        thread (``index("")`` is the part every index key starts with)."""
        head = self.index("")
        if not key.startswith(head):
            return None
        try:
            return unb64(key[len(head):])
        except ValueError:  # not base64 text: not one of our keys
            return None

    def blobs(self, ns: str) -> str:
        return f"{self.blob_hashes}{b64(ns)}"

    def checkpoint_prefix(self, ns: str) -> str:
        return f"{self.checkpoints}{b64(ns)}:"

    def checkpoint(self, ns: str, checkpoint_id: str) -> str:
        return self.checkpoints + self.unflushed_member(ns, checkpoint_id)

    @staticmethod
    def version_field(ns: str) -> str:
        """Field of a namespace inside the thread's versions hash."""
        return f"{b64(ns)}:"

    @staticmethod
    def unflushed_member(ns: str, checkpoint_id: str) -> str:
        """Member of the unflushed hash; also the checkpoint key's suffix after ``:c:``."""
        return f"{b64(ns)}:{checkpoint_id}"


# The Redis type of each key the scripts keep, by the end of its name (see the module's
# docstring): a prefix's own keys, a shard's, and a thread's after its base.
_PREFIX_TYPES = {":journal": "stream", ":journal:bytes": "string", ":dead": "stream",
                 ":marks": "string", ":layout": "string", ":incarnation": "string",
                 ":incarnation:lock": "string"}
_THREAD_TYPES = {":k": "set", ":in": "zset", ":u": "hash", ":v": "hash"}
_PART_TYPES = {":i:": "zset", ":b:": "hash", ":c:": "hash"}
_TYPES = {**_PREFIX_TYPES, **_THREAD_TYPES, **_PART_TYPES}
INTENTS = ":in"  # the kind of a thread's intents key


def key_type(prefix: str, key: str) -> str | None:
    """The Redis type the scripts keep at ``key`` (``"hash"``, ``"zset"``, ...), or
    ``None`` if ``key`` is no key of ``prefix`` they keep."""
    kind = key_kind(prefix, key)
    return None if kind is None else _TYPES[kind]


def key_kind(prefix: str, key: str) -> str | None:
    """What ``key`` is among the keys of ``prefix`` the scripts keep, as the end of its
    name that says so (``":in"`` a thread's intents, ``":i:"`` a namespace's index,
    ``":journal"``, ...), or ``None``. A thread's base is found before its kind is read,
    so no checkpoint id (which may hold ``:k``) is taken for a kind."""
    head = f"{prefix}:{{"
    if not key.startswith(head):
        rest = key[len(prefix):]
        return rest if key.startswith(prefix) and rest in _PREFIX_TYPES else None
    close = key.find("}", len(head))
    if close < 0:
        return None
    rest = key[close + 1:]
    if key[len(head):close].startswith(f"{prefix}.j"):  # a shard's tag (see `_tags`)
        if rest in _PREFIX_TYPES:
            return rest
        name, colon, kind = rest[1:].partition(":")
        if not rest.startswith(":") or not name or not colon:
            return None
        rest = ":" + kind
    if rest in _THREAD_TYPES:
        return rest
    return rest[:3] if rest[:3] in _PART_TYPES else None


# ------------------------------------------------------------------------ sharded layout

SLOTS = 16384  # Redis Cluster hash slots


def _crc16_table() -> tuple[int, ...]:
    table = []
    for byte in range(256):
        crc = byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
        table.append(crc & 0xFFFF)
    return tuple(table)


_CRC16 = _crc16_table()


def _crc16(data: bytes) -> int:
    """CRC16-XMODEM, the checksum Redis Cluster maps keys to slots with."""
    crc = 0
    for byte in data:
        crc = ((crc << 8) & 0xFFFF) ^ _CRC16[(crc >> 8) ^ byte]
    return crc


def key_slot(key: str) -> int:
    """The cluster slot of a key (its hash tag's, when it has a non-empty one)."""
    start = key.find("{")
    if start >= 0:
        end = key.find("}", start + 1)
        if end > start + 1:
            key = key[start + 1 : end]
    return _crc16(key.encode()) % SLOTS


CLUSTER_SHARDS = 16  # journal shards on a cluster unless configured
MAX_SHARDS = 256


class Layout:
    """Where a prefix's keys live: one journal (``shards == 1`` on a single node, today's
    key names) or ``shards`` journals, each thread's keys beside its shard's journal.

    ``shards=None``: 1 on a single node, `CLUSTER_SHARDS` on a cluster.
    """

    __slots__ = ("cluster", "prefix", "shards", "tags")

    def __init__(self, prefix: str, *, shards: int | None = None, cluster: bool = False) -> None:
        self.prefix = prefix
        self.shards = shards or (CLUSTER_SHARDS if cluster else 1)
        self.cluster = cluster
        self.tags = _tags(prefix, self.shards) if cluster or self.shards > 1 else None

    @property
    def sharded(self) -> bool:
        return self.tags is not None

    def shard(self, thread_id: str) -> int:
        """The journal shard of a thread (stable across processes and versions)."""
        if self.shards == 1:
            return 0
        return xxhash.xxh64_intdigest(thread_id.encode()) % self.shards

    def thread(self, thread_id: str) -> ThreadKeys:
        """The key names of a thread (those of the threads in use are remembered: every
        operation asks for them)."""
        tag = None if self.tags is None else self.tags[self.shard(thread_id)]
        return _thread_keys(self.prefix, thread_id, tag)

    def nobody(self, k: int) -> ThreadKeys:
        """Thread-shaped keys of shard ``k`` that belong to no thread (``.`` is not
        base64), for a journal entry that names none (undecodable): its acknowledgement
        touches them instead of a real thread's, in the shard's slot."""
        return ThreadKeys.at(self._shard_key(k, "{.}" if self.tags is None else "."))

    def _shard_key(self, k: int, name: str) -> str:
        if self.tags is None:
            return f"{self.prefix}:{name}"
        return f"{self.prefix}:{{{self.tags[k]}}}:{name}"

    def journal(self, k: int) -> str:
        """Shard ``k``'s write-behind flush journal (a Redis Stream)."""
        return self._shard_key(k, "journal")

    def journal_bytes(self, k: int) -> str:
        """Shard ``k``'s count of payload bytes its journal holds."""
        return self._shard_key(k, "journal:bytes")

    def dead(self, k: int) -> str:
        """Shard ``k``'s dead letters: journal entries Postgres rejected (a Redis Stream)."""
        return self._shard_key(k, "dead")

    def marks(self, k: int) -> str:
        """The highest stale mark applied to shard ``k``'s threads (see `hot.apply_marks`)."""
        return self._shard_key(k, "marks")

    def registry_pattern(self) -> str:
        """A ``SCAN`` ``MATCH`` pattern of every thread's registry key (`ThreadKeys.registry`);
        it may match other keys too, which `registry_thread` tells apart."""
        tag = None if self.tags is None else "*"
        return ThreadKeys.at(thread_base(self.prefix, "*", tag)).registry

    def registry_thread(self, key: str | bytes) -> str | None:
        """The thread whose registry key ``key`` is in this layout, or ``None`` if it is
        not one (another kind of key, another prefix, another shard's tag)."""
        text = key.decode(errors="replace") if isinstance(key, bytes) else key
        name = text.removesuffix(":k").rpartition(":")[2].strip("{}")
        try:
            thread_id = unb64(name)
        except ValueError:  # not base64 text
            return None
        return thread_id if self.thread(thread_id).registry == text else None

    def thread_of(self, key: str | bytes) -> str | None:
        """The thread whose registry or versions key ``key`` is in this layout (the two keys
        a thread's copy in Redis is known by: `hot.check_redis`), or ``None``."""
        text = key.decode(errors="replace") if isinstance(key, bytes) else key
        if text.endswith(":v"):
            text = text[:-2] + ":k"
        return self.registry_thread(text)

    def incarnation(self) -> str:
        """Key holding the run id of the Redis process whose data was last checked against
        Postgres (`hot.check_redis`); on a single node only."""
        return f"{self.prefix}:incarnation"

    def incarnation_lock(self) -> str:
        """Key held by the one process checking a new Redis process's data."""
        return f"{self.prefix}:incarnation:lock"

    def layout_key(self) -> str:
        """Key recording how many shards the prefix uses (checked when clients open)."""
        return f"{self.prefix}:layout"

    def describe(self) -> str:
        """The value `layout_key` holds for this layout (`from_description` reads it)."""
        return f"shards={self.shards}"

    @classmethod
    def from_description(cls, prefix: str, text: str | bytes, *, cluster: bool = False) -> Layout:
        """The layout of ``prefix`` whose `describe` is ``text``.

        Raises:
            ConfigurationError: ``text`` is not such a description.
        """
        value = text.decode(errors="replace") if isinstance(text, bytes) else text
        name, _, count = value.partition("=")
        if name != "shards" or not count.isdigit() or not 1 <= int(count) <= MAX_SHARDS:
            raise ConfigurationError(
                f"key prefix {prefix!r} recorded the key layout {value[:80]!r}, not one such "
                "as 'shards=4'")
        return cls(prefix, shards=int(count), cluster=cluster)


@functools.lru_cache(maxsize=1024)
def _thread_keys(prefix: str, thread_id: str, tag: str | None) -> ThreadKeys:
    return ThreadKeys(prefix, thread_id, tag)


@functools.lru_cache(maxsize=64)
def _tags(prefix: str, shards: int) -> tuple[str, ...]:
    return tuple(_spread_tag(prefix, k, shards) for k in range(shards))


def _spread_tag(prefix: str, k: int, shards: int) -> str:
    """Shard ``k``'s hash tag: ``<prefix>.j<k>.<n>`` in the k-th of ``shards`` equal slot
    ranges (smallest such ``n``)."""
    low, high = k * SLOTS // shards, (k + 1) * SLOTS // shards
    n = 0
    while True:
        tag = f"{prefix}.j{k}.{n}"
        if low <= key_slot(tag) < high:
            return tag
        n += 1
