"""Phase 3 of :func:`~cognoxium.packing.packer.pack`: what each item sends, and what it costs.

An item costs the tokens of the chat message it sends, by the chat costing
rule of :mod:`cognoxium.tokens.profiles`: the framing of its role (and name),
its content, its tool call id or tool calls (ids, function names,
arguments), and its image by the profile's image rule
(:mod:`cognoxium.tokens.images`). A pack built for Anthropic costs the
rows as an Anthropic request sends them (:meth:`Rendering.for_anthropic`):
an assistant message's thinking blocks too (their text, see
:meth:`~cognoxium.packing._messages.ChatColumns.thinking_texts`), which only
an Anthropic request sends, and its images by Anthropic's rule
(:data:`~cognoxium.tokens.images.CLAUDE_IMAGES`). :func:`render` lays out every row's message once
(:func:`~cognoxium.packing._messages.chat_columns`), which both the costs and
``ContextPack.messages`` read; :class:`UnitCosts` counts tokens lazily, only
for the units the selection reaches, in batches, and proves cheaper lower
bounds first (see :meth:`~cognoxium.tokens.profiles.TokenProfile.lower_bound`).
When the budget left is small, a unit's bound is first only proven to exceed
it (:meth:`~cognoxium.tokens.profiles.TokenProfile.words_at_least` reads a
text only until it has found that many words), so a long history of texts
that cannot fit is passed over without counting every word of it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

import numpy as np
import polars as pl

from cognoxium.packing._messages import CHAT_ROLE, ChatColumns, chat_columns
from cognoxium.packing._model import UNSET
from cognoxium.packing._policies import PolicyReview
from cognoxium.packing._units import Units
from cognoxium.tokens.images import CLAUDE_IMAGES, AnthropicImageRule, ImageRule
from cognoxium.tokens.profiles import MAX_WORDS_TESTED, TokenProfile

__all__ = ["KnownCosts", "Rendering", "UnitCosts", "render"]

_WIDEST_SPAN = 65536
"""The most units a prefetch proves bounds for at once, when few of them fit."""


@dataclass(frozen=True)
class Rendering:
    """Every row as it would be sent, and the parts of its cost known without counting.

    Attributes
    ----------
    chat
        The rows' chat messages (role, content, name, tool fields).
    framing
        ``(n,)`` int64: the chat format's per-message framing, name included
        (:meth:`~cognoxium.tokens.profiles.TokenProfile.framing`), in tokens;
        0 for a later part of a multi-part user message, which is sent in
        its first part's message (``chat.continued``).
    image_tokens
        ``(n,)`` int64: the tokens of the row's image (0 for none), exact.
    cheap
        ``(n,)`` Int64: a lower bound of the cost known for every row at no
        real cost, ``framing + image_tokens + ceil(UTF-8 bytes / longest
        token bytes)`` over the content and each tool-call text (the last
        term 0 when the profile has no byte bound), in tokens.
    anthropic
        The rows are costed as an Anthropic request sends them (see
        :meth:`for_anthropic`); ``False``: as their OpenAI messages.
    """

    chat: ChatColumns
    framing: np.ndarray
    image_tokens: np.ndarray
    cheap: pl.Series
    anthropic: bool = False

    def for_anthropic(self) -> Rendering:
        """The rendering costed as an Anthropic request sends the rows.

        Its images cost Anthropic's rule
        (:data:`~cognoxium.tokens.images.CLAUDE_IMAGES`) and its
        ``cheap`` bounds change by as much; :class:`UnitCosts` of it
        count the assistant rows' thinking blocks. When no row holds an
        image or a thinking block, both requests cost the same: ``self``.
        """
        if self.anthropic or not (self.chat.images or self.chat.thinking):
            return self
        images = _image_tokens(self.chat, CLAUDE_IMAGES)
        cheap = self.cheap + pl.Series(images - self.image_tokens)
        return replace(self, image_tokens=images, cheap=cheap, anthropic=True)

    def messages(self, rows: np.ndarray) -> list[dict[str, Any]]:
        """OpenAI chat messages of ``rows`` (``(k,)`` int64), in order."""
        return self.chat.messages(rows)

    @cached_property
    def texts(self) -> pl.Series:
        """``(n,)`` String: the content each row's tokens are counted over (``""`` for none)."""
        return self.chat.content.fill_null("")


def render(df: pl.DataFrame, profile: TokenProfile, review: PolicyReview) -> Rendering:
    """Render every row of ``df`` as its chat message, as the policies decided.

    Parameters
    ----------
    df
        The items, ``n`` rows.
    profile
        The token profile (its framing and longest token).
    review
        The policies' verdicts: ``render_as_user`` sends the item as a ``user``
        message, ``render_as_data`` also wraps its content in a data block.

    Returns
    -------
    Rendering
        Messages, framing and cheap bound of every row.

    Raises
    ------
    RecordError
        If a row's tool calls or image are malformed; it names the row and the
        field.
    """
    chat = chat_columns(df, review.column("action"))
    per_role = np.array([profile.framing(role) for role in CHAT_ROLE.categories], dtype=np.int64)
    framing = per_role[chat.role.to_physical().to_numpy()]
    for row, fields in chat.fields.items():
        name = fields.get("name")
        if name is not None:
            framing[row] = profile.framing(chat.role[row], name=name)
    # A later part of a multi-part message is sent in its first part's message: framed once.
    framing[chat.continued] = 0
    bytes_bound = _bytes_bound(chat, profile.longest_token_bytes)
    images = _image_tokens(chat, profile.image_rule)
    cheap = pl.Series("cheap", framing + images + bytes_bound)
    return Rendering(chat=chat, framing=framing, image_tokens=images, cheap=cheap)


def _image_tokens(chat: ChatColumns, rule: ImageRule | AnthropicImageRule) -> np.ndarray:
    """``(n,)`` int64: the tokens of each row's image by ``rule`` (0 for none)."""
    images = np.zeros(len(chat.content), dtype=np.int64)
    for row, image in chat.images.items():
        images[row] = rule.tokens(image.costed_detail, image.size)
    return images


def _bytes_bound(chat: ChatColumns, width: int | None) -> np.ndarray:
    """``(n,)`` int64: ``ceil(UTF-8 bytes / width)`` of each row's content and tool texts.

    All zeros when the profile has no byte bound (``width`` is ``None``).
    """
    if width is None:
        return np.zeros(len(chat.content), dtype=np.int64)
    bound = (
        (chat.content.str.len_bytes().fill_null(0).cast(pl.Int64) + width - 1) // width
    ).to_numpy(writable=True)
    for row, texts in chat.tool_texts.items():
        bound[row] += sum((len(t.encode("utf-8")) + width - 1) // width for t in texts)
    return bound


def _tool_text_key(text: str) -> str:
    """The token cache key of a tool-call text (an id, a function name, arguments)."""
    return "tool:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


class KnownCosts:
    """The bounds and exact costs already found for the units of one frame, shared by its packs.

    The packs of a batch over one scope reuse what earlier packs counted
    (see :class:`UnitCosts`); a manifest reports as counted only the units
    its own selection examined, so it is the one the pack would have alone.

    Parameters
    ----------
    n_rows, n_units
        The rows of the frame and its packing units.

    Attributes
    ----------
    row_tokens
        ``(n_rows,)`` int64: each row's exact cost in tokens, or ``UNSET``.
    cost, bound
        ``(n_units,)`` int64: each unit's exact cost and proven lower bound,
        in tokens, or ``UNSET``.
    """

    def __init__(self, n_rows: int, n_units: int) -> None:
        self.row_tokens = np.full(n_rows, UNSET, dtype=np.int64)
        self.cost = np.full(n_units, UNSET, dtype=np.int64)
        self.bound = np.full(n_units, UNSET, dtype=np.int64)


class UnitCosts:
    """The costs of the packing units, known lazily.

    ``bound`` holds each unit's proven lower bound on its cost and ``cost`` its
    exact cost, ``(n_units,)`` int64 in tokens, and ``row_tokens`` each row's
    exact cost, ``(n,)`` int64 in tokens; all are
    :data:`~cognoxium.packing._model.UNSET` while not computed. They are filled
    in batches, only for the units that the selection reaches; ``batch`` is
    the size of the next batch, doubling up to 8192. A bound is either the
    full one (:meth:`~cognoxium.tokens.profiles.TokenProfile.lower_bound` of
    the content) or, where ``screened``, ``(n_units,)`` bool, is true, a
    weaker one proven only because it exceeds the budget left when it was
    found (see :meth:`ensure_bounds`); only full bounds go to ``known``. ``examined``,
    ``(n_units,)`` bool, marks the units whose exact cost the selection
    compared with the budget left (see
    :func:`~cognoxium.packing._selection.select_units`): what a manifest
    reports as counted, whatever else the batches counted.

    Parameters
    ----------
    profile
        The token profile that counts.
    rendering
        What every row sends.
    units
        The packing units.
    floor
        ``(n,)`` int64: for a truncatable row, the fewest tokens of content it
        may keep (its ``min_tokens``), else ``UNSET``; the content part of
        such a row's bound is at most that, since a cut may shorten it.
    known
        Bounds and costs found by earlier packs over the same frame, units,
        profile and rendering: this pack starts from them and fills in
        what it counts (``None``: count everything here); they must have
        been found with the same ``rendering.anthropic``.

    Notes
    -----
    A rendering for Anthropic (``rendering.anthropic``, see
    :meth:`Rendering.for_anthropic`) counts the assistant rows' thinking
    blocks too; its images cost what its ``image_tokens`` say.
    """

    def __init__(
        self,
        profile: TokenProfile,
        rendering: Rendering,
        units: Units,
        floor: np.ndarray | None = None,
        known: KnownCosts | None = None,
    ) -> None:
        self.profile = profile
        self.known = known
        self.content = rendering.texts
        self.hashes = rendering.chat.key
        self.tool_texts = rendering.chat.tool_texts
        if rendering.anthropic and rendering.chat.thinking:
            texts = rendering.chat.thinking_texts()
            tools = self.tool_texts
            self.tool_texts = {
                row: [*texts.get(row, ()), *tools.get(row, ())] for row in {*texts, *tools}
            }
        self.fixed = rendering.framing + rendering.image_tokens
        self.units = units
        if known is None:
            self.row_tokens = np.full(len(self.content), UNSET, dtype=np.int64)
            self.cost = np.full(units.n_units, UNSET, dtype=np.int64)
            self.bound = np.full(units.n_units, UNSET, dtype=np.int64)
        else:  # a pack starts from what the earlier ones found
            self.row_tokens = known.row_tokens.copy()
            self.cost = known.cost.copy()
            self.bound = known.bound.copy()
        self.examined = np.zeros(units.n_units, dtype=bool)
        self.screened = np.zeros(units.n_units, dtype=bool)
        self.batch = 256
        self.floor = floor

    def ensure_bounds(self, units: np.ndarray, remaining: int | None = None) -> None:
        """Prove a lower bound of every unit of ``units`` (``(k,)`` int64) that lacks one.

        Without ``remaining`` every unit gets its full bound. With it (the
        budget left, in tokens) a unit that lacks a bound is first screened:
        a row whose content has at least ``remaining + 1 - framing`` words
        (:meth:`~cognoxium.tokens.profiles.TokenProfile.words_at_least`, which
        stops at that many) costs more than ``remaining``; a unit so proven
        to exceed it keeps that weaker bound, the others get their full one.
        After the call every unit's bound is its full bound or exceeds
        ``remaining``, so each comparison of a bound with the budget left
        (which only shrinks) decides as the full bound would.
        """
        if remaining is not None:
            self._screen(units[self.bound[units] == UNSET], remaining)
        bound = self.bound[units]
        partial = self.screened[units]
        if remaining is not None:
            partial &= bound <= remaining
        self._full_bounds(units[(bound == UNSET) | partial])

    def _full_bounds(self, units: np.ndarray) -> None:
        """Compute the full lower bound of each unit of ``units`` (``(k,)`` int64)."""
        if len(units) == 0:
            return
        rows, starts = self.units.rows_of(units)
        texts = self.content.gather(rows).to_frame("text")
        bound = texts.select(self.profile.lower_bound(pl.col("text"))).to_series().to_numpy()
        self.bound[units] = self._unit_bounds(bound.astype(np.int64), rows, starts)
        self.screened[units] = False
        if self.known is not None:
            self.known.bound[units] = self.bound[units]

    def _screen(self, units: np.ndarray, remaining: int) -> None:
        """Give the units of ``units`` (``(k,)`` int64) proven to cost over ``remaining`` a bound.

        The bound of a row's content is ``words`` where it has that many
        words, else 0, and at least its byte bound; ``words`` is the fewest
        words that make a row of the least framing among ``rows`` cost more
        than ``remaining`` alone. Units whose bound does not exceed
        ``remaining`` are left without one.
        """
        if len(units) == 0 or self.profile.word_bound_pattern is None:
            return
        rows, starts = self.units.rows_of(units)
        words = remaining + 1 - int(self.fixed[rows].min())
        if words > MAX_WORDS_TESTED:
            return
        text = pl.col("text")
        width = self.profile.longest_token_bytes
        size = text.str.len_bytes().cast(pl.Int64)
        parts = [
            (size * 0 if width is None else (size + width - 1) // width).alias("bytes"),
            pl.lit(False).alias("hit"),
        ]
        if words >= 1:
            found = self.profile.words_at_least(text, words)
            parts[1] = pl.lit(False) if found is None else found.fill_null(False).alias("hit")
        found_frame = self.content.gather(rows).to_frame("text").select(parts)
        hit = found_frame.get_column("hit").to_numpy()
        content = np.maximum(np.where(hit, max(words, 0), 0), found_frame["bytes"].to_numpy())
        bound = self._unit_bounds(content.astype(np.int64), rows, starts)
        over = bound > remaining
        self.bound[units[over]] = bound[over]
        self.screened[units[over]] = True

    def _unit_bounds(self, content: np.ndarray, rows: np.ndarray, starts: np.ndarray) -> np.ndarray:
        """Units' bounds from lower bounds of their rows' content tokens (``(k,)`` int64 each)."""
        if self.floor is not None:
            floor = self.floor[rows]
            content = np.where(floor >= 0, np.minimum(content, floor), content)
        bound: np.ndarray = self.units.per_unit(
            content + self.fixed[rows] + self._tool_bounds(rows), starts
        )
        return bound

    def _tool_pieces(self, rows: np.ndarray) -> tuple[np.ndarray, list[str]]:
        """The tool-call texts of ``rows`` (``(k,)`` int64), each with its index in ``rows``."""
        owners: list[int] = []
        texts: list[str] = []
        if self.tool_texts:
            for i, row in enumerate(rows.tolist()):
                for text in self.tool_texts.get(row, ()):
                    owners.append(i)
                    texts.append(text)
        return np.asarray(owners, dtype=np.int64), texts

    def _tool_bounds(self, rows: np.ndarray) -> np.ndarray:
        """Lower bounds of the tool-call texts' tokens of ``rows`` (``(k,)`` int64)."""
        out = np.zeros(len(rows), dtype=np.int64)
        owners, texts = self._tool_pieces(rows)
        if texts:
            frame = pl.DataFrame({"text": texts}, schema={"text": pl.String})
            bound = frame.select(self.profile.lower_bound(pl.col("text"))).to_series().to_numpy()
            np.add.at(out, owners, bound.astype(np.int64))
        return out

    def _tool_counts(self, rows: np.ndarray) -> np.ndarray:
        """Tokens of the tool-call texts of ``rows`` (``(k,)`` int64), counted and cached."""
        out = np.zeros(len(rows), dtype=np.int64)
        owners, texts = self._tool_pieces(rows)
        if texts:
            counts = self.profile.count_cached([_tool_text_key(t) for t in texts], texts)
            np.add.at(out, owners, counts)
        return out

    def count(self, units: np.ndarray) -> None:
        """Count the exact cost of every unit of ``units`` (``(k,)`` int64) not yet counted."""
        units = units[self.cost[units] == UNSET]
        if len(units) == 0:
            return
        rows, starts = self.units.rows_of(units)
        counts = self.profile.count_cached(
            self.hashes.gather(rows).to_list(), self.content.gather(rows).to_list()
        )
        self.row_tokens[rows] = counts + self.fixed[rows] + self._tool_counts(rows)
        self.cost[units] = self.units.per_unit(self.row_tokens[rows], starts)
        if self.known is not None:
            self.known.row_tokens[rows] = self.row_tokens[rows]
            self.known.cost[units] = self.cost[units]

    def prefetch(self, order: np.ndarray, pos: int, remaining: int) -> None:
        """Count the next batch of uncounted units of ``order`` from ``pos`` on that may still fit.

        ``remaining`` is the budget left, in tokens: a unit whose lower bound
        exceeds it is skipped without counting. The units are looked at in
        spans, each at least twice as wide as the one before and as wide as
        the units still needed take at the rate the last span held them (up
        to :data:`_WIDEST_SPAN`): when almost nothing fits, as in a long
        history behind a full budget, a few wide spans prove it, not many
        narrow ones.
        """
        picked: list[np.ndarray] = []
        need = self.batch
        stop = len(order)
        width = 4 * self.batch
        while pos < stop and need > 0:
            span = order[pos : pos + width]
            self.ensure_bounds(span, remaining)
            take = span[(self.bound[span] <= remaining) & (self.cost[span] == UNSET)][:need]
            picked.append(take)
            need -= len(take)
            pos += len(span)
            rate = max(len(take), 1) / len(span)  # few fit: look further at once
            width = min(max(width * 2, int(need / rate)), _WIDEST_SPAN)
        self.count(np.concatenate(picked))
        self.batch = min(self.batch * 2, 8192)
