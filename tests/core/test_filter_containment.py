"""``list(filter=...)`` on unflushed checkpoints uses `reads.contains`, which must match
exactly as Postgres' ``jsonb @>`` will once they are flushed (each expectation below was
checked against Postgres)."""

from __future__ import annotations

from typing import Any

import pytest

from langgraph_durable._core.reads import contains

CASES = [
    # (document, pattern, what Postgres says)
    ({"a": {"b": 1, "c": 2}, "d": 3}, {"a": {"b": 1}}, True),
    ({"a": 1}, {}, True),
    ({}, {"a": None}, False),
    ({"a": None}, {"a": None}, True),
    ({"a": [[1, 2], [3]]}, {"a": [[2]]}, True),
    ({"a": [[1, 2], [3]]}, {"a": [[1, 3]]}, False),
    ({"a": [{"b": 1, "c": 2}]}, {"a": [{"c": 2}]}, True),
    ({"a": [1, 1]}, {"a": [1, 1, 1]}, True),
    ({"a": []}, {"a": []}, True),
    ({"a": {"b": 1}}, {"a": []}, False),
    ({"a": [1, 2]}, {"a": 1}, False),
    ({"a": 1}, {"a": True}, False),
    ({"a": True}, {"a": 1}, False),
    ({"a": 0}, {"a": False}, False),
    ({"a": False}, {"a": False}, True),
    ({"a": 1}, {"a": 1.0}, True),
    ({"a": "1"}, {"a": 1}, False),
    ({"source": "loop", "step": 2}, {"source": "loop", "step": 2}, True),
]


@pytest.mark.parametrize(("document", "pattern", "expected"), CASES)
def test_contains_mirrors_jsonb_containment(document: Any, pattern: Any,
                                            expected: bool) -> None:
    """Objects match key by key (nested, a missing key never matches null), arrays match
    when each wanted element is contained in some element (nested arrays too, duplicates
    ignored), an array never matches a scalar, booleans never equal numbers, numbers
    compare by value and strings never equal numbers."""
    assert contains(document, pattern) is expected
