"""Cutting a text at token boundaries: keep its first or its last tokens.

A cut keeps one side of a text and drops the other, as LangChain's
``trim_messages(allow_partial=True)`` does with ``strategy="first"`` (keep the
head) or ``strategy="last"`` (keep the tail):

- ``side="head"`` keeps the first tokens and drops the end of the text;
- ``side="tail"`` keeps the last tokens and drops the beginning.

The text is encoded with the profile's encoder, sliced, and decoded. A token
may hold part of a multi-byte character (CJK, emoji); the bytes of a
character split by the cut are dropped, so the result is always valid text
and a prefix (head) or suffix (tail) of the original. A decoded slice may
re-encode to a different number of tokens (byte-pair merges across the new
edge); the cut is shortened until the result re-encodes to at most the
requested count, and the count returned is that of the result.

Only the side kept is encoded: a window of the text from that side, grown
until it holds more tokens than the cut keeps (with a margin, so the window's
edge is far from the cut), so a cut of a 50 MB text to a few thousand tokens
encodes a few thousand tokens' worth of it, not all of it.
"""

from __future__ import annotations

import codecs
from typing import Literal

from cognoxium.exceptions import ProfileError
from cognoxium.tokens.profiles import Encoder, TokenProfile

__all__ = ["SIDES", "Side", "cut_tokens"]

Side = Literal["head", "tail"]
SIDES: tuple[Side, ...] = ("head", "tail")
"""The sides a cut may keep: ``head`` (the first tokens) or ``tail`` (the last)."""

_CHARS_PER_TOKEN = 8
"""The first window's characters per token kept: more than most tokens hold."""
_MARGIN = 16
"""Tokens a window holds past the cut, so that its edge does not change the cut's tokens."""


def cut_tokens(profile: TokenProfile, text: str, keep: int, side: Side) -> tuple[str, int]:
    """Keep at most ``keep`` tokens of ``text`` from one side, cut at token boundaries.

    Parameters
    ----------
    profile
        The token profile whose encoder counts and cuts.
    text
        The text to cut.
    keep
        The most tokens to keep (>= 0).
    side
        ``"head"`` keeps the first tokens, ``"tail"`` the last (see the module).

    Returns
    -------
    text : str
        A prefix (head) or suffix (tail) of ``text``, the whole text when it
        has at most ``keep`` tokens.
    tokens : int
        The tokens of the returned text (``encode_ordinary``), ``<= keep``.

    Raises
    ------
    ValueError
        If ``keep`` is negative or ``side`` is not ``"head"`` or ``"tail"``.
    ProfileError
        If the profile's tokenizer does not decode tokens back to the original
        text (a lossy Hugging Face tokenizer such as WordPiece), so no cut is
        a prefix or suffix of ``text``.

    Examples
    --------
    >>> from cognoxium.tokens.profiles import get_profile
    >>> profile = get_profile("cl100k_base")
    >>> cut_tokens(profile, "one two three four", 2, "head")
    ('one two', 2)
    >>> cut_tokens(profile, "one two three four", 2, "tail")
    (' three four', 2)
    """
    if isinstance(keep, bool) or not isinstance(keep, int) or keep < 0:
        raise ValueError(f"keep must be a non-negative whole number of tokens, got {keep!r}")
    if side not in SIDES:
        raise ValueError(f"side must be 'head' or 'tail', got {side!r}")
    encoding = profile.encoding
    tokens = _kept_side_tokens(encoding, text, keep, side)
    if len(tokens) <= keep:
        return text, len(tokens)
    take = keep
    while take > 0:
        piece = tokens[:take] if side == "head" else tokens[len(tokens) - take :]
        cut = _whole_characters(encoding.decode_bytes(piece), side)
        if not (text.startswith(cut) if side == "head" else text.endswith(cut)):
            raise ProfileError(
                f"token profile {profile.name!r} cannot cut at token boundaries: its tokenizer "
                f"does not decode tokens back to the original text (got {cut[:40]!r}); "
                "truncate with a profile whose tokenizer is lossless (tiktoken, byte-level BPE)",
                params={"profile": profile.name},
            )
        count = len(encoding.encode_ordinary(cut))
        if count <= keep:
            return cut, count
        take -= count - keep
    return "", 0


def _kept_side_tokens(encoding: Encoder, text: str, keep: int, side: Side) -> list[int]:
    """The tokens of a window of ``text`` from ``side`` that holds the cut, or of all of it.

    The window grows fourfold until it holds more than ``keep`` tokens and
    a margin; a text no window holds is encoded whole.
    """
    width = (keep + _MARGIN) * _CHARS_PER_TOKEN
    while width < len(text):
        window = text[:width] if side == "head" else text[len(text) - width :]
        tokens = encoding.encode_ordinary(window)
        if len(tokens) > keep + _MARGIN:
            return tokens
        width *= 4
    return encoding.encode_ordinary(text)


def _whole_characters(data: bytes, side: Side) -> str:
    """Decode ``data`` cut from valid UTF-8, dropping the bytes of a character split at the cut.

    A head cut may end inside a character: an incremental decoder that is
    not told the input is final keeps those bytes back. A tail cut may start
    inside one: its continuation bytes (``10xxxxxx``) are skipped.
    """
    if side == "head":
        return codecs.getincrementaldecoder("utf-8")().decode(data, final=False)
    start = 0
    while start < len(data) and data[start] & 0xC0 == 0x80:
        start += 1
    return data[start:].decode("utf-8")
