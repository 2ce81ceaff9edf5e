"""Quarantine and demote: their columns, their barriers, and what pack makes of them."""

from __future__ import annotations

from datetime import UTC, datetime

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from cognoxium import CognitionFrame, OptFlags
from cognoxium._plan import Demote, Filter, Quarantine, walk
from cognoxium.exceptions import PackError, PlanError

AS_OF = datetime(2024, 2, 1, tzinfo=UTC)
T0 = "2024-01-01T00:00:00Z"


def frame() -> CognitionFrame:
    return CognitionFrame(
        [
            {
                "id": "policy",
                "role": "system",
                "text": "Refunds within 30 days.",
                "trust": "trusted",
                "retention": "required",
                "created_at": T0,
            },
            {
                "id": "forum",
                "role": "document",
                "text": "Refund window is 30 days.",
                "sources": [{"uri": "https://forum.example/t/7", "kind": "web"}],
                "retention": "required",
                "priority": 3,
                "created_at": T0,
                "metadata": {"site": "forum"},
            },
            {
                "id": "q",
                "role": "user",
                "text": "What is the refund window?",
                "trust": "trusted",
                "retention": "preferred",
                "created_at": T0,
            },
        ]
    )


def test_quarantine_records_the_first_reason_and_pack_excludes_it() -> None:
    held = (
        frame()
        .quarantine("metadata.site = 'forum'", reason="forum")
        .quarantine(pl.col("role") == "document", reason="documents")
    )
    assert held.collect()["quarantine_reason"].to_list() == [None, "forum", None]
    with pytest.raises(PackError, match=r"required items \['forum'\] are quarantined"):
        held.pack(500, as_of=AS_OF)
    result = held.demote(pl.col("id") == "forum", retention="optional").pack(500, as_of=AS_OF)
    assert result.ids == ["policy", "q"]
    entry = result.manifest.to_polars().filter(pl.col("id") == "forum").row(0, named=True)
    assert (entry["reason"], entry["detail"]) == ("quarantined", "forum")
    assert entry["provenance"] == ["https://forum.example/t/7"]
    assert entry["tokens"] is None


def test_demote_only_weakens_and_lowers() -> None:
    out = frame().demote(pl.col("role") != "system", retention="preferred", priority_delta=-1)
    rows = out.collect().select("id", "retention", "priority").rows()
    # optional stays optional; required becomes preferred; priorities drop by one
    assert rows == [("policy", "required", 0), ("forum", "preferred", 2), ("q", "preferred", -1)]
    nulls = frame().demote(pl.lit(None, pl.Boolean), retention="optional").collect()
    assert_frame_equal(nulls, frame().collect())


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"retention": "forever"}, "unknown retention"),
        ({"priority_delta": 2}, "must be <= 0"),
        ({}, "needs a retention or a negative priority_delta"),
        ({"priority_delta": 1.5}, "must be an int"),
    ],
)
def test_bad_demotes_fail_at_the_call(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(PlanError, match=message):
        frame().demote(pl.col("priority") > 0, **kwargs)  # type: ignore[arg-type]


def test_bad_quarantines_fail_at_the_call() -> None:
    with pytest.raises(PlanError, match="reason"):
        frame().quarantine(pl.col("priority") > 0, reason=" ")
    with pytest.raises(PlanError, match="nokey"):
        frame().quarantine("metadata.nokey = 1")
    with pytest.raises(PlanError, match="colour"):
        frame().quarantine(pl.col("colour") == "red")


def test_filters_never_cross_quarantine_or_demote() -> None:
    # The filter reads what the barrier writes: run below it, it would see the old values.
    demoted = frame().demote(pl.col("id") == "forum", retention="optional")
    query = (
        demoted.filter(pl.col("retention") == "required")
        .quarantine(pl.col("id") == "policy", reason="held")
        .filter(pl.col("quarantine_reason").is_null())
    )
    optimized = query.lazy()  # the optimized plan lowers to this
    nodes = list(walk(query._optimized(None)))
    kinds = [type(n) for n in nodes]
    assert kinds.index(Filter) < kinds.index(Quarantine) < kinds.index(Demote)
    expected = query.collect(OptFlags.none())
    assert_frame_equal(query.collect(), expected)
    assert_frame_equal(optimized.collect(), expected)
    assert expected["id"].to_list() == []
    assert query.filter(pl.col("id") == "q").collect().height == 0
    assert demoted.filter(pl.col("retention") == "required").collect()["id"].to_list() == ["policy"]


def test_explain_names_the_governance_steps() -> None:
    text = (
        frame()
        .quarantine(pl.col("id") == "q", reason="x")
        .demote(pl.col("id") == "q", priority_delta=-1)
        .explain(optimized=False)
    )
    assert "Demote" in text
    assert "Quarantine" in text
    assert "reason='x'" in text
