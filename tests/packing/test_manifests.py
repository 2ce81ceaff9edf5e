"""Reading manifests back and summarising them."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest

from cognoxium import CognitionFrame
from cognoxium.exceptions import RecordError
from cognoxium.packing.manifests import NO_SOURCE, read_manifests, summarize_manifests

AS_OF = datetime(2030, 1, 1, tzinfo=UTC)


def frame() -> CognitionFrame:
    return CognitionFrame(
        [
            {"id": "sys", "role": "system", "text": "Be brief.", "retention": "required"},
            {
                "id": "doc",
                "role": "document",
                "text": "Refunds take five days. " * 20,
                "sources": [{"uri": "kb://refunds"}, {"uri": "kb://faq"}],
            },
            {
                "id": "old",
                "role": "user",
                "text": "hello",
                "expires_at": "2001-01-01T00:00:00Z",
                "created_at": "2000-01-01T00:00:00Z",
            },
            {"id": "q", "role": "user", "text": "How long do refunds take?", "rank": 1.0},
        ]
    )


def test_read_manifests_round_trips_byte_identically(tmp_path: Path) -> None:
    cf = frame()
    lines = [cf.pack(b, as_of=AS_OF, label=f"b{b}").manifest.to_json() for b in (30, 60, 400)]
    path = tmp_path / "manifests.jsonl"
    path.write_text("\n".join(lines) + "\n\n")
    manifests = read_manifests(path)
    assert [m.to_json() for m in manifests] == lines
    assert manifests[0].to_polars().schema == cf.pack(30, as_of=AS_OF).manifest.to_polars().schema


def test_summary_counts_and_sources(tmp_path: Path) -> None:
    cf = frame()
    manifests = [cf.pack(b, as_of=AS_OF, label=f"b{b}").manifest for b in (30, 400)]
    summary = summarize_manifests(manifests, items=cf.collect())
    assert summary["manifests"] == 2
    assert summary["reasons"] == {"expired": 2, "over_budget": 1, "required": 2, "selected": 3}
    assert summary["decisions"] == {"excluded": 3, "included": 5}
    doc_tokens = manifests[1].to_polars().filter(pl.col("id") == "doc")["tokens"].item()
    # A document with two sources counts under each.
    assert summary["by_source"]["kb://refunds"] == {
        "included": 1,
        "included_tokens": doc_tokens,
        "items": 2,
    }
    assert summary["by_source"]["kb://faq"] == summary["by_source"]["kb://refunds"]
    assert summary["by_source"][NO_SOURCE]["items"] == 6
    assert summary["by_tier"]["required"]["included"] == 2
    used = [m.used_tokens for m in manifests]
    assert summary["budget"]["used_tokens"] == sum(used)
    assert summary["budget"]["used_fraction"]["max"] == pytest.approx(
        max(used[0] / 30, used[1] / 400)
    )
    assert [m["label"] for m in summary["per_manifest"]] == ["b30", "b400"]
    empty = summarize_manifests([])
    assert empty["manifests"] == 0
    assert empty["budget"]["utilization"] is None
    assert empty["reasons"] == {}


def test_read_errors_name_line_and_field(tmp_path: Path) -> None:
    good = frame().pack(400, as_of=AS_OF).manifest.to_json()
    data = json.loads(good)
    data["entries"][2]["extra"] = 1
    path = tmp_path / "m.jsonl"
    path.write_text(good + "\n" + json.dumps(data) + "\n")
    with pytest.raises(RecordError) as info:
        read_manifests(path)
    assert (info.value.line, info.value.field) == (2, "entries[2].extra")
    data["entries"][2].pop("extra")
    data["entries"][1]["id"] = None
    path.write_text(json.dumps([json.loads(good), data]))
    with pytest.raises(RecordError) as info:
        read_manifests(path)
    assert (info.value.row, info.value.field) == (1, "entries[1].id")
    path.write_text("[1]")
    with pytest.raises(RecordError, match="must be a JSON object"):
        read_manifests(path)
    path.write_text("")
    assert read_manifests(path) == []
