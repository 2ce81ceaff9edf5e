"""The manifest page of the docs names every reason and the conversation header fields."""

from __future__ import annotations

import re
from pathlib import Path

from cognoxium.packing import PackManifest
from cognoxium.packing._model import Reason

PAGE = Path(__file__).resolve().parents[1] / "docs" / "concepts" / "manifests.md"
ROW = re.compile(r"^\| `([a-z_]+)` \|", re.M)


def _table(heading: str) -> list[str]:
    """The first-column names of the table under ``heading``, in order."""
    text = PAGE.read_text(encoding="utf-8")
    section = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    return ROW.findall(section)


def test_the_reason_table_is_the_reason_enum() -> None:
    assert _table("Reasons") == [reason.value for reason in Reason]


def test_the_conversation_header_fields_are_documented_manifest_fields() -> None:
    fields = _table("Header fields of conversation packs")
    assert fields == ["order", "gaps", "gap_records", "target"]
    assert set(fields) <= set(PackManifest.model_fields)
