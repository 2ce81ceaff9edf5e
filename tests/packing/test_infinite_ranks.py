"""A rank that is not a finite number never reaches a manifest as one.

A manifest writes each item's rank as a JSON number, which has no infinity.
NaN and null ranks read as unranked; an infinite rank is refused with a
RankError naming the item, by every path that packs (a frame's pack, a kept
scope with a rank of its own, a scope of many requests); and the recency
rank caps a score that would overflow, so it never produces one.
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime

import polars as pl
import pytest

from cognoxium.exceptions import RankError
from cognoxium.frame.frame import CognitionFrame
from cognoxium.items.validation import conform
from cognoxium.packing.options import PackOptions
from cognoxium.packing.packer import PackScope, pack, pack_reusing
from cognoxium.retrieval.ranking import recency_expr

WHEN = datetime(2024, 6, 1, tzinfo=UTC)


def _records() -> list[dict[str, str]]:
    return [
        {
            "id": f"m{i}",
            "role": "user",
            "text": f"message {i}",
            "created_at": f"2024-01-0{i + 1}T00:00:00Z",
        }
        for i in range(4)
    ]


@pytest.mark.parametrize("value", [float("inf"), float("-inf")])
def test_a_frame_with_an_infinite_rank_is_refused_naming_the_item(value: float) -> None:
    frame = CognitionFrame(_records()).with_columns(
        rank=pl.when(pl.col("id") == "m2").then(value).otherwise(1.0)
    )
    with pytest.raises(RankError, match=rf"item 'm2' has rank {value}: a rank must be a finite"):
        frame.pack(1000, as_of=WHEN)


def test_a_kept_scope_refuses_an_infinite_rank_given_for_one_pack() -> None:
    df = conform(pl.DataFrame(_records()))
    with pytest.raises(RankError, match="item 'm3' has rank inf"):
        pack_reusing(
            {},
            lambda: df,
            1000,
            PackOptions(as_of=WHEN),
            rank=pl.Series([1.0, 2.0, 3.0, float("inf")]),
        )
    scope = PackScope(df)
    with pytest.raises(RankError, match="item 'm0' has rank -inf"):
        scope.outcome(1000, PackOptions(as_of=WHEN), rank=pl.Series([float("-inf"), 1.0, 2.0, 3.0]))


def test_nan_and_null_ranks_still_read_as_unranked() -> None:
    df = conform(pl.DataFrame(_records()))
    ranked = df.with_columns(rank=pl.Series([float("nan"), None, 2.0, 1.0]))
    manifest = pack(ranked, 1000, PackOptions(as_of=WHEN)).manifest
    entries = json.loads(manifest.to_json())["entries"]
    assert {e["id"]: e["rank"] for e in entries} == {"m0": None, "m1": None, "m2": 2.0, "m3": 1.0}


def test_recency_caps_a_score_that_would_overflow_at_the_largest_float() -> None:
    created = pl.DataFrame({"created_at": [datetime(2024, 1, d, tzinfo=UTC) for d in (1, 2, 3)]})
    scores = created.select(
        recency_expr(half_life=1.0, reference=datetime(2023, 1, 1, tzinfo=UTC))
    ).to_series()
    assert scores.to_list() == [sys.float_info.max] * 3
    near = created.select(
        recency_expr(half_life=86400.0, reference=datetime(2024, 1, 2, tzinfo=UTC))
    )
    assert near.to_series().to_list() == [0.5, 1.0, 2.0]


def test_a_recency_rank_far_past_its_reference_packs_and_writes_its_manifest() -> None:
    frame = CognitionFrame(_records()).rank(
        "recency", half_life=1.0, reference=datetime(2023, 1, 1, tzinfo=UTC)
    )
    result = frame.pack(1000, as_of=WHEN)
    entries = json.loads(result.manifest.to_json())["entries"]
    assert [e["rank"] for e in entries] == [sys.float_info.max] * 4
    assert sorted(result.ids) == ["m0", "m1", "m2", "m3"]
