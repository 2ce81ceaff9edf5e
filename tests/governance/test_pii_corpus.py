"""Recall and precision of the built-in recognisers on the generated PII corpus.

The corpus (:mod:`cognoxium.testing.pii_corpus`) plants every redaction type
in texts and JSON documents (as keys, whole values, inside strings and as
values under a key that gives their context), with the formats a recogniser
missed before: phones in national formats of 28 regions, written bare after
words such as ``Phone:``, bare mobile numbers with their national prefix and
``(415)555-2671``; cards after a group of digits and UATP cards; lower-case
and dashed IBANs; SSNs with dots, spaces or no separator after a context
word; e-mail addresses with Unicode and punycode domains; IPv6, IPv4-mapped
IPv6, zone indices, the unspecified ``::`` and CIDR blocks; and hard
negatives that look like them (order numbers, build versions, ISBNs, times,
amounts), which must keep all their text.
"""

from __future__ import annotations

import json
import re

import polars as pl
import pytest

from cognoxium.governance.redaction import (
    PHONE_REGIONS,
    RECOGNISERS,
    find_spans,
    phone_recogniser,
    redact_frame,
    redact_json,
    redact_text,
)
from cognoxium.governance.redaction._phone import (
    _clear_phone_caches,
    _phone_parts,
    _whole_run_matches,
)
from cognoxium.items.convert import items_to_frame
from cognoxium.items.model import ContextItem
from cognoxium.testing.pii_corpus import (
    Document,
    format_table,
    generate,
    score,
    score_near_misses,
)


def _spans(text: str) -> list[tuple[int, int, str]]:
    return [(s.start, s.end, s.type) for s in find_spans(text)]


def _member_spans(key: str, text: str) -> list[tuple[int, int, str]]:
    """The spans of a JSON string value under ``key``: all of it when its key gives the context."""
    out = redact_json({key: text})[0][key]
    if re.fullmatch(r"\[[A-Z_]+\]", out):
        return [(0, len(text), out[1:-1])]
    return _spans(text)


@pytest.fixture(scope="module")
def corpus() -> list[Document]:
    return generate(seed=12, per_type=40)


@pytest.fixture(scope="module")
def table(corpus: list[Document]) -> list[dict[str, object]]:
    rows = score(corpus, _spans, _member_spans)
    print("\n" + format_table(rows))
    return rows


def test_the_corpus_covers_every_type_region_and_negative(corpus: list[Document]) -> None:
    groups = {(p.type, p.group) for d in corpus for f in d.fields for p in f.spans}
    assert {g for t, g in groups if t == "PHONE"} == {*PHONE_REGIONS, "intl"}
    assert len(PHONE_REGIONS) >= 10
    expected = {
        ("EMAIL", "idn"),
        ("EMAIL", "punycode"),
        ("CREDIT_CARD", "uatp"),
        ("CREDIT_CARD", "after_group"),
        ("IBAN", "lower"),
        ("IBAN", "dashed"),
        ("US_SSN", "dotted"),
        ("US_SSN", "spaced"),
        ("US_SSN", "bare"),
        ("IP_ADDRESS", "ipv6_cidr"),
        ("IP_ADDRESS", "ipv4_cidr"),
        ("IP_ADDRESS", "ipv4_mapped"),
        ("IP_ADDRESS", "zone"),
        ("IP_ADDRESS", "unspecified"),
        ("IP_ADDRESS", "unspecified_cidr"),
        ("SECRET", "jwt"),
    }
    assert expected <= groups
    phones = {p.variant for d in corpus for f in d.fields for p in f.spans if p.type == "PHONE"}
    assert phones == {"national", "after_words", "bare_mobile", "tight", "international"}
    # The new forms also in JSON documents: as keys, whole values and keyed values.
    in_json = {
        (p.type, p.variant, f.key is not None)
        for d in corpus
        if d.kind == "json"
        for f in d.fields
        for p in f.spans
        if p.start == 0 and p.end == len(f.text)
    }
    for form in [("PHONE", "bare_mobile"), ("IP_ADDRESS", "zone"), ("IP_ADDRESS", "ipv4_mapped")]:
        assert (*form, False) in in_json, form
    for form in [("US_SSN", "bare"), ("PHONE", "after_words"), ("IP_ADDRESS", "unspecified")]:
        assert (*form, True) in in_json, form
    negatives = {f.negative for d in corpus for f in d.fields if f.negative}
    assert {
        "version",
        "build",
        "date",
        "time",
        "order",
        "order_after_words",
        "amazon_order",
        "bad_card",
        "bad_iban",
        "bad_ipv6",
        "cpp_scope",
        "isbn",
        "isbn10",
        "price",
        "amount",
        "ssn_no_context",
        "ssn_bare_no_context",
    } == negatives
    assert {d.kind for d in corpus} == {"text", "json"}


def test_the_corpus_is_seeded() -> None:
    assert generate(seed=5, per_type=2) == generate(seed=5, per_type=2)
    assert generate(seed=5, per_type=2) != generate(seed=6, per_type=2)


def test_recall_and_precision_per_type(table: list[dict[str, object]]) -> None:
    types = {r["key"]: r for r in table if r["group"] == "type"}
    assert set(types) == {"EMAIL", "PHONE", "CREDIT_CARD", "IBAN", "US_SSN", "IP_ADDRESS", "SECRET"}
    for kind, row in types.items():
        assert float(row["recall"]) >= 0.99, (kind, row)  # type: ignore[arg-type]
        assert float(row["precision"]) >= 0.97, (kind, row)  # type: ignore[arg-type]


def test_recall_and_precision_per_phone_region(table: list[dict[str, object]]) -> None:
    regions = {r["key"]: r for r in table if r["group"] == "phone region"}
    assert set(regions) == {*PHONE_REGIONS, "intl"}
    for region, row in regions.items():
        assert float(row["recall"]) >= 0.99, (region, row)  # type: ignore[arg-type]
        assert float(row["precision"]) >= 0.97, (region, row)  # type: ignore[arg-type]


def test_recall_per_written_form(table: list[dict[str, object]]) -> None:
    variants = {r["key"]: r for r in table if r["group"] == "variant"}
    assert {"PHONE:after_words", "US_SSN:bare", "IP_ADDRESS:unspecified"} <= set(variants)
    for variant, row in variants.items():
        assert float(row["recall"]) >= 0.99, (variant, row)  # type: ignore[arg-type]
        assert float(row["precision"]) >= 0.97, (variant, row)  # type: ignore[arg-type]


def test_near_misses_keep_all_their_text(corpus: list[Document]) -> None:
    rows = score_near_misses(corpus, lambda text: redact_text(text)[0])
    assert len(rows) == 17
    for row in rows:
        assert row["kept"] == row["texts"] == 40, row
        assert row["share_kept"] == 1.0, row


def test_no_planted_value_survives_redaction(corpus: list[Document]) -> None:
    for doc in corpus:
        if doc.kind == "text":
            (f,) = doc.fields
            out, _ = redact_text(f.text)
        else:
            value, _ = redact_json(doc.value)
            out = json.dumps(value, ensure_ascii=False)
        for f in doc.fields:
            for p in f.spans:
                assert f.text[p.start : p.end] not in out, (p, out)


def test_the_vectorised_path_agrees_on_the_corpus(corpus: list[Document]) -> None:
    items = []
    for i, doc in enumerate(corpus):
        fields: dict[str, object] = (
            {"text": doc.value}
            if doc.kind == "text"
            else {"payload": {"kind": "json", "value": doc.value}}
        )
        items.append(
            ContextItem.model_validate(
                {"id": f"d{i}", "role": "user", "created_at": "2024-01-01T00:00:00Z", **fields}
            )
        )
    out = redact_frame(items_to_frame(items))
    for doc, row in zip(corpus, out.iter_rows(named=True), strict=True):
        if doc.kind == "text":
            assert isinstance(doc.value, str)
            assert (row["text"], json.loads(row["redactions"])) == redact_text(doc.value)
        else:
            value, counts = redact_json(doc.value)
            assert (json.loads(row["json"]), json.loads(row["redactions"])) == (value, counts)
    assert out.height == len(corpus)
    assert out.filter(pl.col("redactions") != "{}").height > len(corpus) // 2


def test_every_text_a_recogniser_finds_a_value_in_has_its_prefilter(
    corpus: list[Document],
) -> None:
    # The vectorised path scans only the texts in which some prefilter occurs.
    texts = [f.text for d in corpus for f in d.fields]
    matched = 0
    for r in RECOGNISERS:
        prefilter = re.compile(r.prefilter)
        for text in texts:
            if any(r._match_parts(m) for m in r._rx.finditer(f"\n{text}\n")):
                assert prefilter.search(text), (r.label, text)
                matched += 1
    assert matched > 1000


def test_a_phone_run_is_decided_alike_whatever_runs_came_before(corpus: list[Document]) -> None:
    # The regions are tried in an order learnt from earlier runs; only the cost may change.
    rx = re.compile(phone_recogniser().pattern)
    runs = sorted({m.group("v") for d in corpus for f in d.fields for m in rx.finditer(f.text)})

    def decide(order: list[str]) -> dict[str, tuple[tuple[int, int], ...]]:
        _clear_phone_caches()
        return {run: _phone_parts(run, PHONE_REGIONS) for run in order}

    forward = decide(runs)
    assert decide(runs[::-1]) == forward
    assert sum(bool(parts) for parts in forward.values()) > 100


def test_every_run_with_a_value_has_what_its_recogniser_requires(corpus: list[Document]) -> None:
    # `requires` lets the vectorised path drop candidates before Python runs: it must hold
    # for every run in which the validator or refine (asked without it) finds a value.
    texts = [f.text for d in corpus for f in d.fields]
    checked = 0
    for r in RECOGNISERS:
        if r.requires is None:
            continue
        needed = re.compile(r.requires)
        for text in texts:
            for m in r._rx.finditer(f"\n{text}\n"):
                run = m.group("v")
                if r.refine is not None:
                    found = bool(r.refine(run))
                else:
                    found = r.validator is None or r.validator(run)
                if found:
                    assert needed.search(run), (r.label, run)
                    checked += 1
    assert checked > 300


def test_whole_run_check_agrees_with_the_phone_number_matcher(corpus: list[Document]) -> None:
    # The phone recogniser decides a run without a list by the matcher's own steps, less
    # those that can only find a shorter number; it must agree with PhoneNumberMatcher.
    import phonenumbers

    strict = phonenumbers.Leniency.STRICT_GROUPING
    rx = re.compile(phone_recogniser().pattern)
    texts = [f.text for d in corpus for f in d.fields]
    runs = {m.group("v") for t in texts for m in rx.finditer(t)}
    runs |= {"020 7946 0958", "(415) 555-2671", "+44 20 7946 0958", "0044 20 7946 0958"}
    runs |= {"03-1234-5678", "0.20.19.15.0", "4746 7583 46", "12:30 555 0100", "1/2/2024 555"}
    checked = 0
    for run in sorted(runs):
        international = run[0] == "+" or run.startswith("00")
        leniency = phonenumbers.Leniency.VALID if international else strict
        for region in (None,) if international else PHONE_REGIONS:
            matcher = phonenumbers.PhoneNumberMatcher(run, region, leniency=leniency, max_tries=1)
            expected = any((m.start, m.end) == (0, len(run)) for m in matcher)
            assert _whole_run_matches(run, region, international) == expected, (run, region)
            checked += expected
    assert checked > 200


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("ref 1234 4111 1111 1111 1111", "ref 1234 [CREDIT_CARD]"),
        ("UATP 1200 00000 000005 ok", "UATP [CREDIT_CARD] ok"),
        ("call (415) 555-2671 or 020 7946 0958", "call [PHONE] or [PHONE]"),
        ("Tokyo 03-1234-5678, Paris 01 23 45 67 89", "Tokyo [PHONE], Paris [PHONE]"),
        ("gb82 west 1234 5698 7654 32", "[IBAN]"),
        ("GB82-WEST-1234-5698-7654-32", "[IBAN]"),
        ("SSN: 123.45.6789", "SSN: [US_SSN]"),
        ("social security number 123 45 6789", "social security number [US_SSN]"),
        ("mail ana@example.xn--p1ai now", "mail [EMAIL] now"),
        ("mail ana@bücher.de now", "mail [EMAIL] now"),
        ("net 2001:db8::/32, host 10.0.0.0/8", "net [IP_ADDRESS], host [IP_ADDRESS]"),
        ("bad 2001:db8::1::2 x", "bad 2001:db8::1::2 x"),
        ("v1.2.3.4 on 2024-01-15, order #4829105", "v1.2.3.4 on 2024-01-15, order #4829105"),
        ("ORD-2024-123456 ISBN 978-3-16-148410-0", "ORD-2024-123456 ISBN 978-3-16-148410-0"),
        ("the 123 45 6789 number", "the 123 45 6789 number"),
        ("10.0.0.1/40", "[IP_ADDRESS]/40"),
    ],
)
def test_formats_found_and_negatives_kept(text: str, expected: str) -> None:
    assert redact_text(text)[0] == expected
