"""No module of the package over 600 lines, no function over 80: a newcomer reads a module
in one sitting and a function on one screen."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

PACKAGE = Path(__file__).parent.parent.parent / "langgraph_durable"
MODULE_LINES = 600
FUNCTION_LINES = 80

# The modules that are still longer. The list only shrinks: a module that gets under the
# limit leaves it (the last test says so), and none joins it.
LONG_MODULES: set[str] = set()
# The functions that are still longer ("module.py:name"), on the same terms.
LONG_FUNCTIONS: set[str] = set()


@functools.cache
def _sources() -> dict[str, str]:
    return {path.relative_to(PACKAGE).as_posix(): path.read_text()
            for path in sorted(PACKAGE.rglob("*.py"))}


def _long_modules() -> set[str]:
    return {name for name, text in _sources().items()
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


def test_the_lists_of_long_ones_name_only_long_ones() -> None:
    """An entry of `LONG_MODULES` or `LONG_FUNCTIONS` that is no longer too long is taken
    off, so the lists only shrink."""
    assert LONG_MODULES - _long_modules() == set()
    assert LONG_FUNCTIONS - _long_functions() == set()
