"""The langgraph sdist: download it once into a cache, extract its tests and patch them.

Only ``tests/`` and ``pyproject.toml`` are extracted, never the ``langgraph/`` package:
the installed langgraph is the one under test.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import tarfile
import tempfile
import tomllib
from pathlib import Path

from compat import FIXTURES, PARAM_ID, UPSTREAM_PARAM_ID, CompatError

CONFTEST_PATCH = (
    "\n\n# ---- appended by compat.run: DurableSaver and DurableStore replace the fixtures ----\n"
    "from compat.fixtures import async_checkpointer, sync_checkpointer  # noqa: E402,F401\n"
    "from compat.fixtures import async_store, sync_store  # noqa: E402,F401\n"
)


def fetch(version: str, cache: Path) -> Path:
    """The path of ``langgraph-VERSION.tar.gz`` in ``cache``, downloaded on first use."""
    target = cache / f"langgraph-{version}.tar.gz"
    if target.is_file():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    print(f"compat: downloading the langgraph=={version} sdist into {cache}", flush=True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                        "--no-binary", ":all:", f"langgraph=={version}", "-d", tmp], check=True)
        (got,) = Path(tmp).glob("langgraph-*.tar.gz")
        got.replace(target)
    return target


def extract(sdist: Path, dest: Path, *, patch: bool) -> Path:
    """Extract the sdist's tests and pyproject.toml into ``dest``; with ``patch``, rebind the
    checkpointer fixtures and alias the snapshots. Returns ``dest``."""
    with tarfile.open(sdist) as archive:
        members = []
        for member in archive.getmembers():
            _, _, relative = member.name.partition("/")
            if relative == "pyproject.toml" or relative.startswith("tests/"):
                member.name = relative
                members.append(member)
        archive.extractall(dest, members=members, filter="data")
    conftest = dest / "tests" / "conftest.py"
    text = conftest.read_text()
    for name in FIXTURES:
        if not re.search(rf"(?m)^(async )?def {name}\(", text):
            raise CompatError(f"upstream tests/conftest.py no longer defines {name}()")
    if patch:
        conftest.write_text(text + CONFTEST_PATCH)
        alias_snapshots(dest / "tests" / "__snapshots__")
    return dest


def alias_snapshots(folder: Path) -> int:
    """Copy every ``[memory...]`` snapshot to the same name with our param id.

    Upstream compares snapshots only when the saver is an InMemorySaver, under ids such as
    ``test_x[memory-False]``; ours read ``test_x[durable-False]``. ``memory`` is also the id
    of another fixture (the cache), so every non-empty subset of its occurrences is aliased.
    Returns how many copies were added.
    """
    token = re.compile(rf"(?<=[\[-]){UPSTREAM_PARAM_ID}(?=[\]-])")
    added = 0
    for ambr in sorted(folder.glob("*.ambr")):
        text = ambr.read_text()
        copies = []
        for block in re.finditer(r"(?ms)^# name: (\S+)\n(.*?^# ---\n)", text):
            name, body = block.groups()
            head, bracket, params = name.partition("[")
            tail = bracket + params
            spans = [found.span() for found in token.finditer(tail)]
            for mask in range(1, 2 ** len(spans)):
                new = tail
                for index in reversed(range(len(spans))):
                    if mask >> index & 1:
                        start, end = spans[index]
                        new = new[:start] + PARAM_ID + new[end:]
                copies.append(f"# name: {head}{new}\n{body}")
        if copies:
            ambr.write_text(text.rstrip("\n") + "\n" + "".join(copies))
            added += len(copies)
    return added


def addopts(pyproject: Path) -> str:
    """Upstream's pytest addopts minus ``--full-trace`` (which makes every traceback long)."""
    ini = tomllib.loads(pyproject.read_text()).get("tool", {}).get("pytest", {})
    options = shlex.split(ini.get("ini_options", {}).get("addopts", ""))
    return shlex.join(option for option in options if option != "--full-trace")


def checkpointer_test_files(tests: Path) -> list[str]:
    """The ``tests/test_*.py`` files that mention a checkpointer fixture, relative to the
    folder that holds ``tests/``."""
    pattern = re.compile(r"\ba?sync_checkpointer\b")
    return [f"tests/{path.name}" for path in sorted(tests.glob("test_*.py"))
            if pattern.search(path.read_text())]
