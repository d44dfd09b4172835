"""The two tiers behave as one store: each case here is an interleaving or a fault that once
made a read return an older checkpoint, lost an acknowledged write, brought a deleted
thread back or forked a thread. Separate saver objects stand in for separate processes
(each has its own breaker, decoded cache and mark clock)."""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from typing import Any

import psycopg
import pytest
import redis
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt
from typing_extensions import TypedDict

from langgraph_durable import DurableSaver, ThreadConflictError, TierUnavailableError
from langgraph_durable._core import journal, ops
from langgraph_durable._core.keys import ThreadKeys
from langgraph_durable._core.requests import Cold, Hot
from tests.support.faults import Proxy
from tests.support.graphs import chat_graph
from tests.support.servers import POSTGRES_URL, REDIS_URL, redis_address


def _config(thread: str, checkpoint_id: str | None = None) -> dict[str, Any]:
    configurable: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ""}
    if checkpoint_id:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}


def _put(saver: DurableSaver, config: dict[str, Any], value: str,
         metadata: dict[str, Any] | None = None) -> dict[str, Any]:
    """One checkpoint whose channel ``value`` holds ``value``; ``config`` names the parent."""
    checkpoint = empty_checkpoint()
    version = saver.get_next_version(None, None)
    checkpoint["channel_values"] = {"value": value}
    checkpoint["channel_versions"] = {"value": version}
    return saver.put(config, checkpoint, {"source": "loop", "step": 0, **(metadata or {})},
                     {"value": version})


def _chain(saver: DurableSaver, thread: str, values: list[str]) -> list[dict[str, Any]]:
    configs, parent = [], _config(thread)
    for value in values:
        parent = _put(saver, parent, value)
        configs.append(parent)
    return configs


def _through_proxy(proxy: Proxy, namespace: tuple[str, str]) -> DurableSaver:
    """A set-up saver (a process of its own) that reaches Redis through ``proxy``, so the
    test can cut it off; its breaker stays open once tripped."""
    schema, prefix = namespace
    saver = DurableSaver(f"redis://127.0.0.1:{proxy.port}/0", POSTGRES_URL, key_prefix=prefix,
                         schema=schema, breaker_cooldown=60, pool_timeout=2)
    saver.setup()
    return saver


def _value(saver: DurableSaver, config: dict[str, Any]) -> Any:
    tup = saver.get_tuple(config)
    return tup.checkpoint["channel_values"]["value"] if tup else None


def _forget_hot(saver: DurableSaver, thread: str) -> None:
    """Every hot key of the thread gone, as after its TTL or a Redis restart."""
    keys = ThreadKeys(saver.config.key_prefix, thread)
    client = redis.Redis.from_url(REDIS_URL)
    for key in client.scan_iter(match=keys.base.replace("{", "[{]").replace("}", "[}]") + "*"):
        client.delete(key)
    client.close()


def _no_effects(request: Any) -> Any:
    raise AssertionError(f"a checkpoint operation asked for a tool effect: {request!r}")


class Stepped:
    """An operation run request by request with a saver's real driver, so a test can stop
    it at any request and let other processes act first."""

    def __init__(self, saver: DurableSaver, op: Any) -> None:
        self.op, self.tiers = op, saver.engine.tiers()
        self.request = next(op)

    def until(self, stop: Any) -> Any:
        """Run requests until ``stop(request)`` holds; that request is next (not run)."""
        while not stop(self.request):
            self.request = self.op.send(self.tiers.execute(self.request, _no_effects))
        return self.request

    def finish(self) -> Any:
        """Run the rest (the next request executed and waited for); the op's result."""
        try:
            while True:
                request = self.request
                if isinstance(request, Hot):  # what was sent without waiting, lands now
                    request = Hot(request.script, request.keys, request.args)
                self.request = self.op.send(self.tiers.execute(request, _no_effects))
        except StopIteration as done:
            return done.value


def _script(name: str) -> Any:
    return lambda request: isinstance(request, Hot) and request.script.name == name


def _put_op(saver: DurableSaver, parent: dict[str, Any], value: str) -> Any:
    """The sans-I/O put of one checkpoint holding ``value`` (run it with `Stepped`)."""
    checkpoint = empty_checkpoint()
    version = saver.get_next_version(None, None)
    checkpoint["channel_values"] = {"value": value}
    checkpoint["channel_versions"] = {"value": version}
    return ops.put(saver.engine.context, parent, checkpoint, {"source": "loop", "step": 1},
                   {"value": version})


def _cold_ids(saver: DurableSaver, thread: str) -> list[str]:
    with psycopg.connect(POSTGRES_URL) as conn:
        rows = conn.execute(
            f'SELECT checkpoint_id FROM "{saver.config.schema}".lgd_checkpoints '
            "WHERE thread_id = %s ORDER BY checkpoint_id", (thread,)).fetchall()
    return [r[0] for r in rows]


def test_read_by_id_never_becomes_latest(make_saver: Any) -> None:
    """With the thread gone from Redis, reading an older checkpoint by id (get_state on a
    past config, the CLI's show/diff) does not make it the thread's latest, for any
    process."""
    writer, other = make_saver(), make_saver()
    thread = f"t-{uuid.uuid4()}"
    configs = _chain(writer, thread, ["v1", "v2", "v3", "v4", "v5"])
    writer.flush()
    _forget_hot(writer, thread)
    assert _value(other, configs[1]) == "v2"
    assert _value(other, _config(thread)) == "v5"
    assert _value(writer, _config(thread)) == "v5"


@pytest.mark.parametrize("write_mode", ["through"])
def test_write_that_bypassed_redis_is_seen_by_every_process(
    namespace: tuple[str, str], make_saver: Any
) -> None:
    """A process that cannot reach Redis writes Postgres; a process that can, and one
    started later, see that write within stale_poll_interval, and the next turn extends
    it instead of forking the thread."""
    proxy = Proxy(redis_address())
    proxy.start()
    try:
        cut_off = _through_proxy(proxy, namespace)
        reader = make_saver(write_mode="through", stale_poll_interval=0.2)
        thread = f"t-{uuid.uuid4()}"
        (first,) = _chain(cut_off, thread, ["v1"])
        assert _value(reader, _config(thread)) == "v1"
        proxy.cut()
        second = _put(cut_off, first, "v2")  # Redis unreachable: Postgres alone
        time.sleep(0.3)
        assert _value(reader, _config(thread)) == "v2"
        assert _value(make_saver(write_mode="through"), _config(thread)) == "v2"
        third = _put(reader, reader.get_tuple(_config(thread)).config, "v3")
        assert _value(reader, _config(thread)) == "v3"
        tup = reader.get_tuple(third)
        assert tup is not None and tup.parent_config is not None
        assert tup.parent_config["configurable"]["checkpoint_id"] == (
            second["configurable"]["checkpoint_id"])
        cut_off.close()
    finally:
        proxy.cut()


def test_write_behind_with_redis_unreachable_fails_closed_and_keeps_one_line(
    namespace: tuple[str, str]
) -> None:
    """Write-behind, with an unflushed turn in Redis and Redis unreachable for a moment:
    reads and writes raise TierUnavailableError(tier="hot") instead of serving Postgres's
    older state or writing on top of it; once Redis answers, the thread goes on from the
    unflushed turn and its history is one line."""
    schema, prefix = namespace
    proxy = Proxy(redis_address())
    proxy.start()
    try:
        saver = DurableSaver(f"redis://127.0.0.1:{proxy.port}/0", POSTGRES_URL,
                             key_prefix=prefix, schema=schema, write_mode="behind",
                             breaker_cooldown=0.1, background_flush=False, pool_timeout=2)
        saver.setup()
        thread = f"t-{uuid.uuid4()}"
        _, second = _chain(saver, thread, ["v1", "v2"])
        proxy.cut()
        with pytest.raises(TierUnavailableError) as read_error:
            saver.get_tuple(_config(thread))
        assert read_error.value.tier == "hot"
        with pytest.raises(TierUnavailableError) as write_error:
            _put(saver, second, "v3-during")
        assert write_error.value.tier == "hot"
        proxy.restore()
        time.sleep(0.15)
        latest = saver.get_tuple(_config(thread))
        assert latest is not None and latest.checkpoint["channel_values"]["value"] == "v2"
        _put(saver, latest.config, "v3")
        saver.flush()
        history = [t.checkpoint["channel_values"]["value"]
                   for t in saver.list(_config(thread))]
        assert history == ["v3", "v2", "v1"]
        saver.close()
    finally:
        proxy.cut()


@pytest.mark.parametrize("write_mode", ["through"])
@pytest.mark.parametrize("wiped", [False, True], ids=["redis-kept", "redis-emptied-before-warm"])
def test_a_readers_warm_never_overwrites_newer_pending_writes(
    make_saver: Any, wiped: bool
) -> None:
    """A reader misses Redis and reads Postgres; before it loads that row into Redis, a
    writer stores a pending write and applies it to Redis. The reader's load is refused
    (it is older), so the acknowledged write stays visible to every later read. Also when
    Redis is emptied between the writer and the load: the versions that would refuse it
    are gone, and so is the ticket the reader's miss was handed."""
    saver = make_saver(write_mode="through")
    thread = f"t-{uuid.uuid4()}"
    (config,) = _chain(saver, thread, ["v1"])
    _forget_hot(saver, thread)
    reader = ops.get_tuple(saver.engine.context, _config(thread))
    tiers = saver.engine.tiers()
    request = next(reader)
    while not isinstance(request, Cold):  # up to the Postgres read
        request = reader.send(tiers.execute(request, _no_effects))
    row = tiers.execute(request, _no_effects)
    saver.put_writes(config, [("value", "pending")], task_id="task-1")
    if wiped:
        _forget_hot(saver, thread)
    with pytest.raises(StopIteration):
        request = reader.send(row)
        while True:
            request = reader.send(tiers.execute(request, _no_effects))
    for process in (saver, make_saver(write_mode="through")):
        tup = process.get_tuple(_config(thread))
        assert tup is not None and tup.pending_writes == [("task-1", "value", "pending")]


@pytest.mark.parametrize("write_mode", ["through"])
@pytest.mark.parametrize("fault", ["redis-emptied", "registry-evicted"])
def test_a_late_update_never_moves_the_head_back(make_saver: Any, fault: str) -> None:
    """A writer commits v2 and its update of Redis is slow to land (the writer stalled, or
    the update was sent without waiting); another process extends v2 with v3, whose update
    lands; then Redis loses part of the thread: all of it (a restart: the slow update lost
    its intent with it), or only the registry (an eviction: the intent stands, but the
    versions hash Redis kept knows v3). Either way the slow update starts no fresh index
    at v2, and every process reads v3."""
    slow, other = make_saver(write_mode="through"), make_saver(write_mode="through")
    thread = f"t-{uuid.uuid4()}"
    (first,) = _chain(slow, thread, ["v1"])
    writer = Stepped(slow, _put_op(slow, first, "v2"))
    writer.until(_script("put"))  # committed; its Redis update is next
    latest = other.get_tuple(_config(thread))
    assert latest is not None and latest.checkpoint["channel_values"]["value"] == "v2"
    _put(other, latest.config, "v3")
    assert _value(other, _config(thread)) == "v3"  # served by Redis's index, started at v3
    if fault == "redis-emptied":
        _forget_hot(slow, thread)
    else:
        client = redis.Redis.from_url(REDIS_URL)
        client.delete(ThreadKeys(slow.config.key_prefix, thread).registry)
        client.close()
    writer.finish()
    for process in (slow, other, make_saver(write_mode="through")):
        assert _value(process, _config(thread)) == "v3"


@pytest.mark.parametrize("write_mode", ["through"])
def test_a_warm_read_before_a_commit_never_lands_after_redis_lost_the_intent(
    make_saver: Any,
) -> None:
    """A writer announces v2; Redis is emptied (the intent goes with it); a reader misses,
    reads v1 from Postgres and is slow to warm; the writer commits v2 and its update
    lands with nothing to join (no index, no intent). The update still tells Redis v2's
    version, so the reader's warm of v1, landing last, is refused: every process reads v2."""
    slow, reader = make_saver(write_mode="through"), make_saver(write_mode="through")
    thread = f"t-{uuid.uuid4()}"
    (first,) = _chain(slow, thread, ["v1"])
    writer = Stepped(slow, _put_op(slow, first, "v2"))
    writer.until(lambda request: isinstance(request, Cold))  # its intent is in Redis
    _forget_hot(slow, thread)
    read = Stepped(reader, ops.get_tuple(reader.engine.context, _config(thread)))
    read.until(_script("warm"))  # a miss, then v1 from Postgres
    writer.finish()  # v2 commits, and its update lands with nothing to join
    assert read.finish().checkpoint["channel_values"]["value"] == "v1"  # read before v2
    for process in (slow, reader, make_saver(write_mode="through")):
        assert _value(process, _config(thread)) == "v2"


@pytest.mark.parametrize("write_mode", ["behind"])
def test_a_flush_whose_acknowledgement_was_lost_is_acknowledged_before_the_next(
    make_saver: Any,
) -> None:
    """A flusher takes v2 from the journal; Redis is then emptied; a reader misses, reads
    v1 from Postgres and is slow to warm; the flusher commits v2, but Redis cannot be
    reached for its acknowledgement, and the reader's warm of v1 lands. The next flush
    sends that acknowledgement first: Redis learns v2's version and drops the copy the
    warm left, so every process reads v2 and Redis agrees with Postgres."""
    flusher = make_saver(write_mode="behind", background_flush=False)
    reader = make_saver(write_mode="behind", background_flush=False)
    thread = f"t-{uuid.uuid4()}"
    (first,) = _chain(flusher, thread, ["v1"])
    flusher.flush()
    _put(flusher, first, "v2")  # journaled, not in Postgres yet
    ctx = flusher.engine.context
    batch = Stepped(flusher, journal.flush_batch(ctx))
    batch.until(lambda request: isinstance(request, Cold))  # taken from the journal
    _forget_hot(flusher, thread)
    client = redis.Redis.from_url(REDIS_URL)
    client.delete(ctx.layout.journal(0), ctx.layout.journal_bytes(0))  # emptied, all of it
    client.close()
    read = Stepped(reader, ops.get_tuple(reader.engine.context, _config(thread)))
    read.until(_script("warm"))  # a miss, then v1 from Postgres
    batch.until(_script("flush_ack"))  # v2 commits
    with pytest.raises(TierUnavailableError):
        batch.op.throw(TierUnavailableError("Redis out of reach", tier="hot"))
    read.finish()  # v1 lands in Redis
    flusher.flush()
    for process in (flusher, reader, make_saver(write_mode="behind")):
        assert _value(process, _config(thread)) == "v2"


@pytest.mark.parametrize("write_mode", ["behind"])
def test_a_root_written_behind_never_hides_a_newer_head_redis_forgot(make_saver: Any) -> None:
    """A run found a thread empty and made its first checkpoint; before it is stored,
    another run writes v1 and v2 on the thread, they are flushed, and Redis forgets the
    thread. The late root must not start an index of its own in Redis (which would serve
    it, older than v2, as the thread's latest): it goes through Postgres, and every process
    reads v2."""
    late, other = make_saver(write_mode="behind"), make_saver(write_mode="behind")
    thread = f"t-{uuid.uuid4()}"
    root = empty_checkpoint()  # its id is older than v1's and v2's
    version = late.get_next_version(None, None)
    root["channel_values"] = {"value": "late root"}
    root["channel_versions"] = {"value": version}
    assert late.get_tuple(_config(thread)) is None
    assert other.get_tuple(_config(thread)) is None
    _chain(other, thread, ["v1", "v2"])
    other.flush()
    _forget_hot(other, thread)
    late.put(_config(thread), root, {"source": "input", "step": -1}, {"value": version})
    late.flush()
    for process in (late, other, make_saver(write_mode="behind")):
        assert _value(process, _config(thread)) == "v2"


def test_reading_unknown_threads_leaves_only_short_lived_keys(make_saver: Any) -> None:
    """A read of a thread that does not exist (a typo, a scan by an attacker) stores
    nothing that outlives a minute in Redis, even with no hot TTL at all."""
    saver = make_saver(hot_ttl=0)
    client = redis.Redis.from_url(REDIS_URL)
    try:
        for n in range(20):
            thread = f"missing-{uuid.uuid4()}-{n}"
            assert saver.get_tuple(_config(thread)) is None
            pattern = ThreadKeys(saver.config.key_prefix, thread).base
            found = list(client.scan_iter(match=pattern.replace("{", "[{]").replace("}", "[}]")
                                          + "*"))
            assert all(0 < client.pttl(key) <= 60_000 for key in found), found
    finally:
        client.close()


def test_evicted_registry_never_serves_deleted_checkpoints(make_saver: Any) -> None:
    """An eviction policy dropped a thread's registry but not its index: delete_thread
    cannot find those keys, and no read serves them afterwards."""
    saver = make_saver()
    thread = f"t-{uuid.uuid4()}"
    _chain(saver, thread, ["v1", "v2"])
    saver.flush()
    client = redis.Redis.from_url(REDIS_URL)
    client.delete(ThreadKeys(saver.config.key_prefix, thread).registry)
    client.close()
    saver.delete_thread(thread)
    for process in (saver, make_saver()):
        assert process.get_tuple(_config(thread)) is None
    new = _put(saver, _config(thread), "again")
    assert _value(saver, _config(thread)) == "again"
    assert [t.config["configurable"]["checkpoint_id"] for t in saver.list(_config(thread))] == [
        new["configurable"]["checkpoint_id"]]


@pytest.mark.parametrize("write_mode", ["behind"])
def test_unflushed_writes_keep_every_key_of_their_namespace(make_saver: Any) -> None:
    """A write-behind put_writes after a flush (which gave the keys their TTL back) removes
    the TTL from the index and blob keys too, not only from the checkpoint hash."""
    saver = make_saver(background_flush=False, hot_ttl=3600)
    thread = f"t-{uuid.uuid4()}"
    (config,) = _chain(saver, thread, ["v1"])
    saver.flush()
    keys = ThreadKeys(saver.config.key_prefix, thread)
    client = redis.Redis.from_url(REDIS_URL)
    assert client.pttl(keys.index("")) > 0
    saver.put_writes(config, [("value", "w")], task_id="t1")
    for key in (keys.index(""), keys.blobs(""), keys.registry,
                keys.checkpoint("", config["configurable"]["checkpoint_id"])):
        assert client.pttl(key) == -1, key
    client.close()


@pytest.mark.parametrize("write_mode", ["through"])
def test_delete_by_a_write_through_saver_drains_the_journal_first(make_saver: Any) -> None:
    """A write-through saver (the CLI's default) deletes a thread that a write-behind saver
    wrote and has not flushed: the later flush does not bring it back."""
    behind = make_saver(write_mode="behind", background_flush=False)
    through = make_saver(write_mode="through")
    thread = f"t-{uuid.uuid4()}"
    _chain(behind, thread, ["v1", "v2"])
    through.delete_thread(thread)
    behind.flush()
    assert _cold_ids(behind, thread) == []
    assert behind.get_tuple(_config(thread)) is None


@pytest.mark.parametrize("write_mode", ["behind"])
def test_list_filter_matches_the_same_before_and_after_flush(make_saver: Any) -> None:
    """Metadata filters are jsonb containment for unflushed checkpoints too."""
    saver = make_saver(background_flush=False)
    thread = f"t-{uuid.uuid4()}"
    _put(saver, _config(thread), "v1", {"tags": ["vip", "eu"], "user": {"tier": 2}})
    filters = [{"tags": ["vip"]}, {"user": {"tier": 2}}, {"tags": ["us"]}, {"step": 1}]

    def matches() -> list[int]:
        return [len(list(saver.list(_config(thread), filter=f))) for f in filters]

    before = matches()
    saver.flush()
    assert before == matches() == [1, 1, 0, 0]


class _Asks(TypedDict, total=False):
    answers: list[str]


def _two_questions(saver: DurableSaver) -> Any:
    def ask(state: _Asks) -> dict[str, Any]:
        first = interrupt("first?")
        second = interrupt("second?")
        return {"answers": [first, second]}

    builder = StateGraph(_Asks)
    builder.add_node("ask", ask)
    builder.add_edge(START, "ask")
    builder.add_edge("ask", END)
    return builder.compile(checkpointer=saver)


def test_several_interrupts_in_one_node_resume_in_both_modes(saver: DurableSaver) -> None:
    """A node that calls interrupt() twice stores two writes to the same special channel in
    one put_writes: both write modes keep the last and resume to the end."""
    graph = _two_questions(saver)
    config = {"configurable": {"thread_id": f"t-{uuid.uuid4()}"}}
    graph.invoke({"answers": []}, config)
    graph.invoke(Command(resume="a"), config)
    out = graph.invoke(Command(resume="b"), config)
    assert out["answers"] == ["a", "b"]
    thread = config["configurable"]["thread_id"]
    latest = saver.get_tuple(_config(thread))
    assert latest is not None
    saver.put_writes(latest.config, [("__interrupt__", "x"), ("__interrupt__", "y")],
                     task_id="twice")
    tup = saver.get_tuple(latest.config)
    assert tup is not None
    assert [(t, c, v) for t, c, v in tup.pending_writes if t == "twice"] == [
        ("twice", "__interrupt__", "y")]


def test_saver_never_draws_from_uuid4(saver: DurableSaver, monkeypatch: pytest.MonkeyPatch) -> None:
    """Applications patch uuid.uuid4 for deterministic ids (LangGraph's own tests do); the
    saver's internal tokens must not consume it."""
    calls: list[int] = []
    real = uuid.uuid4
    monkeypatch.setattr(uuid, "uuid4", lambda: calls.append(1) or real())
    thread = f"t-{real()}"
    (config,) = _chain(saver, thread, ["v1"])
    saver.put_writes(config, [("value", "w")], task_id="t1")
    saver.get_tuple(_config(thread))
    saver.flush()
    _forget_hot(saver, thread)
    saver.get_tuple(_config(thread))
    saver.delete_thread(thread)
    assert calls == []


def test_second_writer_on_a_stale_head_gets_thread_conflict(make_saver: Any) -> None:
    """Two runs read the same head; the first commits; the second cannot commit on top of
    the head it read (ThreadConflictError names thread and heads) and the thread keeps one
    line. A put from an explicitly addressed checkpoint still forks, as asked."""
    first_run, second_run = make_saver(), make_saver()
    thread = f"t-{uuid.uuid4()}"
    (root,) = _chain(first_run, thread, ["v1"])
    first_run.flush()
    seen_a = first_run.get_tuple(_config(thread))
    seen_b = second_run.get_tuple(_config(thread))
    assert seen_a is not None and seen_b is not None
    winner = _put(first_run, seen_a.config, "a")
    with pytest.raises(ThreadConflictError) as raised:
        _put(second_run, seen_b.config, "b")
    assert raised.value.thread_id == thread
    assert raised.value.expected == root["configurable"]["checkpoint_id"]
    assert raised.value.head == winner["configurable"]["checkpoint_id"]
    assert _value(second_run, _config(thread)) == "a"
    fork = second_run.get_tuple(root)  # explicit checkpoint id: a fork the caller asked for
    assert fork is not None
    _put(second_run, fork.config, "fork")
    assert _value(first_run, _config(thread)) == "fork"


def test_two_graph_runs_on_one_thread_never_fork_it(make_saver: Any) -> None:
    """Two processes invoke one thread at once: one gets ThreadConflictError, and every
    checkpoint the thread holds descends from the one before it (no fork)."""
    savers = [make_saver(), make_saver()]
    thread = f"t-{uuid.uuid4()}"
    config = {"configurable": {"thread_id": thread}}
    chat_graph(savers[0]).invoke({"messages": [("user", "hello")]}, config)
    barrier = threading.Barrier(2)
    outcomes: list[str] = []

    def run(saver: DurableSaver) -> None:
        graph = chat_graph(saver)
        barrier.wait()
        try:
            graph.invoke({"messages": [("user", "again")]}, config)
            outcomes.append("ok")
        except ThreadConflictError:
            outcomes.append("conflict")

    workers = [threading.Thread(target=run, args=(s,)) for s in savers]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert "ok" in outcomes
    for saver in savers:
        saver.flush()
    history = list(savers[0].list({"configurable": {"thread_id": thread, "checkpoint_ns": ""}}))
    for newer, older in itertools.pairwise(history):
        assert newer.parent_config is not None
        assert newer.parent_config["configurable"]["checkpoint_id"] == (
            older.config["configurable"]["checkpoint_id"])


@pytest.mark.parametrize("write_mode", ["through"])
def test_marks_are_applied_again_to_a_redis_restored_from_an_older_state(
    namespace: tuple[str, str], make_saver: Any
) -> None:
    """A process wrote v2 while it could not reach Redis; the mark was applied (the hot copy
    dropped); then Redis comes back from a snapshot taken before: it holds v1 and the older
    applied-mark, so the mark is applied again and no process is served v1."""
    _, prefix = namespace
    proxy = Proxy(redis_address())
    proxy.start()
    client = redis.Redis.from_url(REDIS_URL)
    try:
        cut_off = _through_proxy(proxy, namespace)
        thread = f"t-{uuid.uuid4()}"
        (first,) = _chain(cut_off, thread, ["v1"])
        keys = ThreadKeys(prefix, thread)
        pattern = keys.base.replace("{", "[{]").replace("}", "[}]") + "*"
        snapshot = {k: client.dump(k) for k in client.scan_iter(match=pattern)}
        applied_before = client.get(f"{prefix}:marks")
        proxy.cut()
        _put(cut_off, first, "v2")
        assert _value(make_saver(write_mode="through"), _config(thread)) == "v2"
        for key in client.scan_iter(match=pattern):  # Redis restored from the snapshot
            client.delete(key)
        for key, value in snapshot.items():
            client.restore(key, 0, value, replace=True)
        if applied_before is None:
            client.delete(f"{prefix}:marks")
        else:
            client.set(f"{prefix}:marks", applied_before)
        assert _value(make_saver(write_mode="through"), _config(thread)) == "v2"
        cut_off.close()
    finally:
        client.close()
        proxy.cut()


@pytest.mark.parametrize("write_mode", ["through"])
def test_a_mark_committed_after_a_newer_one_is_still_applied(
    namespace: tuple[str, str], make_saver: Any
) -> None:
    """Two writes bypass Redis at once. The one on thread X takes its stale mark's number
    first but commits last (here its transaction waits for a row lock after the mark, as it
    would for a slow round trip); meanwhile another process applies the marks it sees,
    the newer mark on Y, and records that number as applied. X's mark, committed below the
    number applied, must still be applied: the other process must not serve X's older hot
    copy past ``stale_poll_interval`` (found by the real-process checker,
    `tests/support/checker`)."""
    schema, _ = namespace
    proxy = Proxy(redis_address())
    proxy.start()
    try:
        cut_off = _through_proxy(proxy, namespace)
        reader = make_saver(write_mode="through", stale_poll_interval=0.2)
        x, y = f"x-{uuid.uuid4()}", f"y-{uuid.uuid4()}"
        (x1,) = _chain(cut_off, x, ["x1"])
        _put(cut_off, _config(x) | {"configurable": {"thread_id": x, "checkpoint_ns": "sub"}},
             "sub")  # a second namespace: its head row is what X's commit will wait for
        (y1,) = _chain(cut_off, y, ["y1"])
        assert _value(reader, _config(x)) == "x1" and _value(reader, _config(y)) == "y1"
        proxy.cut()
        with psycopg.connect(POSTGRES_URL) as blocker:
            blocker.execute(f'SELECT 1 FROM "{schema}".lgd_heads WHERE thread_id = %s AND '
                            "checkpoint_ns = 'sub' FOR UPDATE", (x,))
            done: list[Any] = []
            writer = threading.Thread(target=lambda: done.append(_put(cut_off, x1, "x2")))
            writer.start()  # marks X, then waits to give X's namespaces newer versions
            deadline = time.monotonic() + 10
            while not _waiting_for_lock(schema) and time.monotonic() < deadline:
                time.sleep(0.01)
            _put(cut_off, y1, "y2")  # a newer mark, committed first
            time.sleep(0.25)
            assert _value(reader, _config(y)) == "y2"  # the reader applied Y's mark
            blocker.rollback()  # X's write commits, its mark numbered below Y's
        writer.join(timeout=10)
        assert done, "the write on X did not complete"
        time.sleep(0.5)
        assert _value(reader, _config(x)) == "x2"
        cut_off.close()
    finally:
        proxy.cut()


def _waiting_for_lock(schema: str) -> bool:
    """Whether a session waits for a row lock (the write held back by the test)."""
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = "
                           "'Lock' AND query LIKE %s", (f'%"{schema}".lgd_heads%',)).fetchone()
    return bool(row and row[0])
