"""The package's parts import each other only as docs/architecture.md says.

The map is the table of that page (part, files, may use); these tests read it, so the page
and the code cannot drift apart.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).parent.parent.parent
PACKAGE = ROOT / "langgraph_durable"
MAP = ROOT / "docs" / "architecture.md"


@dataclass(frozen=True)
class Part:
    name: str
    files: tuple[str, ...]  # paths relative to the package; a folder ends with "/"
    may_use: frozenset[str]

    def holds(self, path: str) -> bool:
        return any(path == f or (f.endswith("/") and path.startswith(f)) for f in self.files)


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def parts_of(page: str) -> dict[str, Part]:
    """The parts of the table whose header is ``| part | files | owns | may use |``."""
    lines = page.splitlines()
    start = next(i for i, line in enumerate(lines) if _cells(line)[:1] == ["part"])
    header = _cells(lines[start])
    assert header == ["part", "files", "owns", "may use"], header
    parts = {}
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        row = dict(zip(header, _cells(line), strict=True))
        uses = row["may use"]
        parts[row["part"]] = Part(
            row["part"], tuple(re.findall(r"`([^`]+)`", row["files"])),
            frozenset() if uses == "—" else frozenset(u.strip() for u in uses.split(",")))
    return parts


@functools.cache
def _modules() -> dict[str, str]:
    """Every module of the package: dotted name -> path relative to the package."""
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        modules[name] = path.relative_to(PACKAGE).as_posix()
    return modules


@functools.cache
def _imports() -> dict[str, set[str]]:
    """Every module's imports of the package (top level, lazy and TYPE_CHECKING alike)."""
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, relative in modules.items():
        for node in ast.walk(ast.parse((PACKAGE / relative).read_text())):
            if isinstance(node, ast.ImportFrom):
                assert node.level == 0, f"{relative}: a relative import the map cannot check"
                if (node.module or "").split(".")[0] != "langgraph_durable":
                    continue
                assert node.module is not None
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    graph[name].add(full if full in modules else node.module)
            elif isinstance(node, ast.Import):
                graph[name] |= {a.name for a in node.names if a.name in modules}
    return graph


def placement(modules: Mapping[str, str], parts: Mapping[str, Part]) -> dict[str, list[str]]:
    """Each module's parts (exactly one when the map is right)."""
    return {module: [p.name for p in parts.values() if p.holds(path)]
            for module, path in modules.items()}


def wall_breaches(graph: Mapping[str, set[str]], part_of: Mapping[str, str],
                  parts: Mapping[str, Part]) -> list[str]:
    """``"a -> b (A may not use B)"`` for each import across parts the map does not allow."""
    return sorted(
        f"{module} -> {target} ({part_of[module]} may not use {part_of[target]})"
        for module, targets in graph.items() for target in targets
        if part_of[target] != part_of[module]
        and part_of[target] not in parts[part_of[module]].may_use)


def unused_rows(graph: Mapping[str, set[str]], part_of: Mapping[str, str],
                parts: Mapping[str, Part]) -> list[str]:
    """``"A -> B"`` for each dependency the map allows that no import makes."""
    used = {(part_of[m], part_of[t]) for m, targets in graph.items() for t in targets}
    return sorted(f"{p.name} -> {u}" for p in parts.values() for u in p.may_use
                  if (p.name, u) not in used)


def _real() -> tuple[dict[str, set[str]], dict[str, str], dict[str, Part]]:
    parts = parts_of(MAP.read_text())
    placed = placement(_modules(), parts)
    return _imports(), {m: found[0] for m, found in placed.items() if len(found) == 1}, parts


def test_the_map_names_existing_files_and_parts() -> None:
    """Every path of the files column exists, and every "may use" names a part."""
    parts = parts_of(MAP.read_text())
    assert {"Face", "Engine", "Tiers", "Core", "Flusher", "Shell", "Base"} <= set(parts)
    missing = [f for p in parts.values() for f in p.files if not (PACKAGE / f).exists()]
    assert missing == []
    assert [u for p in parts.values() for u in p.may_use if u not in parts] == []


def test_every_module_belongs_to_exactly_one_part() -> None:
    """No module is outside the map, and none is in two parts."""
    placed = placement(_modules(), parts_of(MAP.read_text()))
    assert {m: found for m, found in placed.items() if len(found) != 1} == {}


def test_every_import_across_parts_is_one_the_map_allows() -> None:
    """Each import of a module of another part follows a "may use" row of the map."""
    graph, part_of, parts = _real()
    assert set(part_of) == set(graph)
    assert wall_breaches(graph, part_of, parts) == []


def test_every_row_of_the_map_is_used() -> None:
    """Each dependency the map allows is one some import makes (no stale permission)."""
    assert unused_rows(*_real()) == []


def test_a_forbidden_import_breaks_the_check() -> None:
    """The check is not vacuous: the real graph with a planted import of the saver by the
    core, and of the core by the CLI, reports both, and only them."""
    graph, part_of, parts = _real()
    planted = {module: set(targets) for module, targets in graph.items()}
    planted["langgraph_durable._core.keys"].add("langgraph_durable.saver")
    planted["langgraph_durable._cli.queries"].add("langgraph_durable._core.reads")
    assert wall_breaches(planted, part_of, parts) == [
        "langgraph_durable._cli.queries -> langgraph_durable._core.reads "
        "(Shell may not use Core)",
        "langgraph_durable._core.keys -> langgraph_durable.saver (Core may not use Face)",
    ]


def test_a_module_outside_the_map_or_in_two_parts_is_reported() -> None:
    """A new module no row holds, and a file listed under two parts, are both caught."""
    parts = parts_of(MAP.read_text())
    modules = {**_modules(), "langgraph_durable._tiers.new": "_tiers/new.py"}
    assert placement(modules, parts)["langgraph_durable._tiers.new"] == []
    doubled = dict(parts)
    doubled["Shell"] = Part("Shell", (*parts["Shell"].files, "_tiers/probes.py"),
                            parts["Shell"].may_use)
    assert placement(_modules(), doubled)["langgraph_durable._tiers.probes"] == [
        "Engine", "Shell"]


def test_a_stale_row_is_reported() -> None:
    """A "may use" that no import needs any more is reported."""
    graph, part_of, parts = _real()
    widened = dict(parts)
    widened["Core"] = Part("Core", parts["Core"].files, parts["Core"].may_use | {"Flusher"})
    assert unused_rows(graph, part_of, widened) == ["Core -> Flusher"]


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
# (the Shell's own connection, before any schema exists) and the operator probes.
SQL_ELSEWHERE = {"_embedded/postgres.py", "_tiers/probes.py"}
_SQL_TEXT = re.compile(r"^\s*(SELECT|INSERT|UPDATE|DELETE|WITH|CREATE|ALTER|DROP|SET) ")


def test_sql_lives_in_the_statements_package() -> None:
    """No string that reads as a statement sits outside `_core/sql/` (and the two modules
    that talk to a server before there is a schema)."""
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


def test_every_statement_a_set_renders_is_read_somewhere() -> None:
    """No statement is rendered for nothing: each field of each statement set is read by a
    module of the package outside `_core/sql/`."""
    from dataclasses import fields

    sources = "\n".join(path.read_text() for path in PACKAGE.rglob("*.py")
                        if not path.relative_to(PACKAGE).as_posix().startswith("_core/sql/"))
    unread = [f"{cls.__name__}.{f.name}" for cls in _statement_sets() for f in fields(cls)
              if f.name != "schema" and not re.search(rf"\.{f.name}\b", sources)]
    assert unread == []
