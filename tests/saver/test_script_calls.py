"""Every Lua script of the hot tier, called through its builder on the real Redis and read
through its parser: each test follows one script's happy path and checks what it did to the
keys, so a builder that passes its values in another order than the script's header (or a
header that names them in another order than the script uses them) fails here."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from langgraph_durable._core.keys import Layout, ThreadKeys, b64
from langgraph_durable._core.records import StoredWrite, pack_write
from langgraph_durable._core.requests import Hot
from langgraph_durable._core.scripts import shards, store, thread
from langgraph_durable._core.scripts.registry import SCRIPTS, Reply
from langgraph_durable._tiers.common import Scripts
from langgraph_durable.errors import TierUnavailableError
from tests.support.servers import REDIS_URL

RAN: set[str] = set()  # the scripts the tests of this module ran
TTL = 60_000
GROUP = "flushers"
WRITE = pack_write(StoredWrite("task", 0, "ch", "", b"one"))


@pytest.fixture(scope="module")
def client() -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(REDIS_URL)
    yield client
    client.close()


@pytest.fixture
def layout(namespace: tuple[str, str], request: pytest.FixtureRequest) -> Layout:
    """A layout of the test's own under the module's prefix."""
    return Layout(f"{namespace[1]}-{request.node.name[:40]}")


def run(client: redis.Redis, request: Hot) -> Any:
    """Run ``request`` as the drivers do (``EVAL`` with the script's source)."""
    RAN.add(request.script.name)
    return client.execute_command(*Scripts().command(request, source=True))


def _intent(client: redis.Redis, keys: ThreadKeys, token: str, member_prefix: str = "") -> int:
    return int(run(client, thread.intent(keys, token, int(time.time() * 1000) + 30_000, TTL,
                                         member_prefix)))


def _put(client: redis.Redis, keys: ThreadKeys, checkpoint_id: str, *, version: int,
         token: str, head: bool) -> Any:
    """A write-through put of ``checkpoint_id`` committed at ``version``."""
    fields = thread.CheckpointFields(
        checkpoint_id=checkpoint_id, frame=b"frame-" + checkpoint_id.encode(),
        metadata=b'{"step": 1}', parent="", refs=json.dumps(["ch\x001"]),
        blob_pairs=["ch\x001", b"blob-1"], keep=0, token_v="tok-" + checkpoint_id)
    return run(client, thread.put_through(keys, "", fields, token=token, ttl=TTL,
                                          version=version, head=head, writes=False))


def _journal(layout: Layout, payload: bytes = b"entry", max_entries: int = 100) -> thread.Journal:
    return thread.Journal(layout.journal(0), layout.journal_bytes(0), payload, max_entries,
                          1 << 20)


def test_intent_and_release(client: redis.Redis, layout: Layout) -> None:
    """An intent records its token with its deadline and marks the versions hash; it says
    whether the namespace has unflushed entries; release takes both away."""
    keys = layout.thread("t")
    assert _intent(client, keys, "tok") == 0
    assert client.zscore(keys.intents, "tok") is not None
    assert client.hget(keys.versions, "^tok") == b"1"
    client.hset(keys.unflushed, keys.unflushed_member("ns", "c1"), 1)
    assert _intent(client, keys, "other", keys.unflushed_member("ns", "")) == 1
    assert _intent(client, keys, "third", keys.unflushed_member("elsewhere", "")) == 0
    assert run(client, thread.release(keys, "tok")) == 1
    assert client.zscore(keys.intents, "tok") is None
    assert client.hget(keys.versions, "^tok") is None


def test_fence(client: redis.Redis, layout: Layout) -> None:
    """A sweep's claim is taken on an idle thread and refused while a live one stands."""
    keys = layout.thread("t")
    now = int(time.time() * 1000)
    assert run(client, thread.fence(keys, "sweep", now + 10_000, now)) == 1
    assert client.zscore(keys.intents, "sweep") == now + 10_000
    assert run(client, thread.fence(keys, "second", now + 10_000, now)) == 0


def test_put_through_then_get(client: redis.Redis, layout: Layout) -> None:
    """A write-through put committed as the head starts the namespace's index; a read then
    hits with the checkpoint's fields and blobs, answers SAME to a caller holding it, and
    misses on another namespace, handing out the ticket it was given."""
    keys = layout.thread("t")
    _intent(client, keys, "tok")
    assert _put(client, keys, "c1", version=7, token="tok", head=True) == 1
    assert client.zrange(keys.index(""), 0, -1) == [b"c1"]
    assert client.hget(keys.versions, keys.version_field("")) == b"7"
    assert client.zcard(keys.intents) == 0

    got = thread.found(run(client, thread.get(keys, "", "", TTL, "ticket")))
    assert (got.reply, got.checkpoint_id) == (Reply.HIT, "c1")
    record = got.record()
    assert record.fields[b"c"] == b"frame-c1" and record.version == "tok-c1"
    assert record.blobs == [("ch\x001", b"blob-1")]
    same = thread.found(run(client, thread.get(keys, "", "", TTL, "ticket", "c1", "tok-c1")))
    assert (same.reply, same.checkpoint_id) == (Reply.SAME, "c1")
    missed = thread.found(run(client, thread.get(keys, "sub", "", TTL, "ticket")))
    assert (missed.reply, missed.dirty, missed.ticket) == (Reply.MISS, False, b"ticket")


def test_put_writes_through(client: redis.Redis, layout: Layout) -> None:
    """Pending writes land in the checkpoint's hash: ordinary ones first-write-wins."""
    keys = layout.thread("t")
    _intent(client, keys, "tok")
    _put(client, keys, "c1", version=7, token="tok", head=True)
    _intent(client, keys, "tok2")
    request = thread.put_writes_through(keys, "", "c1", ["w:0:task", b"one", "n"],
                                        token="tok2", ttl=TTL, token_v="v2", version=8,
                                        stored=True)
    assert run(client, request) == 1
    assert client.hget(keys.checkpoint("", "c1"), "w:0:task") == b"one"
    assert client.hget(keys.checkpoint("", "c1"), "v") == b"v2"
    assert client.hget(keys.versions, keys.version_field("")) == b"8"
    assert client.zcard(keys.intents) == 0
    assert client.sismember(keys.registry, keys.index(""))


def test_writes_of_a_checkpoint_newer_than_the_copy_leave_the_namespace_to_postgres(
        client: redis.Redis, layout: Layout) -> None:
    """Writes committed to c2, which Postgres held (``stored``), land on a copy whose newest
    checkpoint is c1: the copy lacks c2, so the namespace leaves the registry (a read
    misses and goes to Postgres). Writes-first to c2, before Postgres held it, do not."""
    keys = layout.thread("t")
    _intent(client, keys, "tok")
    _put(client, keys, "c1", version=7, token="tok", head=True)
    for stored, kept in ((False, True), (True, False)):
        _intent(client, keys, "tok2")
        run(client, thread.put_writes_through(keys, "", "c2", ["w:0:task", b"one", "n"],
                                              token="tok2", ttl=TTL, token_v="v2", version=8,
                                              stored=stored))
        assert bool(client.sismember(keys.registry, keys.index(""))) is kept
    assert thread.found(run(client, thread.get(keys, "", "", TTL, "ticket"))).reply is Reply.MISS


def test_stale_index_leaves_a_namespace_that_ends_before_the_head(
        client: redis.Redis, layout: Layout) -> None:
    """Told Postgres's head after a refused put, Redis keeps a namespace whose newest
    checkpoint is that head (or newer) and leaves one that ends before it."""
    keys = layout.thread("t")
    _intent(client, keys, "tok")
    _put(client, keys, "c2", version=7, token="tok", head=True)
    assert run(client, thread.stale_index(keys, "", "c1")) == 0
    assert run(client, thread.stale_index(keys, "", "c2")) == 0
    assert client.sismember(keys.registry, keys.index(""))
    assert run(client, thread.stale_index(keys, "", "c3")) == 1
    assert not client.sismember(keys.registry, keys.index(""))


def test_known_empty_then_put_behind(client: redis.Redis, layout: Layout) -> None:
    """A namespace read empty may start its index written behind: the root lands in
    Redis and its entry in the journal, counted in the thread's unflushed hash and the
    journal's bytes."""
    keys = layout.thread("t")
    missed = thread.found(run(client, thread.get(keys, "", "", TTL, "ticket")))
    assert run(client, thread.known_empty(keys, "", missed.ticket)) == 1
    assert client.hexists(keys.versions, "~" + keys.version_field(""))
    entry = run(client, _put_behind(keys, layout, "c1"))
    assert thread.refusal(entry, _journal(layout)) is None
    assert client.xrange(layout.journal(0))[0][0] == entry
    assert client.hget(keys.unflushed, keys.unflushed_member("", "c1")) == b"1"
    assert client.get(layout.journal_bytes(0)) == str(len(b"entry")).encode()
    assert client.zrange(keys.index(""), 0, -1) == [b"c1"]


def _put_behind(keys: ThreadKeys, layout: Layout, checkpoint_id: str, ns: str = "",
                parent: str = "", **journal: Any) -> Hot:
    """A write-behind put; one with a ``parent`` must extend the namespace's head."""
    fields = thread.CheckpointFields(checkpoint_id=checkpoint_id, frame=b"f", metadata=b"{}",
                                     parent=parent, refs="[]", blob_pairs=[], keep=0,
                                     token_v="v")
    return thread.put_behind(keys, ns, fields, extends=bool(parent),
                             journal=_journal(layout, **journal))


def test_put_behind_refusals(client: redis.Redis, layout: Layout) -> None:
    """Written behind, a namespace Redis does not hold goes through Postgres (COLD), and a
    full journal refuses with what it holds (the error the user gets)."""
    keys = layout.thread("t")
    cold = run(client, _put_behind(keys, layout, "c1"))
    assert thread.refusal(cold, _journal(layout)) == (Reply.COLD, "")
    client.xadd(layout.journal(0), {"d": b"x"})
    full = run(client, _put_behind(keys, layout, "c1", max_entries=1))
    with pytest.raises(TierUnavailableError) as raised:
        thread.refusal(full, _journal(layout, max_entries=1))
    assert raised.value.tier == "cold" and "journal holds 1 entries" in str(raised.value)


def test_the_first_put_behind_on_a_warmed_head_goes_through_postgres(
        client: redis.Redis, layout: Layout) -> None:
    """A head a warm loaded came from a Postgres read that a write through Postgres may
    have passed (its intent lost when Redis was emptied under the saver): the put that
    extends it goes through Postgres (COLD), which orders the two. Once a put landed on
    it, the next one extending it stays in Redis."""
    keys = layout.thread("t")
    missed = thread.found(run(client, thread.get(keys, "", "", TTL, "ticket")))
    assert run(client, thread.warm(
        keys, "", checkpoint_id="c1", now=int(time.time() * 1000), ttl=TTL, frame=b"frame",
        metadata=b"{}", parent="", refs="[]", version=5, mode="head",
        ticket=missed.ticket, blob_pairs=[], fields=["v", "tok"])) == 1
    cold = run(client, _put_behind(keys, layout, "c2", parent="c1"))
    assert thread.refusal(cold, _journal(layout)) == (Reply.COLD, "")
    assert client.zrange(keys.index(""), 0, -1) == [b"c1"]
    _intent(client, keys, "tok")  # Postgres took it: the update after its commit
    assert _put(client, keys, "c2", version=6, token="tok", head=True) == 1
    entry = run(client, _put_behind(keys, layout, "c3", parent="c2"))
    assert thread.refusal(entry, _journal(layout)) is None
    assert client.zrange(keys.index(""), 0, -1) == [b"c1", b"c2", b"c3"]


def test_put_writes_behind_and_list_unflushed(client: redis.Redis, layout: Layout) -> None:
    """Writes journaled behind stay listed, with their checkpoint, until flushed."""
    keys = layout.thread("t")
    missed = thread.found(run(client, thread.get(keys, "sub", "", TTL, "ticket")))
    run(client, thread.known_empty(keys, "sub", missed.ticket))
    run(client, _put_behind(keys, layout, "c1", ns="sub"))
    entry = run(client, thread.put_writes_behind(
        keys, "sub", "c1", ["w:0:task", WRITE, "n"], token_v="v2",
        journal=_journal(layout, b"writes")))
    assert thread.refusal(entry, _journal(layout)) is None
    assert client.hget(keys.unflushed, keys.unflushed_member("sub", "c1")) == b"2"
    complete, [(ns, record)] = thread.unflushed_records(run(client, thread.list_unflushed(keys)))
    assert complete and ns == b64("sub").encode()
    assert record.checkpoint_id == "c1" and record.fields[b"c"] == b"f"
    assert [(w.task_id, w.channel, w.frame) for w in record.writes] == [("task", "ch", b"one")]
    client.delete(keys.checkpoint("sub", "c1"))  # the copy dropped, the entries still due
    assert thread.unflushed_records(run(client, thread.list_unflushed(keys))) == (False, [])


def test_warm_then_drop(client: redis.Redis, layout: Layout) -> None:
    """A warm with the miss's ticket loads the checkpoint as the head; a drop takes the
    thread's copy and leaves its tombstone."""
    keys = layout.thread("t")
    missed = thread.found(run(client, thread.get(keys, "", "", TTL, "ticket")))
    warmed = run(client, thread.warm(
        keys, "", checkpoint_id="c1", now=int(time.time() * 1000), ttl=TTL, frame=b"frame",
        metadata=b"{}", parent="", refs=json.dumps(["ch\x001"]), version=5, mode="head",
        ticket=missed.ticket, blob_pairs=["ch\x001", b"blob"], fields=["v", "tok"]))
    assert warmed == 1
    got = thread.found(run(client, thread.get(keys, "", "", TTL, "other")))
    assert got.reply is Reply.HIT and got.record().fields[b"c"] == b"frame"
    assert got.record().blobs == [("ch\x001", b"blob")]
    assert run(client, thread.drop_thread(keys, "", 9, TTL, only_flushed=False)) == 3
    assert not client.exists(keys.registry, keys.index(""), keys.checkpoint("", "c1"))
    assert client.hget(keys.versions, "*") == b"9"
    client.hset(keys.unflushed, "m", 1)
    assert run(client, thread.drop_thread(keys, "", 10, TTL, only_flushed=True)) == -1


def test_marks(client: redis.Redis, layout: Layout) -> None:
    """The applied mark only rises."""
    assert run(client, shards.marks(layout, 0)) == 0
    assert run(client, shards.marks(layout, 0, 5)) == 5
    assert run(client, shards.marks(layout, 0, 3)) == 5
    assert run(client, shards.marks(layout, 0)) == 5


def test_flush_read_ack_state_and_dead_letters(client: redis.Redis, layout: Layout) -> None:
    """A flusher reads a batch, acknowledges it with one entry rejected: the journal
    empties, the rejected entry waits in the dead letters, the thread's unflushed count
    and the journal's bytes go, and the namespace's version rises. The dead letter can be
    read, retried onto the journal, and the flusher leaves its group."""
    keys = layout.thread("t")
    missed = thread.found(run(client, thread.get(keys, "", "", TTL, "ticket")))
    run(client, thread.known_empty(keys, "", missed.ticket))
    run(client, _put_behind(keys, layout, "c1"))
    run(client, _put_behind(keys, layout, "c2", payload=b"second"))
    state = run(client, shards.journal_state(layout, 0))
    assert state[2:] == [2, len(b"entry") + len(b"second"), 0]

    batch = run(client, shards.flush_read(layout, 0, group=GROUP, consumer="me", count=10,
                                          reclaim=60_000, cap=1 << 20, forget=0))
    assert [dict(zip(e[1][::2], e[1][1::2], strict=True))[b"d"] for e in batch] == [
        b"entry", b"second"]
    ids = [e[0] for e in batch]
    entries: list[str | bytes | int] = []
    for entry_id, cid, size in zip(ids, ["c1", "c2"], [5, 6], strict=True):
        entries += [entry_id, keys.unflushed, keys.unflushed_member("", cid), keys.registry,
                    size]
    ack = shards.flush_ack(layout, 0, group=GROUP, ttl=TTL, entries=entries,
                           rejected=[ids[1], "too big"],
                           versions=[keys.versions, keys.version_field(""), 11])
    assert run(client, ack) == 1
    assert client.xlen(layout.journal(0)) == 0 and not client.exists(keys.unflushed)
    assert client.hget(keys.versions, keys.version_field("")) == b"11"
    assert run(client, shards.journal_state(layout, 0)) == [b"", b"", 0, 0, 1]

    [letter] = run(client, shards.dead_letters(layout, 0, "-", 10))
    fields = dict(zip(letter[1][::2], letter[1][1::2], strict=True))
    assert fields[b"reason"] == b"too big" and fields[b"entry"] == ids[1]
    retried = run(client, shards.dead_letter(
        layout, 0, unflushed=keys.unflushed, letter=letter[0].decode(), action="retry",
        member=keys.unflushed_member("", "c2")))
    assert client.xrange(layout.journal(0))[0][0] == retried
    assert client.hget(keys.unflushed, keys.unflushed_member("", "c2")) == b"1"
    assert run(client, shards.dead_letters(layout, 0, "-", 10)) == []
    assert run(client, shards.journal_leave(layout, 0, GROUP, "me")) == 1


def test_a_released_batch_is_reclaimed_at_once(client: redis.Redis, layout: Layout) -> None:
    """Entries a drain took and could not commit, once released, are the next flusher's
    batch at once, not after reclaim_after; one acknowledged meanwhile is not released."""
    keys = layout.thread("t")
    missed = thread.found(run(client, thread.get(keys, "", "", TTL, "ticket")))
    run(client, thread.known_empty(keys, "", missed.ticket))
    for cid in ("c1", "c2", "c3"):
        run(client, _put_behind(keys, layout, cid))
    read = {"group": GROUP, "count": 10, "reclaim": 60_000, "cap": 1 << 20, "forget": 0}
    ids = [e[0] for e in run(client, shards.flush_read(layout, 0, consumer="drain", **read))]
    assert run(client, shards.flush_read(layout, 0, consumer="flusher", **read)) == []
    client.xack(layout.journal(0), GROUP, ids[0])
    assert run(client, shards.journal_release(layout, 0, GROUP, "drain", 60_000, ids)) == 2
    batch = run(client, shards.flush_read(layout, 0, consumer="flusher", **read))
    assert [e[0] for e in batch] == ids[1:]
    client.delete(layout.journal(0))  # Redis emptied meanwhile: nothing is held
    assert run(client, shards.journal_release(layout, 0, GROUP, "drain", 60_000, ids)) == 0


def test_a_release_without_ids_releases_every_entry_the_drain_holds(
    client: redis.Redis, layout: Layout
) -> None:
    """A drain that gave up on its read's reply may hold entries it never saw: released
    with no ids, every entry it holds is the next flusher's batch at once; another
    consumer's stay its own."""
    keys = layout.thread("t")
    missed = thread.found(run(client, thread.get(keys, "", "", TTL, "ticket")))
    run(client, thread.known_empty(keys, "", missed.ticket))
    for cid in ("c1", "c2", "c3"):
        run(client, _put_behind(keys, layout, cid))
    read = {"group": GROUP, "reclaim": 60_000, "cap": 1 << 20, "forget": 0}
    mine = [e[0] for e in run(client, shards.flush_read(layout, 0, consumer="other",
                                                        count=1, **read))]
    held = [e[0] for e in run(client, shards.flush_read(layout, 0, consumer="drain",
                                                        count=10, **read))]
    assert run(client, shards.journal_release(layout, 0, GROUP, "drain", 60_000, [])) == 2
    batch = run(client, shards.flush_read(layout, 0, consumer="flusher", count=10, **read))
    assert [e[0] for e in batch] == held and mine[0] not in held
    assert run(client, shards.journal_release(layout, 0, GROUP, "gone", 60_000, [])) == 0


def test_repair_deletes_only_the_keys_of_another_type(client: redis.Redis,
                                                      layout: Layout) -> None:
    """A call's keys and its registry's members that hold another type than the scripts
    keep are deleted and named, with the type found and the one expected; keys of the
    right type stay. The intents key comes back holding one intent until the deadline
    given (it stands in for the intents it lost, which no eviction would have taken)."""
    keys = layout.thread("t")
    _intent(client, keys, "tok")
    assert _put(client, keys, "c1", version=7, token="tok", head=True) == 1
    assert client.sismember(keys.registry, keys.checkpoint("", "c1"))
    client.delete(keys.blobs(""), keys.checkpoint("", "c1"))
    client.set(keys.blobs(""), "a string")  # a registry member of another type
    client.rpush(keys.checkpoint("", "c1"), "a list")
    client.set(keys.intents, "a string")  # a call's key of another type
    found = []
    deadline = 1_900_000_000_000
    for request in thread.repairs(thread.get(keys, "", "", TTL, "ticket"), layout.prefix,
                                  deadline):
        found += thread.repaired(run(client, request))
    assert sorted(found) == sorted([
        (keys.intents, "string", "zset"), (keys.blobs(""), "string", "hash"),
        (keys.checkpoint("", "c1"), "list", "hash")])
    assert client.type(keys.registry) == b"set" and client.type(keys.index("")) == b"zset"
    assert not client.exists(keys.blobs(""), keys.checkpoint("", "c1"))
    assert client.zrange(keys.intents, 0, -1, withscores=True) == [(b"lost", deadline)]
    assert client.ttl(keys.intents) == -1
    assert run(client, thread.get(keys, "", "", TTL, "ticket"))[0] == Reply.BUSY


def test_store_scripts_fill_only_what_no_write_or_newer_row_replaced(
        client: redis.Redis, layout: Layout) -> None:
    """A memory item's cache entry: a read that misses keeps its ticket there, and only
    that read's fill caches its row; a write's hold hides the row from reads, takes the
    tickets and refuses fills (a slow reader never puts back what a writer replaced); the
    write's row lands when it commits, and an older fill after it is refused; an entry
    that went (expired, evicted) took its tickets, so a fill read before cannot land."""
    entry = f"{layout.prefix}:store-item"
    assert run(client, store.get(entry, "a", 30_000)) is None
    assert 0 < client.pttl(entry) <= 30_000, "an entry made for a ticket lives the lease"
    assert run(client, store.fill(entry, "b", 5, "row-5", 60)) == 0  # another read's ticket
    assert run(client, store.fill(entry, "a", 5, "row-5", 60)) == 1
    assert run(client, store.get(entry, "c", 30_000)) == [b"5", b"row-5"]
    assert run(client, store.get(entry, "c", 30_000)) == [b"5", b"row-5"]  # no ticket kept
    assert run(client, store.fill(entry, "c", 7, "row-7", 60)) == 0
    assert run(client, store.hold(entry, 30_000)) == 1
    assert run(client, store.get(entry, "d", 30_000)) is None
    assert not client.hexists(entry, "t"), "no ticket while a write holds the entry"
    assert run(client, store.fill(entry, "d", 5, "row-5", 60)) == 0  # a write is in flight
    assert run(client, store.wrote(entry, 6, "row-6", 60)) == 0
    assert run(client, store.get(entry, "e", 30_000)) == [b"6", b"row-6"]
    assert run(client, store.fill(entry, "a", 5, "row-5", 60)) == 0  # its ticket is gone
    assert run(client, store.get(entry, "e", 30_000)) == [b"6", b"row-6"]
    assert run(client, store.hold(entry, 30_000)) == 1
    assert run(client, store.wrote(entry, 8, "", 60)) == 0  # a deletion (or a TTL item)
    assert run(client, store.get(entry, "f", 30_000)) is None  # read from Postgres
    assert client.pttl(entry) > 30_000, "an entry with a version keeps its own TTL"
    assert run(client, store.fill(entry, "f", 7, "row-7", 60)) == 0  # older than 8
    client.delete(entry)  # the entry went (expired, evicted) after a read missed
    assert run(client, store.get(entry, "g", 30_000)) is None
    client.delete(entry)
    assert run(client, store.fill(entry, "g", 9, "row-9", 60)) == 0
    assert not client.exists(entry)


def test_a_redis_process_is_checked_by_one_caller_and_recorded(
        client: redis.Redis, layout: Layout) -> None:
    """A run id not recorded: the first caller gets the lock, a second waits; the holder's
    scan steps return the thread keys (registry, versions) and delete the store's cached
    items; once done the run id is recorded and the lock gone, and a caller whose lock was
    taken over gets nothing from a scan step. A check abandoned midway releases only its
    own lock and records nothing."""
    keys = layout.thread("t-1")
    client.sadd(keys.registry, keys.index(""))
    client.hset(keys.versions, "*", 1)
    client.set(f"{layout.prefix}:store:[\"ns\", \"k\"]", "cached")
    assert run(client, shards.incarnation(layout, "check", "run-1", "mine", 5000)) == 0
    assert run(client, shards.incarnation(layout, "check", "run-1", "other", 5000)) == -1
    met: set[str] = set()
    cursor = "0"
    while True:
        reply = run(client, shards.incarnation_scan(layout, "mine", 5000, cursor, 100))
        cursor = reply[0].decode()
        met |= {key.decode() for key in reply[1:]}
        if cursor == "0":
            break
    assert met == {keys.registry, keys.versions}
    assert {layout.thread_of(key) for key in met} == {"t-1"}
    assert not client.keys(f"{layout.prefix}:store:*")
    assert run(client, shards.incarnation_scan(layout, "other", 5000, "0", 100)) == []
    assert run(client, shards.incarnation(layout, "done", "run-1", "mine")) == 1
    assert run(client, shards.incarnation(layout, "check", "run-1", "other", 5000)) == 1
    assert not client.exists(layout.incarnation_lock())
    assert run(client, shards.incarnation(layout, "check", "run-2", "other", 5000)) == 0
    assert run(client, shards.incarnation(layout, "abandon", "run-2", "mine")) == 1
    assert client.exists(layout.incarnation_lock())  # not the caller's lock: kept
    assert run(client, shards.incarnation(layout, "abandon", "run-2", "other")) == 1
    assert not client.exists(layout.incarnation_lock())
    assert client.get(layout.incarnation()) == b"run-1"  # a check abandoned records nothing


def test_every_script_ran() -> None:
    """The tests above ran every script of the registry (runs last, in file order)."""
    assert set(SCRIPTS) == RAN
