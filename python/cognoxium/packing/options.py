"""How a pack is made: :class:`PackOptions`, one frozen object checked once.

Every edge that packs (:meth:`CognitionFrame.pack
<cognoxium.frame.CognitionFrame.pack>`, :func:`cognoxium.packing.packer.pack`,
a batch request, the command line, the Ray engine) builds one
:class:`PackOptions` and passes it unchanged to the packing kernel, which
pairs it with a token budget (:func:`check_budget`). The budget is not an
option: it is what every call sets, while the options are what a batch of
calls shares.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

import numpy as np

from cognoxium.exceptions import BudgetError, PackError
from cognoxium.items._checks import MAX_INT
from cognoxium.packing.cache_models import CacheModel, get_cache_model
from cognoxium.tokens.profiles import TokenProfile, get_profile

__all__ = [
    "GAP_MODES",
    "OPTION_NAMES",
    "OVERFLOW_MODES",
    "START_ON",
    "TARGETS",
    "TOOL_ERRORS",
    "Gaps",
    "Overflow",
    "PackOptions",
    "StartOn",
    "Target",
    "ToolErrors",
    "check_budget",
]

Overflow = Literal["error", "truncate"]
OVERFLOW_MODES: tuple[Overflow, ...] = ("error", "truncate")
"""What a pack does when its required items alone exceed the budget."""

Gaps = Literal["stop", "fill"]
GAP_MODES: tuple[Gaps, ...] = ("stop", "fill")
"""What a pack does when a conversation item it takes newest first does not fit."""

StartOn = Literal["user"]
START_ON: tuple[StartOn, ...] = ("user",)
"""The values ``start_on`` takes besides ``None``."""

ToolErrors = Literal["error", "repair"]
TOOL_ERRORS: tuple[ToolErrors, ...] = ("error", "repair")
"""What a pack does with tool messages the chat APIs would reject."""

Target = Literal["openai", "anthropic"]
TARGETS: tuple[Target, ...] = ("openai", "anthropic")
"""The APIs a pack can be built for."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PackOptions:
    """The options of a pack, checked when made; frozen and hashable.

    Parameters
    ----------
    reserve
        Tokens of the budget kept for the reply: a whole number >= 0, at
        most the budget of each pack it is used with; the items fit in
        ``budget - reserve``. Recorded in the manifest (``reserve_tokens``).
    profile
        A :class:`~cognoxium.tokens.profiles.TokenProfile` or the name of
        one (see :func:`~cognoxium.tokens.profiles.get_profile`); held
        resolved.
    as_of
        The time (timezone-aware, held in UTC) at which validity and expiry
        are evaluated; ``None`` means the time of each pack, read once when
        it starts, which is not reproducible: give it for byte-identical
        manifests.
    overflow
        What happens when the required items alone exceed ``budget -
        reserve``: ``"error"`` raises
        :class:`~cognoxium.exceptions.BudgetError`; ``"truncate"`` cuts the
        required truncatable items (the one considered last first, each down
        to its ``min_tokens``) and raises only if they still do not fit.
    turns
        Pack whole turns: a ``user`` message and the ``assistant`` and
        ``tool`` messages after it, up to the next ``user`` message, are one
        unit, kept or dropped together. The last turn while still in
        progress (its last message a ``tool`` result) is not bound, so an
        agent loop keeps its task and newest steps.
    start_on
        ``"user"``: after the leading system block the pack starts on a
        message sent with the ``user`` role; ``None``: no such rule.
    tool_errors
        What the pack does with tool messages the chat APIs reject (the
        rules of :mod:`cognoxium.packing.message_rules`: an assistant
        message whose tool calls are not all answered by the tool messages
        right after it, a result that answers no call of the message before
        it, a call answered twice). ``"repair"`` (the default) leaves out
        what cannot be sent, each item with the rule as its manifest reason:
        an unanswered call goes with its partial results, an orphan or
        duplicate result goes alone. A half-finished agent loop, whose last
        call waits for its result, is the normal state of a history being
        packed, and the pack then holds everything before that call.
        Once answered, the results it awaits (the tool messages after the
        last user or assistant message) are cut to fit rather than left
        out with their call (and so is, in a conversation packed newest
        first, a last user message: the question the model answers next),
        their head kept and at least 64 tokens of it, followed by a line
        ``[<n> tokens cut]``, and to at most half the
        room the required items leave when the steps before them can use
        the rest (see :mod:`cognoxium.packing._truncation`).
        With ``target="anthropic"`` a call whose arguments are not a JSON
        object (invalid or truncated JSON, an array, a number, a string,
        ``null``; blank arguments are the empty object), which Anthropic
        cannot take as a ``tool_use`` input, breaks a rule too
        (``tool_call_arguments_invalid``): its message is left out with
        every result of its calls; so is a call whose id a call of an
        earlier message the pack sends has (``tool_use_id_duplicate``: Anthropic takes
        each ``tool_use`` id once).
        ``"error"`` raises :class:`~cognoxium.exceptions.MessageError`
        naming the message of the pack, its item and the rule.
    target
        The API the pack is built for. ``"openai"`` (the default): Chat
        Completions messages. ``"anthropic"``: the pack renders as a valid
        Anthropic Messages request (:meth:`ContextPack.to_anthropic
        <cognoxium.packing.packer.ContextPack.to_anthropic>`): it starts on a
        user message (as ``start_on="user"``) when it may send one, and,
        when it does not start on one (it holds no message besides system
        ones, or it is an agent loop without a user message), the opening
        user message the rendering adds is counted in ``used_tokens``; a
        tool call whose arguments are not a JSON object is not sent (see
        ``tool_errors``). Its items cost what an Anthropic request sends:
        assistant messages their thinking blocks too, and images
        Anthropic's rule (:data:`~cognoxium.tokens.images.CLAUDE_IMAGES`,
        by area, at most 1,640 tokens) instead of OpenAI's tiles. Claude's
        tokenizer is not available offline, so text is counted with the
        profile's encoding and the manifest says ``estimated``.
    eviction_share
        For a pack that continues an earlier one (``previous=``, see
        :mod:`cognoxium.packing.cache`): the share of the evictable history's
        tokens evicted at once, oldest first, when the earlier prefix and the
        new messages no longer fit; a number in (0, 1]. Larger steps keep the
        prefix cached for more turns and send less history on average (the
        history grows back from ``1 - eviction_share`` of the budget, so
        about ``1 - eviction_share / 2`` of a full window on average); 0.4
        bills about a fifth of a sliding window's input at 0.1x cached
        prices and keeps over 80% of its history (``benchmarks/bench_cache.py``).
    cache_model
        The provider cache model (a name in
        :func:`~cognoxium.packing.cache_models.cache_models` or a
        :class:`~cognoxium.packing.cache_models.CacheModel`) under which a
        continuing pack's manifest bills its input; ``None``: not billed.
    gaps
        What happens when a conversation item (``user``, ``assistant`` or
        ``tool``) without a rank, taken newest first, does not fit:
        ``"stop"`` (the default) takes no older one, so the pack keeps an
        unbroken tail of the conversation, as LangChain's
        ``trim_messages(strategy="last")`` does: that item keeps reason
        ``over_budget`` and the older ones left out get reason
        ``before_tail``, whether or not they would have fit; ``"fill"``
        skips it and tries the older ones, so more of the budget is used but
        the pack can have holes. Either way each hole is marked in the manifest (reason
        ``gap``, and ``gap_records``). "stop" is the default because a hole
        shows the model a reply without its question, or a conversation
        that jumps, with nothing to tell it so. One exception: a tool
        exchange or reply that does not fit, newer than every user message
        taken, is passed over (a hole), so the task of an agent loop and
        its latest tool exchanges stay when an earlier tool result does not
        fit. In either mode a selection that would send no user message
        drops its oldest conversation units, as few as let one in (see
        :func:`~cognoxium.packing._conversation.reach_user`), so the task
        stays when the steps fill the budget. Items with a rank are not
        affected: a rank is a relevance order, not a sequence.
    gap_note
        ``None`` (the default): a hole leaves no trace in the messages.
        Otherwise the text of one message put in place of each hole, with
        ``{n}`` replaced by the number of items left out there, as
        ``"({n} earlier messages omitted)"``; it is counted in the budget
        (in ``used_tokens`` and ``pack_overhead_tokens``) and its position
        and tokens are in the hole's
        :class:`~cognoxium.packing._model.GapRecord`. It is sent as a
        ``system`` message for ``target="openai"`` and as a ``user`` message
        for ``target="anthropic"`` (which has no system messages in its
        conversation), after the tool results that end the packed turn
        before the hole, so never between a call and its results. The older
        history left out before an unbroken tail gets no note: the pack
        then starts where a trimmed history starts. Not for a pack that
        continues an earlier one (``previous=``).

    Raises
    ------
    PackError
        If ``reserve`` is not a whole number >= 0 (``bool`` is refused),
        ``overflow`` is not one of :data:`OVERFLOW_MODES`, ``turns`` is not a
        bool, ``start_on`` is not ``None`` or one of :data:`START_ON`,
        ``as_of`` is not a ``datetime`` (ISO text included) or is naive,
        ``tool_errors`` is not one of :data:`TOOL_ERRORS`, ``target`` not
        one of :data:`TARGETS`, ``gaps`` not one of :data:`GAP_MODES`,
        ``eviction_share`` is not a number in (0, 1], ``cache_model``
        names no cache model, or ``gap_note`` is not ``None`` or a text that
        is not blank and has no field besides ``{n}``.
        The checks run in this order, so the same bad options always fail
        with the same error.
    ProfileError
        If ``profile`` names no token profile.

    Examples
    --------
    >>> from datetime import UTC, datetime
    >>> options = PackOptions(reserve=64, as_of=datetime(2025, 1, 1, tzinfo=UTC), turns=True)
    >>> options.profile.name, options.reserve, options.turns
    ('cl100k_base', 64, True)
    >>> options.merged(reserve=None, start_on="user").start_on
    'user'
    >>> PackOptions(overflow="drop")
    Traceback (most recent call last):
    ...
    cognoxium.exceptions.PackError: overflow must be one of ['error', 'truncate'], got 'drop'
    >>> PackOptions(gaps="skip")
    Traceback (most recent call last):
    ...
    cognoxium.exceptions.PackError: gaps must be one of ['stop', 'fill'], got 'skip'; ...
    >>> PackOptions(gap_note="({count} omitted)")
    Traceback (most recent call last):
    ...
    cognoxium.exceptions.PackError: gap_note must be a text whose only field is {n} ...
    """

    reserve: int = 0
    profile: TokenProfile | str = "cl100k_base"
    as_of: datetime | None = None
    overflow: Overflow = "error"
    turns: bool = False
    start_on: StartOn | None = None
    tool_errors: ToolErrors = "repair"
    target: Target = "openai"
    eviction_share: float = 0.4
    cache_model: str | CacheModel | None = None
    gaps: Gaps = "stop"
    gap_note: str | None = None

    def __post_init__(self) -> None:
        reserve = self.reserve
        if isinstance(reserve, bool) or not isinstance(reserve, int | np.integer) or reserve < 0:
            raise PackError(
                f"reserve must be a whole number of tokens >= 0, got {reserve!r}",
                params={"reserve": repr(reserve)},
            )
        if not isinstance(self.turns, bool):
            raise PackError(f"turns must be True or False, got {self.turns!r}")
        for name, (values, meaning) in _CHOICES.items():
            _check_choice(name, getattr(self, name), values, meaning)
        share = self.eviction_share
        if isinstance(share, bool) or not isinstance(share, int | float) or not 0 < share <= 1:
            raise PackError(  # NaN fails the range too
                f"eviction_share must be a number in (0, 1], got {share!r}: the share of the "
                "evictable history a continuing pack evicts at once",
                params={"eviction_share": repr(share)},
            )
        if self.cache_model is not None:
            get_cache_model(self.cache_model)
        if self.gap_note is not None:
            _check_gap_note(self.gap_note)
        set_field = object.__setattr__
        set_field(self, "eviction_share", float(share))
        set_field(self, "reserve", int(reserve))
        if not isinstance(self.profile, TokenProfile):
            set_field(self, "profile", get_profile(self.profile))
        set_field(self, "as_of", None if self.as_of is None else _as_utc(self.as_of))

    def __repr__(self) -> str:
        profile = getattr(self.profile, "name", self.profile)
        return (
            f"PackOptions(reserve={self.reserve}, profile={profile!r}, as_of={self.as_of!r}, "
            f"overflow={self.overflow!r}, turns={self.turns}, start_on={self.start_on!r}, "
            f"tool_errors={self.tool_errors!r}, target={self.target!r}, gaps={self.gaps!r}"
            + ("" if self.gap_note is None else f", gap_note={self.gap_note!r}")
            + _cache_repr(self)
            + ")"
        )

    def merged(self, **given: Any) -> PackOptions:
        """These options with the ``given`` ones that are not ``None`` in their place.

        Raises
        ------
        PackError
            If a name is not an option, or a value is bad (see above).
        """
        unknown = sorted(set(given) - set(OPTION_NAMES))
        if unknown:
            raise PackError(f"{unknown} are not pack options; the options are {list(OPTION_NAMES)}")
        changes = {name: value for name, value in given.items() if value is not None}
        return dataclasses.replace(self, **changes) if changes else self

    def at_time(self) -> PackOptions:
        """These options with ``as_of`` fixed: the current UTC time when it is ``None``."""
        if self.as_of is not None:
            return self
        return dataclasses.replace(self, as_of=datetime.now(UTC))


OPTION_NAMES: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(PackOptions))
"""The names of the pack options, in field order."""


def check_budget(budget: object, options: PackOptions) -> int:
    """The token budget of a pack with ``options``, checked against them.

    Parameters
    ----------
    budget
        A whole number of tokens from 0 to 2**63 - 1 (``bool`` is refused).
    options
        The pack's options; their ``reserve`` must not exceed the budget.

    Returns
    -------
    int
        The budget.

    Raises
    ------
    PackError
        If ``budget`` is not a whole number from 0 to 2**63 - 1.
    BudgetError
        If ``options.reserve`` exceeds the budget (code
        ``budget.reserve_invalid``; its ``costs`` is empty).

    Examples
    --------
    >>> check_budget(100, PackOptions(reserve=10))
    100
    >>> check_budget(5, PackOptions(reserve=10))
    Traceback (most recent call last):
    ...
    cognoxium.exceptions.BudgetError: reserve must be ... from 0 to the budget (5), got 10: ...
    """
    if (
        isinstance(budget, bool)
        or not isinstance(budget, int | np.integer)
        or not 0 <= budget <= MAX_INT
    ):
        raise PackError(
            f"budget must be a whole number of tokens from 0 to 2**63 - 1 ({MAX_INT}), "
            f"got {budget!r}",
            params={"budget": budget if isinstance(budget, int) else repr(budget)},
        )
    if options.reserve > budget:
        raise BudgetError(
            f"reserve must be a whole number of tokens from 0 to the budget ({budget}), "
            f"got {options.reserve}: the reply reserve is taken out of the budget",
            costs={},
            budget=int(budget),
            code="budget.reserve_invalid",
            params={"reserve": options.reserve},
        )
    return int(budget)


_CHOICES: dict[str, tuple[tuple[str | None, ...], str]] = {
    "overflow": (OVERFLOW_MODES, ""),
    "start_on": ((None, *START_ON), "'user' makes the pack start on a user message after its "
                 "system block"),
    "tool_errors": (TOOL_ERRORS, "'repair' leaves out tool messages the chat APIs reject, "
                    "'error' raises"),
    "target": (TARGETS, ""),
    "gaps": (GAP_MODES, "'stop' keeps an unbroken tail of the conversation, 'fill' fills "
             "holes with older items"),
}  # fmt: skip
"""The options that take one of a few values: the values, and what they mean."""


def _check_choice(name: str, value: object, values: tuple[str | None, ...], meaning: str) -> None:
    """Raise a PackError naming the option unless ``value`` is one of ``values``."""
    if value in values:
        return
    shown = [v for v in values if v is not None]
    allowed = f"None or one of {shown}" if None in values else f"one of {shown}"
    raise PackError(
        f"{name} must be {allowed}, got {value!r}" + (f"; {meaning}" if meaning else ""),
        params={name: repr(value)},
    )


def _cache_repr(options: PackOptions) -> str:
    """The continuation options in the repr, when not at their defaults."""
    shown = ""
    if options.eviction_share != 0.4:
        shown += f", eviction_share={options.eviction_share!r}"
    model = options.cache_model
    if model is not None:
        shown += f", cache_model={getattr(model, 'name', model)!r}"
    return shown


def _check_gap_note(note: object) -> None:
    """Raise a PackError unless ``note`` is a text, not blank, whose only field is ``{n}``."""
    problem = None
    if not isinstance(note, str):
        problem = f"got {type(note).__name__} {note!r}"
    elif not note.strip():
        problem = f"got the blank text {note!r}"
    else:
        try:
            note.format(n=1)
        except (KeyError, IndexError, ValueError, AttributeError) as error:
            problem = f"got {note!r} ({type(error).__name__}: {error})"
    if problem is not None:
        raise PackError(
            "gap_note must be a text whose only field is {n} (the items left out), as "
            f"'({{n}} earlier messages omitted)', or None; {problem}",
            params={"gap_note": repr(note)},
        )


def _as_utc(value: object) -> datetime:
    if not isinstance(value, datetime):
        raise PackError(
            f"as_of must be a timezone-aware datetime (UTC) or None, got {type(value).__name__} "
            f"{value!r}; for ISO 8601 text use datetime.fromisoformat(text)",
            params={"as_of": repr(value)},
        )
    if value.tzinfo is None or value.utcoffset() is None:
        raise PackError("as_of must be timezone-aware (UTC)")
    return value.astimezone(UTC)
