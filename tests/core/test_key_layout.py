"""Where keys live: today's names on a single node, and the sharded layout a Redis Cluster
uses, each script's keys in one slot."""

from __future__ import annotations

import pytest
import redis.crc

from langgraph_durable._core.keys import SLOTS, Layout, ThreadKeys, key_slot
from langgraph_durable.errors import ConfigurationError


def test_a_single_node_keeps_todays_key_names() -> None:
    """One journal on a single node: the names existing deployments already hold."""
    layout = Layout("app")
    assert not layout.sharded and layout.shards == 1
    assert layout.journal(0) == "app:journal"
    assert layout.journal_bytes(0) == "app:journal:bytes"
    assert layout.dead(0) == "app:dead"
    assert layout.marks(0) == "app:marks"
    assert layout.thread("t1").registry == ThreadKeys("app", "t1").registry == "app:{dDE}:k"


def test_slots_are_computed_as_redis_cluster_computes_them() -> None:
    """`key_slot` agrees with redis-py's CRC16 (hash tags, empty tags, no tags)."""
    for key in ("app:{dDE}:k", "foo{}bar", "{a}{b}", "plain", "x{y", "日本"):
        assert key_slot(key) == redis.crc.key_slot(key.encode())


def test_a_threads_keys_and_its_shards_journal_share_one_slot() -> None:
    """Every key a write-behind script touches (thread keys, journal, byte counter, dead
    letters, marks) is in the thread's shard's slot, whatever the thread id holds."""
    layout = Layout("app", cluster=True)
    assert layout.shards == 16
    for thread in ("t1", "{", "}", "a}{b", "x:{y}:z", "", "日本語", "{app.j0.0}"):
        keys, shard = layout.thread(thread), layout.shard(thread)
        names = [keys.registry, keys.intents, keys.unflushed, keys.versions, keys.index("ns"),
                 keys.blobs("ns"), keys.checkpoint("ns", "1"), layout.journal(shard),
                 layout.journal_bytes(shard), layout.dead(shard), layout.marks(shard)]
        assert len({key_slot(name) for name in names}) == 1, thread
        assert not any(name in (layout.journal(k), layout.journal_bytes(k), layout.dead(k),
                                layout.marks(k)) for k in range(16) for name in names[:7])


def test_shards_spread_evenly_over_the_slot_space_and_prefixes_apart() -> None:
    """Shard k's tag is in the k-th of S equal slot ranges (so 16 shards fall 5-6 on each
    of three primaries with even ranges), and two prefixes use different slots."""
    for shards in (3, 16, 64):
        layout = Layout("app", shards=shards)
        for k in range(shards):
            slot = key_slot(layout.journal(k))
            assert k * SLOTS // shards <= slot < (k + 1) * SLOTS // shards
    one, two = Layout("a", cluster=True), Layout("b", cluster=True)
    assert {key_slot(one.journal(k)) for k in range(16)}.isdisjoint(
        {key_slot(two.journal(k)) for k in range(16)})


def test_a_threads_shard_is_stable_and_threads_spread() -> None:
    """The shard depends on the thread id alone (every process agrees), and 1,000 threads
    fill every shard."""
    layout = Layout("app", shards=16)
    assert layout.shard("thread-42") == Layout("other", cluster=True).shard("thread-42")
    counts = [0] * 16
    for i in range(1000):
        counts[layout.shard(f"thread-{i}")] += 1
    assert min(counts) > 30


def test_a_recorded_layout_reads_back_as_the_layout_that_wrote_it() -> None:
    """`Layout.from_description` inverts `describe` (the value a prefix records), and a
    value no layout wrote is a configuration error naming the prefix."""
    for written in (Layout("app"), Layout("app", shards=4), Layout("app", cluster=True)):
        read = Layout.from_description("app", written.describe().encode(),
                                       cluster=written.cluster)
        assert (read.shards, read.tags) == (written.shards, written.tags)
    for junk in ("shards=0", "shards=x", "shards=257", "slots=4", ""):
        with pytest.raises(ConfigurationError, match="'app'"):
            Layout.from_description("app", junk)
