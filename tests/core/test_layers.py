"""The package's parts import each other only in the allowed directions (DESIGN.md §5)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).parent.parent.parent / "langgraph_durable"
BASE = ("langgraph_durable.errors", "langgraph_durable.config", "langgraph_durable.metrics")
SHELL = ("langgraph_durable.__main__", "langgraph_durable.cli", "langgraph_durable._cli",
         "langgraph_durable.embedded", "langgraph_durable._embedded")


def _modules() -> dict[str, Path]:
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def _imports() -> dict[str, set[str]]:
    """Every module's imports of the package (top level, lazy and TYPE_CHECKING alike)."""
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                    "langgraph_durable"):
                assert node.module is not None
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    graph[name].add(full if full in modules else node.module)
            elif isinstance(node, ast.Import):
                graph[name] |= {a.name for a in node.names if a.name in modules}
    return graph


def _within(module: str, parts: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in parts)


def test_no_module_imports_itself_through_others() -> None:
    """No import circle anywhere in the package."""
    graph = _imports()

    def reaches(start: str, goal: str) -> bool:
        seen, stack = set(), [start]
        while stack:
            for nxt in graph.get(stack.pop(), ()):
                if nxt == goal:
                    return True
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append(nxt)
        return False

    circles = [m for m in graph if reaches(m, m)]
    assert circles == []


def test_core_imports_only_core_and_base() -> None:
    """The sans-I/O core never imports the drivers, the engine, the public API or the CLI."""
    graph = _imports()
    bad = {m: sorted(d for d in deps if not _within(d, ("langgraph_durable._core", *BASE)))
           for m, deps in graph.items() if _within(m, ("langgraph_durable._core",))}
    assert {m: d for m, d in bad.items() if d} == {}


def test_the_library_never_imports_the_shell() -> None:
    """The public API, the engine and the drivers never import the CLI or embedded servers."""
    graph = _imports()
    library = [m for m in graph if not _within(m, SHELL)]
    bad = {m: sorted(d for d in graph[m] if _within(d, SHELL)) for m in library}
    assert {m: d for m, d in bad.items() if d} == {}


def test_only_the_engine_and_the_saver_run_operations_by_private_hands() -> None:
    """Nothing outside `_tiers/engine.py` and `saver.py` reaches a saver's ``_run``,
    ``_arun`` or ``_ctx``: everyone else goes through ``saver.engine``."""
    allowed = {PACKAGE / "_tiers" / "engine.py", PACKAGE / "saver.py"}
    hits = [f"{path.relative_to(PACKAGE)}:{n}" for path in PACKAGE.rglob("*.py")
            if path not in allowed
            for n, line in enumerate(path.read_text().splitlines(), 1)
            if re.search(r"\.(_run|_arun|_ctx)\b", line)]
    assert hits == []


def test_every_statement_constant_is_declared_on_statements() -> None:
    """`Statements` declares one typed attribute per ``*_SQL`` constant of `_core/sql.py`
    (so the type checker knows every name), and renders exactly those."""
    from langgraph_durable._core import sql as statements_module

    constants = {name.lower() for name in vars(statements_module)
                 if name.endswith("_SQL") and isinstance(getattr(statements_module, name), str)}
    assert set(statements_module.STATEMENT_NAMES) == constants
    rendered = statements_module.Statements("s")
    assert all(hasattr(rendered, name) for name in constants)
