"""Packs over a kept scope equal pack() over the same rows, call after call.

:meth:`CognitionFrame.pack` on a frame that is an in-memory source keeps the
source's :class:`~cognoxium.packing.packer.PackScope` (through
:func:`~cognoxium.packing.packer.pack_reusing`); every pack must still be
exactly what :func:`~cognoxium.packing.packer.pack` gives over the frame's
rows, whatever was packed before.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import polars as pl
import pytest

from cognoxium.exceptions import BudgetError, PackError, SchemaError
from cognoxium.frame.frame import CognitionFrame
from cognoxium.governance.policies import BoundaryPolicy
from cognoxium.items.validation import conform
from cognoxium.packing.options import PackOptions
from cognoxium.packing.packer import PackScope, pack, pack_reusing
from cognoxium.testing import assert_pack_equal

WHEN = datetime(2024, 6, 1, tzinfo=UTC)


def _rows() -> pl.DataFrame:
    roles = ["system", "assistant", "user", "assistant", "user", "assistant", "user", "tool"]
    return conform(
        pl.DataFrame(
            {
                "id": [f"m{i}" for i in range(8)],
                "role": roles,
                "text": [
                    "Be brief.",
                    "Hello!",
                    "What is the refund window?",
                    "word " * 60,
                    "And shipping?",
                    "Free over 50 euros.",
                    "Thanks",
                    "lookup result",
                ],
                "retention": ["required"] + ["optional"] * 7,
                "priority": [0, 1, 5, 2, 4, 3, 0, 1],
                "created_at": [
                    "2024-01-01T00:00:00Z",
                    "2024-01-02T00:00:00Z",
                    "2024-01-03T00:00:00Z",
                    "2024-01-04T00:00:00Z",
                    "2024-05-01T00:00:00Z",
                    "2024-05-02T00:00:00Z",
                    "2024-07-01T00:00:00Z",
                    "2024-01-05T00:00:00Z",
                ],
                "group_id": [None, None, None, None, None, None, None, "g"],
            }
        )
    )


@pytest.mark.parametrize(
    "options",
    [
        {"budget": 60},
        {"budget": 200, "label": "r1"},
        {"budget": 80, "turns": True, "start_on": "user"},
        {"budget": 90, "reserve": 10, "as_of": WHEN + timedelta(days=40)},
        {"budget": 60, "profile": "o200k_base"},
        {"budget": 200, "overflow": "truncate"},
    ],
)
def test_frame_pack_equals_pack_over_its_rows_after_other_packs(options: dict[str, Any]) -> None:
    df = _rows()
    frame = CognitionFrame(df)
    settings = {"as_of": WHEN, **options}
    budget = settings.pop("budget")
    # Other packs first, so the kept scope holds counts, bounds and exclusions.
    frame.pack(500, as_of=WHEN)
    frame.pack(30, as_of=WHEN - timedelta(days=100), turns=True)
    label = settings.pop("label", None)
    for _ in range(2):
        assert_pack_equal(
            frame.pack(budget, label=label, **settings),
            pack(df, budget, PackOptions(**settings), label=label),
        )


def test_pack_reusing_keeps_one_scope_per_profile_and_reads_the_rows_once() -> None:
    df = _rows()
    kept: dict[str, Any] = {}
    reads: list[int] = []

    def rows() -> pl.DataFrame:
        reads.append(1)
        return df

    for profile in ("cl100k_base", "o200k_base", "cl100k_base"):
        got = pack_reusing(kept, rows, 70, PackOptions(profile=profile, as_of=WHEN))
        assert_pack_equal(got, pack(df, 70, PackOptions(profile=profile, as_of=WHEN)))
    assert len(reads) == 2
    assert sorted(type(v).__name__ for v in kept.values()) == ["PackScope", "PackScope"]
    assert all(isinstance(v, PackScope) and v.df is df for v in kept.values())


def test_pack_reusing_checks_the_options_before_reading_the_rows() -> None:
    kept: dict[str, Any] = {}

    def rows() -> pl.DataFrame:
        raise AssertionError("the rows must not be read for a bad request")

    with pytest.raises(PackError, match="budget"):
        pack_reusing(kept, rows, -1, PackOptions(as_of=WHEN))
    with pytest.raises(PackError, match="as_of"):
        pack_reusing(kept, rows, 10, PackOptions(as_of=datetime(2024, 6, 1)))
    assert kept == {}


def test_pack_reusing_keeps_no_scope_when_the_rows_are_bad() -> None:
    bad = _rows().with_columns(pl.lit("same").alias("id"))
    kept: dict[str, Any] = {}
    with pytest.raises(PackError, match="id"):
        pack_reusing(kept, lambda: bad, 50, PackOptions(as_of=WHEN))
    assert kept == {}
    with pytest.raises(SchemaError):
        pack_reusing(kept, lambda: bad.drop("role"), 50, PackOptions(as_of=WHEN))
    assert kept == {}


def test_a_frame_pack_raises_what_pack_raises_and_packs_after() -> None:
    df = _rows()
    frame = CognitionFrame(df)
    with pytest.raises(BudgetError) as kept_error:
        frame.pack(5, as_of=WHEN)
    with pytest.raises(BudgetError) as plain_error:
        pack(df, 5, PackOptions(as_of=WHEN))
    assert str(kept_error.value) == str(plain_error.value)
    assert kept_error.value.costs == plain_error.value.costs == {"m0": 7}
    assert_pack_equal(frame.pack(60, as_of=WHEN), pack(df, 60, PackOptions(as_of=WHEN)))


def test_packs_at_many_times_stay_right() -> None:
    """A scope forgets old ``as_of`` exclusions after a while; packs stay those of pack()."""
    df = _rows()
    frame = CognitionFrame(df)
    times = [WHEN - timedelta(days=200) + timedelta(days=7 * k) for k in range(40)]
    for when in times + times[:3]:
        assert_pack_equal(frame.pack(70, as_of=when), pack(df, 70, PackOptions(as_of=when)))


def test_a_frame_pack_with_a_policy_or_a_plan_packs_its_collected_rows() -> None:
    df = _rows()
    frame = CognitionFrame(df)
    secret = df.with_columns(
        pl.when(pl.col("id") == "m5")
        .then(pl.lit("restricted"))
        .otherwise(pl.col("sensitivity").cast(pl.String))
        .cast(df.schema["sensitivity"])
        .alias("sensitivity")
    )
    policy = BoundaryPolicy(max_sensitivity="internal")
    with_policy = CognitionFrame(secret).pack(200, as_of=WHEN, policy=policy)
    assert_pack_equal(with_policy, pack(secret, 200, PackOptions(as_of=WHEN), policy=policy))
    assert "m5" not in with_policy.ids
    narrowed = frame.filter(pl.col("priority") > 1)
    assert_pack_equal(
        narrowed.pack(70, as_of=WHEN),
        pack(df.filter(pl.col("priority") > 1), 70, PackOptions(as_of=WHEN)),
    )
    assert_pack_equal(frame.pack(70, as_of=WHEN), pack(df, 70, PackOptions(as_of=WHEN)))
