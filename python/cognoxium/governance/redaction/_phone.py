"""Phone numbers in national formats: regions, libphonenumber's matcher, :func:`phone_recogniser`.

A run of digit groups is a phone number when libphonenumber
(``phonenumbers``) finds the whole run, or a whole piece of a list
``a / b``, to be a number of one of the chosen regions: grouped as the
region groups its numbers, or, after words such as ``phone`` or ``tel``,
any valid number of the region, also written without separators. Numbers
written with ``+`` and a country code are also found by the international
recogniser (see :data:`~cognoxium.governance.redaction.RECOGNISERS`), which
needs no region.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from cognoxium.exceptions import PlanError
from cognoxium.governance.redaction._model import (
    KEY_CHARS,
    WORD_CHARS,
    Recogniser,
    any_of,
    digits_at_least,
)
from cognoxium.governance.redaction._validators import CARD_GROUPING, disjoint

__all__ = ["PHONE_REGIONS", "phone_recogniser"]

PHONE_REGIONS: tuple[str, ...] = (
    "US", "GB", "DE", "FR", "IL", "IN", "CA", "BR",
    "CN", "ID", "PK", "NG", "BD", "RU", "ET", "MX", "JP", "EG", "PH", "CD", "VN", "IR", "TR",
    "TH", "AU", "ES", "IT", "NL",
)  # fmt: skip
"""The regions (ISO 3166-1 alpha-2) whose national phone formats the built-in recogniser finds.

Presidio's default regions (United States, United Kingdom, Germany, France,
Israel, India, Canada, Brazil); the other countries among the twenty most
populous (United Nations, World Population Prospects 2024: China, Indonesia,
Pakistan, Nigeria, Bangladesh, Russia, Ethiopia, Mexico, Japan, Egypt, the
Philippines, DR Congo, Viet Nam, Iran, Türkiye, Thailand); and Australia,
Spain, Italy and the Netherlands. A number written with ``+`` and a country
code is found whatever its country; pass other regions to
:func:`phone_recogniser` (``regions=``) for other national formats."""

# Words that make a run of digits a phone number when they come shortly before it: English,
# the languages of PHONE_REGIONS' most spoken ones that write them in Latin letters, and
# Chinese, Japanese and Russian. "number" alone is left out ("order number 12345678"), but
# "my number" and "my US number" (a region code between) are in.
_PHONE_WORDS = (
    "phone", "telephone", "tel", "mobile", "cell", "cellphone", "call", "fax", "whatsapp",
    "sms", "contact number", "phone no", "telefon", "telefono", "teléfono", "téléphone",
    "tél", "telefone", "telefoon", "telepono", "handy", "mobil", "mobiel", "móvil", "movil",
    "celular", "cellulare", "cep", "gsm", "numaram", "nomor",
    "телефон", "тел", "电话", "手机", "電話", "携帯",
)  # fmt: skip
_PHONE_CONTEXT = (
    f"(?:{any_of(_PHONE_WORDS)}|[Mm][Yy](?:[ \u00a0][A-Z]{{2}})?[ \u00a0][Nn][Uu][Mm][Bb][Ee][Rr])"
)
_PHONE_KEY = (
    f"{KEY_CHARS}{any_of(('phone', 'tel', 'mobile', 'cell', 'fax', 'msisdn', 'whatsapp'))}"
    f"{KEY_CHARS}"
)

# A run that may hold a phone number: an optional "+" or "00", digit groups separated by
# one or two of " .-/" or a no-break space, or in brackets ("(415)555-0132"); or a bare run
# of 8 to 15 digits, which is a phone number only after context words or as a mobile
# number written with its national prefix 0 (see _phone_parts).
_BRACKET = "\\([0-9]{1,5}\\)[0-9]{0,8}"
_SEPARATED = (
    f"(?:\\+|00)?(?:{_BRACKET}|[0-9]{{1,6}})"
    f"(?:[ .\\-/\u00a0]{{1,2}}(?:{_BRACKET}|[0-9]{{1,8}})|{_BRACKET}){{1,6}}"
)
_PHONE_RUN = f"(?P<v>{_SEPARATED}|\\([0-9]{{1,5}}\\)[0-9]{{1,8}}|[0-9]{{8,15}})"
# Found in every text with a number: a run with a separator or a bracket, or a bare run of
# at least 8 digits (after context words or not).
_PHONE_PREFILTER = f"{_SEPARATED}|\\([0-9]{{1,5}}\\)[0-9]|[0-9]{{8}}"
# Before a run: not inside a longer run or a word, nor after "+", "#", "-", "/" or "."; after
# a word, a lower-case letter or an upper-case word of at most three letters ("Tel", "UK"),
# so the groups of an IBAN ("NL05 UYXS 9034 8092 28") are no run of their own.
_PHONE_LEAD = (
    f"[^{WORD_CHARS}+#\\-/. \u00a0]|[^0-9A-Za-z_+#\\-/.][ \u00a0]|[a-z][ \u00a0]"
    f"|[^A-Za-z][A-Z]{{1,3}}[ \u00a0]"
)
_DIGIT_RUN = re.compile("[^0-9]+")
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
    and ``4746 7583 46`` (part of an IBAN) are valid numbers somewhere. After
    context words (``phone``, ``tel``, ``my number``, ...), ``VALID`` is
    enough, and a run may be bare digits (``Phone: 5321234567``).

    A bare run of digits without context words is a number only when it is
    a mobile number written with the national prefix 0 of a region whose
    national prefix is 0, 11 or 12 digits in all (``09171234567``,
    ``05321234567``): other bare runs are as often order numbers, ids or
    ISBNs.

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

    def __call__(self, value: str, context: bool = False) -> tuple[tuple[int, int], ...]:
        return _phone_parts(value, self.regions, context)


@functools.lru_cache(maxsize=1 << 16)
def _phone_parts(
    value: str, regions: tuple[str, ...], context: bool = False
) -> tuple[tuple[int, int], ...]:
    digits = "".join(ch for ch in value if "0" <= ch <= "9")
    if len(digits) < 8 or _DATE_LIKE.fullmatch(value) or _SSN_LIKE.fullmatch(value):
        return ()
    if CARD_GROUPING.fullmatch(value):
        return ()
    international = value[0] == "+" or value.startswith("00")
    if value.isdigit() and not international and not context:
        return ((0, len(value)),) if _national_mobile(digits, regions) else ()
    lenient = international or context
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
        whole = _whole_candidate(value) and _some_region_accepts(value, digits, candidates, lenient)
        return ((0, len(value)),) if whole else ()
    pieces.add((0, len(value)))
    pieces.add((at, len(value)))
    found: list[tuple[int, int]] = []
    for region in candidates:
        if region is not None and not _may_be_national(digits, region):
            continue
        spans = _matches(value, region, _leniency(lenient), 65535) & pieces
        found.extend(spans)
        if (0, len(value)) in spans:
            break
    return tuple(disjoint(found))


def _national_mobile(digits: str, regions: Sequence[str]) -> bool:
    """Whether a bare run is 0 and a mobile number of a region of ``regions`` whose prefix is 0.

    11 or 12 digits in all (``09171234567`` in the Philippines,
    ``05321234567`` in Türkiye): libphonenumber parses the run for the
    region, the number must be valid there, of type ``MOBILE`` (or
    ``FIXED_LINE_OR_MOBILE``), and written as its national prefix and its
    national number, nothing dropped.
    """
    if not (11 <= len(digits) <= 12 and digits[0] == "0"):
        return False
    import phonenumbers

    mobile = (
        phonenumbers.PhoneNumberType.MOBILE,
        phonenumbers.PhoneNumberType.FIXED_LINE_OR_MOBILE,
    )
    for region in regions:
        if _number_types(region)[0] != "0" or not _may_be_national(digits, region):
            continue
        try:
            number = phonenumbers.parse(digits, region)
        except phonenumbers.NumberParseException:
            continue
        if (
            f"0{number.national_number}" == digits
            and phonenumbers.is_valid_number_for_region(number, region)
            and phonenumbers.number_type(number) in mobile
        ):
            return True
    return False


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
    value: str, digits: str, regions: Sequence[str | None], lenient: bool
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
        match = _matcher_for(region, lenient)._parse_and_verify(value, 0)
        if match is not None and _written_nationally(match.number, digits, region):
            if shape in _REGION_BY_SHAPE or len(_REGION_BY_SHAPE) < _MAX_SHAPES:
                _REGION_BY_SHAPE[shape] = region
            return True
    return False


def _leniency(lenient: bool) -> Any:
    """``VALID`` for a number with ``+`` or after context words, else ``STRICT_GROUPING``."""
    import phonenumbers

    return phonenumbers.Leniency.VALID if lenient else phonenumbers.Leniency.STRICT_GROUPING


def _matches(value: str, region: str | None, leniency: Any, max_tries: int) -> set[tuple[int, int]]:
    import phonenumbers

    matcher = phonenumbers.PhoneNumberMatcher(value, region, leniency=leniency, max_tries=max_tries)
    return {
        (m.start, m.end)
        for m in matcher
        if _written_nationally(m.number, _DIGIT_RUN.sub("", m.raw_string), region)
    }


def _written_nationally(number: Any, digits: str, region: str | None) -> bool:
    """Whether ``digits`` are the national number, after nothing or the region's national prefix.

    libphonenumber also reads a country calling code written without ``+``
    (``39 030 537`` as the Italian ``030537``); a run written nationally
    holds the national number (with its leading zeros), after the region's
    national prefix (and a carrier code) or after nothing. Numbers read for
    no region (written with ``+``) pass.
    """
    if region is None:
        return True
    zeros = (number.number_of_leading_zeros or 1) if number.italian_leading_zero else 0
    national = "0" * zeros + str(number.national_number)
    if not digits.endswith(national):
        return False
    prefix = digits[: len(digits) - len(national)]
    national_prefix = _number_types(region)[0]
    return not prefix or (bool(national_prefix) and prefix.startswith(national_prefix))


def _whole_run_matches(value: str, region: str | None, lenient: bool) -> bool:
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
    matcher = _matcher_for(region, lenient)
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
def _matcher_for(region: str | None, lenient: bool) -> Any:
    """A matcher whose ``_parse_and_verify`` checks candidates for ``region`` (no text of its own).

    With an empty text, the checks of the characters around a candidate find
    none, as for a candidate that is the whole text.
    """
    import phonenumbers

    # Keep libphonenumber's compiled metadata patterns (more than the re module caches).
    enable_cache = getattr(phonenumbers, "enable_pattern_cache", None)
    if enable_cache is not None:
        enable_cache()
    return phonenumbers.PhoneNumberMatcher("", region, leniency=_leniency(lenient))


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

    A vectorised prefilter selects runs of digit groups (a space, dot, dash,
    slash or bracket between or around them), bare runs of national mobile
    numbers, and context words; libphonenumber's ``PhoneNumberMatcher``
    (``phonenumbers`` package) then decides each distinct run once: the whole
    run, or each piece of a list ``a / b``, must be a number of one of the
    regions. A run written nationally must be grouped as its region groups
    numbers (leniency ``STRICT_GROUPING``); after context words (``phone``,
    ``tel``, ``mobile``, ``call``, ``my number``, ``Telefon``, ``cep``,
    ``电话``, ...: just before the number, or with filler words between such
    as ``number is``, see :data:`~cognoxium.governance.redaction.CONTEXT_FILLERS`)
    any valid number of a region will do (leniency ``VALID``), also written
    without separators (``Phone: 5321234567``). A bare run without context
    words is a number only as a mobile number written with the national
    prefix 0 (``09171234567``). A run valid in no region is left alone:
    version strings, dates, order numbers, ISBNs and amounts are not valid
    numbers, or not candidates (a date-shaped run, a bare run that is no
    mobile number, a run after ``#`` or ``-``). In JSON, the string value of
    a member whose key names a phone (``phone``, ``mobile``, ``tel``, ``fax``
    in any case, with any prefix or suffix) counts as after context words.

    Parameters
    ----------
    regions
        ISO 3166-1 alpha-2 region codes, tried in this order (the order
        changes the cost, not the answer); :data:`PHONE_REGIONS` by default.

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
    >>> uk = phone_recogniser(regions=["GB"])
    >>> redact_text("ring 020 7946 0958 or (415) 555-2671", recognisers=uk)[0]
    'ring [PHONE] or (415) 555-2671'
    >>> tr = phone_recogniser(regions=["TR"])
    >>> redact_text("Cep no: 05321234567, sipariş 5321234567", recognisers=tr)[0]
    'Cep no: [PHONE], sipariş 5321234567'
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
        context=_PHONE_CONTEXT,
        key=_PHONE_KEY,
        prefilter=_PHONE_PREFILTER,
        lead=_PHONE_LEAD,
        trail=f"[^{WORD_CHARS}]",
    )
