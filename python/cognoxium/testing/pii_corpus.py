"""A seeded corpus of texts and JSON documents with planted personal data, and its scores.

:func:`generate` writes sentences and JSON documents that embed one value of
each redaction type at a known span (e-mail addresses with ASCII, Unicode and
punycode domains; phone numbers in the national formats of the regions of
:data:`cognoxium.governance.redaction.PHONE_REGIONS` and in international
form; payment cards, UATP and cards written after an unrelated group of
digits; IBANs in upper case, lower case, spaced, compact and dashed; US SSNs
with dashes, and with dots or spaces after a context word; IPv4, IPv6 and
CIDR blocks; secrets), and hard negatives that look like them and are not:
version strings, dates, times, order numbers, Luhn-failing cards, IBANs with
a wrong checksum, IPv6 runs with two ``::``, ISBNs, prices and SSN-shaped
numbers without a context word. :func:`score` compares the spans a redactor
finds with the planted ones, span by span (same start, end and type), and
gives recall and precision per type and per phone region.

Phone numbers are drawn from libphonenumber's example numbers (the
``phonenumbers`` package) with their last digits varied until valid, and
written in the region's national format as the library formats it, or with
the separators people also use (``415-555-2671``).

Examples
--------
>>> from cognoxium.governance.redaction import find_spans
>>> docs = generate(seed=1, per_type=3)
>>> docs[0].kind, docs[0].fields[0].spans[0].type
('text', 'EMAIL')
>>> rows = score(docs, lambda text: [(s.start, s.end, s.type) for s in find_spans(text)])
>>> rows[0].keys() == {"group", "key", "planted", "found", "correct", "recall", "precision"}
True
"""

from __future__ import annotations

import base64
import json
import random
import string
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = ["Document", "Field", "Planted", "format_table", "generate", "luhn_complete", "score"]


@dataclass(frozen=True, slots=True)
class Planted:
    """A planted value: ``text[start:end]`` of a field, its redaction type and its group.

    ``group`` is the phone region (``"GB"``, ``"intl"``) for phones, the
    variant for other types (``"idn"``, ``"after_group"``, ``"dashed"``).
    """

    start: int
    end: int
    type: str
    group: str


@dataclass(frozen=True, slots=True)
class Field:
    """One string of a document (a text, or a JSON key or string value) and what it holds."""

    text: str
    spans: tuple[Planted, ...]
    negative: str | None = None


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
    variant = rng.choice(("ipv4", "ipv6", "ipv4_cidr", "ipv6_cidr"))
    if variant.startswith("ipv4"):
        text = ".".join(str(rng.randint(1, 254)) for _ in range(4))
        return (text + f"/{rng.randint(8, 30)}" if variant == "ipv4_cidr" else text), variant
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


def _phone(rng: random.Random, region: str) -> str:
    import phonenumbers
    from phonenumbers import PhoneNumberFormat, PhoneNumberType

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
            break
    else:
        number = example
    text = phonenumbers.format_number(number, PhoneNumberFormat.NATIONAL)
    if region in ("US", "CA") and rng.random() < 0.5:
        digits = str(number.national_number)
        text = rng.choice(("-", ".", " ")).join((digits[:3], digits[3:6], digits[6:]))
    return text


def _international(rng: random.Random, regions: Sequence[str]) -> str:
    import phonenumbers
    from phonenumbers import PhoneNumberFormat

    region = rng.choice(regions)
    national = _phone(rng, region)
    number = phonenumbers.parse(national, region)
    text = phonenumbers.format_number(number, PhoneNumberFormat.INTERNATIONAL)
    return text if rng.random() < 0.7 else "00" + text[1:]


def _isbn13(rng: random.Random) -> str:
    body = "978" + _digits(rng, 9)
    total = sum(int(d) * (1 if i % 2 == 0 else 3) for i, d in enumerate(body))
    check = (10 - total % 10) % 10
    return f"{body[:3]}-{body[3]}-{body[4:8]}-{body[8:12]}-{check}"


def _negative(rng: random.Random) -> tuple[str, str]:
    """A value that looks like personal data and is not, and its kind."""
    kind = rng.choice(
        (
            "version",
            "date",
            "time",
            "order",
            "bad_card",
            "bad_iban",
            "bad_ipv6",
            "isbn",
            "price",
            "ssn_no_context",
        )
    )
    if kind == "version":
        parts = [str(rng.randint(0, 20)) for _ in range(rng.choice((3, 4, 5)))]
        text = ".".join(parts)
        text = ("v" + text) if len(parts) == 4 else text
    elif kind == "date":
        y, m, d = rng.randint(1990, 2030), rng.randint(1, 12), rng.randint(1, 28)
        text = rng.choice((f"{y}-{m:02d}-{d:02d}", f"{d:02d}/{m:02d}/{y}", f"{d}.{m}.{y}"))
    elif kind == "time":
        text = f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}"
    elif kind == "order":
        text = rng.choice(
            (
                f"#{_digits(rng, 7)}",
                f"ORD-{rng.randint(2015, 2030)}-{_digits(rng, 6)}",
                f"order {_digits(rng, 8)}",
                f"PO{_digits(rng, 9)}",
            )
        )
    elif kind == "bad_card":
        good = luhn_complete("4" + _digits(rng, 14))
        bad = good[:-1] + str((int(good[-1]) + rng.randint(1, 9)) % 10)
        text = _group(bad, (4, 4, 4, 4), rng.choice((" ", "-")))
    elif kind == "bad_iban":
        text, _ = _iban(rng, valid=False)
    elif kind == "bad_ipv6":
        text = f"2001:db8::{rng.randint(1, 0xFFFF):x}::{rng.randint(1, 0xFFFF):x}"
    elif kind == "isbn":
        text = "ISBN " + _isbn13(rng)
    elif kind == "price":
        text = f"${rng.randint(1, 9)},{_digits(rng, 3)}.{_digits(rng, 2)}"
    else:
        # Areas 001-599: "612 34 5678" would be a valid Spanish number, not a negative.
        area, group, serial = _ssn_digits(rng)
        text = f"{int(area) % 600 or 1:03d} {group} {serial}"
    return text, kind


def _sentence(rng: random.Random, template: str, value: str) -> tuple[str, int]:
    at = template.index("{v}")
    return template[:at] + value + template[at + 3 :], at


def _planted(rng: random.Random, kind: str, regions: Sequence[str]) -> tuple[str, Planted]:
    """A sentence holding one planted value of ``kind`` (``PHONE:GB`` for a region)."""
    prefix = ""
    template = rng.choice(_LEADS)
    if kind == "EMAIL":
        value, group = _email(rng)
    elif kind.startswith("PHONE:"):
        group = kind.split(":", 1)[1]
        value = _international(rng, regions) if group == "intl" else _phone(rng, group)
        kind = "PHONE"
    elif kind == "CREDIT_CARD":
        value, group = _card(rng)
        if group == "after_group":
            prefix = "ref " + _card_after_group(rng, value)
    elif kind == "IBAN":
        value, group = _iban(rng)
    elif kind == "US_SSN":
        area, grp, serial = _ssn_digits(rng)
        sep = rng.choice(("-", " ", "."))
        value = sep.join((area, grp, serial))
        group = {"-": "dashed", " ": "spaced", ".": "dotted"}[sep]
        template = rng.choice(_SSN_CONTEXTS)
    elif kind == "IP_ADDRESS":
        value, group = _ip(rng)
    else:
        value, group, template = _secret(rng)
    text, at = _sentence(rng, template, prefix + value)
    start = at + len(prefix)
    return text, Planted(start, start + len(value), kind, group)


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
    negatives = (
        "version date time order bad_card bad_iban bad_ipv6 isbn price ssn_no_context".split()
    )
    for _ in range(per_type * len(negatives)):
        value, kind = _negative(rng)
        text, _ = _sentence(rng, rng.choice(_LEADS), value)
        docs.append(Document("text", (Field(text, (), negative=kind),), text))
    return docs


def _json_document(rng: random.Random, kinds: Sequence[str], regions: Sequence[str]) -> Document:
    """A JSON object holding one value per kind: as a key, a whole value or inside a string."""
    members: dict[str, object] = {}
    fields: list[Field] = []
    chosen = [k for k in kinds if not k.startswith("PHONE:")] + [
        f"PHONE:{rng.choice([*regions, 'intl'])}"
    ]
    contacts: dict[str, str] = {}
    for n, kind in enumerate(chosen):
        text, planted = _planted(rng, kind, regions)
        value = text[planted.start : planted.end]
        where = rng.choice(("key", "value", "inside"))
        if planted.type == "SECRET":
            where = "inside"  # a secret's recogniser may need its context words
        if planted.type == "US_SSN" and "-" not in value:
            where = "inside"  # dots and spaces need the context word
        if where == "key":
            contacts[value] = f"contact {n}"
            fields.append(Field(value, (Planted(0, len(value), planted.type, planted.group),)))
            fields.append(Field(f"contact {n}", ()))
        elif where == "value":
            members[f"field_{n}"] = value
            fields.append(Field(f"field_{n}", ()))
            fields.append(Field(value, (Planted(0, len(value), planted.type, planted.group),)))
        else:
            members[f"note_{n}"] = text
            fields.append(Field(f"note_{n}", ()))
            fields.append(Field(text, (planted,)))
    if contacts:
        members["contacts"] = contacts
        fields.append(Field("contacts", ()))
    return Document("json", tuple(fields), members)


_Finder = Callable[[str], Sequence[tuple[int, int, str]]]


def score(docs: Sequence[Document], find: _Finder) -> list[dict[str, object]]:
    """Recall and precision of a span finder on the corpus, per type and per phone region.

    A found span is correct when a planted span has the same start, end and
    type. Per type, recall is correct / planted and precision correct /
    found. Per phone region (group ``PHONE:<region>``), the found spans are
    those of the fields that hold a phone of that region.

    Parameters
    ----------
    docs
        Documents from :func:`generate`.
    find
        Called on each field's text; returns ``(start, end, type)`` spans in
        characters.

    Returns
    -------
    list of dict
        One row per type (``group`` ``"type"``) and per phone region
        (``group`` ``"phone region"``), with ``key``, ``planted``, ``found``,
        ``correct``, ``recall`` and ``precision`` (``1.0`` when there is
        nothing to divide).
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
            hits = {(int(s), int(e), str(t)) for s, e, t in find(f.text)}
            for t in {p.type for p in f.spans} | {t for _, _, t in hits}:
                add(
                    ("type", t),
                    sum(1 for p in truth if p[2] == t),
                    sum(1 for p in hits if p[2] == t),
                    sum(1 for p in hits & truth if p[2] == t),
                )
            for p in f.spans:
                if p.type == "PHONE":
                    region_found = {s for s in hits if s[2] == "PHONE"}
                    add(
                        ("phone region", p.group),
                        1,
                        len(region_found),
                        int((p.start, p.end, p.type) in region_found),
                    )
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
