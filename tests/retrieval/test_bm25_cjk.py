"""BM25 of Chinese and Japanese text: CJK runs are read as overlapping character bigrams.

Text without spaces was one token per run of word characters, so a Chinese or
Japanese query scored every item 0.0 unless it matched a whole run. Latin,
Every text without CJK characters (Han, Hiragana, Katakana, Hangul) or their width
forms tokenizes exactly as before.
"""

from __future__ import annotations

import unicodedata

import bm25s
import numpy as np
import polars as pl
import pytest
import Stemmer
from hypothesis import assume, given
from hypothesis import strategies as st

from cognoxium import CognitionFrame
from cognoxium.items.records import records_to_frame
from cognoxium.retrieval.embeddings import EmbeddingCache
from cognoxium.retrieval.features import FeatureExtractor
from cognoxium.retrieval.ranking import (
    _CJK_RUN,
    _MAYBE_CJK,
    _WIDTH_FORMS,
    _tokenize,
    _words,
    bm25_cache_clear,
    bm25_scores,
    bm25_scores_many,
)
from cognoxium.retrieval.scope import RetrievalSettings
from cognoxium.strategies.backends import ItemStore, TextBackend

REFUND_ZH = "退款政策：重复扣款将在5个工作日内退还。"
REFUND_JA = "返金ポリシー：二重請求は5営業日以内に返金されます。"
DOCS = [
    {"id": "cjk", "role": "document", "text": REFUND_ZH},
    {"id": "jp", "role": "document", "text": REFUND_JA},
    {"id": "ship", "role": "document", "text": "配送时间：订单在两天内发货。"},
    {"id": "en", "role": "document", "text": "Shipping times: orders leave within two days."},
]

# Latin-script and other spaced text, with what can trip a tokenizer: accents
# composed and decomposed, ß, digits, underscores, apostrophes, emoji,
# Cyrillic, Greek, Arabic, and characters past U+1100 that are not CJK.
LATIN = [
    "The refund policy: duplicate charges are refunded within 5 business days.",
    "Café opening hours changed; the cafe\u0301 now opens at 07:30.",
    "Die Rückerstattung erfolgt innerhalb von fünf Werktagen. Straße 12",
    "La politique de remboursement s'applique aux débits en double.",
    "Политика возврата средств: двойные списания возвращаются за 5 дней.",
    "Η πολιτική επιστροφής χρημάτων ισχύει για διπλές χρεώσεις.",
    "سياسة الاسترداد تنطبق على الرسوم المكررة",
    "user_id=42 API_KEY rotated 🔑 ok \ufb01ne",
    "",
    "a I x",
    "refunds refunded refunding REFUND",
]


def _rank(query: str) -> list[tuple[str, float]]:
    ranked = CognitionFrame(DOCS).rank("bm25", query=query).collect()
    return sorted(
        zip(ranked.get_column("id"), ranked.get_column("rank"), strict=True),
        key=lambda row: -row[1],
    )


def _previous_tokens(texts: list[str], *, ids: bool) -> object:
    """Tokens as BM25 read every text before CJK bigrams: bm25s' own tokenizer."""
    composed = [unicodedata.normalize("NFC", text) for text in texts]
    return bm25s.tokenize(
        composed,
        stopwords="en",
        stemmer=Stemmer.Stemmer("english"),
        return_ids=ids,
        show_progress=False,
    )


def _previous_scores(texts: list[str], query: str) -> np.ndarray:
    retriever = bm25s.BM25()
    retriever.index(_previous_tokens(texts, ids=True), show_progress=False)
    (query_tokens,) = _previous_tokens([query], ids=False)  # type: ignore[misc]
    token_ids = retriever.get_tokens_ids(query_tokens)
    if not token_ids:
        return np.zeros(len(texts), dtype=np.float64)
    return np.asarray(retriever.get_scores_from_ids(token_ids), dtype=np.float64)


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("退款", "cjk"),
        ("重复扣款", "cjk"),
        ("返金", "jp"),
        ("返金ポリシー", "jp"),
        ("发货", "ship"),
    ],
)
def test_a_chinese_or_japanese_query_ranks_its_item_first(query: str, expected: str) -> None:
    # Every item scored 0.0 and the pack fell back to cheapest-first.
    ranked = _rank(query)
    assert ranked[0][0] == expected
    assert ranked[0][1] > 0
    assert all(score == 0.0 for _, score in ranked[1:])


def test_a_cjk_run_reads_as_its_overlapping_bigrams() -> None:
    # Elasticsearch's cjk_bigram documentation gives these tokens for this text.
    assert _words("東京都は、日本の首都であり") == [
        "東京",
        "京都",
        "都は",
        "日本",
        "本の",
        "の首",
        "首都",
        "都で",
        "であ",
        "あり",
    ]
    assert _words("价 格") == ["价", "格"]  # a lone character stands for itself
    assert _words("コーヒー") == ["コー", "ーヒ", "ヒー"]  # ー (U+30FC) is Katakana's too


def test_mixed_script_text_reads_each_script_its_own_way() -> None:
    texts = ["API密钥已轮换，请更新config文件。", "请更新您的地址", "Shipping address changed"]
    bigrams = ["密钥", "钥已", "已轮", "轮换", "请更", "更新"]
    assert _words(texts[0].lower()) == ["api", *bigrams, "config", "文件"]
    for query, best in [("api", 0), ("密钥", 0), ("config 文件", 0), ("更新地址", 1)]:
        scores = bm25_scores(texts, query)
        assert int(scores.argmax()) == best, query
        assert scores[best] > 0


def test_korean_is_read_as_bigrams_so_a_noun_matches_it_with_its_particle() -> None:
    # Korean was read word by word: 환불 (refund) never matched 환불은 (refund + topic
    # particle), the form Korean text writes it in.
    assert _words("환불은 정책") == ["환불", "불은", "정책"]
    korean = "환불은 영업일 기준 5일 이내에 처리됩니다. 환불정책을 확인하세요."
    scores = bm25_scores([korean, "배송은 이틀 걸립니다."], "환불")
    assert int(scores.argmax()) == 0
    assert scores[0] > 0


@pytest.mark.parametrize(
    ("text", "query"),
    [
        ("ＶＩＰ会员可以退款", "VIP"),
        ("VIP members get refunds", "ＶＩＰ"),
        ("ﾎﾟｲﾝﾄ還元", "ポイント"),
    ],
)
def test_width_forms_match_their_usual_width(text: str, query: str) -> None:
    # Input methods type full-width Latin (ＶＩＰ) and half-width Katakana (ﾎﾟｲﾝﾄ): they
    # matched only a query typed the same way.
    scores = bm25_scores([text, "something else entirely"], query)
    assert int(scores.argmax()) == 0
    assert scores[0] > 0


def test_a_latin_corpus_scores_exactly_as_before() -> None:
    bm25_cache_clear()
    for query in ["refund policy", "café", "Straße", "возврата", "api_key", "🔑 fine"]:
        now = bm25_scores(LATIN, query)
        assert now.tobytes() == _previous_scores(LATIN, query).tobytes(), query


def test_a_latin_corpus_tokenizes_exactly_as_before() -> None:
    assert _tokenize(LATIN, ids=False) == _previous_tokens(LATIN, ids=False)


@given(st.text(max_size=80))
def test_text_without_cjk_tokenizes_exactly_as_before(text: str) -> None:
    assume(_CJK_RUN.search(unicodedata.normalize("NFC", text).lower()) is None)
    assume(_WIDTH_FORMS.search(text) is None)
    assert _tokenize([text], ids=False) == _previous_tokens([text], ids=False)


def test_every_cjk_character_is_in_the_blocks_the_fast_path_tests_for() -> None:
    # The fast path skips texts with no character of those blocks.
    read = [c for c in range(0x110000) if _CJK_RUN.match(chr(c)) or _WIDTH_FORMS.match(chr(c))]
    assert all(_MAYBE_CJK.match(chr(c)) for c in read)
    assert not _MAYBE_CJK.search("it’s — “quoted” café Straße возврат")


def test_batched_queries_score_as_single_queries() -> None:
    texts = [doc["text"] for doc in DOCS]
    queries = ["退款", "返金", "shipping", "配送"]
    for many, query in zip(bm25_scores_many(texts, queries), queries, strict=True):
        assert many.tobytes() == bm25_scores(texts, query).tobytes()
        assert many.max() > 0


def test_the_text_backend_finds_a_chinese_query() -> None:
    backend = TextBackend(ItemStore(CognitionFrame(DOCS)))
    assert backend.search("退款").get_column("id").to_list() == ["cjk"]
    assert backend.search("返金").get_column("id").to_list() == ["jp"]


def test_learned_rank_features_read_a_japanese_query() -> None:
    scope = records_to_frame(DOCS)
    extractor = FeatureExtractor(
        scope,
        lineage=scope,
        settings=RetrievalSettings(model="local_hash"),
        cache=EmbeddingCache(persist=False),
    )
    rows = extractor.features("返金").select("id", "bm25", "bm25_window")
    bm25, window = rows.filter(pl.col("id") == "jp").row(0)[1:]
    assert bm25 == 1.0
    assert window > 0
    assert rows.filter(pl.col("id") == "cjk").item(0, "bm25") == 0.0
