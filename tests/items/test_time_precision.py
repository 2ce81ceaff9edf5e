"""A time finer than microseconds is refused wherever a time is read, never truncated.

Python's and pydantic's ISO 8601 parsers drop the digits past the sixth
(``...00.123456789Z`` became ``...00.123456Z``); a record, an item, a
source, a request's ``as_of`` and ``--as-of`` all refuse it with the same
message instead.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from cognoxium.app.batch import Request
from cognoxium.app.cli import EXIT_USAGE, app
from cognoxium.exceptions import PredicateError, RecordError
from cognoxium.frame.frame import CognitionFrame
from cognoxium.items.model import ContextItem

FINE = ["2025-01-01T00:00:00.1234567Z", "2025-01-01 00:00:00.123456789+01:00"]
SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sample"


def _record(**fields: Any) -> dict[str, Any]:
    return {"id": "a", "role": "user", "text": "x", "created_at": "2025-01-01T00:00:00Z"} | fields


@pytest.mark.parametrize("text", FINE)
@pytest.mark.parametrize("field", ["created_at", "valid_from", "expires_at"])
def test_an_item_time_is_refused(text: str, field: str) -> None:
    with pytest.raises(ValidationError, match=r"at most 6 fractional digits"):
        ContextItem(**_record(**{field: text}))
    with pytest.raises(RecordError, match=rf"field {field}: .*at most 6 fractional digits"):
        CognitionFrame([_record(**{field: text})])


@pytest.mark.parametrize("text", FINE)
def test_a_source_time_is_refused(text: str) -> None:
    record = _record(sources=[{"uri": "https://example.com", "retrieved_at": text}])
    with pytest.raises(RecordError, match=r"at most 6 fractional digits"):
        CognitionFrame([record])


@pytest.mark.parametrize("text", FINE)
def test_a_request_as_of_is_refused(text: str) -> None:
    with pytest.raises(ValidationError, match=r"at most 6 fractional digits"):
        Request(id="r", budget=100, as_of=text)


def test_microseconds_still_read_exactly() -> None:
    item = ContextItem(**_record(created_at="2025-01-01T00:00:00.123456Z"))
    assert item.created_at.microsecond == 123456
    assert Request(id="r", budget=1, as_of="2025-01-01T00:00:00.5Z").as_of is not None


def test_the_command_line_refuses_a_fine_as_of(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        [
            "pack",
            str(SAMPLE / "items.jsonl"),
            str(SAMPLE / "requests.jsonl"),
            "--out",
            str(tmp_path / "out"),
            "--as-of",
            FINE[0],
        ],
    )
    assert result.exit_code == EXIT_USAGE
    assert "fractional digits" in result.output
    assert not (tmp_path / "out").exists()


def test_a_timestamp_literal_in_a_predicate_is_refused() -> None:
    frame = CognitionFrame([_record()])
    with pytest.raises(PredicateError, match=r"at most 6 fractional digits"):
        frame.filter(f"created_at > TIMESTAMP '{FINE[0]}'").collect()
    assert frame.filter("created_at < TIMESTAMP '2025-01-01 00:00:00.000001'").collect().height == 1
