"""Near-duplicate dedupe: MinHash/LSH grouping, against exact Jaccard, and its merges."""

from __future__ import annotations

import random
import string
from datetime import UTC, datetime

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from cognoxium import CognitionFrame, OptFlags
from cognoxium.exceptions import PlanError
from cognoxium.items.model import ContextItem, Retention, Sensitivity, Trust
from cognoxium.retrieval.near_duplicates import (
    SHINGLE_BYTES,
    lsh_params,
    minhash_signatures,
    near_duplicate_labels,
)
from cognoxium.testing.strategies import MERGE_GOVERNED, WORDS, items_strategy
from tests.reach import reached, reaching

AS_OF = datetime(2024, 2, 1, tzinfo=UTC)
T0 = "2024-01-01T00:00:00Z"


def shingles(text: str) -> set[bytes]:
    raw = text.encode("utf-8")
    if not raw:
        return set()
    if len(raw) < SHINGLE_BYTES:
        return {raw}
    return {raw[i : i + SHINGLE_BYTES] for i in range(len(raw) - SHINGLE_BYTES + 1)}


def jaccard(a: str, b: str) -> float:
    x, y = shingles(a), shingles(b)
    return len(x & y) / len(x | y) if x | y else 0.0


def partition(labels: np.ndarray, order: list[int] | None = None) -> set[frozenset[int]]:
    """Groups as sets of original indices (``order[i]`` is the original index of row i)."""
    order = order if order is not None else list(range(len(labels)))
    groups: dict[int, set[int]] = {}
    for row, label in enumerate(labels.tolist()):
        groups.setdefault(label, set()).add(order[row])
    return {frozenset(g) for g in groups.values()}


def mutate(text: str, edits: int, rng: random.Random) -> str:
    chars = list(text)
    for _ in range(edits):
        chars[rng.randrange(len(chars))] = rng.choice(string.ascii_lowercase)
    return "".join(chars)


def corpus(rng: random.Random, n_base: int = 150) -> list[str]:
    words = ["refund", "window", "order", "ship", "days", "policy", "card", "office", "lyon"]
    words += ["delivery", "support", "ticket", "account", "invoice", "return", "warranty"]
    base = [" ".join(rng.choice(words) for _ in range(rng.randint(25, 45))) for _ in range(n_base)]
    texts = list(base)
    for text in base[: n_base // 2]:
        texts.append(mutate(text, rng.randint(1, 3), rng))  # near copies
    rng.shuffle(texts)
    return texts


def test_signatures_estimate_jaccard() -> None:
    rng = random.Random(7)
    texts = corpus(rng, 40)
    sig = minhash_signatures(texts)
    assert sig.shape == (len(texts), 128)
    assert sig.dtype == np.uint64
    errors = [
        abs((sig[i] == sig[j]).mean() - jaccard(texts[i], texts[j]))
        for i in range(len(texts))
        for j in range(i + 1, len(texts))
    ]
    # Standard error of the estimate is at most 0.5 / sqrt(128) = 0.044.
    assert float(np.mean(errors)) < 0.03
    assert max(errors) < 0.25


def test_empty_and_short_texts() -> None:
    sig = minhash_signatures(["", None, "ab", "ab", "abc"])
    assert (sig[0] == np.iinfo(np.uint64).max).all()
    assert (sig[2] == sig[3]).all()
    assert not (sig[2] == sig[4]).any()
    assert near_duplicate_labels(["", None, "", "ab", "ab", "abc"], 0.5).tolist() == [
        0,
        1,
        2,
        3,
        3,
        5,
    ]


def test_sliced_series_uses_its_own_bytes() -> None:
    series = pl.Series(["zzzzzz zzzz", "the refund window", "the refund window!"])[1:]
    assert near_duplicate_labels(series, 0.6).tolist() == [0, 0]


def test_groups_keep_kinds_apart() -> None:
    texts = ["Refund window is 30 days.", "Refund window is 30 days."]
    assert near_duplicate_labels(texts, 0.9).tolist() == [0, 0]
    assert near_duplicate_labels(texts, 0.9, groups=["text", "json"]).tolist() == [0, 1]
    with pytest.raises(PlanError, match="2 texts"):
        near_duplicate_labels(texts, 0.9, groups=["text"])


@pytest.mark.parametrize("bad", [0, 0.0, -0.1, 1.5, float("nan"), True])
def test_bad_thresholds_are_refused(bad: float) -> None:
    with pytest.raises(PlanError, match="threshold"):
        near_duplicate_labels(["a"], bad)
    with pytest.raises(PlanError, match="threshold"):
        CognitionFrame([{"id": "a", "role": "user", "text": "x"}]).dedupe(threshold=bad)


def test_lsh_parameters_fit_the_signature() -> None:
    for threshold in (0.3, 0.5, 0.7, 0.8, 0.9, 1.0):
        bands, rows = lsh_params(threshold)
        assert bands * rows <= 128
        # The S-curve's midpoint (1/b)^(1/r) lies near the threshold.
        assert abs((1 / bands) ** (1 / rows) - threshold) < 0.15


def test_recall_and_precision_against_exact_jaccard() -> None:
    """Pairs at or above 0.8 + margin are linked; pairs below 0.8 - margin are not."""
    rng = random.Random(11)
    texts = corpus(rng)
    labels = near_duplicate_labels(texts, 0.8)
    high = missed = low = wrong = 0
    for i in range(len(texts)):
        for j in range(i + 1, len(texts)):
            similarity = jaccard(texts[i], texts[j])
            together = labels[i] == labels[j]
            if similarity >= 0.9:
                high += 1
                missed += not together
            elif similarity < 0.6:
                low += 1
                wrong += together
    assert high >= 45  # most near copies
    assert missed / high <= 0.01
    assert wrong / low <= 0.001


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    texts=st.lists(
        st.sampled_from(
            [
                "",
                "Refund window is 30 days.",
                "Refund window is 30 days!",
                "refund window is 30 days",
                "Our office is in Lyon.",
                "Our office is in Lyon, France.",
                "朗琴是一个用于开发应用程序的框架",
                "朗琴是一个用于开发应用程序的框架。",
                "ab",
            ]
        ),
        max_size=12,
    ),
    threshold=st.sampled_from([0.5, 0.7, 0.9]),
    seed=st.randoms(use_true_random=False),
)
def test_grouping_does_not_depend_on_order(
    texts: list[str], threshold: float, seed: random.Random
) -> None:
    order = list(range(len(texts)))
    seed.shuffle(order)
    a = partition(near_duplicate_labels(texts, threshold))
    b = partition(near_duplicate_labels([texts[i] for i in order], threshold), order)
    assert a == b
    labels = near_duplicate_labels(texts, threshold)
    for i, label in enumerate(labels.tolist()):
        assert label <= i  # the group's first row
        assert labels[label] == label


def refund_variants(reverse: bool) -> CognitionFrame:
    rows = [
        {
            "id": "policy-file",
            "role": "document",
            "text": "The refund window is 30 days from delivery.",
            "trust": "trusted",
            "rank": 1.0,
            "sensitivity": "internal",
            "sources": [{"uri": "file://policies/refunds.md", "kind": "file"}],
            "created_at": T0,
        },
        {
            "id": "office",
            "role": "document",
            "text": "Our office is in Lyon.",
            "trust": "trusted",
            "created_at": T0,
        },
        {
            "id": "forum-thread",
            "role": "document",
            "text": "the refund window is 30 days from delivery!",
            "rank": 7.0,
            "sensitivity": "public",
            "retention": "required",
            "sources": [{"uri": "https://forum.example/t/42", "kind": "web"}],
            "created_at": T0,
        },
    ]
    return CognitionFrame(rows[::-1] if reverse else rows)


@pytest.mark.parametrize("reverse", [False, True])
def test_near_copies_merge_conservatively(reverse: bool) -> None:
    result = refund_variants(reverse).dedupe(threshold=0.7).pack(500, as_of=AS_OF)
    assert sorted(result.ids) == ["forum-thread", "office"]
    kept = result.frame.filter(pl.col("id") == "forum-thread").row(0, named=True)
    assert kept["trust"] == "untrusted"
    assert kept["sensitivity"] == "internal"
    assert kept["retention"] == "required"
    assert kept["text"] == "the refund window is 30 days from delivery!"  # its own content
    assert [s["uri"] for s in kept["sources"]] == [
        "file://policies/refunds.md",
        "https://forum.example/t/42",
    ]
    (merge,) = result.manifest.merges
    assert (merge.kept, merge.merged) == ("forum-thread", ["policy-file"])
    edges = refund_variants(reverse).dedupe(threshold=0.7).lineage()
    assert edges.filter(pl.col("operation") == "merge").select("child_id", "parent_id").rows() == [
        ("forum-thread", "policy-file")
    ]


def test_position_is_the_first_occurrence() -> None:
    out = refund_variants(False).dedupe(threshold=0.7, merge=False).collect()
    assert out.get_column("id").to_list() == ["policy-file", "office"]
    out = refund_variants(False).dedupe(threshold=0.7).collect()
    assert out.get_column("id").to_list() == ["forum-thread", "office"]


def test_a_high_threshold_keeps_variants_apart() -> None:
    out = refund_variants(False).dedupe(threshold=1.0).collect()
    assert out.height == 3
    normalised = refund_variants(False).dedupe(threshold=1.0, normalize=["case"])
    assert normalised.collect().height == 3  # "." and "!" still differ
    assert "jaccard>=0.9" in refund_variants(False).dedupe(threshold=0.9).explain()


def test_near_dedupe_reads_every_row_even_when_optimized() -> None:
    cf = refund_variants(False).dedupe(threshold=0.7).filter(pl.col("role") == "document")
    plain = cf.collect(optimizations=OptFlags.none())
    assert cf.collect().equals(plain)
    assert cf.select("id").collect().get_column("id").to_list() == ["forum-thread", "office"]


@st.composite
def items_with_copies(draw: st.DrawFn) -> list[ContextItem]:
    """Drawn items and 1 to 3 copies of some of them, with other ids and governance fields.

    A copy has the payload of its original, a text with words (a duplicate for
    the dedupe), and
    its own trust, sensitivity, retention and priority, so that merges decide
    between different values.
    """
    items = draw(items_strategy(min_size=1, max_size=8))
    # The dedupe merges texts that have words: copies are made of such items.
    texts = [item for item in items if item.payload.kind == "text" and item.payload.text]
    if not texts:
        words = draw(st.lists(st.sampled_from(WORDS), min_size=2, max_size=5))
        text = {"kind": "text", "text": " ".join(words)}
        fields = items[0].model_dump(exclude={"content_hash"}) | {"id": "t", "payload": text}
        texts = [ContextItem.model_validate(fields)]
        items.append(texts[0])
    originals = draw(st.lists(st.sampled_from(texts), min_size=1, max_size=3))
    for k, original in enumerate(originals):
        copy = original.model_dump() | {
            "id": f"copy{k}",
            "trust": draw(st.sampled_from(list(Trust))),
            "sensitivity": draw(st.sampled_from(list(Sensitivity))),
            "retention": draw(st.sampled_from(list(Retention))),
            "priority": draw(st.integers(-2, 3)),
        }
        items.insert(draw(st.integers(0, len(items))), ContextItem.model_validate(copy))
    return items


@reaching(0.8, label="merged")
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(items=items_with_copies(), seed=st.randoms(use_true_random=False))
def test_near_merges_are_conservative_and_order_independent(
    items: list[ContextItem], seed: random.Random
) -> None:
    shuffled = list(items)
    seed.shuffle(shuffled)
    governed = list(MERGE_GOVERNED)
    a = CognitionFrame(items).dedupe(threshold=0.5).collect().sort("id")
    b = CognitionFrame(shuffled).dedupe(threshold=0.5).collect().sort("id")
    assert_frame_equal(a.select(governed), b.select(governed))
    source = CognitionFrame(items).collect()
    for row in a.iter_rows(named=True):
        members = source.filter(pl.col("id").is_in([row["id"], *row["merged_ids"]]))
        assert row["priority"] == members["priority"].max()
        if "untrusted" in members["trust"].cast(pl.String).to_list():
            assert row["trust"] == "untrusted"  # a trusted copy never raises trust
        if row["merged_ids"]:
            reached("merged")


def test_templated_texts_in_large_buckets_still_join_one_group() -> None:
    template = "Your order {} has shipped and will arrive within five working days."
    texts = [template.format(f"#{i:05d}") for i in range(400)]  # buckets far over MAX_BUCKET
    texts.append("Completely unrelated: the office in Lyon is closed on Monday.")
    labels = near_duplicate_labels(texts, 0.7)
    assert set(labels[:400].tolist()) == {0}
    assert labels[400] == 400


def test_every_bin_of_a_short_text_is_filled() -> None:
    # Two-byte texts have one shingle: densification fills the other 127 bins,
    # by probing and, when probes keep missing, by rotation.
    texts = [f"{a}{b}" for a in "abcdefghijklmnopqrstuvwxyz" for b in "0123456789"] * 8
    sig = minhash_signatures(texts)
    assert not (sig == np.iinfo(np.uint64).max).any()
    assert (sig == sig[:, :1]).all()  # one shingle: every bin holds its hash
