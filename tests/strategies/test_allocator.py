"""The budget allocator: largest-remainder split in proportion to confidence times quality."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cognoxium.exceptions import StrategyError
from cognoxium.strategies import (
    ArceStrategy,
    BreadthDepthNavigatorStrategy,
    BudgetAllocator,
    SimpleKeywordStrategy,
    StrategySelection,
    split_budget,
)


@settings(max_examples=100, deadline=None)  # no per-example time limit on a loaded machine
@given(
    budget=st.integers(min_value=0, max_value=100_000),
    weights=st.lists(
        st.one_of(
            st.just(0.0),
            st.floats(min_value=0.0, max_value=1.0, allow_nan=False, allow_infinity=False),
        ),
        min_size=1,
        max_size=8,
    ),
)
def test_allocation_sums_exactly_to_the_budget(budget: int, weights: list[float]) -> None:
    named = {f"s{i}": w for i, w in enumerate(weights)}
    shares = split_budget(budget, named)
    assert list(shares) == list(named)
    assert sum(shares.values()) == budget
    assert all(isinstance(v, int) and v >= 0 for v in shares.values())
    # Quota property of the largest remainder method: each share is its exact
    # quota rounded down or up.
    exact = {n: Fraction(w) for n, w in named.items()}
    total = sum(exact.values()) or None
    for name, share in shares.items():
        quota = budget * exact[name] / total if total else Fraction(budget, len(named))
        assert quota - 1 < share < quota + 1
    # Deterministic, and independent of the order the names are given in.
    assert split_budget(budget, dict(reversed(list(named.items())))) == shares
    assert split_budget(budget, named) == shares


def test_allocation_is_proportional_to_confidence_times_quality() -> None:
    picks = [
        StrategySelection(ArceStrategy(), 1.0),  # 0.95
        StrategySelection(BreadthDepthNavigatorStrategy(), 0.5),  # 0.425
        StrategySelection(SimpleKeywordStrategy(), 0.5),  # 0.15
    ]
    shares = BudgetAllocator().allocate(1525, picks)
    assert shares == {"arce": 950, "breadth-depth-navigator": 425, "simple-keyword": 150}


def test_allocation_remainder_goes_to_largest_fraction_then_name() -> None:
    assert split_budget(2, {"b": 1.0, "a": 1.0, "c": 1.0}) == {"b": 1, "a": 1, "c": 0}
    assert split_budget(7, {"x": 3.0, "y": 1.0}) == {"x": 5, "y": 2}


def test_allocation_rejects_bad_input() -> None:
    with pytest.raises(StrategyError, match="non-negative int"):
        split_budget(-1, {"a": 1.0})
    with pytest.raises(StrategyError, match="weight of 'a'"):
        split_budget(10, {"a": float("inf")})
    with pytest.raises(StrategyError, match="selected twice"):
        BudgetAllocator().allocate(
            10, [StrategySelection(ArceStrategy(), 1.0), StrategySelection(ArceStrategy(), 1.0)]
        )
