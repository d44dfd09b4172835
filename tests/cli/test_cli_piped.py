"""The command line's output read by a script: piped, no line is wrapped (a thread id or a
value stays whole on its line, so ``threads | grep ID`` finds it), and ``show --full``
prints values whole in a terminal too."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid

from langgraph_durable import DurableSaver
from tests.support.checkpoints import put_value
from tests.support.cli_runner import cli_for
from tests.support.servers import POSTGRES_URL, REDIS_URL


def _piped(namespace: tuple[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """``langgraph-durable ARGS`` in a child process whose stdout is a pipe and whose
    environment sets no COLUMNS, as in ``langgraph-durable threads | grep ID``."""
    schema, prefix = namespace
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env.update(LGD_REDIS_URL=REDIS_URL, LGD_POSTGRES_URL=POSTGRES_URL, LGD_SCHEMA=schema,
               LGD_KEY_PREFIX=prefix)
    return subprocess.run([sys.executable, "-m", "langgraph_durable", *args], env=env,
                          capture_output=True, text=True, timeout=120, check=False)


def test_piped_output_keeps_long_ids_and_values_on_one_line(
    namespace: tuple[str, str], saver: DurableSaver
) -> None:
    """A 100-character thread id and a 3,000-character value, piped: each is found whole on
    one line of ``threads`` and ``show`` (at 80 columns both would be folded or cut)."""
    thread = f"customer-{uuid.uuid4()}-" + "x" * 55
    value = " ".join(f"word{i}" for i in range(500))
    put_value(saver, thread, value)
    listed = _piped(namespace, "threads")
    assert listed.returncode == 0, listed.stderr
    assert [line for line in listed.stdout.splitlines() if thread in line], listed.stdout
    shown = _piped(namespace, "show", thread)
    assert shown.returncode == 0, shown.stderr
    assert any(value in line for line in shown.stdout.splitlines()), shown.stdout[:2000]


def test_show_full_prints_values_whole_at_80_columns(
    namespace: tuple[str, str], saver: DurableSaver
) -> None:
    """In an 80-column terminal ``show`` cuts a long value to fit (with an ellipsis);
    ``show --full`` gives all of it."""
    thread = f"full-{uuid.uuid4()}"
    value = " ".join(f"word{i}" for i in range(300))
    put_value(saver, thread, value)
    cli = cli_for(namespace, columns=80)
    cut = cli("show", thread)
    assert cut.exit_code == 0, cut.output
    assert "word299" not in cut.stdout and "…" in cut.stdout
    whole = cli("show", "--full", thread)
    assert whole.exit_code == 0, whole.output
    folded = re.sub(r"[│\s]", "", whole.stdout)  # the table's cells, lines joined
    assert "".join(value.split()) in folded
