"""Generate the blocking driver (`langgraph_durable/_tiers/sync.py`) from the asyncio one
(`aio.py`) by a table of substitutions, as httpcore's ``scripts/unasync.py`` does.

    python scripts/unasync.py           # rewrite sync.py
    python scripts/unasync.py --check   # exit 1 if sync.py is not what aio.py generates

Both modes also fail when a substitution of the table was never used: a rule that no longer
matches would otherwise hide a name the table does not know. ``--source`` and ``--target``
name other files (the tests check the check on copies).
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from pathlib import Path

TIERS = Path(__file__).resolve().parent.parent / "langgraph_durable" / "_tiers"

HEADER = (
    "# Generated from aio.py by scripts/unasync.py: do not edit. Change aio.py, then run\n"
    "# `python scripts/unasync.py` (`make lint` and `make test` fail on a stale copy).\n"
)


def _text(old: str, new: str) -> tuple[str, str]:
    """A rule that replaces the text ``old`` as it is written."""
    return re.escape(old), new


# (pattern, replacement), applied in order to the whole of aio.py; each must match.
RULES: list[tuple[str, str]] = [
    # what the docstrings say of the flavour
    _text("Asyncio driver: redis.asyncio and a psycopg async pool.",
          "Blocking driver: redis-py and a psycopg pool."),
    _text("The blocking driver (`sync.py`) is generated from this file",
          "Generated from the asyncio driver (`aio.py`)"),
    _text("edit this file, not `sync.py`.", "edit that file, not this one."),
    _text("Both tiers' clients for one event loop.",
          "Both tiers' clients for blocking callers (safe to share between threads)."),
    # the imports that name the other flavour's classes
    _text("import asyncio\n", ""),
    _text("from langgraph_durable._tiers.cluster import AsyncSlots as Slots\n"
          "from langgraph_durable._tiers.cluster import async_cluster_client as cluster_client\n"
          "from langgraph_durable._tiers.cluster import check_layout, cluster_mode\n",
          "from langgraph_durable._tiers.cluster import Slots, check_layout, cluster_client, "
          "cluster_mode\n"),
    (r"\bAsyncEffects\b", "Effects"),
    (r"\bAsyncConnection\b", "Connection"),
    # the code
    (r"\bclients\.for_loop\(", "clients.blocking("),
    (r"\.aclose\(\)", ".close()"),
    (r"\basyncio\.sleep\(", "time.sleep("),
    (r"\bcontextlib\.asynccontextmanager\b", "contextlib.contextmanager"),
    _text("from collections.abc import AsyncIterator, Generator\n",
          "from collections.abc import Generator, Iterator\n"),
    (r"\bAsyncIterator\b", "Iterator"),
    (r"\basync with\b", "with"),
    (r"\basync def\b", "def"),
    (r"\bawait\s+", ""),
]


def generate(source: str) -> tuple[str, list[str]]:
    """The blocking driver's text for the asyncio driver's ``source``, and the patterns
    of the rules that matched nothing."""
    unused = []
    for pattern, replacement in RULES:
        source, count = re.subn(pattern, replacement, source)
        if not count:
            unused.append(pattern)
    return HEADER + source, unused


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="fail if the target is not what the source generates; write nothing")
    parser.add_argument("--source", type=Path, default=TIERS / "aio.py")
    parser.add_argument("--target", type=Path, default=TIERS / "sync.py")
    args = parser.parse_args(argv)
    expected, unused = generate(args.source.read_text())
    if unused:
        print(f"unasync: rules that match nothing in {args.source}: {unused}", file=sys.stderr)
        return 1
    if not args.check:
        args.target.write_text(expected)
        return 0
    actual = args.target.read_text() if args.target.exists() else ""
    if actual == expected:
        return 0
    diff = difflib.unified_diff(actual.splitlines(keepends=True),
                                expected.splitlines(keepends=True),
                                str(args.target), f"generated from {args.source}")
    print(f"unasync: {args.target} is stale (run `python scripts/unasync.py`):", file=sys.stderr)
    sys.stderr.writelines(diff)
    return 1


if __name__ == "__main__":
    sys.exit(main())
