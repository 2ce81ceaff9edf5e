"""The built-in recognisers: their patterns, :data:`RECOGNISERS` in tie-break order, and :data:`TYPES`.

Patterns are written in the subset of regular expressions that Python's
:mod:`re` and Polars' Rust ``regex`` read alike (see
:mod:`cognoxium.governance.redaction`); case-insensitive words are spelt as
explicit classes by ``_ci``.

>>> any_case("api_key")
'[Aa][Pp][Ii][_-]?[Kk][Ee][Yy]'
>>> TYPES
('SECRET', 'CREDIT_CARD', 'IBAN', 'US_SSN', 'EMAIL', 'PHONE', 'IP_ADDRESS')
"""  # noqa: E501

from __future__ import annotations

from cognoxium.governance.redaction._model import (
    KEY_CHARS,
    WORD_CHARS,
    Recogniser,
    any_case,
    any_of,
    digits_at_least,
)
from cognoxium.governance.redaction._phone import phone_recogniser
from cognoxium.governance.redaction._validators import (
    GROUP_SEP,
    IBAN_LENGTHS,
    card_parts,
    email_ok,
    iban_ok,
    ip_parts,
    jwt_ok,
    key_value_ok,
    password_ok,
    phone_ok,
    ssn_ok,
    token_ok,
)

__all__ = ["RECOGNISERS", "TYPES"]


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
# The lead of a run of digit groups: not inside a longer run, nor right after a group of
# digits and a separator ("FR76-3000-...", "NL91 ABNA 0417 ..." stays one unit), so a
# recogniser sees a run from its first group.
_RUN_LEAD = f"[^{WORD_CHARS}\\-. \u00a0]|[^0-9A-Za-z_\\-.][ \u00a0\\-.]|[A-Za-z][ \u00a0]"
# A run of digit groups that may hold a card number (card_parts finds it inside).
_CARD = f"(?P<v>[0-9]{{13,19}}|[0-9]{{1,6}}(?:{GROUP_SEP}[0-9]{{1,6}}){{2,7}})"


def _iban_pattern() -> str:
    by_length: dict[int, list[str]] = {}
    for country, length in sorted(IBAN_LENGTHS.items()):
        by_length.setdefault(length, []).append(country)
    branches = []
    for length, countries in sorted(by_length.items()):
        groups, rest = divmod(length - 4, 4)
        names = "|".join(any_case(c) for c in countries)
        branch = f"(?:{names})[0-9]{{2}}(?:[ \u00a0\\-]?[A-Za-z0-9]{{4}}){{{groups}}}"
        if rest:
            branch += f"[ \u00a0\\-]?[A-Za-z0-9]{{{rest}}}"
        branches.append(branch)
    return f"(?P<v>{'|'.join(branches)})"


_PHONE = r"(?P<v>(?:\+|00)[1-9](?:[ .\-" + "\u00a0" + r"]?(?:\([0-9]{1,4}\)|[0-9])){6,18})"
_SSN_WORDS = ("ssn", "social security", "social security number")
# Words before an IPv6 address that make the unspecified address "::" one (RFC 4291 §2.5.2).
_IP_WORDS = (
    "ip", "ipv4", "ipv6", "ip address", "address", "addr", "src", "dst", "source",
    "destination", "host", "bind", "listen", "listens", "listening", "gateway", "route",
    "unspecified", "interface", "server", "peer", "remote", "local address",
)  # fmt: skip
_IPV4 = f"(?P<v>{_OCTET}(?:\\.{_OCTET}){{3}}(?:/[0-9]{{1,2}})?)"
# An IPv6 address (full, compressed, or with an IPv4 tail), then the rest of its run of
# colon-separated hex groups, a zone index (RFC 4007 §11: "fe80::1%eth0") and a CIDR prefix
# length: the whole run must be one address (ip_parts), so "2001:db8::1::2" is not cut in two.
_IPV6 = (
    f"(?P<v>(?:{_HEX}(?::{_HEX}){{7}}"
    f"|{_HEX}(?::{_HEX}){{5}}:{_OCTET}(?:\\.{_OCTET}){{3}}"
    f"|(?:{_HEX}(?::{_HEX}){{0,6}})?::(?:{_HEX}(?::{_HEX}){{0,6}})?)"
    f"(?::[0-9A-Fa-f]{{0,4}})*(?:\\.{_OCTET}){{0,3}}(?:%[0-9A-Za-z_\\-]{{1,32}})?"
    f"(?:/[0-9]{{1,3}})?)"
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
        any_case(w)
        for w in ("api_key", "access_key", "secret_key", "private_key", "token", "secret", "auth")
    )
    + "|"
    + any_case("authorization")
    + ")"
)
_PASSWORD_KEY = (
    _KEY_PREFIX
    + "(?:"
    + "|".join(any_case(w) for w in ("password", "passwd", "passphrase", "pwd"))
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
_SCHEME = "(?:(?:" + "|".join(any_case(w) for w in ("bearer", "basic", "token")) + ")[ \t]+)?"


RECOGNISERS: tuple[Recogniser, ...] = (
    Recogniser(name="SECRET", pattern=_PEM, label="PEM private key block (RFC 7468)"),
    Recogniser(
        name="SECRET",
        pattern=_TOKENS,
        validator=token_ok,
        label="provider token: AWS access key id, GitHub, Slack, Google, Stripe, sk- keys",
    ),
    Recogniser(name="SECRET", pattern=_JWT, validator=jwt_ok, label="JSON Web Token (RFC 7519)"),
    Recogniser(
        name="SECRET",
        pattern=f"{_TOKEN_KEY}{_ASSIGN}{_SCHEME}{_VALUE}",
        validator=key_value_ok,
        label="api_key= / token: / secret= / Authorization: assignment (the value)",
        key=_TOKEN_KEY,
    ),
    Recogniser(
        name="SECRET",
        pattern=f"{_PASSWORD_KEY}{_ASSIGN}{_VALUE}",
        validator=password_ok,
        label="password= / passwd: assignment (the value)",
        key=_PASSWORD_KEY,
    ),
    Recogniser(
        name="CREDIT_CARD",
        pattern=_CARD,
        refine=card_parts,
        label="payment card number, Luhn and IIN checked (ISO/IEC 7812)",
        lead=_RUN_LEAD,
        requires=digits_at_least(13),
    ),
    Recogniser(
        name="IBAN",
        pattern=_iban_pattern(),
        validator=iban_ok,
        # Any two letters for the country: a superset that is far cheaper to search for.
        prefilter="[A-Za-z]{2}[0-9]{2}(?:[ \u00a0\\-]?[A-Za-z0-9]{4}){2}",
        label="IBAN, country length and mod-97 checked (ISO 13616)",
    ),
    Recogniser(
        name="US_SSN",
        pattern=r"(?P<v>[0-9]{3}[ .\-]?[0-9]{2}[ .\-]?[0-9]{4})",
        validator=ssn_ok,
        context=any_of(_SSN_WORDS),
        key=f"{KEY_CHARS}{any_of(('ssn', 'social security'))}{KEY_CHARS}",
        # A dashed number or the words: every text with a value has one of them.
        prefilter=f"[0-9]{{3}}-[0-9]{{2}}-[0-9]{{4}}|{any_of(_SSN_WORDS)}[^0-9\\n]*[0-9]",
        label="US Social Security number outside the never-issued ranges; with dots, spaces "
        "or no separator after 'SSN' or 'social security'",
        lead=f"[^{WORD_CHARS}\\-]",
        trail=f"[^{WORD_CHARS}\\-.]|[\\-.][^{WORD_CHARS}]",
    ),
    Recogniser(
        name="EMAIL",
        pattern=_EMAIL,
        validator=email_ok,
        label="e-mail address",
        lead=f"[^{WORD_CHARS}.%+\\-@]",
    ),
    Recogniser(
        name="PHONE",
        pattern=_PHONE,
        validator=phone_ok,
        label="international phone number (+CC or 00CC, E.164)",
        lead=_RUN_LEAD,
    ),
    Recogniser(
        name="IP_ADDRESS",
        pattern=_IPV4,
        refine=ip_parts,
        label="IPv4 address, with its CIDR prefix length",
        lead=f"[^{WORD_CHARS}.]",
        trail=f"[^{WORD_CHARS}.]|\\.[^{WORD_CHARS}]",
    ),
    Recogniser(
        name="IP_ADDRESS",
        pattern=_IPV6,
        refine=ip_parts,
        context=any_of(_IP_WORDS),
        key=f"{KEY_CHARS}{any_of(_IP_WORDS)}{KEY_CHARS}",
        label="IPv6 address, full or compressed, with a zone index and its CIDR prefix length "
        "(RFC 4291 §2.2-2.3, RFC 4007); the unspecified '::' with a prefix length or after "
        "words such as 'ip' or 'bind'",
        lead=f"[^{WORD_CHARS}:.]",
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
- ``US_SSN``: ``AAA-GG-SSSS``; with dots, spaces or no separator only after
  ``SSN`` or ``social security`` (``my SSN is 536228726``), or as the value
  of a JSON member whose key names one (``{"ssn": "536 22 8726"}``) [not
  area 000/666/9xx, group 00, serial 0000; one kind of separator].
- ``EMAIL``: ``local@domain.tld``, also with internationalised domains in
  Unicode (``bücher.de``) or punycode (``example.xn--p1ai``) [RFC 5321
  lengths, label rules on the IDNA form].
- ``PHONE``: numbers written with ``+`` or ``00`` and a country code
  (``+44 20 7946 0958``, ``+1 (415) 555-2671``, ``+49-30-123456``,
  ``0044 20 7946 0958``) [assigned E.164 country code, 8-15 digits]; and
  numbers in the national formats of :data:`PHONE_REGIONS` (``(415)
  555-2671``, ``(415)555-2671``, ``020 7946 0958``, ``03-1234-5678``), mobile
  numbers written bare with their national prefix 0 (``09171234567``), and
  after words such as ``phone`` or ``tel`` (or as the value of a JSON member
  named ``phone``, ``mobile``, ...) any valid number of those regions, also
  bare (``Phone: 5321234567``) [libphonenumber, see :func:`phone_recogniser`].
- ``IP_ADDRESS``: IPv4 and IPv6 (compressed, with an embedded IPv4 tail,
  IPv4-mapped ``::ffff:192.0.2.1``, with a zone index ``fe80::1%eth0``),
  with a CIDR prefix length (``10.0.0.0/8``, ``2001:db8::/32``, ``::/0``)
  [:func:`ipaddress.ip_address` on the whole run, so ``2001:db8::1::2`` is
  none; the unspecified ``::`` alone only after words such as ``ip``,
  ``bind`` or ``src=``; a prefix length beyond the version's bits stays
  outside the span].
"""

TYPES: tuple[str, ...] = tuple(dict.fromkeys(r.name for r in RECOGNISERS))
"""The redaction type names, in :data:`RECOGNISERS` order."""
