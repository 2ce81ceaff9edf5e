"""@reaching fails a property whose drawn examples seldom reach its check."""

from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tests.reach import SHARES, reached, reaching


def test_a_property_that_seldom_reaches_its_check_fails() -> None:
    @reaching(0.8)
    @settings(max_examples=60, deadline=None, database=None)
    @given(st.integers(0, 9))
    def odd_only(n: int) -> None:
        if n % 2 == 0:
            return
        reached("odd")

    with pytest.raises(AssertionError, match=r"odd_only: \d+/\d+ \(\d+%, at least 80%\)"):
        odd_only()
    tally = SHARES.pop("odd_only")
    assert 0 < tally.reached < tally.examples
    assert tally.labels == {"odd": tally.reached}


def test_examples_rejected_by_assume_are_not_counted() -> None:
    @reaching(1.0)
    @settings(max_examples=60, deadline=None, database=None)
    @given(st.integers(0, 9))
    def odd_assumed(n: int) -> None:
        assume(n % 2 == 1)
        reached()

    odd_assumed()
    tally = SHARES.pop("odd_assumed")
    assert tally.examples == tally.reached > 0


def test_reached_outside_a_property_and_reaching_below_given_are_errors() -> None:
    with pytest.raises(RuntimeError, match="@reaching"):
        reached()
    with pytest.raises(TypeError, match="above @given"):
        reaching(0.8)(lambda: None)
    with pytest.raises(ValueError, match="share"):
        reaching(0.0)


def test_with_a_label_only_the_examples_that_reached_it_count() -> None:
    @reaching(0.8, label="odd")
    @settings(max_examples=60, deadline=None, database=None)
    @given(st.integers(0, 9))
    def both_branches(n: int) -> None:
        reached("odd" if n % 2 else "even")

    with pytest.raises(AssertionError, match=r"reached 'odd' \(\d+%, at least 80%\)"):
        both_branches()
    tally = SHARES.pop("both_branches")
    assert tally.reached == tally.labels["odd"] < tally.examples
