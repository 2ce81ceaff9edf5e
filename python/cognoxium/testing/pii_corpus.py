"""A seeded corpus of texts and JSON documents with planted personal data, and its scores.

:func:`generate` writes sentences and JSON documents that embed one value of
each redaction type at a known span (e-mail addresses with ASCII, Unicode and
punycode domains; phone numbers in the national formats of the regions of
:data:`cognoxium.governance.redaction.PHONE_REGIONS` and in international
form; payment cards, UATP and cards written after an unrelated group of
digits; IBANs in upper case, lower case, spaced, compact and dashed; US SSNs
with dashes, and with dots, spaces or no separator after a context word;
IPv4, IPv6, IPv4-mapped IPv6, IPv6 with a zone index, the unspecified ``::``
after a context word, and CIDR blocks; secrets), and hard negatives that look
like them and are not: version strings and build numbers, dates, times,
order numbers (also after a word such as ``call``), Luhn-failing cards, IBANs
with a wrong checksum, IPv6 runs with two ``::``, C++ scopes, ISBN-13 and
ISBN-10, prices and amounts, and SSN-shaped numbers without a context word.
:func:`score` compares the spans a redactor finds with the planted ones,
span by span (same start, end and type), and gives recall and precision per
type and per phone region; :func:`score_near_misses` how much of each hard
negative a redactor keeps.

Phone numbers are drawn from libphonenumber's example numbers (the
``phonenumbers`` package) with their last digits varied until valid, and
written in the region's national format as the library formats it, with the
separators people also use (``415-555-2671``, ``(415)555-2671``), as bare
digits after words such as ``Phone:`` or ``Cep no:``, or, for a mobile number
with the national prefix 0, as bare digits alone (``09171234567``). In JSON
documents a value is a key, a whole string value, part of a longer string, or
the value of a member whose key gives the context (``{"ssn": "078051123"}``).

Examples
--------
>>> from cognoxium.governance.redaction import find_spans
>>> docs = generate(seed=1, per_type=3)
>>> docs[0].kind, docs[0].fields[0].spans[0].type
('text', 'EMAIL')
>>> rows = score(docs, lambda text: [(s.start, s.end, s.type) for s in find_spans(text)])
>>> rows[0].keys() == {"group", "key", "planted", "found", "correct", "recall", "precision"}
True
>>> kept = score_near_misses(docs, lambda text: text)
>>> kept[0]["kind"], kept[0]["share_kept"]
('amazon_order', 1.0)
"""

from __future__ import annotations

import base64
import json
import random
import string
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "Document",
    "Field",
    "Planted",
    "format_table",
    "generate",
    "luhn_complete",
    "score",
    "score_near_misses",
]


@dataclass(frozen=True, slots=True)
class Planted:
    """A planted value: ``text[start:end]`` of a field, its redaction type, group and variant.

    ``group`` is the phone region (``"GB"``, ``"intl"``) for phones, the
    variant for other types (``"idn"``, ``"after_group"``, ``"dashed"``).
    ``variant`` is how the value is written (``"national"``,
    ``"after_words"``, ``"bare_mobile"``, ``"tight"`` for phones; the group
    for other types).
    """

    start: int
    end: int
    type: str
    group: str
    variant: str = ""


@dataclass(frozen=True, slots=True)
class Field:
    """One string of a document (a text, or a JSON key or string value) and what it holds.

    ``negative`` names the kind of a hard negative; ``key`` is the key of the
    member a JSON string value belongs to, when the key gives the value's
    context (``"ssn"``, ``"phone"``).
    """

    text: str
    spans: tuple[Planted, ...]
    negative: str | None = None
    key: str | None = None


@dataclass(frozen=True, slots=True)
class Document:
    """A generated document: ``kind`` is ``"text"`` or ``"json"``.

    ``fields`` are its strings: the text itself, or every key and string value
    of the JSON document ``value`` (in document order).
    """

    kind: str
    fields: tuple[Field, ...]
    value: object


_NAMES = ("ana", "bo.li", "chen_wei", "dara+news", "eli-ko", "farah", "j.smith", "noor")
_ASCII_DOMAINS = ("example.org", "mail.example.com", "corp.example.co.uk", "example.io")
_IDN_DOMAINS = ("bücher.de", "пример.рф", "例子.中国", "münchen.example", "παράδειγμα.ελ")
_PUNY_DOMAINS = ("example.xn--p1ai", "xn--bcher-kva.de", "shop.xn--fiqs8s", "xn--80ak6aa92e.com")
_LEADS = (
    "Please contact {v} about the invoice.",
    "You can reach me at {v} after lunch",
    "note: {v} (from the CRM export)",
    "{v} was mentioned twice in the ticket.",
    "Forwarded to {v}; waiting for an answer",
    "Kontakt: {v} bis Freitag.",
)
_SSN_CONTEXTS = (
    "SSN: {v}",
    "my SSN is {v}",
    "Social Security number {v}",
    "social security no. {v}",
)
_PHONE_CONTEXTS = (
    "Phone: {v}",
    "call me at {v} after six",
    "my number is {v}",
    "Tel. {v} (office)",
    "mobile {v}",
    "WhatsApp: {v}",
    "Telefon: {v}",
    "Cep no: {v}",
    "Telepono: {v}",
    "phone number is {v}.",
)
_IP_CONTEXTS = (
    "bind {v} port 443",
    "listen on {v}",
    "ip: {v}",
    "the server listens on {v} too",
)
# Keys of JSON members that give their string value its context, per type.
_CONTEXT_KEYS = {
    "US_SSN": ("ssn", "employee_ssn"),
    "PHONE": ("phone", "mobile", "contact_phone"),
    "IP_ADDRESS": ("bind_address", "listen_ip"),
}
# Values that need context words (or a member key) to be found.
_NEEDS_CONTEXT = {
    ("US_SSN", "spaced"),
    ("US_SSN", "dotted"),
    ("US_SSN", "bare"),
    ("PHONE", "after_words"),
    ("IP_ADDRESS", "unspecified"),
}


def luhn_complete(body: str) -> str:
    """``body`` followed by its Luhn check digit (ISO/IEC 7812-1), as card numbers end.

    Examples
    --------
    >>> luhn_complete("7992739871")
    '79927398713'
    """
    total = 0
    for i, ch in enumerate(reversed(body)):
        d = int(ch)
        if i % 2 == 0:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return body + str((10 - total % 10) % 10)


def _digits(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(string.digits) for _ in range(n))


def _group(number: str, sizes: Sequence[int], sep: str) -> str:
    out, at = [], 0
    for size in sizes:
        out.append(number[at : at + size])
        at += size
    return sep.join(out)


def _card(rng: random.Random) -> tuple[str, str]:
    scheme = rng.choice(("visa", "mastercard", "amex", "uatp", "discover", "after_group"))
    sep = rng.choice((" ", "-", ""))
    if scheme in ("visa", "after_group"):
        number = luhn_complete("4" + _digits(rng, 14))
        sizes: tuple[int, ...] = (4, 4, 4, 4)
    elif scheme == "mastercard":
        number = luhn_complete(str(rng.randint(51, 55)) + _digits(rng, 13))
        sizes = (4, 4, 4, 4)
    elif scheme == "discover":
        number = luhn_complete("6011" + _digits(rng, 11))
        sizes = (4, 4, 4, 4)
    elif scheme == "amex":
        number = luhn_complete(rng.choice(("34", "37")) + _digits(rng, 12))
        sizes = (4, 6, 5)
    else:
        number = luhn_complete("1" + _digits(rng, 13))
        sizes = (4, 5, 6)
    if scheme == "after_group":
        sep = sep or " "  # the reference group before it is written with a separator
    return (_group(number, sizes, sep) if sep else number), scheme


def _card_after_group(rng: random.Random, card: str) -> str:
    """The unrelated group of four digits written before a card (a reference)."""
    sep = " " if " " in card else ("-" if "-" in card else " ")
    return f"{rng.randint(0, 1)}{_digits(rng, 3)}{sep}"


# Bank identifiers by country: (country, letters of the bank code, digits after).
_IBAN_SHAPES = (
    ("GB", 4, 14),
    ("DE", 0, 18),
    ("FR", 0, 23),
    ("NL", 4, 10),
    ("ES", 0, 20),
    ("IT", 1, 22),
    ("BE", 0, 12),
    ("CH", 0, 17),
)


def _iban_check(country: str, bban: str) -> str:
    numeric = "".join(str(int(ch, 36)) for ch in bban + country + "00")
    return f"{98 - int(numeric) % 97:02d}"


def _iban(rng: random.Random, *, valid: bool = True) -> tuple[str, str]:
    country, letters, digits = rng.choice(_IBAN_SHAPES)
    bban = "".join(rng.choice(string.ascii_uppercase) for _ in range(letters)) + _digits(
        rng, digits
    )
    check = _iban_check(country, bban)
    if not valid:
        check = f"{(int(check) + rng.randint(1, 9)) % 97 + 2:02d}"
    compact = country + check + bban
    variant = rng.choice(("compact", "spaced", "lower", "dashed"))
    spaced = " ".join(compact[i : i + 4] for i in range(0, len(compact), 4))
    text = {
        "compact": compact,
        "spaced": spaced,
        "lower": spaced.lower(),
        "dashed": spaced.replace(" ", "-"),
    }[variant]
    return text, variant


def _ssn_digits(rng: random.Random) -> tuple[str, str, str]:
    area = rng.choice([a for a in range(1, 900) if a != 666])
    return f"{area:03d}", f"{rng.randint(1, 99):02d}", f"{rng.randint(1, 9999):04d}"


def _email(rng: random.Random) -> tuple[str, str]:
    variant = rng.choice(("ascii", "idn", "punycode"))
    domains = {"ascii": _ASCII_DOMAINS, "idn": _IDN_DOMAINS, "punycode": _PUNY_DOMAINS}[variant]
    return f"{rng.choice(_NAMES)}{rng.randint(1, 99)}@{rng.choice(domains)}", variant


def _ip(rng: random.Random) -> tuple[str, str]:
    variant = rng.choice(
        (
            "ipv4",
            "ipv6",
            "ipv4_cidr",
            "ipv6_cidr",
            "ipv4_mapped",
            "zone",
            "unspecified",
            "unspecified_cidr",
        )
    )
    ipv4 = ".".join(str(rng.randint(1, 254)) for _ in range(4))
    if variant == "ipv4":
        return ipv4, variant
    if variant == "ipv4_cidr":
        return ipv4 + f"/{rng.randint(8, 30)}", variant
    if variant == "ipv4_mapped":
        return "::ffff:" + ipv4, variant
    if variant == "zone":
        zone = rng.choice(("eth0", "en0", "wlan1", "25"))
        text = f"fe80::{rng.randint(1, 0xFFFF):x}%{zone}"
        return (text + "/64" if rng.random() < 0.3 else text), variant
    if variant == "unspecified":
        return "::", variant
    if variant == "unspecified_cidr":
        return rng.choice(("::/0", "::/128")), variant
    groups = [f"{rng.randint(1, 0xFFFF):x}" for _ in range(rng.randint(2, 4))]
    text = "2001:db8:" + ":".join(groups[:-1]) + "::" + groups[-1]
    if variant == "ipv6_cidr":
        text = "2001:db8:" + f"{rng.randint(1, 0xFFFF):x}" + f"::/{rng.choice((32, 48, 56, 64))}"
    return text, variant


def _b64(data: object) -> str:
    raw = json.dumps(data, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _secret(rng: random.Random) -> tuple[str, str, str]:
    """A secret, its variant and the text around it (``{v}`` marks the value)."""
    alnum = string.ascii_letters + string.digits
    variant = rng.choice(("aws", "github", "jwt", "api_key", "password"))
    if variant == "aws":
        value = "AKIA" + "".join(
            rng.choice(string.ascii_uppercase + string.digits) for _ in range(16)
        )
        return value, variant, "the deploy key {v} leaked"
    if variant == "github":
        return "ghp_" + "".join(rng.choice(alnum) for _ in range(36)), variant, "token {v} in CI"
    if variant == "jwt":
        head = _b64({"alg": "HS256", "typ": "JWT"})
        body = _b64({"sub": str(rng.randint(1, 10**6)), "iat": 1700000000})
        sig = "".join(rng.choice(alnum + "-_") for _ in range(43))
        return f"{head}.{body}.{sig}", variant, "Cookie {v} expired"
    if variant == "api_key":
        value = "".join(rng.choice(alnum) for _ in range(28))
        return value, variant, "config: api_key={v} region=eu"
    value = "".join(rng.choice(alnum) for _ in range(10)) + "!"
    return value, variant, "login with password: {v} please"


def _phone(rng: random.Random, region: str) -> tuple[str, str]:
    """A valid number of ``region`` as written, and how: see :class:`Planted` ``variant``."""
    import phonenumbers
    from phonenumbers import PhoneNumberFormat, PhoneNumberType

    number = _valid_number(rng, region)
    text = phonenumbers.format_number(number, PhoneNumberFormat.NATIONAL)
    digits = "".join(ch for ch in text if ch.isdigit())
    mobile = phonenumbers.number_type(number) == PhoneNumberType.MOBILE
    roll = rng.random()
    if roll < 0.15 and mobile and digits[0] == "0" and 11 <= len(digits) <= 12:
        return digits, "bare_mobile"
    if roll < 0.35 and len(digits) <= 12:
        return digits, "after_words"
    if region in ("US", "CA") and roll < 0.5:
        return text.replace(") ", ")"), "tight"
    if region in ("US", "CA") and rng.random() < 0.5:
        digits = str(number.national_number)
        text = rng.choice(("-", ".", " ")).join((digits[:3], digits[3:6], digits[6:]))
    return text, "national"


def _valid_number(rng: random.Random, region: str) -> Any:
    """A valid fixed-line or mobile number of ``region``: an example with its last digits varied."""
    import phonenumbers
    from phonenumbers import PhoneNumberType

    kind = rng.choice((PhoneNumberType.FIXED_LINE, PhoneNumberType.MOBILE))
    example = phonenumbers.example_number_for_type(region, kind) or phonenumbers.example_number(
        region
    )
    assert example is not None
    national = str(example.national_number)
    for _ in range(200):
        tail = _digits(rng, 3)
        number = phonenumbers.PhoneNumber(
            country_code=example.country_code,
            national_number=int(national[:-3] + tail),
            italian_leading_zero=example.italian_leading_zero,
        )
        if phonenumbers.is_valid_number_for_region(number, region):
            return number
    return example


def _international(rng: random.Random, regions: Sequence[str]) -> str:
    import phonenumbers
    from phonenumbers import PhoneNumberFormat

    region = rng.choice(regions)
    number = _valid_number(rng, region)
    text = phonenumbers.format_number(number, PhoneNumberFormat.INTERNATIONAL)
    return text if rng.random() < 0.7 else "00" + text[1:]


def _isbn13(rng: random.Random) -> str:
    body = "978" + _digits(rng, 9)
    total = sum(int(d) * (1 if i % 2 == 0 else 3) for i, d in enumerate(body))
    check = (10 - total % 10) % 10
    return f"{body[:3]}-{body[3]}-{body[4:8]}-{body[8:12]}-{check}"


_NEGATIVES = (
    "version", "build", "date", "time", "order", "order_after_words", "amazon_order",
    "bad_card", "bad_iban", "bad_ipv6", "cpp_scope", "isbn", "isbn10", "price", "amount",
    "ssn_no_context", "ssn_bare_no_context",
)  # fmt: skip
"""The kinds of hard negatives, ``per_type`` of each in a corpus."""


def _version(rng: random.Random) -> str:
    parts = [str(rng.randint(0, 20)) for _ in range(rng.choice((3, 4, 5)))]
    text = ".".join(parts)
    return ("v" + text) if len(parts) == 4 else text


def _build(rng: random.Random) -> str:
    major, minor, patch = rng.randint(1, 30), rng.randint(0, 20), rng.randint(0, 999)
    return rng.choice(
        (
            f"build {major}.0.{rng.randint(10000, 30000)}.{patch}",
            f"v{major}.{minor}.{patch}-rc.{rng.randint(1, 9)}",
            f"build {rng.randint(2015, 2030)}.{rng.randint(1, 12):02d}.{_digits(rng, 4)}",
        )
    )


def _date(rng: random.Random) -> str:
    y, m, d = rng.randint(1990, 2030), rng.randint(1, 12), rng.randint(1, 28)
    return rng.choice((f"{y}-{m:02d}-{d:02d}", f"{d:02d}/{m:02d}/{y}", f"{d}.{m}.{y}"))


def _time(rng: random.Random) -> str:
    hh, mm = rng.randint(0, 23), rng.randint(0, 59)
    return rng.choice(
        (f"{hh:02d}:{mm:02d}:{rng.randint(0, 59):02d}", f"{hh:02d}:{mm:02d}-{hh:02d}:59")
    )


def _order(rng: random.Random) -> str:
    return rng.choice(
        (
            f"#{_digits(rng, 7)}",
            f"ORD-{rng.randint(2015, 2030)}-{_digits(rng, 6)}",
            f"order {_digits(rng, 8)}",
            f"PO{_digits(rng, 9)}",
        )
    )


def _order_after_words(rng: random.Random) -> str:
    # A word that gives a phone number its context, then other words: no context.
    return f"{rng.choice(('call', 'phone', 'Tel'))} about order {_digits(rng, 8)}"


def _bad_card(rng: random.Random) -> str:
    good = luhn_complete("4" + _digits(rng, 14))
    bad = good[:-1] + str((int(good[-1]) + rng.randint(1, 9)) % 10)
    return _group(bad, (4, 4, 4, 4), rng.choice((" ", "-")))


def _isbn10(rng: random.Random) -> str:
    body = _digits(rng, 9)
    check = sum((10 - i) * int(d) for i, d in enumerate(body)) * 10 % 11
    digit = "X" if check == 10 else str(check)
    dashed = f"{body[0]}-{body[1:4]}-{body[4:9]}-{digit}"
    return "ISBN " + rng.choice((dashed, body + digit))


def _amount(rng: random.Random) -> str:
    return rng.choice(
        (
            f"{rng.randint(1, 99)} {_digits(rng, 3)} {_digits(rng, 3)},{_digits(rng, 2)} €",
            f"€{rng.randint(1, 999)}.{_digits(rng, 3)},{_digits(rng, 2)}",
            f"USD {rng.randint(1, 999)},{_digits(rng, 3)},{_digits(rng, 3)}.{_digits(rng, 2)}",
        )
    )


def _ssn_no_context(rng: random.Random) -> str:
    area, group, serial = _ssn_digits(rng)
    # Areas 001-599: "612 34 5678" would be a valid Spanish number, not a negative.
    return f"{int(area) % 600 or 1:03d} {group} {serial}"


def _ssn_bare_no_context(rng: random.Random) -> str:
    area, group, serial = _ssn_digits(rng)
    return f"ref {area}{group}{serial}"


_NEGATIVE_MAKERS: dict[str, Callable[[random.Random], str]] = {
    "version": _version,
    "build": _build,
    "date": _date,
    "time": _time,
    "order": _order,
    "order_after_words": _order_after_words,
    "amazon_order": lambda rng: (
        f"order {rng.randint(100, 499)}-{_digits(rng, 7)}-{_digits(rng, 7)}"
    ),
    "bad_card": _bad_card,
    "bad_iban": lambda rng: _iban(rng, valid=False)[0],
    "bad_ipv6": lambda rng: f"2001:db8::{rng.randint(1, 0xFFFF):x}::{rng.randint(1, 0xFFFF):x}",
    "cpp_scope": lambda rng: rng.choice(
        ("std::vector<int>", "MyClass::toString()", "f :: Int -> Int")
    ),
    "isbn": lambda rng: "ISBN " + _isbn13(rng),
    "isbn10": _isbn10,
    "price": lambda rng: f"${rng.randint(1, 9)},{_digits(rng, 3)}.{_digits(rng, 2)}",
    "amount": _amount,
    "ssn_no_context": _ssn_no_context,
    "ssn_bare_no_context": _ssn_bare_no_context,
}
"""Each kind of :data:`_NEGATIVES`: a value that looks like personal data and is not."""


def _negative(rng: random.Random, kind: str) -> str:
    """A value of ``kind`` that looks like personal data and is not."""
    return _NEGATIVE_MAKERS[kind](rng)


def _sentence(rng: random.Random, template: str, value: str) -> tuple[str, int]:
    at = template.index("{v}")
    return template[:at] + value + template[at + 3 :], at


def _planted(rng: random.Random, kind: str, regions: Sequence[str]) -> tuple[str, Planted]:
    """A sentence holding one planted value of ``kind`` (``PHONE:GB`` for a region)."""
    prefix = ""
    template = rng.choice(_LEADS)
    if kind == "EMAIL":
        value, group = _email(rng)
        variant = group
    elif kind.startswith("PHONE:"):
        group = kind.split(":", 1)[1]
        if group == "intl":
            value, variant = _international(rng, regions), "international"
        else:
            value, variant = _phone(rng, group)
        if variant == "after_words":
            template = rng.choice(_PHONE_CONTEXTS)
        kind = "PHONE"
    elif kind == "CREDIT_CARD":
        value, group = _card(rng)
        variant = group
        if group == "after_group":
            prefix = "ref " + _card_after_group(rng, value)
    elif kind == "IBAN":
        value, group = _iban(rng)
        variant = group
    elif kind == "US_SSN":
        area, grp, serial = _ssn_digits(rng)
        sep = rng.choice(("-", " ", ".", ""))
        value = sep.join((area, grp, serial))
        group = variant = {"-": "dashed", " ": "spaced", ".": "dotted", "": "bare"}[sep]
        template = rng.choice(_SSN_CONTEXTS)
    elif kind == "IP_ADDRESS":
        value, group = _ip(rng)
        variant = group
        if group == "unspecified":
            template = rng.choice(_IP_CONTEXTS)
    else:
        value, group, template = _secret(rng)
        variant = group
    text, at = _sentence(rng, template, prefix + value)
    start = at + len(prefix)
    return text, Planted(start, start + len(value), kind, group, variant)


def generate(
    *, seed: int = 0, per_type: int = 60, regions: Sequence[str] | None = None
) -> list[Document]:
    """Generate the corpus: texts and JSON documents with planted values and hard negatives.

    Parameters
    ----------
    seed
        Seed of the generator; the same seed gives the same documents.
    per_type
        Planted values per type and per phone region (the international
        phone form counts as one more region), each in a text; as many JSON
        documents again, each holding one value per type, as a key, a value
        or inside a longer string; and ``per_type`` hard negatives per kind.
    regions
        Phone regions; :data:`cognoxium.governance.redaction.PHONE_REGIONS`
        when ``None``.

    Returns
    -------
    list of Document
        Texts first, then JSON documents, then texts with a hard negative.

    Raises
    ------
    ValueError
        If ``per_type`` is less than 1.
    """
    from cognoxium.governance.redaction import PHONE_REGIONS

    if per_type < 1:
        raise ValueError(f"per_type must be at least 1, got {per_type}")
    regions = tuple(PHONE_REGIONS if regions is None else regions)
    rng = random.Random(seed)
    kinds = [
        "EMAIL",
        *(f"PHONE:{r}" for r in (*regions, "intl")),
        "CREDIT_CARD",
        "IBAN",
        "US_SSN",
        "IP_ADDRESS",
        "SECRET",
    ]
    docs: list[Document] = []
    for kind in kinds:
        for _ in range(per_type):
            text, planted = _planted(rng, kind, regions)
            docs.append(Document("text", (Field(text, (planted,)),), text))
    for _ in range(per_type):
        docs.append(_json_document(rng, kinds, regions))
    for kind in _NEGATIVES:
        for _ in range(per_type):
            text, _ = _sentence(rng, rng.choice(_LEADS), _negative(rng, kind))
            docs.append(Document("text", (Field(text, (), negative=kind),), text))
    return docs


def _json_document(rng: random.Random, kinds: Sequence[str], regions: Sequence[str]) -> Document:
    """A JSON object holding one value per kind.

    Each value is a key, a whole string value, inside a longer string value,
    or the value of a member whose key gives its context (``"ssn"``); a value
    that needs context words is inside a sentence that has them or under such
    a key.
    """
    members: dict[str, object] = {}
    fields: list[Field] = []
    chosen = [k for k in kinds if not k.startswith("PHONE:")] + [
        f"PHONE:{rng.choice([*regions, 'intl'])}"
    ]
    contacts: dict[str, str] = {}
    for n, kind in enumerate(chosen):
        text, planted = _planted(rng, kind, regions)
        value = text[planted.start : planted.end]
        whole = Planted(0, len(value), planted.type, planted.group, planted.variant)
        places = ["key", "value", "inside", "keyed"]
        if planted.type == "SECRET":
            places = ["inside"]  # a secret's recogniser may need its context words
        elif (planted.type, planted.variant) in _NEEDS_CONTEXT:
            places = ["inside", "keyed"]
        if planted.type not in _CONTEXT_KEYS:
            places = [p for p in places if p != "keyed"]
        where = rng.choice(places)
        if where == "key":
            contacts[value] = f"contact {n}"
            fields.append(Field(value, (whole,)))
            fields.append(Field(f"contact {n}", ()))
        elif where == "value":
            members[f"field_{n}"] = value
            fields.append(Field(f"field_{n}", ()))
            fields.append(Field(value, (whole,)))
        elif where == "keyed":
            key = f"{rng.choice(_CONTEXT_KEYS[planted.type])}_{n}"
            members[key] = value
            fields.append(Field(key, ()))
            fields.append(Field(value, (whole,), key=key))
        else:
            members[f"note_{n}"] = text
            fields.append(Field(f"note_{n}", ()))
            fields.append(Field(text, (planted,)))
    if contacts:
        members["contacts"] = contacts
        fields.append(Field("contacts", ()))
    return Document("json", tuple(fields), members)


_Finder = Callable[[str], Sequence[tuple[int, int, str]]]
_MemberFinder = Callable[[str, str], Sequence[tuple[int, int, str]]]


def score(
    docs: Sequence[Document], find: _Finder, find_member: _MemberFinder | None = None
) -> list[dict[str, object]]:
    """Recall and precision of a span finder on the corpus, per type, phone region and variant.

    A found span is correct when a planted span has the same start, end and
    type. Per type, recall is correct / planted and precision correct /
    found. Per phone region (group ``"phone region"``) and per variant
    (group ``"variant"``, key ``TYPE:variant``), the found spans are those of
    the fields that hold a value of that region or variant.

    Parameters
    ----------
    docs
        Documents from :func:`generate`.
    find
        Called on each field's text; returns ``(start, end, type)`` spans in
        characters.
    find_member
        Called with the member key and the text in place of ``find`` for a
        JSON string value whose key gives its context (:attr:`Field.key`):
        ``{"ssn": "078051123"}``. ``None`` calls ``find`` on the text alone.

    Returns
    -------
    list of dict
        One row per type (``group`` ``"type"``), per phone region (``"phone
        region"``) and per variant (``"variant"``), with ``key``,
        ``planted``, ``found``, ``correct``, ``recall`` and ``precision``
        (``1.0`` when there is nothing to divide).
    """
    counts: dict[tuple[str, str], list[int]] = {}

    def add(key: tuple[str, str], planted: int, found: int, correct: int) -> None:
        row = counts.setdefault(key, [0, 0, 0])
        row[0] += planted
        row[1] += found
        row[2] += correct

    for doc in docs:
        for f in doc.fields:
            truth = {(p.start, p.end, p.type) for p in f.spans}
            spans = (
                find(f.text) if f.key is None or find_member is None else find_member(f.key, f.text)
            )
            hits = {(int(s), int(e), str(t)) for s, e, t in spans}
            for t in {p.type for p in f.spans} | {t for _, _, t in hits}:
                add(
                    ("type", t),
                    sum(1 for p in truth if p[2] == t),
                    sum(1 for p in hits if p[2] == t),
                    sum(1 for p in hits & truth if p[2] == t),
                )
            for p in f.spans:
                same_type = {s for s in hits if s[2] == p.type}
                correct = int((p.start, p.end, p.type) in same_type)
                add(("variant", f"{p.type}:{p.variant}"), 1, len(same_type), correct)
                if p.type == "PHONE":
                    add(("phone region", p.group), 1, len(same_type), correct)
    rows: list[dict[str, object]] = []
    for (group, key), (planted, found, correct) in sorted(counts.items()):
        rows.append(
            {
                "group": group,
                "key": key,
                "planted": planted,
                "found": found,
                "correct": correct,
                "recall": correct / planted if planted else 1.0,
                "precision": correct / found if found else 1.0,
            }
        )
    return rows


def score_near_misses(
    docs: Sequence[Document], redact: Callable[[str], str]
) -> list[dict[str, object]]:
    """How much of each hard negative a redactor keeps, per kind.

    Parameters
    ----------
    docs
        Documents from :func:`generate`.
    redact
        Called on the text of each hard negative; returns the redacted text.

    Returns
    -------
    list of dict
        One row per kind of hard negative, sorted by kind, with ``kind``,
        ``texts``, ``kept`` (texts returned unchanged) and ``share_kept``
        (characters of the texts kept in place, over all characters: 1.0
        when every text is unchanged).
    """
    counts: dict[str, list[int]] = {}
    for doc in docs:
        for f in doc.fields:
            if f.negative is None:
                continue
            out = redact(f.text)
            row = counts.setdefault(f.negative, [0, 0, 0, 0])
            row[0] += 1
            row[1] += out == f.text
            row[2] += len(f.text) if out == f.text else _kept_in_place(f.text, out)
            row[3] += len(f.text)
    return [
        {"kind": kind, "texts": n, "kept": kept, "share_kept": chars / total if total else 1.0}
        for kind, (n, kept, chars, total) in sorted(counts.items())
    ]


def _kept_in_place(text: str, out: str) -> int:
    """Characters of ``text`` that ``out`` keeps: its common prefix and suffix with ``text``."""
    head = 0
    while head < min(len(text), len(out)) and text[head] == out[head]:
        head += 1
    tail = 0
    while tail < min(len(text), len(out)) - head and text[-1 - tail] == out[-1 - tail]:
        tail += 1
    return head + tail


def format_table(rows: Sequence[dict[str, object]]) -> str:
    """The rows of :func:`score` as a Markdown table.

    Parameters
    ----------
    rows
        Rows from :func:`score`.

    Returns
    -------
    str
        A Markdown table, one line per row, ending with a newline.
    """
    lines = [
        "| group | key | planted | found | correct | recall | precision |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['group']} | {r['key']} | {r['planted']} | {r['found']} | {r['correct']} "
            f"| {float(r['recall']):.3f} | {float(r['precision']):.3f} |"  # type: ignore[arg-type]
        )
    return "\n".join(lines) + "\n"
