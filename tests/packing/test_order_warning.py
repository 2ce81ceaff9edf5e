"""A chat history sorted newest first warns that a pack without a rank reads it backwards.

``frame.sort("created_at", descending=True).limit(10)`` is the Polars idiom for
"the latest ten"; a pack without a rank takes the conversation newest first from
the last row in input order back, so it kept the oldest of the ten and sent them
in reverse, silently.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import polars as pl
import pytest

from cognoxium import CognitionFrame
from cognoxium.exceptions import OrderWarning
from cognoxium.formats.openai import from_openai_messages

AS_OF = datetime(2026, 1, 1, tzinfo=UTC)
START = datetime(2025, 12, 1, tzinfo=UTC)


def chat(turns: int = 12) -> CognitionFrame:
    return CognitionFrame([
        {"id": f"t{i}", "role": "user" if i % 2 == 0 else "assistant",
         "text": f"message number {i}", "created_at": START + timedelta(minutes=i)}
        for i in range(turns)
    ])  # fmt: skip


def interleaved() -> CognitionFrame:
    """Two conversations in turn, each in order, the second a month older than the first."""
    return CognitionFrame([
        {"id": f"{c}{i}", "role": "user" if i % 2 == 0 else "assistant", "text": f"{c} {i}",
         "created_at": START - timedelta(days=30 * k) + timedelta(minutes=i)}
        for i in range(6)
        for k, c in enumerate("ab")
    ])  # fmt: skip


def test_the_latest_sorted_newest_first_warns_where_the_pack_is_called() -> None:
    latest = chat().sort("created_at", descending=True).limit(6)
    with pytest.warns(OrderWarning, match="sort by created_at ascending") as caught:
        packed = latest.pack(30, as_of=AS_OF)
    assert caught[0].filename == __file__
    assert packed.ids == ["t8", "t7", "t6"]  # what it warns of: the oldest, in reverse
    fixed = latest.sort("created_at")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert fixed.pack(30, as_of=AS_OF).ids == ["t9", "t10", "t11"]


@pytest.mark.parametrize(
    "frame",
    [
        pytest.param(lambda: chat(), id="in order"),
        pytest.param(
            lambda: from_openai_messages(
                [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
            ),
            id="imported",
        ),
        pytest.param(
            lambda: chat().sort("created_at", descending=True).rank("bm25", query="number 3"),
            id="ranked",
        ),
        pytest.param(
            lambda: chat().with_columns(created_at=pl.lit(START, pl.Datetime("us", "UTC"))),
            id="one time",
        ),
        pytest.param(lambda: interleaved(), id="two conversations interleaved, each in order"),
    ],
)
def test_no_warning_for_a_chat_in_order_ranked_or_without_distinct_times(
    frame: Callable[[], CognitionFrame],
) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        frame().pack(60, as_of=AS_OF)
