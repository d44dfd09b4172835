"""`make test` on a machine with no Redis and no Postgres: the session brings its own.

A pytest session told ``LGD_TEST_SERVERS=embedded`` (the path a machine without servers
takes) starts the embedded servers in a temporary folder of its own, its tests and the
processes they spawn reach them, and when it ends the servers are stopped and the folder
is gone.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

PROBE = '''
import json, os, subprocess, sys
import psycopg, redis
from tests.support.servers import EMBEDDED, POSTGRES_URL, REDIS_URL

def test_probe():
    assert EMBEDDED is not None and EMBEDDED.running
    assert redis.Redis.from_url(REDIS_URL).ping()
    with psycopg.connect(POSTGRES_URL) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
    child = subprocess.run(
        [sys.executable, "-c",
         "from tests.support.servers import POSTGRES_URL; print(POSTGRES_URL)"],
        capture_output=True, text=True, check=True)
    with open(os.environ["PROBE_OUT"], "w") as out:
        json.dump({"folder": str(EMBEDDED.data_dir.parent), "redis": REDIS_URL,
                   "postgres": POSTGRES_URL, "child_postgres": child.stdout.strip(),
                   "pids": [EMBEDDED.postgres_pid, EMBEDDED.valkey_pid]}, out)
'''


def test_a_session_without_servers_starts_and_stops_its_own(tmp_path: Path) -> None:
    """The session's tests talk to embedded servers over Unix sockets in a folder of the
    session's own, a process they spawn finds the same servers, and nothing is left
    running or on disk once the session ends."""
    (tmp_path / "test_probe.py").write_text(PROBE)
    repo = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if not k.startswith("LGD_")}
    env.update(LGD_TEST_SERVERS="embedded", PROBE_OUT=str(tmp_path / "probe.json"),
               PYTHONPATH=str(repo))
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "tests.conftest", "-p", "no:cacheprovider",
         "--rootdir", str(tmp_path), str(tmp_path / "test_probe.py")],
        capture_output=True, text=True, env=env, cwd=repo, timeout=240)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "servers: embedded PostgreSQL and Valkey (LGD_TEST_SERVERS=embedded)" in run.stdout
    probe = json.loads((tmp_path / "probe.json").read_text())
    folder = probe["folder"]
    assert probe["redis"] == f"unix://{folder}/data/run/valkey.sock"
    assert f"host={folder}/data/pg" in probe["postgres"]
    assert probe["child_postgres"] == probe["postgres"]
    assert not Path(folder).exists()
    for pid in probe["pids"]:
        assert not Path(f"/proc/{pid}").exists(), f"server pid {pid} outlived the session"
