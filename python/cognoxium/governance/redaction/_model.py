r"""The recogniser model: :class:`Recogniser`, :class:`Span` and :class:`RecogniserSet`.

A :class:`Recogniser` is one kind of value: a pattern in the subset of
regular expressions that Python's :mod:`re` and Polars' Rust ``regex`` read
alike, framed by a one-character lead and trail, with a validator (or a
``refine`` function that finds the valid values inside a run). A
:class:`RecogniserSet` is another engine's recognisers behind one batch call;
``External`` restricts one to the chosen types and checks its spans.

>>> r = Recogniser(name="TICKET", pattern=r"(?P<v>TCK-[0-9]{6})")
>>> r.name, r.scan
('TICKET', '(?:[^0-9A-Za-z_])(?:(?P<v>TCK-[0-9]{6}))(?:[^0-9A-Za-z_])')
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol, get_args, runtime_checkable

from cognoxium.exceptions import PlanError

__all__ = [
    "CONTEXT_FILLERS",
    "JSON_STRING",
    "KEY_CHARS",
    "PAD",
    "STYLES",
    "WORD_CHARS",
    "External",
    "Recogniser",
    "RecogniserArg",
    "RecogniserSet",
    "RedactionStyle",
    "Source",
    "Span",
    "any_case",
    "any_of",
    "digits_at_least",
]

RedactionStyle = Literal["placeholder", "mask", "hash"]
"""How a span is replaced: ``"placeholder"`` gives ``[TYPE]``; ``"mask"``
turns every non-whitespace character into ``*`` (whitespace is kept, so a
spaced card number keeps its grouping and a PEM block its lines); ``"hash"``
gives ``[TYPE:xxxxxxxx]``, the first 8 hex digits of HMAC-SHA256(key, value)."""

STYLES: tuple[str, ...] = get_args(RedactionStyle)

# The default lead and trail: a character that is not a word character (a word boundary
# without look-around); the text is padded with PAD on each side.
WORD_CHARS = "0-9A-Za-z_"
_LEAD = f"[^{WORD_CHARS}]"
_TRAIL = f"[^{WORD_CHARS}]"
PAD = "\n"
_NAMED_GROUP = re.compile(r"\(\?P<\w+>")
# A JSON string literal, escapes included.
JSON_STRING = r'"(?:[^"\\]|\\.)*"'


def any_case(word: str) -> str:
    """Case-insensitive literal as explicit classes (``api_key`` -> ``[Aa][Pp][Ii][_-]?[Kk]...``).

    The engines' ``(?i)`` case folding differs on some Unicode letters
    (the Kelvin sign, long s), so the patterns spell the cases out; ``_``
    and ``-`` are optional, a space is a space or a no-break space.
    """
    out = []
    for ch in word:
        if ch in "_-":
            out.append("[_-]?")
        elif ch == " ":
            out.append("[ \u00a0]")
        elif ch.isalpha():
            out.append(f"[{ch.upper()}{ch.lower()}]" if ch.upper() != ch.lower() else ch)
        else:
            out.append(re.escape(ch))
    return "".join(out)


def any_of(words: Iterable[str]) -> str:
    """A pattern of any of ``words`` in any case (:func:`any_case`), the longest tried first."""
    return "(?:" + "|".join(any_case(w) for w in sorted(words, key=lambda w: (-len(w), w))) + ")"


CONTEXT_FILLERS: tuple[str, ...] = (
    "is", "are", "was", "no", "nr", "num", "number", "me", "at", "on", "to", "of", "for",
    "my", "your", "our", "the", "his", "her", "es", "ist", "est", "nummer", "numéro",
    "número", "numero", "numara", "numaram", "numarası", "nomor", "ng",
)  # fmt: skip
"""Words that may stand between a recogniser's context words and its value.

``phone number is 0532...``, ``SSN no. 536...``, ``call me at ...``,
``Telefon numaram ...``: at most three of them, each after one to three
characters that are no letter, digit or line break (``: ``, `` ``, ``. ``).
Any other word in between (``call about order 12345678``) breaks the
context."""
# After the context words: separators, then filler words each followed by separators. The
# first separator is not "]": a placeholder such as "[PHONE]" is no context for the value.
_SEP = f"[^{WORD_CHARS}\n]{{1,3}}"
_GAP = f"[^{WORD_CHARS}\n\\]][^{WORD_CHARS}\n]{{0,2}}(?:{any_of(CONTEXT_FILLERS)}{_SEP}){{0,3}}"

KEY_CHARS = "[A-Za-z0-9_.\\-]*"
"""Characters around the word in a JSON key pattern (``db_password``, ``phone.home``)."""


def digits_at_least(n: int) -> str:
    """A pattern found in a text that holds at least ``n`` ASCII digits."""
    return f"(?:[0-9][^0-9]*){{{n}}}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Recogniser:
    r"""A named pattern and an optional validator that together find one kind of value.

    Parameters
    ----------
    name
        The redaction type, upper case (``"EMAIL"``); it names the
        placeholder and the count. Several recognisers may share a type.
    pattern
        A regular expression in the subset shared by Python's ``re`` and Rust's
        ``regex`` (see :mod:`cognoxium.governance.redaction`), with a group named ``v`` around
        the value to replace.
    validator
        Called on each candidate value (group ``v``) only; the candidate is
        kept when it returns true. ``None`` keeps every match. With
        ``context``, called with a second argument: whether the context
        words precede the value.
    label
        What the recogniser finds, for documentation (``"JWT"``).
    lead, trail
        One-character classes (either may be an alternation of short
        sequences) that must precede and follow the match; the text is
        padded with ``\n`` so the start and end of the text qualify. The
        lead excludes the separators that occur inside the recogniser's
        values (``.`` in IPv4, ``:`` in IPv6, ``.-+%`` in e-mail addresses),
        so no scan starts in the middle of a value.
    key
        A pattern that a JSON object key must match in full for its string
        value to be taken as a whole: the value is redacted when the
        recogniser accepts all of it (with ``context``, as if the context
        words preceded it). So ``{"api_key": "..."}`` is redacted like
        ``api_key=...`` in text, and ``{"ssn": "536228726"}`` like ``SSN
        536228726``.
    refine
        For patterns that match a whole run (a run of digit groups, of
        colon-separated hex groups): called on each candidate value (group
        ``v``) instead of ``validator`` (with ``context``, with the same
        second argument), it returns the valid values inside the run as
        disjoint ``(start, end)`` offsets into the value, in characters. So
        a card number after an unrelated group of four digits is found, and
        an invalid run is not split into valid-looking parts.
    context
        Words (a pattern in the shared subset, in full words) that make a
        value likelier when they are written just before it: ``SSN`` before
        ``536 22 8726``, ``phone`` before ``05321234567``. The scan then
        also matches, in place of the lead, the words, separators and up to
        three of :data:`CONTEXT_FILLERS` (``phone number is``, ``SSN no.``),
        and the value; ``validator`` or ``refine`` tells by its second
        argument whether they did.
    requires
        A pattern (in the same shared subset) that every candidate value the
        recogniser accepts contains, or, with ``refine``, every run in which
        it finds a value: a necessary condition, such as a number of digits
        (``(?:[0-9][^0-9]*){8}``). Candidates without it are rejected before
        the validator runs, and :func:`redact_frame` drops them on the column
        of candidates, so no Python runs for them.
    prefilter
        A pattern found in every text in which the recogniser finds a value
        (a superset), for :func:`redact_frame` to select the texts worth a
        scan in one pass over the column. By default the pattern itself, its
        group ``v`` made non-capturing; a looser one is worth giving when it
        is cheaper to search (the IBAN recogniser's names any two letters
        where the pattern lists the registered countries), a narrower one
        when most matches need the context words (the US SSN recogniser's
        is a dashed number or the words).

    Raises
    ------
    PlanError
        If the pattern (or ``requires``, or ``prefilter``) does not compile,
        or the pattern has no group ``v``.

    Examples
    --------
    >>> r = Recogniser(name="TICKET", pattern=r"(?P<v>TCK-[0-9]{6})", label="ticket id")
    >>> r.scan
    '(?:[^0-9A-Za-z_])(?:(?P<v>TCK-[0-9]{6}))(?:[^0-9A-Za-z_])'
    """

    name: str
    pattern: str
    validator: Callable[..., bool] | None = None
    label: str = ""
    lead: str = _LEAD
    trail: str = _TRAIL
    key: str | None = None
    refine: Callable[..., Sequence[tuple[int, int]]] | None = None
    requires: str | None = None
    context: str | None = None
    prefilter: str = field(default="", repr=False, compare=False)
    scan: str = field(init=False, repr=False, compare=False)
    _rx: re.Pattern[str] = field(init=False, repr=False, compare=False)
    _key_rx: re.Pattern[str] | None = field(init=False, repr=False, compare=False)
    _json_rx: re.Pattern[str] | None = field(init=False, repr=False, compare=False)
    _requires_rx: re.Pattern[str] | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        head = f"(?:{self.lead})"
        if self.context is not None:
            # The words (after a word boundary), a gap that starts and ends off a word, the value.
            head = f"(?:{_LEAD}(?P<c>{self.context}){_GAP}|{self.lead})"
        scan = f"{head}(?:{self.pattern})(?:{self.trail})"
        try:
            rx = re.compile(scan)
            re.compile(self.context or "")
            key_rx = re.compile(self.key) if self.key is not None else None
            requires_rx = re.compile(self.requires) if self.requires is not None else None
            re.compile(self.prefilter)
        except re.error as exc:
            raise PlanError(f"recogniser {self.name!r}: pattern does not compile: {exc}") from None
        if "v" not in rx.groupindex:
            raise PlanError(f"recogniser {self.name!r}: the pattern needs a group named 'v'")
        if self.context is not None and rx.groupindex.get("c") != rx.groupindex["v"] - 1:
            raise PlanError(
                f"recogniser {self.name!r}: with context, neither the context words nor the "
                "pattern before the group 'v' may hold a group named 'c' or other groups"
            )
        object.__setattr__(self, "scan", scan)
        if not self.prefilter:
            object.__setattr__(self, "prefilter", _NAMED_GROUP.sub("(?:", self.pattern))
        object.__setattr__(self, "_rx", rx)
        object.__setattr__(self, "_key_rx", key_rx)
        object.__setattr__(self, "_requires_rx", requires_rx)
        json_rx = None
        if self.key is not None:
            json_rx = re.compile(f'"(?:{self.key})":(?P<v>{JSON_STRING})')
        object.__setattr__(self, "_json_rx", json_rx)

    def _meets_requires(self, value: str) -> bool:
        return self._requires_rx is None or self._requires_rx.search(value) is not None

    def _call(self, check: Callable[..., object], value: str, context: bool) -> object:
        return check(value) if self.context is None else check(value, context)

    def _parts(self, value: str, context: bool = False) -> Sequence[tuple[int, int]]:
        """The accepted values inside a candidate value, as offsets into it."""
        if not self._meets_requires(value):
            return ()
        if self.refine is not None:
            return self._call(self.refine, value, context)  # type: ignore[return-value]
        if self.validator is None or self._call(self.validator, value, context):
            return ((0, len(value)),)
        return ()

    def _match_parts(self, m: re.Match[str]) -> Sequence[tuple[int, int]]:
        """The accepted values of a match of the scan, as offsets into its group ``v``."""
        context = self.context is not None and m.group("c") is not None
        return self._parts(m.group("v"), context)

    def _accepts_whole(self, value: str) -> bool:
        """Whether all of ``value``, the string value of a member named by ``key``, is one value."""
        return tuple(self._parts(value, True)) == ((0, len(value)),)

    def _accepts_candidate(self, candidate: str) -> bool:
        """Whether a match found by the Rust engine (lead + value + trail) is a valid value.

        ``fullmatch`` splits the candidate along the path the scan took: no
        anchors or look-around, so the highest-priority path ending at the
        candidate's end is the scan's own.
        """
        m = self._rx.fullmatch(candidate)
        return m is not None and bool(self._match_parts(m))

    def _accepts_json_pair(self, candidate: str) -> bool:
        assert self._json_rx is not None
        m = self._json_rx.fullmatch(candidate)
        return m is not None and self._accepts_whole(json.loads(m.group("v")).strip())


@dataclass(frozen=True, slots=True)
class Span:
    """A redactable span ``text[start:end]`` (0-based, end exclusive, in characters) of a type.

    Examples
    --------
    >>> Span(4, 19, "EMAIL")
    Span(start=4, end=19, type='EMAIL')
    """

    start: int
    end: int
    type: str


@runtime_checkable
class RecogniserSet(Protocol):
    """Recognisers backed by another engine, finding spans of several types in a batch of texts.

    An object with these members can be passed as ``recognisers=`` to
    :func:`find_spans`, :func:`redact_text`, :func:`redact_json`,
    :func:`redact_frame` and :meth:`cognoxium.CognitionFrame.redact`, alone
    or among :class:`Recogniser` objects. It must be hashable and compare
    equal only to a set that finds the same spans, since it becomes part of
    the query plan. :class:`cognoxium.governance.presidio.PresidioRecognisers` is one.

    Attributes
    ----------
    types
        The redaction type names it can report, upper case (``"EMAIL"``).
    label
        What it finds, for documentation and :meth:`~cognoxium.CognitionFrame.explain`.
    """

    @property
    def types(self) -> tuple[str, ...]:
        """The redaction type names the set can report."""
        ...

    @property
    def label(self) -> str:
        """What the set finds, in a few words."""
        ...

    def find_batch(self, texts: Sequence[str]) -> list[list[Span]]:
        """Find the spans of each text.

        Parameters
        ----------
        texts
            The texts to scan.

        Returns
        -------
        list of list of Span
            One list per text, in the order of ``texts``; spans may overlap
            and are given in priority order: among equally long overlapping
            spans, the one listed first wins. Offsets are in characters.
        """
        ...


# A redaction already made: a placeholder or a keyed hash token.
_REDACTED = re.compile(r"\[[A-Z][A-Z0-9_]*(?::[0-9a-f]{8})?\]")


@dataclass(frozen=True, slots=True)
class External:
    """A :class:`RecogniserSet` restricted to the chosen types, with its spans checked."""

    finder: RecogniserSet
    types: frozenset[str]

    def spans(self, texts: Sequence[str]) -> list[list[Span]]:
        batches = self.finder.find_batch(texts)
        if not isinstance(batches, list) or len(batches) != len(texts):
            raise PlanError(
                f"recogniser set {self.finder.label!r}: find_batch must return one list of "
                f"spans per text ({len(texts)}), got {type(batches).__name__}"
            )
        out: list[list[Span]] = []
        for text, found in zip(texts, batches, strict=True):
            kept: list[Span] = []
            done: list[tuple[int, int]] | None = None
            for span in found:
                if not (
                    isinstance(span, Span)
                    and isinstance(span.start, int)
                    and isinstance(span.end, int)
                    and 0 <= span.start < span.end <= len(text)
                    and span.type in self.finder.types
                ):
                    raise PlanError(
                        f"recogniser set {self.finder.label!r} returned {span!r} for a text of "
                        f"{len(text)} characters; a span needs 0 <= start < end <= "
                        f"{len(text)} and a type among {', '.join(self.finder.types)}"
                    )
                if span.type not in self.types:
                    continue
                if not text[span.start : span.end].replace("*", "").strip():
                    continue  # a mask
                if done is None:
                    done = [m.span() for m in _REDACTED.finditer(text)]
                if any(s < span.end and span.start < e for s, e in done):
                    continue
                kept.append(span)
            out.append(kept)
        return out


Source = Recogniser | External
RecogniserArg = Recogniser | RecogniserSet | Iterable[Recogniser | RecogniserSet] | None
