"""``langgraph-durable store``: what a `DurableStore` holds (namespaces, items, one item).

A namespace is written as its labels joined by dots (``users.ada.memories``), as
LangGraph's server API writes it: LangGraph forbids a dot in a label, so the form is
unambiguous. Reads go through the store's own API, as an application's would (a get is
served from the Redis entry when one is cached), and never refresh an item's TTL.
"""

from __future__ import annotations

from typing import Annotated

import typer

from langgraph_durable._cli import documents, views
from langgraph_durable._cli.queries import NotFound
from langgraph_durable._cli.shell import (
    UNWRAPPED,
    JsonOutput,
    PostgresUrl,
    Prefix,
    RedisUrl,
    Schema,
    failures,
    make_target,
    open_store,
    out,
    print_json,
)
from langgraph_durable.config import mask_url
from langgraph_durable.errors import ConfigurationError

ITEM_LINES = 10
"""Lines of a value ``store items`` shows (``--full``: all)."""
GET_LINES = 60
"""Lines of a value ``store get`` shows (``--full``: all)."""

Limit = Annotated[int, typer.Option(min=1, metavar="N", help="Show at most this many.")]
Full = Annotated[bool, typer.Option(
    "--full", help="Show values whole instead of cut to a few lines and the terminal's "
                   "width.")]


def parse_namespace(text: str, *, wildcards: bool = False) -> tuple[str, ...]:
    """``users.ada`` as ``("users", "ada")``; ``""`` as ``()``.

    Raises:
        ConfigurationError: a label is empty (``users..ada``), or is ``*`` where
            ``wildcards`` is false.
    """
    if not text:
        return ()
    labels = tuple(text.split("."))
    if "" in labels:
        raise ConfigurationError(
            f"a namespace is its labels joined by dots, such as users.ada.memories; got "
            f"{text!r}, which has an empty label")
    if not wildcards and "*" in labels:
        raise ConfigurationError(f"'*' matches any label only in `store namespaces`; got "
                                 f"{text!r}")
    return labels


def _width(full: bool) -> int | None:
    """How wide values may be shown: the terminal's width; none with ``--full`` or when
    the output is not a terminal."""
    return None if full or out.console.width >= UNWRAPPED else out.console.width


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def namespaces(
    namespace: Annotated[str, typer.Argument(
        help="Only namespaces under this one (labels joined by dots; * matches any one "
             "label). Default: all.", show_default=False)] = "",
    max_depth: Annotated[int | None, typer.Option(
        "--max-depth", min=1, metavar="N",
        help="Cut namespaces to their first N labels (each cut one listed once).")] = None,
    limit: Limit = 100,
    as_json: JsonOutput = False,
    redis_url: RedisUrl = None, postgres_url: PostgresUrl = None,
    schema: Schema = "public", prefix: Prefix = "lgd",
) -> None:
    """List the store's namespaces, in order.

    Those of its live items (expired ones are left out).
    """
    with failures():
        path = parse_namespace(namespace, wildcards=True)
        with open_store(make_target(redis_url, postgres_url, schema, prefix)) as store:
            found = store.list_namespaces(prefix=path or None, max_depth=max_depth,
                                          limit=limit + 1)
        more, found = len(found) > limit, found[:limit]
        if as_json:
            print_json(documents.namespaces_document(found, schema=schema, under=path,
                                                     max_depth=max_depth, more=more))
            return
        scope = f" under {views.dotted(path)}" if path else ""
        depth = f" cut to {max_depth} labels" if max_depth else ""
        rest = " · more not shown: raise --limit" if more else ""
        caption = f"{_count(len(found), 'namespace')}{scope}{depth} · schema {schema}{rest}"
        out.console.print(views.namespaces_table(
            f"store namespaces in {mask_url(store.config.postgres_url)}", found, caption))


def items(
    namespace: Annotated[str, typer.Argument(
        help="Namespace (labels joined by dots): its items and those of the namespaces "
             "under it.")],
    limit: Limit = 50,
    full: Full = False,
    as_json: JsonOutput = False,
    redis_url: RedisUrl = None, postgres_url: PostgresUrl = None,
    schema: Schema = "public", prefix: Prefix = "lgd",
) -> None:
    """List the items under a namespace, newest first.

    Each with its key, last update and value (cut to a few lines unless --full).
    """
    with failures():
        path = parse_namespace(namespace)
        with open_store(make_target(redis_url, postgres_url, schema, prefix)) as store:
            found = store.search(path, limit=limit + 1, refresh_ttl=False)
        more, found = len(found) > limit, found[:limit]
        if not found:
            raise NotFound(f"the store has no items under namespace {namespace!r} in schema "
                           f"{schema!r}")
        if as_json:
            print_json(documents.items_document(found, schema=schema, namespace=path,
                                                more=more))
            return
        rest = " · more not shown: raise --limit" if more else ""
        caption = f"{_count(len(found), 'item')}, newest first · schema {schema}{rest}"
        out.console.print(views.items_table(
            f"store items under {namespace} in {mask_url(store.config.postgres_url)}",
            found, caption, max_lines=None if full else ITEM_LINES,
            width=_width(full)))


def get(
    namespace: Annotated[str, typer.Argument(help="Namespace (labels joined by dots).")],
    key: Annotated[str, typer.Argument(help="The item's key.")],
    full: Full = False,
    as_json: JsonOutput = False,
    redis_url: RedisUrl = None, postgres_url: PostgresUrl = None,
    schema: Schema = "public", prefix: Prefix = "lgd",
) -> None:
    """Show one item's value and times.

    Read as store.get reads it: from its Redis entry when cached, else from Postgres. The
    value is cut to a few dozen lines and the terminal's width unless --full.
    """
    with failures():
        path = parse_namespace(namespace)
        with open_store(make_target(redis_url, postgres_url, schema, prefix),
                        hot=True) as store:
            item = store.get(path, key, refresh_ttl=False)
        if item is None:
            raise NotFound(f"the store has no item {key!r} in namespace {namespace!r} in "
                           f"schema {schema!r}")
        if as_json:
            print_json(documents.item_document(item))
            return
        out.console.print(views.item_view(item, max_lines=None if full else GET_LINES,
                                          width=_width(full)))
