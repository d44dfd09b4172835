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


@pytest.mark.parametrize("layout", [Layout("app"), Layout("app", shards=4),
                                    Layout("app", cluster=True)], ids=["node", "4", "cluster"])
def test_a_registry_key_found_by_scan_names_its_thread(layout: Layout) -> None:
    """`registry_pattern` matches every thread's registry key (as Redis' ``MATCH`` does)
    and `registry_thread` reads the thread back; a key of another kind, prefix or shard,
    or one that is not base64, names none."""
    import fnmatch

    keys = layout.thread("t/1:é")
    assert fnmatch.fnmatchcase(keys.registry, layout.registry_pattern())
    assert layout.registry_thread(keys.registry) == "t/1:é"
    assert layout.registry_thread(keys.registry.encode()) == "t/1:é"
    other = Layout("other", shards=layout.shards, cluster=layout.cluster)
    not_registries = [keys.versions, keys.index("ns"), other.thread("t/1:é").registry,
                      keys.registry.replace(keys.base, keys.base + "%"), "app:{.}:k"]
    if layout.tags is not None:  # the thread's name under another shard's tag
        tag = keys.base.split("{")[1].split("}")[0]
        wrong = next(t for t in layout.tags if t != tag)
        not_registries.append(keys.registry.replace(tag, wrong))
    assert [layout.registry_thread(k) for k in not_registries] == [None] * len(not_registries)


def test_an_index_key_names_its_namespace() -> None:
    """`ThreadKeys.index_namespace` inverts `ThreadKeys.index`, and is ``None`` for the
    thread's other keys."""
    keys = Layout("app").thread("t1")
    assert [keys.index_namespace(keys.index(ns)) for ns in ("", "a:b", "日本")] == [
        "", "a:b", "日本"]
    assert [keys.index_namespace(k) for k in (keys.blobs("a"), keys.registry,
                                              keys.index("a") + "%")] == [None] * 3
