"""The documented rules of the chat APIs, checked on the messages a request sends.

Before: ``[user, assistant(calls c1, c2), tool(c1), user]``. After
:func:`openai_faults`: one fault at message 1, rule
``tool_call_unanswered`` (``c2`` has no result), whose repair leaves out
messages 1 and 2 (the call and its partial result).

OpenAI Chat Completions (the API's own errors: "An assistant message with
'tool_calls' must be followed by tool messages responding to each
'tool_call_id'", "messages with role 'tool' must be a response to a
preceding message with 'tool_calls'"):

- ``tool_call_unanswered``: every call of an assistant message's
  ``tool_calls`` is answered by one of the ``tool`` messages right after it
  (the run of ``tool`` messages that follows it, before any other message);
- ``tool_result_orphan``: a ``tool`` message answers a call of the assistant
  message its run of ``tool`` messages follows (a result after an
  intervening user message, or for a call no message makes, is an orphan);
- ``tool_result_duplicate``: no call is answered twice.

A call is the assistant message that makes it and its id: Chat Completions
takes a history whose assistant messages reuse ids (a provider or local
model server that numbers each turn's calls from ``call_0``), since each
run of ``tool`` messages answers the assistant message right before it.
Within one message, two calls with one id would be ambiguous; the chat
importers refuse them.

Chat Completions takes any string as a call's ``function.arguments``; the
Anthropic Messages API takes a ``tool_use`` block's ``input`` only as an
object. So a call whose arguments are not a JSON object (a model's
truncated or invalid JSON, an array, a number, a string, ``null``) cannot
be sent to Anthropic: ``tool_call_arguments_invalid``
(:func:`argument_faults`, and on ``tool_use`` blocks in
:func:`anthropic_faults`). Blank arguments (``""`` or whitespace), which
Chat Completions returns for a call of a tool without parameters and
Anthropic's streaming for a ``tool_use`` without input, are the empty
object (:func:`tool_input`).

Anthropic Messages (the "Messages" and "Implement tool use" guides: the first
message is a user message, at least one message, ``tool_result`` blocks
"must immediately follow their corresponding tool use blocks" in the next
user message, "tool_result blocks must come FIRST in the content array",
text blocks must be non-empty; the API's own errors: "text content blocks
must contain non-whitespace text", "final assistant content cannot end with
trailing whitespace", "tool_use.id: String should match pattern
'^[a-zA-Z0-9_-]+$'", "content cannot be empty if is_error is true"),
checked by :func:`anthropic_faults`: the three tool rules above on
``tool_use`` and ``tool_result`` blocks, and ``messages_empty``,
``role_invalid``, ``first_not_user``, ``tool_use_id_duplicate`` (the API's
own error: "`tool_use` ids must be unique": unlike Chat Completions,
Anthropic takes each id once in a request), ``roles_not_alternating`` (the
API merges consecutive turns of one role; a request that alternates reads
as the conversation it is, and the renderer
of :meth:`ContextPack.to_anthropic <cognoxium.packing.packer.ContextPack.to_anthropic>`
never sends two), ``content_empty`` (whitespace-only text included),
``block_misplaced``, ``tool_result_not_first``, ``tool_id_invalid``,
``tool_call_arguments_invalid``, ``final_assistant_whitespace``,
``tool_error_empty`` (a ``tool_result`` marked ``is_error`` with no content
but whitespace: :func:`blank_result`) and ``thinking_misplaced`` (the
"Extended thinking" guide: with thinking on, the assistant turn of a
tool-use loop is sent back starting with its unmodified ``thinking`` or
``redacted_thinking`` blocks; the API's own error: "Expected `thinking` or
`redacted_thinking`, but found `tool_use`"; a user message holds none).

The validators raise :class:`~cognoxium.exceptions.MessageError` at the first
fault, naming the message index and the rule.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cognoxium.exceptions import MessageError
from cognoxium.packing._messages import THINKING_TYPES

__all__ = [
    "MESSAGE_RULES",
    "Fault",
    "anthropic_faults",
    "argument_faults",
    "blank_result",
    "openai_faults",
    "reused_id_faults",
    "tool_call_faults",
    "tool_input",
    "validate_anthropic_messages",
    "validate_openai_messages",
]

MESSAGE_RULES: dict[str, str] = {
    "tool_call_unanswered": "every tool call is answered right after the message that makes it",
    "tool_result_orphan": "a tool result answers a call of the message right before its results",
    "tool_result_duplicate": "a tool call is answered once",
    "tool_use_id_duplicate": "an Anthropic request's tool_use blocks each have their own id",
    "role_invalid": "a message has a role the API takes",
    "messages_empty": "an Anthropic request has at least one message",
    "first_not_user": "an Anthropic request's first message is a user message",
    "roles_not_alternating": "user and assistant messages alternate",
    "content_empty": "a message's content, and each of its text blocks, holds more than whitespace",
    "block_misplaced": "tool_use blocks are sent by the assistant, tool_result blocks by the user",
    "tool_result_not_first": "in a user message, tool_result blocks come before any other block",
    "tool_id_invalid": "a tool_use id, and the tool_use_id of its tool_result, match "
    "^[a-zA-Z0-9_-]+$",
    "final_assistant_whitespace": "a request that ends on an assistant message does not end "
    "it with whitespace",
    "tool_call_arguments_invalid": "for Anthropic, a tool call's arguments, its tool_use "
    "input, are a JSON object; blank arguments are the empty object",
    "tool_error_empty": "a tool_result marked is_error holds more than whitespace",
    "thinking_misplaced": "thinking and redacted_thinking blocks are sent by the assistant, "
    "before its other blocks",
}
"""Every rule checked, by name: what a request must do."""

_OPENAI_ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})


@dataclass(frozen=True, slots=True)
class Fault:
    """One broken rule of a request.

    Attributes
    ----------
    index
        The 0-based index of the message at fault; ``None`` for the request.
    rule
        A key of :data:`MESSAGE_RULES`.
    text
        What is wrong, naming the messages and call ids.
    left_out
        The indices of the messages a repair leaves out so that the rest
        can be sent: an unanswered call, or one whose arguments are not a
        JSON object, with its results, an orphan or duplicate result alone
        (the rules of :func:`tool_call_faults` and :func:`argument_faults`
        only).
    """

    index: int | None
    rule: str
    text: str
    left_out: tuple[int, ...] = ()

    def error(self) -> MessageError:
        """The error a validator raises for this fault."""
        return MessageError(
            f"{self.text} (rule {self.rule}: {MESSAGE_RULES[self.rule]})",
            index=self.index,
            rule=self.rule,
        )


def _call_ids(calls: Any) -> list[str]:
    """The ids of an assistant message's tool calls (a call without one has id ``""``)."""
    if not isinstance(calls, Sequence) or isinstance(calls, str):
        return []
    return [
        call["id"] if isinstance(call, Mapping) and isinstance(call.get("id"), str) else ""
        for call in calls
    ]


def tool_call_faults(
    roles: Sequence[str], calls: Mapping[int, list[str]], results: Mapping[int, str | None]
) -> list[Fault]:
    """The faults of a conversation against the three tool rules of Chat Completions.

    Parameters
    ----------
    roles
        Each message's chat role, ``n`` of them.
    calls
        Message index -> the call ids of its ``tool_calls``, for the
        assistant messages that make calls.
    results
        Message index -> the ``tool_call_id`` it answers (``None`` when it
        has none), for every ``tool`` message.

    Returns
    -------
    list of Fault
        In message order (by ``index``).

    Examples
    --------
    >>> faults = tool_call_faults(
    ...     ["user", "assistant", "tool", "tool"], {1: ["c1"]}, {2: "c1", 3: "c1"})
    >>> [(f.index, f.rule, f.left_out) for f in faults]
    [(3, 'tool_result_duplicate', (3,))]
    """
    faults: list[Fault] = []
    # A call is the message making it and its id: a later message may make a call with
    # the id of an earlier one, and its results right after it answer it alone.
    answered: dict[tuple[int, str], int] = {}  # call -> the message answering it
    declared: dict[str, int] = {}  # call id -> the latest message making a call with it
    orphans: dict[tuple[int, str], int] = {}  # call -> a result of it out of place
    unanswered: list[_Run] = []
    run: _Run | None = None  # the assistant message whose results may follow
    for at in sorted({*calls, *results}):
        if run is not None and (at != run.end or at in calls):
            unanswered += [run] if run.missing() else []
            run = None
        if at in calls:
            run = _Run(at, calls[at], at + 1)
            run.reused = {c: declared[c] for c in calls[at] if c in declared}
            declared.update(dict.fromkeys(calls[at], at))
            continue
        call_id = results[at]
        in_run = run is not None and at == run.end
        if run is not None and in_run:
            run.end = at + 1
        made = declared.get(call_id) if call_id is not None else None
        if call_id is not None and made is not None and (made, call_id) in answered:
            faults.append(_duplicate(at, call_id, answered[made, call_id]))
        elif run is not None and in_run and call_id in run.calls:
            run.got[call_id] = answered[run.at, call_id] = at
        else:
            if call_id is not None and made is not None:
                orphans.setdefault((made, call_id), at)
            faults.append(_orphan(at, call_id, declared, roles))
    unanswered += [run] if run is not None and run.missing() else []
    faults += [r.fault(orphans) for r in unanswered]
    return sorted(faults, key=lambda f: -1 if f.index is None else f.index)


@dataclass(slots=True)
class _Run:
    """An assistant message making tool calls, and the results right after it."""

    at: int
    calls: list[str]
    end: int  # the index its next result must have
    got: dict[str, int] = field(default_factory=dict)  # call id -> the result answering it
    reused: dict[str, int] = field(default_factory=dict)  # call id -> an earlier message making it

    def missing(self) -> list[str]:
        """The calls no result of the run answers."""
        return [c for c in self.calls if c not in self.got]

    def fault(self, orphans: Mapping[tuple[int, str], int]) -> Fault:
        """The unanswered fault: left out with its partial results; names late results.

        Also names the earlier messages that made a call with a missing
        call's id: their results answer those calls, not this one.
        """
        missing = self.missing()
        later = [
            f"{c!r} at message {orphans[self.at, c]}" for c in missing if (self.at, c) in orphans
        ]
        where = f"; results come later, after another message: {', '.join(later)}" if later else ""
        earlier = [f"{c!r} by message {self.reused[c]}" for c in missing if c in self.reused]
        if earlier:
            where += (
                f"; an earlier call has the same id ({', '.join(earlier)}), and the results "
                "right after that message answer that call"
            )
        return Fault(
            self.at,
            "tool_call_unanswered",
            f"message {self.at} makes tool calls {missing} that the tool messages right after "
            f"it do not answer{where}",
            (self.at, *sorted(self.got.values())),
        )


def _duplicate(at: int, call_id: str, first: int) -> Fault:
    """A result of a call that message ``first`` already answered."""
    return Fault(
        at,
        "tool_result_duplicate",
        f"message {at} answers tool call {call_id!r}, which message {first} already answered",
        (at,),
    )


def _orphan(
    at: int, call_id: str | None, declared: Mapping[str, int], roles: Sequence[str]
) -> Fault:
    """A result not right after its call: why, naming the message between them."""
    if call_id is None:
        why = "it has no tool_call_id"
    elif call_id in declared:
        made = declared[call_id]
        between = next((k for k in range(made + 1, at) if roles[k] != "tool"), at - 1)
        why = (
            f"its call is made by message {made}, but message {between} ({roles[between]}) "
            "comes between them"
        )
    else:
        why = "no assistant message before it makes that call"
    return Fault(
        at,
        "tool_result_orphan",
        f"message {at} is a result of tool call {call_id!r}, and {why}",
        (at,),
    )


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def tool_input(arguments: str) -> dict[str, Any]:
    """The Anthropic ``tool_use`` input of a tool call's JSON ``arguments``.

    Parameters
    ----------
    arguments
        A Chat Completions call's ``function.arguments``: JSON text.

    Returns
    -------
    dict
        The object the text holds; ``{}`` for blank text (``""`` or
        whitespace), what Chat Completions returns for a call of a tool
        without parameters.

    Raises
    ------
    ValueError
        If the text is not JSON (truncated, say, or with ``NaN``), or holds
        a value other than an object (an array, a number, a string,
        ``null``); the message says which.

    Examples
    --------
    >>> tool_input('{"city": "Paris"}'), tool_input("")
    ({'city': 'Paris'}, {})
    >>> tool_input("[1, 2]")
    Traceback (most recent call last):
    ...
    ValueError: got list
    """
    if not arguments.strip():
        return {}
    try:
        value = json.loads(arguments, parse_constant=_no_constant)
    except ValueError as exc:
        raise ValueError(f"the arguments are not JSON ({exc})") from None
    if not isinstance(value, dict):
        raise ValueError(f"got {type(value).__name__}")
    return value


def argument_faults(
    calls: Mapping[int, list[str]],
    results: Mapping[int, str | None],
    invalid: Mapping[int, list[str]],
) -> list[Fault]:
    """The calls whose arguments cannot be an Anthropic ``tool_use`` input (see the module).

    Parameters
    ----------
    calls
        Message index -> the call ids of its ``tool_calls``, for the
        assistant messages that make calls.
    results
        Message index -> the ``tool_call_id`` it answers, for every ``tool``
        message.
    invalid
        Message index -> the ids of its calls whose arguments are not a
        JSON object (:func:`tool_input` raises), for the assistant messages
        that make such calls.

    Returns
    -------
    list of Fault
        One ``tool_call_arguments_invalid`` fault per message of
        ``invalid``, in message order. Its repair leaves out the message
        with the results right after it that answer its calls: every
        ``tool_use`` of a message sent to Anthropic needs its result, so a
        message cannot be sent without its one bad call.

    Examples
    --------
    >>> faults = argument_faults(
    ...     {1: ["c1", "c2"]}, {2: "c1", 3: "c2"}, {1: ["c2"]})
    >>> [(f.index, f.rule, f.left_out) for f in faults]
    [(1, 'tool_call_arguments_invalid', (1, 2, 3))]
    """
    faults = []
    for at in sorted(invalid):
        answers = _answers(at, calls, results)
        text = (
            f"message {at} makes tool calls {invalid[at]} whose arguments are not a JSON "
            "object, the only tool_use input Anthropic takes"
        )
        faults.append(Fault(at, "tool_call_arguments_invalid", text, (at, *answers)))
    return faults


def _answers(
    at: int, calls: Mapping[int, list[str]], results: Mapping[int, str | None]
) -> list[int]:
    """The tool messages of the run right after message ``at`` that answer its calls."""
    answers, k = [], at + 1
    while k in results:
        answers += [k] if results[k] in calls.get(at, ()) else []
        k += 1
    return answers


def reused_id_faults(
    calls: Mapping[int, list[str]], results: Mapping[int, str | None]
) -> list[Fault]:
    """The messages whose calls reuse the id of an earlier message's call: Anthropic refuses them.

    Chat Completions takes a call id again in a later assistant message;
    an Anthropic request takes each ``tool_use`` id once
    (``tool_use_id_duplicate``). The chat importers give such a call a new
    id (:mod:`cognoxium.formats.openai`); items made otherwise may hold one.

    Parameters
    ----------
    calls, results
        As for :func:`argument_faults`.

    Returns
    -------
    list of Fault
        One ``tool_use_id_duplicate`` fault per message that makes a call
        whose id an earlier message's call has, in message order. Its repair
        leaves out the message with the results right after it that answer
        its calls, as :func:`argument_faults` does.

    Examples
    --------
    >>> faults = reused_id_faults({1: ["c1"], 3: ["c1"]}, {2: "c1", 4: "c1"})
    >>> [(f.index, f.rule, f.left_out) for f in faults]
    [(3, 'tool_use_id_duplicate', (3, 4))]
    """
    seen: set[str] = set()
    faults = []
    for at in sorted(calls):
        reused = [c for c in calls[at] if c in seen]
        seen.update(calls[at])
        if not reused:
            continue
        answers = _answers(at, calls, results)
        text = f"message {at} makes tool calls {reused} whose ids an earlier message's calls have"
        faults.append(Fault(at, "tool_use_id_duplicate", text, (at, *answers)))
    return faults


def openai_faults(messages: Sequence[Mapping[str, Any]]) -> list[Fault]:
    """Every fault of OpenAI Chat Completions messages against the rules (see the module).

    Parameters
    ----------
    messages
        The request's ``messages``, ``n`` dicts.

    Returns
    -------
    list of Fault
        In message order; empty when the messages keep every rule.

    Examples
    --------
    >>> call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    >>> faults = openai_faults([
    ...     {"role": "user", "content": "Hi"},
    ...     {"role": "assistant", "content": None, "tool_calls": [call]}])
    >>> [(f.index, f.rule, f.left_out) for f in faults]
    [(1, 'tool_call_unanswered', (1,))]
    """
    roles: list[str] = []
    calls: dict[int, list[str]] = {}
    results: dict[int, str | None] = {}
    faults: list[Fault] = []
    for at, message in enumerate(messages):
        role = message.get("role") if isinstance(message, Mapping) else None
        if role not in _OPENAI_ROLES:
            faults.append(Fault(at, "role_invalid", f"message {at} has role {role!r}", (at,)))
            role = "user"
        roles.append(str(role))
        if role == "assistant" and message.get("tool_calls"):
            calls[at] = _call_ids(message.get("tool_calls"))
        elif role == "tool":
            call_id = message.get("tool_call_id")
            results[at] = call_id if isinstance(call_id, str) else None
    faults += tool_call_faults(roles, calls, results)
    return sorted(faults, key=lambda f: -1 if f.index is None else f.index)


def validate_openai_messages(messages: Sequence[Mapping[str, Any]]) -> None:
    """Raise unless OpenAI Chat Completions messages keep the API's documented rules.

    The rules are those of :func:`openai_faults`: every tool call answered
    once, by the ``tool`` messages right after the assistant message that
    makes it, no result without its call, and the API's roles.

    Parameters
    ----------
    messages
        The request's ``messages``.

    Raises
    ------
    MessageError
        At the first fault: ``index`` is the message's 0-based index and
        ``rule`` the rule broken (a key of :data:`MESSAGE_RULES`).

    Examples
    --------
    >>> call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    >>> validate_openai_messages([
    ...     {"role": "user", "content": "Hi"},
    ...     {"role": "assistant", "content": None, "tool_calls": [call]},
    ...     {"role": "tool", "tool_call_id": "c1", "content": "42"}])
    >>> validate_openai_messages([
    ...     {"role": "assistant", "content": None, "tool_calls": [call]},
    ...     {"role": "user", "content": "Well?"},
    ...     {"role": "tool", "tool_call_id": "c1", "content": "42"}])
    Traceback (most recent call last):
    ...
    cognoxium.exceptions.MessageError: message 0 makes tool calls ['c1'] that the tool messages
    right after it do not answer; results come later, after another message: 'c1' at message 2
    (rule tool_call_unanswered: ...)
    """
    faults = openai_faults(messages)
    if faults:
        raise faults[0].error()


def _blocks_of(content: Any) -> list[Any]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return list(content) if isinstance(content, Sequence) else []


_TOOL_ID = re.compile(r"[a-zA-Z0-9_-]+")


def _valid_tool_id(tool_id: object) -> bool:
    """Whether an Anthropic tool id matches ``^[a-zA-Z0-9_-]+$``."""
    return isinstance(tool_id, str) and _TOOL_ID.fullmatch(tool_id) is not None


def _final_faults(messages: Sequence[Any]) -> list[Fault]:
    """A request that ends on an assistant message (a prefill) must not end it with whitespace."""
    at = len(messages) - 1
    last = messages[at]
    if not isinstance(last, Mapping) or last.get("role") != "assistant":
        return []
    blocks = _blocks_of(last.get("content"))
    tail = blocks[-1] if blocks else None
    text = tail.get("text") if isinstance(tail, Mapping) and tail.get("type") == "text" else None
    if isinstance(text, str) and text and text != text.rstrip():
        return [
            Fault(
                at,
                "final_assistant_whitespace",
                f"message {at}, the last, is an assistant message ending with whitespace",
            )
        ]
    return []


def _block_faults(at: int, role: str, content: Any) -> list[Fault]:
    """The faults of one Anthropic message's content on its own."""
    if content is None or (isinstance(content, Sequence) and len(content) == 0):
        return [Fault(at, "content_empty", f"message {at} has no content")]
    faults: list[Fault] = []
    other_seen = False
    leading = True  # no block but thinking blocks so far
    for j, block in enumerate(_blocks_of(content)):
        kind = block.get("type") if isinstance(block, Mapping) else None
        text = block.get("text") if kind == "text" else None
        if kind == "text" and not (isinstance(text, str) and text.strip()):
            faults.append(
                Fault(at, "content_empty", f"message {at} block {j} is empty or whitespace text")
            )
        if kind in ("tool_use", "tool_result"):
            faults += _tool_block_faults(at, j, kind, block)
        misplaced = (kind == "tool_use" and role != "assistant") or (
            kind == "tool_result" and role != "user"
        )
        if misplaced:
            faults.append(
                Fault(at, "block_misplaced", f"message {at} ({role}) holds a {kind} block ({j})")
            )
        if kind == "tool_result" and other_seen:
            faults.append(
                Fault(
                    at,
                    "tool_result_not_first",
                    f"message {at} block {j} is a tool_result after a block of another type",
                )
            )
        other_seen = other_seen or kind != "tool_result"
        if kind in THINKING_TYPES and (role != "assistant" or not leading):
            where = "in a user message" if role != "assistant" else "after another block"
            text = f"message {at} block {j} is a {kind} block {where}"
            faults.append(Fault(at, "thinking_misplaced", text))
        leading = leading and kind in THINKING_TYPES
    return faults


def _tool_block_faults(at: int, j: int, kind: str, block: Mapping[str, Any]) -> list[Fault]:
    """The faults of a ``tool_use`` or ``tool_result`` block: its id, and a use's input."""
    faults = []
    tool_id = block.get("id" if kind == "tool_use" else "tool_use_id")
    if not _valid_tool_id(tool_id):
        faults.append(
            Fault(at, "tool_id_invalid", f"message {at} block {j} has the id {tool_id!r}")
        )
    if kind == "tool_use" and not isinstance(block.get("input"), Mapping):
        kind_of = type(block.get("input")).__name__
        text = f"message {at} block {j} is a tool_use whose input is a {kind_of}, not an object"
        faults.append(Fault(at, "tool_call_arguments_invalid", text))
    failed = kind == "tool_result" and block.get("is_error") is True
    if failed and blank_result(block.get("content")):
        text = f"message {at} block {j} is a tool_result marked is_error without content"
        faults.append(Fault(at, "tool_error_empty", text))
    return faults


def blank_result(content: Any) -> bool:
    """Whether a ``tool_result``'s content holds no block but whitespace text, or nothing.

    Anthropic refuses such a result marked ``is_error`` (rule
    ``tool_error_empty``): a pack sends it without the mark, as Chat
    Completions, which has no such mark, sends it.

    Examples
    --------
    >>> blank_result(" "), blank_result([]), blank_result([{"type": "text", "text": "Err"}])
    (True, True, False)
    """
    if content is None or isinstance(content, str):
        return not (content or "").strip()
    return all(
        isinstance(b, Mapping) and b.get("type") == "text" and not str(b.get("text", "")).strip()
        for b in _blocks_of(content)
    )


def _ids(content: Any, kind: str, key: str) -> list[str]:
    return [
        str(block.get(key))
        for block in _blocks_of(content)
        if isinstance(block, Mapping) and block.get("type") == kind
    ]


def anthropic_faults(
    request_or_messages: Mapping[str, Any] | Sequence[Mapping[str, Any]],
) -> list[Fault]:
    """Every fault of an Anthropic Messages request against the rules (see the module).

    Parameters
    ----------
    request_or_messages
        A request ``{"messages": [...], "system": ...}`` (other keys are not
        read) or its ``messages``.

    Returns
    -------
    list of Fault
        In message order (a fault of the whole request first); empty when
        the request keeps every rule.

    Examples
    --------
    >>> [(f.index, f.rule) for f in anthropic_faults({"system": "Be brief.", "messages": []})]
    [(None, 'messages_empty')]
    >>> [(f.index, f.rule) for f in anthropic_faults(
    ...     [{"role": "assistant", "content": "Hi"}, {"role": "assistant", "content": "there"}])]
    [(0, 'first_not_user'), (1, 'roles_not_alternating')]
    """
    if isinstance(request_or_messages, Mapping):
        messages = list(request_or_messages.get("messages") or [])
    else:
        messages = list(request_or_messages)
    if not messages:
        return [Fault(None, "messages_empty", "the request has no message")]
    faults: list[Fault] = []
    roles = [m.get("role") if isinstance(m, Mapping) else None for m in messages]
    answered: dict[tuple[int | None, str], int] = {}  # (tool_use message, id) -> result message
    used: dict[str, int] = {}  # tool_use id -> the latest message using it
    for at, (message, role) in enumerate(zip(messages, roles, strict=True)):
        if role not in ("user", "assistant"):
            faults.append(Fault(at, "role_invalid", f"message {at} has role {role!r}"))
            continue
        content = message.get("content")
        faults += _order_faults(at, role, roles[at - 1] if at > 0 else None)
        faults += _block_faults(at, role, content)
        if role == "assistant":
            after = messages[at + 1] if at + 1 < len(messages) else None
            faults += _unanswered_uses(at, content, after)
            faults += _reused_uses(at, content, used)
        else:
            before = messages[at - 1] if at > 0 and roles[at - 1] == "assistant" else None
            faults += _result_faults(at, content, before, answered, used)
    return faults + _final_faults(messages)


def _order_faults(at: int, role: str, previous: object) -> list[Fault]:
    """The first message is a user's, and the roles alternate."""
    faults = []
    if at == 0 and role != "user":
        faults.append(Fault(at, "first_not_user", f"message 0 is an {role} message"))
    if previous == role:
        faults.append(
            Fault(at, "roles_not_alternating", f"messages {at - 1} and {at} are both {role}")
        )
    return faults


def _unanswered_uses(at: int, content: Any, after: Any) -> list[Fault]:
    """An assistant message's tool_use blocks that the next message does not answer."""
    answers = after.get("content") if isinstance(after, Mapping) else None
    given = set(_ids(answers, "tool_result", "tool_use_id")) if answers is not None else set()
    missing = [u for u in _ids(content, "tool_use", "id") if u not in given]
    if not missing:
        return []
    text = (
        f"message {at} makes tool_use {missing} that the next message does not answer with "
        "tool_result blocks"
    )
    return [Fault(at, "tool_call_unanswered", text)]


def _reused_uses(at: int, content: Any, used: dict[str, int]) -> list[Fault]:
    """An assistant message's tool_use blocks whose id an earlier tool_use of the request has.

    ``used`` (id -> the latest message using it) is updated.
    """
    faults = []
    for j, block in enumerate(_blocks_of(content)):
        if not isinstance(block, Mapping) or block.get("type") != "tool_use":
            continue
        use_id = str(block.get("id"))
        if use_id in used:
            first = "an earlier block" if used[use_id] == at else f"message {used[use_id]}"
            text = (
                f"message {at} block {j} is a tool_use with the id {use_id!r}, which "
                f"{first} already gives a tool_use; give each call its own id"
            )
            faults.append(Fault(at, "tool_use_id_duplicate", text))
        used[use_id] = at
    return faults


def _result_faults(
    at: int,
    content: Any,
    before: Any,
    answered: dict[tuple[int | None, str], int],
    used: Mapping[str, int],
) -> list[Fault]:
    """A user message's tool_result blocks: each answers, once, a use of the message before.

    ``before`` is that message when it is an assistant's, else ``None``;
    ``answered`` ((use message, id) -> result message) is updated; a result
    is of the latest use with its id (``used``).
    """
    uses = before.get("content") if isinstance(before, Mapping) else None
    uses_before = set(_ids(uses, "tool_use", "id")) if uses is not None else set()
    faults = []
    for call_id in _ids(content, "tool_result", "tool_use_id"):
        use = (used.get(call_id), call_id)
        if use in answered:
            text = (
                f"message {at} answers tool_use {call_id!r}, which message "
                f"{answered[use]} already answered"
            )
            faults.append(Fault(at, "tool_result_duplicate", text))
        elif call_id not in uses_before:
            text = (
                f"message {at} holds a tool_result for {call_id!r}, which the message right "
                "before it does not make"
            )
            faults.append(Fault(at, "tool_result_orphan", text))
        answered.setdefault(use, at)
    return faults


def validate_anthropic_messages(
    request_or_messages: Mapping[str, Any] | Sequence[Mapping[str, Any]],
) -> None:
    """Raise unless an Anthropic Messages request keeps the API's documented rules.

    The rules are those of :func:`anthropic_faults`: at least one message,
    the first a user message, user and assistant alternating, no empty or
    whitespace-only content or text block, each ``tool_use`` with an id of
    its own in the request, answered by a
    ``tool_result`` block in the next message (once, placed before that
    message's other blocks), no ``tool_result`` without a ``tool_use`` in
    the message before, tool ids of the form ``^[a-zA-Z0-9_-]+$``, each
    ``tool_use`` input an object, a ``tool_result`` marked ``is_error``
    with content, a last assistant message (a prefill) that does not
    end with whitespace, and ``thinking`` and ``redacted_thinking`` blocks
    only in assistant messages, before their other blocks.

    Parameters
    ----------
    request_or_messages
        A request ``{"messages": [...], "system": ...}`` or its ``messages``.

    Raises
    ------
    MessageError
        At the first fault: ``index`` is the message's 0-based index
        (``None`` for a request without messages) and ``rule`` the rule
        broken (a key of :data:`MESSAGE_RULES`).

    Examples
    --------
    >>> validate_anthropic_messages({"messages": [{"role": "user", "content": "Hi"}]})
    >>> validate_anthropic_messages([
    ...     {"role": "user", "content": "Weather?"},
    ...     {"role": "assistant", "content": [
    ...         {"type": "tool_use", "id": "c1", "name": "weather", "input": {}}]},
    ...     {"role": "user", "content": "Well?"}])
    Traceback (most recent call last):
    ...
    cognoxium.exceptions.MessageError: message 1 makes tool_use ['c1'] that the next message does
    not answer with tool_result blocks (rule tool_call_unanswered: ...)
    """
    faults = anthropic_faults(request_or_messages)
    if faults:
        raise faults[0].error()
