"""The saver on a Redis Cluster (a private one of three primaries with a replica each,
`tests/support/cluster.py`): detection, the conformance suite in both write modes, write-behind
with its sharded journal, the ledger, the CLI, hostile thread ids, and a primary killed
mid-run."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncGenerator, Awaitable, Callable, Generator, Iterator
from typing import Any

import pytest
import redis
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES
from typer.testing import CliRunner, Result

from langgraph_durable import ConfigurationError, DurableSaver, TierUnavailableError
from langgraph_durable._core import journal
from langgraph_durable._core.context import Latencies
from langgraph_durable._core.keys import key_slot
from langgraph_durable._core.scripts import thread as thread_calls
from langgraph_durable._tiers import sync
from langgraph_durable._tiers.common import told
from langgraph_durable.cli import app
from langgraph_durable.config import SaverConfig
from tests.support.checkpoints import aput_value, cold_checkpoints, put_value
from tests.support.cluster import TestCluster
from tests.support.credentials import RotatingCredentials
from tests.support.graphs import CHARGE_CALL, charge_card_graph, chat_graph
from tests.support.kills import kill_workers
from tests.support.servers import POSTGRES_URL, REDIS_URL
from tests.support.sync_methods import SyncMethods


@pytest.fixture
def cluster_saver(redis_cluster: TestCluster, namespace: tuple[str, str],
                  write_mode: str) -> Iterator[Callable[..., DurableSaver]]:
    """A factory of set-up savers on the test cluster (this module's schema, a fresh
    prefix per test)."""
    schema, prefix = namespace
    prefix = f"{prefix}-{uuid.uuid4().hex[:6]}"
    made: list[DurableSaver] = []

    def factory(**options: Any) -> DurableSaver:
        options.setdefault("write_mode", write_mode)
        saver = DurableSaver(redis_cluster.url, POSTGRES_URL, key_prefix=prefix, schema=schema,
                             **options)
        saver.setup()
        made.append(saver)
        return saver

    yield factory
    for saver in made:
        saver.close()


def _config(thread: str) -> Any:
    return {"configurable": {"thread_id": thread}}


def test_a_cluster_node_url_is_detected_and_keys_spread_over_every_primary(
        cluster_saver: Callable[..., DurableSaver], redis_cluster: TestCluster) -> None:
    """A saver given one node's URL learns at open that Redis is a cluster (16 journal
    shards), and the threads' keys land on all three primaries, each thread in one slot."""
    saver = cluster_saver()
    for i in range(40):
        put_value(saver, f"t{i}", i)
    layout = saver.engine.context.layout
    assert layout.cluster and layout.shards == 16
    owners = {redis_cluster.primary_of(layout.thread(f"t{i}").registry) for i in range(40)}
    assert len(owners) == 3
    keys = layout.thread("t1")
    slots = {key_slot(k) for k in (keys.registry, keys.index(""), keys.unflushed,
                                   layout.journal(layout.shard("t1")))}
    assert len(slots) == 1


@pytest.mark.parametrize("flavour", ["async", "sync", "one node, 4 shards"])
async def test_conformance_on_a_cluster(redis_cluster: TestCluster, namespace: tuple[str, str],
                                        write_mode: str, flavour: str) -> None:
    """The official conformance suite passes every capability on the cluster (async and
    sync methods), and with the sharded layout on the single node."""
    schema, prefix = namespace
    sharded = flavour.startswith("one node")
    url = REDIS_URL if sharded else redis_cluster.url
    name = "sharded" if sharded else flavour

    @checkpointer_test(name=f"DurableSaver[cluster,{write_mode},{flavour}]")
    async def factory() -> AsyncGenerator[BaseCheckpointSaver[Any], None]:
        saver = DurableSaver(url, POSTGRES_URL, key_prefix=f"{prefix}-{name}",
                             schema=schema, write_mode=write_mode,  # type: ignore[arg-type]
                             journal_shards=4 if sharded else None)
        await saver.asetup()
        yield saver if flavour == "async" else SyncMethods(saver)
        await saver.aclose()

    report = await validate(factory)
    failures = {cap: r.failures for cap, r in report.results.items() if not r.passed}
    assert not failures, failures
    assert {cap for cap, r in report.results.items() if r.passed} == {
        cap.value for cap in ALL_CAPABILITIES}


@pytest.mark.parametrize("write_mode", ["behind"])
def test_write_behind_on_a_cluster_flushes_every_shard_then_deletes(
        cluster_saver: Callable[..., DurableSaver], namespace: tuple[str, str]) -> None:
    """60 threads of graph runs written behind (no background flusher) wait in the
    journals of several shards; flush() moves all of them to Postgres; deleting a thread
    removes it from both tiers and nothing brings it back."""
    schema, _ = namespace
    saver = cluster_saver(background_flush=False)
    graph = chat_graph(saver)
    threads = [f"wb-{uuid.uuid4().hex[:8]}" for _ in range(60)]
    for thread in threads:
        graph.invoke({"messages": [HumanMessage("hi")]}, _config(thread))
    layout = saver.engine.context.layout
    assert len({layout.shard(t) for t in threads}) > 8
    state = saver.engine.run(journal.journal_state(saver.engine.context))
    assert state.length >= 60 * 5
    assert cold_checkpoints(schema, threads[0]) == 0
    assert saver.flush(timeout=60) == state.length
    assert saver.engine.run(journal.journal_state(saver.engine.context)).length == 0
    assert all(cold_checkpoints(schema, t) == 5 for t in threads)
    saver.delete_thread(threads[0])
    assert saver.get_tuple(_config(threads[0])) is None
    assert cold_checkpoints(schema, threads[0]) == 0
    other = cluster_saver()  # a second process sees the same state
    assert other.get_tuple(_config(threads[1])) is not None
    assert other.get_tuple(_config(threads[0])) is None


@pytest.mark.parametrize("thread", ["{", "}", "a}{b", "x:{y}:z", "日本語 🌈", "{lgd.j0.41}"])
def test_hostile_thread_ids_stay_in_their_own_keys(cluster_saver: Callable[..., DurableSaver],
                                                   thread: str) -> None:
    """Thread ids holding braces, colons or a shard's tag write, read,
    list and delete like any other, each in its own keys."""
    saver = cluster_saver()
    put_value(saver, thread, "mine")
    put_value(saver, f"{thread}-neighbour", "theirs")
    got = saver.get_tuple(_config(thread))
    assert got is not None and got.checkpoint["channel_values"] == {"value": "mine"}
    assert len(list(saver.list(_config(thread)))) == 1
    saver.delete_thread(thread)
    assert saver.get_tuple(_config(thread)) is None
    neighbour = saver.get_tuple(_config(f"{thread}-neighbour"))
    assert neighbour is not None and neighbour.checkpoint["channel_values"] == {"value": "theirs"}


def test_ledger_replays_a_recorded_call_on_a_cluster(
        cluster_saver: Callable[..., DurableSaver]) -> None:
    """A durable tool's call is recorded once; the tool step run again from the same
    checkpoint (it failed after the tool ran) replays the result without calling the
    tool."""
    saver = cluster_saver()
    calls: list[int] = []
    graph = charge_card_graph(saver, calls, fail_once=True)
    thread = uuid.uuid4().hex
    with pytest.raises(RuntimeError, match="fails once"):
        graph.invoke({"messages": [AIMessage("", tool_calls=[CHARGE_CALL])]}, _config(thread))
    graph.invoke(None, _config(thread))
    assert calls == [500]
    [record] = saver.ledger.list(thread)
    assert record.status == "succeeded" and record.attempts == 1


@pytest.mark.parametrize("write_mode", ["behind"])
def test_cli_threads_flush_show_and_doctor_on_a_cluster(
        cluster_saver: Callable[..., DurableSaver], redis_cluster: TestCluster,
        namespace: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """threads finds threads on every primary (unflushed first), flush drains every shard,
    show prints a thread's state, doctor names the cluster and passes."""
    saver = cluster_saver()
    monkeypatch.setattr(saver, "_start_flusher", lambda: None)
    threads = [f"cli-{i}-{uuid.uuid4().hex[:6]}" for i in range(12)]
    graph = chat_graph(saver)
    for thread in threads:
        graph.invoke({"messages": [HumanMessage("hi")]}, _config(thread))
    schema, _ = namespace
    env = {"LGD_REDIS_URL": redis_cluster.url, "LGD_POSTGRES_URL": POSTGRES_URL,
           "LGD_SCHEMA": schema, "LGD_KEY_PREFIX": saver.config.key_prefix, "COLUMNS": "250"}

    def cli(*args: str) -> Result:
        return CliRunner().invoke(app, list(args), env=env)

    def row(thread: str) -> list[str]:
        result = cli("threads", "--limit", "10000")  # the module's schema has many threads
        assert result.exit_code == 0, result.output
        line = next((line for line in result.stdout.splitlines() if thread in line), "")
        assert line, result.output
        return [c.strip() for c in line.strip("│ ").split("│")]

    assert all(row(t)[4:] == ["redis", "5"] for t in threads[:3])
    flushed = cli("flush")
    assert flushed.exit_code == 0, flushed.output
    assert row(threads[0])[4:] == ["redis, postgres", "0"]
    shown = cli("show", threads[1])
    assert shown.exit_code == 0 and "hi" in shown.stdout, shown.output
    doctor = cli("doctor")
    assert "(cluster)" in doctor.stdout, doctor.output


def test_every_process_of_a_prefix_needs_the_same_shard_count(
        cluster_saver: Callable[..., DurableSaver]) -> None:
    """A saver configured with another journal_shards than the prefix uses is refused at
    its first operation, before it writes a key where the others would not look."""
    first = cluster_saver()
    put_value(first, "t", 1)
    with pytest.raises(ConfigurationError, match="journal_shards"):
        cluster_saver(journal_shards=4)


# ------------------------------------------------------------------------- failover


async def _acknowledged_run(put: Callable[[str, int], Awaitable[dict[str, Any]]],
                            threads: list[str], rounds: int, kill: Callable[[], None],
                            kill_at: int) -> dict[str, list[str]]:
    """Write ``rounds`` checkpoints to each thread with ``put``, retrying a write the saver
    refused (write-behind fails closed while a node is down); call ``kill`` at round
    ``kill_at``. Returns each thread's acknowledged checkpoint ids in order."""
    acked: dict[str, list[str]] = {t: [] for t in threads}
    for n in range(rounds):
        if n == kill_at:
            kill()
        for thread in threads:
            deadline = time.monotonic() + 30
            while True:
                try:
                    config = await put(thread, n)
                    break
                except TierUnavailableError:
                    assert time.monotonic() < deadline, "the saver never recovered"
                    await asyncio.sleep(0.1)
            acked[thread].append(config["configurable"]["checkpoint_id"])
    return acked


@pytest.mark.parametrize(("write_mode", "flavour"),
                         [("through", "sync"), ("behind", "sync"), ("behind", "async")])
def test_a_killed_primary_loses_nothing_acknowledged(namespace: tuple[str, str],
                                                     write_mode: str, flavour: str) -> None:
    """SIGKILL a primary mid-run (its replica takes over after cluster-node-timeout): the
    saver keeps writing (sync or async calls) after the topology changes; afterwards every
    acknowledged checkpoint of every thread is readable, in Postgres, and each thread's
    latest is the last acknowledged one. (On this loopback cluster the replica has every
    write its primary acknowledged; see docs/failure-model.md for the replication window.)"""
    schema, prefix = namespace
    prefix = f"{prefix}-fo-{write_mode}-{flavour}"
    cluster = TestCluster().start()
    try:
        saver = DurableSaver(cluster.url, POSTGRES_URL, key_prefix=prefix,
                             schema=schema, write_mode=write_mode,  # type: ignore[arg-type]
                             breaker_cooldown=0.2, flush_interval=0.05)
        saver.setup()
        layout = saver.engine.context.layout
        threads = [f"fo-{write_mode}-{flavour}-{i}" for i in range(24)]
        victim = cluster.primary_of(layout.thread(threads[0]).registry)

        async def put(thread: str, n: int) -> dict[str, Any]:
            if flavour == "async":
                return await aput_value(saver, thread, n)
            return put_value(saver, thread, n)

        acked = asyncio.run(_acknowledged_run(put, threads, rounds=30,
                                              kill=lambda: cluster.kill(victim), kill_at=10))
        cluster.wait_promoted(victim)
        saver.flush(timeout=60)
        saver.close()
        fresh = DurableSaver(cluster.url, POSTGRES_URL, key_prefix=prefix,
                             schema=schema, write_mode=write_mode)  # type: ignore[arg-type]
        try:
            for thread, ids in acked.items():
                latest = fresh.get_tuple(_config(thread))
                assert latest is not None
                assert latest.config["configurable"]["checkpoint_id"] == ids[-1], thread
                listed = [t.config["configurable"]["checkpoint_id"]
                          for t in fresh.list(_config(thread))]
                assert set(ids) <= set(listed), thread
                assert cold_checkpoints(schema, thread) == len(ids)
        finally:
            fresh.close()
    finally:
        cluster.stop()


def test_the_cluster_is_used_through_any_node(redis_cluster: TestCluster,
                                              namespace: tuple[str, str]) -> None:
    """A replica's URL works too: the client finds the primaries from it."""
    schema, prefix = namespace
    saver = DurableSaver(f"redis://127.0.0.1:{redis_cluster.ports[4]}/0", POSTGRES_URL,
                         key_prefix=f"{prefix}-replica", schema=schema)
    try:
        saver.setup()
        put_value(saver, "r", "v")
        got = saver.get_tuple(_config("r"))
        assert got is not None and got.checkpoint["channel_values"] == {"value": "v"}
    finally:
        saver.close()


def test_a_cluster_node_down_at_start_is_learned_when_it_answers(
        redis_cluster: TestCluster, namespace: tuple[str, str]) -> None:
    """A saver whose node is down when it starts serves write-through from Postgres; once
    the node answers, the saver learns it is a cluster, switches to the cluster's layout,
    and serves from Redis, the threads written meanwhile included."""
    schema, prefix = namespace
    replica = redis_cluster.ports[5]
    redis_cluster.kill(replica)
    saver = DurableSaver(f"redis://127.0.0.1:{replica}/0", POSTGRES_URL,
                         key_prefix=f"{prefix}-late", schema=schema, breaker_cooldown=0.1)
    try:
        saver.setup()
        put_value(saver, "early", 1)
        assert not saver.engine.context.layout.cluster
        redis_cluster.start_node(replica)
        deadline = time.monotonic() + 20
        while not (saver.engine.context.layout.cluster and saver.health()["hot"]["breaker"]
                   == "closed"):
            assert time.monotonic() < deadline, "the saver never reached the cluster"
            got = saver.get_tuple(_config("early"))
            assert got is not None and got.checkpoint["channel_values"] == {"value": 1}
            time.sleep(0.1)
        put_value(saver, "late", 2)
        layout = saver.engine.context.layout
        assert layout.shards == 16
        assert redis_cluster.client(redis_cluster.primary_of(
            layout.thread("late").registry)).exists(layout.thread("late").registry)
        got = saver.get_tuple(_config("early"))
        assert got is not None and got.checkpoint["channel_values"] == {"value": 1}
    finally:
        saver.close()


@pytest.mark.parametrize("write_mode", ["behind"])
def test_dead_letters_are_kept_and_resolved_per_shard(
        cluster_saver: Callable[..., DurableSaver], redis_cluster: TestCluster) -> None:
    """An entry Postgres cannot take, in shard 5's journal, becomes a dead letter of shard
    5 (its id says so) while the rest drains; dropping it by that id removes it."""
    saver = cluster_saver()
    ctx = saver.engine.context
    put_value(saver, "fine", 1)
    client = redis.RedisCluster.from_url(redis_cluster.url)
    try:
        client.xadd(ctx.layout.journal(5), {"d": b"not a journal entry"})
    finally:
        client.close()
    saver.flush(timeout=30)
    [letter] = saver.engine.run(journal.dead_letters(ctx))
    assert letter.id.startswith("5/") and letter.kind == "?"
    assert saver.engine.run(journal.resolve_dead_letter(ctx, letter.id, "drop")) == "dropped"
    assert saver.engine.run(journal.dead_letters(ctx)) == []
    assert saver.engine.run(journal.journal_state(ctx)).length == 0


@pytest.mark.parametrize("write_mode", ["through", "behind"])
def test_killed_agents_on_a_cluster_lose_nothing_acknowledged(
    cluster_saver: Callable[..., DurableSaver], redis_cluster: TestCluster,
    namespace: tuple[str, str], write_mode: str,
) -> None:
    """Agent processes writing through the cluster, SIGKILLed at random acknowledged
    checkpoints: everything they acknowledged is in Postgres and their threads resume to
    their end (the crash test of a single node, on the cluster)."""
    saver = cluster_saver()
    kill_workers(6, namespace[0], saver.config.key_prefix, write_mode, saver,
                 redis_url=redis_cluster.url, seed=77)


@pytest.mark.parametrize("write_mode", ["through", "behind"])
async def test_more_concurrent_calls_than_connections_wait_for_one(
    cluster_saver: Callable[..., DurableSaver], write_mode: str,
) -> None:
    """Forty concurrent writers through a saver allowed two Redis connections: the cluster
    client's node pools refuse a third connection, so callers wait for a free one (as on a
    single node) instead of the hot tier being reported down and the breaker opening."""
    saver = cluster_saver(redis_max_connections=2)
    threads = [f"crowd-{n}-{uuid.uuid4().hex[:6]}" for n in range(40)]
    for turn in range(3):
        await asyncio.gather(*(aput_value(saver, t, f"{t}:{turn}") for t in threads))
    assert saver.health()["hot"]["trips"] == 0
    for t in threads:
        tup = await saver.aget_tuple(_config(t))
        assert tup is not None and tup.checkpoint["channel_values"]["value"] == f"{t}:2"


def test_the_credential_provider_opens_every_cluster_connection(
        redis_cluster: TestCluster, namespace: tuple[str, str]) -> None:
    """``redis_credential_provider`` authenticates the cluster client's connections to
    every node it routes to, blocking and async, as it does a single node's."""
    schema, prefix = namespace
    user = f"lgd-{uuid.uuid4().hex[:6]}"
    nodes = [redis_cluster.client(port) for port in redis_cluster.ports]
    for node in nodes:
        node.execute_command("ACL", "SETUSER", user, "on", ">token-1", "~*", "&*", "+@all")
    provider = RotatingCredentials(user, "token-1")
    try:
        with DurableSaver(redis_cluster.url, POSTGRES_URL, key_prefix=f"{prefix}-acl",
                          schema=schema, redis_credential_provider=provider) as saver:
            saver.setup()
            threads = [f"acl-{i}" for i in range(12)]
            for thread in threads:
                put_value(saver, thread, thread)
            asyncio.run(aput_value(saver, "acl-async", 1))
            assert saver.health()["hot"]["breaker"] == "closed"
            layout = saver.engine.context.layout
            owners = {redis_cluster.primary_of(layout.thread(t).registry) for t in threads}
            assert len(owners) == 3  # the threads live on every primary
            for port in owners:
                users = {c.get("user") for c in redis_cluster.client(port).client_list()}
                assert user in users, f"no connection of {user} on node {port}: {users}"
            assert provider.calls >= 4  # each node's connection, blocking and async
    finally:
        for node in nodes:
            node.execute_command("ACL", "DELUSER", user)
            node.close()


@pytest.mark.parametrize("setting", ["replica_acks", "client_passed_in", "not_a_cluster"])
def test_settings_a_cluster_cannot_honour_are_refused_at_start(
        redis_cluster: TestCluster, namespace: tuple[str, str], setting: str) -> None:
    """What works on one node only is refused with the reason when the saver meets a
    cluster, instead of being ignored (``WAIT`` on one node's replicas, a single-node
    client that would be bypassed) or tripping the breaker on ``MOVED`` replies."""
    schema, prefix = namespace
    options: dict[str, Any] = {
        "replica_acks": {"redis_replica_acks": 1},
        "client_passed_in": {"redis_client": redis.Redis.from_url(redis_cluster.url)},
        "not_a_cluster": {"redis_cluster": False},
    }[setting]
    expected = {"replica_acks": "redis_replica_acks is not supported on a Redis Cluster",
                "client_passed_in": "a Redis client was passed in, but Redis is a cluster",
                "not_a_cluster": "redis_cluster=False but .* is a node of a Redis Cluster",
                }[setting]
    saver = DurableSaver(redis_cluster.url, POSTGRES_URL, key_prefix=f"{prefix}-no",
                         schema=schema, **options)
    try:
        with pytest.raises(ConfigurationError, match=expected):
            saver.setup()
    finally:
        saver.close()


def test_redis_cluster_true_on_a_single_node_is_refused(namespace: tuple[str, str]) -> None:
    """``redis_cluster=True`` against a server that is no cluster node says so."""
    schema, prefix = namespace
    with DurableSaver(REDIS_URL, POSTGRES_URL, key_prefix=f"{prefix}-single", schema=schema,
                      redis_cluster=True) as saver, pytest.raises(
            ConfigurationError, match=r"redis_cluster=True but .* is not a node of a Redis"):
        saver.setup()


def test_a_request_built_before_redis_turned_out_to_be_a_cluster_is_not_sent(
        redis_cluster: TestCluster, namespace: tuple[str, str]) -> None:
    """Two drivers share what the saver learned (a process's blocking and async clients):
    an operation that built its keys with the single-node layout, while the other driver
    learns that Redis is a cluster, gets the hot tier's error instead of writing keys no
    process of the cluster's layout reads."""
    schema, prefix = namespace
    config = SaverConfig(redis_url=redis_cluster.url, postgres_url=POSTGRES_URL,
                         key_prefix=f"{prefix}-race", schema=schema)
    learn = told(config)
    first = sync.Tiers(config, Latencies(), learn=learn)
    second = sync.Tiers(config, Latencies(), learn=learn)
    keys = learn(None).thread("raced")
    assert not learn(None).cluster

    def intent() -> Generator[Any, Any, Exception | None]:
        first.open()  # meanwhile, the other driver learns that Redis is a cluster
        try:
            yield thread_calls.intent(keys, "token", 2**50, 0, "")
        except TierUnavailableError as exc:
            return exc
        return None

    try:
        error = second.run(intent(), lambda request: None)
        assert isinstance(error, TierUnavailableError) and "cluster" in str(error)
        assert learn(None).cluster
        client = redis.RedisCluster.from_url(redis_cluster.url)
        assert client.exists(keys.intents) == 0
        client.close()
    finally:
        first.close()
        second.close()
