"""The README's quickstart runs as written, against a database and Redis db of its own."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import psycopg
import redis

from tests.conftest import POSTGRES_URL, postgres_url, redis_url

README = Path(__file__).parent.parent / "README.md"


def _quickstart() -> str:
    text = README.read_text()
    section = text[text.index("## Quickstart"):text.index("## Two commands")]
    (code,) = re.findall(r"```python\n(.*?)```", section, re.S)
    return code


def test_readme_quickstart_runs_as_written(tmp_path: Path) -> None:
    """The snippet, run in a fresh interpreter, prints what its comment promises."""
    database = f"lgd_readme_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{database}"')
    db15 = redis_url(db=15)
    script = tmp_path / "quickstart.py"
    script.write_text(_quickstart())
    try:
        env = {**os.environ, "LGD_REDIS_URL": db15,
               "LGD_POSTGRES_URL": postgres_url(database=database)}
        out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                             text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "you said hello"
    finally:
        client = redis.Redis.from_url(db15)
        for key in client.scan_iter(match="lgd:*"):
            client.delete(key)
        client.close()
        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
