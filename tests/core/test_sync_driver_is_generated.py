"""The blocking driver is generated from the asyncio one (`scripts/unasync.py`), and the
check that `make lint` and `make test` run fails on a stale copy.

The drivers (`_tiers/aio.py`, `_tiers/sync.py`) are the only code of the package written
for both flavours. Planted changes are made to copies, never to the real files.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parent.parent.parent
SCRIPT = ROOT / "scripts" / "unasync.py"
TIERS = ROOT / "langgraph_durable" / "_tiers"


def _check(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), "--check", *args],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)


def _copies(tmp_path: Path) -> tuple[Path, Path]:
    source, target = tmp_path / "aio.py", tmp_path / "sync.py"
    shutil.copy(TIERS / "aio.py", source)
    shutil.copy(TIERS / "sync.py", target)
    return source, target


def test_the_committed_blocking_driver_is_what_the_asyncio_one_generates() -> None:
    """``unasync.py --check`` passes on the repository as committed, and sync.py says at
    its top that it is generated and must not be edited."""
    result = _check()
    assert result.returncode == 0, result.stderr
    assert (TIERS / "sync.py").read_text().startswith(
        "# Generated from aio.py by scripts/unasync.py: do not edit.")


def test_an_edit_to_the_generated_copy_fails_the_check(tmp_path: Path) -> None:
    """A hand edit of sync.py (a renamed method) is reported with the line that differs."""
    source, target = _copies(tmp_path)
    text = target.read_text()
    target.write_text(text.replace("    def cold(", "    def cold_tier(", 1))
    assert target.read_text() != text
    result = _check("--source", str(source), "--target", str(target))
    assert result.returncode == 1
    assert "stale" in result.stderr and "-    def cold_tier(" in result.stderr


def test_an_edit_to_the_source_alone_fails_the_check(tmp_path: Path) -> None:
    """A change to aio.py without regenerating sync.py fails the check; regenerating (the
    script without ``--check``) makes it pass again."""
    source, target = _copies(tmp_path)
    source.write_text(source.read_text().replace("HELD = 8", "HELD = 9", 1))
    assert _check("--source", str(source), "--target", str(target)).returncode == 1
    subprocess.run([sys.executable, str(SCRIPT), "--source", str(source), "--target",
                    str(target)], check=True, timeout=60)
    assert "HELD = 9" in target.read_text()
    assert _check("--source", str(source), "--target", str(target)).returncode == 0


def test_a_rule_that_matches_nothing_fails_the_check(tmp_path: Path) -> None:
    """A substitution the source no longer needs is reported (a stale rule would hide a
    name the table does not know)."""
    source, target = _copies(tmp_path)
    source.write_text(source.read_text().replace("asyncio.sleep(", "asyncio_sleep("))
    result = _check("--source", str(source), "--target", str(target))
    assert result.returncode == 1
    assert "match nothing" in result.stderr and "sleep" in result.stderr
