"""Hybrid retrieval: derived items, the four fused lists, neighbours, and batch packing with it."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from cognoxium.app.batch import Request, batch_rank_methods, run_batch
from cognoxium.exceptions import PlanError
from cognoxium.items.records import records_to_frame
from cognoxium.items.schema import packed_text_expr
from cognoxium.packing.manifests import scan_packs
from cognoxium.packing.options import PackOptions
from cognoxium.retrieval.embeddings import MAX_READ_CHARS, EmbeddingCache, LocalHashEmbedder
from cognoxium.retrieval.fusion import rrf_scores
from cognoxium.retrieval.ranking import bm25_cache_clear, bm25_scores, corpus_key
from cognoxium.retrieval.scope import (
    RETRIEVAL_LISTS,
    RRF_K,
    RetrievalSettings,
    ScopeRetriever,
    derived_items,
)
from cognoxium.strategies import Backends, ContextAssembler, ContextRequest

T0 = "2024-01-01T00:00:00Z"
AS_OF = datetime(2024, 6, 1, tzinfo=UTC)


def store(t3: str = "Ann: Lyon, near the old bakery.") -> pl.DataFrame:
    turns = [
        ("t1", "user", "Ann: We finally moved last spring."),
        ("t2", "assistant", "Bo: Where to?"),
        ("t3", "user", t3),
        ("t4", "assistant", "Bo: I bought a red bicycle yesterday."),
        ("t5", "user", "Ann: Nice, what brand is the bicycle?"),
        ("t6", "assistant", "Bo: The weather is grey today."),
    ]
    rows = [
        {"id": i, "role": r, "text": t, "created_at": T0, "metadata": {"kind": "turn"}}
        for i, r, t in turns
    ]
    rows += [
        {
            "id": "o1",
            "role": "memory",
            "text": "Ann relocated to the city of Lyon in spring.",
            "parents": ["t1", "t3"],
            "created_at": T0,
            "metadata": {"kind": "observation"},
        },
        {
            "id": "o2",
            "role": "memory",
            "text": "Somebody else entirely.",
            "parents": ["elsewhere"],
            "created_at": T0,
            "metadata": {"kind": "observation"},
        },
    ]
    return records_to_frame(rows)


def scope_of(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.filter(pl.col("role") != "memory")


def retriever(
    method: str = "hybrid-lineage", neighbours: float = 0.0, rrf_k: float | None = None
) -> ScopeRetriever:
    frame = store()
    settings = RetrievalSettings(model="local_hash", neighbours=neighbours, rrf_k=rrf_k)
    return ScopeRetriever(
        scope_of(frame), method, settings, lineage=frame, cache=EmbeddingCache(persist=False)
    )


def test_lists_of_a_huge_text_read_its_first_max_read_chars() -> None:
    huge = "Ann: Lyon, near the old bakery. " * 5_000  # 160,000 characters
    settings = RetrievalSettings(model="local_hash")
    scores = []
    for text in (huge, huge[:MAX_READ_CHARS]):
        frame = store(t3=text)
        cache = EmbeddingCache(persist=False)
        scope = scope_of(frame)
        lists = ScopeRetriever(scope, "hybrid-lineage", settings, lineage=frame, cache=cache)
        scores.append(lists.list_scores("Where does Ann live? Lyon"))
    whole, cut = scores
    for name in RETRIEVAL_LISTS:
        assert np.array_equal(whole[name], cut[name], equal_nan=True), name


def test_a_cut_corpus_never_shares_a_bm25_index_with_the_whole_text() -> None:
    # "Lyon" only past the first MAX_READ_CHARS characters of t3.
    frame = store(t3="bakery " * 20_000 + "Lyon")
    scope = scope_of(frame)
    whole_texts = scope.select(packed_text_expr()).to_series()
    key = corpus_key(scope.get_column("content_hash"))
    bm25_cache_clear()
    settings = RetrievalSettings(model="local_hash")
    cut = ScopeRetriever(scope, "hybrid", settings, cache=EmbeddingCache(persist=False))
    assert cut.list_scores("Lyon")["bm25"][2] == 0.0
    whole = bm25_scores(whole_texts, "Lyon", cache_key=key)
    assert whole[2] > 0.0
    assert np.array_equal(whole, bm25_scores(whole_texts.to_list(), "Lyon"))
    assert cut.list_scores("Lyon")["bm25"][2] == 0.0


def test_cosines_are_the_embedding_lists_of_any_query() -> None:
    r = retriever()
    lists = r.list_scores("Where does Ann live? Lyon")
    for name in ("embedding", "window"):
        assert np.array_equal(r.cosines("Where does Ann live? Lyon", name), lists[name])
    assert r.cosines("Lyon", "lineage").shape == (r.derived.height,)  # type: ignore[union-attr]
    assert np.array_equal(r.cosines("Lyon", "lineage"), r.derived_cosines("Lyon"))
    with pytest.raises(PlanError, match="'hybrid' has no embedding list 'lineage'"):
        retriever("hybrid").cosines("Lyon", "lineage")
    with pytest.raises(PlanError, match="no embedding list 'bm25'"):
        r.cosines("Lyon", "bm25")


def test_each_text_is_embedded_once() -> None:
    # 6 turns and 1 observation: the windows are made from the turns' vectors.
    frame = store()
    cache = EmbeddingCache(persist=False)
    settings = RetrievalSettings(model="local_hash")
    ScopeRetriever(scope_of(frame), "hybrid-lineage", settings, lineage=frame, cache=cache)
    assert cache.info().computed == 6 + 1


def test_derived_items_link_to_their_scope_parents() -> None:
    frame = store()
    derived, links = derived_items(frame, scope_of(frame).get_column("id"))
    assert derived.get_column("id").to_list() == ["o1"]  # o2's parent is outside the scope
    assert links.rows() == [(0, 0), (0, 2)]  # o1 -> t1 (row 0) and t3 (row 2)
    nothing, none = derived_items(frame, pl.Series(["t6"]))
    assert nothing.height == 0
    assert none.height == 0


def test_lineage_scores_parents_by_their_best_derived_item() -> None:
    scores = retriever().list_scores("city of Lyon relocated")["lineage"]
    assert scores[0] == scores[2] > 0.3  # t1 and t3 share o1's cosine
    assert np.isnan(scores[[1, 3, 4, 5]]).all()  # no derived item: absent from the list


def test_fused_score_is_the_sum_of_each_lists_reciprocal_rank() -> None:
    r = retriever()
    query = "city of Lyon relocated"
    k = RetrievalSettings().fusion_k("hybrid-lineage")
    expected = np.zeros(r.n)
    for column in r.list_scores(query).values():
        present = ~np.isnan(column)
        ids = r.ids.filter(pl.Series(present))
        expected[present] += rrf_scores([column[present]], ids, k=k)
    np.testing.assert_allclose(r.scores(query), expected, rtol=0, atol=1e-15)
    lineage_only = np.zeros(r.n)
    column = r.list_scores(query)["lineage"]
    lineage_only[[0, 2]] = rrf_scores([column[[0, 2]]], ["t1", "t3"], k=k)
    assert lineage_only[0] > lineage_only[2] > 0  # tied cosines take consecutive ranks, by id


def test_lineage_needs_derived_items() -> None:
    with pytest.raises(PlanError, match="lineage items"):
        ScopeRetriever(scope_of(store()), "hybrid-lineage", RetrievalSettings(model="local_hash"))


def test_window_reads_each_item_with_the_one_before() -> None:
    query = "what brand is the red bicycle"
    scores = retriever().list_scores(query)["window"]
    texts = scope_of(store()).get_column("text").to_list()
    embedder = LocalHashEmbedder()
    q = embedder.vector(query)
    vectors = embedder.embed(texts)
    weights = [len(t) for t in texts]
    expected = [float(vectors[0] @ q)] + [
        float((w1 * v1 + w2 * v2) @ q / np.linalg.norm(w1 * v1 + w2 * v2))
        for (w1, v1), (w2, v2) in itertools.pairwise(zip(weights, vectors, strict=True))
    ]
    np.testing.assert_allclose(scores, expected, atol=1e-6)
    assert int(np.argmax(scores)) == 4  # t5 read with t4


def test_fusion_is_deterministic() -> None:
    query = "Where did Ann move? Lyon"
    a = retriever().scores(query)
    np.testing.assert_array_equal(a, retriever().scores(query))
    assert int(np.argmax(a)) == 2  # t3 names Lyon, is read after "Where to?" and has o1
    assert list(retriever().list_scores(query)) == ["bm25", "embedding", "window", "lineage"]
    assert list(retriever("hybrid").list_scores(query)) == ["bm25", "embedding"]


def test_neighbour_expansion_spreads_a_share_of_the_score() -> None:
    query = "red bicycle"
    # k = 0: the top of each list scores far above the rest, so its neighbours inherit.
    base = retriever("hybrid", rrf_k=0).scores(query)
    spread = retriever("hybrid", neighbours=0.5, rrf_k=0).scores(query)
    assert (spread >= base).all()
    assert (spread > base).any()
    for i in range(len(base)):
        around = [base[j] for j in (i - 1, i + 1) if 0 <= j < len(base)]
        assert spread[i] == pytest.approx(max([base[i]] + [0.5 * s for s in around]))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"rrf_k": -1}, "rrf_k"),
        ({"rrf_k": float("inf")}, "rrf_k"),
        ({"rrf_k": True}, "rrf_k"),
        ({"neighbours": 1.5}, "neighbours"),
        ({"neighbours": True}, "neighbours"),
    ],
)
def test_bad_settings_are_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(PlanError, match=message):
        RetrievalSettings(**kwargs)  # type: ignore[arg-type]


def test_each_fused_method_has_its_own_constant() -> None:
    assert RetrievalSettings().fusion_k("hybrid") == RRF_K["hybrid"]
    assert RetrievalSettings().fusion_k("hybrid-lineage") == RRF_K["hybrid-lineage"]
    assert RetrievalSettings(rrf_k=3).fusion_k("hybrid") == 3.0
    with pytest.raises(PlanError, match="unknown retrieval method"):
        ScopeRetriever(scope_of(store()), "bm25", RetrievalSettings(model="local_hash"))


def test_empty_scope_scores_nothing() -> None:
    frame = store()
    r = ScopeRetriever(
        frame.head(0),
        "hybrid-lineage",
        RetrievalSettings(model="local_hash"),
        lineage=frame,
        cache=EmbeddingCache(persist=False),
    )
    assert r.scores("anything").shape == (0,)


def test_every_rank_method_packs_a_batch(tmp_path: Path) -> None:
    requests = [
        Request(
            id="q1",
            budget=30,
            query="Where did Ann move to?",
            where="metadata.kind = 'turn'",
            as_of=AS_OF,
        ),
        Request(id="q2", budget=30, where="metadata.kind = 'turn'", as_of=AS_OF),
    ]
    packed: dict[str, list[str]] = {}
    for method in batch_rank_methods():
        out = tmp_path / method
        settings = RetrievalSettings(model="local_hash")
        run_batch(store(), requests, out_dir=out, rank=method, retrieval=settings)  # type: ignore[arg-type]
        lines = scan_packs(out).collect().to_dicts()
        assert [x["request_id"] for x in lines] == ["q1", "q2"]
        assert all(x["used_tokens"] <= 30 for x in lines)
        assert all(i.startswith("t") for x in lines for i in x["ids"])  # derived stay out
        packed[method] = lines[0]["ids"]
    assert "t3" in packed["hybrid-lineage"]
    # "strategies" packs what the registry's default assembly retrieves for the budget.
    scope = store().filter(pl.col("metadata").str.contains('"turn"'))
    backends = Backends.from_frame(
        scope, vector="local_hash", embedding_cache=EmbeddingCache(persist=False)
    )
    request = ContextRequest(query="Where did Ann move to?", as_of=AS_OF)
    assembled = ContextAssembler().assemble(request, backends, 30)
    assert assembled.fragments
    assert {f.node for f in assembled.fragments} <= set(packed["strategies"])


def test_hybrid_lineage_manifests_are_byte_identical(tmp_path: Path) -> None:
    requests = [
        Request(id=f"q{b}", budget=b, query="Where does Ann live?", where="metadata.kind = 'turn'")
        for b in (20, 40)
    ]
    for run in ("a", "b"):
        run_batch(
            store(),
            requests,
            out_dir=tmp_path / run,
            rank="hybrid-lineage",
            retrieval=RetrievalSettings(model="local_hash"),
            options=PackOptions(as_of=AS_OF),
        )
    folder = (tmp_path / "a").resolve()
    names = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*.*"))
    assert names == [
        "manifest_headers/part-00000.jsonl",
        "manifests/part-00000.parquet",
        "packs/part-00000.jsonl",
    ]
    for name in names:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name


def test_every_bm25_reads_a_huge_text_to_its_first_max_read_chars() -> None:
    from cognoxium import CognitionFrame
    from cognoxium.strategies.backends import ItemStore, TextBackend

    # "Lyon" only past the first MAX_READ_CHARS characters of t3, "bakery" within them.
    huge = "bakery " * 20_000 + "Lyon"
    ranks = {}
    for name, t3 in (("whole", huge), ("cut", huge[:MAX_READ_CHARS])):
        frame = CognitionFrame(store(t3=t3)).rank("bm25", query="Lyon bakery")
        ranks[name] = frame.collect().get_column("rank").to_list()
    assert ranks["whole"] == ranks["cut"]
    assert ranks["whole"][2] > 0.0  # "bakery" is read
    only_past = CognitionFrame(store(t3=huge)).rank("bm25", query="Lyon").collect()
    assert only_past.get_column("rank")[2] == 0.0
    backend = TextBackend(ItemStore(CognitionFrame(store(t3=huge))))
    assert "t3" not in backend.search("Lyon").get_column("id").to_list()


@pytest.mark.parametrize(
    ("text", "query"),
    [("Cafe\u0301 opening hours", "café"), ("Caf\u00e9 opening hours", "cafe\u0301")],
)
def test_bm25_reads_a_letter_and_its_combining_mark_as_the_composed_letter(
    text: str, query: str
) -> None:
    # Text with combining marks (macOS, some exports) scored 0 against the same-looking query.
    from cognoxium.retrieval.ranking import bm25_scores

    scores = bm25_scores([text, "Opening hours of the shop", "Menu"], query)
    assert scores[0] > 0
    assert int(scores.argmax()) == 0
