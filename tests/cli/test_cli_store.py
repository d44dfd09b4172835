"""``langgraph-durable store``: namespaces, items and one item of a `DurableStore`, against
the real servers.

A store on this module's schema and prefix holds a few users' memories; the commands run
in-process (80 columns, or wide) and their output is asserted as a user reads it: the
namespaces in order, the items newest first, values shown whole or cut with a note, the
documented JSON fields, one-line errors with their exit codes, and no password.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from typer.testing import Result

from langgraph_durable import DurableSaver, DurableStore
from tests.cli.test_cli import one_line_error
from tests.support.cli_runner import cli_for
from tests.support.servers import POSTGRES_URL, REDIS_URL, drop_schema, postgres_url

SECRET = "S3cret-Zq9"
ITEM_FIELDS = {"namespace", "key", "value", "created_at", "updated_at"}
CARD = {"name": "Ada", "numbers": list(range(100)), "note": "x" * 300}


@pytest.fixture(scope="module")
def store(namespace: tuple[str, str]) -> Iterator[DurableStore]:
    """A set-up store on this module's schema and prefix, with (oldest first) two memories
    of Ada, one of Adam, Ada's profile card (a value of about a hundred lines), and a
    document whose key reads like markup."""
    schema, prefix = namespace
    with DurableStore.from_conn_string(REDIS_URL, POSTGRES_URL, schema=schema,
                                       key_prefix=prefix) as made:
        made.put(("users", "ada", "memories"), "m1", {"text": "likes tea", "weight": 9})
        made.put(("users", "ada", "memories"), "m2", {"text": "lives in Lyon", "weight": 10})
        made.put(("users", "adam", "memories"), "m1", {"text": "not Ada"})
        made.put(("users", "ada", "profile"), "card", CARD)
        made.put(("docs",), "[bold]readme[/]", {"text": "café ☕"})
        yield made


@pytest.fixture
def cli(namespace: tuple[str, str], store: DurableStore) -> Callable[..., Result]:
    """``langgraph-durable`` on the filled store, in a terminal 80 columns wide."""
    return cli_for(namespace, columns=80)


@pytest.fixture
def wide(namespace: tuple[str, str], store: DurableStore) -> Callable[..., Result]:
    """The same, 250 columns wide (nothing folds)."""
    return cli_for(namespace)


def document(result: Result) -> Any:
    """The one JSON document a command printed on one line."""
    assert result.exit_code == 0, result.output
    assert result.stdout.count("\n") == 1, result.stdout
    return json.loads(result.stdout)


def rows(result: Result) -> list[str]:
    """The first cell of each row of the table a command printed."""
    assert result.exit_code == 0, result.output
    return [line.split("│")[1].strip() for line in result.stdout.splitlines()
            if line.startswith("│")]


# -------------------------------------------------------------------------- namespaces


def test_namespaces_lists_every_namespace_in_order(cli: Callable[..., Result],
                                                   namespace: tuple[str, str]) -> None:
    """Every namespace, sorted, in the dotted form the other commands take, with how many
    and where."""
    result = cli("store", "namespaces")
    assert rows(result) == ["docs", "users.ada.memories", "users.ada.profile",
                            "users.adam.memories"]
    assert f"4 namespaces · schema {namespace[0]}" in result.stdout


def test_namespaces_under_a_namespace_cut_to_a_depth_and_limited(
        cli: Callable[..., Result]) -> None:
    """A namespace argument keeps those under it (whole labels: ``users.ada`` is not a
    prefix of ``users.adam``), ``*`` matches one label, ``--max-depth`` cuts each to its
    first labels, and ``--limit`` stops the list and says more are left."""
    assert rows(cli("store", "namespaces", "users.ada")) == [
        "users.ada.memories", "users.ada.profile"]
    assert rows(cli("store", "namespaces", "users.*.memories")) == [
        "users.ada.memories", "users.adam.memories"]
    assert rows(cli("store", "namespaces", "--max-depth", "2")) == [
        "docs", "users.ada", "users.adam"]
    limited = cli("store", "namespaces", "--limit", "1")
    assert rows(limited) == ["docs"]
    assert "more not shown: raise --limit" in " ".join(limited.stdout.split())
    assert "more not shown" not in cli("store", "namespaces", "--limit", "4").stdout


def test_namespaces_json(cli: Callable[..., Result], namespace: tuple[str, str]) -> None:
    """``--json``: the namespaces as lists of labels, whether the limit left some out, and
    what was asked."""
    assert document(cli("store", "namespaces", "users", "--max-depth", "2", "--json")) == {
        "namespaces": [["users", "ada"], ["users", "adam"]], "more": False,
        "schema": namespace[0], "namespace_prefix": ["users"], "max_depth": 2}
    assert document(cli("store", "namespaces", "--limit", "1", "--json"))["more"] is True


# ------------------------------------------------------------------------------- items


def test_items_lists_the_items_under_a_namespace_newest_first(
        wide: Callable[..., Result]) -> None:
    """The items of the namespace and of those under it, newest first: namespace, key and
    the value; Adam's are not under ``users.ada``."""
    result = wide("store", "items", "users.ada")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    keys = [line.split("│")[2].strip() for line in lines
            if line.startswith("│") and line.split("│")[2].strip()]
    assert keys == ["card", "m2", "m1"]
    assert '"text": "likes tea",' in result.stdout and '"weight": 9' in result.stdout
    assert "not Ada" not in result.stdout
    assert "3 items, newest first" in result.stdout


def test_a_long_value_is_cut_with_a_note_unless_full(cli: Callable[..., Result]) -> None:
    """A value of a hundred lines shows its first lines and how many more there are, its
    long string ends in ``…`` within 80 columns; ``--full`` shows all of it."""
    for command in (("items", "users.ada.profile"), ("get", "users.ada.profile", "card")):
        cut = cli("store", *command)
        assert cut.exit_code == 0, cut.output
        assert "more lines (--full shows them)" in cut.stdout
        assert '"x' in cut.stdout and "x" * 300 not in cut.stdout and "…" in cut.stdout
        assert all(len(line) <= 80 for line in cut.stdout.splitlines())
        whole = cli("store", *command, "--full")
        assert "more lines" not in whole.stdout
        folded = re.sub(r"[│\s]", "", whole.stdout)  # the cells' lines joined
        assert '"note":"' + "x" * 300 + '"' in folded
        assert ",98,99]" in folded


def test_piped_a_long_line_stays_whole(namespace: tuple[str, str],
                                       store: DurableStore) -> None:
    """Piped (no COLUMNS), a value's long line is not cut nor folded, so ``grep`` finds
    it; its lines are still bounded, with the note."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env.update(LGD_REDIS_URL=REDIS_URL, LGD_POSTGRES_URL=POSTGRES_URL,
               LGD_SCHEMA=namespace[0], LGD_KEY_PREFIX=namespace[1])
    piped = subprocess.run([sys.executable, "-m", "langgraph_durable", "store", "items",
                            "users.ada.profile"], env=env, capture_output=True, text=True,
                           timeout=120, check=False)
    assert piped.returncode == 0, piped.stderr
    assert any('"note": "' + "x" * 300 + '"' in line for line in piped.stdout.splitlines())
    assert "more lines (--full shows them)" in piped.stdout


def test_items_limit_and_json(cli: Callable[..., Result], namespace: tuple[str, str]) -> None:
    """``--limit`` keeps the newest; ``--json`` gives each item whole with the documented
    fields, times in UTC."""
    found = document(cli("store", "items", "users", "--limit", "2", "--json"))
    assert (found["more"], found["schema"], found["namespace"]) == (True, namespace[0],
                                                                    ["users"])
    assert [(i["namespace"], i["key"]) for i in found["items"]] == [
        (["users", "ada", "profile"], "card"), (["users", "adam", "memories"], "m1")]
    assert all(set(i) == ITEM_FIELDS for i in found["items"])
    assert found["items"][0]["value"] == CARD
    assert found["items"][0]["updated_at"].endswith("+00:00")


# --------------------------------------------------------------------------------- get


def test_get_shows_one_item_as_stored(cli: Callable[..., Result]) -> None:
    """One item: namespace, key, times and the value; a key that reads like markup is
    shown as text."""
    result = cli("store", "get", "users.ada.memories", "m2")
    assert result.exit_code == 0, result.output
    assert "users.ada.memories" in result.stdout and '"text": "lives in Lyon"' in result.stdout
    assert "created" in result.stdout and "updated" in result.stdout
    markup = cli("store", "get", "docs", "[bold]readme[/]")
    assert markup.exit_code == 0, markup.output
    assert "[bold]readme[/]" in markup.stdout and "café ☕" in markup.stdout


def test_get_json_is_the_item_whole(cli: Callable[..., Result]) -> None:
    item = document(cli("store", "get", "docs", "[bold]readme[/]", "--json"))
    assert set(item) == ITEM_FIELDS
    assert (item["namespace"], item["key"], item["value"]) == (
        ["docs"], "[bold]readme[/]", {"text": "café ☕"})


def test_get_sees_the_latest_put(cli: Callable[..., Result], store: DurableStore) -> None:
    """A get after the application replaced an item shows the new value (the store's
    Redis entry is coherent), and after it deleted the item says it is gone."""
    key = f"k-{uuid.uuid4().hex[:6]}"
    store.put(("users", "ada", "scratch"), key, {"v": 1})
    assert document(cli("store", "get", "users.ada.scratch", key, "--json"))["value"] == {"v": 1}
    store.put(("users", "ada", "scratch"), key, {"v": 2})
    assert document(cli("store", "get", "users.ada.scratch", key, "--json"))["value"] == {"v": 2}
    store.delete(("users", "ada", "scratch"), key)
    assert cli("store", "get", "users.ada.scratch", key).exit_code == 1


def test_reading_never_extends_an_items_ttl(cli: Callable[..., Result], store: DurableStore,
                                            namespace: tuple[str, str]) -> None:
    """``get`` and ``items`` leave an item's expiry where the application set it, even
    where the application's own reads refresh it."""
    key = f"ttl-{uuid.uuid4().hex[:6]}"
    store.put(("ttl",), key, {"v": 1}, ttl=60)

    def expiry() -> Any:
        with psycopg.connect(POSTGRES_URL) as conn:
            row = conn.execute(f'SELECT expires_at FROM "{namespace[0]}".lgd_store_items '
                               "WHERE namespace = %s AND key = %s", (["ttl"], key)).fetchone()
        assert row is not None
        return row[0]

    before = expiry()
    assert cli("store", "get", "ttl", key).exit_code == 0
    assert cli("store", "items", "ttl").exit_code == 0
    assert expiry() == before


# ---------------------------------------------------------------------- errors, secrets


def test_what_is_not_there_is_one_error_line_and_exit_1(cli: Callable[..., Result]) -> None:
    for command in (("get", "users.ada.memories", "nope"), ("items", "users.nobody")):
        result = cli("store", *command)
        assert result.exit_code == 1, result.output
        assert "the store has no item" in one_line_error(result)
        assert result.stdout == ""


def test_a_malformed_namespace_is_a_usage_error(cli: Callable[..., Result]) -> None:
    """An empty label, or ``*`` outside ``namespaces``, exits 2 with one line; so does a
    limit below one."""
    for command in (("items", "users..ada"), ("get", ".users", "m1"), ("items", "users.*")):
        result = cli("store", *command)
        assert result.exit_code == 2, (command, result.output)
        assert "users" in one_line_error(result)
    assert cli("store", "namespaces", "--limit", "0").exit_code == 2
    assert cli("store", "namespaces", "--max-depth", "0").exit_code == 2


def test_a_schema_without_the_store_table_is_a_misconfiguration(
        namespace: tuple[str, str]) -> None:
    """A schema never set up, or set up before the store's migration, exits 2 naming
    `migrate`; an unreachable Postgres exits 3."""
    schema = f"{namespace[0]}_old"
    saver = DurableSaver(REDIS_URL, POSTGRES_URL, schema=schema, key_prefix=namespace[1])
    try:
        saver.engine.migrate([m for m in saver.migrations
                              if m.version < DurableStore.table_version])
        for name in (f"{namespace[0]}_never", schema):
            result = cli_for((name, namespace[1]))("store", "namespaces")
            assert result.exit_code == 2, result.output
            assert "langgraph-durable migrate" in one_line_error(result)
    finally:
        saver.close()
        drop_schema(schema)
    down = cli_for(namespace)("store", "items", "users",
                              "--postgres-url", "postgresql://postgres@127.0.0.1:1/test")
    assert down.exit_code == 3
    assert "cannot connect to Postgres" in one_line_error(down)


def test_passwords_are_shown_as_stars(cli: Callable[..., Result], store: DurableStore) -> None:
    """The Postgres URL each command names shows its password as ``***``; a Redis that
    does not answer is a warning with its password masked, and the item is read from
    Postgres."""
    with_password = postgres_url(password=SECRET)  # the test server trusts local clients
    for command in (("namespaces",), ("items", "users.ada")):
        result = cli("store", *command, "--postgres-url", with_password)
        assert result.exit_code == 0, result.output
        assert SECRET not in result.output
        assert "postgres:***@" in result.stdout
    fallback = cli("store", "get", "users.ada.memories", "m1",
                   "--redis-url", f"redis://:{SECRET}@127.0.0.1:1/0")
    assert fallback.exit_code == 0, fallback.output
    assert SECRET not in fallback.output
    assert "redis://:***@127.0.0.1:1/0" in fallback.stderr
    assert "reading Postgres only" in fallback.stderr
    assert '"text": "likes tea"' in fallback.stdout
