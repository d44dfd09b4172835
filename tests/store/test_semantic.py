"""Semantic search: `DurableStore(index=...)` on a Postgres with pgvector.

The test servers' Postgres when it has pgvector, else an embedded Postgres started for
the session (its build ships pgvector; `vector_postgres_url`). The embedding models here
are deterministic: a text's vector counts its letters.
"""

from __future__ import annotations

import asyncio
import math
import uuid
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

import psycopg
import pytest
from langchain_core.embeddings import Embeddings

from langgraph_durable import ConfigurationError, DurableStore
from tests.support.servers import POSTGRES_URL, REDIS_URL, drop_prefix

DIMS = 26


def letters(text: str) -> list[float]:
    """Counts of a..z in ``text``, plus a little of each so no vector is zero."""
    counts = [0.1] * DIMS
    for char in text.lower():
        if "a" <= char <= "z":
            counts[ord(char) - ord("a")] += 1
    return counts


class Asymmetric(Embeddings):
    """A retrieval model that embeds a query as the kind of text it looks for (a query
    ``fruit`` as ``apple``), and records what it was asked to embed as what."""

    MEANS: ClassVar[dict[str, str]] = {"fruit": "apple", "animal": "zebra"}

    def __init__(self) -> None:
        self.documents: list[str] = []
        self.queries: list[str] = []

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.documents += texts
        return [letters(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        self.queries.append(text)
        return letters(self.MEANS.get(text, text))


MakeStore = Callable[..., DurableStore]


@pytest.fixture
def make_indexed(vector_postgres_url: str) -> Iterator[MakeStore]:
    """Set-up stores with an index, each test on a schema of its own (a store's
    embeddings column is typed by its dims), closed and dropped after the test."""
    schema, prefix = f"lgdt_semantic_{uuid.uuid4().hex[:8]}", f"lgdt-sem-{uuid.uuid4().hex[:8]}"
    made: list[DurableStore] = []

    def factory(**index: Any) -> DurableStore:
        index.setdefault("dims", DIMS)
        index.setdefault("embed", lambda texts: [letters(t) for t in texts])
        store = DurableStore(REDIS_URL, vector_postgres_url, schema=schema, key_prefix=prefix,
                             index=index)
        store.setup()
        made.append(store)
        return store

    yield factory
    for store in made:
        store.close()
    with psycopg.connect(vector_postgres_url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    drop_prefix(prefix)


def _vector_rows(store: DurableStore, ns: tuple[str, ...], key: str) -> list[str]:
    with psycopg.connect(store.config.postgres_url, autocommit=True) as conn:
        rows = conn.execute(
            f'SELECT field FROM "{store.config.schema}".lgd_store_vectors '
            "WHERE namespace = %s AND key = %s ORDER BY field", (list(ns), key)).fetchall()
    return [r[0] for r in rows]


def _score(distance: str, a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    if distance == "inner_product":
        return dot
    if distance == "l2":
        return -math.dist(a, b)
    return dot / (math.hypot(*a) * math.hypot(*b))


@pytest.mark.parametrize("distance", ["cosine", "l2", "inner_product"])
def test_a_query_ranks_items_by_their_closest_field(make_indexed: MakeStore,
                                                     distance: str) -> None:
    """Each item scores its best field against the query, by the distance asked (cosine
    similarity, negated L2 distance, inner product), best first; another store object
    (another process) ranks what the first wrote."""
    writer = make_indexed(fields=["title", "body"], distance_type=distance)
    docs = {"a": {"title": "zebra", "body": "apple pie"}, "b": {"title": "banana bread"},
            "c": {"title": "zoo", "body": "zebra stripes"}}
    for key, value in docs.items():
        writer.put(("docs",), key, value)
    reader = make_indexed(fields=["title", "body"], distance_type=distance)
    for query in ("apple", "zebra", "bread"):
        found = reader.search(("docs",), query=query)
        want = {k: max(_score(distance, letters(query), letters(v)) for v in d.values())
                for k, d in docs.items()}
        assert [i.key for i in found] == sorted(want, key=lambda k: -want[k])
        for item in found:
            assert item.score == pytest.approx(want[item.key], rel=1e-4)


def test_queries_are_embedded_as_queries_and_items_as_documents(
        make_indexed: MakeStore) -> None:
    """A query goes through ``embed_query`` and an item through ``embed_documents``, sync
    and async: a model that embeds ``fruit`` as what it looks for finds the apple."""
    model = Asymmetric()
    store = make_indexed(embed=model, fields=["text"])
    store.put(("m",), "1", {"text": "zebra"})
    store.put(("m",), "2", {"text": "apple"})
    assert [i.key for i in store.search(("m",), query="fruit")] == ["2", "1"]
    assert asyncio.run(store.asearch(("m",), query="animal"))[0].key == "1"
    assert model.queries == ["fruit", "animal"]
    assert model.documents == ["zebra", "apple"]


def test_a_put_replaces_every_embedding_of_its_item(make_indexed: MakeStore) -> None:
    """A field the new value lacks, or every field of a put with ``index=False``, no longer
    ranks the item: it keeps no embedding of its old value."""
    store = make_indexed(fields=["title", "body"])
    ns = ("r",)
    store.put(ns, "k", {"title": "zebra", "body": "apple"})
    assert _vector_rows(store, ns, "k") == ["body", "title"]
    store.put(ns, "k", {"title": "zebra"})
    assert _vector_rows(store, ns, "k") == ["title"]
    store.put(ns, "other", {"body": "apple"})
    assert [i.key for i in store.search(ns, query="apple")] == ["other", "k"]
    store.put(ns, "k", {"title": "apple"}, index=False)
    assert _vector_rows(store, ns, "k") == []
    found = store.search(ns, query="apple")
    assert [(i.key, i.score) for i in found][1] == ("k", None)
    store.put(ns, "k", {"title": "zebra", "note": "apple"}, index=["note"])
    assert _vector_rows(store, ns, "k") == ["note"]


def test_a_filter_narrows_a_ranked_search_before_it_ranks(make_indexed: MakeStore) -> None:
    """Items under other namespaces or failing the filter, however close, never take the
    places of those that pass: a ranked search returns every match up to its limit."""
    store = make_indexed(fields=["text"])
    for n in range(30):
        store.put(("crowd",), f"c{n}", {"text": "apple", "kind": "fruit"})
        store.put(("mine",), f"x{n}", {"text": "apple", "kind": "other"})
    store.put(("mine",), "far", {"text": "zzz", "kind": "fruit"})
    store.put(("mine",), "near", {"text": "apple pie", "kind": "fruit"})
    found = store.search(("mine",), query="apple", filter={"kind": "fruit"}, limit=5)
    assert [i.key for i in found] == ["near", "far"]


def test_items_without_embeddings_follow_the_ranked_ones_across_pages(
        make_indexed: MakeStore) -> None:
    """Items with no embedding (``index=False``, no text at the fields) come after the
    ranked ones with score ``None``; pages of a ranked search cover every item once."""
    store = make_indexed(fields=["text"])
    ns = ("p",)
    for n in range(7):
        store.put(ns, f"r{n}", {"text": "a" * (n + 1) + "b"})
    store.put(ns, "plain", {"text": "aaaa"}, index=False)
    store.put(ns, "none", {"title": "no text"})
    pages = [store.search(ns, query="aaaaaaab", limit=3, offset=o) for o in range(0, 9, 3)]
    keys = [i.key for page in pages for i in page]
    assert sorted(keys) == sorted([f"r{n}" for n in range(7)] + ["plain", "none"])
    assert keys[:7] == [f"r{n}" for n in range(6, -1, -1)]
    assert [i.score for page in pages for i in page][7:] == [None, None]


def test_deleted_and_expired_items_take_their_embeddings_with_them(
        make_indexed: MakeStore) -> None:
    """A delete, and the TTL sweep of an expired item, leave no embedding behind."""
    store = make_indexed(fields=["text"])
    ns = ("d",)
    store.put(ns, "gone", {"text": "apple"})
    store.put(ns, "expires", {"text": "apple"}, ttl=0.001)
    store.delete(ns, "gone")
    assert _vector_rows(store, ns, "gone") == []
    assert _vector_rows(store, ns, "expires") == ["text"]
    asyncio.run(asyncio.sleep(0.2))
    assert store.search(ns, query="apple") == []
    assert store.sweep_ttl() == 1
    assert _vector_rows(store, ns, "expires") == []


@pytest.mark.parametrize("model", ["raises", "short", "nan"])
def test_a_failing_model_stores_nothing(make_indexed: MakeStore, model: str) -> None:
    """A model that raises, or answers vectors of the wrong size or with NaN, fails the
    put (with the model's error, or one naming the mismatch) and stores none of its
    items, sync and async."""
    def embed(texts: list[str]) -> list[list[float]]:
        if model == "raises":
            raise RuntimeError("model unavailable")
        return [[math.nan] * DIMS if model == "nan" else [1.0] * (DIMS - 1) for _ in texts]

    store = make_indexed(embed=embed, fields=["text"])
    error = RuntimeError if model == "raises" else ConfigurationError
    with pytest.raises(error, match={"raises": "unavailable", "short": "dims=26",
                                     "nan": "NaN"}[model]):
        store.put(("f",), "k", {"text": "apple"})
    with pytest.raises(error):
        asyncio.run(store.aput(("f",), "k2", {"text": "apple"}))
    assert store.get(("f",), "k") is None and store.get(("f",), "k2") is None
    assert store.search(("f",)) == []


def test_a_schema_embedded_with_other_dims_is_refused(make_indexed: MakeStore) -> None:
    """Embeddings of two models are never ranked together: a store whose index makes
    another column type than the schema holds fails its setup, naming both."""
    make_indexed()
    with pytest.raises(ConfigurationError, match=r"vector\(26\).*vector\(8\)"):
        make_indexed(dims=8)
    with pytest.raises(ConfigurationError, match=r"halfvec\(26\)"):
        make_indexed(ann_index_config={"vector_type": "halfvec"})


def test_halfvec_stores_half_precision_and_ranks_the_same(make_indexed: MakeStore) -> None:
    """``ann_index_config={"vector_type": "halfvec"}`` ranks as ``vector`` does, scores
    within half precision."""
    store = make_indexed(fields=["text"], ann_index_config={"vector_type": "halfvec"})
    store.put(("h",), "a", {"text": "apple"})
    store.put(("h",), "z", {"text": "zebra"})
    found = store.search(("h",), query="apple")
    assert [i.key for i in found] == ["a", "z"]
    assert found[1].score == pytest.approx(_score("cosine", letters("apple"),
                                                  letters("zebra")), abs=2e-3)


def test_setup_on_a_postgres_without_pgvector_says_how_to_get_it(namespace: tuple[str, str],
                                                                  vector_postgres_url: str
                                                                  ) -> None:
    """The test servers' Postgres: when it lacks pgvector, setup names the fix and
    creates no embeddings table; when it has it (then it is `vector_postgres_url`), setup
    makes the table."""
    schema, prefix = namespace
    store = DurableStore(REDIS_URL, POSTGRES_URL, schema=schema, key_prefix=prefix,
                         index={"dims": 3, "embed": lambda texts: [[1.0, 0, 0] for _ in texts]})
    try:
        if vector_postgres_url == POSTGRES_URL:
            store.setup()
            store.put(("s",), "k", {"v": 1})
            assert store.search(("s",), query="x")[0].score == pytest.approx(1.0)
            return
        with pytest.raises(ConfigurationError, match=r"pgvector.*embedded"):
            store.setup()
        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            assert conn.execute("SELECT to_regclass(%s)",
                                (f'"{schema}".lgd_store_vectors',)).fetchone() == (None,)
    finally:
        store.close()


@pytest.mark.parametrize("index, says", [
    ({"dims": 0, "embed": letters}, "dims"),
    ({"dims": "26", "embed": letters}, "dims"),
    ({"dims": 26}, "embed"),
    ({"dims": 26, "embed": letters, "distance_type": "dot"}, "distance_type"),
    ({"dims": 26, "embed": letters, "ann_index_config": {"vector_type": "bit"}}, "vector_type"),
    ({"dims": 26, "embed": letters, "ann_index_config": {"kind": "lsh"}}, "kind"),
    ({"dims": 26, "embed": letters, "fields": "text"}, "fields"),
    ({"dims": 26, "embed": letters, "dimensions": 26}, "unknown keys"),
])
def test_an_index_config_it_cannot_serve_is_refused_at_once(index: dict[str, Any],
                                                             says: str) -> None:
    """A bad index config fails the constructor, naming the key, before any connection."""
    with pytest.raises(ConfigurationError, match=says):
        DurableStore(REDIS_URL, POSTGRES_URL, index=index)


def test_a_ranked_search_parses_the_query_once(make_indexed: MakeStore) -> None:
    """The query's embedding is parsed once per search, not once per candidate item (at
    1,536 dimensions, parsing it per item made a 1,000-item search 18x slower), also in
    the generic plan of a prepared statement, which the saver's connections use: the
    cast to the embeddings' type (pgvector's ``vector`` function) runs once."""
    from langgraph_durable._core.sql.store import search_statement

    store = make_indexed(fields=["text"])
    for n in range(40):
        store.put(("plan",), f"k{n}", {"text": "apple" * (n + 1)})
    assert store._index is not None
    vector = "[" + ",".join(["0.5"] * DIMS) + "]"
    query, params = search_statement(store.config.schema, ("plan",), None, 10, 0, False,
                                     store._index.ranking(store.config.schema, vector))
    with psycopg.connect(store.config.postgres_url) as conn:  # one transaction
        conn.execute("SET LOCAL track_functions = 'all'")
        conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        assert len(conn.execute(query, params, prepare=True).fetchall()) == 10
        calls = conn.execute("SELECT coalesce(sum(calls), 0) FROM pg_stat_xact_user_functions "
                             "WHERE funcname = 'vector'").fetchone()
    assert calls == (1,)


def test_a_value_another_store_replaced_keeps_no_embedding_of_the_old_one(
        make_indexed: MakeStore, vector_postgres_url: str) -> None:
    """A store without an index on the same schema replaces an item's value: the item no
    longer ranks by what it used to say (it has no embedding until an indexed store puts
    it again); the same value put again keeps it. Two setups of the index do not clash."""
    indexed = make_indexed(fields=["text"])
    make_indexed(fields=["text"])  # a second setup finds the table and its trigger
    plain = DurableStore(REDIS_URL, vector_postgres_url, schema=indexed.config.schema,
                         key_prefix=indexed.config.key_prefix)
    try:
        ns = ("mixed",)
        indexed.put(ns, "same", {"text": "apple"})
        indexed.put(ns, "changed", {"text": "apple"})
        plain.put(ns, "same", {"text": "apple"})
        plain.put(ns, "changed", {"text": "zebra"})
        assert _vector_rows(indexed, ns, "same") == ["text"]
        assert _vector_rows(indexed, ns, "changed") == []
        found = {i.key: i.score for i in indexed.search(ns, query="apple")}
        assert found["same"] == pytest.approx(1.0) and found["changed"] is None
        indexed.put(ns, "changed", {"text": "zebra"})
        assert _vector_rows(indexed, ns, "changed") == ["text"]
    finally:
        plain.close()
