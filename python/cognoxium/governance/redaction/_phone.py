"""Phone numbers in national formats: regions, libphonenumber's matcher, :func:`phone_recogniser`.

A run of digit groups is a phone number when libphonenumber
(``phonenumbers``) finds the whole run, or a whole piece of a list
``a / b``, to be a number of one of the chosen regions. Numbers written with
``+`` and a country code are also found by the international recogniser
(see :data:`~cognoxium.governance.redaction.RECOGNISERS`), which needs no
region.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from cognoxium.exceptions import PlanError
from cognoxium.governance.redaction._model import WORD_CHARS, Recogniser, digits_at_least
from cognoxium.governance.redaction._validators import CARD_GROUPING, disjoint

__all__ = ["PHONE_REGIONS", "phone_recogniser"]

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
    if CARD_GROUPING.fullmatch(value):
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
    return tuple(disjoint(found))


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
    >>> from cognoxium.governance.redaction import redact_text
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
        requires=digits_at_least(8),
        lead=f"[^{WORD_CHARS}+#\\-/. \u00a0]|[^0-9A-Za-z_+#\\-/.][ \u00a0]|[A-Za-z][ \u00a0]",
        trail=f"[^{WORD_CHARS}]",
    )
