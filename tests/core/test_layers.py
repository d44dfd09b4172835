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


def _statement_sets() -> list[type]:
    import importlib
    import inspect

    from langgraph_durable._core.sql.render import Rendered

    sets = []
    for path in sorted((PACKAGE / "_core" / "sql").glob("*.py")):
        module = importlib.import_module(f"langgraph_durable._core.sql.{path.stem}")
        sets += [cls for cls in vars(module).values() if inspect.isclass(cls)
                 and issubclass(cls, Rendered) and cls is not Rendered
                 and cls.__module__ == module.__name__]
    return sets


def test_every_statement_set_renders_exactly_its_declared_statements() -> None:
    """Each statement set (`_core.sql.render.Rendered`) declares one typed field per
    template it renders (so the type checker knows every name), and renders exactly those."""
    from dataclasses import fields

    sets = _statement_sets()
    assert len(sets) >= 5
    for cls in sets:
        declared = {f.name for f in fields(cls)} - {"schema"}
        assert declared == set(cls.TEMPLATES), cls.__name__
        rendered = cls("s")
        assert all("{schema}" not in getattr(rendered, name).as_string(None)
                   for name in declared), cls.__name__


def test_every_statement_constant_is_rendered_by_a_statement_set() -> None:
    """Every ``*_SQL`` template of `_core/sql/` belongs to a statement set: none is left
    unrendered, or rendered some other way."""
    import importlib

    templates = {id(t) for cls in _statement_sets() for t in cls.TEMPLATES.values()}
    loose = []
    for path in sorted((PACKAGE / "_core" / "sql").glob("*.py")):
        module = importlib.import_module(f"langgraph_durable._core.sql.{path.stem}")
        loose += [f"{path.stem}.{name}" for name, value in vars(module).items()
                  if name.endswith("_SQL") and isinstance(value, str)
                  and id(value) not in templates]
    assert loose == []


# Text that is SQL but lives outside `_core/sql/`: the embedded server's bootstrap
# (the Shell's own connection, before any schema exists) and the CLI's probes.
SQL_ELSEWHERE = {"_embedded/postgres.py", "_cli/probes.py"}
_SQL_TEXT = re.compile(r"^\s*(SELECT|INSERT|UPDATE|DELETE|WITH|CREATE|ALTER|DROP|SET) ")


def test_sql_lives_in_the_statements_package() -> None:
    """No string that reads as a statement sits outside `_core/sql/` (and the two Shell
    modules that talk to a server before there is a schema)."""
    hits = []
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel.startswith("_core/sql/") or rel in SQL_ELSEWHERE:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                    and _SQL_TEXT.match(node.value)):
                hits.append(f"{rel}:{node.lineno}")
    assert hits == []
