"""The asyncio driver is a mechanical mirror of the blocking one: they cannot drift.

The drivers (`_tiers/sync.py`, `_tiers/aio.py`) are the only mirrored code of the package:
storage requests and tool effects both go through them.
"""

from __future__ import annotations

import re
from pathlib import Path

TIERS = Path(__file__).parent.parent / "langgraph_durable" / "_tiers"

# What may differ between the twins, and nothing else; each rule must still be needed.
_ASYNC_TO_SYNC = [
    (r"\basync with\b", "with"),
    (r"\basync def\b", "def"),
    (r"\bawait\s+", ""),
    (r"\bclients\.for_loop\(", "clients.blocking("),
    (r"AsyncConnection\b", "Connection"),
    (r"self\.redis\.aclose\(\)", "self.redis.close()"),
    (r"self\.cluster\.aclose\(\)", "self.cluster.close()"),
    (r"asyncio\.sleep", "time.sleep"),
    (r"\bAsyncEffects\b", "Effects"),
]


def _body(path: Path) -> list[str]:
    text = path.read_text()
    text = text.split('"""', 2)[2]  # drop the module docstring, which names the flavour
    # Imports may differ (the linters check them); the code may not.
    code = text[text.index("\nT = TypeVar"):]
    return [line for line in code.splitlines() if "clients for" not in line]


def test_async_driver_mirrors_sync_driver() -> None:
    """Rewriting aio.py's async syntax to sync syntax yields sync.py line for line, and
    every rewrite rule is used (a stale rule would hide a rename the test does not know)."""
    aio = _body(TIERS / "aio.py")
    for pattern, repl in _ASYNC_TO_SYNC:
        assert any(re.search(pattern, line) for line in aio), f"rule {pattern!r} is stale"
        aio = [re.sub(pattern, repl, line) for line in aio]
    assert aio == _body(TIERS / "sync.py")


def test_a_rename_in_one_twin_fails_the_check() -> None:
    """A name changed in one driver only is caught (the check is not vacuous)."""
    aio = _body(TIERS / "aio.py")
    for pattern, repl in _ASYNC_TO_SYNC:
        aio = [re.sub(pattern, repl, line) for line in aio]
    renamed = [line.replace("def cold(", "def cold_tier(") for line in aio]
    assert renamed != aio
    assert renamed != _body(TIERS / "sync.py")
