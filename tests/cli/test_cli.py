"""The ``langgraph-durable`` command line against the real servers.

Commands run in-process through typer's `CliRunner` (and a few as real processes), on
this module's own Postgres schema and Redis key prefix. Output is asserted as a user
reads it: thread ids, checkpoint ids, counts, one-line errors and exit codes.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
import redis
from langchain_core.messages import AIMessage, HumanMessage
from typer.testing import CliRunner, Result

from langgraph_durable import DurableSaver
from langgraph_durable.cli import app
from tests.support.cli_runner import cli_for
from tests.support.graphs import (
    CHARGE_CALL,
    approval_graph,
    charge_card_graph,
    chat_graph,
    subgraph_graph,
)
from tests.support.servers import POSTGRES_URL, REDIS_URL, drop_schema


@pytest.fixture
def cli(namespace: tuple[str, str]) -> Callable[..., Result]:
    """Run a command on this module's schema and prefix; returns typer's `Result`."""
    schema, prefix = namespace
    runner = CliRunner()
    env = {"LGD_REDIS_URL": REDIS_URL, "LGD_POSTGRES_URL": POSTGRES_URL,
           "LGD_SCHEMA": schema, "LGD_KEY_PREFIX": prefix, "COLUMNS": "200"}

    def run(*args: str) -> Result:
        return runner.invoke(app, list(args), env=env)

    return run


def thread_id() -> str:
    """A fresh thread id."""
    return f"t-{uuid.uuid4().hex[:8]}"


def chat(saver: DurableSaver) -> str:
    """Run the 3-node chat graph on a new thread (5 checkpoints), flushed to Postgres."""
    thread = thread_id()
    chat_graph(saver).invoke({"messages": [HumanMessage("hi")]},
                             {"configurable": {"thread_id": thread}})
    saver.flush()
    return thread


def one_line_error(result: Result) -> str:
    """The error line a failed command printed on stderr (exactly one)."""
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error:")]
    assert len(errors) == 1, result.stderr
    return errors[0]


# ------------------------------------------------------------------------------ doctor


def test_doctor_reports_servers_persistence_and_schema(cli: Callable[..., Result],
                                                       saver: DurableSaver) -> None:
    """On working servers doctor names both servers' versions, the AOF setting and an
    up-to-date schema, and exits 0."""
    result = cli("doctor")
    assert result.exit_code == 0, result.output
    assert re.search(r"(Redis|Valkey) \d+\.\d+", result.stdout)
    assert re.search(r"PostgreSQL \d+", result.stdout)
    assert "AOF" in result.stdout
    assert "up to date" in result.stdout
    assert "all checks passed" in result.stdout


def test_doctor_explains_an_unreachable_postgres_in_one_line(
        cli: Callable[..., Result]) -> None:
    """A Postgres URL nothing listens on: one error line naming the URL, the reason and the
    setting to fix; exit code 3 (tier unavailable)."""
    result = cli("doctor", "--postgres-url", "postgresql://postgres@127.0.0.1:1/test")
    assert result.exit_code == 3
    line = one_line_error(result)
    assert "cannot connect to Postgres at postgresql://postgres@127.0.0.1:1/test" in line
    assert "refused" in line.lower()
    assert "LGD_POSTGRES_URL" in line


def test_doctor_explains_an_unreachable_redis_in_one_line(cli: Callable[..., Result]) -> None:
    """A Redis URL nothing listens on fails the redis check with exit code 3."""
    result = cli("doctor", "--redis-url", "redis://127.0.0.1:1/0")
    assert result.exit_code == 3
    assert "cannot connect to Redis at redis://127.0.0.1:1/0" in one_line_error(result)
    # said once: the table's line points at it instead of repeating it
    assert (result.stdout + result.stderr).count("cannot connect to Redis") == 1
    assert "see the error line" in result.stdout


def test_doctor_rejects_a_malformed_url_as_misconfiguration(cli: Callable[..., Result]) -> None:
    """A URL that is not a Redis URL at all is a misconfiguration: exit code 2."""
    result = cli("doctor", "--redis-url", "http://127.0.0.1:6379")
    assert result.exit_code == 2
    assert "redis_url must be a redis:// URL" in one_line_error(result)


def test_doctor_warns_when_write_behind_runs_without_aof(cli: Callable[..., Result],
                                                         saver: DurableSaver) -> None:
    """With --write-mode behind on a Redis without the append-only file, doctor warns about
    losing unflushed writes (the test server runs with appendonly no) and exits 4, the code
    of checks passed with warnings."""
    aof = redis.Redis.from_url(REDIS_URL).config_get("appendonly")["appendonly"]
    result = cli("doctor", "--write-mode", "behind")
    if aof == "no":
        assert result.exit_code == 4, result.output
        assert "write-behind runs without AOF" in result.stdout
        assert "checks passed with 1 warning (redis persistence)" in result.stdout
    else:
        assert result.exit_code == 0, result.output
        assert "AOF on" in result.stdout


# ------------------------------------------------------------------------- migrations


def test_migrate_creates_the_schema_then_reports_it_up_to_date(
        cli: Callable[..., Result]) -> None:
    """migrate on a fresh schema applies every migration; a second run changes nothing."""
    schema = f"lgdt_cli_migrate_{uuid.uuid4().hex[:6]}"
    try:
        first = cli("migrate", "--schema", schema)
        assert first.exit_code == 0, first.output
        assert "applied migrations 1" in first.stdout
        second = cli("migrate", "--schema", schema)
        assert second.exit_code == 0, second.output
        assert "is up to date" in second.stdout
    finally:
        drop_schema(schema)


def test_a_schema_never_set_up_is_a_misconfiguration(cli: Callable[..., Result]) -> None:
    """Reading a schema that has no tables says to run migrate, exit code 2."""
    result = cli("threads", "--schema", "lgdt_cli_never_created")
    assert result.exit_code == 2
    assert "is not set up: run `langgraph-durable migrate" in one_line_error(result)


# ----------------------------------------------------------------------- inspection


def test_threads_lists_each_thread_with_its_checkpoints(cli: Callable[..., Result],
                                                        saver: DurableSaver) -> None:
    """A thread run through a 3-node graph (and flushed) appears with its 5 checkpoints,
    stored in both tiers, nothing unflushed."""
    thread = chat(saver)
    result = cli("threads")
    assert result.exit_code == 0, result.output
    row = next(line for line in result.stdout.splitlines() if thread in line)
    cells = [c.strip() for c in row.strip("│ ").split("│")]
    assert cells[0] == thread
    assert cells[1] == "5"
    assert cells[4] == "redis, postgres"
    assert cells[5] == "0"


def test_history_lists_the_checkpoints_a_graph_made(cli: Callable[..., Result],
                                                    saver: DurableSaver) -> None:
    """history shows every checkpoint id the saver lists, newest first, with its step."""
    thread = chat(saver)
    expected = [t.config["configurable"]["checkpoint_id"]
                for t in saver.list({"configurable": {"thread_id": thread}})]
    result = cli("history", thread)
    assert result.exit_code == 0, result.output
    shown = re.findall(r"│\s+(-?\d+) │ ([0-9a-f-]{36}) │", result.stdout)
    assert [cid for _, cid in shown] == expected
    assert [int(step) for step, _ in shown] == [3, 2, 1, 0, -1]


def test_history_shows_subgraph_namespaces(cli: Callable[..., Result],
                                           saver: DurableSaver) -> None:
    """A subgraph's checkpoints are listed with their namespace; --ns narrows to one."""
    thread = thread_id()
    subgraph_graph(saver).invoke({"messages": [HumanMessage("hi")]},
                                 {"configurable": {"thread_id": thread}})
    saver.flush()
    everything = cli("history", thread)
    assert everything.exit_code == 0, everything.output
    assert "(root)" in everything.stdout and "child:" in everything.stdout
    root_only = cli("history", thread, "--ns", "")
    assert "child:" not in root_only.stdout


def test_show_prints_state_values_and_pending_interrupts(cli: Callable[..., Result],
                                                         saver: DurableSaver) -> None:
    """show on a thread paused by interrupt() prints its values and the question asked."""
    thread = thread_id()
    approval_graph(saver).invoke({"request": "refund $5", "decision": ""},
                                 {"configurable": {"thread_id": thread}})
    saver.flush()
    result = cli("show", thread)
    assert result.exit_code == 0, result.output
    assert "'refund $5'" in result.stdout
    assert "interrupts" in result.stdout
    assert "approve refund $5?" in result.stdout


def test_show_finds_a_checkpoint_by_a_unique_fragment(cli: Callable[..., Result],
                                                      saver: DurableSaver) -> None:
    """A unique part of a checkpoint id is enough; a part shared by several is refused."""
    thread = chat(saver)
    ids = [t.config["configurable"]["checkpoint_id"]
           for t in saver.list({"configurable": {"thread_id": thread}})]
    first = ids[-1]
    result = cli("show", thread, first[-12:])
    assert result.exit_code == 0, result.output
    assert first in result.stdout
    ambiguous = cli("show", thread, first[:8])
    assert ambiguous.exit_code == 2
    assert "matches 5 checkpoints" in one_line_error(ambiguous)


def test_diff_shows_the_messages_added_between_two_checkpoints(
        cli: Callable[..., Result], saver: DurableSaver) -> None:
    """diff from the first loop step to the last lists the three AI messages appended."""
    thread = chat(saver)
    ids = [t.config["configurable"]["checkpoint_id"]
           for t in saver.list({"configurable": {"thread_id": thread}})]
    result = cli("diff", thread, ids[3], ids[0])
    assert result.exit_code == 0, result.output
    assert "appended" in result.stdout
    for text in ("+ ai: plan #1", "+ ai: act #2", "+ ai: finish #3"):
        assert text in result.stdout


def test_unknown_thread_is_one_error_line_and_exit_1(cli: Callable[..., Result],
                                                     saver: DurableSaver) -> None:
    """Naming a thread that has no checkpoints fails with exit code 1 and says so."""
    result = cli("history", "no-such-thread")
    assert result.exit_code == 1
    assert "thread 'no-such-thread' has no checkpoints" in one_line_error(result)


def test_prune_keeps_only_the_latest_checkpoint(cli: Callable[..., Result],
                                                saver: DurableSaver) -> None:
    """prune --strategy keep_latest leaves one checkpoint, the latest, and says so."""
    thread = chat(saver)
    latest = saver.get_tuple({"configurable": {"thread_id": thread}})
    assert latest is not None
    result = cli("prune", thread, "--yes")
    assert result.exit_code == 0, result.output
    assert f"{thread}: 5 → 1 checkpoints" in result.stdout
    remaining = list(saver.list({"configurable": {"thread_id": thread}}))
    assert [t.config for t in remaining] == [latest.config]


def test_prune_asks_before_deleting(cli: Callable[..., Result], saver: DurableSaver) -> None:
    """Without --yes, prune asks; answering no leaves the thread alone (exit code 1)."""
    thread = chat(saver)
    runner_result = CliRunner().invoke(app, ["prune", thread, "--strategy", "delete"],
                                       input="n\n", env={
        "LGD_REDIS_URL": REDIS_URL, "LGD_POSTGRES_URL": POSTGRES_URL,
        "LGD_SCHEMA": saver.config.schema, "LGD_KEY_PREFIX": saver.config.key_prefix})
    assert runner_result.exit_code == 1
    assert len(list(saver.list({"configurable": {"thread_id": thread}}))) == 5


# --------------------------------------------------------------- ledger and flushing


def test_ledger_lists_a_threads_tool_calls(cli: Callable[..., Result],
                                           saver: DurableSaver) -> None:
    """A durable tool called once through ToolNode shows as one succeeded call, 1 attempt."""
    thread = thread_id()
    charge_card_graph(saver).invoke({"messages": [AIMessage("", tool_calls=[CHARGE_CALL])]},
                                    {"configurable": {"thread_id": thread}})
    result = cli("ledger", thread)
    assert result.exit_code == 0, result.output
    row = next(line for line in result.stdout.splitlines() if "charge_card" in line)
    cells = [c.strip() for c in row.strip("│ ").split("│")]
    assert cells[:4] == ["charge_card", "call_1", "succeeded", "1"]
    assert "charged 500 for A-1" in row
    assert "not settled" not in result.stdout


def test_ledger_shows_the_key_of_a_call_in_progress(cli: Callable[..., Result],
                                                    saver: DurableSaver) -> None:
    """While another process runs a durable call, `ledger` lists it as started and prints
    its key under the table (the key `saver.ledger.resolve` would take)."""
    thread = thread_id()
    proc = subprocess.Popen([sys.executable, "-m", "tests.support.slow_call", saver.config.schema,
                             saver.config.key_prefix, thread], stdout=subprocess.PIPE,
                            cwd=Path(__file__).parents[2],
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "LGD_REDIS_URL": REDIS_URL,
                                 "LGD_POSTGRES_URL": POSTGRES_URL})
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "calling\n"
        result = cli("ledger", thread)
        assert result.exit_code == 0, result.output
        row = next(line for line in result.stdout.splitlines() if "wire_money" in line)
        assert [c.strip() for c in row.strip("│ ").split("│")][:4] == [
            "wire_money", "call_w", "started", "1"]
        key = saver.ledger.list(thread)[0].key
        assert f"wire_money (started): {key}" in result.stdout
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("write_mode", ["behind"])
def test_threads_shows_unflushed_checkpoints_until_flush(
        cli: Callable[..., Result], make_saver: Callable[..., DurableSaver],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A thread written behind is in Redis only, with 5 unflushed checkpoints, until the
    `flush` command drains the journal; then it is in Postgres and nothing is unflushed."""
    saver = make_saver()
    # No in-process flusher here: the `flush` command must be the one that moves the writes.
    monkeypatch.setattr(saver, "_start_flusher", lambda: None)
    thread = thread_id()
    chat_graph(saver).invoke({"messages": [HumanMessage("hi")]},
                             {"configurable": {"thread_id": thread}})

    def cells() -> list[str]:
        result = cli("threads")
        assert result.exit_code == 0, result.output
        row = next(line for line in result.stdout.splitlines() if thread in line)
        return [c.strip() for c in row.strip("│ ").split("│")]

    before = cells()
    assert before[1:] == ["5", "—", "—", "redis", "5"]  # Redis only, 5 unflushed
    flushed = cli("flush")
    assert flushed.exit_code == 0, flushed.output
    assert re.search(r"flushed in [\d.]+s: \d+ journal entries", flushed.stdout)
    after = cells()
    assert after[1] == "5" and after[4:] == ["redis, postgres", "0"]


def test_cli_reads_the_journal_shards_a_prefix_recorded(namespace: tuple[str, str]) -> None:
    """A prefix written with 4 journal shards is read in that layout by a command run
    without the setting: `threads` finds the thread and its 5 unflushed checkpoints,
    `doctor` finds the journal and counts its waiting entries, and `flush` drains every
    shard."""
    schema, prefix = namespace
    prefix = f"{prefix}-shards"  # a prefix of its own: the module's recorded one shard
    cli = cli_for((schema, prefix), columns=200)
    saver = DurableSaver(REDIS_URL, POSTGRES_URL, schema=schema, key_prefix=prefix,
                         write_mode="behind", journal_shards=4, background_flush=False)
    try:
        saver.setup()
        thread = thread_id()
        chat_graph(saver).invoke({"messages": [HumanMessage("hi")]},
                                 {"configurable": {"thread_id": thread}})
        waiting = saver.health()["flush"]["unflushed"]
    finally:
        saver.close()
    assert waiting > 0

    def cells() -> list[str]:
        result = cli("threads")
        assert result.exit_code == 0, result.output
        row = next(line for line in result.stdout.splitlines() if thread in line)
        return [c.strip() for c in row.strip("│ ").split("│")]

    assert cells()[1:] == ["5", "—", "—", "redis", "5"]
    doctor = cli("doctor")
    assert f"{waiting} entries waiting" in doctor.stdout, doctor.output
    if redis.Redis.from_url(REDIS_URL).config_get("appendonly")["appendonly"] == "no":
        assert "has a journal) runs without AOF" in doctor.stdout, doctor.output
    flushed = cli("flush")
    assert flushed.exit_code == 0, flushed.output
    assert f"unflushed {waiting} → 0" in flushed.stdout
    assert cells()[4:] == ["redis, postgres", "0"]


# ------------------------------------------------------------------- real processes


def run_module(*args: str, env: dict[str, str] | None = None,
               timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``python -m langgraph_durable ARGS`` as a real process."""
    return subprocess.run([sys.executable, "-m", "langgraph_durable", *args],
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "COLUMNS": "200", **(env or {})})


def test_python_dash_m_runs_the_cli() -> None:
    """``python -m langgraph_durable --help`` lists the commands."""
    result = run_module("--help")
    assert result.returncode == 0, result.stderr
    for command in ("demo", "threads", "history", "show", "diff", "ledger", "flush", "migrate",
                    "prune", "doctor", "embedded"):
        assert command in result.stdout


COMMANDS = ("threads", "history", "show", "diff", "ledger", "resolve", "resolve-all", "fork",
            "flush", "sweep", "migrate", "prune", "doctor", "demo", "embedded up",
            "dead-letters list", "dead-letters retry", "dead-letters drop",
            "store namespaces", "store items", "store get")


def test_help_lists_whole_sentences_without_type_tags() -> None:
    """``--help`` at 80 columns summarizes every command in a whole sentence (not one cut
    with "..."), and no command's help tags a flag with ``<bool>``."""
    overview = run_module("--help", env={"COLUMNS": "80"})
    assert overview.returncode == 0, overview.stderr
    listed = overview.stdout.partition("Commands:")[2].splitlines()
    summaries = [line.split(None, 1)[1] for line in listed if line.strip()]
    assert len(summaries) == 17, overview.stdout
    assert all(s.endswith(".") and not s.endswith("...") for s in summaries), summaries
    for command in COMMANDS:
        shown = run_module(*command.split(), "--help", env={"COLUMNS": "80"})
        assert shown.returncode == 0, (command, shown.stderr)
        assert "<bool>" not in shown.stdout, (command, shown.stdout)
        assert "--help" in shown.stdout


def test_demo_kills_the_worker_and_the_card_is_charged_once(
        namespace: tuple[str, str]) -> None:
    """The demo (on the test servers) kills its worker with SIGKILL after the charge,
    resumes in a new process, and its own checks pass: one charge, one ledger attempt.
    Piped (a CI log, ``make demo > file``) with no COLUMNS, its lines keep to 80 columns
    and its proof keeps the history's columns; it prints the commands to explore the
    thread as whole lines, which run as printed in a new shell (no LGD_* exported) on the
    demo's servers (from here, with this process's PATH: run as ``python -m``, they say
    so)."""
    schema, prefix = namespace
    servers = {"LGD_REDIS_URL": REDIS_URL, "LGD_POSTGRES_URL": POSTGRES_URL}
    fresh = {k: v for k, v in os.environ.items()
             if not k.startswith("LGD_") and k not in ("COLUMNS", "LINES")}
    result = subprocess.run(
        [sys.executable, "-m", "langgraph_durable", "demo", "--schema", schema,
         "--prefix", prefix, "--slow", "2"],
        capture_output=True, text=True, timeout=240, env={**fresh, **servers})
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SIGKILL" in result.stdout
    assert "the card was charged once, by the worker that was killed" in result.stdout
    assert "✘" not in result.stdout
    assert re.search(r"┃ step ┃ checkpoint ┃ source ┃ time +┃ +added ┃", result.stdout)
    assert "◀ resumed from" in result.stdout
    hints = []
    for command in ("history", "ledger"):
        hint = re.search(rf"^  (.+ {command} order-\w+ --schema {schema} --prefix {prefix})$",
                         result.stdout, re.M)
        assert hint is not None, result.stdout
        hints.append(hint.group(0))
        explored = subprocess.run(hint.group(1), shell=True, capture_output=True, text=True,
                                  timeout=60, env=fresh)
        assert explored.returncode == 0, explored.stdout + explored.stderr
        assert "order-" in explored.stdout, explored.stdout + explored.stderr
    long = [line for line in result.stdout.splitlines()
            if len(line) > 80 and line not in hints]
    assert long == [], long


@pytest.fixture
def data_root() -> Iterator[Path]:
    """A folder the embedded Postgres account can reach when the tests run as root."""
    import shutil
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="lgd-cli-test-", dir="/tmp"))
    base.chmod(0o711)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.timeout(300)
def test_embedded_up_serves_until_ctrl_c(data_root: Path) -> None:
    """`embedded up` prints two URLs that answer as plain `export` lines a shell takes as
    they are (no box, not wrapped, even on a 40-column terminal), a `demo` on the same
    data directory meanwhile runs on those servers (it cannot start its own there), and
    Ctrl-C stops both servers."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "langgraph_durable", "embedded", "up", "--data-dir",
         str(data_root / "d")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "COLUMNS": "40"})
    try:
        assert proc.stdout is not None
        urls: dict[str, str] = {}
        for line in proc.stdout:
            if line.startswith("export "):
                name, _, url = shlex.split(line)[1].partition("=")
                urls[name] = url
            if len(urls) == 2:
                break
        assert set(urls) == {"LGD_REDIS_URL", "LGD_POSTGRES_URL"}, proc.stderr
        assert redis.Redis.from_url(urls["LGD_REDIS_URL"]).ping()
        with psycopg.connect(urls["LGD_POSTGRES_URL"]) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
        demo = subprocess.run(
            [sys.executable, "-m", "langgraph_durable", "demo", "--slow", "1", "--data-dir",
             str(data_root / "d")], capture_output=True, text=True, timeout=200,
            env={k: v for k, v in os.environ.items() if not k.startswith("LGD_")})
        assert demo.returncode == 0, demo.stdout + demo.stderr
        assert f"using the embedded servers that process {proc.pid} runs in" in demo.stdout
        assert "the card was charged once" in demo.stdout
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        assert "stopped" in out
        assert not (data_root / "d" / "run" / "valkey.sock").exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()



# ------------------------------------------------------------------- option checks


@pytest.mark.parametrize("args", [("threads", "--limit", "-1"),
                                  ("history", "some-thread", "--limit", "0")])
def test_a_limit_below_one_is_a_clean_usage_error(cli: Callable[..., Result],
                                                  args: tuple[str, ...]) -> None:
    """``--limit`` below 1 is refused as a bad option (exit 2) with a message naming
    it, not a traceback and not "the thread has no checkpoints"."""
    result = cli(*args)
    assert result.exit_code == 2, result.output
    assert "--limit" in result.output
    assert "Traceback" not in result.output and "no checkpoints" not in result.output
    assert len(result.output.splitlines()) < 10


def test_doctor_shows_one_measured_latency_per_server(cli: Callable[..., Result],
                                                      saver: DurableSaver) -> None:
    """doctor measures a handful of requests, so it shows one figure per server (the
    slowest), not percentiles it cannot know."""
    result = cli("doctor")
    line = next(line for line in result.stdout.splitlines() if "latency" in line)
    assert "p50" not in line and "p99" not in line
    assert re.search(r"redis [\d.]+ms, postgres [\d.]+ms \(slowest round trip", line), line


def test_the_command_hints_name_this_program_as_it_can_be_run_from_here(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """``make demo`` runs ``.venv/bin/langgraph-durable``, which is not on the PATH: the
    hints then give its path; on the PATH, its name; run as ``python -m``, that."""
    from langgraph_durable._cli.demo import this_program

    script = Path(sys.executable).parent / "langgraph-durable"
    assert script.is_file()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", [str(script)])
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    named = this_program()
    assert Path(named).resolve() == script.resolve()
    assert subprocess.run([named, "--help"], capture_output=True, timeout=60).returncode == 0
    monkeypatch.setenv("PATH", f"{script.parent}:/usr/bin:/bin")
    assert this_program() == "langgraph-durable"
    monkeypatch.setattr(sys, "argv", [str(Path("langgraph_durable") / "__main__.py")])
    assert this_program().endswith(" -m langgraph_durable")

