"""Truncation during selection: cutting truncatable items to fit what is left.

An item is truncatable when its metadata holds a
:class:`~cognoxium.items.model.Truncation` mark (``metadata["truncate"]``:
``side`` kept, ``min_tokens``). Its text is cut at token boundaries
(:func:`~cognoxium.tokens.truncation.cut_tokens`) and sent as the packed
message, re-rendered by the one rendering of
:func:`~cognoxium.packing._messages.chat_columns`, so the cost stays exact.

Rules (see :func:`~cognoxium.packing.packer.pack`):

- A unit that does not fit whole when selection reaches it is cut to fit
  what is left when its truncatable members can shed enough tokens while
  each keeps at least its ``min_tokens``; otherwise it is skipped as before.
  In a unit of several rows the last row (input order) sheds first, down to
  its ``min_tokens``, then the one before it.
- With ``overflow="truncate"``, when the required units alone exceed the
  budget, they are cut in reverse selection order (the unit considered last
  is cut first), each as far as needed down to its members' ``min_tokens``;
  if they still do not fit, :class:`~cognoxium.exceptions.BudgetError`.
- A pack that continues an earlier one (``previous``) starts each item
  that pack cut, still unchanged and marked alike, from that cut
  (:meth:`Cutter.replay`): it may be cut further, never sent longer. An
  item cut without a mark (an awaited result, a question) is marked alike
  (:func:`mark_earlier_cuts`), though the conversation has gone on since.
- The results a half-finished agent loop awaits (the ``tool`` messages with
  a text payload after the last ``user`` or ``assistant`` message) are
  truncatable without a mark, as if marked ``{"truncate": {"min_tokens":
  64, "note": "[{n} tokens cut]"}}`` (head kept, then a line naming the
  tokens cut; see :func:`mark_awaited`): the model reads them next, and
  their call left out with them would have it make the same call again.
  In a pack newest first (no rank), so is the last ``user`` or
  ``assistant`` message when it is a ``user`` message with a text payload:
  the question the model answers next, which left out would leave a
  request asking nothing (``question`` of :func:`mark_awaited`).
  Their own mark, when they have one, is the one used. Cut, they keep at
  most :data:`~cognoxium.packing._selection.AWAITED_SHARE` of the room the
  required items leave, so the steps before them keep the rest, and then
  the room those steps leave (:meth:`Cutter.regrow`). A pack that
  continues an earlier one evicts history to send them whole before it
  cuts them.
- A cut item keeps its id and gets a new content hash; its lineage gains an
  edge ``truncate`` whose parent is the original (id and hash) and whose
  detail is ``{"kept_tokens", "original_tokens", "side"}``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np
import polars as pl
from pydantic import ValidationError

from cognoxium.exceptions import RecordError
from cognoxium.items.model import TRUNCATE_KEY, Truncation, canonical_json, content_hash
from cognoxium.items.schema import POLARS_SCHEMA
from cognoxium.packing._costing import Rendering, UnitCosts
from cognoxium.packing._messages import chat_columns
from cognoxium.packing._model import UNSET, TruncationRecord
from cognoxium.tokens.truncation import cut_tokens

__all__ = [
    "AWAITED_MARK",
    "Cutter",
    "EarlierCut",
    "Marks",
    "find_marks",
    "lower_cheap",
    "mark_awaited",
    "mark_earlier_cuts",
]

AWAITED_MARK = Truncation(min_tokens=64, note="[{n} tokens cut]")
"""The mark of an awaited tool result that has none of its own: head kept, ``min_tokens`` 64,
and a note after the cut text, ``[<n> tokens cut]``.

A cut that keeps fewer tokens sends too little of the result to read: the
exchange is then left out whole, as an unmarked one is. The note tells the
model that the output goes on, where a log cut mid-line would read as whole.
"""


@dataclass(frozen=True)
class Marks:
    """The truncation marks of ``n`` rows.

    Attributes
    ----------
    rows
        Row -> its :class:`~cognoxium.items.model.Truncation`, for the marked rows.
    floor
        ``(n,)`` int64: a marked row's ``min_tokens``, ``UNSET`` for the others.
    awaited
        The rows marked by :func:`mark_awaited`, not by their own metadata.
    """

    rows: dict[int, Truncation]
    floor: np.ndarray
    awaited: frozenset[int] = frozenset()

    def own(self, rows: np.ndarray) -> np.ndarray:
        """The rows of ``rows`` (``(k,)`` int64) but the awaited results marked here."""
        if not self.awaited:
            return rows
        return rows[~np.isin(rows, np.fromiter(self.awaited, dtype=np.int64))]


def find_marks(df: pl.DataFrame) -> Marks:
    """Read and check every row's ``metadata["truncate"]``.

    Parameters
    ----------
    df
        The items, ``n`` rows (``metadata`` and ``payload_kind`` are read;
        only rows whose metadata text names the key are parsed).

    Returns
    -------
    Marks
        The marks, by row.

    Raises
    ------
    RecordError
        If a mark is not a :class:`~cognoxium.items.model.Truncation` (an
        unknown side, ``min_tokens`` below 1, an unknown key) or marks an
        item whose payload is not text; it names the row and the field.
    """
    floor = np.full(df.height, UNSET, dtype=np.int64)
    flagged = df.select(
        pl.col("metadata").str.contains(f'"{TRUNCATE_KEY}":', literal=True).fill_null(False)
    ).to_series()
    rows: dict[int, Truncation] = {}
    if not flagged.any():
        return Marks(rows=rows, floor=floor)
    picked = flagged.arg_true().to_list()
    sub = df[picked].select("metadata", pl.col("payload_kind").cast(pl.String))
    field = f"metadata.{TRUNCATE_KEY}"
    for row, (metadata, kind) in zip(picked, sub.iter_rows(), strict=True):
        meta = json.loads(metadata)
        if TRUNCATE_KEY not in meta:
            continue  # the key text appears deeper in the metadata
        try:
            mark = Truncation.model_validate(meta[TRUNCATE_KEY])
        except ValidationError as error:
            problem = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'value'}: {e['msg']}" for e in error.errors()
            )
            raise RecordError(f"not a truncation mark: {problem}", row=row, field=field) from None
        if kind != "text":
            raise RecordError(
                f"only a text payload can be truncated, not {kind}", row=row, field=field
            )
        rows[row] = mark
        floor[row] = mark.min_tokens
    return Marks(rows=rows, floor=floor)


def mark_awaited(
    marks: Marks, role: pl.Series, payload_kind: pl.Series, *, question: Sequence[int] = ()
) -> Marks:
    """``marks`` with the awaited messages that have no mark marked :data:`AWAITED_MARK`.

    The awaited messages are the ``tool`` messages after the last ``user``
    or ``assistant`` message: what the conversation's last tool call
    returned, which the model reads next; and the rows of ``question``, the
    user message the conversation ends on (the packer gives it for a
    conversation packed newest first: in a pack by rank the last message is
    one candidate among others). Only text payloads are marked.

    Parameters
    ----------
    marks
        The rows' own marks (:func:`find_marks`).
    role
        ``(n,)``: each row's chat role, in conversation order.
    payload_kind
        ``(n,)``: each row's payload kind.

    Returns
    -------
    Marks
        ``marks`` itself when no unmarked text result is awaited.

    Examples
    --------
    >>> role = pl.Series(["system", "user", "assistant", "tool", "tool"])
    >>> kind = pl.Series(["text", "text", "json", "text", "json"])
    >>> none = Marks(rows={}, floor=np.full(5, UNSET, dtype=np.int64))
    >>> sorted(mark_awaited(none, role, kind).rows)
    [3]
    >>> asked = pl.Series(["system", "assistant", "user"])
    >>> sorted(mark_awaited(none, asked, pl.Series(["text"] * 3), question=[2]).rows)
    [2]
    """
    replies = np.flatnonzero(role.is_in(["user", "assistant"]).to_numpy())
    after = replies[-1] + 1 if replies.size else 0  # the tool messages after the last reply
    awaited = (role == "tool").to_numpy()
    awaited[:after] = False
    awaited[np.asarray(question, dtype=np.int64)] = True
    awaited = np.flatnonzero(awaited & (payload_kind == "text").to_numpy())
    return _marked(marks, awaited.tolist(), awaited=True)


def mark_earlier_cuts(marks: Marks, rows: Sequence[int]) -> Marks:
    """``marks`` with the rows of ``rows`` that have no mark marked :data:`AWAITED_MARK`.

    ``rows`` are the items an earlier pack cut, still unchanged, that a
    pack continuing it reads (see :func:`~cognoxium.packing.cache.earlier_cuts`).
    One without a mark of its own was cut as an awaited result or as the
    question the conversation ended on: the conversation has gone on since,
    so it is neither now, but its cut is what the provider cached, and the
    continuing pack makes it again (:meth:`Cutter.replay`) rather than send
    the item whole or leave it out. Such rows are not :attr:`Marks.awaited`.

    Examples
    --------
    >>> none = Marks(rows={}, floor=np.full(3, UNSET, dtype=np.int64))
    >>> marks = mark_earlier_cuts(none, [1])
    >>> sorted(marks.rows), marks.floor.tolist(), sorted(marks.awaited)
    ([1], [-1, 64, -1], [])
    """
    return _marked(marks, rows, awaited=False)


def _marked(marks: Marks, rows: Sequence[int], *, awaited: bool) -> Marks:
    """``marks`` with the rows of ``rows`` that have no mark marked :data:`AWAITED_MARK`."""
    new = [row for row in rows if row not in marks.rows]
    if not new:
        return marks
    floor = marks.floor.copy()
    floor[new] = AWAITED_MARK.min_tokens
    rows_marked = {**marks.rows, **dict.fromkeys(new, AWAITED_MARK)}
    also = frozenset(new) if awaited else frozenset()
    return Marks(rows=rows_marked, floor=floor, awaited=marks.awaited | also)


def lower_cheap(rendering: Rendering, marks: Marks, longest_token_bytes: int | None) -> Rendering:
    """``rendering`` with each marked row's cheap bound lowered to what its shortest cut costs.

    A cut keeps at least ``min_tokens`` of the text (or the whole text), so
    the content part of the bound becomes ``min(byte bound, min_tokens)``.
    Without a byte bound (``longest_token_bytes`` is ``None``) the bound
    holds no content part, and nothing changes.
    """
    if not marks.rows or longest_token_bytes is None:
        return rendering
    width = longest_token_bytes
    content = (
        rendering.chat.content.str.len_bytes().fill_null(0).cast(pl.Int64) + width - 1
    ) // width
    content_np = content.to_numpy()
    shed = np.where(marks.floor >= 0, np.maximum(content_np - marks.floor, 0), 0)
    return replace(rendering, cheap=rendering.cheap - pl.Series(shed))


@dataclass(frozen=True)
class EarlierCut:
    """How an earlier pack cut one item: its tokens kept and the text it sent."""

    kept_tokens: int
    text: str


@dataclass(frozen=True)
class _Cut:
    """One row's cut: the text kept, the content sent, its tokens and its message cost."""

    text: str
    content: str
    original_tokens: int
    kept_tokens: int
    cost: int


class Cutter:
    """Cuts the truncatable rows of a unit to fit an allowance, and remembers the cuts.

    Parameters
    ----------
    df
        The items, ``n`` rows.
    marks
        Their truncation marks.
    costs
        The units' costs; a committed cut writes the row's and the unit's new cost.
    action
        ``(n,)`` String: each row's policy action (a cut row is re-rendered
        as its policy decided), or ``None`` without policies.

    Attributes
    ----------
    pinned
        ``(n_units,)`` bool: the units a continuing pack pinned whose
        truncatable rows are documents and memories, or history messages
        after the kept prefix or the replayed cut that ends it, with no
        required item;
        :meth:`fit_required` cuts them first, whatever ``overflow``
        (``None``: none). Set by the packer.
    replayed
        Row -> its cut by an earlier pack, which a continuing pack makes
        again (see :meth:`replay`); empty otherwise.
    """

    def __init__(
        self, df: pl.DataFrame, marks: Marks, costs: UnitCosts, action: pl.Series | None
    ) -> None:
        self.df = df
        self.marks = marks
        self.costs = costs
        self.action = action
        self.cuts: dict[int, _Cut] = {}
        self.pinned: np.ndarray | None = None
        self.replayed: dict[int, EarlierCut] = {}
        self.cap: int | None = None
        """The most a unit holding an awaited result keeps when cut (see :meth:`fit`)."""
        self.capped: list[int] = []
        """The units cut to :attr:`cap`, in the order cut (see :meth:`regrow`)."""
        self._uncut_rows: dict[int, int] = {}  # a cut row's cost before its cut
        self._uncut_units: dict[int, int] = {}  # a cut unit's cost before its cut
        self._replayed_cuts: list[tuple[int, int, _Cut]] = []  # made once, committed at resets

    def reset(self) -> None:
        """Undo every cut but the replayed ones: a new selection starts from the whole texts.

        A replayed row (see :meth:`replay`) starts from its earlier cut.
        """
        for row, cost in self._uncut_rows.items():
            self.costs.row_tokens[row] = cost
        for unit, cost in self._uncut_units.items():
            self.costs.cost[unit] = cost
        self._uncut_rows.clear()
        self._uncut_units.clear()
        self.cuts.clear()
        self.cap = None
        self.capped = []
        self._make_replayed()

    def replay(self, cuts: dict[int, EarlierCut]) -> None:
        """Cut the rows of ``cuts`` as an earlier pack did, now and at every reset.

        A continuing pack sends what its earlier pack cut as it was sent
        then, byte for byte, or cut further (down to the row's
        ``min_tokens``), never longer: its bytes stay those the provider cached.
        """
        self.replayed = dict(sorted(cuts.items()))
        self._replayed_cuts = []
        self.reset()

    def _make_replayed(self) -> None:
        """Commit the replayed cuts, made (their units counted first) at the first reset."""
        if not self.replayed:
            return
        if not self._replayed_cuts:
            rows = np.fromiter(self.replayed, dtype=np.int64, count=len(self.replayed))
            of_row = self.costs.units.unit_of_row
            units = rows if of_row is None else of_row[rows]
            self.costs.count(np.unique(units))
            texts = self.df.get_column("text").gather(rows).to_list()
            keys = self.df.get_column("content_hash").gather(rows).to_list()
            wholes = self.costs.profile.count_cached(keys, texts).tolist()
            keeps = [cut.kept_tokens for cut in self.replayed.values()]
            cuts = self._cuts(rows.tolist(), texts, wholes, keeps)
            self._replayed_cuts = list(zip(rows.tolist(), units.tolist(), cuts, strict=True))
        for row, unit, cut in self._replayed_cuts:
            self._commit(row, unit, cut)

    def _commit(self, row: int, unit: int, cut: _Cut) -> None:
        """Record ``row``'s cut and write its new cost and its unit's."""
        before = int(self.costs.row_tokens[row])
        self.cuts[row] = cut
        self._uncut_rows.setdefault(row, before)
        self._uncut_units.setdefault(unit, int(self.costs.cost[unit]))
        self.costs.row_tokens[row] = cut.cost
        self.costs.cost[unit] += cut.cost - before

    def fit(self, unit: int, allowed: int, *, partial: bool = False) -> int | None:
        """Cut ``unit`` (counted) to cost at most ``allowed`` tokens; its new cost, or ``None``.

        With ``partial``, a unit that cannot reach ``allowed`` is cut as far
        as its members' ``min_tokens`` allow (its new cost is then above
        ``allowed``). Nothing changes when ``None`` is returned. A replayed
        row starts from its earlier cut. A unit holding an awaited result
        (none replayed) is cut to :attr:`cap` when that is less, or as far
        as its ``min_tokens`` allow when the cap is below them, so that the
        history before it keeps room; :meth:`regrow` gives it the room the
        history leaves.
        """
        if self.cap is None or self.cap >= allowed or not self._awaits(unit):
            return self._fit(unit, allowed, partial=partial)
        capped = self._fit(unit, self.cap, partial=True)
        if capped is not None and (capped <= allowed or partial):
            self.capped.append(unit)
            return capped
        if capped is not None:  # its min_tokens cost more than allowed: nothing changes
            self._uncut(unit)
        return None

    def regrow(self, left: int) -> int:
        """Give ``left`` tokens back to the units cut to :attr:`cap`; the tokens they take.

        Each is cut again from its whole text to its cost plus what is left,
        the first cut first. A cut's cost is not monotonic in the tokens it
        keeps (the note's count has fewer digits, a cut splits a grapheme
        the whole text encodes in fewer tokens): when no longer cut fits,
        the cut to the cap is made again.
        """
        taken = 0
        for unit in self.capped:
            if taken >= left:  # nothing left: the cut to the cap stands
                break
            before = int(self.costs.cost[unit])
            self._uncut(unit)
            after = self._fit(unit, before + left - taken)
            if after is None:
                assert self.cap is not None  # set while units are cut to it
                after = self._fit(unit, self.cap, partial=True)
            assert after is not None  # the cut to the cap, made again
            taken += after - before
        self.capped = []
        return taken

    def _awaits(self, unit: int) -> bool:
        """Whether ``unit`` holds an awaited result and no replayed row."""
        rows, _ = self.costs.units.rows_of(np.asarray([unit], dtype=np.int64))
        members = rows.tolist()
        return any(r in self.marks.awaited for r in members) and not any(
            r in self.replayed for r in members
        )

    def _uncut(self, unit: int) -> None:
        """Undo the cuts of ``unit``'s rows (none replayed), restoring its whole costs."""
        rows, _ = self.costs.units.rows_of(np.asarray([unit], dtype=np.int64))
        for row in rows.tolist():
            if row in self.cuts:
                self.costs.row_tokens[row] = self._uncut_rows.pop(row)
                del self.cuts[row]
        if unit in self._uncut_units:
            self.costs.cost[unit] = self._uncut_units.pop(unit)

    def _fit(self, unit: int, allowed: int, *, partial: bool = False) -> int | None:
        """:meth:`fit` without the cap: the longest rows cut first, or the last first.

        The rows of a unit (a call's parallel results) are cut to one level,
        the longest first (:meth:`_level`), so that a long log does not keep
        thousands of tokens while the files beside it are cut to their
        floor. Each row cut sends its own ``[n tokens cut]`` note, so cutting
        several rows can cost more than cutting one: when no level fits, the
        last row is cut first (:meth:`_shed`), as before.
        """
        cost = self._fit_by(unit, allowed, self._level)
        if cost is not None:
            return cost
        return self._fit_by(unit, allowed, self._shed, partial=partial)

    def _fit_by(
        self,
        unit: int,
        allowed: int,
        shed: Callable[[list[int], dict[int, int], int], bool],
        *,
        partial: bool = False,
    ) -> int | None:
        """Cut ``unit`` to at most ``allowed`` tokens, lowering its rows' targets by ``shed``."""
        rows, _ = self.costs.units.rows_of(np.asarray([unit], dtype=np.int64))
        marked = [
            r
            for r in rows.tolist()
            if r in self.marks.rows and (r not in self.cuts or r in self.replayed)
        ]
        if not marked:
            return None
        texts = self.df.get_column("text").gather(marked).to_list()
        keys = self.df.get_column("content_hash").gather(marked).to_list()
        whole = dict(
            zip(marked, self.costs.profile.count_cached(keys, texts).tolist(), strict=True)
        )
        target = {r: min(whole[r], self._ceiling(r, whole[r])) for r in marked}
        total = int(self.costs.cost[unit])
        chosen: dict[int, _Cut] = {}
        push = 0  # tokens to shed beyond the excess: a first cut adds its note
        while total > allowed:
            before = dict(target)
            if not shed(marked, target, total - allowed + push) and not partial:
                return None
            if target == before:  # every row at its floor
                break
            cuts = self._cuts(
                marked, texts, [whole[r] for r in marked], [target[r] for r in marked]
            )
            trial = dict(zip(marked, cuts, strict=True))
            if any(
                whole[r] > c.kept_tokens < self.marks.rows[r].min_tokens for r, c in trial.items()
            ):
                return None  # a cut that keeps fewer than min_tokens is refused
            new_total = int(self.costs.cost[unit]) + sum(
                c.cost - int(self.costs.row_tokens[r]) for r, c in trial.items()
            )
            if new_total >= total:  # the note cost what the cut shed: shed that much more
                push += new_total - total + 1
                continue
            chosen, total, push = trial, new_total, 0
        if total > allowed and not partial:
            return None
        for r, c in chosen.items():
            if c.kept_tokens < whole[r]:
                self._commit(r, unit, c)
        return int(self.costs.cost[unit])

    def _shed(self, marked: list[int], target: dict[int, int], excess: int) -> bool:
        """Lower ``target`` by ``excess`` tokens, last row first, each down to its ``min_tokens``.

        Returns whether the whole excess could be shed.
        """
        for r in reversed(marked):
            if excess <= 0:
                break
            shed = min(excess, max(target[r] - self.marks.rows[r].min_tokens, 0))
            target[r] -= shed
            excess -= shed
        return excess <= 0

    def _level(self, marked: list[int], target: dict[int, int], excess: int) -> bool:
        """Lower ``target`` by ``excess`` tokens, the highest first, toward one level.

        Water-filling: the rows at the highest target come down together
        (in input order, the first ones a token more when the tokens do not
        divide), to the next target or their ``min_tokens``. Returns whether
        the whole excess could be shed.
        """
        floors = {r: self.marks.rows[r].min_tokens for r in marked}
        while excess > 0:
            above = [r for r in marked if target[r] > floors[r]]
            if not above:
                return False
            top = max(target[r] for r in above)
            tops = [r for r in above if target[r] == top]
            lower = max((target[r] for r in above if target[r] < top), default=0)
            step = min(top - lower, *(top - floors[r] for r in tops), -(-excess // len(tops)))
            for r in tops:
                shed = min(step, excess)
                target[r] -= shed
                excess -= shed
        return True

    def _ceiling(self, row: int, whole: int) -> int:
        """The most tokens ``row`` may keep: its earlier cut's when replayed, else ``whole``."""
        earlier = self.replayed.get(row)
        return whole if earlier is None else earlier.kept_tokens

    def _cuts(
        self, rows: Sequence[int], texts: Sequence[str], wholes: Sequence[int], keeps: Sequence[int]
    ) -> list[_Cut]:
        """Cut each row's text to at most its ``keeps`` tokens and price the message it then sends.

        ``rows``, their whole ``texts``, the ``wholes`` tokens of those texts
        and the ``keeps``, ``(k,)`` each; the messages are rendered in one
        call. A replayed row kept at its earlier cut's tokens sends that
        cut's text.
        """
        kept_texts, kept_tokens = [], []
        for row, text, whole, keep in zip(rows, texts, wholes, keeps, strict=True):
            mark = self.marks.rows[row]
            earlier = self.replayed.get(row)
            if keep >= whole:
                kept, tokens = text, whole
            elif earlier is not None and keep >= earlier.kept_tokens:
                kept, tokens = earlier.text, earlier.kept_tokens
            else:
                kept, tokens = cut_tokens(self.costs.profile, text, keep, mark.side)
                kept = mark.noted(kept, whole - tokens)
            kept_texts.append(kept)
            kept_tokens.append(tokens)
        at = list(rows)
        sub = self.df[at].with_columns(pl.Series("text", kept_texts, pl.String))
        action = None if self.action is None else self.action.gather(at)
        contents = chat_columns(sub, action).content.to_list()
        profile = self.costs.profile
        olds = profile.count_cached(
            self.costs.hashes.gather(at).to_list(), self.costs.content.gather(at).to_list()
        )
        sent = [c for c in contents if c is not None]
        news = iter(profile.count(sent).tolist() if sent else [])
        out = []
        for k, row in enumerate(at):
            new = next(news) if contents[k] is not None else 0
            uncut = self._uncut_rows.get(row, int(self.costs.row_tokens[row]))
            out.append(
                _Cut(
                    text=kept_texts[k],
                    content=contents[k],
                    original_tokens=wholes[k],
                    kept_tokens=kept_tokens[k],
                    cost=uncut - int(olds[k]) + new,
                )
            )
        return out

    def fit_required(self, required: np.ndarray, allowed: int, *, overflow: str) -> bool:
        """Cut the required units (in selection order) so they cost at most ``allowed`` in all.

        The :attr:`pinned` units are cut first, then (with
        ``overflow="truncate"``) the others; among them the unit last in
        ``required`` first, each as far as needed. Returns whether they fit.
        """
        need = int(self.costs.cost[required].sum()) - allowed
        pinned = np.zeros(len(required), dtype=bool)
        if self.pinned is not None:
            pinned = self.pinned[required]
        cuttable = required[pinned]
        if overflow == "truncate":
            cuttable = np.concatenate([required[~pinned], cuttable])
        for unit in reversed(cuttable.tolist()):
            if need <= 0:
                break
            before = int(self.costs.cost[unit])
            after = self.fit(unit, before - need, partial=True)
            if after is not None:
                need -= before - after
        return need <= 0

    def floor_costs(self, rows: np.ndarray) -> np.ndarray:
        """``(k,)`` int64: what ``rows`` (counted) cost cut as far as their ``min_tokens`` allow.

        A row with no truncation mark costs what it was counted at. Nothing
        is committed.
        """
        out: np.ndarray = self.costs.row_tokens[rows].copy()
        marked = np.flatnonzero(self.marks.floor[rows] >= 0)
        if not len(marked):
            return out
        at = rows[marked]
        texts = self.df.get_column("text").gather(at).to_list()
        keys = self.df.get_column("content_hash").gather(at).to_list()
        wholes = self.costs.profile.count_cached(keys, texts).tolist()
        keeps = [min(w, self.marks.rows[r].min_tokens) for r, w in zip(at, wholes, strict=True)]
        cuts = self._cuts(at.tolist(), texts, wholes, keeps)
        out[marked] = [cut.cost for cut in cuts]
        return out

    def records(self, selected: np.ndarray) -> list[TruncationRecord]:
        """The cuts of the rows in ``selected`` (``(k,)`` int64), in input order."""
        ids = self.df.get_column("id")
        hashes = self.df.get_column("content_hash")
        out = []
        for row in sorted(set(self.cuts) & set(selected.tolist())):
            cut = self.cuts[row]
            out.append(
                TruncationRecord(
                    id=ids[row],
                    side=self.marks.rows[row].side,
                    original_tokens=cut.original_tokens,
                    kept_tokens=cut.kept_tokens,
                    parent_hash=hashes[row],
                    content_hash=content_hash("text", cut.text.encode("utf-8")),
                )
            )
        return out

    def apply(
        self, selected: np.ndarray, records: list[TruncationRecord]
    ) -> tuple[pl.DataFrame, dict[int, str]]:
        """The packed rows with their cuts applied, and each cut row's content by pack position.

        A cut row gets its kept text, its new content hash and a lineage edge
        ``truncate`` (parent: the original id and hash).
        """
        frame = self.df[selected]
        if not records:
            return frame, {}
        position = {int(row): i for i, row in enumerate(selected.tolist())}
        rows = sorted(set(self.cuts) & set(position))
        at = [position[r] for r in rows]
        lineage = frame.get_column("lineage").gather(at).to_list()
        for edges, record in zip(lineage, records, strict=True):
            edges.append(
                {
                    "parent_id": record.id,
                    "parent_hash": record.parent_hash,
                    "operation": "truncate",
                    "detail": canonical_json(
                        {
                            "kept_tokens": record.kept_tokens,
                            "original_tokens": record.original_tokens,
                            "side": record.side,
                        }
                    ),
                }
            )
        # List columns cannot be scattered: each row picks its cut's index, if any.
        cut_of = pl.Series([None] * frame.height, dtype=pl.UInt32).scatter(at, range(len(at)))
        grown = pl.Series(lineage, dtype=POLARS_SCHEMA["lineage"])
        frame = frame.with_columns(
            frame.get_column("text").scatter(at, [self.cuts[r].text for r in rows]),
            frame.get_column("content_hash").scatter(at, [r.content_hash for r in records]),
            pl.when(cut_of.is_not_null())
            .then(grown.gather(cut_of))
            .otherwise(pl.col("lineage"))
            .alias("lineage"),
        )
        return frame, {position[r]: self.cuts[r].content for r in rows}
