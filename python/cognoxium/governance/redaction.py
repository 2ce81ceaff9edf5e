r"""Redaction: find personal data and secrets in item payloads and replace them.

A :class:`Recogniser` is a named regular expression plus an optional validator
(Luhn, ISO 13616 mod-97, :mod:`ipaddress`, SSA ranges, ...). The same pattern
text runs in Python's :mod:`re` (the reference path, :func:`find_spans` and
:func:`redact_text`) and in Polars' Rust ``regex`` (the vectorised path,
:func:`redact_frame`), so every pattern stays in the subset the two engines
read alike: ASCII classes written out (``[0-9]``, never ``\d``, ``\w``,
``\s`` or ``\b``, whose Unicode tables differ), no look-around, no
back-references, no case-insensitive flag.

Matching rules, the same in both paths:

- A pattern is scanned over the text padded with one ``\n`` on each side,
  framed by a one-character *lead* before the value and a *trail* after it
  (by default: a character that is not ``[0-9A-Za-z_]``). This plays the part
  of a word boundary without look-around, and lets the regex engine backtrack
  to a shorter value that ends on a boundary (a card number followed by an
  expiry date, an IBAN followed by a capitalised word).
- The value is the pattern's group ``v``; a candidate is kept when its
  validator accepts the value.
- Overlapping spans of different recognisers: the longest wins, ties go to
  the recogniser that comes first in :data:`RECOGNISERS`.
- Redaction repeats until no recogniser matches (a fixed point), so a value
  hidden behind a neighbour in the first scan (two addresses separated by one
  space share the boundary character) is found in the next one, and
  redacting twice changes nothing: no replacement ever matches a recogniser.

The recognisers are not a substitute for a data-protection review: they find
the formats listed in :data:`RECOGNISERS`; names and postal addresses are not
found, nor phone numbers written nationally in regions outside
:data:`PHONE_REGIONS` (pass :func:`phone_recogniser` other regions).

A recogniser may match a whole *run* (of digit groups, of colon-separated hex
groups) and pick the valid values inside it with a ``refine`` function, so a
card number written after an unrelated group of four digits is found and an
invalid IPv6 run such as ``2001:db8::1::2`` is not cut into two addresses.

Other engines plug in as a :class:`RecogniserSet` (for example
:class:`cognoxium.governance.presidio.PresidioRecognisers`), passed as ``recognisers=``
alone or next to the built-in recognisers. Their spans join the same pool:
the same overlap rule, styles, counts and fixed point. A span that overlaps
a redaction already made (``[EMAIL]``, ``[EMAIL:3f2a9c1d]``), or that holds
nothing but mask characters and whitespace, is ignored, so redacting twice
changes nothing whatever the engine.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import hmac
import ipaddress
import json
import math
import re
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, get_args, runtime_checkable

import polars as pl

from cognoxium.exceptions import PlanError, SchemaError
from cognoxium.items.model import canonical_json, content_hashes

__all__ = [
    "PHONE_REGIONS",
    "RECOGNISERS",
    "TYPES",
    "Recogniser",
    "RecogniserSet",
    "RedactionStyle",
    "Span",
    "find_spans",
    "phone_recogniser",
    "redact_frame",
    "redact_json",
    "redact_text",
]

RedactionStyle = Literal["placeholder", "mask", "hash"]
"""How a span is replaced: ``"placeholder"`` gives ``[TYPE]``; ``"mask"``
turns every non-whitespace character into ``*`` (whitespace is kept, so a
spaced card number keeps its grouping and a PEM block its lines); ``"hash"``
gives ``[TYPE:xxxxxxxx]``, the first 8 hex digits of HMAC-SHA256(key, value)."""

_STYLES: tuple[str, ...] = get_args(RedactionStyle)

_WORD = "0-9A-Za-z_"
_LEAD = f"[^{_WORD}]"
_TRAIL = f"[^{_WORD}]"
_PAD = "\n"
_MAX_PASSES = 32
_NAMED_GROUP = re.compile(r"\(\?P<\w+>")


# ---------------------------------------------------------------------------
# recogniser and span


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
        ``regex`` (see the module docstring), with a group named ``v`` around
        the value to replace.
    validator
        Called on each candidate value (group ``v``) only; the candidate is
        kept when it returns true. ``None`` keeps every match.
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
        For assignment recognisers: a pattern that a JSON object key must
        match in full for its string value to be treated as assigned, so
        ``{"api_key": "..."}`` is redacted like ``api_key=...`` in text.
    refine
        For patterns that match a whole run (a run of digit groups, of
        colon-separated hex groups): called on each candidate value (group
        ``v``) instead of ``validator``, it returns the valid values inside
        the run as disjoint ``(start, end)`` offsets into the value, in
        characters. So a card number after an unrelated group of four digits
        is found, and an invalid run is not split into valid-looking parts.
    requires
        A pattern (in the same shared subset) that every candidate value the
        recogniser accepts contains, or, with ``refine``, every run in which
        it finds a value: a necessary condition, such as a number of digits
        (``(?:[0-9][^0-9]*){8}``). Candidates without it are rejected before
        the validator runs, and :func:`redact_frame` drops them on the column
        of candidates, so no Python runs for them.
    prefilter
        A pattern found in every text in which ``pattern`` matches (a
        superset), for :func:`redact_frame` to select the texts worth a scan
        in one pass over the column. By default the pattern itself, its
        group ``v`` made non-capturing; a looser one is worth giving when it
        is cheaper to search (the IBAN recogniser's names any two letters
        where the pattern lists the registered countries).

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
    validator: Callable[[str], bool] | None = None
    label: str = ""
    lead: str = _LEAD
    trail: str = _TRAIL
    key: str | None = None
    refine: Callable[[str], Sequence[tuple[int, int]]] | None = None
    requires: str | None = None
    prefilter: str = field(default="", repr=False, compare=False)
    scan: str = field(init=False, repr=False, compare=False)
    _rx: re.Pattern[str] = field(init=False, repr=False, compare=False)
    _key_rx: re.Pattern[str] | None = field(init=False, repr=False, compare=False)
    _json_rx: re.Pattern[str] | None = field(init=False, repr=False, compare=False)
    _requires_rx: re.Pattern[str] | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        scan = f"(?:{self.lead})(?:{self.pattern})(?:{self.trail})"
        try:
            rx = re.compile(scan)
            key_rx = re.compile(self.key) if self.key is not None else None
            requires_rx = re.compile(self.requires) if self.requires is not None else None
            re.compile(self.prefilter)
        except re.error as exc:
            raise PlanError(f"recogniser {self.name!r}: pattern does not compile: {exc}") from None
        if "v" not in rx.groupindex:
            raise PlanError(f"recogniser {self.name!r}: the pattern needs a group named 'v'")
        object.__setattr__(self, "scan", scan)
        if not self.prefilter:
            object.__setattr__(self, "prefilter", _NAMED_GROUP.sub("(?:", self.pattern))
        object.__setattr__(self, "_rx", rx)
        object.__setattr__(self, "_key_rx", key_rx)
        object.__setattr__(self, "_requires_rx", requires_rx)
        json_rx = None
        if self.key is not None:
            json_rx = re.compile(f'"(?:{self.key})":(?P<v>{_JSON_STRING})')
        object.__setattr__(self, "_json_rx", json_rx)

    def _meets_requires(self, value: str) -> bool:
        return self._requires_rx is None or self._requires_rx.search(value) is not None

    def _accepts(self, value: str) -> bool:
        return self._meets_requires(value) and (self.validator is None or self.validator(value))

    def _parts(self, value: str) -> Sequence[tuple[int, int]]:
        """The accepted values inside a candidate value, as offsets into it."""
        if self.refine is not None:
            return self.refine(value) if self._meets_requires(value) else ()
        return ((0, len(value)),) if self._accepts(value) else ()

    def _accepts_candidate(self, candidate: str) -> bool:
        """Whether a match found by the Rust engine (lead + value + trail) is a valid value.

        ``fullmatch`` splits the candidate along the path the scan took: no
        anchors or look-around, so the highest-priority path ending at the
        candidate's end is the scan's own.
        """
        m = self._rx.fullmatch(candidate)
        return m is not None and bool(self._parts(m.group("v")))

    def _accepts_json_pair(self, candidate: str) -> bool:
        assert self._json_rx is not None
        m = self._json_rx.fullmatch(candidate)
        return m is not None and self._accepts(json.loads(m.group("v")).strip())


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
class _External:
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


_Source = Recogniser | _External
_RecogniserArg = Recogniser | RecogniserSet | Iterable[Recogniser | RecogniserSet] | None


# ---------------------------------------------------------------------------
# validators


def _luhn(digits: str) -> bool:
    """Luhn mod-10 check (H. P. Luhn, US patent 2,950,048, 1960; ISO/IEC 7812-1 annex B)."""
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return total % 10 == 0


# Issuer identification number ranges of the card schemes (ISO/IEC 7812-1 major
# industry identifiers 2-6, scheme ranges as the schemes publish them): prefix
# range (inclusive, compared on equal-length prefixes) -> allowed lengths.
_IIN_RANGES: tuple[tuple[str, str, frozenset[int]], ...] = (
    ("4", "4", frozenset({13, 16, 19})),  # Visa
    ("51", "55", frozenset({16})),  # Mastercard
    ("2221", "2720", frozenset({16})),  # Mastercard 2-series
    ("2200", "2204", frozenset(range(16, 20))),  # Mir
    ("34", "34", frozenset({15})),  # American Express
    ("37", "37", frozenset({15})),  # American Express
    ("300", "305", frozenset(range(14, 20))),  # Diners Club International
    ("3095", "3095", frozenset(range(14, 20))),  # Diners Club International
    ("36", "36", frozenset(range(14, 20))),  # Diners Club International
    ("38", "39", frozenset(range(16, 20))),  # Diners Club (Discover-routed)
    ("3528", "3589", frozenset(range(16, 20))),  # JCB
    ("50", "50", frozenset(range(12, 20))),  # Maestro
    ("56", "69", frozenset(range(12, 20))),  # Maestro, Discover, UnionPay, RuPay, ...
    ("81", "82", frozenset({16})),  # UnionPay / RuPay
    ("1", "1", frozenset({15})),  # UATP (Universal Air Travel Plan)
)


def _card_ok(value: str) -> bool:
    """Payment card number: 13-19 digits, one kind of separator, a scheme's IIN and length, Luhn."""
    digits = "".join(ch for ch in value if "0" <= ch <= "9")
    if len({ch for ch in value if not "0" <= ch <= "9"}) > 1:
        return False
    n = len(digits)
    if not 13 <= n <= 19:
        return False
    for lo, hi, lengths in _IIN_RANGES:
        prefix = digits[: len(lo)]
        if lo <= prefix <= hi and n in lengths:
            return _luhn(digits)
    return False


def _digits_at_least(n: int) -> str:
    """A pattern found in a text that holds at least ``n`` ASCII digits."""
    return f"(?:[0-9][^0-9]*){{{n}}}"


def _card_parts(value: str) -> list[tuple[int, int]]:
    """Card numbers inside a run of digit groups: whole groups, a card grouping, :func:`_card_ok`.

    Every window of consecutive groups written in one of the card groupings
    (:data:`_CARD_GROUPING`) is checked; the longest valid windows win, then
    the leftmost, so ``1234 4111 1111 1111 1111`` gives the card that starts
    at the second group.
    """
    bounds = [m.span() for m in _DIGITS.finditer(value)]
    valid: list[tuple[int, int]] = []
    for i, (start, _) in enumerate(bounds):
        for _, end in bounds[i : i + 5]:
            window = value[start:end]
            if _CARD_GROUPING.fullmatch(window) and _card_ok(window):
                valid.append((start, end))
    return _disjoint(valid)


def _disjoint(spans: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """The longest spans first, then the leftmost, dropping those that overlap a kept one."""
    kept: list[tuple[int, int]] = []
    for start, end in sorted(spans, key=lambda s: (s[0] - s[1], s[0])):
        if all(end <= s or e <= start for s, e in kept):
            kept.append((start, end))
    return sorted(kept)


# IBAN length per country, from the SWIFT IBAN Registry (ISO 13616-1 registration authority).
_IBAN_LENGTHS: dict[str, int] = {
    "AD": 24, "AE": 23, "AL": 28, "AT": 20, "AZ": 28, "BA": 20, "BE": 16, "BG": 22,
    "BH": 22, "BI": 27, "BR": 29, "BY": 28, "CH": 21, "CR": 22, "CY": 28, "CZ": 24,
    "DE": 22, "DJ": 27, "DK": 18, "DO": 28, "EE": 20, "EG": 29, "ES": 24, "FI": 18,
    "FK": 18, "FO": 18, "FR": 27, "GB": 22, "GE": 22, "GI": 23, "GL": 18, "GR": 27,
    "GT": 28, "HN": 28, "HR": 21, "HU": 28, "IE": 22, "IL": 23, "IQ": 23, "IS": 26,
    "IT": 27, "JO": 30, "KW": 30, "KZ": 20, "LB": 28, "LC": 32, "LI": 21, "LT": 20,
    "LU": 20, "LV": 21, "LY": 25, "MC": 27, "MD": 24, "ME": 22, "MK": 19, "MN": 20,
    "MR": 27, "MT": 31, "MU": 30, "NI": 28, "NL": 18, "NO": 15, "OM": 23, "PK": 24,
    "PL": 28, "PS": 29, "PT": 25, "QA": 29, "RO": 24, "RS": 22, "RU": 33, "SA": 24,
    "SC": 31, "SD": 18, "SE": 24, "SI": 19, "SK": 24, "SM": 27, "SO": 23, "ST": 25,
    "SV": 28, "TL": 23, "TN": 24, "TR": 26, "UA": 29, "VA": 22, "VG": 24, "XK": 20,
    "YE": 30,
}  # fmt: skip


_IBAN_SEPARATORS = " \u00a0-"


def _iban_ok(value: str) -> bool:
    """Check an IBAN: ISO 13616-1 length per country and ISO 7064 MOD 97-10.

    Letters may be written in either case and the groups of four separated
    by spaces, no-break spaces or dashes (one kind per IBAN).

    The first four characters move to the end, letters become numbers
    (A=10 ... Z=35), and the remainder modulo 97 must be 1.
    """
    if len({ch for ch in value if ch in _IBAN_SEPARATORS}) > 1:
        return False
    iban = "".join(ch for ch in value if ch not in _IBAN_SEPARATORS).upper()
    if len(iban) != _IBAN_LENGTHS.get(iban[:2], -1) or not 2 <= int(iban[2:4]) <= 98:
        return False
    rearranged = iban[4:] + iban[:4]
    return int("".join(str(int(ch, 36)) for ch in rearranged)) % 97 == 1


def _ssn_ok(value: str) -> bool:
    """US Social Security number AAA-GG-SSSS outside the ranges the SSA never assigns.

    The separator is a dash, a dot or a space, the same twice.

    Area 000, 666 and 900-999, group 00 and serial 0000 are never issued (SSA,
    "Social Security Number Randomization", 2011; Program Operations Manual
    RM 10201.060); 078-05-1120 and 219-09-9999 were voided after appearing in
    advertising.
    """
    parts = re.split("[ .\\-]", value)
    if len(parts) != 3 or len(set(re.findall("[ .\\-]", value))) != 1:
        return False
    area, group, serial = parts
    if area in ("000", "666") or area[0] == "9" or group == "00" or serial == "0000":
        return False
    return value not in ("078-05-1120", "219-09-9999")


# ITU-T E.164 assigned country calling codes (ITU-T "List of ITU-T Recommendation E.164
# assigned country codes"); they form a prefix code, so the leading digits name one.
_COUNTRY_CODES: frozenset[str] = frozenset(
    """1 7 20 27 30 31 32 33 34 36 39 40 41 43 44 45 46 47 48 49 51 52 53 54 55 56 57 58
    60 61 62 63 64 65 66 81 82 84 86 90 91 92 93 94 95 98
    211 212 213 216 218 220 221 222 223 224 225 226 227 228 229 230 231 232 233 234 235
    236 237 238 239 240 241 242 243 244 245 246 247 248 249 250 251 252 253 254 255 256
    257 258 260 261 262 263 264 265 266 267 268 269 290 291 297 298 299
    350 351 352 353 354 355 356 357 358 359 370 371 372 373 374 375 376 377 378 379 380
    381 382 383 385 386 387 389 420 421 423 500 501 502 503 504 505 506 507 508 509 590
    591 592 593 594 595 596 597 598 599 670 672 673 674 675 676 677 678 679 680 681 682
    683 685 686 687 688 689 690 691 692 800 808 850 852 853 855 856 870 878 880 881 882
    883 886 888 960 961 962 963 964 965 966 967 968 970 971 972 973 974 975 976 977 979
    992 993 994 995 996 998""".split()
)


def _phone_ok(value: str) -> bool:
    """International number: an assigned E.164 country code and 8-15 digits in all (E.164 §6).

    A trunk prefix written ``(0)`` is not counted. After the ``00``
    international prefix the country code must stand alone in the first
    group (``0044 20 ...``), so a digit run or a card-like group such as
    ``0079 0087`` that merely starts with ``00`` is not a phone number.
    """
    rest = value[1:] if value[0] == "+" else value[2:]
    if value[0] != "+":
        first = re.split("[ .\\-\u00a0(]", rest, maxsplit=1)
        if len(first) == 1 or first[0] not in _COUNTRY_CODES:
            return False
    digits = "".join(ch for ch in rest.replace("(0)", "") if "0" <= ch <= "9")
    if not 8 <= len(digits) <= 15:
        return False
    return any(digits[:n] in _COUNTRY_CODES for n in (1, 2, 3))


def _ip_ok(value: str) -> bool:
    """Check an IPv4 or IPv6 address with :func:`ipaddress.ip_address`; reject ``::``."""
    try:
        address = ipaddress.ip_address(value)
    except ValueError:
        return False
    return not (address.version == 6 and address.is_unspecified)


def _ip_parts(value: str) -> tuple[tuple[int, int], ...]:
    """An IP address, with its CIDR prefix length (``/64``) when that is valid for its version.

    The whole run must be one address (:func:`ipaddress.ip_address`), so a
    run with two ``::`` is no address at all rather than two; the unspecified
    ``::`` is not reported. A prefix length beyond 32 (IPv4) or 128 (IPv6)
    leaves the suffix out of the span.
    """
    address, slash, _ = value.partition("/")
    if not _ip_ok(address):
        return ()
    if slash:
        try:
            ipaddress.ip_interface(value)
        except ValueError:
            return ((0, len(address)),)
    return ((0, len(value)),)


def _email_ok(value: str) -> bool:
    """RFC 5321 §4.5.3.1 size limits (local part 64, address 254) and RFC 1035 label rules.

    An internationalised domain (RFC 5890) is checked in its ASCII form
    (IDNA, RFC 3490), so each label's limit of 63 applies to the punycode.
    """
    local, _, domain = value.rpartition("@")
    if len(local) > 64 or len(value) > 254 or ".." in value:
        return False
    if local[0] == "." or local[-1] == ".":
        return False
    try:
        ascii_domain = domain.encode("idna").decode("ascii")
    except UnicodeError:
        return False
    return all(
        0 < len(label) <= 63 and label[0] != "-" and label[-1] != "-"
        for label in ascii_domain.split(".")
    )


PHONE_REGIONS: tuple[str, ...] = (
    "US", "GB", "DE", "FR", "IN", "BR", "JP", "AU", "CA", "ES", "IT", "MX", "NL",
)  # fmt: skip
"""The regions (ISO 3166-1 alpha-2) whose national phone formats the built-in recogniser finds.

United States, United Kingdom, Germany, France, India, Brazil, Japan,
Australia, Canada, Spain, Italy, Mexico and the Netherlands. A number written
with ``+`` and a country code is found whatever its country; pass other regions
to :func:`phone_recogniser` for other national formats."""

# A run that may hold a phone number: an optional "+" or "00", digit groups separated by
# one or two of " .-/" or a no-break space, or in brackets; at least one separator or
# bracket, so a bare run of digits (an order number, an id) is no candidate.
_PHONE_RUN = (
    "(?P<v>(?:\\+|00)?(?:\\([0-9]{1,5}\\)|[0-9]{1,6})"
    "(?:[ .\\-/\u00a0]{1,2}(?:\\([0-9]{1,5}\\)|[0-9]{1,8})|\\([0-9]{1,5}\\)){1,6})"
)
_SSN_LIKE = re.compile("[0-9]{3}([ .\\-])[0-9]{2}\\1[0-9]{4}")
_PHONE_LIST_SEP = re.compile("[ \u00a0]+/[ \u00a0]+")
_DATE_LIKE = re.compile(
    "[0-9]{4}([./\\-])[0-9]{1,2}\\1[0-9]{1,2}|[0-9]{1,2}([./\\-])[0-9]{1,2}\\2[0-9]{2,4}"
)


@dataclass(frozen=True, slots=True)
class _PhoneMatcher:
    """Phone numbers inside a digit run, found by libphonenumber's ``PhoneNumberMatcher``.

    A number written with ``+`` is matched at leniency ``VALID`` (a valid
    number of its country). A number written nationally is matched region by
    region at ``STRICT_GROUPING``: valid for the region, with the national
    prefix where the region writes one, and grouped as the region groups its
    numbers. ``VALID`` alone accepts too much there: the numbering plans of
    Germany and Italy have variable lengths, so ``0.20.19.15.0`` (a version)
    and ``4746 7583 46`` (part of an IBAN) are valid numbers somewhere.

    A number must be the whole run, or a whole piece of a list written
    ``a / b``: a valid-looking part of a longer run of digit groups (a
    reference, an invalid card number) is not a phone number. A region is
    skipped when the run's digits, less a national prefix of up to three
    digits, do not match the region's pattern of national numbers (from the
    library's metadata). Runs of fewer than 8 digits (a local number without
    its area code is ambiguous), and runs shaped like dates, US SSNs or card
    numbers are skipped. A run without a list is decided by the matcher's own
    parse and leniency check of the whole run (its search for candidates and
    for numbers inside them could only find shorter numbers), trying first
    the region that accepted the last run of the same shape, then the regions
    whose number patterns the digits match. Results are cached per run.
    """

    regions: tuple[str, ...]

    def __call__(self, value: str) -> tuple[tuple[int, int], ...]:
        return _phone_parts(value, self.regions)


@functools.lru_cache(maxsize=1 << 16)
def _phone_parts(value: str, regions: tuple[str, ...]) -> tuple[tuple[int, int], ...]:
    digits = "".join(ch for ch in value if "0" <= ch <= "9")
    if len(digits) < 8 or _DATE_LIKE.fullmatch(value) or _SSN_LIKE.fullmatch(value):
        return ()
    if _CARD_GROUPING.fullmatch(value):
        return ()
    international = value[0] == "+" or value.startswith("00")
    candidates = (None,) if international else regions
    # A number is a whole run, or a whole piece of a list "a / b".
    at = 0
    pieces = set()
    for sep in _PHONE_LIST_SEP.finditer(value):
        pieces.add((at, sep.start()))
        at = sep.end()
    if not at:
        # No list: only the whole run can be a number, so the matcher's search for
        # candidates and for numbers inside them is skipped (see _whole_run_matches).
        whole = _whole_candidate(value) and _some_region_accepts(
            value, digits, candidates, international
        )
        return ((0, len(value)),) if whole else ()
    pieces.add((0, len(value)))
    pieces.add((at, len(value)))
    found: list[tuple[int, int]] = []
    for region in candidates:
        if region is not None and not _may_be_national(digits, region):
            continue
        spans = _matches(value, region, _leniency(international), 65535) & pieces
        found.extend(spans)
        if (0, len(value)) in spans:
            break
    return tuple(_disjoint(found))


_SHAPE = str.maketrans("0123456789", "9999999999")
_REGION_BY_SHAPE: dict[str, str | None] = {}
"""Per shape of a run (its digits written ``9``), the region that last accepted a run of
that shape; at most :data:`_MAX_SHAPES` shapes are kept."""
_MAX_SHAPES = 4096


def _clear_phone_caches() -> None:
    """Forget the phone recogniser's answer per run and the region it learnt per shape."""
    _phone_parts.cache_clear()
    _REGION_BY_SHAPE.clear()


def _some_region_accepts(
    value: str, digits: str, regions: Sequence[str | None], international: bool
) -> bool:
    """Whether the matcher of one of ``regions`` (``None``: international) accepts the run.

    Any region will do, so the likeliest is tried first: the one that accepted
    the last run of the same shape (runs of one shape are mostly numbers of one
    region, and libphonenumber is the costliest check), then those whose
    number patterns the digits match. Only the order of the tries depends on
    earlier runs, never the answer.
    """
    plausible = [r for r in regions if r is None or _may_be_national(digits, r)]
    shape = value.translate(_SHAPE)
    last = _REGION_BY_SHAPE.get(shape, "")
    plausible.sort(key=lambda r: (r != last, r is not None and not _looks_national(digits, r)))
    for region in plausible:
        if _matcher_for(region, international)._parse_and_verify(value, 0) is not None:
            if shape in _REGION_BY_SHAPE or len(_REGION_BY_SHAPE) < _MAX_SHAPES:
                _REGION_BY_SHAPE[shape] = region
            return True
    return False


def _leniency(international: bool) -> Any:
    import phonenumbers

    return phonenumbers.Leniency.VALID if international else phonenumbers.Leniency.STRICT_GROUPING


def _matches(value: str, region: str | None, leniency: Any, max_tries: int) -> set[tuple[int, int]]:
    import phonenumbers

    matcher = phonenumbers.PhoneNumberMatcher(value, region, leniency=leniency, max_tries=max_tries)
    return {(m.start, m.end) for m in matcher}


def _whole_run_matches(value: str, region: str | None, international: bool) -> bool:
    """Whether ``PhoneNumberMatcher(value, region)`` finds a number spanning all of ``value``.

    The same decision as ``(0, len(value)) in _matches(value, region, ...)``
    (a test holds the two equal), in the matcher's own steps, less those that
    can only find a shorter number: the candidate its pattern finds must be
    the whole of ``value`` (nothing trimmed as the start of a second number,
    no slash-separated date), and then the matcher's parse and leniency check
    of that candidate (``_parse_and_verify``) decides. The region-free steps
    are checked once per run by :func:`_phone_parts`.
    """
    if not _whole_candidate(value):
        return False
    matcher = _matcher_for(region, international)
    return matcher._parse_and_verify(value, 0) is not None


def _whole_candidate(value: str) -> bool:
    from phonenumbers import phonenumbermatcher

    pnm: Any = phonenumbermatcher  # private patterns, not all in the type stubs
    found = pnm._PATTERN.search(value)
    return (
        found is not None
        and found.span() == (0, len(value))
        and pnm._SECOND_NUMBER_START_PATTERN.search(value) is None
        and pnm._SLASH_SEPARATED_DATES.search(value) is None
    )


@functools.cache
def _matcher_for(region: str | None, international: bool) -> Any:
    """A matcher whose ``_parse_and_verify`` checks candidates for ``region`` (no text of its own).

    With an empty text, the checks of the characters around a candidate find
    none, as for a candidate that is the whole text.
    """
    import phonenumbers

    # Keep libphonenumber's compiled metadata patterns (more than the re module caches).
    enable_cache = getattr(phonenumbers, "enable_pattern_cache", None)
    if enable_cache is not None:
        enable_cache()
    return phonenumbers.PhoneNumberMatcher("", region, leniency=_leniency(international))


@functools.cache
def _region_pattern(region: str) -> re.Pattern[str] | None:
    """The region's pattern of national significant numbers (libphonenumber metadata)."""
    import phonenumbers

    meta = phonenumbers.PhoneMetadata.metadata_for_region(region)
    if meta is None or meta.general_desc is None or not meta.general_desc.national_number_pattern:
        return None
    return re.compile(meta.general_desc.national_number_pattern)


def _may_be_national(digits: str, region: str) -> bool:
    """Whether ``digits``, less a national or trunk prefix of up to three digits, may be a number.

    A cheap necessary condition (the region's pattern of national significant
    numbers) checked before the matcher; runs of more than 15 digits may hold
    a number with other digits and always go to the matcher.
    """
    pattern = _region_pattern(region)
    if pattern is None or len(digits) > 15:
        return True
    return any(pattern.fullmatch(digits[k:]) for k in range(4))


@functools.cache
def _number_types(region: str) -> tuple[str, re.Pattern[str]]:
    """The region's national prefix and one pattern of its numbers of every type (metadata)."""
    import phonenumbers

    meta = phonenumbers.PhoneMetadata.metadata_for_region(region)
    descs = (
        "fixed_line", "mobile", "toll_free", "premium_rate", "shared_cost",
        "personal_number", "voip", "pager", "uan", "voicemail",
    )  # fmt: skip
    patterns = [
        desc.national_number_pattern
        for desc in (getattr(meta, name, None) for name in descs)
        if desc is not None and desc.national_number_pattern
    ]
    prefix = (meta.national_prefix or "") if meta is not None else ""
    return prefix, re.compile("|".join(f"(?:{p})" for p in patterns) or "(?!)")


def _looks_national(digits: str, region: str) -> bool:
    """Whether ``digits``, less the region's national prefix, match a type of its numbers.

    Only orders the regions tried for a run (likeliest first); libphonenumber decides.
    """
    prefix, pattern = _number_types(region)
    nsn = digits[len(prefix) :] if prefix and digits.startswith(prefix) else digits
    return pattern.fullmatch(nsn) is not None


def phone_recogniser(regions: Iterable[str] = PHONE_REGIONS) -> Recogniser:
    """A ``PHONE`` recogniser for numbers in the national formats of ``regions`` (and ``+CC``).

    A vectorised prefilter selects runs of digit groups (at least one space,
    dot, dash, slash or bracket between or around them); libphonenumber's
    ``PhoneNumberMatcher`` (``phonenumbers`` package, leniency ``VALID`` for
    numbers with ``+``, ``STRICT_GROUPING`` for national ones) then decides
    each distinct run once: the whole run, or each piece of a list ``a / b``,
    must be a number of one of the regions. Version strings, dates and order numbers are not valid numbers,
    or not candidates (a date-shaped run, a bare run of digits, a run after
    ``#`` or ``-``).

    Parameters
    ----------
    regions
        ISO 3166-1 alpha-2 region codes, in the order they are tried;
        :data:`PHONE_REGIONS` by default.

    Returns
    -------
    Recogniser
        Named ``PHONE``; use it in ``recognisers=`` in place of or next to
        :data:`RECOGNISERS`.

    Raises
    ------
    PlanError
        If ``regions`` is empty or names a region libphonenumber does not know.

    Examples
    --------
    >>> uk = phone_recogniser(["GB"])
    >>> redact_text("ring 020 7946 0958 or (415) 555-2671", recognisers=uk)[0]
    'ring [PHONE] or (415) 555-2671'
    >>> phone_recogniser(["XX"])
    Traceback (most recent call last):
    ...
    cognoxium.exceptions.PlanError: phone_recogniser: unknown region(s) 'XX'; use ISO 3166-1 alpha-2 codes such as 'US', 'GB'
    """  # noqa: E501
    import phonenumbers

    chosen = tuple(str(r).upper() for r in ([regions] if isinstance(regions, str) else regions))
    if not chosen:
        raise PlanError("phone_recogniser: regions is empty; pass region codes such as 'US'")
    unknown = [r for r in chosen if r not in phonenumbers.SUPPORTED_REGIONS]
    if unknown:
        raise PlanError(
            f"phone_recogniser: unknown region(s) {', '.join(map(repr, unknown))}; "
            "use ISO 3166-1 alpha-2 codes such as 'US', 'GB'"
        )
    return Recogniser(
        name="PHONE",
        pattern=_PHONE_RUN,
        refine=_PhoneMatcher(chosen),
        label=f"phone number, national formats of {', '.join(chosen)} (libphonenumber)",
        requires=_digits_at_least(8),
        lead=f"[^{_WORD}+#\\-/. \u00a0]|[^0-9A-Za-z_+#\\-/.][ \u00a0]|[A-Za-z][ \u00a0]",
        trail=f"[^{_WORD}]",
    )


def _b64url_json(part: str) -> Any:
    data = base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
    return json.loads(data)


def _jwt_ok(value: str) -> bool:
    """Check a JWS compact serialisation (RFC 7515 §7.1, RFC 7519).

    The header must decode to a JSON object naming its ``alg`` (RFC 7515
    §4.1.1) and the payload must be base64url.
    """
    header, payload, _ = value.split(".")
    try:
        head = _b64url_json(header)
        base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))
    except (ValueError, binascii.Error, UnicodeDecodeError):
        return False
    return isinstance(head, dict) and "alg" in head


def _classes(value: str) -> int:
    return (
        any(c.islower() for c in value)
        + any(c.isupper() for c in value)
        + any(c.isdigit() for c in value)
        + any(not c.isalnum() for c in value)
    )


def _token_ok(value: str) -> bool:
    """Check a provider token with a fixed prefix.

    ``sk-`` keys must mix three character classes, since the prefix alone
    also starts ordinary hyphenated words (``sk-learn-...``).
    """
    if value.startswith("sk-"):
        return _classes(value[3:]) >= 3
    return True


# Values that appear after ``password:`` or ``token=`` in prose and configuration
# without being secrets.
_NOT_SECRETS = frozenset(
    "null none nil true false undefined n/a na tbd todo required optional string "
    "secret password token redacted hidden masked example value yes no reset here "
    "below above same then again wrong invalid incorrect expired changed empty unknown".split()
)
_TEMPLATE_START = frozenset("$%<{([*\\")


def _assigned_ok(value: str, min_length: int) -> bool:
    return (
        len(value) >= min_length
        and value[0] not in _TEMPLATE_START
        and value.lower() not in _NOT_SECRETS
        and not any(c.isspace() for c in value[:1])
    )


def _password_ok(value: str) -> bool:
    """The value of a password assignment: 4+ characters, not a template or a stop word."""
    return _assigned_ok(value, 4)


def _entropy(value: str) -> float:
    """Shannon entropy of the character distribution, in bits per character (Shannon, 1948)."""
    n = len(value)
    return -sum(k / n * math.log2(k / n) for k in Counter(value).values())


def _key_value_ok(value: str) -> bool:
    """Check the value of a key or token assignment.

    8+ characters, not a template or a stop word, and random-looking: three
    character classes (lower, upper, digit, other) or a Shannon entropy of
    at least 3.5 bits per character (the threshold of gitleaks'
    generic-api-key rule), so prose like ``token: hello`` is kept.
    """
    return _assigned_ok(value, 8) and (_classes(value) >= 3 or _entropy(value) >= 3.5)


# ---------------------------------------------------------------------------
# patterns


def _ci(word: str) -> str:
    """Case-insensitive literal as explicit classes (``api_key`` -> ``[Aa][Pp][Ii][_-]?[Kk]...``).

    The engines' ``(?i)`` case folding differs on some Unicode letters
    (the Kelvin sign, long s), so the patterns spell the cases out.
    """
    out = []
    for ch in word:
        if ch in "_-":
            out.append("[_-]?")
        elif ch == " ":
            out.append("[ \u00a0]")
        elif ch.isalpha():
            out.append(f"[{ch.upper()}{ch.lower()}]")
        else:
            out.append(re.escape(ch))
    return "".join(out)


_JSON_STRING = r'"(?:[^"\\]|\\.)*"'
_SEP = "[ .\\-\u00a0]"
_OCTET = "(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_HEX = "[0-9A-Fa-f]{1,4}"

# Letters of the scripts internationalised domain names are written in (Latin, Greek,
# Cyrillic, Hebrew, Arabic, Devanagari, Thai, kana, CJK, Hangul), as explicit ranges so the
# two engines read them alike.
_IDN = (
    "\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u024f\u0370-\u03ff\u0400-\u04ff\u0590-\u05ff"
    "\u0600-\u06ff\u0900-\u097f\u0e00-\u0e7f\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff"
    "\uac00-\ud7af"
)
_LABEL = f"[A-Za-z0-9{_IDN}\\-]+"
_EMAIL = (
    f"(?P<v>[A-Za-z0-9{_IDN}][A-Za-z0-9{_IDN}._%+\\-]*@{_LABEL}(?:\\.{_LABEL})*"
    f"\\.(?:[Xx][Nn]--[A-Za-z0-9\\-]{{1,59}}|[A-Za-z]{{2,63}}|[{_IDN}]{{2,63}}))"
)
# A card number as written: contiguous, or grouped 4-4-4-4(-3), 4-6-5, 4-6-4, 4-5-6 (UATP)
# or 4-4-4-1..3, with one kind of separator (checked by _card_ok).
_CARD_GROUPING = re.compile(
    f"[0-9]{{4}}{_SEP}[0-9]{{6}}{_SEP}[0-9]{{4,5}}"
    f"|[0-9]{{4}}{_SEP}[0-9]{{5}}{_SEP}[0-9]{{6}}"
    f"|[0-9]{{4}}(?:{_SEP}[0-9]{{4}}){{3}}(?:{_SEP}[0-9]{{3}})?"
    f"|[0-9]{{4}}(?:{_SEP}[0-9]{{4}}){{2}}{_SEP}[0-9]{{1,3}}"
    "|[0-9]{13,19}"
)
_DIGITS = re.compile("[0-9]+")
# The lead of a run of digit groups: not inside a longer run, nor right after a group of
# digits and a separator ("FR76-3000-...", "NL91 ABNA 0417 ..." stays one unit), so a
# recogniser sees a run from its first group.
_RUN_LEAD = f"[^{_WORD}\\-. \u00a0]|[^0-9A-Za-z_\\-.][ \u00a0\\-.]|[A-Za-z][ \u00a0]"
# A run of digit groups that may hold a card number (_card_parts finds it inside).
_CARD = f"(?P<v>[0-9]{{13,19}}|[0-9]{{1,6}}(?:{_SEP}[0-9]{{1,6}}){{2,7}})"


def _iban_pattern() -> str:
    by_length: dict[int, list[str]] = {}
    for country, length in sorted(_IBAN_LENGTHS.items()):
        by_length.setdefault(length, []).append(country)
    branches = []
    for length, countries in sorted(by_length.items()):
        groups, rest = divmod(length - 4, 4)
        names = "|".join(_ci(c) for c in countries)
        branch = f"(?:{names})[0-9]{{2}}(?:[ \u00a0\\-]?[A-Za-z0-9]{{4}}){{{groups}}}"
        if rest:
            branch += f"[ \u00a0\\-]?[A-Za-z0-9]{{{rest}}}"
        branches.append(branch)
    return f"(?P<v>{'|'.join(branches)})"


_PHONE = r"(?P<v>(?:\+|00)[1-9](?:[ .\-" + "\u00a0" + r"]?(?:\([0-9]{1,4}\)|[0-9])){6,18})"
_SSN_CONTEXT = "(?:" + "|".join(_ci(w) for w in ("ssn", "social security")) + ")[^0-9\n]{0,24}"
_IPV4 = f"(?P<v>{_OCTET}(?:\\.{_OCTET}){{3}}(?:/[0-9]{{1,2}})?)"
# An IPv6 address (full, compressed, or with an IPv4 tail), then the rest of its run of
# colon-separated hex groups and a CIDR prefix length: the whole run must be one address
# (_ip_parts), so "2001:db8::1::2" is not cut into two.
_IPV6 = (
    f"(?P<v>(?:{_HEX}(?::{_HEX}){{7}}"
    f"|{_HEX}(?::{_HEX}){{5}}:{_OCTET}(?:\\.{_OCTET}){{3}}"
    f"|(?:{_HEX}(?::{_HEX}){{0,6}})?::(?:{_HEX}(?::{_HEX}){{0,6}})?)"
    f"(?::[0-9A-Fa-f]{{0,4}})*(?:\\.{_OCTET}){{0,3}}(?:/[0-9]{{1,3}})?)"
)
_PEM = (
    "(?P<v>-----BEGIN[A-Z0-9 ]{0,40}PRIVATE KEY-----"
    "(?:(?s:.)*?-----END[A-Z0-9 ]{0,40}PRIVATE KEY-----|(?:[A-Za-z0-9+/=\r\n]*[A-Za-z0-9+/=])?))"
)
# Provider token formats as the providers document them (AWS IAM "Unique identifiers",
# GitHub "Behind GitHub's new authentication token formats", 2021, ...), collected in
# the default rules of gitleaks (github.com/gitleaks/gitleaks, config/gitleaks.toml).
_TOKENS = (
    "(?P<v>(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}"  # AWS access key ids (IAM unique id prefixes)
    "|gh[pousr]_[A-Za-z0-9]{36}"  # GitHub classic tokens
    "|github_pat_[A-Za-z0-9_]{82}"  # GitHub fine-grained personal access tokens
    "|xox[abposr]-[A-Za-z0-9\\-]{10,}"  # Slack tokens
    "|AIza[0-9A-Za-z_\\-]{35}"  # Google API keys
    "|[sr]k_live_[0-9A-Za-z]{24,}"  # Stripe live secret and restricted keys
    "|sk-[A-Za-z0-9_\\-]{20,})"  # OpenAI / Anthropic style secret keys
)
_JWT = r"(?P<v>eyJ[A-Za-z0-9_\-]{5,}\.[A-Za-z0-9_\-]{2,}\.[A-Za-z0-9_\-]*)"

_KEY_PREFIX = r"[A-Za-z0-9_.\-]*"
_TOKEN_KEY = (
    _KEY_PREFIX
    + "(?:"
    + "|".join(
        _ci(w)
        for w in ("api_key", "access_key", "secret_key", "private_key", "token", "secret", "auth")
    )
    + "|"
    + _ci("authorization")
    + ")"
)
_PASSWORD_KEY = (
    _KEY_PREFIX
    + "(?:"
    + "|".join(_ci(w) for w in ("password", "passwd", "passphrase", "pwd"))
    + ")"
)
_ASSIGN = r"[\"']?[ \t]*(?::=|=>|[:=])[ \t]*[\"']?"
# An assigned value: not a template, placeholder or mask at its start, up to whitespace, a quote
# or a list separator, and not ending with a full stop or a closing bracket (the end of a
# sentence or of a bracketed aside). So the rest of a keyed hash ``[SECRET:3f2a9c1d]`` is
# eight hex digits, which the value validators reject.
_VALUE = (
    r"(?P<v>[^ \t\r\n\"'`\[\]*<>{}()$%,;&=\\]"
    r"(?:[^ \t\r\n\"'`,;&]*[^ \t\r\n\"'`,;&.)\]}>])?)"
)
_SCHEME = "(?:(?:" + "|".join(_ci(w) for w in ("bearer", "basic", "token")) + ")[ \t]+)?"


RECOGNISERS: tuple[Recogniser, ...] = (
    Recogniser(name="SECRET", pattern=_PEM, label="PEM private key block (RFC 7468)"),
    Recogniser(
        name="SECRET",
        pattern=_TOKENS,
        validator=_token_ok,
        label="provider token: AWS access key id, GitHub, Slack, Google, Stripe, sk- keys",
    ),
    Recogniser(name="SECRET", pattern=_JWT, validator=_jwt_ok, label="JSON Web Token (RFC 7519)"),
    Recogniser(
        name="SECRET",
        pattern=f"{_TOKEN_KEY}{_ASSIGN}{_SCHEME}{_VALUE}",
        validator=_key_value_ok,
        label="api_key= / token: / secret= / Authorization: assignment (the value)",
        key=_TOKEN_KEY,
    ),
    Recogniser(
        name="SECRET",
        pattern=f"{_PASSWORD_KEY}{_ASSIGN}{_VALUE}",
        validator=_password_ok,
        label="password= / passwd: assignment (the value)",
        key=_PASSWORD_KEY,
    ),
    Recogniser(
        name="CREDIT_CARD",
        pattern=_CARD,
        refine=_card_parts,
        label="payment card number, Luhn and IIN checked (ISO/IEC 7812)",
        lead=_RUN_LEAD,
        requires=_digits_at_least(13),
    ),
    Recogniser(
        name="IBAN",
        pattern=_iban_pattern(),
        validator=_iban_ok,
        # Any two letters for the country: a superset that is far cheaper to search for.
        prefilter="[A-Za-z]{2}[0-9]{2}(?:[ \u00a0\\-]?[A-Za-z0-9]{4}){2}",
        label="IBAN, country length and mod-97 checked (ISO 13616)",
    ),
    Recogniser(
        name="US_SSN",
        pattern=r"(?P<v>[0-9]{3}-[0-9]{2}-[0-9]{4})",
        validator=_ssn_ok,
        label="US Social Security number outside the never-issued ranges",
        lead=f"[^{_WORD}\\-]",
        trail=f"[^{_WORD}\\-]|-[^{_WORD}]",
    ),
    Recogniser(
        name="US_SSN",
        pattern=f"{_SSN_CONTEXT}(?P<v>[0-9]{{3}}[ .][0-9]{{2}}[ .][0-9]{{4}})",
        validator=_ssn_ok,
        label="US Social Security number with dots or spaces, after 'SSN' or 'social security'",
        trail=f"[^{_WORD}.]|\\.[^{_WORD}]",
    ),
    Recogniser(
        name="EMAIL",
        pattern=_EMAIL,
        validator=_email_ok,
        label="e-mail address",
        lead=f"[^{_WORD}.%+\\-@]",
    ),
    Recogniser(
        name="PHONE",
        pattern=_PHONE,
        validator=_phone_ok,
        label="international phone number (+CC or 00CC, E.164)",
        lead=_RUN_LEAD,
    ),
    Recogniser(
        name="IP_ADDRESS",
        pattern=_IPV4,
        refine=_ip_parts,
        label="IPv4 address, with its CIDR prefix length",
        lead=f"[^{_WORD}.]",
        trail=f"[^{_WORD}.]|\\.[^{_WORD}]",
    ),
    Recogniser(
        name="IP_ADDRESS",
        pattern=_IPV6,
        refine=_ip_parts,
        label="IPv6 address, full or compressed, with its CIDR prefix length (RFC 4291 §2.2-2.3)",
        lead=f"[^{_WORD}:.]",
    ),
    phone_recogniser(),
)
"""The recognisers, in tie-break order (earlier wins among equally long overlapping spans).

Each type and what it finds (and, in brackets, what checks a candidate):

- ``SECRET``: PEM private key blocks (also unterminated ones), AWS access key
  ids (``AKIA``/``ASIA``...), GitHub tokens (``ghp_``, ``gho_``, ``ghu_``,
  ``ghs_``, ``ghr_``, ``github_pat_``), Slack, Google API, Stripe live and
  ``sk-`` keys, JWTs [header decodes to a JSON object with ``alg``], and the
  value of ``api_key=``, ``token:``, ``secret=``, ``Authorization: Bearer``,
  ``password=``-style assignments, also as JSON object members
  [not a template like ``${VAR}`` or a stop word like ``null``; key and token
  values need 8+ characters and three character classes or an entropy of
  3.5 bits per character].
- ``CREDIT_CARD``: 13-19 digits, contiguous or grouped 4-4-4-4(-3),
  4-6-5, 4-6-4, 4-5-6 (UATP) or 4-4-4-1..3 with spaces, dashes, dots or
  no-break spaces, also when written after other groups of digits
  (``ref 1234 4111 1111 1111 1111``) [one kind of separator, a card scheme's
  IIN range and length (UATP: 15 digits starting with 1), Luhn].
- ``IBAN``: an IBAN of a registered country, in either case, compact or in
  groups of 4 separated by spaces or dashes [the country's length, ISO 7064
  mod 97-10].
- ``US_SSN``: ``AAA-GG-SSSS``; with dots or spaces only after ``SSN`` or
  ``social security`` (within 24 characters) [not area 000/666/9xx, group
  00, serial 0000; one kind of separator].
- ``EMAIL``: ``local@domain.tld``, also with internationalised domains in
  Unicode (``bücher.de``) or punycode (``example.xn--p1ai``) [RFC 5321
  lengths, label rules on the IDNA form].
- ``PHONE``: numbers written with ``+`` or ``00`` and a country code
  (``+44 20 7946 0958``, ``+1 (415) 555-2671``, ``+49-30-123456``,
  ``0044 20 7946 0958``) [assigned E.164 country code, 8-15 digits]; and
  numbers in the national formats of :data:`PHONE_REGIONS` (``(415)
  555-2671``, ``020 7946 0958``, ``03-1234-5678``) [libphonenumber, see
  :func:`phone_recogniser`].
- ``IP_ADDRESS``: IPv4 and IPv6 (compressed, with an embedded IPv4 tail),
  with a CIDR prefix length (``10.0.0.0/8``, ``2001:db8::/32``)
  [:func:`ipaddress.ip_address` on the whole run, so ``2001:db8::1::2`` is
  none; the unspecified ``::`` is kept; a prefix length beyond the version's
  bits stays outside the span].
"""

TYPES: tuple[str, ...] = tuple(dict.fromkeys(r.name for r in RECOGNISERS))
"""The redaction type names, in :data:`RECOGNISERS` order."""


# ---------------------------------------------------------------------------
# reference path (Python re)


def recogniser_pool(recognisers: _RecogniserArg) -> tuple[Recogniser | RecogniserSet, ...]:
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


def _select(
    types: Iterable[str] | str | None, recognisers: _RecogniserArg = None
) -> tuple[_Source, ...]:
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
    out: list[_Source] = []
    for r in pool:
        if isinstance(r, Recogniser):
            if r.name in chosen:
                out.append(r)
        else:
            kinds = frozenset(r.types) & chosen
            if kinds:
                out.append(_External(r, kinds))
    return tuple(out)


def _all_types(pool: Iterable[Recogniser | RecogniserSet]) -> Iterable[str]:
    for r in pool:
        yield from _types_of(r)


def _hash_key(style: str, key: bytes | str | None) -> bytes | None:
    if style not in _STYLES:
        raise PlanError(
            f"unknown redaction style {style!r}; valid styles: {', '.join(map(repr, _STYLES))}"
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


def _spans(text: str, recs: tuple[_Source, ...]) -> list[Span]:
    padded = f"{_PAD}{text}{_PAD}"
    found: list[tuple[int, int, int, str]] = []
    for order, r in enumerate(recs):
        if isinstance(r, _External):
            found.extend((s.start, s.end, order, s.type) for s in r.spans([text])[0])
            continue
        for m in r._rx.finditer(padded):
            base = m.start("v") - 1
            for start, end in r._parts(m.group("v")):
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


def _apply(text: str, spans: list[Span], style: str, key: bytes | None) -> str:
    # Equivalent to replacing right to left: spans are disjoint and sorted by start.
    pieces: list[str] = []
    at = 0
    for span in spans:
        pieces.append(text[at : span.start])
        pieces.append(_token(text[span.start : span.end], span.type, style, key))
        at = span.end
    pieces.append(text[at:])
    return "".join(pieces)


def _redact_str(
    text: str, recs: tuple[_Source, ...], style: str, key: bytes | None, counts: dict[str, int]
) -> str:
    for _ in range(_MAX_PASSES):
        spans = _spans(text, recs)
        if not spans:
            return text
        text = _apply(text, spans, style, key)
        for span in spans:
            counts[span.type] = counts.get(span.type, 0) + 1
    raise RuntimeError(  # pragma: no cover - a replacement never matches a recogniser
        f"redaction did not reach a fixed point in {_MAX_PASSES} passes; please report this text"
    )


def _assigned_member(name: str, core: str, recs: tuple[_Source, ...]) -> Recogniser | None:
    """The first assignment recogniser whose key pattern matches ``name`` and accepts ``core``."""
    for r in recs:
        if not isinstance(r, Recogniser):
            continue
        if r._key_rx is not None and r._key_rx.fullmatch(name) and r._accepts(core):
            return r
    return None


def _redact_value(
    value: Any,
    recs: tuple[_Source, ...],
    style: str,
    key: bytes | None,
    counts: dict[str, int],
    keys: bool = True,
) -> Any:
    if isinstance(value, str):
        return _redact_str(value, recs, style, key, counts)
    if isinstance(value, list):
        return [_redact_value(v, recs, style, key, counts, keys) for v in value]
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for name, member in value.items():
            new_name = _redact_str(name, recs, style, key, counts) if keys else name
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
            out[new_name] = _redact_value(member, recs, style, key, counts, keys)
        return out
    return value


def _distinct_key(name: str, taken: Mapping[str, Any]) -> str:
    """``name`` with the first suffix `` (2)``, `` (3)``, ... that is not a key yet."""
    n = 2
    while f"{name} ({n})" in taken:
        n += 1
    return f"{name} ({n})"


def find_spans(
    text: str, *, types: Iterable[str] | str | None = None, recognisers: _RecogniserArg = None
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
    return _spans(text, _select(types, recognisers))


def redact_text(
    text: str,
    *,
    style: RedactionStyle = "placeholder",
    key: bytes | str | None = None,
    types: Iterable[str] | str | None = None,
    recognisers: _RecogniserArg = None,
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
    recs = _select(types, recognisers)
    hkey = _hash_key(style, key)
    counts: dict[str, int] = {}
    out = _redact_str(text, recs, style, hkey, counts)
    return out, dict(sorted(counts.items()))


def redact_json(
    value: Any,
    *,
    style: RedactionStyle = "placeholder",
    key: bytes | str | None = None,
    types: Iterable[str] | str | None = None,
    recognisers: _RecogniserArg = None,
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
    recs = _select(types, recognisers)
    hkey = _hash_key(style, key)
    counts: dict[str, int] = {}
    out = _redact_value(value, recs, style, hkey, counts, keys)
    return out, dict(sorted(counts.items()))


# ---------------------------------------------------------------------------
# vectorised path (Polars)


def _padded(column: str) -> pl.Expr:
    return pl.concat_str(pl.lit(_PAD), pl.col(column), pl.lit(_PAD))


def _rows_with_spans(values: pl.Series, recs: tuple[_Source, ...]) -> pl.Series:
    """Positions of ``values`` for which :func:`find_spans` finds something, without Python per row.

    1. Prefilter: every recogniser's prefilter (its bare pattern, no
       lead/trail, or a looser one: a superset) over the whole column, in one
       ``str.contains``.
    2. Candidates: ``str.extract_all`` of the framed patterns over the padded
       values of the prefiltered rows, exploded to one candidate per row; a
       candidate without what its recogniser ``requires`` is dropped.
    3. Validation: each recogniser's validator on its distinct candidates.

    A recogniser set scans the distinct values in one batch.
    """
    empty = pl.Series("i", [], pl.UInt32)
    if not recs or values.len() == 0:
        return empty
    builtin = tuple(r for r in recs if isinstance(r, Recogniser))
    found = [_builtin_rows(values, builtin)]
    externals = [r for r in recs if isinstance(r, _External)]
    if externals:
        distinct = values.drop_nulls().unique(maintain_order=True).to_list()
        hits: set[str] = set()
        for r in externals:
            todo = [t for t in distinct if t not in hits]
            hits.update(t for t, spans in zip(todo, r.spans(todo), strict=True) if spans)
        if hits:
            found.append(values.is_in(list(hits)).fill_null(False).arg_true())
    return pl.concat(found).unique().sort()


def _builtin_rows(values: pl.Series, recs: tuple[Recogniser, ...]) -> pl.Series:
    """The part of :func:`_rows_with_spans` for built-in recognisers."""
    empty = pl.Series("i", [], pl.UInt32)
    if not recs or values.len() == 0:
        return empty
    frame = values.rename("s").to_frame()
    # One pattern for all recognisers: a single scan of the column.
    anywhere = "|".join(f"(?:{r.prefilter})" for r in recs)
    hit = frame.select(pl.col("s").str.contains(anywhere).fill_null(False)).to_series()
    rows = hit.arg_true()
    if rows.len() == 0:
        return empty
    # The values are padded once, then scanned by every framed pattern.
    sub = (
        pl.DataFrame({"i": rows, "s": values.gather(rows)})
        .with_columns(_padded("s").alias("s"))
        .select(
            "i", *[pl.col("s").str.extract_all(r.scan).alias(f"c{j}") for j, r in enumerate(recs)]
        )
    )
    found: list[pl.Series] = []
    for j, r in enumerate(recs):
        cands = sub.select("i", pl.col(f"c{j}").alias("c")).explode("c").drop_nulls("c")
        if r.requires is not None:
            # A superset of the value: a candidate without it has no value that has it.
            cands = cands.filter(pl.col("c").str.contains(r.requires))
        if cands.height == 0:
            continue
        good = [c for c in cands.get_column("c").unique().to_list() if r._accepts_candidate(c)]
        if good:
            found.append(cands.filter(pl.col("c").is_in(good)).get_column("i"))
    if not found:
        return empty
    return pl.concat(found).unique().sort()


def _json_rows_with_spans(
    docs: pl.Series, recs: tuple[_Source, ...], keys: bool = True
) -> pl.Series:
    """Positions of canonical JSON documents that :func:`redact_json` would change."""
    empty = pl.Series("i", [], pl.UInt32)
    if not recs or docs.len() == 0:
        return empty
    frame = pl.DataFrame({"i": pl.int_range(docs.len(), dtype=pl.UInt32, eager=True), "j": docs})
    # String literals: keys end with ':' in the match, values are decoded by Polars.
    literals = (
        frame.select("i", pl.col("j").str.extract_all(_JSON_STRING + ":?").alias("lit"))
        .explode("lit")
        .drop_nulls("lit")
        .filter(pl.lit(keys) | ~pl.col("lit").str.ends_with(":"))
        .select("i", pl.col("lit").str.strip_suffix(":").str.json_decode(pl.String).alias("s"))
    )
    at = _rows_with_spans(literals.get_column("s"), recs)
    found = [literals.get_column("i").gather(at)]
    for r in recs:
        if not isinstance(r, Recogniser) or r._json_rx is None:
            continue
        pairs = (
            frame.select("i", pl.col("j").str.extract_all(r._json_rx.pattern).alias("c"))
            .explode("c")
            .drop_nulls("c")
        )
        if pairs.height == 0:
            continue
        good = [c for c in pairs.get_column("c").unique().to_list() if r._accepts_json_pair(c)]
        if good:
            found.append(pairs.filter(pl.col("c").is_in(good)).get_column("i"))
    return pl.concat(found).unique().sort()


def _row_recognisers(
    values: pl.Series, recs: tuple[_Source, ...]
) -> tuple[list[tuple[_Source, ...]], list[tuple[_Source, ...]]]:
    """Per text, the recognisers that can find anything in its first pass, and in later ones.

    A recogniser whose prefilter (its bare pattern, no lead or trail, or a
    looser one: a superset of its matches) does not occur in a text finds
    nothing in it: it is left out of the text's first pass. If its value
    comes first, it also finds nothing after any redaction of the text: a
    replacement token (``[EMAIL]``, ``[EMAIL:3f2a9c1d]``, a mask) only
    removes characters and puts in brackets, colons, capitals, hex digits or
    ``*``, which no bare pattern matches across. The recognisers with a context before the value
    (an assignment's key, the words before an SSN) are kept for the later
    passes of every text, since a shorter token can bring context and value
    closer; so are recogniser sets, in every pass. Redacting with these
    recognisers gives the same text and counts as with all of them, at a
    fraction of the cost of the row-by-row path.

    Returns
    -------
    tuple of (list, list)
        The first-pass and the later-pass recognisers of each text, in
        ``recs`` order.
    """
    builtin = {j: r for j, r in enumerate(recs) if isinstance(r, Recogniser)}
    context = {j for j, r in builtin.items() if not r.pattern.startswith("(?P<v>")}
    frame = values.fill_null("").rename("s").to_frame()
    checks = (pl.col("s").str.contains(r.prefilter).alias(f"r{j}") for j, r in builtin.items())
    rows = frame.select(checks).rows() if builtin else [()] * values.len()
    # Texts in which the same recognisers occur share their subsets.
    subsets: dict[tuple[bool, ...], tuple[tuple[_Source, ...], tuple[_Source, ...]]] = {}
    first: list[tuple[_Source, ...]] = []
    later: list[tuple[_Source, ...]] = []
    for row in rows:
        pair = subsets.get(row)
        if pair is None:
            absent = {j for j, hit in zip(builtin, row, strict=True) if not hit}
            pair = subsets[row] = (
                tuple(r for j, r in enumerate(recs) if j not in absent),
                tuple(r for j, r in enumerate(recs) if j not in absent or j in context),
            )
        first.append(pair[0])
        later.append(pair[1])
    return first, later


def _redact_texts(
    values: pl.Series, recs: tuple[_Source, ...], style: str, key: bytes | None
) -> tuple[list[str], list[dict[str, int]]]:
    """:func:`_redact_str` of each text, with the check for a fixed point done on the column.

    Each text gets one pass row by row (with the recognisers that can find
    anything in it); :func:`_rows_with_spans` then finds, over the column of
    results, the few texts in which a further pass finds something, and only
    those go on row by row. Same texts and counts as :func:`_redact_str`.
    """
    first, later = _row_recognisers(values, recs)
    outs: list[str] = []
    counts: list[dict[str, int]] = []
    for value, subset in zip(values.to_list(), first, strict=True):
        found: dict[str, int] = {}
        spans = _spans(value, subset)
        if spans:
            value = _apply(value, spans, style, key)
            for span in spans:
                found[span.type] = found.get(span.type, 0) + 1
        outs.append(value)
        counts.append(found)
    for i in _rows_with_spans(pl.Series(outs, dtype=pl.String), recs).to_list():
        outs[i] = _redact_str(outs[i], later[i], style, key, counts[i])
    return outs, counts


def _merge_counts(old: str | None, new: Mapping[str, int]) -> str:
    merged: dict[str, int] = dict(json.loads(old)) if old and old != "{}" else {}
    for kind, n in new.items():
        merged[kind] = merged.get(kind, 0) + n
    return canonical_json(merged)


def redact_frame(
    df: pl.DataFrame,
    *,
    style: RedactionStyle = "placeholder",
    key: bytes | str | None = None,
    types: Iterable[str] | str | None = None,
    recognisers: _RecogniserArg = None,
    keys: bool = True,
    metadata: bool = False,
    sources: bool = False,
) -> pl.DataFrame:
    """Redact the Text and Json payloads of a frame of context items, vectorised.

    Text payloads are redacted as by :func:`redact_text`; Json payloads as by
    :func:`redact_json` (string values and, with ``keys``, object keys) and
    written back in canonical form. Binary and Reference payloads are left as
    they are; ``metadata`` and ``sources`` only when asked.

    Parameters
    ----------
    df
        A frame with the columns of :data:`cognoxium.items.schema.POLARS_SCHEMA`
        (at least ``payload_kind``, ``text``, ``json``, ``content_hash``);
        other columns are carried along.
    style, key, types, recognisers
        As for :func:`redact_text`.
    keys
        Redact the object keys of Json payloads (and of ``metadata`` when it
        is redacted), as :func:`redact_json` does.
    metadata
        Also redact the ``metadata`` column (canonical JSON) as by
        :func:`redact_json`. It is not part of the content hash.
    sources
        Also redact the ``uri`` and ``title`` of every entry of the
        ``sources`` column as by :func:`redact_text`.

    Returns
    -------
    polars.DataFrame
        The same rows and columns in the same order, with ``text``, ``json``
        and ``content_hash`` (and ``metadata``, ``sources`` when asked)
        rewritten on the rows that changed, and three String columns (added
        at the end, or updated if present): ``redactions``, a canonical JSON
        object ``{TYPE: count}`` over every redacted field (``"{}"`` when
        nothing was redacted); ``redacted_from``, the content hash before
        redaction on the rows whose payload changed, null elsewhere; and
        ``unredacted``, a canonical JSON list of the fields outside the
        payload that hold data on that row and were not redacted
        (``["metadata", "sources"]``), null when there is none. Redacting a
        redacted frame again adds to the counts and keeps earlier values on
        the rows that do not change.

    Raises
    ------
    SchemaError
        If ``df`` is not a Polars DataFrame, lacks a payload column, or lacks
        the ``metadata`` or ``sources`` column it is asked to redact.
    PlanError
        On an unknown style or type name, the ``"hash"`` style without a key,
        or invalid ``recognisers`` (see :func:`find_spans`).

    Notes
    -----
    No Python runs for a row that holds no candidate. The Text column and the
    decoded JSON strings go through one ``str.contains`` of every
    recogniser's prefilter over the whole column, then ``str.extract_all`` of
    the framed patterns over the remaining rows; candidates without what
    their recogniser ``requires`` are dropped on the column, and the
    validators run on the distinct candidates left. A :class:`RecogniserSet`
    has no pattern to prefilter with: it scans every distinct text (and
    decoded JSON string) once, in one :meth:`~RecogniserSet.find_batch` call.
    Only the rows with a validated candidate are rewritten, by the reference
    path (:func:`redact_text`, :func:`redact_json`) with the recognisers whose
    prefilter occurs in the row, so the two paths agree row by row and share
    one overlap resolution.

    Examples
    --------
    >>> from cognoxium.items.model import ContextItem
    >>> from cognoxium.items.convert import items_to_frame
    >>> df = items_to_frame([
    ...     ContextItem(id="a", role="user", text="I am ana@example.org",
    ...                 created_at="2024-01-01T00:00:00Z"),
    ...     ContextItem(id="b", role="tool", payload={"kind": "json", "value": {"ip": "10.1.2.3"}},
    ...                 created_at="2024-01-01T00:00:00Z"),
    ...     ContextItem(id="c", role="user", text="hello", created_at="2024-01-01T00:00:00Z",
    ...                 metadata={"owner": "bo@example.org"}),
    ... ])
    >>> out = redact_frame(df)
    >>> out.select("text", "json", "redactions", "unredacted").rows()
    [('I am [EMAIL]', None, '{"EMAIL":1}', None), (None, '{"ip":"[IP_ADDRESS]"}', '{"IP_ADDRESS":1}', None), ('hello', None, '{}', '["metadata"]')]
    >>> out.get_column("redacted_from").to_list() == [*df.get_column("content_hash")[:2], None]
    True
    >>> redact_frame(df, metadata=True).select("metadata", "redactions").row(2)
    ('{"owner":"[EMAIL]"}', '{"EMAIL":1}')
    """  # noqa: E501
    if not isinstance(df, pl.DataFrame):
        raise SchemaError(f"redact_frame expects a polars DataFrame, got {type(df).__name__}")
    missing = [c for c in ("payload_kind", "text", "json", "content_hash") if c not in df.columns]
    missing += [
        c for c, on in (("metadata", metadata), ("sources", sources)) if on and c not in df.columns
    ]
    if missing:
        raise SchemaError(f"redact_frame: missing item columns {missing}")
    recs = _select(types, recognisers)
    hkey = _hash_key(style, key)

    kinds = df.get_column("payload_kind").cast(pl.String)
    text_rows = (kinds == "text").arg_true()
    json_rows = (kinds == "json").arg_true()
    texts = df.get_column("text").gather(text_rows).fill_null("")
    docs = df.get_column("json").gather(json_rows).fill_null("null")
    text_hits = text_rows.gather(_rows_with_spans(texts, recs))
    json_hits = json_rows.gather(_json_rows_with_spans(docs, recs, keys))

    n = df.height
    if "redactions" in df.columns:
        redactions = df.get_column("redactions").cast(pl.String).fill_null("{}")
    else:
        redactions = pl.Series("redactions", ["{}"] * n, pl.String)
    if "redacted_from" in df.columns:
        redacted_from = df.get_column("redacted_from").cast(pl.String)
    else:
        redacted_from = pl.Series("redacted_from", [None] * n, pl.String)
    columns = {
        "text": df.get_column("text"),
        "json": df.get_column("json"),
        "content_hash": df.get_column("content_hash"),
        "redactions": redactions,
        "redacted_from": redacted_from,
    }
    for payload, hits in (("text", text_hits), ("json", json_hits)):
        if hits.len() == 0:
            continue
        rows = hits.to_list()
        values = columns[payload].gather(hits)
        if payload == "text":
            new_values, row_counts = _redact_texts(values, recs, style, hkey)
        else:
            new_values, row_counts = [], []
            for value in values.to_list():
                counts: dict[str, int] = {}
                doc = json.loads(value)
                new_values.append(
                    canonical_json(_redact_value(doc, recs, style, hkey, counts, keys))
                )
                row_counts.append(counts)
        new_hashes = content_hashes(payload, (out.encode("utf-8") for out in new_values))
        new_counts = [
            _merge_counts(old, counts)
            for old, counts in zip(
                columns["redactions"].gather(hits).to_list(), row_counts, strict=True
            )
        ]
        previous = columns["content_hash"].gather(hits)
        for name, values in (
            (payload, pl.Series(new_values, dtype=pl.String)),
            ("content_hash", pl.Series(new_hashes, dtype=pl.String)),
            ("redactions", pl.Series(new_counts, dtype=pl.String)),
            ("redacted_from", previous.cast(pl.String)),
        ):
            columns[name] = columns[name].clone().scatter(rows, values)
    if metadata:
        columns.update(_redact_metadata(df, columns["redactions"], recs, style, hkey, keys))
    if sources:
        columns.update(_redact_sources(df, columns["redactions"], recs, style, hkey))
    columns["unredacted"] = _unredacted(df, metadata=metadata, sources=sources)
    return df.with_columns(series.alias(name) for name, series in columns.items())


def _redact_metadata(
    df: pl.DataFrame,
    redactions: pl.Series,
    recs: tuple[_Source, ...],
    style: str,
    hkey: bytes | None,
    keys: bool,
) -> dict[str, pl.Series]:
    """The ``metadata`` column redacted as JSON, and the counts with its redactions."""
    column = df.get_column("metadata").cast(pl.String)
    hits = _json_rows_with_spans(column.fill_null("{}"), recs, keys)
    if hits.len() == 0:
        return {}
    new_values, new_counts = [], []
    for value, old in zip(
        column.gather(hits).to_list(), redactions.gather(hits).to_list(), strict=True
    ):
        counts: dict[str, int] = {}
        new_values.append(
            canonical_json(_redact_value(json.loads(value), recs, style, hkey, counts, keys))
        )
        new_counts.append(_merge_counts(old, counts))
    rows = hits.to_list()
    return {
        "metadata": column.clone().scatter(rows, pl.Series(new_values, dtype=pl.String)),
        "redactions": redactions.clone().scatter(rows, pl.Series(new_counts, dtype=pl.String)),
    }


def _redact_sources(
    df: pl.DataFrame,
    redactions: pl.Series,
    recs: tuple[_Source, ...],
    style: str,
    hkey: bytes | None,
) -> dict[str, pl.Series]:
    """The ``sources`` column with ``uri`` and ``title`` redacted, and the counts with them."""
    column = df.get_column("sources")
    flat = (
        pl.DataFrame({"i": pl.int_range(df.height, dtype=pl.UInt32, eager=True), "s": column})
        .explode("s")
        .drop_nulls("s")
        .select(
            "i",
            pl.col("s").struct.field("uri").fill_null("").alias("uri"),
            pl.col("s").struct.field("title").fill_null("").alias("title"),
        )
    )
    found = pl.concat(
        [
            flat.get_column("i").gather(_rows_with_spans(flat.get_column(c), recs))
            for c in ("uri", "title")
        ]
    )
    hits = found.unique().sort()
    if hits.len() == 0:
        return {}
    new_values, new_counts = [], []
    for entries, old in zip(
        column.gather(hits).to_list(), redactions.gather(hits).to_list(), strict=True
    ):
        counts: dict[str, int] = {}
        for entry in entries:
            for name in ("uri", "title"):
                if entry.get(name):
                    entry[name] = _redact_str(entry[name], recs, style, hkey, counts)
        new_values.append(entries)
        new_counts.append(_merge_counts(old, counts))
    # Series.scatter does not take list-of-struct values: replace by a join on the position.
    replaced = (
        pl.DataFrame({"i": pl.int_range(df.height, dtype=pl.UInt32, eager=True), "old": column})
        .join(
            pl.DataFrame({"i": hits, "new": pl.Series(new_values, dtype=column.dtype)}),
            on="i",
            how="left",
            maintain_order="left",
        )
        .select(pl.coalesce("new", "old").alias("sources"))
        .to_series()
    )
    rows = hits.to_list()
    return {
        "sources": replaced,
        "redactions": redactions.clone().scatter(rows, pl.Series(new_counts, dtype=pl.String)),
    }


def _unredacted(df: pl.DataFrame, *, metadata: bool, sources: bool) -> pl.Series:
    """Per row, the fields outside the payload that hold data and were not redacted."""
    parts: list[pl.Expr] = []
    if not metadata and "metadata" in df.columns:
        held = pl.col("metadata").cast(pl.String).fill_null("{}") != "{}"
        parts.append(pl.when(held).then(pl.lit("metadata")))
    if not sources and "sources" in df.columns:
        held = pl.col("sources").list.len().fill_null(0) > 0
        parts.append(pl.when(held).then(pl.lit("sources")))
    if not parts:
        return pl.Series("unredacted", [None] * df.height, pl.String)
    listed = pl.concat_list(parts).list.drop_nulls()
    return df.select(
        pl.when(listed.list.len() > 0)
        .then(pl.lit('["') + listed.list.join('","') + pl.lit('"]'))
        .alias("unredacted")
    ).to_series()
