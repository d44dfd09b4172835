"""What the sans-I/O operations share at run time: the `Context`, and the state it carries.

The state is in memory only: the hot tier's circuit breaker, request latencies, decoded
tuples read from Redis. Nothing here does I/O or asks the operating system anything: the
engine passes in what it learned (the journal consumer's name).
"""

from __future__ import annotations

import itertools
import pickle
import secrets
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Literal

from langgraph.checkpoint.base import CheckpointTuple
from langgraph.checkpoint.serde.base import SerializerProtocol

from langgraph_durable._core.keys import Layout
from langgraph_durable._core.lineage import Lineage
from langgraph_durable._core.requests import Hot
from langgraph_durable._core.scripts.thread import HotRecord
from langgraph_durable._core.seal import Codec, Seal
from langgraph_durable._core.sql import Statements
from langgraph_durable.config import SaverConfig, seconds
from langgraph_durable.errors import TierUnavailableError


class Breaker:
    """Circuit breaker of the hot tier, shared by every thread and event loop of a saver.

    Closed: use Redis. Open: bypass it until ``cooldown`` passed, then let one caller start
    a probe (the engine runs it in the background, `Engine.run`).
    """

    def __init__(self, cooldown: float) -> None:
        self.cooldown = cooldown
        self._lock = threading.Lock()
        self.open_since: float | None = None
        self.trips = 0
        self.recoveries = 0
        self.reason: Exception | None = None  # the failure that keeps it open
        self._probing = False
        self._changed = 0.0  # when it last opened, or closed

    @property
    def is_open(self) -> bool:
        return self.open_since is not None

    def state(self) -> str:
        return "open" if self.open_since is not None else "closed"

    def allows(self) -> bool:
        """Whether a request may go to the hot tier now (closed, or time for a probe)."""
        return self.open_since is None

    def should_probe(self) -> bool:
        """True once per cooldown while open: the caller runs the recovery and reports."""
        with self._lock:
            if self.open_since is None or self._probing:
                return False
            if time.monotonic() - self.open_since < self.cooldown:
                return False
            self._probing = True
            return True

    def cooled(self) -> bool:
        """Whether the breaker is open and its cooldown has passed (no probe is claimed)."""
        with self._lock:
            since = self.open_since
            return since is not None and time.monotonic() - since >= self.cooldown

    def probe_ended(self) -> None:
        """A probe stopped without a verdict (cancelled, or an error that says nothing
        about Redis): the breaker stays open and the next cooldown allows another."""
        with self._lock:
            if self._probing:
                self._probing = False
                self.open_since = time.monotonic()

    def failure(self, reason: Exception | None = None, *, started: float | None = None) -> bool:
        """Open (or keep open); whether this failure tripped a closed breaker. ``reason``,
        the error that said so, is kept (`reason`) until the breaker closes. A request
        that ``started`` (`time.monotonic`) before the breaker last changed brings older
        news than the breaker's and changes nothing."""
        with self._lock:
            if started is not None and started < self._changed:
                return False
            self._changed = time.monotonic()
            self.reason = reason or self.reason
            tripped = self.open_since is None
            if tripped:
                self.trips += 1
            self.open_since = time.monotonic()
            self._probing = False
            return tripped

    def opened_after(self, started: float) -> bool:
        """Whether the breaker is open on news newer than a request that ``started``
        (`time.monotonic`) then: another request failed while this one waited."""
        return self.open_since is not None and self._changed > started

    def recovered(self) -> bool:
        """Close; whether the breaker was open."""
        if self.open_since is None and not self._probing:  # closed: the usual case
            return False
        with self._lock:
            was_open = self.open_since is not None
            if was_open:
                self.recoveries += 1
                self._changed = time.monotonic()
            self.open_since = None
            self.reason = None
            self._probing = False
            return was_open

    def forked(self) -> None:
        """In a child after ``fork()``: a new lock, and no probe (the parent's) in flight."""
        self._lock = threading.Lock()
        self._probing = False


_TIER_NAMES = {"hot": "Redis (hot tier)", "cold": "Postgres (cold tier)"}


def silent(tier: Literal["hot", "cold"], reason: Exception | None) -> TierUnavailableError:
    """The error of a request not sent: the tier did not answer one a moment ago, and its
    breaker has not let a request through since (``reason``: the failure that said so)."""
    error = TierUnavailableError(
        f"{_TIER_NAMES[tier]} did not answer a moment ago: {reason or 'no reply'}; asked "
        "again after breaker_cooldown", tier=tier)
    error.__cause__ = reason
    return error


class MarkClock:
    """When this process next applies pending stale marks (`hot.apply_marks`): before its
    first use of Redis and right after a write of its own bypassed Redis (`urgent`: before
    the next operation), then every ``interval`` seconds (`claim`: beside the operations,
    so a Postgres that does not answer never holds up one that needs only Redis)."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._next = 0.0  # due at once
        self._urgent = True
        self._lock = threading.Lock()

    def due(self) -> bool:
        return time.monotonic() >= self._next

    def urgent(self) -> bool:
        """Whether the marks must be applied before this process's next operation."""
        return self._urgent

    def claim(self) -> bool:
        """Whether a periodic poll is due; if so the caller runs it, and no other caller
        starts one for an interval (however that poll ends)."""
        with self._lock:
            now = time.monotonic()
            if now < self._next:
                return False
            self._next = now + self.interval
            return True

    def due_now(self) -> None:
        self._next = 0.0
        self._urgent = True

    def checked(self) -> None:
        self._next = time.monotonic() + self.interval
        self._urgent = False

    def forked(self) -> None:
        """In a child after ``fork()``: a new lock (another thread may have held it)."""
        self._lock = threading.Lock()


class Latencies:
    """The last few thousand request latencies of each tier, for `DurableSaver.health`."""

    def __init__(self, size: int = 4096) -> None:
        self._samples: dict[str, deque[float]] = {
            "hot": deque(maxlen=size),
            "cold": deque(maxlen=size),
        }

    def record(self, tier: str, seconds: float) -> None:
        self._samples[tier].append(seconds)

    def percentiles(self) -> dict[str, float | None]:
        out: dict[str, float | None] = {}
        for tier, samples in self._samples.items():
            ordered = sorted(samples)
            for name, q in (("p50", 0.5), ("p99", 0.99)):
                out[f"{tier}_{name}"] = (
                    round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 3)
                    if ordered
                    else None
                )
        return out


class Tokens:
    """Fresh tokens: the cache token of a checkpoint's hot copy, a read's warm ticket.

    A token is this process's random prefix and a counter: unique across processes without
    a system call per token (``os.urandom`` is slow on some virtual machines). A child
    after ``fork()`` draws a prefix of its own (`Context.forked`). Never drawn from
    `uuid.uuid4`, which applications patch for deterministic ids.
    """

    def __init__(self) -> None:
        self._prefix = secrets.token_hex(8)
        self._count = itertools.count()

    def new(self) -> str:
        return f"{self._prefix}{next(self._count):x}"


class TupleCache:
    """Checkpoint tuples this process read from Redis, keyed by version token.

    A tuple is kept as a pickled copy, and every hit unpickles a fresh one, so no caller
    can mutate an object the cache holds. Pickling costs about a sixth of decoding, yet
    most checkpoints are read once (a run reads the checkpoint its last step wrote, then
    writes newer ones), so a copy is made only when it is likely to serve: a checkpoint
    decoded for the first time is kept as the record Redis sent (its bytes are in memory
    already); a hit on that record decodes it again and keeps a copy. A namespace whose
    last checkpoint held was read again (an application that reads the state between
    runs) has the next one copied at once. A checkpoint this process put is held as the
    record Redis holds of it (`wrote`), so the read that follows it (an invoke's start) is
    answered "same" and needs no transfer. Redis decides whether an entry is current (the
    GET script compares the checkpoint's version token), so the cache is never stale.
    """

    def __init__(self, size: int = 1024) -> None:
        self.size = size
        self._lock = threading.Lock()
        self._entries: OrderedDict[tuple[str, str, str], tuple[str, bytes | HotRecord]] = (
            OrderedDict())
        self._latest: dict[tuple[str, str], str] = {}
        self._hit: dict[tuple[str, str], str] = {}  # the checkpoint of a namespace last hit
        self._unread: set[tuple[str, str, str]] = set()  # held by `wrote`, not read since
        self.hits = 0

    def held(self, thread_id: str, ns: str, checkpoint_id: str | None) -> tuple[str, str]:
        """``(checkpoint id, version)`` of the copy held for a read, or ``("", "")``."""
        with self._lock:
            cid = checkpoint_id or self._latest.get((thread_id, ns), "")
            entry = self._entries.get((thread_id, ns, cid))
        return (cid, entry[0]) if entry else ("", "")

    def peek(self, thread_id: str, ns: str, checkpoint_id: str,
             version: str) -> bytes | HotRecord | None:
        """What is held of ``checkpoint_id`` at ``version`` (a pickled copy or a record),
        without counting a hit: for a copy made while Redis is asked whether it is current."""
        with self._lock:
            entry = self._entries.get((thread_id, ns, checkpoint_id))
        return entry[1] if entry is not None and entry[0] == version else None

    def load(
        self, thread_id: str, ns: str, checkpoint_id: str, version: str,
        made: CheckpointTuple | None = None,
    ) -> CheckpointTuple | HotRecord | None:
        """A fresh copy of the tuple held at ``version`` (``made``, when the caller made
        it already), or the record held (for the caller to decode and `keep`), or
        ``None``."""
        with self._lock:
            entry = self._entries.get((thread_id, ns, checkpoint_id))
            if entry is None or entry[0] != version:
                return None
            self._entries.move_to_end((thread_id, ns, checkpoint_id))
            if (thread_id, ns, checkpoint_id) in self._unread:  # its first read
                self._unread.discard((thread_id, ns, checkpoint_id))
            else:
                self._hit[(thread_id, ns)] = checkpoint_id
            self.hits += 1
        held = entry[1]
        if made is not None:
            return made
        if isinstance(held, HotRecord):
            return held
        value: CheckpointTuple = pickle.loads(held)
        return value

    def keep(self, thread_id: str, ns: str, record: HotRecord, value: CheckpointTuple) -> None:
        """Hold a checkpoint just decoded from ``record`` into ``value``: a copy of the
        tuple when the checkpoint was read again (a hit on its record) or the namespace's
        last checkpoint held was; else the record itself."""
        if not record.version:
            return
        checkpoint_id = record.checkpoint_id
        with self._lock:
            hit = self._hit.get((thread_id, ns))
            if hit is not None and hit != checkpoint_id:  # the next one only if this is read
                del self._hit[(thread_id, ns)]
        held: bytes | HotRecord = record
        if hit is not None:
            try:
                held = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
            except Exception:  # a value pickle cannot copy is simply not cached
                return
        with self._lock:
            self._hold((thread_id, ns, checkpoint_id), record.version, held)

    def wrote(self, thread_id: str, ns: str, record: HotRecord, parent_id: str | None,
              refs: Sequence[str], written: Mapping[str, bytes]) -> None:
        """Hold a checkpoint this process just sent Redis (``record``: its fields, no
        blobs yet) as the record a read of it would get: the blobs of ``refs`` are the
        ones it wrote (``written``) and, for the channels it did not change, those of
        the record held of its parent. Without that record, nothing is held."""
        with self._lock:
            parent = self._entries.get((thread_id, ns, parent_id or ""))
        known = parent[1].blobs if parent is not None and isinstance(parent[1], HotRecord) else ()
        frames = dict(known)
        frames.update(written)
        try:
            record.blobs[:] = [(ref, frames[ref]) for ref in refs]
        except KeyError:  # a channel whose value this process has not seen
            return
        with self._lock:
            key = (thread_id, ns, record.checkpoint_id)
            self._hold(key, record.version, record)
            self._unread.add(key)
            above = (thread_id, ns, parent_id or "")
            if above in self._unread:  # a step of a run, written and never read: let it go
                self._unread.discard(above)
                self._entries.pop(above, None)

    def _hold(self, key: tuple[str, str, str], version: str, held: bytes | HotRecord) -> None:
        """Store an entry and drop the least recently used past `size` (lock held)."""
        thread_id, ns, checkpoint_id = key
        self._entries[key] = (version, held)
        self._entries.move_to_end(key)
        self._unread.discard(key)
        if checkpoint_id > self._latest.get((thread_id, ns), ""):
            self._latest[(thread_id, ns)] = checkpoint_id
        while len(self._entries) > self.size:
            (t, n, c), _ = self._entries.popitem(last=False)
            if self._latest.get((t, n)) == c:
                del self._latest[(t, n)]
            if self._hit.get((t, n)) == c:
                del self._hit[(t, n)]
            self._unread.discard((t, n, c))

    def forked(self) -> None:
        """In a child after ``fork()``: a new lock (another thread may have held it)."""
        self._lock = threading.Lock()


@dataclass(slots=True, kw_only=True)
class SweepReport:
    """What one sweep did (or, with ``dry_run``, would do).

    Attributes:
        dry_run: nothing was deleted; the counts say what a sweep would delete now.
        threads_examined: threads the sweep looked at.
        threads_deleted: idle threads deleted whole.
        threads_pruned: threads whose older checkpoints were deleted.
        threads_busy: threads left for a later sweep (a writer was at work, or write-behind
            entries of theirs waited for a flush, or another sweeper held them).
        checkpoints: checkpoints deleted.
        writes: pending writes deleted.
        blobs: channel values deleted.
        ledger: tool ledger records deleted with their threads.
        bytes: stored bytes of those rows (a dry run counts none).
        seconds: how long the sweep took.
    """

    dry_run: bool = False
    threads_examined: int = 0
    threads_deleted: int = 0
    threads_pruned: int = 0
    threads_busy: int = 0
    checkpoints: int = 0
    writes: int = 0
    blobs: int = 0
    ledger: int = 0
    bytes: int = 0
    seconds: float = 0.0

    @property
    def rows(self) -> int:
        """Every row deleted: checkpoints, writes, blobs and ledger records."""
        return self.checkpoints + self.writes + self.blobs + self.ledger


@dataclass(slots=True)
class SweepTotals:
    """What the sweeps of this process reclaimed, for ``health()`` and metrics."""

    sweeps: int = 0
    threads_deleted: int = 0
    threads_pruned: int = 0
    rows_reclaimed: int = 0
    bytes_reclaimed: int = 0
    last_sweep_at: float | None = None
    last_sweep_seconds: float | None = None

    def add(self, report: SweepReport) -> None:
        if report.dry_run:
            return
        self.sweeps += 1
        self.threads_deleted += report.threads_deleted
        self.threads_pruned += report.threads_pruned
        self.rows_reclaimed += report.rows
        self.bytes_reclaimed += report.bytes
        self.last_sweep_at = time.time()
        self.last_sweep_seconds = round(report.seconds, 3)

    def snapshot(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(slots=True)
class Context:
    """Everything an operation needs besides I/O."""

    config: SaverConfig
    statements: Statements
    serde: SerializerProtocol
    breaker: Breaker
    consumer: str  # this process's name in the journal's consumer group (host:pid:random)
    marks: MarkClock = field(default_factory=lambda: MarkClock(1.0))
    # Postgres's breaker: once a request found it silent, the others fail at once until
    # the cooldown passed and one (a probe) is answered
    cold: Breaker = field(default_factory=lambda: Breaker(1.0))
    latencies: Latencies = field(default_factory=Latencies)
    cache: TupleCache = field(default_factory=TupleCache)
    tokens: Tokens = field(default_factory=Tokens)
    lineage: Lineage = field(default_factory=Lineage)  # which puts extend the head
    seal: Seal = field(default_factory=Seal)  # how frames are sealed and verified
    sweeps: SweepTotals = field(default_factory=SweepTotals)
    # where the prefix's keys live; the engine replaces it once it knows whether Redis is
    # a cluster (`redis_cluster=None`: asked when the clients open)
    layout: Layout = field(default_factory=lambda: Layout("lgd"))
    flush_cursor: int = 0  # the shard this process's next flush batch is looked for first
    # journal requests Redis must still hear, sent before the next batch or drain
    # (`journal.flushing`): acknowledgements of batches that committed while Redis was out
    # of reach, and releases of entries a drain Redis failed may hold (a read of its that
    # Redis ran after the drain gave up on the reply)
    unacknowledged: deque[Hot] = field(default_factory=deque)

    def __post_init__(self) -> None:
        self.layout = layout_of(self.config, cluster=self.config.redis_cluster is True)

    def forked(self, consumer: str) -> None:
        """In a child after ``fork()``: its own name in the journal's group (the parent's
        pending entries stay the parent's), its own tokens, and new locks."""
        self.consumer = consumer
        self.tokens = Tokens()  # the parent's counter goes on there
        self.breaker.forked()
        self.cold.forked()
        self.marks.forked()
        self.cache.forked()
        self.lineage.forked()
        self.unacknowledged = deque()  # the parent's to send

    @property
    def codec(self) -> Codec:
        """The serializer and the seal: what stored frames are made and read with."""
        return Codec(self.serde, self.seal, self.config.compress_above)

    @property
    def ttl_ms(self) -> int:
        return int(seconds(self.config.hot_ttl) * 1000)

    @property
    def deadline_ms(self) -> int:
        return deadline_ms(self.config)


def deadline_ms(config: SaverConfig) -> int:
    """The deadline of a write intent announced now (ms since epoch)."""
    return int((time.time() + seconds(config.write_deadline)) * 1000)


def layout_of(config: SaverConfig, *, cluster: bool) -> Layout:
    """The key layout of ``config`` on a cluster or a single node."""
    return Layout(config.key_prefix, shards=config.journal_shards, cluster=cluster)
