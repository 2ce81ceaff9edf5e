"""A pack's request as its provider reads its prefix: unit by unit, in the provider's order.

A provider caches the prefix of the request it is sent, not of the pack's
items, so the prefix two packs share, and where ``cache_control`` marks go,
are read from the rendered request:

- OpenAI (and every ``automatic`` cache) reads the messages in order: one
  unit per message of :attr:`ContextPack.messages` (the parts of one user
  message, a text and an image, are one message).
- Anthropic reads ``tools``, then ``system``, then the content blocks of the
  messages: the first unit is the ``system`` block (every ``system`` and
  ``developer`` message of the pack, wherever it is, joined as
  :func:`~cognoxium.packing._renderers.anthropic_request` joins them), then
  the opening user message when the request has one, then one unit per
  other message, holding its blocks as sent. A changed system prompt, a
  system message added mid-conversation included, changes the first unit,
  so nothing after it is shared.

Each unit knows the pack positions of the items it sends, its tokens (the
items', by the chat costing rule, and a gap note's) and its content blocks,
which Anthropic's cache lookback counts (Anthropic, "Prompt caching": from
each breakpoint, earlier cache entries are looked for up to about 20 blocks
back).

Examples
--------
>>> import numpy as np
>>> messages = [{"role": "system", "content": "Be brief."},
...             {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]
>>> prefix = request_prefix(messages, [[0], [1], [2]], np.array([9, 4, 5]),
...                         np.zeros(3, dtype=bool), anthropic=True)
>>> prefix.ends_tokens.tolist(), prefix.ends_blocks.tolist()
([9, 13, 18], [1, 2, 3])
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from cognoxium.exceptions import RecordError
from cognoxium.packing._messages import THINKING_TYPES, message_rows, sent_thinking
from cognoxium.packing._renderers import (
    RANKED_ROLES,
    SYSTEM_ROLES,
    anthropic_turn,
    failed_calls,
    system_text,
)
from cognoxium.packing.cache_models import CacheModel

if TYPE_CHECKING:
    from cognoxium.packing._model import ContextPack

__all__ = [
    "RequestPrefix",
    "cache_breakpoints",
    "message_rows",
    "pack_prefix",
    "reachable_breakpoints",
    "request_prefix",
    "shared_units",
]


@dataclass(frozen=True)
class RequestPrefix:
    """A request as its provider caches it: ``u`` units in the order the provider reads them.

    Attributes
    ----------
    keys
        ``u`` values compared with ``==``: equal keys are equal bytes sent.
    rows
        ``u`` tuples: the pack positions of the items each unit sends.
    messages
        ``(u,)`` int64: how many messages of :attr:`ContextPack.messages` each unit holds.
    tokens
        ``(u,)`` int64: each unit's tokens.
    blocks
        ``(u,)`` int64: each unit's content blocks (1 per message for OpenAI).
    stable
        How many leading units form the stable prefix: those before the first
        ``document`` or ``memory`` message (the history a continuing pack keeps).
    system
        ``True`` when the first unit is Anthropic's ``system`` block (there
        is a system or developer message).
    """

    keys: tuple[Any, ...]
    rows: tuple[tuple[int, ...], ...]
    messages: np.ndarray
    tokens: np.ndarray
    blocks: np.ndarray
    stable: int
    system: bool

    @property
    def ends_tokens(self) -> np.ndarray:
        """``(u,)`` int64: the tokens from the request's start to each unit's end."""
        return np.cumsum(self.tokens, dtype=np.int64)

    @property
    def ends_blocks(self) -> np.ndarray:
        """``(u,)`` int64: the content blocks from the request's start to each unit's end."""
        return np.cumsum(self.blocks, dtype=np.int64)


@dataclass(frozen=True)
class _Unit:
    key: Any
    rows: tuple[int, ...]
    messages: int
    tokens: int
    blocks: int
    ranked: bool = False


def request_prefix(
    messages: Sequence[dict[str, Any]],
    rows: Sequence[Sequence[int]],
    tokens: np.ndarray,
    ranked: np.ndarray,
    *,
    anthropic: bool,
    failed: frozenset[str] = frozenset(),
    thinking: dict[int, list[dict[str, str]]] | None = None,
) -> RequestPrefix:
    """The units of the request made from ``messages`` (see the module's notes).

    Parameters
    ----------
    messages
        The pack's OpenAI messages, ``m`` of them.
    rows
        ``m`` lists: the pack positions of the items each message sends.
    tokens
        ``(m,)`` int64: each message's tokens.
    ranked
        ``(m,)`` bool: the message is a ``document`` or ``memory`` item.
    anthropic
        Units of the Anthropic request (``False``: of the OpenAI messages).
    failed
        Tool calls whose results say the tool failed (see
        :func:`~cognoxium.packing._renderers.failed_calls`).
    thinking
        Message index -> the thinking blocks an Anthropic request sends
        first in it (:func:`~cognoxium.packing._messages.sent_thinking`).

    Returns
    -------
    RequestPrefix
        The units, in the provider's order.
    """
    if anthropic:
        units = _anthropic_units(messages, rows, tokens, ranked, failed, thinking or {})
    else:
        units = [
            _Unit(m, tuple(r), 1, int(t), 1, bool(k))
            for m, r, t, k in zip(messages, rows, tokens, ranked, strict=True)
        ]
    flags = [u.ranked for u in units]
    return RequestPrefix(
        keys=tuple(u.key for u in units),
        rows=tuple(u.rows for u in units),
        messages=np.array([u.messages for u in units], dtype=np.int64),
        tokens=np.array([u.tokens for u in units], dtype=np.int64),
        blocks=np.array([u.blocks for u in units], dtype=np.int64),
        stable=flags.index(True) if True in flags else len(units),
        system=anthropic and bool(units) and units[0].key[0] == "system",
    )


def _anthropic_units(
    messages: Sequence[dict[str, Any]],
    rows: Sequence[Sequence[int]],
    tokens: np.ndarray,
    ranked: np.ndarray,
    failed: frozenset[str],
    thinking: dict[int, list[dict[str, str]]],
) -> list[_Unit]:
    """The system block, the opening user message when there is one, and each message's blocks."""
    system = [i for i, m in enumerate(messages) if m["role"] in SYSTEM_ROLES]
    units: list[_Unit] = []
    if system:
        text = "\n\n".join(system_text(messages[i]) for i in system)
        held = tuple(sorted(r for i in system for r in rows[i]))
        units.append(_Unit(("system", text), held, len(system), int(tokens[system].sum()), 1))
    turns = [
        (i, *_turn_or_raw(m, i, failed, thinking.get(i, [])))
        for i, m in enumerate(messages)
        if m["role"] not in SYSTEM_ROLES
    ]
    spoken = [turn for turn in turns if turn[2]]
    if not spoken or spoken[0][1] == "assistant":
        units.append(_Unit(("opening",), (), 0, 0, 1))
    moved = _moved_by_thinking(spoken)
    for i, role, blocks in turns:
        key = (role, blocks, "thinking put before") if i in moved else (role, blocks)
        units.append(_Unit(key, tuple(rows[i]), 1, int(tokens[i]), len(blocks), bool(ranked[i])))
    return units


def _moved_by_thinking(spoken: list[tuple[int, str, list[dict[str, Any]]]]) -> set[int]:
    """The messages whose blocks a later message's thinking blocks go before.

    Messages of one role in a row are one turn, which starts with every
    thinking block it holds (see :func:`~cognoxium.packing._renderers.merge_turn`):
    a message with other blocks followed, in its turn, by one with thinking
    blocks is not sent as it was when it ended the request, so its unit
    differs from the one it was then.
    """
    moved: set[int] = set()
    for (i, role, blocks), (_, next_role, next_blocks) in itertools.pairwise(spoken):
        leads = bool(next_blocks) and next_blocks[0].get("type") in THINKING_TYPES
        if role == next_role and leads and any(b.get("type") not in THINKING_TYPES for b in blocks):
            moved.add(i)
    return moved


def _turn_or_raw(
    message: dict[str, Any], row: int, failed: frozenset[str], thinking: list[dict[str, str]]
) -> tuple[str, list[dict[str, Any]]]:
    """The Anthropic turn of a message, or, when it cannot be one, the message as it is.

    A pack built for OpenAI may hold a tool call whose arguments are not a
    JSON object (no Anthropic request can send it: ``to_anthropic`` refuses
    the pack); its report under an Anthropic cache model still compares
    requests, reading such a message as one block per call and its text.
    """
    try:
        return anthropic_turn(message, row, failed, thinking)
    except RecordError:
        calls = message.get("tool_calls") or ()
        return message["role"], [*thinking, *[message] * (1 + len(calls))]


def pack_prefix(pack: ContextPack, *, anthropic: bool) -> RequestPrefix:
    """The :func:`request_prefix` of a pack, from its frame, messages and manifest."""
    entries = pack.manifest.to_polars().filter(pl.col("pack_position").is_not_null())
    item_tokens = entries.sort("pack_position").get_column("tokens").fill_null(0).to_numpy()
    notes = {g.note_at: g.note_tokens for g in pack.manifest.gap_records if g.note_at is not None}
    rows = message_rows(pack.frame, sorted(notes))
    roles = pack.frame.get_column("role").cast(pl.String).to_numpy()
    tokens = np.array(
        [notes[i] if not r else int(item_tokens[r].sum()) for i, r in enumerate(rows)],
        dtype=np.int64,
    )
    ranked = np.array([bool(r) and roles[r[0]] in RANKED_ROLES for r in rows], dtype=bool)
    failed = failed_calls(pack.frame) if anthropic else frozenset()
    thinking = sent_thinking(pack.frame, sorted(notes)) if anthropic else {}
    return request_prefix(
        pack.messages, rows, tokens, ranked, anthropic=anthropic, failed=failed, thinking=thinking
    )


def shared_units(before: RequestPrefix, now: RequestPrefix) -> int:
    """How many leading units ``now`` sends exactly as ``before`` sent them."""
    shared = 0
    for mine, theirs in zip(now.keys, before.keys, strict=False):
        if mine != theirs:
            break
        shared += 1
    return shared


def cache_breakpoints(prefix: RequestPrefix, model: CacheModel) -> list[int]:
    """The units whose last block a request marks with ``cache_control``, ascending.

    At most ``model.max_breakpoints`` (Anthropic: 4): the last unit of the
    stable prefix (the history); the system block, when it alone is at
    least ``model.min_tokens`` and the history adds to it; then, while a
    unit end that could hold a cache entry (at least ``min_tokens``, after
    the system block's mark) lies beyond the lookback of the earliest mark
    (``model.lookback_blocks`` blocks, its own included), one more mark on
    the earliest unit end within that lookback (or, when a unit longer
    than the lookback leaves none, the last one before it). The lookbacks
    of the marks then leave no block between them, so a later request
    whose new messages add more than ``lookback_blocks`` blocks still
    reaches this request's cache entries. An ``automatic`` model has none.

    Examples
    --------
    >>> from cognoxium.packing.cache_models import get_cache_model
    >>> prefix = RequestPrefix(keys=(0,) * 5, rows=((),) * 5, messages=np.ones(5, dtype=np.int64),
    ...                        tokens=np.array([2000, 10, 10, 10, 10]),
    ...                        blocks=np.array([1, 12, 12, 12, 1]), stable=4, system=True)
    >>> cache_breakpoints(prefix, get_cache_model("anthropic"))
    [0, 2, 3]
    """
    if model.kind != "breakpoints":
        return []
    first = 1 if prefix.system else 0
    spoken = np.flatnonzero(prefix.blocks[first : prefix.stable] > 0) + first
    if not len(spoken):
        return [0] if prefix.system and prefix.tokens[0] >= model.min_tokens else []
    tokens, blocks = prefix.ends_tokens, prefix.ends_blocks
    marks = [int(spoken[-1])]
    system = prefix.system and tokens[0] >= model.min_tokens and tokens[marks[0]] > tokens[0]
    floor = int(tokens[0]) if system else 0
    entries = spoken[(tokens[spoken] >= model.min_tokens) & (tokens[spoken] > floor)]
    while len(marks) + system < model.max_breakpoints:
        reach = blocks[marks[-1]] - model.lookback_blocks
        if not (blocks[entries] <= reach).any():
            break
        within = entries[(blocks[entries] >= reach) & (blocks[entries] < blocks[marks[-1]])]
        marks.append(int(within[0]) if len(within) else int(entries[blocks[entries] < reach][-1]))
    return sorted(marks + ([0] if system else []))


def reachable_breakpoints(
    before: RequestPrefix,
    before_marks: Sequence[int],
    now: RequestPrefix,
    now_marks: Sequence[int],
    shared: int,
    lookback: int,
) -> list[int]:
    """The earlier request's marks the later one reads: their ends, in tokens.

    A mark's cache entry is read when its unit is in the ``shared`` leading
    units and a mark of the later request ends at it or at most
    ``lookback - 1`` blocks after it (Anthropic's lookback counts the
    breakpoint's own block: about 20 blocks).
    """
    ends = now.ends_blocks
    read = []
    for mark in before_marks:
        if mark < shared and any(0 <= ends[j] - ends[mark] < lookback for j in now_marks):
            read.append(int(now.ends_tokens[mark]))
    return read
