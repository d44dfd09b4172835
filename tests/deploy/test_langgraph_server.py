"""DurableSaver as the checkpointer, and DurableStore as the store, of LangGraph's own server.

`langgraph dev` (the ``server-test`` extra: langgraph-cli[inmem]) serves
examples/langgraph-server/ as a user would deploy it, with ``langgraph_durable.server``'s
``checkpointer`` and ``store`` named in its ``langgraph.json``, without
``--allow-blocking`` (so a blocking call on the server's event loop fails the run) and
without network or LangSmith key. The tests drive it over HTTP with ``langgraph_sdk``: an
interrupt answered, a thread copied, a run rolled back by another
(``multitask_strategy="rollback"``), and a server killed with SIGKILL in the middle of a
tool step and started again, in both write modes. The graph's ``charge`` tool appends a
line to a file per real charge: the count of side effects, kept outside the saver. Its
``plan`` node writes each run's summary to the server's store, which the tests read back
through the ``/store`` API and through a `DurableStore` of their own. What ``langgraph
dev`` never calls (``aprune``, the history of a ``DeltaChannel``) is tested on the
server's adapter class directly.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient

from langgraph_durable import (
    ConfigurationError,
    DurableSaver,
    DurableStore,
    LedgerRecord,
    TierUnavailableError,
)
from langgraph_durable._task import _wrapped_saver
from langgraph_durable.server import checkpointer, saver_options, store, store_options
from tests.support.graphs import delta_graph
from tests.support.servers import POSTGRES_URL, REDIS_URL, drop_schema

ROOT = Path(__file__).parents[2]
EXAMPLE = ROOT / "examples" / "langgraph-server"
LANGGRAPH = Path(sys.executable).parent / "langgraph"
INSTALL = f"{sys.executable} -m pip install -e '.[server-test]' -c compat/constraints.txt"
STARTUP_TIMEOUT = 120.0
DEV_FLUSH = 10.0
"""How often `langgraph dev` writes its threads and runs to its folder (in-memory
runtime, ``langgraph_runtime_inmem._persistence``): what a restarted server knows."""
GRAPH = "agent"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class DevServer:
    """One `langgraph dev` process (its own session) on a folder with a ``langgraph.json``."""

    folder: Path
    env: dict[str, str]
    log: Path
    port: int = 0
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        """Start it on a free port and wait until it answers ``/ok``."""
        if not LANGGRAPH.exists():
            pytest.fail(f"{LANGGRAPH} is missing: install the server-test extra ({INSTALL})")
        self.port = _free_port()
        with self.log.open("ab") as out:
            out.write(f"\n==== langgraph dev on port {self.port}\n".encode())
            self.process = subprocess.Popen(
                [str(LANGGRAPH), "dev", "--no-browser", "--no-reload", "--host", "127.0.0.1",
                 "--port", str(self.port)],
                cwd=self.folder, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True)
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"langgraph dev exited ({self.process.returncode}):\n{self.tail()}")
            try:
                if httpx.get(f"{self.url}/ok", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        self.kill()
        pytest.fail(f"langgraph dev did not answer within {STARTUP_TIMEOUT:.0f}s:\n{self.tail()}")

    def kill(self) -> None:
        """SIGKILL the server's process group: no shutdown, no final flush of anything."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)

    def stop(self) -> None:
        """Stop it as Ctrl-C would (the saver closes, a write-behind one drains); kill it if
        it does not end."""
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGINT)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.kill()

    def tail(self, lines: int = 60) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


@dataclass
class Served:
    """The example served in one write mode, with what the tests look at besides the API."""

    mode: str
    server: DevServer
    saver: DurableSaver
    store: DurableStore
    charges: Path
    hold: Path
    clients: list[LangGraphClient] = field(default_factory=list)

    def client(self) -> LangGraphClient:
        return get_client(url=self.server.url, timeout=60)

    def charged(self, order_id: str) -> int:
        """How many times ``charge`` really ran for an order (lines in its file)."""
        if not self.charges.exists():
            return 0
        return sum(json.loads(line)["order_id"] == order_id
                   for line in self.charges.read_text().splitlines())

    def ledger(self, thread_id: str, tool: str = "charge") -> list[LedgerRecord]:
        return [r for r in self.saver.ledger.list(thread_id) if r.tool == tool]

    def fail(self, message: str) -> None:
        pytest.fail(f"{message}\n---- server log ({self.mode}):\n{self.server.tail()}")


@pytest.fixture(scope="module", params=["through", "behind"])
def served(request: pytest.FixtureRequest, namespace: tuple[str, str],
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """examples/langgraph-server/ served by `langgraph dev` in a write mode, on this
    module's schema and a Redis prefix of the mode's own."""
    mode = str(request.param)
    schema, prefix = namespace
    prefix = f"{prefix}-{mode}"
    folder = tmp_path_factory.mktemp(f"server-{mode}")
    for name in ("langgraph.json", "agent.py"):
        shutil.copy(EXAMPLE / name, folder / name)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("LANGSMITH_", "LANGCHAIN_", "LANGGRAPH_", "LGD_"))}
    env.update(
        LGD_REDIS_URL=REDIS_URL, LGD_POSTGRES_URL=POSTGRES_URL, LGD_SCHEMA=schema,
        LGD_KEY_PREFIX=prefix, LGD_WRITE_MODE=mode,
        EXAMPLE_CHARGES_FILE=str(folder / "charges.jsonl"),
        EXAMPLE_HOLD_FILE=str(folder / "hold"),
        LANGSMITH_TRACING="false", LANGGRAPH_CLI_NO_ANALYTICS="1",
    )
    server = DevServer(folder, env, folder.parent / f"server-{mode}.log")
    saver = DurableSaver(REDIS_URL, POSTGRES_URL, schema=schema, key_prefix=prefix,
                         write_mode=mode)  # type: ignore[arg-type]
    ours = DurableStore(REDIS_URL, POSTGRES_URL, schema=schema, key_prefix=prefix)
    server.start()
    try:
        yield Served(mode, server, saver, ours, folder / "charges.jsonl", folder / "hold")
    finally:
        server.stop()
        saver.close()
        ours.close()


async def _wait_for(what: str, served: Served, check: Callable[[], bool],
                    timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            served.fail(f"waited {timeout:.0f}s for {what}")
        await asyncio.sleep(0.1)


async def _interrupted_thread(client: LangGraphClient, order_id: str, cents: int) -> str:
    """A new thread whose run stopped at ``approve`` for a charge."""
    thread = await client.threads.create()
    await client.runs.wait(thread["thread_id"], GRAPH, input={
        "messages": [{"role": "user", "content": f"charge {order_id} {cents}"}]})
    state = await client.threads.get_state(thread["thread_id"])
    assert state["next"] == ["approve"]
    [pending] = state["interrupts"]
    assert pending["value"] == {"approve": [{"order_id": order_id, "cents": cents},
                                            {"order_id": order_id}]}
    return str(thread["thread_id"])


def _contents(values: Any) -> list[str]:
    return [str(m["content"]) for m in values["messages"]]


def _done(order_id: str, cents: int) -> str:
    return f"done: charged {cents} cents for {order_id}; notified the customer of {order_id}"


# ------------------------------------------------------------------ through the HTTP API


async def test_a_run_interrupts_resumes_and_its_thread_copies(served: Served) -> None:
    """A run stops at ``interrupt``; the answer resumes it through the durable tool (found
    through the server's adapter, without ``saver=``); the thread's copy has its state and
    its history."""
    client = served.client()
    order = f"order-{uuid.uuid4().hex[:6]}"
    thread_id = await _interrupted_thread(client, order, 500)
    final = await client.runs.wait(thread_id, GRAPH, command={"resume": "yes"})
    if not isinstance(final, dict) or "messages" not in final:
        served.fail(f"the resumed run failed: {final!r}")
    assert _contents(final)[-1] == _done(order, 500)
    assert served.charged(order) == 1
    [record] = served.ledger(thread_id)
    assert (record.status, record.attempts) == ("succeeded", 1)

    # typed as returning None, the SDK returns the copy (the server's answer)
    copy = cast("dict[str, Any]", await client.threads.copy(thread_id))
    copied = await client.threads.get_state(copy["thread_id"])
    assert _contents(copied["values"]) == _contents(final)
    history = await client.threads.get_history(thread_id, limit=100)
    copied_history = await client.threads.get_history(copy["thread_id"], limit=100)
    assert [h["metadata"]["step"] for h in copied_history] == [
        h["metadata"]["step"] for h in history]
    # the copy is in the saver's tiers, under the copy's thread id
    stored = [t async for t in served.saver.alist(
        {"configurable": {"thread_id": copy["thread_id"], "checkpoint_ns": ""}})]
    assert len(stored) == len(history)


async def test_a_run_rolled_back_by_the_next_leaves_one_charge(served: Served) -> None:
    """A run caught in its tool step (after ``charge`` ran) is rolled back by a new run
    (``multitask_strategy="rollback"``): its checkpoints are gone (``adelete_for_runs``),
    and the new run, answering the same interrupt, replays the recorded charge."""
    client = served.client()
    order = f"order-{uuid.uuid4().hex[:6]}"
    thread_id = await _interrupted_thread(client, order, 700)
    served.hold.touch()
    try:
        first = await client.runs.create(thread_id, GRAPH, command={"resume": "yes"})
        await _wait_for("the first run's charge", served,
                        lambda: [r.status for r in served.ledger(thread_id)] == ["succeeded"])
        second = await client.runs.create(thread_id, GRAPH, command={"resume": "yes"},
                                          multitask_strategy="rollback")
    finally:
        served.hold.unlink()
    await client.runs.join(thread_id, second["run_id"])
    state = await client.threads.get_state(thread_id)
    assert _contents(state["values"])[-1] == _done(order, 700)
    history = await client.threads.get_history(thread_id, limit=100)
    run_ids = {h["metadata"].get("run_id") for h in history}
    assert first["run_id"] not in run_ids and second["run_id"] in run_ids
    stored = [t async for t in served.saver.alist({"configurable": {"thread_id": thread_id}})]
    assert first["run_id"] not in {t.metadata.get("run_id") for t in stored}
    assert served.charged(order) == 1
    [record] = served.ledger(thread_id)
    assert (record.status, record.attempts) == ("succeeded", 1)


async def test_a_server_killed_mid_run_replays_the_tool_call_after_a_restart(
        served: Served) -> None:
    """SIGKILL while a run is in its tool step, ``charge`` done and ``notify`` not: the
    restarted server retries the run, which replays ``charge`` from the ledger (one
    charge) and runs ``notify`` again."""
    client = served.client()
    order = f"order-{uuid.uuid4().hex[:6]}"
    thread_id = await _interrupted_thread(client, order, 900)
    served.hold.touch()
    run = await client.runs.create(thread_id, GRAPH, command={"resume": "yes"})
    await _wait_for("the run's charge", served,
                    lambda: [r.status for r in served.ledger(thread_id)] == ["succeeded"])
    # past the dev server's next write of its own records (the thread, the run running)
    await asyncio.sleep(DEV_FLUSH + 1)
    served.server.kill()
    served.hold.unlink()
    assert served.charged(order) == 1
    served.server.start()

    client = served.client()
    await client.runs.join(thread_id, run["run_id"])
    retried = await client.runs.get(thread_id, run["run_id"])
    if retried["status"] != "success":
        served.fail(f"the run retried after the restart ended {retried['status']}")
    state = await client.threads.get_state(thread_id)
    assert _contents(state["values"])[-1] == _done(order, 900)
    assert served.charged(order) == 1
    [record] = served.ledger(thread_id)
    assert (record.status, record.attempts) == ("succeeded", 1)


async def test_the_server_store_is_a_durable_store_for_runs_and_the_store_api(
        served: Served) -> None:
    """``langgraph_durable.server.store`` is the store the server gives runs and serves
    ``/store`` with: the summary a run wrote (``runtime.store``) is in Postgres under the
    ``LGD_*`` schema and prefix, and an item put through ``/store`` is one that any
    `DurableStore` on them reads, searches and lists."""
    client = served.client()
    order = f"order-{uuid.uuid4().hex[:6]}"
    thread_id = await _interrupted_thread(client, order, 300)
    await client.runs.wait(thread_id, GRAPH, command={"resume": "yes"})
    through_api = await client.store.get_item(["orders", order], "summary")
    assert through_api is not None
    assert through_api["value"] == {"cents": 300, "text": _done(order, 300)}
    ours = await served.store.aget(("orders", order), "summary")
    assert ours is not None and ours.value == through_api["value"]

    user = f"user-{uuid.uuid4().hex[:6]}"
    await client.store.put_item(["users", user], "m1", {"text": "likes tea", "weight": 9})
    await client.store.put_item(["users", user], "m2", {"text": "lives in Lyon", "weight": 10})
    item = await served.store.aget(("users", user), "m1")
    assert item is not None and item.value == {"text": "likes tea", "weight": 9}
    # a filter on a number compares numbers (the built-in store's own search would too)
    found = await client.store.search_items(["users", user], filter={"weight": {"$gte": 10}})
    assert [i["key"] for i in found["items"]] == ["m2"]
    listed = await client.store.list_namespaces(prefix=["users", user])
    assert listed["namespaces"] == [["users", user]]
    await client.store.delete_item(["users", user], "m1")
    assert await served.store.aget(("users", user), "m1") is None


# ------------------------------------------------------------ the entry point and adapter


def test_the_library_never_imports_the_server() -> None:
    """The entry point and the tools import nothing of langgraph-api / -cli / -runtime."""
    code = ("import sys, langgraph_durable, langgraph_durable.server, langgraph_durable.tools;"
            "print([m for m in sys.modules if m.startswith(('langgraph_api', 'langgraph_cli',"
            " 'langgraph_runtime'))])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"


async def test_the_entry_point_reads_the_lgd_environment(
        namespace: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """`checkpointer` builds a set-up saver from the ``LGD_*`` settings and closes it."""
    schema, prefix = namespace
    for name, value in (("LGD_REDIS_URL", REDIS_URL), ("LGD_POSTGRES_URL", POSTGRES_URL),
                        ("LGD_SCHEMA", schema), ("LGD_KEY_PREFIX", f"{prefix}-env"),
                        ("LGD_WRITE_MODE", "behind")):
        monkeypatch.setenv(name, value)
    async with checkpointer() as saver:
        assert (saver.config.schema, saver.config.key_prefix, saver.config.write_mode) == (
            schema, f"{prefix}-env", "behind")
        assert await saver.aget_tuple({"configurable": {"thread_id": "none"}}) is None
    monkeypatch.setenv("LGD_WRITE_MODE", "sometimes")
    with pytest.raises(ConfigurationError, match="LGD_WRITE_MODE"):
        saver_options()


async def test_the_store_entry_point_reads_the_lgd_environment(
        namespace: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """`store` builds a set-up store from the ``LGD_*`` settings (its table exists on entry,
    its TTL sweeper runs: the server runs none for a custom store) and closes it; what it
    wrote is there for the next one. ``LGD_WRITE_MODE`` is the saver's only: the store
    ignores it."""
    schema, prefix = namespace
    for name, value in (("LGD_REDIS_URL", REDIS_URL), ("LGD_POSTGRES_URL", POSTGRES_URL),
                        ("LGD_SCHEMA", f"{schema}_store"),
                        ("LGD_KEY_PREFIX", f"{prefix}-store"), ("LGD_WRITE_MODE", "sometimes")):
        monkeypatch.setenv(name, value)
    try:
        async with store() as entered:
            assert isinstance(entered, DurableStore)
            assert entered._asweeper is not None and not entered._asweeper[0].done()
            assert (entered.config.schema, entered.config.key_prefix) == (
                f"{schema}_store", f"{prefix}-store")
            assert await entered.aget(("users", "ada"), "m1") is None
            await entered.aput(("users", "ada"), "m1", {"text": "likes tea"})
            assert await entered.aget(("users", "ada"), "m1") is not None  # read from Redis
        async with store() as again:
            item = await again.aget(("users", "ada"), "m1")
            assert item is not None and item.value == {"text": "likes tea"}
        assert store_options(cache_ttl=60) == {
            "schema": f"{schema}_store", "key_prefix": f"{prefix}-store", "cache_ttl": 60}
    finally:
        drop_schema(f"{schema}_store")
    monkeypatch.setenv("LGD_STORE_SWEEP_MINUTES", "soon")
    with pytest.raises(ConfigurationError, match="LGD_STORE_SWEEP_MINUTES"):
        async with store():
            pytest.fail("entered a store with a sweep interval that is no number")
    monkeypatch.setenv("LGD_STORE_SWEEP_MINUTES", "5")
    monkeypatch.setenv("LGD_POSTGRES_URL", "postgresql://postgres@127.0.0.1:1/test")
    with pytest.raises(TierUnavailableError, match="Postgres"):
        async with store():
            pytest.fail("entered a store whose Postgres does not answer")


SERVER_CONFIG = {"DATABASE_URI": ":memory:", "REDIS_URI": "fake", "MIGRATIONS_PATH": "__inmem"}
"""What `langgraph dev` sets before it imports langgraph-api (whose config reads them)."""


def _adapter(saver: DurableSaver, monkeypatch: pytest.MonkeyPatch) -> BaseCheckpointSaver[Any]:
    """The server's own wrapper around a custom checkpointer, as its tasks get it."""
    for name, value in SERVER_CONFIG.items():
        monkeypatch.setenv(name, value)
    try:
        from langgraph_api._checkpointer._adapter import (
            CheckpointerCapabilities,
            _CustomCheckpointerAdapter,
        )
    except ImportError as exc:
        pytest.fail(f"langgraph-api is missing ({exc}): install the server-test extra ({INSTALL})")

    capabilities = CheckpointerCapabilities.from_type(type(saver))
    assert all((capabilities.has_adelete_thread, capabilities.has_adelete_for_runs,
                capabilities.has_acopy_thread, capabilities.has_aprune))
    return _CustomCheckpointerAdapter(saver, capabilities)


async def test_through_the_adapter_delta_history_and_prune(
        namespace: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Through the server's adapter: a `DeltaChannel` thread keeps its value (the base
    class's history walk over our reads equals our own history), ``aprune`` keeps what the
    latest checkpoint needs, and `durable_tool` finds the saver inside the adapter."""
    schema, prefix = namespace
    for mode in ("through", "behind"):
        saver = DurableSaver(REDIS_URL, POSTGRES_URL, schema=schema,
                             key_prefix=f"{prefix}-adapter-{mode}", write_mode=mode)  # type: ignore[arg-type]
        try:
            await saver.asetup()
            adapter = _adapter(saver, monkeypatch)
            assert _wrapped_saver(adapter) is saver
            graph = delta_graph(adapter)
            config: Any = {"configurable": {"thread_id": f"t-{uuid.uuid4()}"}}
            for _ in range(8):
                await graph.ainvoke({"log": []}, config)
            entries = [f"entry {i}" for i in range(8)]
            assert (await graph.aget_state(config)).values["log"] == entries
            head = (await saver.aget_tuple(config))
            assert head is not None
            walked = await adapter.aget_delta_channel_history(config=head.config,
                                                              channels=["log"])
            ours = await saver.aget_delta_channel_history(config=head.config, channels=["log"])
            assert walked == ours

            before = len([t async for t in adapter.alist(config)])
            await adapter.aprune([config["configurable"]["thread_id"]], strategy="keep_latest")
            after = len([t async for t in adapter.alist(config)])
            assert 1 < after < before
            assert (await graph.aget_state(config)).values["log"] == entries
            await graph.ainvoke({"log": []}, config)
            assert (await graph.aget_state(config)).values["log"][-1] == "entry 8"
            await adapter.aprune([config["configurable"]["thread_id"]], strategy="delete")
            assert await adapter.aget_tuple(config) is None
        finally:
            await saver.aclose()
