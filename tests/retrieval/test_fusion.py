"""Rank fusion (reciprocal rank, weighted score) and maximal marginal relevance."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from cognoxium.exceptions import CognoxiumError, RankError
from cognoxium.retrieval.fusion import (
    mmr,
    reciprocal_rank_fusion,
    rrf_scores,
    weighted_score_fusion,
)

FUSERS = [reciprocal_rank_fusion, weighted_score_fusion]

# -- ranked-list strategies ------------------------------------------------------------------

IDS = st.sampled_from([f"d{i}" for i in range(8)])
SCORES = st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False) | st.sampled_from(
    [0.0, 0.5, 1.0]
)
RANKED = st.lists(st.tuples(IDS, SCORES), max_size=8)
LISTS = st.lists(RANKED, max_size=4)


# -- edge cases named by the contract --------------------------------------------------------


@pytest.mark.parametrize("fuse", FUSERS)
def test_fusing_nothing_gives_an_empty_result(fuse) -> None:
    for lists in ([], [[]], [[], []]):
        out = fuse(lists)
        assert out.height == 0
        assert out.columns == ["id", "score"]
        assert out.schema["score"] == pl.Float64


@pytest.mark.parametrize("fuse", FUSERS)
def test_a_single_document_keeps_its_rank(fuse) -> None:
    out = fuse([[("only", 0.3)]])
    assert out["id"].to_list() == ["only"]
    assert out["score"][0] > 0


@pytest.mark.parametrize("fuse", FUSERS)
def test_a_single_list_keeps_its_order(fuse) -> None:
    ranked = [("a", 3.0), ("b", 9.0), ("c", 1.0), ("d", 5.0)]
    assert fuse([ranked])["id"].to_list()[:3] == ["b", "d", "a"]
    assert reciprocal_rank_fusion([ranked])["id"].to_list() == ["b", "d", "a", "c"]


@pytest.mark.parametrize("fuse", FUSERS)
def test_three_documents_tied_at_one_half_are_ordered_by_id(fuse) -> None:
    out = fuse([[("c", 0.5), ("a", 0.5), ("b", 0.5)]])
    assert out["id"].to_list() == ["a", "b", "c"]


def test_ties_within_a_list_break_by_id_so_rrf_scores_differ() -> None:
    out = reciprocal_rank_fusion([[("c", 0.5), ("a", 0.5), ("b", 0.5)]])
    assert out["score"].to_list() == pytest.approx([1 / 61, 1 / 62, 1 / 63])


@pytest.mark.parametrize("fuse", FUSERS)
def test_same_document_in_two_lists_is_invariant_to_list_order(fuse) -> None:
    full_text = [("doc", 0.9), ("other", 0.4), ("third", 0.2)]
    stub = [("doc", 0.1), ("third", 0.3)]
    forward = fuse([full_text, stub])
    swapped = fuse([stub, full_text])
    assert_frame_equal(forward, swapped)
    assert forward["id"].n_unique() == forward.height == 3


def test_rrf_values_follow_the_formula() -> None:
    out = reciprocal_rank_fusion(
        [[("a", 10.0), ("b", 5.0)], [("b", 0.9), ("c", 0.8), ("a", 0.1)]], k=60
    )
    got = dict(out.rows())
    assert got["a"] == pytest.approx(1 / 61 + 1 / 63)
    assert got["b"] == pytest.approx(1 / 62 + 1 / 61)
    assert got["c"] == pytest.approx(1 / 62)
    assert out["id"].to_list() == ["b", "a", "c"]


def test_rrf_k_and_weights() -> None:
    lists = [[("a", 2.0), ("b", 1.0)], [("b", 2.0), ("a", 1.0)]]
    even = reciprocal_rank_fusion(lists, k=0)
    assert even["score"].to_list() == [1.5, 1.5]
    assert even["id"].to_list() == ["a", "b"]  # tied fused scores: by id
    weighted = reciprocal_rank_fusion(lists, k=0, weights=[1.0, 3.0])
    assert weighted.rows() == [("b", 3.5), ("a", 2.5)]


def test_weighted_fusion_min_max_normalises_each_list() -> None:
    out = weighted_score_fusion([[("a", 100.0), ("b", 50.0), ("c", 0.0)], [("c", 1.0)]])
    assert dict(out.rows()) == {"a": 1.0, "b": 0.5, "c": 1.0}
    assert out["id"].to_list() == ["a", "c", "b"]


def test_weighted_fusion_of_equal_scores_maps_them_to_one() -> None:
    out = weighted_score_fusion([[("x", 7.0), ("y", 7.0)]], weights=[2.0])
    assert out.rows() == [("x", 2.0), ("y", 2.0)]


@pytest.mark.parametrize("fuse", FUSERS)
def test_an_id_repeated_in_a_list_counts_once_at_its_best(fuse) -> None:
    repeated = fuse([[("a", 0.2), ("b", 0.5), ("a", 0.9)]])
    once = fuse([[("a", 0.9), ("b", 0.5)]])
    assert_frame_equal(repeated, once)


@pytest.mark.parametrize("fuse", FUSERS)
def test_frames_and_pairs_give_the_same_result(fuse) -> None:
    pairs = [[("a", 0.3), ("b", 0.7)], [("c", 2.0), ("a", 1.0)]]
    frames = [pl.DataFrame({"doc": [i for i, _ in p], "s": [s for _, s in p]}) for p in pairs]
    assert_frame_equal(fuse(frames, id_column="doc", score_column="s"), fuse(pairs))


@pytest.mark.parametrize("fuse", FUSERS)
def test_integer_ids_keep_their_type_and_numeric_order(fuse) -> None:
    out = fuse([[(10, 0.5), (9, 0.5)]])
    assert out.schema["id"] == pl.Int64
    assert out["id"].to_list() == [9, 10]


@pytest.mark.parametrize("fuse", FUSERS)
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_scores_are_rejected_naming_list_and_id(fuse, bad: float) -> None:
    with pytest.raises(RankError, match=r"ranked list 1: id 'x' has score") as info:
        fuse([[("a", 1.0)], [("x", bad)]])
    assert isinstance(info.value, CognoxiumError)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("fuse", FUSERS)
def test_null_scores_and_ids_are_rejected(fuse) -> None:
    with pytest.raises(RankError, match="has score None"):
        fuse(
            [
                pl.DataFrame(
                    {"id": ["a"], "score": [None]}, schema={"id": pl.String, "score": pl.Float64}
                )
            ]
        )
    with pytest.raises(RankError, match="null id"):
        fuse([[(None, 1.0)]])


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: reciprocal_rank_fusion([[("a", 1.0)]], k=-1), "k must be"),
        (lambda: reciprocal_rank_fusion([[("a", 1.0)]], k=math.nan), "k must be"),
        (lambda: reciprocal_rank_fusion([[("a", 1.0)]], weights=[1.0, 2.0]), "2 weights for 1"),
        (lambda: weighted_score_fusion([[("a", 1.0)]], weights=[-1.0]), "non-negative"),
        (lambda: reciprocal_rank_fusion([[("a", 1.0)], [(1, 1.0)]]), "different types"),
        (lambda: reciprocal_rank_fusion([pl.DataFrame({"id": ["a"]})]), "no column 'score'"),
        (lambda: reciprocal_rank_fusion([[("a", "high")]]), "must be numbers"),
        (lambda: reciprocal_rank_fusion([[("a",)]]), "not an \\(id, score\\) pair"),
        (lambda: reciprocal_rank_fusion(pl.DataFrame({"id": ["a"], "score": [1.0]})), "sequence"),
    ],
)
def test_bad_arguments_raise_rank_errors(call, message: str) -> None:
    with pytest.raises(RankError, match=message):
        call()


# -- properties ----------------------------------------------------------------------------


def _expected_order(out: pl.DataFrame) -> list[tuple[str, float]]:
    return sorted(out.rows(), key=lambda r: (-r[1], r[0]))


@settings(max_examples=200, deadline=None)
@given(LISTS, st.randoms(use_true_random=False))
def test_fusion_is_finite_ordered_and_invariant_to_list_order(lists, rnd) -> None:
    weights = [float(rnd.choice([0.0, 0.5, 1.0, 2.0])) for _ in lists]
    order = list(range(len(lists)))
    rnd.shuffle(order)
    for fuse in FUSERS:
        out = fuse(lists, weights=weights)
        scores = out["score"].to_numpy()
        assert np.isfinite(scores).all()
        assert (scores >= 0).all()
        assert out.rows() == _expected_order(out)
        assert set(out["id"].to_list()) == {i for lst in lists for i, _ in lst}
        permuted = fuse([lists[i] for i in order], weights=[weights[i] for i in order])
        assert_frame_equal(out, permuted)


@settings(max_examples=100, deadline=None)
@given(RANKED)
def test_fusing_one_list_keeps_its_order(ranked) -> None:
    best: dict[str, float] = {}
    for doc, score in ranked:
        best[doc] = max(score, best.get(doc, -math.inf))
    expected = [d for d, _ in sorted(best.items(), key=lambda kv: (-kv[1], kv[0]))]
    assert reciprocal_rank_fusion([ranked])["id"].to_list() == expected


# -- rrf_scores ------------------------------------------------------------------------------


def test_rrf_scores_agree_with_list_fusion_for_unique_ids() -> None:
    ids = ["b", "a", "d", "c"]
    bm25 = [0.0, 2.5, 0.0, 1.0]
    dense = [0.3, 0.1, 0.9, 0.3]
    fused = rrf_scores([bm25, dense], ids)
    expected = dict(
        reciprocal_rank_fusion(
            [list(zip(ids, bm25, strict=True)), list(zip(ids, dense, strict=True))]
        ).rows()
    )
    assert fused.tolist() == pytest.approx([expected[i] for i in ids], abs=0, rel=1e-15)


def test_rrf_scores_break_ties_by_id_then_position() -> None:
    fused = rrf_scores([[1.0, 1.0, 1.0]], pl.Series(["b", "a", "b"]))
    assert fused.tolist() == pytest.approx([1 / 62, 1 / 61, 1 / 63])


@settings(max_examples=100, deadline=None)
@given(
    st.integers(0, 10).flatmap(
        lambda n: st.tuples(
            st.lists(st.lists(SCORES, min_size=n, max_size=n), min_size=1, max_size=4),
            st.lists(IDS, min_size=n, max_size=n),
        )
    ),
    st.randoms(use_true_random=False),
)
def test_rrf_scores_are_finite_and_invariant_to_column_order(data, rnd) -> None:
    columns, ids = data
    fused = rrf_scores(columns, ids)
    assert fused.shape == (len(ids),)
    assert np.isfinite(fused).all()
    shuffled = list(columns)
    rnd.shuffle(shuffled)
    assert np.array_equal(fused, rrf_scores(shuffled, ids))


def test_rrf_scores_reject_bad_input() -> None:
    with pytest.raises(RankError, match="row 1 has score nan"):
        rrf_scores([[1.0, math.nan]], ["a", "b"])
    with pytest.raises(RankError, match="has 1 rows, expected 2"):
        rrf_scores([[1.0]], ["a", "b"])
    assert rrf_scores([], ["a"]).tolist() == [0.0]
    assert rrf_scores([[]], []).shape == (0,)


# -- MMR -------------------------------------------------------------------------------------


def test_mmr_with_lambda_one_is_relevance_order() -> None:
    rng = np.random.default_rng(7)
    docs = rng.normal(size=(20, 5))
    query = rng.normal(size=5)
    unit = docs / np.linalg.norm(docs, axis=1, keepdims=True)
    expected = np.argsort(-(unit @ (query / np.linalg.norm(query))), kind="stable")
    assert mmr(docs, query, lambda_=1.0).tolist() == expected.tolist()


def test_mmr_skips_a_near_duplicate_of_what_it_already_chose() -> None:
    docs = np.array([[1.0, 0.0, 0.0], [1.0, 0.01, 0.0], [0.6, 0.0, 0.8]])
    query = np.array([1.0, 0.0, 0.3])
    assert mmr(docs, query, k=2, lambda_=1.0).tolist() == [0, 1]
    assert mmr(docs, query, k=2, lambda_=0.5).tolist() == [0, 2]


def test_mmr_uses_given_relevance_and_breaks_ties_by_row() -> None:
    docs = np.eye(3)
    assert mmr(docs, np.zeros(3), relevance=[0.2, 0.9, 0.9]).tolist() == [1, 2, 0]
    assert mmr(np.zeros((3, 2)), np.zeros(2)).tolist() == [0, 1, 2]


def test_mmr_k_bounds() -> None:
    docs = np.eye(3)
    assert mmr(docs, np.ones(3), k=0).tolist() == []
    assert mmr(docs, np.ones(3), k=10).shape == (3,)
    assert mmr(np.zeros((0, 3)), np.ones(3)).shape == (0,)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"embeddings": np.eye(2), "query": np.ones(3)}, "query must have shape"),
        ({"embeddings": np.ones(3), "query": np.ones(3)}, "must have shape \\(n, dim\\)"),
        ({"embeddings": np.array([[np.nan, 0.0]]), "query": np.ones(2)}, "finite"),
        ({"embeddings": np.eye(2), "query": np.ones(2), "lambda_": 1.5}, "lambda_"),
        ({"embeddings": np.eye(2), "query": np.ones(2), "k": -1}, "non-negative"),
        ({"embeddings": np.eye(2), "query": np.ones(2), "relevance": [1.0]}, "expected 2"),
    ],
)
def test_mmr_rejects_bad_input(kwargs, message: str) -> None:
    with pytest.raises(RankError, match=message):
        mmr(**kwargs)


@settings(max_examples=100, deadline=None)
@given(
    st.integers(0, 12),
    st.integers(1, 4),
    st.integers(0, 15),
    st.floats(0, 1),
    st.integers(0, 2**32 - 1),
)
def test_mmr_selects_distinct_rows(n: int, dim: int, k: int, lam: float, seed: int) -> None:
    rng = np.random.default_rng(seed)
    docs = rng.normal(size=(n, dim))
    picked = mmr(docs, rng.normal(size=dim), k=k, lambda_=lam)
    assert picked.dtype == np.int64
    assert len(picked) == min(k, n) == len(set(picked.tolist()))
    assert all(0 <= i < n for i in picked)
