"""Retention: sweeps delete what a policy no longer keeps, from both tiers, and nothing else.

Time is moved by hand: a test backdates a thread's last write (``lgd_heads.written_at``)
or its checkpoints (``created_at``) in Postgres, as days passing would.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import psycopg
import pytest
import redis
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.types import Command

from langgraph_durable import DurableSaver, Retention, SweepReport
from langgraph_durable._core.keys import ThreadKeys
from langgraph_durable.errors import ConfigurationError
from langgraph_durable.flusher import run_flusher
from tests.support.checkpoints import put_value
from tests.support.cli_runner import cli_for
from tests.support.graphs import approval_graph, delta_graph
from tests.support.servers import POSTGRES_URL, REDIS_URL

DAY = 86400.0


def _config(thread_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id}}


def _thread(saver: DurableSaver, steps: int = 3) -> str:
    """A thread with ``steps`` checkpoints in the root namespace."""
    thread_id = f"t-{uuid.uuid4()}"
    for i in range(steps):
        put_value(saver, thread_id, f"value {i}" * 50, metadata={"step": i})
    return thread_id


def _backdate(schema: str, thread_id: str, seconds: float, *, checkpoints: bool = False,
              keep_newest: int = 0) -> None:
    """Make a thread look idle for ``seconds`` (and, with ``checkpoints``, all but its
    ``keep_newest`` newest checkpoints that old)."""
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(f'UPDATE "{schema}".lgd_heads SET written_at = now() - make_interval('
                     "secs => %s) WHERE thread_id = %s", (seconds, thread_id))
        if checkpoints:
            conn.execute(
                f'UPDATE "{schema}".lgd_checkpoints SET created_at = now() - make_interval('
                f"secs => %s) WHERE thread_id = %s AND checkpoint_id NOT IN (SELECT "
                f'checkpoint_id FROM "{schema}".lgd_checkpoints WHERE thread_id = %s '
                "ORDER BY checkpoint_id DESC LIMIT %s)",
                (seconds, thread_id, thread_id, keep_newest))


def _cold_rows(schema: str, thread_id: str) -> dict[str, int]:
    """How many rows of the thread each Postgres table holds."""
    with psycopg.connect(POSTGRES_URL) as conn:
        return {table: int(conn.execute(  # type: ignore[index]
            f'SELECT count(*) FROM "{schema}".{table} WHERE thread_id = %s',
            (thread_id,)).fetchone()[0])
            for table in ("lgd_checkpoints", "lgd_blobs", "lgd_writes", "lgd_heads",
                          "lgd_tool_calls")}


def _hot_keys(prefix: str, thread_id: str) -> list[str]:
    """The thread's data keys in Redis (its registry and what the registry lists)."""
    client = redis.Redis.from_url(REDIS_URL)
    try:
        registry = ThreadKeys(prefix, thread_id).registry
        listed = [k.decode() for k in client.smembers(registry)]  # type: ignore[union-attr]
        return [k for k in [registry, *listed] if client.exists(k)]
    finally:
        client.close()


def _gone_from_both_tiers(namespace: tuple[str, str], thread_id: str) -> bool:
    schema, prefix = namespace
    rows = _cold_rows(schema, thread_id)
    return not any(rows.values()) and not _hot_keys(prefix, thread_id)


def _add_ledger_row(schema: str, thread_id: str, call_ref: str | None = None) -> None:
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(f'INSERT INTO "{schema}".lgd_tool_calls (key, thread_id, tool, '
                     "args_fingerprint, status, call_ref) "
                     "VALUES (%s, %s, 'charge', 'x', 'succeeded', %s)",
                     (f"k-{uuid.uuid4()}", thread_id, call_ref))


def test_max_idle_deletes_idle_threads_from_both_tiers_and_spares_live_ones(
    saver: DurableSaver, namespace: tuple[str, str]
) -> None:
    """An idle thread's checkpoints, values, writes, head and tool ledger records go from
    Postgres and its hot copy from Redis; a thread written recently is untouched and
    still reads; the report and health() count what went."""
    schema, prefix = namespace
    idle, live = _thread(saver), _thread(saver)
    saver.flush()
    _add_ledger_row(schema, idle)
    _backdate(schema, idle, 2 * DAY)
    assert saver.get_tuple(_config(idle)) is not None  # warms its hot copy
    assert _hot_keys(prefix, idle)
    live_before = _cold_rows(schema, live)

    report = saver.sweep(Retention(max_idle=DAY))

    assert report.threads_deleted >= 1 and report.checkpoints >= 3 and report.ledger >= 1
    assert report.bytes > 0 and report.blobs >= 3
    assert _gone_from_both_tiers(namespace, idle)
    assert saver.get_tuple(_config(idle)) is None
    assert _cold_rows(schema, live) == live_before
    assert saver.get_tuple(_config(live)).checkpoint["channel_values"]["value"].startswith(  # type: ignore[union-attr]
        "value 2")
    totals = saver.health()["retention"]
    assert totals["threads_deleted"] >= 1 and totals["bytes_reclaimed"] >= report.bytes


def test_keep_ledger_leaves_the_tool_ledger_of_deleted_threads(
    saver: DurableSaver, namespace: tuple[str, str]
) -> None:
    """With keep_ledger, an idle thread's checkpoints go and its ledger records stay,
    retired: a derived-key row is moved off its key (a later conversation on the thread id
    derives keys afresh), keeping the key the provider saw; an explicit key stays."""
    schema, _ = namespace
    thread = _thread(saver)
    saver.flush()
    _add_ledger_row(schema, thread)
    _add_ledger_row(schema, thread, call_ref="call-1")
    _backdate(schema, thread, 2 * DAY)
    saver.sweep(Retention(max_idle=DAY, keep_ledger=True))
    rows = _cold_rows(schema, thread)
    assert rows["lgd_checkpoints"] == 0 and rows["lgd_tool_calls"] == 2
    kept = {r.key.startswith("k-") and "~" not in r.key: r for r in saver.ledger.list(thread)}
    assert kept[True].retired_at is None  # explicit key: global, as it was
    assert kept[False].retired_at is not None
    assert kept[False].key.startswith(f"{kept[False].idempotency_key}~retired:")


def test_max_age_deletes_old_checkpoints_and_keeps_each_namespaces_latest(
    saver: DurableSaver, namespace: tuple[str, str]
) -> None:
    """Checkpoints older than max_age go from both tiers; recent ones stay, and so does
    the latest even when it is old too."""
    schema, _ = namespace
    recent, old = _thread(saver, steps=5), _thread(saver, steps=4)
    saver.flush()
    _backdate(schema, recent, 3 * DAY, checkpoints=True, keep_newest=2)
    _backdate(schema, old, 3 * DAY, checkpoints=True)
    ids = [t.config["configurable"]["checkpoint_id"] for t in saver.list(_config(recent))]

    report = saver.sweep(Retention(max_age=DAY))

    assert report.threads_pruned >= 2 and report.checkpoints >= 3 + 3
    assert [t.config["configurable"]["checkpoint_id"]
            for t in saver.list(_config(recent))] == ids[:2]
    assert len(list(saver.list(_config(old)))) == 1
    gone = {"configurable": {"thread_id": recent, "checkpoint_ns": "", "checkpoint_id": ids[4]}}
    assert saver.get_tuple(gone) is None  # from Redis too: its hot copy was dropped
    assert saver.get_tuple(_config(old)) is not None


def test_keep_last_keeps_the_newest_n_of_each_namespace(
    saver: DurableSaver, namespace: tuple[str, str]
) -> None:
    """keep_last=N leaves each namespace's N newest checkpoints, in both tiers, and the
    thread goes on from its head."""
    thread = _thread(saver, steps=6)
    put_value(saver, thread, "sub", ns="inner")
    root = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    ids = [t.config["configurable"]["checkpoint_id"] for t in saver.list(root)]

    report = saver.sweep(Retention(keep_last=2))

    assert report.checkpoints >= 4  # (other tests' threads share the schema)
    assert [t.config["configurable"]["checkpoint_id"] for t in saver.list(root)] == ids[:2]
    older = {"configurable": {"thread_id": thread, "checkpoint_ns": "", "checkpoint_id": ids[3]}}
    assert saver.get_tuple(older) is None
    inner = {"configurable": {"thread_id": thread, "checkpoint_ns": "inner"}}
    assert saver.get_tuple(inner) is not None
    config = put_value(saver, thread, "next")
    head = saver.get_tuple(root)
    assert head is not None and head.config["configurable"]["checkpoint_id"] == (
        config["configurable"]["checkpoint_id"])  # type: ignore[index]


def test_delta_channel_threads_rebuild_their_value_and_resume_after_a_sweep(
    saver: DurableSaver, namespace: tuple[str, str]
) -> None:
    """keep_last=1 and max_age keep every ancestor a DeltaChannel needs: the full value
    still rebuilds, and the graph goes on."""
    schema, _ = namespace
    config = _config(f"t-{uuid.uuid4()}")
    graph = delta_graph(saver)
    for _ in range(8):
        graph.invoke({"log": []}, config)
    saver.flush()
    before = len(list(saver.list(config)))
    _backdate(schema, config["configurable"]["thread_id"], 3 * DAY, checkpoints=True,
              keep_newest=1)

    saver.sweep(Retention(keep_last=1, max_age=DAY))

    assert 1 < len(list(saver.list(config))) < before
    assert graph.get_state(config).values["log"] == [f"entry {i}" for i in range(8)]
    graph.invoke({"log": []}, config)
    assert graph.get_state(config).values["log"][-1] == "entry 8"


def test_an_interrupted_thread_is_spared_and_resumes_after_sweeps(
    saver: DurableSaver, namespace: tuple[str, str]
) -> None:
    """A thread waiting at interrupt() survives max_idle (keep_interrupted) and keep_last,
    and resumes with the human's answer; keep_interrupted=False expires it."""
    schema, _ = namespace
    config = _config(f"t-{uuid.uuid4()}")
    graph = approval_graph(saver)
    graph.invoke({"request": "refund", "decision": ""}, config)
    saver.flush()
    _backdate(schema, config["configurable"]["thread_id"], 2 * DAY, checkpoints=True)

    saver.sweep(Retention(max_idle=DAY, keep_last=1))

    assert _cold_rows(schema, config["configurable"]["thread_id"])["lgd_checkpoints"] >= 1
    assert graph.get_state(config).interrupts
    assert graph.invoke(Command(resume="yes"), config)["decision"] == "yes"

    other = _config(f"t-{uuid.uuid4()}")
    graph.invoke({"request": "refund", "decision": ""}, other)
    saver.flush()
    _backdate(schema, other["configurable"]["thread_id"], 2 * DAY)
    assert saver.sweep(Retention(max_idle=DAY, keep_interrupted=False)).threads_deleted >= 1
    assert saver.get_tuple(other) is None


def test_dry_run_counts_and_changes_nothing(
    saver: DurableSaver, namespace: tuple[str, str]
) -> None:
    """A dry run reports what a sweep would delete, deletes nothing, and the real sweep
    then deletes just that."""
    schema, _ = namespace
    idle, long = _thread(saver, steps=2), _thread(saver, steps=5)
    saver.flush()
    _backdate(schema, idle, 2 * DAY)
    before = {t: _cold_rows(schema, t) for t in (idle, long)}
    policy = Retention(max_idle=DAY, keep_last=3)

    planned = saver.sweep(policy, dry_run=True)

    assert {t: _cold_rows(schema, t) for t in (idle, long)} == before
    assert planned.dry_run and planned.threads_deleted >= 1 and planned.threads_pruned >= 1
    done = saver.sweep(policy)
    assert (done.threads_deleted, done.threads_pruned, done.checkpoints) == (
        planned.threads_deleted, planned.threads_pruned, planned.checkpoints)


def test_a_thread_written_while_the_sweep_looks_stays(
    saver: DurableSaver, namespace: tuple[str, str]
) -> None:
    """The idle check runs again under the head rows' locks: a thread whose head a writer
    holds is left for the next sweep (and deleted by it once idle and free)."""
    schema, _ = namespace
    thread = _thread(saver)
    saver.flush()
    _backdate(schema, thread, 2 * DAY)
    with psycopg.connect(POSTGRES_URL) as writer:
        writer.execute(f'SELECT 1 FROM "{schema}".lgd_heads WHERE thread_id = %s FOR UPDATE',
                       (thread,))
        report = saver.sweep(Retention(max_idle=DAY))
        assert report.threads_deleted == 0 and report.threads_busy >= 1
        writer.rollback()
    assert _cold_rows(schema, thread)["lgd_checkpoints"] == 3
    assert saver.sweep(Retention(max_idle=DAY)).threads_deleted == 1


def test_a_thread_with_writes_waiting_for_a_flush_is_left_for_the_next_sweep(
    saver: DurableSaver, namespace: tuple[str, str]
) -> None:
    """A thread Redis says has write-behind entries on their way to Postgres is not
    claimed (Postgres does not hold all of it yet), whatever its age in Postgres."""
    schema, prefix = namespace
    thread = _thread(saver)
    saver.flush()
    _backdate(schema, thread, 2 * DAY)
    client = redis.Redis.from_url(REDIS_URL)
    unflushed = ThreadKeys(prefix, thread).unflushed
    try:
        client.hset(unflushed, "an entry", 1)  # as a write-behind put leaves it
        report = saver.sweep(Retention(max_idle=DAY))
        assert report.threads_busy >= 1
        assert _cold_rows(schema, thread)["lgd_checkpoints"] == 3
    finally:
        client.delete(unflushed)
        client.close()
    assert saver.sweep(Retention(max_idle=DAY)).threads_deleted >= 1


@pytest.mark.parametrize("write_mode", ["behind"])
def test_write_behind_writes_go_through_postgres_while_a_sweep_holds_the_thread(
    make_saver: type[DurableSaver], namespace: tuple[str, str]
) -> None:
    """While a sweep's claim (an intent) is on a thread, a write-behind put and put_writes
    commit in Postgres before they return, so the sweep's row locks order them and a
    sweep can never delete under a write still in the journal."""
    schema, prefix = namespace
    saver = make_saver(background_flush=False)
    thread = _thread(saver, steps=1)
    saver.flush()
    client = redis.Redis.from_url(REDIS_URL)
    intents = ThreadKeys(prefix, thread).intents
    try:
        client.zadd(intents, {"a-sweep": 2**50})
        config = put_value(saver, thread, "during the sweep")
        saver.put_writes(config, [("value", "pending")], "task-1")
        assert _cold_rows(schema, thread)["lgd_checkpoints"] == 2
        assert _cold_rows(schema, thread)["lgd_writes"] == 1
    finally:
        client.delete(intents)
        client.close()
    put_value(saver, thread, "after it")
    assert _cold_rows(schema, thread)["lgd_checkpoints"] == 2  # journaled again


def _extend(saver: DurableSaver, config: dict[str, Any], step: int) -> dict[str, Any]:
    """Put the next checkpoint of a run: it must extend the head ``config`` read."""
    checkpoint = empty_checkpoint()
    version = saver.get_next_version(None, None)
    checkpoint["channel_values"] = {"value": step}
    checkpoint["channel_versions"] = {"value": version}
    return saver.put(config, checkpoint, {"source": "loop", "step": step},  # type: ignore[arg-type,return-value,typeddict-item]
                     {"value": version})


def test_sweeps_pruning_live_threads_never_set_a_head_back(
    make_saver: type[DurableSaver],
) -> None:
    """Writers extend their threads' heads while keep_last sweeps prune the same threads
    again and again: no writer is told its head moved (a prune that rebuilt a head from
    before a concurrent commit would set it back), and each thread ends at its last put."""
    policy = Retention(keep_last=1)
    writers = [make_saver() for _ in range(3)]
    sweeper = make_saver()
    errors: list[BaseException] = []
    last: dict[str, str] = {}

    def write(saver: DurableSaver) -> None:
        thread_id = f"t-{uuid.uuid4()}"
        config: dict[str, Any] = _config(thread_id)
        try:
            for step in range(60):
                config = _extend(saver, config, step)
            last[thread_id] = config["configurable"]["checkpoint_id"]
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(w,)) for w in writers]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        sweeper.sweep(policy)
    for t in threads:
        t.join()
    assert not errors, errors[0]
    for thread_id, head in last.items():
        tup = sweeper.get_tuple(_config(thread_id))
        assert tup is not None and tup.config["configurable"]["checkpoint_id"] == head


def test_two_sweepers_at_once_delete_each_thread_once(
    make_saver: type[DurableSaver], namespace: tuple[str, str]
) -> None:
    """Two savers sweeping the same schema at the same time: every idle thread is deleted
    once (the counts add up), none survives, no sweep fails, live threads stay."""
    schema, _ = namespace
    writer = make_saver()
    idle = [_thread(writer, steps=2) for _ in range(30)]
    live = _thread(writer, steps=2)
    writer.flush()
    for thread in idle:
        _backdate(schema, thread, 2 * DAY)
    policy = Retention(max_idle=DAY, batch=4)
    sweepers = [make_saver(retention=policy), make_saver(retention=policy)]
    reports: list[SweepReport] = []
    errors: list[BaseException] = []

    def run(s: DurableSaver) -> None:
        try:
            reports.append(s.sweep())
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(s,)) for s in sweepers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    leftover = sweepers[0].sweep()  # a thread one skipped as busy goes now
    assert sum(r.threads_deleted for r in [*reports, leftover]) >= 30
    assert sum(r.checkpoints for r in [*reports, leftover]) >= 60
    assert all(r.threads_deleted for r in reports)  # both took part
    assert all(_gone_from_both_tiers(namespace, t) for t in idle)
    assert writer.get_tuple(_config(live)) is not None


def test_the_flush_worker_sweeps_by_the_savers_policy(
    make_saver: type[DurableSaver], namespace: tuple[str, str]
) -> None:
    """``flush --follow`` (run_flusher) with a saver that has a retention policy sweeps on
    its own thread: an idle thread goes without anyone calling sweep()."""
    schema, _ = namespace
    writer = make_saver()
    thread = _thread(writer)
    writer.flush()
    _backdate(schema, thread, 2 * DAY)
    worker = make_saver(retention=Retention(max_idle=DAY, interval=0.2))
    stop = threading.Event()
    runner = threading.Thread(target=run_flusher, args=(worker,),
                              kwargs={"follow": True, "stop": stop})
    runner.start()
    try:
        deadline = time.monotonic() + 30
        while _cold_rows(schema, thread)["lgd_checkpoints"] and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        stop.set()
        runner.join(timeout=60)
    assert _gone_from_both_tiers(namespace, thread)
    assert worker.health()["retention"]["sweeps"] >= 1


async def test_asweep_is_the_async_twin(
    saver: DurableSaver, namespace: tuple[str, str]
) -> None:
    """asweep deletes what sweep would, with the saver's own policy."""
    schema, _ = namespace
    thread = _thread(saver)
    await saver.aflush()
    _backdate(schema, thread, 2 * DAY)
    report = await saver.asweep(Retention(max_idle=DAY))
    assert report.threads_deleted >= 1
    assert await saver.aget_tuple(_config(thread)) is None


def test_cli_sweep_dry_run_then_sweep(saver: DurableSaver, namespace: tuple[str, str]) -> None:
    """``langgraph-durable sweep --dry-run`` says what would go and leaves it; without
    --dry-run it deletes it."""
    schema, _ = namespace
    thread = _thread(saver)
    saver.flush()
    _backdate(schema, thread, 3 * DAY)
    cli = cli_for(namespace)
    dry = cli("sweep", "--max-idle", "2d", "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert "would delete" in dry.output
    assert _cold_rows(schema, thread)["lgd_checkpoints"] == 3
    done = cli("sweep", "--max-idle", "2d")
    assert done.exit_code == 0, done.output
    assert "reclaimed" in done.output
    assert _cold_rows(schema, thread)["lgd_checkpoints"] == 0
    assert cli("sweep").exit_code == 2  # no policy


def test_retention_is_validated() -> None:
    """Nonsense policies are refused at construction, naming the field."""
    for bad in ({"max_idle": 0}, {"max_age": -1}, {"keep_last": 0}, {"batch": 0},
                {"interval": 0}):
        with pytest.raises(ConfigurationError, match=next(iter(bad))):
            Retention(**bad)  # type: ignore[arg-type]
    assert not Retention().active
    with pytest.raises(ConfigurationError, match="no retention policy"):
        DurableSaver(REDIS_URL, POSTGRES_URL).sweep()
