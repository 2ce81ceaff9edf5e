"""Tool messages a pack can send: the tool rules of the chat APIs in selection (``tool_errors``).

Before: rows ``[user, assistant(calls c1, c2), tool(c1)]``, the last call of
an agent loop waiting for its result. After, with ``tool_errors="repair"``:
the assistant row and its partial result are left out with reason
``tool_call_unanswered`` and the pack holds ``[user]``.

The rules are those of :mod:`cognoxium.packing.message_rules` (every call
answered by the tool messages right after it, no orphan result, no call
answered twice) and, for a pack built for Anthropic (``target``), the rule
of its ``tool_use`` input: every call's arguments a JSON object (a call
that breaks it is left out with its results, as an unanswered call is). A
pack keeps them in two steps:

1. the input: the faults of the rows as they stand (every row as the chat
   message it sends, in input order) are found once per scope; with
   ``"repair"`` each row a fault leaves out is excluded with the rule as its
   reason, and made a unit of its own, so a turn (``turns=True``) or a group
   keeps its other rows;
2. the selection: the rows selected are checked again (a call and its
   result in different units, one of them not selected, break the rules
   only in the pack). With ``"repair"`` the units holding a fault are
   dropped and the selection runs again without them, so the freed tokens
   go to the next candidates (each round drops at least one unit, so it
   ends); with ``"error"`` the first fault of the final pack raises
   :class:`~cognoxium.exceptions.MessageError` naming the message of the
   pack, its item and the rule.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import polars as pl

from cognoxium.exceptions import MessageError, PackError
from cognoxium.packing._exclusions import Exclusions
from cognoxium.packing._messages import ChatColumns
from cognoxium.packing._model import REASON_CODE, REASONS, UNSET, Reason
from cognoxium.packing._selection import Queue
from cognoxium.packing._units import Units
from cognoxium.packing.message_rules import (
    MESSAGE_RULES,
    Fault,
    argument_faults,
    reused_id_faults,
    tool_call_faults,
    tool_input,
)

__all__ = ["RULE_REASONS", "SelectionCheck", "ToolRows", "detached", "raise_first_fault"]

RULE_REASONS: dict[str, Reason] = {
    "tool_call_unanswered": Reason.TOOL_CALL_UNANSWERED,
    "tool_result_orphan": Reason.TOOL_RESULT_ORPHAN,
    "tool_result_duplicate": Reason.TOOL_RESULT_DUPLICATE,
    "tool_call_arguments_invalid": Reason.TOOL_CALL_ARGUMENTS_INVALID,
    "tool_use_id_duplicate": Reason.TOOL_USE_ID_DUPLICATE,
}
"""The manifest reason of a row left out for breaking each tool rule."""


@dataclass(frozen=True)
class ToolRows:
    """The rows as the chat messages they send, reduced to what the tool rules read.

    Attributes
    ----------
    roles
        ``(n,)`` each row's chat role.
    calls
        Row -> the ids of its tool calls, for the assistant rows that call tools.
    results
        Row -> the call id it answers, for the rows sent as ``tool`` messages.
    invalid
        Row -> the ids of its calls whose arguments are not a JSON object
        (:func:`~cognoxium.packing.message_rules.tool_input`), for the
        assistant rows that make such calls: what Anthropic cannot take.
    reused
        Some call has the id of an earlier row's call: Anthropic takes each
        ``tool_use`` id once in a request.
    """

    roles: list[str]
    calls: dict[int, list[str]]
    results: dict[int, str | None]
    invalid: dict[int, list[str]] = field(default_factory=dict)
    reused: bool = False

    @classmethod
    def of(cls, chat: ChatColumns) -> ToolRows:
        """The tool rows of a frame's rendering."""
        roles = chat.role.cast(pl.String).to_list()
        calls: dict[int, list[str]] = {}
        results: dict[int, str | None] = {}
        invalid: dict[int, list[str]] = {}
        for row, fields in chat.fields.items():
            if roles[row] == "assistant" and fields.get("tool_calls"):
                calls[row] = [str(c.get("id")) for c in fields["tool_calls"]]
                bad = [str(c.get("id")) for c in fields["tool_calls"] if not _an_object(c)]
                if bad:
                    invalid[row] = bad
            elif roles[row] == "tool":
                results[row] = fields.get("tool_call_id")
        for row in np.flatnonzero((chat.role == "tool").to_numpy()).tolist():
            results.setdefault(row, None)
        made = [c for ids in calls.values() for c in ids]
        return cls(roles, calls, results, invalid, len(set(made)) < len(made))

    def faults(self, rows: np.ndarray, target: str = "openai") -> list[Fault]:
        """The faults of the messages of ``rows`` (``(k,)`` int64, in pack order), by position.

        ``target`` is the API the messages are sent to: ``"anthropic"`` adds
        the faults of calls whose arguments are not a JSON object, and of
        calls whose id an earlier message's call has.
        """
        position = {int(row): k for k, row in enumerate(rows.tolist())}
        roles = [self.roles[row] for row in position]
        calls = {position[r]: ids for r, ids in self.calls.items() if r in position}
        results = {position[r]: c for r, c in self.results.items() if r in position}
        faults = tool_call_faults(roles, calls, results)
        if target == "anthropic" and self.invalid:
            invalid = {position[r]: ids for r, ids in self.invalid.items() if r in position}
            faults += argument_faults(calls, results, invalid)
        if target == "anthropic" and self.reused:
            faults += reused_id_faults(calls, results)
        return sorted(faults, key=lambda f: -1 if f.index is None else f.index)

    def left_out(self, target: str = "openai") -> np.ndarray | None:
        """``(n,)`` int64: the reason code of each row a fault of the input leaves out.

        :data:`~cognoxium.packing._model.UNSET` for the others; ``None`` when
        the input keeps every rule of ``target``. A call reusing an earlier
        call's id is no fault of the input: only of a pack that sends both,
        which the selection's check (:class:`SelectionCheck`) finds.
        """
        every = self.faults(np.arange(len(self.roles), dtype=np.int64), target)
        faults = [f for f in every if f.rule != "tool_use_id_duplicate"]
        if not faults:
            return None
        codes = np.full(len(self.roles), UNSET, dtype=np.int64)
        for fault in faults:
            out = np.asarray(fault.left_out, dtype=np.int64)
            out = out[codes[out] == UNSET]
            codes[out] = REASON_CODE[RULE_REASONS[fault.rule]]
        return codes


def _an_object(call: dict[str, Any]) -> bool:
    """Whether a tool call's arguments are a JSON object (blank ones are the empty object)."""
    try:
        tool_input(call["function"]["arguments"])
    except ValueError:
        return False
    return True


def leave_out(df: pl.DataFrame, rows: Exclusions, codes: np.ndarray) -> Exclusions:
    """``rows`` with the candidates marked in ``codes`` excluded with those reasons.

    Raises
    ------
    PackError
        If a required item would be left out: it cannot be sent as it stands.
    """
    out = (codes != UNSET) & rows.eligible
    if not out.any():
        return rows
    _refuse_required(df, rows, out, codes)
    reason = np.where(out, codes, rows.reason)
    return replace(rows, reason=reason, eligible=rows.eligible & ~out)


def _refuse_required(
    df: pl.DataFrame, rows: Exclusions, out: np.ndarray, codes: np.ndarray
) -> None:
    """Raise PackError if a required row is among the rows marked in ``out``."""
    required = np.flatnonzero(out & rows.required)
    if len(required) == 0:
        return
    ids = sorted(df.get_column("id").gather(required).to_list())
    rule = REASONS[int(codes[required[0]])].value
    raise PackError(
        f"required items {ids} would send tool messages the chat APIs reject (rule {rule}: "
        f"{MESSAGE_RULES[rule]}), so they cannot be packed; complete the tool exchange, "
        "or lower their retention"
    )


def detached(df: pl.DataFrame, codes: np.ndarray) -> pl.DataFrame:
    """``role`` and ``group_id`` of ``df``, the rows marked in ``codes`` in no group or turn.

    What :func:`~cognoxium.packing._units.form_units` reads, so that each
    row left out is a unit of its own and its group's or turn's other rows
    stay packable.
    """
    mask = pl.lit(pl.Series(codes != UNSET))
    return df.select(
        pl.when(mask)
        .then(pl.lit("detached"))
        .otherwise(pl.col("role").cast(pl.String))
        .alias("role"),
        pl.when(mask).then(pl.lit(None, pl.String)).otherwise(pl.col("group_id")).alias("group_id"),
    )


@dataclass
class SelectionCheck:
    """A selection that leaves out the units whose messages break a tool rule (``"repair"``).

    Call it as the pack's selection; :meth:`applied` then gives the
    exclusions with the rows left out and their reasons.
    """

    df: pl.DataFrame
    tools: ToolRows
    rows: Exclusions
    units: Units
    select: Callable[[Queue], np.ndarray]
    target: str = "openai"
    dropped: np.ndarray = field(init=False)
    codes: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.dropped = np.zeros(self.units.n_units, dtype=bool)
        self.codes = np.full(len(self.rows.reason), UNSET, dtype=np.int64)

    def __call__(self, queue: Queue) -> np.ndarray:
        while True:
            if self.dropped.any():
                queue = queue.without(self.dropped)
            included = self.select(queue)
            rows = packed_rows(self.rows, self.units, included)
            faults = self.tools.faults(rows, self.target)
            if not faults:
                return included
            for fault in faults:
                members = rows[np.asarray(fault.left_out, dtype=np.int64)]
                unit = np.unique(_row_units(self.units, members))
                unit = unit[~self.dropped[unit]]
                if len(unit) == 0:
                    continue
                self.dropped[unit] = True
                lost, _ = self.units.rows_of(unit)
                lost = lost[self.codes[lost] == UNSET]
                self.codes[lost] = REASON_CODE[RULE_REASONS[fault.rule]]
                out = np.zeros(len(self.codes), dtype=bool)
                out[lost] = True
                _refuse_required(self.df, self.rows, out & self.rows.eligible, self.codes)

    def applied(self, rows: Exclusions) -> Exclusions:
        """``rows`` with the rows of the dropped units excluded with their rules' reasons."""
        return leave_out(self.df, rows, self.codes)


def _row_units(units: Units, rows: np.ndarray) -> np.ndarray:
    return rows if units.unit_of_row is None else units.unit_of_row[rows]


def packed_rows(rows: Exclusions, units: Units, included: np.ndarray) -> np.ndarray:
    """``(k,)`` int64: the rows a selection of units packs, in input (pack) order."""
    unit_in = included if units.unit_of_row is None else included[units.unit_of_row]
    return np.flatnonzero(unit_in & rows.eligible)


def raise_first_fault(
    df: pl.DataFrame, tools: ToolRows, selected: np.ndarray, target: str = "openai"
) -> None:
    """Raise MessageError at the first message of the pack that breaks a tool rule.

    Parameters
    ----------
    df
        The items (``id`` is read).
    tools
        The rows' tool messages.
    selected
        ``(k,)`` int64: the packed rows, in pack order.
    target
        The API the pack is built for; ``"anthropic"`` adds the rule of its
        ``tool_use`` input (``tool_call_arguments_invalid``).

    Raises
    ------
    MessageError
        Naming the message's pack position (``index``), the rule, the item
        ``id`` and its input ``row``.
    """
    faults = tools.faults(selected, target)
    if not faults:
        return
    fault = faults[0]
    at = fault.index if fault.index is not None else 0
    row = int(selected[at])
    item = df.get_column("id")[row]
    raise MessageError(
        f"message {at} of the pack (item {item!r}, row {row}) breaks rule {fault.rule} "
        f"({MESSAGE_RULES[fault.rule]}): {fault.text}; {_what_to_do(fault.rule)}",
        index=at,
        rule=fault.rule,
        params={"id": item, "row": row},
    )


def _what_to_do(rule: str) -> str:
    """Who rejects a request that breaks ``rule``, and how to pack one that is sent."""
    repair = "ack with tool_errors='repair' to leave out what cannot be sent"
    if rule == "tool_call_arguments_invalid":
        return f"Anthropic rejects such a request. Fix the call's arguments, or p{repair}"
    if rule == "tool_result_orphan":
        return (
            "the chat APIs reject such a request. Give a call and its results one group_id "
            f"so they are packed together, or p{repair}"
        )
    return f"the chat APIs reject such a request. P{repair}"
