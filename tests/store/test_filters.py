"""Filters compare by type: numbers as numbers, strings as strings."""

from __future__ import annotations

import uuid

import pytest

from langgraph_durable import ConfigurationError, DurableStore


@pytest.fixture
def items(store: DurableStore) -> tuple[str]:
    """Four items with numbers, strings, nested values and a missing field."""
    ns = (f"f{uuid.uuid4().hex[:8]}",)
    store.put(ns, "nine", {"n": 9, "s": "9", "tag": "a", "meta": {"level": 2}})
    store.put(ns, "ten", {"n": 10, "s": "10", "tag": "b", "meta": {"level": 5}})
    store.put(ns, "half", {"n": 2.5, "s": "b", "tag": "a", "meta": {"level": 1}})
    store.put(ns, "none", {"tag": "c"})
    return ns


def _keys(store: DurableStore, ns: tuple[str], where: dict[str, object]) -> list[str]:
    return sorted(i.key for i in store.search(ns, filter=where, limit=50))


def test_numbers_compare_as_numbers(store: DurableStore, items: tuple[str]) -> None:
    """9 >= 10 is false (the official PostgresStore compares the text '9' >= '10': true)."""
    assert _keys(store, items, {"n": {"$gte": 10}}) == ["ten"]
    assert _keys(store, items, {"n": {"$lt": 10}}) == ["half", "nine"]
    assert _keys(store, items, {"n": {"$gt": 2.5, "$lte": 9}}) == ["nine"]


def test_strings_compare_as_strings(store: DurableStore, items: tuple[str]) -> None:
    """A string operand compares strings by code point and never matches a number."""
    assert _keys(store, items, {"s": {"$gte": "9"}}) == ["half", "nine"]
    assert _keys(store, items, {"n": {"$gte": "1"}}) == []


def test_equality_ne_and_nested_paths(store: DurableStore, items: tuple[str]) -> None:
    """Plain values and $eq match by JSON equality, $ne also matches a missing field, and
    a dotted key reaches into nested objects."""
    assert _keys(store, items, {"tag": "a"}) == ["half", "nine"]
    assert _keys(store, items, {"n": {"$eq": 10}}) == ["ten"]
    assert _keys(store, items, {"tag": {"$ne": "a"}}) == ["none", "ten"]
    assert _keys(store, items, {"meta.level": {"$gt": 1}}) == ["nine", "ten"]
    assert _keys(store, items, {"meta": {"level": 5}}) == ["ten"]


def test_and_or_forms(store: DurableStore, items: tuple[str]) -> None:
    """The {"$and": [...]} and {"$or": [...]} forms the server's auth handlers pass."""
    assert _keys(store, items, {"$or": [{"tag": "c"}, {"n": {"$gte": 10}}]}) == ["none", "ten"]
    assert _keys(store, items, {"$and": [{"tag": "a"}, {"n": {"$gt": 3}}]}) == ["nine"]
    assert _keys(store, items, {"$and": [{"$or": [{"tag": "a"}, {"tag": "b"}]},
                                         {"meta.level": {"$lte": 2}}]}) == ["half", "nine"]


def test_unknown_operator_is_a_clear_error(store: DurableStore, items: tuple[str]) -> None:
    """A misspelled operator raises ConfigurationError naming it, instead of matching
    nothing silently."""
    with pytest.raises(ConfigurationError, match=r"\$gtx"):
        store.search(items, filter={"n": {"$gtx": 1}})
