"""Redis is a cache, not a trusted party: what it (or Postgres) returns is verified before
it is decoded or copied to Postgres, and loading never runs code a stored value names.

Every attack here is made with a plain Redis client or a plain SQL connection, as someone
holding write access to one tier (but not the saver's keys) would make it.
"""

from __future__ import annotations

import base64
import datetime
import logging
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ormsgpack
import psycopg
import pydantic
import pytest
import redis
from langchain_core.agents import AgentAction
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph

from langgraph_durable import (
    ConfigurationError,
    CorruptStateError,
    DurableSaver,
    RefusedTypeError,
    SerializationError,
)
from langgraph_durable._core.codec import encode_frame
from langgraph_durable._core.keys import Layout, ThreadKeys
from tests.support.checkpoints import twin
from tests.support.servers import POSTGRES_URL, REDIS_URL, drop_prefix

SECRET = "correct horse battery staple"
K1, K2 = os.urandom(32), os.urandom(32)
MARKER = "PLAINTEXT-MARKER-4f1c9e"


def mark(path: str) -> None:
    """A stand-in for `os.system`: if loading ever calls it, the file appears."""
    Path(path).write_text("called")


class Order(pydantic.BaseModel):
    """An application type kept in graph state."""

    sku: str
    qty: int


class NeverStored(pydantic.BaseModel):
    """An application type no test stores: only a forged frame names it."""

    sku: str


@pytest.fixture
def client() -> Iterator[redis.Redis]:
    """A plain Redis client: the attacker's, or an auditor's."""
    conn = redis.Redis.from_url(REDIS_URL)
    yield conn
    conn.close()


def _seed(saver: DurableSaver, value: Any, version: str | None = None) -> dict[str, Any]:
    """A one-checkpoint thread whose channel ``notes`` holds ``value``, in both tiers,
    written as by another process (`twin`): what ``saver`` reads of it comes from Redis or
    Postgres, where the tests forge it."""
    with twin(saver) as writer:
        config = _put(writer, value, version)
        writer.flush()
    return config


def _put(saver: Any, value: Any, version: str | None = None) -> dict[str, Any]:
    """A one-checkpoint thread whose channel ``notes`` holds ``value`` (not flushed)."""
    thread = f"t-{uuid.uuid4()}"
    version = version or saver.get_next_version(None, None)
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"notes": value}
    checkpoint["channel_versions"] = {"notes": version}
    return saver.put(
        {"configurable": {"thread_id": thread, "checkpoint_ns": ""}},
        checkpoint,
        {"source": "input", "step": -1},
        {"notes": version},
    )


def _thread(config: dict[str, Any]) -> str:
    return str(config["configurable"]["thread_id"])


def _blob_key(
    saver: DurableSaver, client: redis.Redis, config: dict[str, Any]
) -> tuple[str, bytes]:
    """The Redis hash and field of the thread's only blob."""
    key = ThreadKeys(saver.config.key_prefix, _thread(config)).blobs("")
    (field,) = client.hkeys(key)
    return key, field


def _sql(saver: DurableSaver, query: str, *params: Any) -> list[Any]:
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        cur = conn.execute(query.replace("{schema}", f'"{saver.config.schema}"'), params)
        return cur.fetchall() if cur.description else []


def _cold_blob(saver: DurableSaver, config: dict[str, Any]) -> bytes:
    query = "SELECT blob FROM {schema}.lgd_blobs WHERE thread_id = %s"
    return bytes(_sql(saver, query, _thread(config))[0][0])


def _move_blob(saver: DurableSaver, source: dict[str, Any], target: dict[str, Any]) -> None:
    """Copy the source thread's blob row over the target's (same channel and version)."""
    _sql(
        saver,
        "UPDATE {schema}.lgd_blobs SET blob = %s WHERE thread_id = %s",
        _cold_blob(saver, source),
        _thread(target),
    )


def _move_checkpoint(saver: DurableSaver, source: dict[str, Any], target: dict[str, Any]) -> None:
    """Copy the source thread's checkpoint body over the target's."""
    query = "SELECT checkpoint FROM {schema}.lgd_checkpoints WHERE thread_id = %s"
    body = _sql(saver, query, _thread(source))[0][0]
    _sql(
        saver,
        "UPDATE {schema}.lgd_checkpoints SET checkpoint = %s WHERE thread_id = %s",
        body,
        _thread(target),
    )


def _forged(module: str, name: str, arg: str) -> bytes:
    """A frame whose value is LangGraph's "call module.name(arg)" extension, with a valid
    checksum: what anyone can compute without a key."""
    payload = ormsgpack.packb(ormsgpack.Ext(0, ormsgpack.packb([module, name, arg])))
    return encode_frame("msgpack", payload)


def _callables(tmp_path: Path) -> list[tuple[str, str, str]]:
    target = tmp_path / "ran"
    return [(__name__, "mark", str(target)), ("os", "system", f"touch {target}")]


# ----------------------------------------------------------------- strict deserialization


@pytest.mark.parametrize("which", [0, 1], ids=["marker-function", "os.system"])
def test_forged_blob_naming_a_callable_is_refused_and_repaired(
    saver: DurableSaver, client: redis.Redis, tmp_path: Path, which: int
) -> None:
    """A blob written into Redis that names a callable is refused before anything is
    imported or called; the reader gets the Postgres copy, which is written back."""
    config = _seed(saver, ["a", "b"])
    key, field = _blob_key(saver, client, config)
    good = client.hget(key, field)
    client.hset(key, field, _forged(*_callables(tmp_path)[which]))
    tup = saver.get_tuple(config)
    assert tup is not None and tup.checkpoint["channel_values"]["notes"] == ["a", "b"]
    assert not (tmp_path / "ran").exists()
    assert client.hget(key, field) == good


def test_forged_blob_in_both_tiers_raises_and_runs_nothing(
    saver: DurableSaver, client: redis.Redis, tmp_path: Path
) -> None:
    """With no good copy left the read raises `RefusedTypeError` naming the channel and
    the type (a refused type, not damage), and the callable the blob names is never
    called."""
    config = _seed(saver, ["a"])
    forged = _forged(*_callables(tmp_path)[0])
    key, field = _blob_key(saver, client, config)
    client.hset(key, field, forged)
    _sql(
        saver,
        "UPDATE {schema}.lgd_blobs SET blob = %s WHERE thread_id = %s",
        forged,
        _thread(config),
    )
    with pytest.raises(RefusedTypeError) as info:
        saver.get_tuple(config)
    assert info.value.channel == "notes" and info.value.type_key == (__name__, "mark")
    assert "refused type" in str(info.value) and "damaged" not in str(info.value)
    assert not (tmp_path / "ran").exists()


def test_graph_with_messages_round_trips_under_the_strict_default(saver: DurableSaver) -> None:
    """Ordinary graphs (messages with tool calls, a resumed thread) need no configuration."""

    def reply(state: MessagesState) -> dict[str, Any]:
        call = {"name": "lookup", "args": {"q": "x"}, "id": f"c{len(state['messages'])}"}
        return {"messages": [AIMessage(content="ok", tool_calls=[call])]}

    builder = StateGraph(MessagesState)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    graph = builder.compile(checkpointer=saver)
    config = {"configurable": {"thread_id": f"t-{uuid.uuid4()}"}}
    graph.invoke({"messages": [HumanMessage(content="hi")]}, config)
    graph.invoke({"messages": [HumanMessage(content="again")]}, config)
    saver.flush()
    fresh = DurableSaver(
        REDIS_URL, POSTGRES_URL, key_prefix=saver.config.key_prefix, schema=saver.config.schema
    )
    try:
        messages = fresh.get_tuple(config).checkpoint["channel_values"]["messages"]  # type: ignore[union-attr]
    finally:
        fresh.close()
    assert [type(m).__name__ for m in messages] == ["HumanMessage", "AIMessage"] * 2
    assert messages[-1].tool_calls[0]["args"] == {"q": "x"}


def test_types_the_application_stores_read_back_with_no_setting(make_saver: Any) -> None:
    """A pydantic model and a LangChain type the application stores read back in another
    process with no setting: the writer recorded them in Postgres before storing them."""
    writer = make_saver()
    value = [Order(sku="A-1", qty=2), AgentAction(tool="t", tool_input="x", log="")]
    config = _seed(writer, value)
    drop_prefix(writer.config.key_prefix)
    reader = make_saver()  # another process: it allows neither type yet
    assert reader.get_tuple(config).checkpoint["channel_values"]["notes"] == value  # type: ignore[union-attr]
    assert {(m, n) for m, n in _sql(writer, "SELECT module, name FROM {schema}.lgd_types")} >= {
        (__name__, "Order"), ("langchain_core.agents", "AgentAction")}


def test_a_type_only_redis_names_is_refused_and_the_postgres_copy_served(
    saver: DurableSaver, client: redis.Redis
) -> None:
    """A frame in Redis naming a type the application never stored (an application type
    that exists and is harmless, so only the record can refuse it) is not constructed:
    the reader serves Postgres's copy."""
    config = _seed(saver, ["genuine"])
    key, field = _blob_key(saver, client, config)
    named = [__name__, "NeverStored", {"sku": "forged"}, "model_validate_json"]
    forged = encode_frame("msgpack", ormsgpack.packb(ormsgpack.Ext(5, ormsgpack.packb(named))))
    client.hset(key, field, forged)
    assert saver.get_tuple(config).checkpoint["channel_values"]["notes"] == ["genuine"]  # type: ignore[union-attr]


class Stamp(datetime.datetime):
    """A datetime subclass: stored as a call of ``Stamp.fromisoformat``, which LangGraph's
    loader never makes."""


def test_a_value_that_could_not_be_read_back_is_refused_at_put(saver: DurableSaver) -> None:
    """A value whose type could never be rebuilt on read is refused by the put, naming the
    type, before anything is stored in either tier."""
    with pytest.raises(SerializationError, match=r"Stamp\.fromisoformat") as info:
        _put(saver, [Stamp(2026, 1, 1)])
    assert "Nothing was stored" in str(info.value)
    assert _sql(saver, "SELECT count(*) FROM {schema}.lgd_checkpoints WHERE thread_id = %s",
                info.value.thread_id) == [(0,)]


def test_a_class_defined_in_a_function_reads_back_as_on_in_memory_saver(
    make_saver: Any,
) -> None:
    """A class its module does not expose is stored by name and read back as LangGraph's
    own savers give it (its raw fields; a typed state rebuilds it), in another process."""

    class Local(pydantic.BaseModel):
        n: int

    writer = make_saver()
    config = _seed(writer, [Local(n=1)])
    drop_prefix(writer.config.key_prefix)
    expected = InMemorySaver()
    expected_config = _put(expected, [Local(n=1)])
    assert make_saver().get_tuple(config).checkpoint["channel_values"]["notes"] == (  # type: ignore[union-attr]
        expected.get_tuple(expected_config).checkpoint["channel_values"]["notes"])  # type: ignore[union-attr]


# ----------------------------------------------------------------- keyed integrity


def test_frame_with_recomputed_checksum_is_refused_with_a_secret(
    make_saver: Any, client: redis.Redis
) -> None:
    """With a secret, a frame anyone could checksum is not accepted: the reader gets the
    genuine value from Postgres."""
    saver = make_saver(secret=SECRET)
    config = _seed(saver, ["genuine"])
    key, field = _blob_key(saver, client, config)
    client.hset(key, field, encode_frame(*saver.serde.dumps_typed(["forged"])))
    tup = saver.get_tuple(config)
    assert tup is not None and tup.checkpoint["channel_values"]["notes"] == ["genuine"]


def test_frame_moved_to_another_thread_is_refused(make_saver: Any, client: redis.Redis) -> None:
    """A genuine frame copied to another thread's key is refused: Redis falls back to
    Postgres; with the copy in Postgres too, the error names thread, namespace, checkpoint
    and channel."""
    saver = make_saver(secret=SECRET)
    version = saver.get_next_version(None, None)
    source, target = _seed(saver, ["source"], version), _seed(saver, ["target"], version)
    (src_key, field), (dst_key, dst_field) = (
        _blob_key(saver, client, source),
        _blob_key(saver, client, target),
    )
    assert field == dst_field
    client.hset(dst_key, field, client.hget(src_key, field) or b"")
    assert saver.get_tuple(target).checkpoint["channel_values"]["notes"] == ["target"]  # type: ignore[union-attr]

    _move_blob(saver, source, target)
    drop_prefix(saver.config.key_prefix)
    with pytest.raises(CorruptStateError) as info:
        saver.get_tuple(target)
    error = info.value
    assert (error.thread_id, error.checkpoint_ns, error.channel) == (_thread(target), "", "notes")
    assert error.checkpoint_id == target["configurable"]["checkpoint_id"]


def test_checkpoint_moved_to_another_checkpoint_is_refused(make_saver: Any) -> None:
    """A checkpoint body copied onto another checkpoint's row is refused."""
    saver = make_saver(secret=SECRET)
    first, second = _seed(saver, ["one"]), _seed(saver, ["two"])
    _move_checkpoint(saver, first, second)
    drop_prefix(saver.config.key_prefix)
    with pytest.raises(CorruptStateError, match="checkpoint"):
        saver.get_tuple(second)


@pytest.mark.parametrize("write_mode", ["behind"])
def test_forged_journal_entry_never_reaches_postgres(
    make_saver: Any, client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """An entry written into the flush journal without the secret goes to the dead letters,
    never to Postgres; genuine entries around it are flushed."""
    saver = make_saver(secret=SECRET, background_flush=False)
    victim = f"t-{uuid.uuid4()}"
    frame = encode_frame(*saver.serde.dumps_typed({"v": 1, "id": "x"}))
    client.xadd(
        Layout(saver.config.key_prefix).journal(0),
        {"d": ormsgpack.packb(["c", victim, "", "x", None, None, frame, "{}", "{}", []])},
    )
    with caplog.at_level(logging.WARNING, logger="langgraph_durable"):
        genuine = _seed(saver, ["kept"])  # its flush meets the forged entry first
    assert "not genuine" in caplog.text
    query = "SELECT count(*) FROM {schema}.lgd_checkpoints WHERE thread_id = %s"
    assert _sql(saver, query, victim)[0][0] == 0
    assert _sql(saver, query, _thread(genuine))[0][0] == 1
    assert client.xlen(Layout(saver.config.key_prefix).journal(0)) == 0
    assert client.xlen(Layout(saver.config.key_prefix).dead(0)) == 1


def test_secret_is_never_shown(make_saver: Any) -> None:
    """Neither the config's repr nor the saver's seal shows the secret or the keys."""
    saver = make_saver(secret=SECRET, encryption={"k1": K1})
    shown = repr(saver.config) + repr(saver._ctx.seal)
    assert SECRET not in shown and K1.hex() not in shown and repr(K1) not in shown


# ----------------------------------------------------------------- encryption at rest


def test_encrypted_row_moved_to_another_thread_or_checkpoint_is_refused(
    make_saver: Any,
) -> None:
    """AES-GCM binds each row to its place: copied to another thread, or another
    checkpoint, it fails to decrypt."""
    saver = make_saver(encryption={"k1": K1})
    version = saver.get_next_version(None, None)
    source, target = _seed(saver, ["source"], version), _seed(saver, ["target"], version)
    _move_blob(saver, source, target)
    drop_prefix(saver.config.key_prefix)
    with pytest.raises(CorruptStateError) as info:
        saver.get_tuple(target)
    assert info.value.channel == "notes" and info.value.thread_id == _thread(target)

    other = _seed(saver, ["other"])
    _move_checkpoint(saver, source, other)
    drop_prefix(saver.config.key_prefix)
    with pytest.raises(CorruptStateError, match="checkpoint"):
        saver.get_tuple(other)


def test_plaintext_row_is_refused_when_encryption_is_on(make_saver: Any) -> None:
    """Fail closed: a row written without encryption (by anyone) is not accepted."""
    config = _seed(make_saver(), ["plain"])
    drop_prefix(make_saver().config.key_prefix)
    with pytest.raises(CorruptStateError, match="expected encrypted"):
        make_saver(encryption={"k1": K1}).get_tuple(config)


def test_key_rotation(make_saver: Any) -> None:
    """Written with k1; with k2 current and k1 kept, old data reads and new data uses k2;
    without k1, the old data cannot be read."""
    old = _seed(make_saver(encryption={"k1": K1}), ["old"])
    rotated = make_saver(encryption={"k1": K1, "k2": K2}, encryption_key_id="k2")
    drop_prefix(rotated.config.key_prefix)
    assert rotated.get_tuple(old).checkpoint["channel_values"]["notes"] == ["old"]  # type: ignore[union-attr]
    new = _seed(rotated, ["new"])
    seal = rotated._ctx.seal
    assert seal.key_id(_cold_blob(rotated, old)) == "k1"
    assert seal.key_id(_cold_blob(rotated, new)) == "k2"
    drop_prefix(rotated.config.key_prefix)
    only_k2 = make_saver(encryption={"k2": K2})
    assert only_k2.get_tuple(new).checkpoint["channel_values"]["notes"] == ["new"]  # type: ignore[union-attr]
    with pytest.raises(CorruptStateError, match="k1"):
        only_k2.get_tuple(old)


def _redis_values(client: redis.Redis, prefix: str) -> list[bytes]:
    """Every stored byte string under ``prefix``, whatever the key's type."""
    out: list[bytes] = []
    for key in client.scan_iter(match=f"{prefix}*", count=1000):
        kind = client.type(key)
        if kind == b"string":
            out.append(client.get(key) or b"")
        elif kind == b"hash":
            out += [b for kv in client.hgetall(key).items() for b in kv]
        elif kind == b"set":
            out += list(client.smembers(key))
        elif kind == b"zset":
            out += list(client.zrange(key, 0, -1))
        elif kind == b"stream":
            out += [b for _, fields in client.xrange(key) for kv in fields.items() for b in kv]
        elif kind == b"list":
            out += list(client.lrange(key, 0, -1))
    return out


def test_both_tiers_hold_ciphertext_only(make_saver: Any, client: redis.Redis) -> None:
    """A marker in channel values and pending writes appears in no Redis value (the journal
    included) and in no Postgres bytea."""
    saver = make_saver(encryption={"k1": K1}, background_flush=False)
    config = _put(saver, [MARKER])
    thread = _thread(config)
    saver.put_writes(config, [("notes", MARKER), ("__interrupt__", MARKER)], "task-1")
    stored = _redis_values(client, saver.config.key_prefix)
    assert stored and not [v for v in stored if MARKER.encode() in v]
    saver.flush()
    rows = _sql(
        saver,
        "SELECT checkpoint FROM {schema}.lgd_checkpoints WHERE thread_id = %s "
        "UNION ALL SELECT blob FROM {schema}.lgd_blobs WHERE thread_id = %s "
        "UNION ALL SELECT blob FROM {schema}.lgd_writes WHERE thread_id = %s",
        thread,
        thread,
        thread,
    )
    assert len(rows) == 4 and not [r for (r,) in rows if MARKER.encode() in bytes(r)]
    tup = saver.get_tuple(config)
    assert tup is not None and tup.checkpoint["channel_values"]["notes"] == [MARKER]
    assert {w[2] for w in tup.pending_writes or []} == {MARKER}


@pytest.mark.parametrize(
    "keys", [{"secret": SECRET}, {"encryption": {"k1": K1}}], ids=["secret", "encryption"]
)
def test_copy_thread_seals_the_copy_for_its_new_thread(
    make_saver: Any, keys: dict[str, Any]
) -> None:
    """copy_thread moves frames legitimately: the copy reads back (values and pending
    writes), from Postgres alone, in the target thread."""
    saver = make_saver(**keys)
    source = _seed(saver, ["copied"])
    saver.put_writes(source, [("notes", "pending")], "task-1")
    saver.flush()
    target = f"t-{uuid.uuid4()}"
    saver.copy_thread(_thread(source), target)
    drop_prefix(saver.config.key_prefix)
    tup = saver.get_tuple({"configurable": {"thread_id": target, "checkpoint_ns": ""}})
    assert tup is not None and tup.checkpoint["channel_values"]["notes"] == ["copied"]
    assert [w[1:] for w in tup.pending_writes or []] == [("notes", "pending")]
    assert _cold_blob(saver, source) != _cold_blob(saver, {"configurable": {"thread_id": target}})


@pytest.mark.parametrize("write_mode", ["behind"])
def test_standalone_flusher_takes_its_keys_from_the_environment(make_saver: Any) -> None:
    """A ``langgraph-durable flush`` worker given the keys in its environment opens the
    journal's encrypted entries and moves them to Postgres."""
    saver = make_saver(encryption={"k1": K1}, background_flush=False)
    config = _put(saver, ["flushed by a worker"])
    env = {
        **os.environ,
        "LGD_ENCRYPTION_KEYS": f"k1={base64.b64encode(K1).decode()}",
        "LGD_REDIS_URL": REDIS_URL,
        "LGD_POSTGRES_URL": POSTGRES_URL,
    }
    args = ["flush", "--schema", saver.config.schema, "--prefix", saver.config.key_prefix]
    done = subprocess.run(
        [sys.executable, "-m", "langgraph_durable", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    query = "SELECT count(*) FROM {schema}.lgd_checkpoints WHERE thread_id = %s"
    assert _sql(saver, query, _thread(config))[0][0] == 1
    drop_prefix(saver.config.key_prefix)
    tup = saver.get_tuple(config)
    assert tup is not None and tup.checkpoint["channel_values"]["notes"] == ["flushed by a worker"]


@pytest.mark.parametrize(
    "options",
    [
        {"secret": "short"},
        {"encryption": {"k1": b"not an AES key"}},
        {"encryption": {"k1": K1, "k2": K2}},
        {"encryption": {"k1": K1}, "encryption_key_id": "k2"},
        {"encryption_key_id": "k1"},
    ],
    ids=["short-secret", "bad-key", "no-current-key", "unknown-current-key", "id-without-keys"],
)
def test_bad_keys_are_refused_at_construction_without_echoing_them(
    options: dict[str, Any],
) -> None:
    """A short secret, a key of the wrong size, or an ambiguous or unknown current key is a
    `ConfigurationError` that does not show the key material."""
    with pytest.raises(ConfigurationError) as info:
        DurableSaver(REDIS_URL, POSTGRES_URL, **options)
    assert "short" not in str(info.value) and "not an AES key" not in str(info.value)
