"""The long-term memory store's table, its migration, and the statements of each op.

A namespace is stored as ``text[]``, so a prefix matches whole segments: ``("a", "b")``
is a prefix of ``("a", "b", "c")`` and never of ``("a", "bc")``. Every read keeps only
live rows (``expires_at`` unset or after the database's ``now()``). Each row carries a
version from a sequence, taken at every write, that orders the Redis read tier's fills.
A write that replaces or deletes a row draws its version once it holds the row's lock,
so versions order such writes as Postgres commits them; an insert draws its version
before it knows whether the item is there (see `_core.store` for why that is safe).

Filters compare by type: a number with numbers (as ``numeric``), a string with strings
(by code point, like Python), never a number as text. Values are passed as parameters;
only the schema and fixed SQL are composed into statements.

A read's TTL refresh skips rows another transaction holds (``SKIP LOCKED``): it never
waits, so concurrent reads and writes cannot deadlock on it. The holder is refreshing
the row too, writing it (a put sets a new expiry), or removing it (a delete, or the
sweeper once the row expired by the sweeper's clock, which may be past the read's); a
read that skipped a row returns it as its snapshot holds it, live at the read's time.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from psycopg import sql
from psycopg.types.json import Jsonb

from langgraph_durable._core.sql.render import Rendered
from langgraph_durable._core.sql.schema import Migration
from langgraph_durable.errors import ConfigurationError

# Versions 20 and up are the store's; the saver's are below (`_core/sql/schema.py`).
STORE_MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        20,
        "long-term memory store items",
        """
CREATE SEQUENCE {schema}.lgd_store_version_seq;
CREATE TABLE {schema}.lgd_store_items (
    namespace   text[] NOT NULL,
    key         text NOT NULL,
    value       jsonb NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz,
    ttl_minutes double precision,
    version     bigint NOT NULL,
    PRIMARY KEY (namespace, key)
);
CREATE INDEX lgd_store_items_expires_idx ON {schema}.lgd_store_items (expires_at)
    WHERE expires_at IS NOT NULL;
""",
    ),
    Migration(
        21,
        "when the store's TTL sweep last ran, across replicas",
        """
CREATE TABLE {schema}.lgd_store_sweeps (
    name      text PRIMARY KEY,
    swept_at  timestamptz NOT NULL
);
""",
    ),
    Migration(
        22,
        "namespace prefixes found through an index",
        """
CREATE INDEX lgd_store_items_namespace_c_idx
    ON {schema}.lgd_store_items ((namespace COLLATE "C"));
""",
    ),
)

_COLUMNS = "namespace, key, value, created_at, updated_at, expires_at, version"
_LIVE = "(expires_at IS NULL OR expires_at > now())"
_REFRESH = ("expires_at = now() + make_interval(secs => ttl_minutes * 60)")

GET_SQL = f"""
WITH refreshed AS (
    UPDATE {{schema}}.lgd_store_items SET {_REFRESH}
    WHERE (namespace, key) IN (
        SELECT namespace, key FROM {{schema}}.lgd_store_items
        WHERE %(refresh)s AND namespace = %(namespace)s AND key = %(key)s
          AND ttl_minutes IS NOT NULL AND expires_at > now()
        FOR UPDATE SKIP LOCKED)
)
SELECT {_COLUMNS} FROM {{schema}}.lgd_store_items
WHERE namespace = %(namespace)s AND key = %(key)s AND {_LIVE}"""

# An update draws a new version under the row's lock (not the one ``VALUES`` drew before
# the statement waited for that lock): a put that drew first but commits last must carry
# the larger version, or the read tier would keep the earlier put's row.
PUT_SQL = """
INSERT INTO {schema}.lgd_store_items AS t
    (namespace, key, value, expires_at, ttl_minutes, version)
VALUES (%(namespace)s, %(key)s, %(value)s,
        now() + make_interval(secs => %(ttl)s::double precision * 60),
        %(ttl)s::double precision, nextval('{schema}.lgd_store_version_seq'))
ON CONFLICT (namespace, key) DO UPDATE SET
    value = excluded.value,
    created_at = CASE WHEN t.expires_at <= now() THEN now() ELSE t.created_at END,
    updated_at = now(),
    expires_at = excluded.expires_at,
    ttl_minutes = excluded.ttl_minutes,
    version = nextval('{schema}.lgd_store_version_seq')
RETURNING namespace, key, value, created_at, updated_at, expires_at, version"""

# The version is drawn after the delete took (or found no) row: the main query reads
# ``gone``, which Postgres would otherwise run after it.
DELETE_SQL = """
WITH gone AS (
    DELETE FROM {schema}.lgd_store_items WHERE namespace = %(namespace)s AND key = %(key)s
    RETURNING 1
)
SELECT nextval('{schema}.lgd_store_version_seq') AS version
FROM (SELECT count(*) FROM gone) AS deleted"""

# At most %(batch)s expired rows per statement, skipping rows a writer holds.
SWEEP_SQL = """
WITH expired AS (
    SELECT namespace, key FROM {schema}.lgd_store_items
    WHERE expires_at <= now() LIMIT %(batch)s FOR UPDATE SKIP LOCKED
)
DELETE FROM {schema}.lgd_store_items t USING expired e
WHERE t.namespace = e.namespace AND t.key = e.key AND t.expires_at <= now()
RETURNING 1 AS gone"""


# Claim this interval's TTL sweep: one row, moved to now() only when the last sweep of any
# replica began at least %(every)s seconds ago; a row back means this caller sweeps.
SWEEP_CLAIM_SQL = """
INSERT INTO {schema}.lgd_store_sweeps AS s (name, swept_at) VALUES ('ttl', now())
ON CONFLICT (name) DO UPDATE SET swept_at = now()
    WHERE s.swept_at <= now() - make_interval(secs => %(every)s::double precision)
RETURNING swept_at"""


@dataclass(frozen=True, slots=True, init=False, eq=False)
class StoreStatements(Rendered):
    """The store's fixed statements rendered for one schema."""

    TEMPLATES: ClassVar[Mapping[str, str]] = {
        "get": GET_SQL, "put": PUT_SQL, "delete": DELETE_SQL, "sweep": SWEEP_SQL,
        "sweep_claim": SWEEP_CLAIM_SQL}

    get: sql.SQL
    put: sql.SQL
    delete: sql.SQL
    sweep: sql.SQL
    sweep_claim: sql.SQL


statements = functools.cache(StoreStatements)

_OPERATORS = {"$eq": "=", "$ne": "<>", "$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}


def get_params(namespace: Sequence[str], key: str, refresh: bool) -> dict[str, Any]:
    """``statements(schema).get``'s: the live row of one item, refreshing its TTL first
    when ``refresh``."""
    return {"namespace": list(namespace), "key": key, "refresh": refresh}


def put_params(namespace: Sequence[str], key: str, value: Mapping[str, Any],
               ttl: float | None) -> dict[str, Any]:
    """``statements(schema).put``'s: insert or replace one item; returns its row with its
    new version."""
    return {"namespace": list(namespace), "key": key, "value": Jsonb(dict(value)), "ttl": ttl}


def delete_params(namespace: Sequence[str], key: str) -> dict[str, Any]:
    """``statements(schema).delete``'s: delete one item; returns the version its deletion
    takes."""
    return {"namespace": list(namespace), "key": key}


@dataclass(frozen=True, slots=True)
class Ranking:
    """A search's query, embedded (pgvector's text form), the statement that parses it
    (`semantic.QUERY_VECTOR_SQL`) and what its candidates are read from to rank them
    against it (`semantic.RANKED_FROM_SQL`), for the store's index."""

    vector: str
    parse: sql.SQL
    source: sql.SQL


def search_statement(schema: str, prefix: Sequence[str], where: Mapping[str, Any] | None,
                     limit: int, offset: int, refresh: bool,
                     ranking: Ranking | None = None) -> tuple[sql.SQL, dict[str, Any]]:
    """The live items under ``prefix`` (whole segments) matching ``where``, newest first,
    refreshing the TTL of those returned when ``refresh``. With a ``ranking``, the items
    whose fields score best against the query come first (each its best field's score),
    then those with no embedding (score ``NULL``), newest first."""
    params: dict[str, Any] = {"limit": limit, "offset": offset}
    condition = compile_filter(where or {}, params)
    table = _table(schema)
    ctes, source, score, order = [], table, "NULL::double precision AS score", ""
    if ranking is not None:
        ctes.append(f"q AS MATERIALIZED ({ranking.parse.as_string(None)})")
        source, score = ranking.source.as_string(None), "s.score"
        order = "score DESC NULLS LAST, "
        params["query_vector"] = ranking.vector
    found = f"""
    SELECT {_COLUMNS}, {score} FROM {source}
    WHERE {_under(prefix, params)} AND {_LIVE} AND {condition}
    ORDER BY {order}updated_at DESC, namespace, key LIMIT %(limit)s OFFSET %(offset)s"""
    if refresh:
        ctes += [f"found AS ({found}\n)", f"""refreshed AS (
    UPDATE {table} SET {_REFRESH}
    WHERE (namespace, key) IN (
        SELECT l.namespace, l.key FROM {table} l JOIN found f USING (namespace, key)
        WHERE f.expires_at IS NOT NULL AND l.ttl_minutes IS NOT NULL
        FOR UPDATE OF l SKIP LOCKED)
)"""]
        found = f"SELECT * FROM found ORDER BY {order}updated_at DESC, namespace, key"
    return sql.SQL(f"WITH {', '.join(ctes)} {found}" if ctes else found), params


def _under(prefix: Sequence[str], params: dict[str, Any]) -> str:
    """The namespaces that start with the whole segments ``prefix``, as an index range
    (`lgd_store_items_namespace_c_idx`): under byte order ("C"), every array starting with
    ``[..., last]`` lies between it and ``[..., last || chr(1)]``, and no other: an array
    in between has the same first segments and a segment at ``last``'s place that starts
    with ``last`` and goes on with a character below chr(1), which text cannot hold
    (chr(0)). So the range is the whole test, with no per-row check beside it."""
    if not prefix:
        return "true"
    params["under"] = list(prefix)
    params["under_end"] = [*prefix[:-1], prefix[-1] + "\x01"]
    return ('(namespace COLLATE "C") >= %(under)s::text[] '
            'AND (namespace COLLATE "C") < %(under_end)s::text[]')


def list_namespaces_statement(
    schema: str, conditions: Sequence[tuple[str, Sequence[str]]], max_depth: int | None,
    limit: int, offset: int,
) -> tuple[sql.SQL, dict[str, Any]]:
    """The distinct namespaces of live items matching every (``"prefix"``/``"suffix"``,
    path) condition, ``"*"`` matching any one segment, cut to ``max_depth``, sorted."""
    params: dict[str, Any] = {"limit": limit, "offset": offset, "depth": max_depth}
    parts = [_LIVE]
    for kind, path in conditions[:1]:  # the leading labels of a prefix: an index range
        if kind == "prefix":
            fixed = list(itertools.takewhile(lambda label: label != "*", path))
            parts.append(_under(fixed, params))
    for number, (kind, path) in enumerate(conditions):
        if kind not in ("prefix", "suffix"):
            raise ConfigurationError(f"a namespace match is 'prefix' or 'suffix', got {kind!r}")
        parts.append(f"cardinality(namespace) >= {len(path):d}")
        for index, label in enumerate(path):
            if label == "*":
                continue
            name = f"m{number}_{index}"
            params[name] = label
            position = (f"{index + 1:d}" if kind == "prefix"
                        else f"cardinality(namespace) - {len(path) - index - 1:d}")
            parts.append(f"namespace[{position}] = %({name})s")
    truncated = "namespace" if max_depth is None else "namespace[1:%(depth)s]"
    where = " AND ".join(parts)
    return sql.SQL(f"""
SELECT ns FROM (SELECT DISTINCT {truncated} AS ns FROM {_table(schema)} WHERE {where}) s
ORDER BY ns COLLATE "C" LIMIT %(limit)s OFFSET %(offset)s"""), params


@functools.cache
def _table(schema: str) -> str:
    return f"{sql.Identifier(schema).as_string(None)}.lgd_store_items"


def compile_filter(where: Mapping[str, Any], params: dict[str, Any]) -> str:
    """``where`` as a SQL condition on ``value``; its values go into ``params`` (the text
    holds only fixed SQL and their placeholders).

    ``{"k": v}`` is equality (``k`` may be a dotted path into nested objects);
    ``{"k": {"$gt": 1}}`` compares by the operand's type; ``{"$and": [...]}`` and
    ``{"$or": [...]}`` combine filters.

    Raises:
        ConfigurationError: an unknown operator, or a combinator without a list of filters.
    """
    if not isinstance(where, Mapping):
        raise ConfigurationError(f"a store filter is a mapping, got {type(where).__name__}")
    parts: list[str] = []
    for field, wanted in where.items():
        if field in ("$and", "$or"):
            if not isinstance(wanted, (list, tuple)):
                raise ConfigurationError(f"{field} takes a list of filters, got {wanted!r}")
            joined = (" AND " if field == "$and" else " OR ").join(
                compile_filter(sub, params) for sub in wanted)
            parts.append(f"({joined})" if wanted else "true" if field == "$and" else "false")
        elif field.startswith("$"):
            raise ConfigurationError(f"unknown store filter operator {field!r}")
        elif isinstance(wanted, Mapping) and wanted and all(str(k).startswith("$")
                                                             for k in wanted):
            for operator, operand in wanted.items():
                parts.append(_compare(field, operator, operand, params))
        else:
            parts.append(_compare(field, "$eq", wanted, params))
    return " AND ".join(parts) if parts else "true"


def _compare(field: str, operator: str, operand: Any, params: dict[str, Any]) -> str:
    """One comparison of the value at ``field`` with ``operand``, by the operand's type."""
    if operator not in _OPERATORS:
        raise ConfigurationError(
            f"unknown store filter operator {operator!r} (known: {', '.join(_OPERATORS)})")
    number = len(params)
    path, value = f"p{number}", f"v{number}"
    keys = field.split(".")
    params[path] = keys[0] if len(keys) == 1 else keys
    at = f"(value {'->' if len(keys) == 1 else '#>'} %({path})s)"
    symbol = _OPERATORS[operator]
    if operator in ("$eq", "$ne"):
        params[value] = json.dumps(operand)
        test = f"{at} {symbol} %({value})s::jsonb"
        if operator == "$ne":  # a missing field differs from every value
            return f"({at} IS NULL OR {test})"
        return test
    if isinstance(operand, bool) or not isinstance(operand, (int, float, str)):
        raise ConfigurationError(
            f"{operator} compares numbers or strings, got {type(operand).__name__}")
    if isinstance(operand, str):  # by code point, as Python does (jsonb would collate)
        params[value] = operand
        return (f"(jsonb_typeof({at}) = 'string' AND ({at} #>> '{{}}') COLLATE \"C\" "
                f"{symbol} %({value})s)")
    if not math.isfinite(operand):
        raise ConfigurationError(f"{operator} compares with a finite number, got {operand!r}")
    params[value] = json.dumps(operand)  # jsonb compares two numbers as numeric
    return f"(jsonb_typeof({at}) = 'number' AND {at} {symbol} %({value})s::jsonb)"
