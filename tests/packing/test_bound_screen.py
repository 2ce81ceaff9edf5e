"""Bounds proven against the budget left: a text is read only until it has more words than fit.

When the budget left is small, :meth:`UnitCosts.ensure_bounds` first tests
whether each text has enough words to exceed it
(:meth:`TokenProfile.words_at_least`), and computes the full lower bound only
of the units that may still fit; every decision against the budget is the one
the full bound gives, so packs and manifests do not change.
"""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cognoxium.items.records import records_to_frame
from cognoxium.packing._costing import KnownCosts, UnitCosts, render
from cognoxium.packing._model import UNSET
from cognoxium.packing._policies import review_policies
from cognoxium.packing._units import Units
from cognoxium.packing.options import PackOptions
from cognoxium.packing.packer import pack
from cognoxium.tokens.profiles import MAX_WORDS_TESTED, clear_cache, get_profile

AS_OF = datetime(2024, 6, 1, tzinfo=UTC)
WORDS = "the a to and of I you it is that in for on we this with".split()
# every kind of whitespace the word patterns tell apart: spaces, tabs, CR/LF, Unicode spaces
TEXT = st.text(alphabet=st.sampled_from(["a", "é", "1", ".", " ", "\t", "\r", "\n", "\u00a0"]))


@pytest.mark.parametrize("name", ["cl100k_base", "o200k_base"])
@settings(max_examples=200, deadline=None)
@given(texts=st.lists(TEXT, min_size=1, max_size=20), words=st.integers(1, 6))
def test_words_at_least_agrees_with_the_word_count_of_the_lower_bound(
    name: str, texts: list[str], words: int
) -> None:
    profile = get_profile(name)
    assert profile.word_bound_pattern is not None
    df = pl.DataFrame({"text": texts})
    test = profile.words_at_least("text", words)
    assert test is not None
    counted = df.select(pl.col("text").str.count_matches(profile.word_bound_pattern) >= words)
    assert df.select(test).to_series().to_list() == counted.to_series().to_list()


def test_words_at_least_refuses_a_count_outside_its_range() -> None:
    profile = get_profile("cl100k_base")
    for words in (0, MAX_WORDS_TESTED + 1):
        with pytest.raises(ValueError, match="words must be in"):
            profile.words_at_least("text", words)
    assert get_profile("approximate").words_at_least("text", 2) is None


def costs_of(texts: list[str], known: KnownCosts | None = None) -> UnitCosts:
    df = records_to_frame(
        [{"id": f"m{i}", "role": "user", "text": text} for i, text in enumerate(texts)]
    )
    profile = get_profile("cl100k_base")
    rendering = render(df, profile, review_policies(df, None))
    return UnitCosts(profile, rendering, Units(n_units=df.height), known=known)


def test_a_small_budget_left_proves_only_that_each_text_exceeds_it() -> None:
    texts = ["one two", "a b c d e f g h", "alone", "x " * 50]
    known = KnownCosts(len(texts), len(texts))
    costs = costs_of(texts, known)
    units = np.arange(len(texts))
    full = [costs.profile.framing("user") + len(t.split()) for t in texts]  # 4 + words
    costs.ensure_bounds(units, 5)  # a user message costs 4 + its tokens: 2 words exceed 5
    # the texts of two words or more are proven over 5 by 2 words, not by all their words
    assert costs.bound.tolist() == [6, 6, full[2], 6]
    assert costs.screened.tolist() == [True, True, False, True]
    assert known.bound.tolist() == [UNSET, UNSET, full[2], UNSET]  # only full bounds are shared
    costs.ensure_bounds(units[:2], 7)  # a larger budget left: the weaker bounds do not decide
    assert costs.bound.tolist() == [full[0], full[1], full[2], 6]
    assert costs.screened.tolist() == [False, False, False, True]
    costs.ensure_bounds(units)  # no budget given: every bound is the full one
    assert costs.bound.tolist() == full
    assert not costs.screened.any()
    assert known.bound.tolist() == full


def test_a_budget_left_beyond_the_words_tested_gets_the_full_bounds() -> None:
    texts = ["one two", "a b c"]
    costs = costs_of(texts)
    costs.ensure_bounds(np.arange(2), 4 + MAX_WORDS_TESTED)
    assert costs.bound.tolist() == [6, 7]
    assert not costs.screened.any()


def test_a_long_chat_packs_as_a_count_of_every_message_would() -> None:
    # The newest messages fill the budget but 5 tokens; an older message costs 4 + its
    # words, so only a one-word message could still fit, and there is one, far back. The
    # history is longer than the frames whose bounds are all proven at once.
    rng = np.random.default_rng(4)
    texts = [" ".join(rng.choice(WORDS, size=int(k))) for k in rng.integers(2, 12, size=6000)]
    texts[10] = "alone"
    df = records_to_frame(
        [
            {
                "id": f"m{i:05d}",
                "role": "user",
                "text": text,
                "created_at": f"2024-01-01T00:00:{i % 60:02d}Z",
            }
            for i, text in enumerate(texts)
        ]
    )
    profile = get_profile("cl100k_base")
    assert profile.count(texts).tolist() == [len(t.split()) for t in texts]  # a token a word
    costs = [profile.framing("user") + len(t.split()) for t in texts]
    newest = np.cumsum(costs[::-1])
    budget = int(newest[newest < 400][-1]) + 5 + profile.tokens_per_pack
    clear_cache()
    packed = pack(
        df.with_columns(rank=pl.int_range(pl.len()).cast(pl.Float64)),
        budget,
        PackOptions(as_of=AS_OF),
    )
    taken = len(newest[newest < 400])
    expected = [f"m{i:05d}" for i in (10, *range(len(texts) - taken, len(texts)))]
    assert packed.ids == expected
    assert packed.manifest.totals.counted == taken + 1
