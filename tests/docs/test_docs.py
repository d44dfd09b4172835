"""The README and docs/ as a reader meets them: every example that says what it prints runs
as written and prints it, every link leads somewhere, and the README stays short.

An example "says what it prints" with ``# → text`` comments: run in a fresh interpreter
(against a database and Redis db of its own), its output is those texts, line by line.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import psycopg
import pytest
import redis

from tests.support.servers import POSTGRES_URL, postgres_url, redis_url

ROOT = Path(__file__).parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"```python\n(.*?)```", re.S)
EXPECTED = re.compile(r"# → (.*)$", re.M)


def _examples() -> list[tuple[str, str]]:
    """(page and position, code) of every python block that says what it prints."""
    found = []
    for page in PAGES:
        text = page.read_text()
        for match in BLOCK.finditer(text):
            if EXPECTED.search(match.group(1)):
                line = text.count("\n", 0, match.start()) + 1
                found.append((f"{page.relative_to(ROOT)}:{line}", match.group(1)))
    return found


EXAMPLES = _examples()


def test_the_readme_has_its_runnable_examples() -> None:
    """The quickstart and the ledger example are among the examples the tests run."""
    readme = [code for where, code in EXAMPLES if where.startswith("README.md")]
    assert any("def reply" in code for code in readme)
    assert any("create_agent" in code and "durable_tool" in code for code in readme)


@pytest.mark.parametrize(("where", "code"), EXAMPLES, ids=[w for w, _ in EXAMPLES])
def test_an_example_prints_what_it_says(where: str, code: str, tmp_path: Path) -> None:
    """The example, run as pasted in a fresh interpreter, prints what its comments say."""
    database = f"lgd_docs_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{database}"')
    db15 = redis_url(db=15)
    script = tmp_path / "example.py"
    script.write_text(code)
    try:
        env = {**os.environ, "LGD_REDIS_URL": db15,
               "LGD_POSTGRES_URL": postgres_url(database=database)}
        out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                             text=True, timeout=120, cwd=tmp_path)
        assert out.returncode == 0, f"{where}:\n{out.stderr}"
        assert out.stdout.splitlines() == EXPECTED.findall(code), where
    finally:
        client = redis.Redis.from_url(db15)
        for key in client.scan_iter(match="lgd:*"):
            client.delete(key)
        client.close()
        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')


def _anchors(page: Path) -> set[str]:
    """The anchors GitHub gives a page's headings."""
    anchors = set()
    for heading in re.findall(r"^#+ (.+)$", page.read_text(), re.M):
        anchor = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        anchors.add(anchor)
    return anchors


def test_every_link_between_pages_leads_somewhere() -> None:
    """Each relative link names a file of the repository and, with ``#``, a heading of it."""
    broken = []
    for page in PAGES:
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            if not file.exists():
                broken.append(f"{page.name}: {target} (no such file)")
            elif anchor and file.suffix == ".md" and anchor not in _anchors(file):
                broken.append(f"{page.name}: {target} (no such heading)")
    assert broken == []


def test_the_readme_is_short_and_points_at_the_docs() -> None:
    """A newcomer finishes the README: at most 350 lines, and every page of docs/ is linked
    from it."""
    readme = (ROOT / "README.md").read_text()
    assert readme.count("\n") <= 350
    for page in sorted((ROOT / "docs").glob("*.md")):
        assert f"](docs/{page.name})" in readme, page.name


# The extra that brings each package a README example may import beyond the base install.
EXTRA_OF = {"langchain": "agents"}


def test_the_install_section_names_the_extra_each_example_needs() -> None:
    """A README example that imports a package of an extra (the ledger example's
    ``langchain``) runs after an install line the Install section gives."""
    readme = (ROOT / "README.md").read_text()
    install = readme.split("## Install", 1)[1].split("\n## ", 1)[0]
    needed = set()
    for where, code in EXAMPLES:
        if where.startswith("README.md"):
            for module in re.findall(r"^(?:from|import) (\w+)", code, re.M):
                if module in EXTRA_OF:
                    needed.add(EXTRA_OF[module])
    assert needed, "the ledger example imports langchain"
    for extra in needed:
        assert f"pip install '.[{extra}]'" in install, extra


def test_durable_middleware_comes_from_the_package_and_the_base_install_still_imports() -> None:
    """``from langgraph_durable import DurableMiddleware`` gives the middleware; without
    LangChain (the base install) the package imports, and asking for it names the extra."""
    from langgraph_durable import DurableMiddleware
    from langgraph_durable.middleware import DurableMiddleware as defined

    assert DurableMiddleware is defined
    program = ("import sys; sys.modules['langchain'] = None\n"
               "import langgraph_durable\n"
               "from langgraph_durable import *\n"
               "try:\n    langgraph_durable.DurableMiddleware\n"
               "except ImportError as exc:\n    print(exc)\n")
    out = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                         timeout=60, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert "pip install 'langgraph-durable[agents]'" in out.stdout


def test_what_try_it_leaves_behind_is_ignored() -> None:
    """``langgraph dev`` in the server example ("Try it") leaves its ``.langgraph_api/``
    state there: git ignores it, so it is never committed by accident."""
    left = "examples/langgraph-server/.langgraph_api/store.pckl"
    out = subprocess.run(["git", "check-ignore", "-q", left], cwd=ROOT, timeout=30)
    assert out.returncode == 0, f"{left} is not ignored"
