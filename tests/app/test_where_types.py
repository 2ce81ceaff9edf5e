"""A request's where clause with a type mismatch fails as a typed error, not Polars' text."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from cognoxium.app.batch import Request, scope_rows
from cognoxium.app.cli import EXIT_BAD_INPUT, EXIT_OK, app
from cognoxium.exceptions import RecordError
from cognoxium.frame.frame import CognitionFrame

SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sample"


@pytest.fixture(scope="module")
def store() -> CognitionFrame:
    return CognitionFrame.read_jsonl(SAMPLE / "items.jsonl")


def test_a_where_with_a_text_function_on_an_enumeration_keeps_its_rows(
    store: CognitionFrame,
) -> None:
    rows = scope_rows(store, Request(id="r", budget=10, where="lower(role) = 'user'"))
    expected = scope_rows(store, Request(id="r", budget=10, where="role = 'user'"))
    assert rows.height > 0
    assert rows["id"].to_list() == expected["id"].to_list()


@pytest.mark.parametrize(
    ("where", "part"),
    [
        ("priority = 'high'", "column priority is a number (Int64)"),
        ("created_at > '2025-11-01'", "TIMESTAMP '2025-11-01'"),
    ],
)
def test_a_where_type_mismatch_names_the_request_field_and_types(
    store: CognitionFrame, where: str, part: str
) -> None:
    with pytest.raises(RecordError) as info:
        scope_rows(store, Request(id="r", budget=10, where=where))
    assert info.value.field == "where"
    assert part in str(info.value)
    assert "Polars" not in str(info.value)
    assert "ComputeError" not in str(info.value)


def _pack(requests: Path, out: Path) -> Any:
    """``cognoxium pack`` of the sample's items with ``requests``, into ``out``."""
    args = ["pack", str(SAMPLE / "items.jsonl"), str(requests), "--out", str(out), "--no-progress"]
    return CliRunner().invoke(app, args)


def test_pack_exits_2_with_the_typed_message(tmp_path: Path) -> None:
    requests = tmp_path / "requests.jsonl"
    lines = [
        {"id": "ok", "budget": 64, "where": "lower(role) = 'user'"},
        {"id": "bad", "budget": 64, "where": "priority = 'high'"},
    ]
    requests.write_text("".join(json.dumps(line) + "\n" for line in lines))
    result = _pack(requests, tmp_path / "out")
    assert result.exit_code == EXIT_BAD_INPUT, result.stderr
    assert "request 'bad'" in result.stderr
    assert "column priority is a number (Int64)" in result.stderr
    assert "ComputeError" not in result.stderr
    requests.write_text(json.dumps(lines[0]) + "\n")
    result = _pack(requests, tmp_path / "ok")
    assert result.exit_code == EXIT_OK, result.stderr
