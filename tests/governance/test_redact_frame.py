"""frame.redact(): a barrier step whose counts reach the manifest and whose steps reach lineage."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal
from typer.testing import CliRunner

from cognoxium import CognitionFrame, OptFlags
from cognoxium.app.cli import app
from cognoxium.exceptions import PlanError
from cognoxium.governance.redaction import redact_frame, redact_json
from cognoxium.items.io import read_items

AS_OF = datetime(2030, 1, 1, tzinfo=UTC)
T0 = "2024-01-01T00:00:00Z"
PII = {
    "CREDIT_CARD": ["2221 0000 0000 0009", "3782 822463 10005"],
    "IBAN": ["DE89 3704 0044 0532 0130 00"],
    "PHONE": ["+44 20 7946 0958"],
    "EMAIL": ["ana.example@example.org"],
}
CASE = (
    "Card 2221 0000 0000 0009, Amex 3782 822463 10005, IBAN DE89 3704 0044 0532 0130 00, "
    "tel +44 20 7946 0958, ana.example@example.org"
)


def frame(text: str = CASE) -> CognitionFrame:
    return CognitionFrame(
        [
            {"id": "pii", "role": "user", "text": text, "created_at": T0},
            {"id": "plain", "role": "user", "text": "nothing to see", "created_at": T0},
        ]
    )


def test_the_five_values_become_typed_placeholders_counted_in_the_manifest() -> None:
    result = frame().redact().pack(500, as_of=AS_OF)
    assert result.messages[0]["content"] == (
        "Card [CREDIT_CARD], Amex [CREDIT_CARD], IBAN [IBAN], tel [PHONE], [EMAIL]"
    )
    entries = dict(result.manifest.to_polars().select("id", "redactions").rows())
    assert json.loads(entries["pii"]) == {"CREDIT_CARD": 2, "EMAIL": 1, "IBAN": 1, "PHONE": 1}
    assert entries["plain"] is None
    assert result.manifest.totals.redactions == {
        "CREDIT_CARD": 2,
        "EMAIL": 1,
        "IBAN": 1,
        "PHONE": 1,
    }
    text = result.manifest.to_json()
    for values in PII.values():
        for value in values:
            assert value not in text
    (edge,) = result.manifest.lineage
    original = frame().collect().row(0, named=True)["content_hash"]
    assert (edge["operation"], edge["parent_hash"]) == ("redact", original)


def test_only_the_changed_rows_get_a_redact_edge_each_with_its_own_parent() -> None:
    records = [
        {"id": f"m{i}", "role": "user", "created_at": T0, "text": text}
        for i, text in enumerate(["mail ana@example.org", "nothing", "a@b.org", "plain", "x"])
    ]
    before = CognitionFrame(records).collect()
    out = CognitionFrame(records).redact().collect()
    for old, new in zip(before.iter_rows(named=True), out.iter_rows(named=True), strict=True):
        if new["text"] == old["text"]:
            assert new["lineage"] == old["lineage"] == []
        else:
            (edge,) = new["lineage"]
            assert edge == {
                "parent_id": old["id"],
                "parent_hash": old["content_hash"],
                "operation": "redact",
                "detail": '{"EMAIL":1}',
            }
    assert [len(x) for x in out.get_column("lineage").to_list()] == [1, 0, 1, 0, 0]


def test_redacting_twice_changes_nothing() -> None:
    once = frame().redact().collect()
    twice = frame().redact().redact().collect()
    assert_frame_equal(once.drop("redactions"), twice.drop("redactions"))
    assert twice.row(0, named=True)["lineage"] == once.row(0, named=True)["lineage"]


def test_context_words_hold_only_just_before_the_value_in_every_pass() -> None:
    # Context words must come just before the value (filler words aside): an e-mail
    # address between them breaks the context, and so does its placeholder once the
    # first pass has replaced it, on the column as row by row. Two values sharing one
    # boundary character are found by the second pass.
    texts = [
        "SSN of ana.lopez.garcia@example.org 123 45 6789 ok, SSN: 123 45 6789",
        "a@b.io c@d.io",
    ]
    out = (
        CognitionFrame(
            [
                {"id": str(i), "role": "user", "text": t, "created_at": T0}
                for i, t in enumerate(texts)
            ]
        )
        .redact()
        .collect()
    )
    assert [(r["text"], json.loads(r["redactions"])) for r in out.iter_rows(named=True)] == [
        ("SSN of [EMAIL] 123 45 6789 ok, SSN: [US_SSN]", {"EMAIL": 1, "US_SSN": 1}),
        ("[EMAIL] [EMAIL]", {"EMAIL": 2}),
    ]


def test_filters_never_move_below_redact() -> None:
    query = frame().redact().filter(pl.col("text").str.contains("@", literal=True))
    assert "Redact" in query.explain().splitlines()[-2]
    assert_frame_equal(query.collect(), query.collect(OptFlags.none()))
    assert query.collect().height == 0


def test_bad_arguments_fail_at_the_call() -> None:
    with pytest.raises(PlanError, match="style"):
        frame().redact(style="shred")
    with pytest.raises(PlanError, match="needs a key"):
        frame().redact(style="hash")
    with pytest.raises(PlanError, match="NAME"):
        frame().redact(types=["NAME"])


_RAW = [value for values in PII.values() for value in values]
_filler = st.sampled_from(["hello", "call me at", "my card:", "write to", "ok", "\n", "{}"])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(parts=st.lists(st.one_of(_filler, st.sampled_from(_RAW)), max_size=8))
def test_no_recognised_value_reaches_a_manifest(parts: list[str]) -> None:
    text = " ".join(parts)
    manifest = frame(text).redact().pack(2000, as_of=AS_OF).manifest.to_json()
    for values in PII.values():
        for value in values:
            assert value not in manifest


def test_cli_redacts_a_file_and_names_bad_arguments(tmp_path: Path) -> None:
    source = tmp_path / "items.jsonl"
    source.write_text(json.dumps({"id": "a", "role": "user", "text": CASE, "created_at": T0}))
    runner = CliRunner()
    result = runner.invoke(app, ["redact", str(source), str(tmp_path / "out.parquet")])
    assert result.exit_code == 0, result.output
    assert "CREDIT_CARD" in result.output
    out = read_items(tmp_path / "out.parquet")
    assert out.row(0, named=True)["text"].count("[CREDIT_CARD]") == 2
    assert CognitionFrame(out).lineage()["operation"].to_list() == ["redact"]
    bad = runner.invoke(app, ["redact", str(source), str(tmp_path / "out.csv")])
    assert bad.exit_code == 1
    keyless = runner.invoke(
        app,
        [
            "redact",
            str(source),
            str(tmp_path / "o.jsonl"),
            "--style",
            "hash",
            "--key-env",
            "COGNOXIUM_TEST_NO_SUCH_KEY",
        ],
    )
    assert keyless.exit_code == 1
    assert not (tmp_path / "o.jsonl").exists()


def _items_with_fields() -> pl.DataFrame:
    from cognoxium.items.convert import items_to_frame
    from cognoxium.items.model import ContextItem

    return items_to_frame(
        [
            ContextItem(
                id="k",
                role="tool",
                payload={"kind": "json", "value": {"ana@example.org": {"10.0.0.1": "up"}}},
                created_at="2024-01-01T00:00:00Z",
            ),
            ContextItem(
                id="m",
                role="user",
                text="plain",
                metadata={"owner": "bo@example.org", "n": 3},
                sources=[
                    {
                        "uri": "https://example.org/u/ana@example.org",
                        "title": "mail of +44 20 7946 0958",
                    }
                ],
                created_at="2024-01-01T00:00:00Z",
            ),
            ContextItem(id="p", role="user", text="nothing", created_at="2024-01-01T00:00:00Z"),
        ]
    )


def test_json_object_keys_are_redacted_by_default() -> None:
    df = _items_with_fields()
    out = redact_frame(df)
    assert out.get_column("json")[0] == '{"[EMAIL]":{"[IP_ADDRESS]":"up"}}'
    assert json.loads(out.get_column("redactions")[0]) == {"EMAIL": 1, "IP_ADDRESS": 1}
    kept = redact_frame(df, keys=False)
    assert kept.get_column("json")[0] == df.get_column("json")[0]
    assert kept.get_column("redactions")[0] == "{}"


def test_keys_that_redact_alike_keep_every_member() -> None:
    value, counts = redact_json({"ana@example.org": 1, "bo@example.org": 2, "[EMAIL]": 3})
    assert value == {"[EMAIL]": 1, "[EMAIL] (2)": 2, "[EMAIL] (3)": 3}
    assert counts == {"EMAIL": 2}


def test_metadata_and_sources_are_redacted_only_when_asked() -> None:
    df = _items_with_fields()
    plain = redact_frame(df)
    assert plain.get_column("metadata")[1] == df.get_column("metadata")[1]
    assert plain.get_column("unredacted").to_list() == [None, '["metadata","sources"]', None]

    out = redact_frame(df, metadata=True, sources=True)
    assert out.get_column("metadata")[1] == '{"n":3,"owner":"[EMAIL]"}'
    (source,) = out.get_column("sources")[1].to_list()
    assert source["uri"] == "https://example.org/u/[EMAIL]"
    assert source["title"] == "mail of [PHONE]"
    assert json.loads(out.get_column("redactions")[1]) == {"EMAIL": 2, "PHONE": 1}
    assert out.get_column("unredacted").to_list() == [None, None, None]
    # The payload did not change, so neither did its content hash.
    assert out.get_column("content_hash")[1] == df.get_column("content_hash")[1]
    assert out.get_column("redacted_from")[1] is None

    only_meta = redact_frame(df, metadata=True)
    assert only_meta.get_column("unredacted").to_list() == [None, '["sources"]', None]


def test_redact_options_reach_the_plan_and_the_manifest() -> None:
    cf = CognitionFrame(_items_with_fields())
    assert "fields=payload+keys+metadata" in cf.redact(metadata=True).explain()
    when = datetime(2030, 1, 1, tzinfo=UTC)
    manifest = cf.redact().pack(500, as_of=when).manifest
    assert manifest.unredacted == {"metadata": 1, "sources": 1}
    assert json.loads(manifest.to_json())["unredacted"] == {"metadata": 1, "sources": 1}
    full = cf.redact(metadata=True, sources=True).pack(500, as_of=when).manifest
    assert full.unredacted == {}
    assert "unredacted" not in json.loads(full.to_json())
    with pytest.raises(PlanError, match="redact metadata must be True or False"):
        cf.redact(metadata="yes")  # type: ignore[arg-type]


SECRET_ID = "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789ABCD"  # a call id shaped like a key
CARD_ID = "4111111111111111"  # a call id shaped like a card number


def agent_chat() -> list[dict[str, object]]:
    def call(call_id: str, arguments: str) -> dict[str, object]:
        return {
            "id": call_id,
            "type": "function",
            "function": {"name": "send", "arguments": arguments},
        }

    return [
        {"role": "user", "content": "email bob@example.com"},
        {
            "role": "assistant",
            "content": "Sending.",  # text beside the calls: they are kept in metadata
            "tool_calls": [call(SECRET_ID, '{"to": "bob@example.com", "ssn": "536228726"}')],
        },
        {"role": "tool", "tool_call_id": SECRET_ID, "content": "sent"},
        {"role": "assistant", "content": None, "tool_calls": [call(CARD_ID, "to bob@example.com")]},
        {"role": "tool", "tool_call_id": CARD_ID, "content": "sent to bob@example.com"},
    ]


@pytest.mark.parametrize("metadata", [False, True])
def test_tool_call_arguments_are_redacted_and_call_ids_kept(metadata: bool) -> None:
    from cognoxium.formats.openai import from_openai_messages, to_openai_messages
    from cognoxium.tokens.profiles import get_profile

    frame = from_openai_messages(agent_chat(), conversation_id="c").redact(metadata=metadata)
    pack = frame.pack(1000, as_of=AS_OF)
    sent = to_openai_messages(pack)
    assert len(sent) == 5  # every call still paired with its result
    calls = [c for m in sent for c in m.get("tool_calls") or ()]  # type: ignore[attr-defined]
    assert [c["id"] for c in calls] == [SECRET_ID, CARD_ID]
    assert [c["function"]["arguments"] for c in calls] == [
        '{"to": "[EMAIL]", "ssn": "[US_SSN]"}',
        "to [EMAIL]",
    ]
    assert [m.get("tool_call_id") for m in sent if m["role"] == "tool"] == [SECRET_ID, CARD_ID]
    assert "bob@example.com" not in json.dumps(sent)
    assert pack.manifest.totals.redactions == {"EMAIL": 4, "US_SSN": 1}
    assert pack.used_tokens == get_profile("o200k_base").request_tokens(sent)


def test_the_ids_a_provider_gave_reused_calls_are_kept_by_metadata_redaction() -> None:
    from cognoxium.formats.openai import (
        ORIGINAL_CALL_ID_KEY,
        ORIGINAL_CALL_IDS_KEY,
        from_openai_messages,
    )

    chat = agent_chat()
    chat[3] = {**chat[3], "tool_calls": [{**chat[1]["tool_calls"][0]}]}  # type: ignore[index]
    chat[4] = {**chat[4], "tool_call_id": SECRET_ID}
    frame = from_openai_messages(chat, conversation_id="c").redact(metadata=True).collect()
    metadata = [json.loads(m) for m in frame.get_column("metadata").to_list()]
    assert metadata[3][ORIGINAL_CALL_IDS_KEY] == [SECRET_ID]
    assert metadata[4][ORIGINAL_CALL_ID_KEY] == SECRET_ID
    assert metadata[3]["tool_call_ids"] == [f"{SECRET_ID}-2"]
