"""Presidio as a redaction recogniser set: offline, same styles, counts, overlap rule, lineage."""

from __future__ import annotations

import hashlib
import hmac
import json
import socket
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cognoxium import CognitionFrame
from cognoxium.exceptions import CognoxiumError, DependencyError, PlanError
from cognoxium.governance.redaction import (
    RECOGNISERS,
    RecogniserSet,
    Span,
    find_spans,
    redact_frame,
    redact_json,
    redact_text,
)
from cognoxium.items.convert import items_to_frame
from cognoxium.items.model import ContextItem

AS_OF = datetime(2030, 1, 1, tzinfo=UTC)
T0 = "2024-01-01T00:00:00Z"
MASTERCARD_2_SERIES = "2221 0000 0000 0009"
AMEX = "3782 822463 10005"
IBAN = "DE89 3704 0044 0532 0130 00"
PHONE = "+44 20 7946 0958"
EMAIL = "ana.example@example.org"
CASE = f"Card {MASTERCARD_2_SERIES}, Amex {AMEX}, IBAN {IBAN}, tel {PHONE}, {EMAIL}"
RAW_VALUES = (MASTERCARD_2_SERIES, AMEX, IBAN, PHONE, EMAIL, "bo@example.com", "10.1.2.3")


@pytest.fixture(scope="module")
def presidio() -> Any:
    pytest.importorskip("presidio_analyzer")
    from cognoxium.governance.presidio import PresidioRecognisers

    return PresidioRecognisers()


def case_frame() -> CognitionFrame:
    return CognitionFrame(
        [
            {"id": "pii", "role": "user", "text": CASE, "created_at": T0},
            {
                "id": "tool",
                "role": "tool",
                "payload": {
                    "kind": "json",
                    "value": {"contact": {"email": "bo@example.com", "ip": "10.1.2.3"}, "n": 2},
                },
                "created_at": T0,
            },
            {"id": "plain", "role": "user", "text": "nothing to see", "created_at": T0},
        ]
    )


# ---------------------------------------------------------------------------
# without the extra


def test_missing_extra_raises_a_dependency_error_naming_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from cognoxium.governance.presidio import PresidioRecognisers

    monkeypatch.setitem(sys.modules, "presidio_analyzer", None)
    expected = r"pip install 'cognoxium-engine\[presidio\]'"
    with pytest.raises(DependencyError, match=expected) as info:
        PresidioRecognisers()
    assert isinstance(info.value, ImportError)
    assert isinstance(info.value, CognoxiumError)
    assert "presidio_analyzer" in str(info.value)


# ---------------------------------------------------------------------------
# the case


def test_presidio_alone_finds_four_of_the_five_values(presidio: Any) -> None:
    (spans,) = presidio.find_batch([CASE])
    found = [(CASE[s.start : s.end], s.type) for s in spans]
    # Presidio's card pattern has no Mastercard 2-series (2221-2720) range.
    assert found == [(AMEX, "CREDIT_CARD"), (IBAN, "IBAN"), (PHONE, "PHONE"), (EMAIL, "EMAIL")]
    text, counts = redact_text(CASE, recognisers=presidio)
    assert text == (
        f"Card {MASTERCARD_2_SERIES}, Amex [CREDIT_CARD], IBAN [IBAN], tel [PHONE], [EMAIL]"
    )
    assert counts == {"CREDIT_CARD": 1, "EMAIL": 1, "IBAN": 1, "PHONE": 1}


def test_presidio_next_to_the_builtin_recognisers_finds_all_five(presidio: Any) -> None:
    text, counts = redact_text(CASE, recognisers=[*RECOGNISERS, presidio])
    assert text == "Card [CREDIT_CARD], Amex [CREDIT_CARD], IBAN [IBAN], tel [PHONE], [EMAIL]"
    assert counts == {"CREDIT_CARD": 2, "EMAIL": 1, "IBAN": 1, "PHONE": 1}


@pytest.mark.parametrize(
    ("style", "expected"),
    [
        ("mask", "Amex **** ****** *****, IBAN **** **** **** **** **** **"),
        ("hash", "Amex [CREDIT_CARD:db103fa6], IBAN [IBAN:b1ee6ab8]"),
    ],
)
def test_styles_apply_to_presidio_spans(presidio: Any, style: str, expected: str) -> None:
    text, counts = redact_text(
        f"Amex {AMEX}, IBAN {IBAN}", style=style, key="k", recognisers=presidio
    )
    assert text == expected
    assert counts == {"CREDIT_CARD": 1, "IBAN": 1}


@pytest.mark.parametrize("style", ["placeholder", "mask", "hash"])
def test_redacting_twice_changes_nothing(presidio: Any, style: str) -> None:
    text = f"{CASE}; ssn 078-05-1121, ip 192.0.2.10 / 2001:db8::1, dial 0044 20 7946 0958"
    once, counts = redact_text(text, style=style, key=b"k", recognisers=presidio)
    twice, again = redact_text(once, style=style, key=b"k", recognisers=presidio)
    assert counts
    assert (twice, again) == (once, {})


def test_types_choose_among_the_presidio_types(presidio: Any) -> None:
    assert redact_text(CASE, types=["EMAIL", "PHONE"], recognisers=presidio) == (
        f"Card {MASTERCARD_2_SERIES}, Amex {AMEX}, IBAN {IBAN}, tel [PHONE], [EMAIL]",
        {"EMAIL": 1, "PHONE": 1},
    )
    with pytest.raises(PlanError, match=r"unknown redaction type\(s\) 'PERSON'; valid types: "):
        redact_text(CASE, types="PERSON", recognisers=presidio)


def test_json_values_and_keys_are_redacted(presidio: Any) -> None:
    value = {EMAIL: [f"call {PHONE}"], "iban": IBAN, "n": 4, "ok": None}
    assert redact_json(value, recognisers=presidio) == (
        {"[EMAIL]": ["call [PHONE]"], "iban": "[IBAN]", "n": 4, "ok": None},
        {"EMAIL": 1, "IBAN": 1, "PHONE": 1},
    )
    assert redact_json(value, recognisers=presidio, keys=False) == (
        {EMAIL: ["call [PHONE]"], "iban": "[IBAN]", "n": 4, "ok": None},
        {"IBAN": 1, "PHONE": 1},
    )


# ---------------------------------------------------------------------------
# overlap rule


def test_longest_span_wins_and_equal_spans_go_to_the_first_listed() -> None:
    pytest.importorskip("presidio_analyzer")
    from cognoxium.governance.presidio import PresidioRecognisers

    # Presidio reports both the address and its domain as a URL: the longer one wins.
    urls = PresidioRecognisers(entities=["EMAIL_ADDRESS", "URL"])
    assert {s.type for s in urls.find_batch([EMAIL])[0]} == {"EMAIL", "URL"}
    assert redact_text(f"write to {EMAIL}", recognisers=urls)[0] == "write to [EMAIL]"
    # Presidio reports 078-05-1121 as US_SSN (0.5) and PHONE_NUMBER (0.4): the higher score wins.
    assert redact_text("ssn 078-05-1121", recognisers=PresidioRecognisers()) == (
        "ssn [US_SSN]",
        {"US_SSN": 1},
    )
    # The same span under two names: ties go to the recogniser listed first.
    contact = PresidioRecognisers(entities=["EMAIL_ADDRESS"], type_map={"EMAIL_ADDRESS": "CONTACT"})
    assert redact_text(EMAIL, recognisers=[contact, *RECOGNISERS])[0] == "[CONTACT]"
    assert redact_text(EMAIL, recognisers=[*RECOGNISERS, contact])[0] == "[EMAIL]"


# ---------------------------------------------------------------------------
# frames, manifests, lineage


def test_frame_redaction_counts_reach_the_manifest_without_raw_values(presidio: Any) -> None:
    query = case_frame().redact(recognisers=[*RECOGNISERS, presidio])
    assert "recognisers=SECRET; CREDIT_CARD; IBAN" in query.explain()
    assert "Presidio analyzer (en, score >= 0.4)" in query.explain()
    result = query.pack(500, as_of=AS_OF)
    entries = dict(result.manifest.to_polars().select("id", "redactions").rows())
    assert json.loads(entries["pii"]) == {"CREDIT_CARD": 2, "EMAIL": 1, "IBAN": 1, "PHONE": 1}
    assert json.loads(entries["tool"]) == {"EMAIL": 1, "IP_ADDRESS": 1}
    assert entries["plain"] is None
    assert result.manifest.totals.redactions == {
        "CREDIT_CARD": 2,
        "EMAIL": 2,
        "IBAN": 1,
        "IP_ADDRESS": 1,
        "PHONE": 1,
    }
    manifest = result.manifest.to_json()
    packed = json.dumps(result.messages)
    for raw in RAW_VALUES:
        assert raw not in manifest
        assert raw not in packed
    original = dict(case_frame().collect().select("id", "content_hash").rows())
    edges = {e["child_id"]: e for e in result.manifest.lineage}
    assert sorted(edges) == ["pii", "tool"]
    for item_id, edge in edges.items():
        assert (edge["operation"], edge["parent_hash"]) == ("redact", original[item_id])
        assert json.loads(edge["detail"]) == json.loads(entries[item_id])


def test_frame_json_payload_keeps_its_keys(presidio: Any) -> None:
    out = case_frame().redact(recognisers=presidio).collect()
    doc = json.loads(out.filter(pl.col("id") == "tool").item(0, "json"))
    assert doc == {"contact": {"email": "[EMAIL]", "ip": "[IP_ADDRESS]"}, "n": 2}


def test_frame_redacted_twice_changes_nothing(presidio: Any) -> None:
    once = case_frame().redact(recognisers=presidio).collect()
    twice = case_frame().redact(recognisers=presidio).redact(recognisers=presidio).collect()
    assert once.drop("redactions").equals(twice.drop("redactions"))
    assert once.get_column("redactions").to_list() == twice.get_column("redactions").to_list()
    assert once.get_column("lineage").to_list() == twice.get_column("lineage").to_list()


def test_equal_configurations_make_equal_plans(presidio: Any) -> None:
    from cognoxium.governance.presidio import PresidioRecognisers

    same = PresidioRecognisers()
    other = PresidioRecognisers(score_threshold=0.5)
    assert same == presidio
    assert hash(same) == hash(presidio)
    assert same.fingerprint == presidio.fingerprint
    assert other != presidio
    assert other.fingerprint != presidio.fingerprint
    frame = case_frame()
    assert frame.redact(recognisers=same)._plan == frame.redact(recognisers=presidio)._plan
    assert frame.redact(recognisers=other)._plan != frame.redact(recognisers=presidio)._plan
    assert isinstance(presidio, RecogniserSet)


# ---------------------------------------------------------------------------
# offline


def test_the_analyzer_is_built_and_run_without_the_network(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    pytest.importorskip("presidio_analyzer")
    import spacy.cli
    import tldextract
    import tldextract.tldextract

    from cognoxium.governance import presidio as module

    attempts: list[object] = []

    def refuse(*args: object, **kwargs: object) -> Any:
        attempts.append(args[:2])
        raise OSError("network access refused by the test")

    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(spacy.cli, "download", refuse)
    # Presidio's own e-mail check would fetch the public suffix list with an empty cache.
    monkeypatch.setattr(
        tldextract.tldextract, "TLD_EXTRACTOR", tldextract.TLDExtract(cache_dir=str(tmp_path))
    )
    module._blank_analyzer.cache_clear()
    try:
        fresh = module.PresidioRecognisers()
        text, counts = redact_text(f"mail {EMAIL} or bo@example.co.uk", recognisers=fresh)
        assert (text, counts) == ("mail [EMAIL] or [EMAIL]", {"EMAIL": 2})
        assert attempts == []
        # The guard does see a fetch: the module-level extractor tries one.
        tldextract.extract(EMAIL)
        assert attempts
    finally:
        module._blank_analyzer.cache_clear()


# ---------------------------------------------------------------------------
# arguments


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"language": ""}, "language must be a language code"),
        ({"entities": []}, "entities must be Presidio entity types"),
        ({"entities": ["email_address"]}, "entities must be Presidio entity types"),
        ({"score_threshold": 1.5}, r"score_threshold must be in \[0, 1\]"),
        ({"score_threshold": True}, r"score_threshold must be in \[0, 1\]"),
        ({"type_map": {"EMAIL_ADDRESS": "mail"}}, "is not an upper-case type name"),
        ({"analyzer": object()}, "analyzer must be a presidio_analyzer.AnalyzerEngine"),
    ],
)
def test_bad_arguments_fail_when_built(kwargs: dict[str, Any], message: str) -> None:
    pytest.importorskip("presidio_analyzer")
    from cognoxium.governance.presidio import PresidioRecognisers

    with pytest.raises(PlanError, match=message):
        PresidioRecognisers(**kwargs)


def test_unsupported_entities_and_languages_fail_when_the_plan_is_built() -> None:
    pytest.importorskip("presidio_analyzer")
    from cognoxium.governance.presidio import PresidioRecognisers

    with pytest.raises(PlanError, match="no recogniser for NOT_AN_ENTITY in language 'en'"):
        case_frame().redact(recognisers=PresidioRecognisers(entities=["NOT_AN_ENTITY"]))
    with pytest.raises(PlanError, match="spaCy has no language 'qq'"):
        case_frame().redact(recognisers=PresidioRecognisers(language="qq"))


# ---------------------------------------------------------------------------
# the recogniser-set extension point (no Presidio needed)


class HexRuns:
    """Finds every run of 6+ hex digits, as an engine whose spans may fall inside a hash token."""

    types = ("HEX",)
    label = "hex runs"

    def __init__(self, bad: bool = False) -> None:
        self.bad = bad

    def find_batch(self, texts: Sequence[str]) -> list[list[Span]]:
        import re

        out = []
        for text in texts:
            spans = [Span(m.start(), m.end(), "HEX") for m in re.finditer("[0-9a-f]{6,}", text)]
            if self.bad and spans:
                spans.append(Span(0, len(text) + 5, "HEX"))
            out.append(spans)
        return out

    def __hash__(self) -> int:
        return hash((type(self), self.bad))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, HexRuns) and other.bad == self.bad


def test_spans_inside_earlier_redactions_are_ignored() -> None:
    text, counts = redact_text(
        "ana@example.org and deadbeef", style="hash", key="k", recognisers=[*RECOGNISERS, HexRuns()]
    )
    digest = hmac.new(b"k", b"deadbeef", hashlib.sha256).hexdigest()[:8]
    assert text == f"[EMAIL:102ffdfb] and [HEX:{digest}]"
    assert counts == {"EMAIL": 1, "HEX": 1}
    assert redact_text(text, style="hash", key="k", recognisers=[*RECOGNISERS, HexRuns()]) == (
        text,
        {},
    )
    masked = redact_text("id abcdef12", style="mask", recognisers=HexRuns())[0]
    assert masked == "id ********"
    assert find_spans(masked, recognisers=HexRuns()) == []


def test_a_recogniser_set_returning_a_bad_span_is_named() -> None:
    with pytest.raises(PlanError, match="recogniser set 'hex runs' returned Span"):
        redact_text("abcdef12", recognisers=HexRuns(bad=True))


@pytest.mark.parametrize(
    ("recognisers", "message"),
    [
        ([], "recognisers is empty"),
        ("EMAIL", "recognisers must be a Recogniser, a RecogniserSet"),
        ([object()], "is neither a Recogniser nor a RecogniserSet"),
    ],
)
def test_bad_recognisers_are_refused(recognisers: Any, message: str) -> None:
    with pytest.raises(PlanError, match=message):
        redact_text("x", recognisers=recognisers)
    with pytest.raises(PlanError, match=message):
        case_frame().redact(recognisers=recognisers)


def test_frame_path_agrees_with_the_reference_path_for_a_recogniser_set() -> None:
    texts = ["abc123456 x", "nothing", "abc123456 x", "", "ff00ff and ana@example.org"]
    df = items_to_frame(
        [ContextItem(id=str(i), role="user", text=t, created_at=T0) for i, t in enumerate(texts)]
    )
    out = redact_frame(df, recognisers=[*RECOGNISERS, HexRuns()])
    expected = [redact_text(t, recognisers=[*RECOGNISERS, HexRuns()]) for t in texts]
    assert out.get_column("text").to_list() == [t for t, _ in expected]
    assert [json.loads(r) for r in out.get_column("redactions")] == [c for _, c in expected]


# ---------------------------------------------------------------------------
# property

FRAGMENTS = st.sampled_from(
    [
        AMEX,
        IBAN,
        PHONE,
        EMAIL,
        "078-05-1121",
        "192.0.2.10",
        "2001:db8::1",
        "4111 1111 1111 1111",
        "[EMAIL]",
        "card",
        "tel",
        "and",
        "**",
        "@",
        "0",
    ]
)
SEPARATORS = st.sampled_from([" ", ", ", "\n", "", "-", "."])


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    parts=st.lists(st.tuples(FRAGMENTS, SEPARATORS), max_size=8),
    style=st.sampled_from(["placeholder", "mask", "hash"]),
)
def test_property_redaction_with_presidio_is_idempotent_and_frame_agrees(
    presidio: Any, parts: list[tuple[str, str]], style: str
) -> None:
    text = "".join(f + s for f, s in parts)
    recs = [*RECOGNISERS, presidio]
    once, counts = redact_text(text, style=style, key="k", recognisers=recs)
    assert redact_text(once, style=style, key="k", recognisers=recs) == (once, {})
    df = items_to_frame([ContextItem(id="a", role="user", text=text, created_at=T0)])
    row = redact_frame(df, style=style, key="k", recognisers=recs).row(0, named=True)
    assert row["text"] == once
    assert json.loads(row["redactions"]) == counts
