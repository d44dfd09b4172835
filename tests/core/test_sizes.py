"""No module of the package or of its tests over 600 lines, no function of the package over
80: a newcomer reads a module in one sitting and a function on one screen."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).parent.parent.parent
PACKAGE = ROOT / "langgraph_durable"
TESTS = ROOT / "tests"
MODULE_LINES = 600
FUNCTION_LINES = 80

# The modules that are still longer. The list only shrinks: a module that gets under the
# limit leaves it (the last test says so), and none joins it.
LONG_MODULES: set[str] = set()
# The functions that are still longer ("module.py:name"), on the same terms.
LONG_FUNCTIONS: set[str] = set()
# The modules under tests/ that are still longer, on the same terms.
LONG_TEST_MODULES: set[str] = set()


@functools.cache
def _sources(root: Path = PACKAGE) -> dict[str, str]:
    return {path.relative_to(root).as_posix(): path.read_text()
            for path in sorted(root.rglob("*.py"))}


def _long_modules(root: Path = PACKAGE) -> set[str]:
    return {name for name, text in _sources(root).items()
            if len(text.splitlines()) > MODULE_LINES}


def _long_functions() -> set[str]:
    found = set()
    for name, text in _sources().items():
        for node in ast.walk(ast.parse(text)):
            if (isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
                    and node.end_lineno is not None
                    and node.end_lineno - node.lineno + 1 > FUNCTION_LINES):
                found.add(f"{name}:{node.name}")
    return found


def test_no_module_is_longer_than_600_lines() -> None:
    """Every module outside `LONG_MODULES` has at most 600 lines."""
    assert _long_modules() - LONG_MODULES == set()


def test_no_function_is_longer_than_80_lines() -> None:
    """Every function (from its ``def`` to its last line) outside `LONG_FUNCTIONS` has at
    most 80 lines."""
    assert _long_functions() - LONG_FUNCTIONS == set()


def test_no_test_module_is_longer_than_600_lines() -> None:
    """Every module under ``tests/`` (the tests and what they share in ``tests/support``)
    outside `LONG_TEST_MODULES` has at most 600 lines too."""
    assert _long_modules(TESTS) - LONG_TEST_MODULES == set()


def test_the_lists_of_long_ones_name_only_long_ones() -> None:
    """An entry of `LONG_MODULES`, `LONG_FUNCTIONS` or `LONG_TEST_MODULES` that is no longer
    too long is taken off, so the lists only shrink."""
    assert LONG_MODULES - _long_modules() == set()
    assert LONG_FUNCTIONS - _long_functions() == set()
    assert LONG_TEST_MODULES - _long_modules(TESTS) == set()
