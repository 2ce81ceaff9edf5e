"""The reference redaction engine (Python :mod:`re`): :func:`find_spans`, :func:`redact_text`, :func:`redact_json`.

One scan runs every chosen recogniser over the padded text and pools the
spans their validators accept; overlaps go to the longest span, ties to the
recogniser listed first. Redaction replaces the spans and scans again until
nothing is found (a fixed point). The vectorised path
(:func:`~cognoxium.governance.redaction.redact_frame`) rewrites its rows
with these functions, so the two agree row by row.
"""  # noqa: E501

from __future__ import annotations

import hashlib
import hmac
from bisect import bisect_left
from collections.abc import Iterable, Mapping
from typing import Any

from cognoxium.exceptions import PlanError
from cognoxium.governance.redaction._model import (
    PAD,
    STYLES,
    External,
    Recogniser,
    RecogniserArg,
    RecogniserSet,
    RedactionStyle,
    Source,
    Span,
)
from cognoxium.governance.redaction._recognisers import RECOGNISERS, TYPES

__all__ = [
    "apply_spans",
    "find_spans",
    "hash_key",
    "recogniser_pool",
    "redact_json",
    "redact_str",
    "redact_text",
    "redact_value",
    "select_sources",
    "text_spans",
]

_MAX_PASSES = 32
"""The most scans of one text; a replacement never matches, so the fixed point comes first."""


def recogniser_pool(recognisers: RecogniserArg) -> tuple[Recogniser | RecogniserSet, ...]:
    """The recognisers to use, in tie-break order: :data:`RECOGNISERS` when ``None``."""
    if recognisers is None:
        return RECOGNISERS
    if isinstance(recognisers, Recogniser | RecogniserSet):
        pool: tuple[Any, ...] = (recognisers,)
    elif isinstance(recognisers, str | bytes) or not isinstance(recognisers, Iterable):
        raise PlanError(
            "recognisers must be a Recogniser, a RecogniserSet or a sequence of them, "
            f"got {type(recognisers).__name__}"
        )
    else:
        pool = tuple(recognisers)
    bad = [r for r in pool if not isinstance(r, Recogniser | RecogniserSet)]
    if bad:
        raise PlanError(
            f"recognisers: {bad[0]!r} is neither a Recogniser nor a RecogniserSet "
            "(an object with types, label and find_batch)"
        )
    if not pool:
        raise PlanError("recognisers is empty; pass None for the built-in recognisers")
    return pool


def _types_of(r: Recogniser | RecogniserSet) -> tuple[str, ...]:
    return (r.name,) if isinstance(r, Recogniser) else tuple(r.types)


def select_sources(
    types: Iterable[str] | str | None, recognisers: RecogniserArg = None
) -> tuple[Source, ...]:
    pool = recogniser_pool(recognisers)
    known = TYPES if pool is RECOGNISERS else tuple(dict.fromkeys(_all_types(pool)))
    if types is None:
        chosen = set(known)
    else:
        wanted = (types,) if isinstance(types, str) else tuple(types)
        unknown = sorted({t for t in wanted if t not in known}, key=str)
        if unknown:
            raise PlanError(
                f"unknown redaction type(s) {', '.join(repr(t) for t in unknown)}; "
                f"valid types: {', '.join(known)}"
            )
        chosen = set(wanted)
    out: list[Source] = []
    for r in pool:
        if isinstance(r, Recogniser):
            if r.name in chosen:
                out.append(r)
        else:
            kinds = frozenset(r.types) & chosen
            if kinds:
                out.append(External(r, kinds))
    return tuple(out)


def _all_types(pool: Iterable[Recogniser | RecogniserSet]) -> Iterable[str]:
    for r in pool:
        yield from _types_of(r)


def hash_key(style: str, key: bytes | str | None) -> bytes | None:
    if style not in STYLES:
        raise PlanError(
            f"unknown redaction style {style!r}; valid styles: {', '.join(map(repr, STYLES))}"
        )
    if style != "hash":
        return None
    if key is None or len(key) == 0:
        raise PlanError(
            "redaction style 'hash' needs a key: pass key=<bytes or str>, the HMAC-SHA256 key "
            "(keep it secret: anyone holding it can test guesses against the tokens)"
        )
    return key.encode("utf-8") if isinstance(key, str) else bytes(key)


def _token(value: str, kind: str, style: str, key: bytes | None) -> str:
    if style == "placeholder":
        return f"[{kind}]"
    if style == "mask":
        return "".join(ch if ch.isspace() else "*" for ch in value)
    assert key is not None
    digest = hmac.new(key, value.encode("utf-8"), hashlib.sha256).hexdigest()
    return f"[{kind}:{digest[:8]}]"


def text_spans(text: str, recs: tuple[Source, ...]) -> list[Span]:
    padded = f"{PAD}{text}{PAD}"
    found: list[tuple[int, int, int, str]] = []
    for order, r in enumerate(recs):
        if isinstance(r, External):
            found.extend((s.start, s.end, order, s.type) for s in r.spans([text])[0])
            continue
        for m in r._rx.finditer(padded):
            base = m.start("v") - 1
            for start, end in r._match_parts(m):
                found.append((base + start, base + end, order, r.name))
    if not found:
        return []
    # Longest first, then recogniser order, then leftmost; keep what does not overlap.
    # The sort is stable: a set's spans of equal length and start keep the set's order.
    found.sort(key=lambda s: (s[0] - s[1], s[2], s[0]))
    starts: list[int] = []
    chosen: list[tuple[int, int, str]] = []
    for start, end, _, kind in found:
        i = bisect_left(starts, start)
        if i > 0 and chosen[i - 1][1] > start:
            continue
        if i < len(chosen) and chosen[i][0] < end:
            continue
        starts.insert(i, start)
        chosen.insert(i, (start, end, kind))
    return [Span(s, e, k) for s, e, k in chosen]


def apply_spans(text: str, spans: list[Span], style: str, key: bytes | None) -> str:
    # Equivalent to replacing right to left: spans are disjoint and sorted by start.
    pieces: list[str] = []
    at = 0
    for span in spans:
        pieces.append(text[at : span.start])
        pieces.append(_token(text[span.start : span.end], span.type, style, key))
        at = span.end
    pieces.append(text[at:])
    return "".join(pieces)


def redact_str(
    text: str, recs: tuple[Source, ...], style: str, key: bytes | None, counts: dict[str, int]
) -> str:
    for _ in range(_MAX_PASSES):
        spans = text_spans(text, recs)
        if not spans:
            return text
        text = apply_spans(text, spans, style, key)
        for span in spans:
            counts[span.type] = counts.get(span.type, 0) + 1
    raise RuntimeError(  # pragma: no cover - a replacement never matches a recogniser
        f"redaction did not reach a fixed point in {_MAX_PASSES} passes; please report this text"
    )


def _assigned_member(name: str, core: str, recs: tuple[Source, ...]) -> Recogniser | None:
    """The first assignment recogniser whose key pattern matches ``name`` and accepts ``core``."""
    for r in recs:
        if not isinstance(r, Recogniser):
            continue
        if r._key_rx is not None and r._key_rx.fullmatch(name) and r._accepts_whole(core):
            return r
    return None


def redact_value(
    value: Any,
    recs: tuple[Source, ...],
    style: str,
    key: bytes | None,
    counts: dict[str, int],
    keys: bool = True,
) -> Any:
    if isinstance(value, str):
        return redact_str(value, recs, style, key, counts)
    if isinstance(value, list):
        return [redact_value(v, recs, style, key, counts, keys) for v in value]
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for name, member in value.items():
            new_name = redact_str(name, recs, style, key, counts) if keys else name
            if new_name in out:
                new_name = _distinct_key(new_name, out)
            if isinstance(member, str):
                core = member.strip()
                r = _assigned_member(name, core, recs)
                if r is not None:
                    begin = member.index(core)
                    token = _token(core, r.name, style, key)
                    out[new_name] = member[:begin] + token + member[begin + len(core) :]
                    counts[r.name] = counts.get(r.name, 0) + 1
                    continue
            out[new_name] = redact_value(member, recs, style, key, counts, keys)
        return out
    return value


def _distinct_key(name: str, taken: Mapping[str, Any]) -> str:
    """``name`` with the first suffix `` (2)``, `` (3)``, ... that is not a key yet."""
    n = 2
    while f"{name} ({n})" in taken:
        n += 1
    return f"{name} ({n})"


def find_spans(
    text: str, *, types: Iterable[str] | str | None = None, recognisers: RecogniserArg = None
) -> list[Span]:
    """Find the redactable spans of a text: one scan, after overlap resolution.

    This is the reference path (Python :mod:`re`): :func:`redact_text` repeats
    it until nothing is found, and :func:`redact_frame` agrees with it row by row.

    Parameters
    ----------
    text
        Any text.
    types
        Type names to look for (see :data:`TYPES`); ``None`` for all.
    recognisers
        The recognisers to use, in tie-break order: a :class:`Recogniser`, a
        :class:`RecogniserSet` or a sequence of them; ``None`` for
        :data:`RECOGNISERS`. ``types`` then names types of these.

    Returns
    -------
    list of Span
        Disjoint spans sorted by start, offsets in characters of ``text``.

    Raises
    ------
    PlanError
        On an unknown type name, an empty or invalid ``recognisers``, or a
        recogniser set that returns an invalid span.

    Notes
    -----
    Every recogniser scans the text on its own (non-overlapping matches,
    leftmost first); the candidates its validator accepts are pooled, and
    among overlapping spans the longest is kept, ties going to the recogniser
    listed first in :data:`RECOGNISERS`.

    Examples
    --------
    >>> find_spans("mail ana@example.org or call +44 20 7946 0958")
    [Span(start=5, end=20, type='EMAIL'), Span(start=29, end=45, type='PHONE')]
    >>> find_spans("order 4111 1111 1111 1112")  # fails the Luhn check
    []
    >>> find_spans("ana@example.org", types=["PHONE"])
    []
    """
    return text_spans(text, select_sources(types, recognisers))


def redact_text(
    text: str,
    *,
    style: RedactionStyle = "placeholder",
    key: bytes | str | None = None,
    types: Iterable[str] | str | None = None,
    recognisers: RecogniserArg = None,
) -> tuple[str, dict[str, int]]:
    """Redact a text and count the redactions by type.

    Parameters
    ----------
    text
        Any text.
    style
        ``"placeholder"`` (``[EMAIL]``), ``"mask"`` (``*`` for every
        non-whitespace character) or ``"hash"`` (``[EMAIL:3f2a9c1d]``: the
        first 8 hex digits of HMAC-SHA256(key, value), so one value gives one
        token under one key).
    key
        The HMAC key, required by the ``"hash"`` style; a ``str`` is UTF-8 encoded.
    types
        Type names to redact (see :data:`TYPES`); ``None`` for all.
    recognisers
        As for :func:`find_spans`: ``None`` for :data:`RECOGNISERS`.

    Returns
    -------
    tuple of (str, dict of str to int)
        The redacted text and the number of spans replaced per type (sorted
        by type; empty when nothing was found).

    Raises
    ------
    PlanError
        On an unknown style or type name, the ``"hash"`` style without a key,
        or invalid ``recognisers`` (see :func:`find_spans`).

    Notes
    -----
    :func:`find_spans` is applied and its spans replaced until it finds
    nothing, so ``redact_text(redact_text(x)[0])[0] == redact_text(x)[0]``.

    Examples
    --------
    >>> redact_text("Card 2221 0000 0000 0009, mail ana.example@example.org")
    ('Card [CREDIT_CARD], mail [EMAIL]', {'CREDIT_CARD': 1, 'EMAIL': 1})
    >>> redact_text("ip 192.0.2.10", style="mask")
    ('ip **********', {'IP_ADDRESS': 1})
    >>> redact_text("ana@example.org", style="hash", key=b"k")[0]
    '[EMAIL:102ffdfb]'
    >>> redact_text("x", style="shred")
    Traceback (most recent call last):
    ...
    cognoxium.exceptions.PlanError: unknown redaction style 'shred'; valid styles: 'placeholder', 'mask', 'hash'
    """  # noqa: E501
    recs = select_sources(types, recognisers)
    hkey = hash_key(style, key)
    counts: dict[str, int] = {}
    out = redact_str(text, recs, style, hkey, counts)
    return out, dict(sorted(counts.items()))


def redact_json(
    value: Any,
    *,
    style: RedactionStyle = "placeholder",
    key: bytes | str | None = None,
    types: Iterable[str] | str | None = None,
    recognisers: RecogniserArg = None,
    keys: bool = True,
) -> tuple[Any, dict[str, int]]:
    """Redact the strings of a JSON value: string values and, by default, object keys.

    Each string value, and each object key when ``keys`` is true, is
    redacted like :func:`redact_text`; keys that become equal (two e-mail
    addresses both become ``[EMAIL]``) are told apart by a suffix `` (2)``,
    `` (3)``, ... in document order, so no member is lost. In addition, the
    string value of an object member whose key names a secret (``password``,
    ``api_key``, ``client_secret``, ``Authorization``, ... in any case, with
    any prefix such as ``db_``) is a ``SECRET`` as a whole, as its
    ``key=value`` form would be in text.

    Parameters
    ----------
    value
        A JSON value (dicts, lists, strings, numbers, booleans, None).
    style, key, types, recognisers
        As for :func:`redact_text`.
    keys
        Whether object keys are redacted too (``{"ana@example.org": 3}``);
        when false they are kept as they are.

    Returns
    -------
    tuple of (Any, dict of str to int)
        A new JSON value and the redaction counts per type.

    Raises
    ------
    PlanError
        On an unknown style or type name, the ``"hash"`` style without a key,
        or invalid ``recognisers`` (see :func:`find_spans`).

    Examples
    --------
    >>> redact_json({"to": ["ana@example.org"], "db_password": "hunter22", "n": 4})
    ({'to': ['[EMAIL]'], 'db_password': '[SECRET]', 'n': 4}, {'EMAIL': 1, 'SECRET': 1})
    >>> redact_json({"ana@example.org": 2, "bo@example.org": 1})[0]
    {'[EMAIL]': 2, '[EMAIL] (2)': 1}
    >>> redact_json({"ana@example.org": 2}, keys=False)[0]
    {'ana@example.org': 2}
    """
    recs = select_sources(types, recognisers)
    hkey = hash_key(style, key)
    counts: dict[str, int] = {}
    out = redact_value(value, recs, style, hkey, counts, keys)
    return out, dict(sorted(counts.items()))
