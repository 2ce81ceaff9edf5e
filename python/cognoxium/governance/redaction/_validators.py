"""Validators: the checks that a candidate value really is one (checksums, ranges, formats).

Each is a pure function of the candidate text: Luhn and the card schemes'
IIN ranges for payment cards, ISO 13616 lengths and ISO 7064 mod 97-10 for
IBANs, the SSA's never-issued ranges for US SSNs, E.164 country codes for
international phone numbers, :mod:`ipaddress` for IP addresses, RFC 5321 and
IDNA limits for e-mail addresses, the JOSE header of a JWT, and the
character classes and entropy of an assigned secret. The ``refine``
functions (``card_parts``, ``ip_parts``) return the valid values inside a
run as ``(start, end)`` offsets.

>>> _luhn("4111111111111111"), iban_ok("DE89 3704 0044 0532 0130 00"), ssn_ok("666-12-3456")
(True, True, False)
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import json
import math
import re
from collections import Counter
from collections.abc import Iterable
from typing import Any

__all__ = [
    "CARD_GROUPING",
    "GROUP_SEP",
    "IBAN_LENGTHS",
    "card_parts",
    "disjoint",
    "email_ok",
    "iban_ok",
    "ip_parts",
    "jwt_ok",
    "key_value_ok",
    "password_ok",
    "phone_ok",
    "ssn_ok",
    "token_ok",
]

# The separators of digit groups in card numbers (one kind per number).
GROUP_SEP = "[ .\\-\u00a0]"
# A card number as written: contiguous, or grouped 4-4-4-4(-3), 4-6-5, 4-6-4, 4-5-6 (UATP)
# or 4-4-4-1..3, with one kind of separator (checked by _card_ok).
CARD_GROUPING = re.compile(
    f"[0-9]{{4}}{GROUP_SEP}[0-9]{{6}}{GROUP_SEP}[0-9]{{4,5}}"
    f"|[0-9]{{4}}{GROUP_SEP}[0-9]{{5}}{GROUP_SEP}[0-9]{{6}}"
    f"|[0-9]{{4}}(?:{GROUP_SEP}[0-9]{{4}}){{3}}(?:{GROUP_SEP}[0-9]{{3}})?"
    f"|[0-9]{{4}}(?:{GROUP_SEP}[0-9]{{4}}){{2}}{GROUP_SEP}[0-9]{{1,3}}"
    "|[0-9]{13,19}"
)
_DIGITS = re.compile("[0-9]+")


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


def card_parts(value: str) -> list[tuple[int, int]]:
    """Card numbers inside a run of digit groups: whole groups, a card grouping, :func:`_card_ok`.

    Every window of consecutive groups written in one of the card groupings
    (:data:`CARD_GROUPING`) is checked; the longest valid windows win, then
    the leftmost, so ``1234 4111 1111 1111 1111`` gives the card that starts
    at the second group.
    """
    bounds = [m.span() for m in _DIGITS.finditer(value)]
    valid: list[tuple[int, int]] = []
    for i, (start, _) in enumerate(bounds):
        for _, end in bounds[i : i + 5]:
            window = value[start:end]
            if CARD_GROUPING.fullmatch(window) and _card_ok(window):
                valid.append((start, end))
    return disjoint(valid)


def disjoint(spans: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """The longest spans first, then the leftmost, dropping those that overlap a kept one."""
    kept: list[tuple[int, int]] = []
    for start, end in sorted(spans, key=lambda s: (s[0] - s[1], s[0])):
        if all(end <= s or e <= start for s, e in kept):
            kept.append((start, end))
    return sorted(kept)


# IBAN length per country, from the SWIFT IBAN Registry (ISO 13616-1 registration authority).
IBAN_LENGTHS: dict[str, int] = {
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


def iban_ok(value: str) -> bool:
    """Check an IBAN: ISO 13616-1 length per country and ISO 7064 MOD 97-10.

    Letters may be written in either case (one case after the check digits)
    and the groups of four separated by spaces, no-break spaces or dashes
    (one kind per IBAN).

    The first four characters move to the end, letters become numbers
    (A=10 ... Z=35), and the remainder modulo 97 must be 1.
    """
    if len({ch for ch in value if ch in _IBAN_SEPARATORS}) > 1:
        return False
    if any(ch.isupper() for ch in value[4:]) and any(ch.islower() for ch in value[4:]):
        return False  # "LV80 bANK ...": one case for the letters of the account
    iban = "".join(ch for ch in value if ch not in _IBAN_SEPARATORS).upper()
    if len(iban) != IBAN_LENGTHS.get(iban[:2], -1) or not 2 <= int(iban[2:4]) <= 98:
        return False
    rearranged = iban[4:] + iban[:4]
    return int("".join(str(int(ch, 36)) for ch in rearranged)) % 97 == 1


def ssn_ok(value: str, context: bool = False) -> bool:
    """US Social Security number AAA-GG-SSSS outside the ranges the SSA never assigns.

    Written with dashes; with dots, spaces (the same twice) or no separator
    only after context words (``context``), since a run of nine digits or a
    spaced ``AAA GG SSSS`` is as often a phone number or a reference.

    Area 000, 666 and 900-999, group 00 and serial 0000 are never issued (SSA,
    "Social Security Number Randomization", 2011; Program Operations Manual
    RM 10201.060); 078-05-1120 and 219-09-9999 were voided after appearing in
    advertising.

    Examples
    --------
    >>> ssn_ok("123-45-6789"), ssn_ok("123 45 6789"), ssn_ok("123456789", True)
    (True, False, True)
    """
    digits = "".join(ch for ch in value if "0" <= ch <= "9")
    separators = value[3:4] + value[6:7] if len(value) == 11 else ""
    if len(digits) != 9 or len(value) not in (9, 11):
        return False
    if len(value) == 11 and (separators[0] != separators[1] or separators[0] not in " .-"):
        return False
    if separators[:1] != "-" and not context:
        return False
    area, group, serial = digits[:3], digits[3:5], digits[5:]
    if area in ("000", "666") or area[0] == "9" or group == "00" or serial == "0000":
        return False
    return f"{area}-{group}-{serial}" not in ("078-05-1120", "219-09-9999")


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


def phone_ok(value: str) -> bool:
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


def ip_parts(value: str, context: bool = False) -> tuple[tuple[int, int], ...]:
    """An IP address, with its zone index and CIDR prefix length when they are valid.

    The whole run must be one address (:func:`ipaddress.ip_address`, which
    reads an IPv6 zone index such as ``%eth0``), so a run with two ``::`` is
    no address at all rather than two. The unspecified IPv6 address ``::`` is
    reported only with a prefix length (``::/0``) or after context words
    (``context``: ``bind ::``), since ``::`` alone is as often C++ or Haskell.
    A prefix length beyond 32 (IPv4) or 128 (IPv6) leaves the suffix out of
    the span.

    Examples
    --------
    >>> ip_parts("fe80::1%eth0/64"), ip_parts("::"), ip_parts("::", True), ip_parts("10.0.0.0/40")
    (((0, 15),), (), ((0, 2),), ((0, 8),))
    """
    address, slash, _ = value.partition("/")
    try:
        parsed = ipaddress.ip_address(address)
    except ValueError:
        return ()
    if parsed.version == 6 and parsed.is_unspecified and not (slash or context):
        return ()
    if slash:
        try:
            ipaddress.ip_interface(value)
        except ValueError:
            return ((0, len(address)),) if not parsed.is_unspecified or context else ()
    return ((0, len(value)),)


def email_ok(value: str) -> bool:
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


def _b64url_json(part: str) -> Any:
    data = base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
    return json.loads(data)


def jwt_ok(value: str) -> bool:
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


def token_ok(value: str) -> bool:
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


def password_ok(value: str) -> bool:
    """The value of a password assignment: 4+ characters, not a template or a stop word."""
    return _assigned_ok(value, 4)


def _entropy(value: str) -> float:
    """Shannon entropy of the character distribution, in bits per character (Shannon, 1948)."""
    n = len(value)
    return -sum(k / n * math.log2(k / n) for k in Counter(value).values())


def key_value_ok(value: str) -> bool:
    """Check the value of a key or token assignment.

    8+ characters, not a template or a stop word, and random-looking: three
    character classes (lower, upper, digit, other) or a Shannon entropy of
    at least 3.5 bits per character (the threshold of gitleaks'
    generic-api-key rule), so prose like ``token: hello`` is kept.
    """
    return _assigned_ok(value, 8) and (_classes(value) >= 3 or _entropy(value) >= 3.5)
