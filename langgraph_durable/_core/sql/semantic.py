"""The store's embeddings table (pgvector) and the statements that write and rank by it.

One row per item and embedded field, ``lgd_store_vectors``, made by `setup` only when the
store has an index (its column's type names the dimensions, so it cannot be a fixed
migration). Its rows belong to their item's row (a foreign key that cascades): a delete
or a TTL sweep of the item takes its embeddings with it, and a put replaces them all.

Search is exact: each candidate item under the namespace prefix that passes the filter
scores the best of its fields against the query, so a filter never starves the results
(an approximate index would rank first and filter after).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from psycopg import sql

from langgraph_durable._core.sql.render import Rendered
from langgraph_durable._core.sql.schema import SETUP_LOCK_KEY, statements

VECTOR_TYPES = ("vector", "halfvec")
# distance -> the score of one field, from its embedding ``v.embedding`` and the query
# ``q.v``: higher is closer (cosine similarity, negated L2 distance, inner product)
SCORES = {
    "cosine": "1 - (v.embedding <=> q.v)",
    "l2": "0 - (v.embedding <-> q.v)",
    "inner_product": "0 - (v.embedding <#> q.v)",
}

# Whether pgvector can be installed here, and the type of the embeddings column if the
# table exists (``vector(1536)``), both before setup takes its lock.
PROBE_SQL = """
SELECT EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'vector') AS available,
       (SELECT format_type(atttypid, atttypmod) FROM pg_attribute
        WHERE attrelid = to_regclass(%(table)s) AND attname = 'embedding') AS column_type"""

EXTENSION_SQL = "CREATE EXTENSION IF NOT EXISTS vector"

CREATE_SQL = """
CREATE TABLE IF NOT EXISTS {schema}.lgd_store_vectors (
    namespace  text[] NOT NULL,
    key        text NOT NULL,
    field      text NOT NULL,
    embedding  {column} NOT NULL,
    PRIMARY KEY (namespace, key, field),
    FOREIGN KEY (namespace, key) REFERENCES {schema}.lgd_store_items (namespace, key)
        ON DELETE CASCADE
)"""

# A value that changes takes the item's embeddings away, whichever store wrote it: one
# without an index (sharing the schema) writes none, and its item must not keep ranking
# by what it used to say. A store with one writes the new embeddings after (REPLACE_SQL).
STALE_FUNCTION_SQL = """
CREATE OR REPLACE FUNCTION {schema}.lgd_store_vectors_stale() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM {schema}.lgd_store_vectors WHERE namespace = OLD.namespace AND key = OLD.key;
    RETURN NULL;
END
$$"""
# (once: a setup that waited for another's lock finds its trigger there; the schema is a
# plain identifier, so it is safe inside the literal)
STALE_TRIGGER_SQL = """
DO $$ BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'lgd_store_vectors_stale'
                   AND tgrelid = '{schema}.lgd_store_items'::regclass) THEN
        CREATE TRIGGER lgd_store_vectors_stale AFTER UPDATE OF value
        ON {schema}.lgd_store_items FOR EACH ROW
        WHEN (OLD.value IS DISTINCT FROM NEW.value)
        EXECUTE FUNCTION {schema}.lgd_store_vectors_stale();
    END IF;
END $$"""

# An item's embeddings after its put: the fields it no longer has go, the others are
# written (%(fields)s and %(embeddings)s, pgvector's text form, pair up; both empty for a
# put with index=False).
REPLACE_SQL = """
WITH gone AS (
    DELETE FROM {schema}.lgd_store_vectors WHERE namespace = %(namespace)s AND key = %(key)s
        AND NOT field = ANY(%(fields)s::text[])
)
INSERT INTO {schema}.lgd_store_vectors (namespace, key, field, embedding)
SELECT %(namespace)s, %(key)s, f, e::{column}
FROM unnest(%(fields)s::text[], %(embeddings)s::text[]) AS t(f, e)
ON CONFLICT (namespace, key, field) DO UPDATE SET embedding = excluded.embedding"""

# A search's query embedding, parsed once: a CTE of the search statement ("q", materialized:
# a subquery would be evaluated again for each candidate item, 1,536 numbers parsed each).
QUERY_VECTOR_SQL = "SELECT %(query_vector)s::text::{column} AS v"

# What a search with a query reads from: each candidate item joined to the best score of
# its fields against "q" (NULL when it has none).
RANKED_FROM_SQL = """{schema}.lgd_store_items i CROSS JOIN q
LEFT JOIN LATERAL (
    SELECT max({score})::double precision AS score FROM {schema}.lgd_store_vectors v
    WHERE v.namespace = i.namespace AND v.key = i.key) s ON true"""


@dataclass(frozen=True, slots=True, init=False, eq=False)
class VectorStatements(Rendered):
    """The embeddings table's statements for one schema, column type (``vector(1536)``)
    and distance; ``vector_type`` and ``dims`` are checked before they reach the DDL."""

    TEMPLATES: ClassVar[Mapping[str, str]] = {
        "probe": PROBE_SQL, "extension": EXTENSION_SQL, "create": CREATE_SQL,
        "stale_function": STALE_FUNCTION_SQL, "stale_trigger": STALE_TRIGGER_SQL,
        "replace": REPLACE_SQL, "query_vector": QUERY_VECTOR_SQL,
        "ranked_from": RANKED_FROM_SQL}

    probe: sql.SQL
    extension: sql.SQL
    create: sql.SQL
    stale_function: sql.SQL
    stale_trigger: sql.SQL
    replace: sql.SQL
    query_vector: sql.SQL
    ranked_from: sql.SQL

    def __init__(self, schema: str, vector_type: str = "vector", dims: int = 1,
                 distance: str = "cosine") -> None:
        if (vector_type not in VECTOR_TYPES or isinstance(dims, bool)
                or not isinstance(dims, int) or distance not in SCORES):
            raise ValueError(f"bad embeddings column {vector_type!r}({dims!r}), {distance!r}")
        object.__setattr__(self, "schema", schema)
        for name, template in self.TEMPLATES.items():
            text = sql.SQL(template).format(
                schema=sql.Identifier(schema), column=sql.SQL(f"{vector_type}({dims})"),
                score=sql.SQL(SCORES[distance])).as_string(None)
            object.__setattr__(self, name, sql.SQL(text))


vector_statements = functools.cache(VectorStatements)


def table_name(schema: str) -> str:
    """The embeddings table, quoted, for `PROBE_SQL`'s ``to_regclass``."""
    return sql.SQL("{}.lgd_store_vectors").format(sql.Identifier(schema)).as_string(None)


def setup_lock(schema: str) -> tuple[sql.SQL, dict[str, int]]:
    """The lock every ``setup()`` takes first, so that concurrent setups create once."""
    return statements(schema).setup_lock, {"key": SETUP_LOCK_KEY}
