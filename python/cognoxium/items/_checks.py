"""Limits and checks shared by items and requests: ids, Unicode text, JSON nesting.

Each check returns the problem as a message, or ``None`` when the value is
fine, so callers word their own error (a pydantic ``ValueError`` in a model,
a :class:`~cognoxium.exceptions.RecordError` in a reader).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import AfterValidator

__all__ = [
    "CONTROL_PATTERN",
    "FINE_TIME_MESSAGE",
    "MAX_ID_LENGTH",
    "MAX_INT",
    "MAX_JSON_DEPTH",
    "MIN_INT",
    "NAIVE_TIME_MESSAGE",
    "OFFSET_PATTERN",
    "TIME_RANGE_MESSAGE",
    "ItemId",
    "UnicodeStr",
    "finer_than_microseconds",
    "id_problem",
    "invalid_json",
    "json_depth",
    "json_problem",
    "json_text_depth",
    "naive_time_problem",
    "raising",
    "text_problem",
    "to_utc",
]

MAX_ID_LENGTH = 1024
"""The longest id, in characters: item ids, parents, lineage parent ids, group ids,
request ids and evidence ids."""

MAX_JSON_DEPTH = 64
"""The deepest nesting of arrays and objects in item metadata, a JSON payload's
value and request labels (``{}`` and ``[1]`` have depth 1, ``{"a": [1]}`` depth 2)."""

MIN_INT = -(2**63)
"""The smallest integer an item's ``priority`` or a request's ``budget`` may hold (int64)."""

MAX_INT = 2**63 - 1
"""The largest integer an item's ``priority`` or a request's ``budget`` may hold (int64)."""

CONTROL_PATTERN = r"[\x00-\x1f\x7f-\x9f]"
"""The control characters (Unicode category Cc) refused in ids, as a regular expression
that Python's ``re`` and Polars' ``str.contains`` both read."""

_CONTROL = re.compile(CONTROL_PATTERN)

_JSON_TOKENS = re.compile(r'("[^"\\]*(?:\\.[^"\\]*)*")(\s*:)?|[\[\]{}]')


def text_problem(value: str) -> str | None:
    r"""Why ``value`` is not Unicode text that UTF-8 can hold (a lone surrogate), or ``None``.

    Examples
    --------
    >>> text_problem("héllo") is None
    True
    >>> text_problem("a\ud800")
    'holds a lone surrogate U+D800 at character 1, which is not valid Unicode text'
    """
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        return (
            f"holds a lone surrogate U+{ord(value[exc.start]):04X} at character {exc.start}, "
            "which is not valid Unicode text"
        )
    return None


def id_problem(value: str) -> str | None:
    r"""Why ``value`` is not a valid id, or ``None``.

    An id is non-blank text of at most :data:`MAX_ID_LENGTH` characters,
    without control characters (:data:`CONTROL_PATTERN`) or lone surrogates.

    Examples
    --------
    >>> id_problem("turn-1") is None
    True
    >>> id_problem("  ")
    'must not be blank'
    >>> id_problem("a\nb")
    'must not hold control characters (found U+000A at character 1)'
    """
    if not value.strip():
        return "must not be blank"
    if len(value) > MAX_ID_LENGTH:
        return f"must be at most {MAX_ID_LENGTH} characters long (got {len(value)})"
    found = _CONTROL.search(value)
    if found is not None:
        code = ord(found.group())
        return f"must not hold control characters (found U+{code:04X} at character {found.start()})"
    return text_problem(value)


def json_depth(value: Any, limit: int = MAX_JSON_DEPTH) -> int:
    """The nesting depth of arrays and objects in a Python value, counted up to ``limit + 1``.

    Iterative, so a value nested deeper than Python's recursion limit is
    measured without a ``RecursionError``.

    Examples
    --------
    >>> json_depth(1), json_depth({}), json_depth({"a": [1, {"b": 2}]})
    (0, 1, 3)
    """
    depth = 0
    level = [value]
    while level and depth <= limit:
        containers = [v for v in level if isinstance(v, dict | list | tuple)]
        if not containers:
            break
        depth += 1
        level = [
            child
            for container in containers
            for child in (container.values() if isinstance(container, dict) else container)
        ]
    return depth


def json_text_depth(text: str, limit: int = MAX_JSON_DEPTH) -> tuple[int, str | None]:
    """The nesting depth of JSON text, counted up to ``limit + 1``, and the top-level key.

    The key is that of the top-level object's member being read when the
    depth passed ``limit`` (``None`` if it never did, or outside an object).
    The text need not be valid JSON: brackets inside strings are skipped.

    Examples
    --------
    >>> json_text_depth('{"a": "[[[", "b": {"c": [1]}}')
    (3, None)
    >>> json_text_depth('{"a": 1, "m": {"c": [1]}}', limit=2)
    (3, 'm')
    """
    depth = deepest = 0
    key: str | None = None
    for match in _JSON_TOKENS.finditer(text):
        token = match.group()
        if token in "[{":
            depth += 1
            if depth > limit:
                return depth, key
            deepest = max(deepest, depth)
        elif token in "]}":
            depth -= 1
        elif depth == 1 and match.group(2):
            try:
                key = str(json.loads(match.group(1)))
            except ValueError:
                key = match.group(1)
    return deepest, None


def json_problem(value: Any) -> str | None:
    """Why ``value`` is not a JSON value that items and requests accept, or ``None``.

    The value must nest at most :data:`MAX_JSON_DEPTH` levels of arrays and
    objects, hold no NaN or infinity and nothing JSON cannot represent, and
    its text must be valid Unicode.

    Examples
    --------
    >>> json_problem({"a": [1, "x"]}) is None
    True
    >>> json_problem({"a": float("nan")})
    'must be JSON without NaN or infinity'
    """
    if json_depth(value) > MAX_JSON_DEPTH:
        return f"nested deeper than {MAX_JSON_DEPTH} levels of arrays and objects"
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False)
    except ValueError:
        return "must be JSON without NaN or infinity"
    except (TypeError, RecursionError):
        return "must be a JSON value: objects with text keys, arrays, text, numbers, null"
    return text_problem(text)


TIME_RANGE_MESSAGE = "must fall in the years 1 to 9999 UTC"
"""The one range of times: what a Python ``datetime`` holds, once in UTC."""

FINE_TIME_MESSAGE = (
    "must be an ISO 8601 time with at most 6 fractional digits of seconds (microseconds), "
    "such as 2024-01-01T00:00:00.123456Z"
)
"""The one precision of times: microseconds, what a Python ``datetime`` holds."""

NAIVE_TIME_MESSAGE = (
    "must have a UTC offset (timezone info), such as 2024-01-01T00:00:00Z (UTC) or "
    "2024-01-01T02:00:00+02:00: a time without one names no instant; add the offset it was "
    "recorded in"
)
"""The error of a time given as text without a UTC offset, in records and tables alike."""

OFFSET_PATTERN = r"[Tt ]\d{2}(?::?\d{2}){0,2}(?:[.,]\d+)?\s*(?:[Zz]|[+-]\d{2}(?::?\d{2})?)$"
"""ISO 8601 text ending in a time of day and a UTC offset (``Z``, ``+02:00``, ``-0500``), as
a regular expression that Python's ``re`` and Polars' ``str.contains`` both read."""

_OFFSET = re.compile(OFFSET_PATTERN)


def naive_time_problem(value: Any) -> str | None:
    """:data:`NAIVE_TIME_MESSAGE` for a time without a UTC offset, else ``None``.

    ``value`` is a time as a record gives it: a ``datetime`` without
    ``tzinfo``, or ISO 8601 text that Python reads as one. Anything else
    (text that is no time, a number) is left to the time's own checks.

    Examples
    --------
    >>> naive_time_problem("2025-01-01T10:00:00Z") is None
    True
    >>> naive_time_problem("2025-01-01T10:00:00") == NAIVE_TIME_MESSAGE
    True
    """
    if isinstance(value, datetime):
        return NAIVE_TIME_MESSAGE if value.utcoffset() is None else None
    if isinstance(value, str) and _OFFSET.search(value.strip()) is None:
        try:
            parsed = datetime.fromisoformat(value.strip())
        except ValueError:
            return None
        return NAIVE_TIME_MESSAGE if parsed.utcoffset() is None else None
    return None


_FINER_THAN_MICROSECONDS = re.compile(r"[Tt ]\d{2}:\d{2}:\d{2}[.,]\d{7,}")


def finer_than_microseconds(text: str) -> bool:
    """Whether ISO 8601 ``text`` gives seconds finer than microseconds.

    Python's and pydantic's parsers drop the digits past the sixth, so a
    time must be refused (:data:`FINE_TIME_MESSAGE`) before it is parsed
    rather than silently truncated.

    Examples
    --------
    >>> finer_than_microseconds("2025-01-01T00:00:00.123456789Z")
    True
    >>> finer_than_microseconds("2025-01-01T00:00:00.123456+00:00")
    False
    """
    return _FINER_THAN_MICROSECONDS.search(text) is not None


def to_utc(value: datetime) -> datetime:
    """Return an aware time in UTC.

    Raises
    ------
    ValueError
        If the time in UTC falls outside the years 1 to 9999 (such as
        ``0001-01-01T00:30:00+01:00``), with :data:`TIME_RANGE_MESSAGE`.

    Examples
    --------
    >>> from datetime import timedelta, timezone
    >>> to_utc(datetime(2024, 1, 1, 1, tzinfo=timezone(timedelta(hours=1)))).isoformat()
    '2024-01-01T00:00:00+00:00'
    """
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise ValueError(TIME_RANGE_MESSAGE) from None


def raising(check: Callable[[Any], str | None]) -> Callable[[Any], Any]:
    """A pydantic after-validator that raises ``ValueError`` with the problem ``check`` finds.

    Parameters
    ----------
    check
        One of the checks above: the problem as a message, or ``None``.

    Returns
    -------
    callable
        The value unchanged when ``check`` finds no problem.

    Raises
    ------
    ValueError
        Worded by ``check``; pydantic reports it with the field's location.
    """

    def validate(value: Any) -> Any:
        problem = check(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    return validate


UnicodeStr = Annotated[str, AfterValidator(raising(text_problem))]
"""Text that UTF-8 can hold: no lone surrogates."""

ItemId = Annotated[str, AfterValidator(raising(id_problem))]
"""An id: non-blank, at most MAX_ID_LENGTH characters, no control characters."""


def invalid_json(exc: json.JSONDecodeError) -> str:
    """What a JSON parser refused, and where on its line: ``invalid JSON: ... at column N``.

    Examples
    --------
    >>> try:
    ...     json.loads('{"text": "cut')
    ... except json.JSONDecodeError as exc:
    ...     invalid_json(exc)
    'invalid JSON: Unterminated string starting at column 10'
    """
    return f"invalid JSON: {exc.msg.removesuffix(' at')} at column {exc.colno}"
