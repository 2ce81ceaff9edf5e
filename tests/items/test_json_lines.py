"""JSONL read at once with orjson gives what Python's json, line by line, gives.

``parse_json_lines`` must return the values and raise the errors of
``json_lines`` for every file: each value equal in type and bits (an
integer stays an integer, ``-0.0`` stays negative), each error the same
line, field and words.
"""

from __future__ import annotations

import gc
import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cognoxium.exceptions import RecordError
from cognoxium.items.io import json_lines, parse_json_lines, read_jsonl
from cognoxium.items.model import MAX_JSON_DEPTH

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(),
    st.text(max_size=8),
    st.sampled_from(["\u2028", "\x00", "é", "🙂", '"', "\\", "\ud800"]),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=10,
)
"""JSON values, with what Python's json writes beyond the standard (NaN, lone surrogates)."""


def same(a: Any, b: Any) -> bool:
    """Equal in type and value throughout (``1 != 1.0``, ``-0.0 != 0.0``, NaN equals NaN)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or (
            a == b and math.copysign(1, a) == math.copysign(1, b)
        )
    if isinstance(a, list):
        return len(a) == len(b) and all(map(same, a, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    return bool(a == b)


def outcome(read: Any, path: Path) -> Any:
    try:
        return list(read(path))
    except RecordError as exc:
        return (exc.line, exc.field, exc.message)


def assert_same_reading(path: Path) -> None:
    exact, fast = outcome(json_lines, path), outcome(parse_json_lines, path)
    if isinstance(exact, tuple):
        assert fast == exact
        return
    assert isinstance(fast, list)
    assert [n for n, _ in fast] == [n for n, _ in exact]
    assert all(same(a, b) for (_, a), (_, b) in zip(fast, exact, strict=True))


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    values=st.lists(VALUES, max_size=5),
    ascii_only=st.booleans(),
    spaced=st.booleans(),
)
def test_values_written_by_python_read_alike(
    tmp_path: Path, values: list[Any], ascii_only: bool, spaced: bool
) -> None:
    separators = (", ", ": ") if spaced else (",", ":")
    lines = [json.dumps(v, ensure_ascii=ascii_only, separators=separators) for v in values]
    path = tmp_path / "values.jsonl"
    path.write_bytes("\n".join(lines).encode("utf-8", "surrogatepass"))
    assert_same_reading(path)


PIECES = st.sampled_from(
    [b"{", b"}", b"[", b"]", b'"', b"\\", b":", b",", b" ", b"\r", b"\n", b"\t", b"-", b".",
     b"e", b"E", b"+", b"0", b"1", b"9", b"1234567890123456789", b"NaN", b"Infinity", b"true",
     b"null", b"\\u", b"d800", b"\xc3\xa9", b"\xff", b"\xed\xa0\x80", b"\xef\xbb\xbf",
     b"\xe2\x80\xa8", b"\xc2\xa0", b'"a"', b"1e400", b"-0", b"0.1"]
)  # fmt: skip
"""Bytes that make a JSONL file good or bad in every way the readers tell apart."""


@settings(
    max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(pieces=st.lists(PIECES, max_size=20))
def test_any_bytes_read_alike(tmp_path: Path, pieces: list[bytes]) -> None:
    path = tmp_path / "any.jsonl"
    path.write_bytes(b"".join(pieces))
    assert_same_reading(path)


@pytest.mark.parametrize(
    "text",
    [
        b'{"n": 123456789012345678901234567890}\n{"n": 1}\n',
        b'{"n": -9223372036854775809}\n',
        b'{"n": 18446744073709551615, "m": 1.5}\n',
        b'{"x": NaN}\n',
        b'{"x": 1e400}\n',
        b'\xef\xbb\xbf{"a": 1}\n\n  \n\xc2\xa0\n{"b": [1, 2]}',
        b'{"a": "\\ud800"}\n',
        b'{"a": 1}\n{"a": \n',
        b'{"a": "\xff"}\n',
        b"[" * (MAX_JSON_DEPTH + 3) + b"]" * (MAX_JSON_DEPTH + 3) + b"\n",
        b'{"a": 1, "a": 2}\r\n{"b": -0.0}\r\n',
    ],
)
def test_edge_files_read_alike(tmp_path: Path, text: bytes) -> None:
    path = tmp_path / "edge.jsonl"
    path.write_bytes(text)
    assert_same_reading(path)


def test_integers_beyond_64_bits_stay_integers(tmp_path: Path) -> None:
    path = tmp_path / "big.jsonl"
    path.write_bytes(b'{"n": 123456789012345678901234567890}\n')
    [(_, value)] = parse_json_lines(path)
    assert value == {"n": 123456789012345678901234567890}
    assert type(value["n"]) is int


def test_reading_items_leaves_the_collector_as_it_was(tmp_path: Path) -> None:
    path = tmp_path / "items.jsonl"
    path.write_text('{"id": "a", "role": "user", "text": "hi"}\n{"id": "a"}\n', encoding="utf-8")
    assert gc.isenabled()
    with pytest.raises(RecordError):
        read_jsonl(path)
    assert gc.isenabled()
    gc.disable()
    try:
        path.write_text('{"id": "a", "role": "user", "text": "hi"}\n', encoding="utf-8")
        assert read_jsonl(path).height == 1
        assert not gc.isenabled()
    finally:
        gc.enable()


@pytest.mark.parametrize(
    ("line", "field", "reader"),
    [
        ({"conversation_id": "c1", "messages": [{"role": "user", "content": "Hi"}]},
         "messages", "read_openai_conversations"),
        ({"role": "user", "content": "Hi"}, "content", "read_openai_jsonl"),
    ],
)  # fmt: skip
def test_chat_data_read_as_items_names_the_reader_to_use(
    tmp_path: Path, line: dict[str, Any], field: str, reader: str
) -> None:
    # Before: "field text: no content", which did not say the file was chat data.
    path = tmp_path / "chats.jsonl"
    path.write_text(json.dumps({"id": "a", "role": "user", "text": "x"}) + "\n" + json.dumps(line))
    with pytest.raises(RecordError) as info:
        read_jsonl(path)
    assert (info.value.line, info.value.field) == (2, field)
    assert f"cognoxium.formats.openai.{reader}" in info.value.message
