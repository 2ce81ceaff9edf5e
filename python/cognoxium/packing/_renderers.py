"""A pack as a request: OpenAI Chat Completions, Anthropic Messages, a text transcript.

Every renderer starts from the same per-item rendering, the OpenAI Chat
Completions messages of :mod:`cognoxium.packing._messages` (what a pack costs
and what ``pack.messages`` holds), so attribution lines, names, tool calls and
policy renderings are the same in every format. :class:`Renderer` is the
protocol of a renderer: one method that takes the pack and returns the
request; ``pack.render(renderer)`` calls it.

The rules of each format are documented where users read them:
:meth:`ContextPack.to_anthropic <cognoxium.packing.packer.ContextPack.to_anthropic>`
(:func:`anthropic_request`) and
:meth:`ContextPack.to_text <cognoxium.packing.packer.ContextPack.to_text>`
(:func:`text_transcript`).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

import polars as pl

from cognoxium.exceptions import RecordError
from cognoxium.packing._messages import THINKING_TYPES
from cognoxium.packing.message_rules import blank_result, tool_input

if TYPE_CHECKING:
    from cognoxium.packing._model import ContextPack

__all__ = [
    "NOT_BLANK",
    "OPENING",
    "RANKED_ROLES",
    "SYSTEM_ROLES",
    "Renderer",
    "anthropic_request",
    "anthropic_tool_id",
    "anthropic_turn",
    "failed_calls",
    "mark_cache",
    "merge_turn",
    "sends_blocks",
    "system_text",
    "text_transcript",
]

OPENING = "(earlier messages omitted)"
"""The text of the user message an Anthropic request opens with when the pack has none first."""

RequestT_co = TypeVar("RequestT_co", covariant=True)

SYSTEM_ROLES: tuple[str, ...] = ("system", "developer")
"""Message roles an Anthropic request sends in its ``system`` block."""
RANKED_ROLES: tuple[str, ...] = ("document", "memory")
"""Item roles of ranked content: a continuing pack sends them after its stable history."""
NOT_BLANK = r"[^\s\x1c-\x1f]"
"""A regex (Polars syntax) of a character ``str.strip`` keeps: text without one is blank."""
_DATA_PREFIX = "data:"


@runtime_checkable
class Renderer(Protocol[RequestT_co]):
    r"""Renders a pack as the request some model API takes.

    Implement :meth:`render`; call it through ``pack.render(renderer)``.
    Start from ``pack.messages`` (what the pack costs) or ``pack.frame``
    (the selected items, all columns) so the request holds what was packed.

    Examples
    --------
    >>> class Prompt:
    ...     def render(self, pack):
    ...         return "\\n".join(m["content"] for m in pack.messages)
    >>> isinstance(Prompt(), Renderer)
    True
    """

    def render(self, pack: ContextPack, /) -> RequestT_co:
        """Return the request for ``pack``."""
        ...


def _image_block(url: str) -> dict[str, Any]:
    """An Anthropic image block for an image URL (a data URL becomes a base64 source)."""
    if url.startswith(_DATA_PREFIX) and ";base64," in url:
        media_type, data = url[len(_DATA_PREFIX) :].split(";base64,", 1)
        return {
            "type": "image",
            "source": {"type": "base64", "media_type": media_type, "data": data},
        }
    return {"type": "image", "source": {"type": "url", "url": url}}


def _content_blocks(content: Any, name: str | None) -> list[dict[str, Any]]:
    """Anthropic blocks of a message's content (a string, or text and image_url parts)."""
    parts: list[dict[str, Any]] = (
        [{"type": "text", "text": content}] if isinstance(content, str) else content or []
    )
    blocks: list[dict[str, Any]] = []
    for part in parts:
        if part["type"] == "text":
            blocks.append({"type": "text", "text": part["text"]})
        else:
            blocks.append(_image_block(part["image_url"]["url"]))
    if name is not None:
        texts = [b for b in blocks if b["type"] == "text"]
        if texts:
            texts[0]["text"] = f"{name}: {texts[0]['text']}"
        else:
            blocks.insert(0, {"type": "text", "text": f"{name}:"})
    return [b for b in blocks if b["type"] != "text" or b["text"].strip()]


_TOOL_ID_OUTSIDE = re.compile(r"[^a-zA-Z0-9_-]")


def anthropic_tool_id(call_id: str) -> str:
    """A tool call id in the form Anthropic takes, ``^[a-zA-Z0-9_-]+$``.

    An id of that form is kept; another has each character outside it
    replaced by ``_`` and the first 8 hex digits of its sha256 appended, so
    two ids that differ stay apart (``functions.get:0`` and
    ``functions_get_0`` do). A ``tool_use`` and the ``tool_result`` that
    answers it get the same id.

    Examples
    --------
    >>> anthropic_tool_id("call_1")
    'call_1'
    >>> anthropic_tool_id("functions.get_weather:0")
    'functions_get_weather_0_79ac1aaa'
    """
    if _TOOL_ID_OUTSIDE.search(call_id) is None and call_id:
        return call_id
    digest = hashlib.sha256(call_id.encode("utf-8")).hexdigest()[:8]
    return f"{_TOOL_ID_OUTSIDE.sub('_', call_id)}_{digest}"


def _tool_use(call: dict[str, Any], row: int, j: int) -> dict[str, Any]:
    """The ``tool_use`` block of an OpenAI tool call; its arguments must be a JSON object.

    Blank arguments (``""``, which OpenAI-compatible providers send for a
    call without arguments) are the empty object
    (:func:`~cognoxium.packing.message_rules.tool_input`). Anything else that
    is not a JSON object cannot be an Anthropic ``input``: the error names
    the message's index (``row``), the call's id and its function. A pack
    built for Anthropic holds no such call (rule
    ``tool_call_arguments_invalid``).
    """
    function = call["function"]
    try:
        arguments = tool_input(function["arguments"])
    except ValueError as exc:
        raise RecordError(
            f"tool call {call['id']!r} of {function['name']!r}: Anthropic tool_use input must "
            f"be a JSON object, {exc}; pack with target='anthropic' to leave such calls out",
            row=row,
            field=f"tool_calls[{j}].function.arguments",
        ) from None
    tool_id = anthropic_tool_id(call["id"])
    return {"type": "tool_use", "id": tool_id, "name": function["name"], "input": arguments}


def failed_calls(df: pl.DataFrame) -> frozenset[str]:
    """The tool calls whose result items say the tool failed (``metadata.is_error`` true).

    Parameters
    ----------
    df
        Items, ``n`` rows (``role`` and ``metadata`` are read).

    Returns
    -------
    frozenset of str
        The ``metadata.tool_call_id`` of every ``tool`` row whose metadata
        holds ``"is_error": true``.
    """
    flagged = pl.col("metadata").str.contains('"is_error":true', literal=True)
    marked = df.filter((pl.col("role") == "tool") & flagged)
    out: set[str] = set()
    for text in marked.get_column("metadata").to_list():
        metadata = json.loads(text)
        if metadata.get("is_error") is True and isinstance(metadata.get("tool_call_id"), str):
            out.add(metadata["tool_call_id"])
    return frozenset(out)


def anthropic_turn(
    message: dict[str, Any],
    row: int,
    failed: frozenset[str],
    thinking: Sequence[dict[str, str]] = (),
) -> tuple[str, list[dict[str, Any]]]:
    """The Anthropic role and blocks of one non-system OpenAI message (``row``: its index).

    An assistant message starts with its item's ``thinking`` blocks (see
    :data:`~cognoxium.packing._messages.THINKING_KEY`), copied as they are.
    """
    role, content = message["role"], message.get("content")
    if role == "tool":
        result: Any = content if isinstance(content, str) else _content_blocks(content, None)
        tool_id = anthropic_tool_id(message["tool_call_id"])
        block = {"type": "tool_result", "tool_use_id": tool_id, "content": result}
        if message["tool_call_id"] in failed and not blank_result(result):
            block["is_error"] = True  # the API refuses a failed result without content
        return "user", [block]
    blocks = _content_blocks(content, message.get("name"))
    if role == "assistant":
        for block in blocks:  # the API refuses a last assistant turn ending in whitespace
            if block["type"] == "text":  # stripped in every turn: its bytes stay when one follows
                block["text"] = block["text"].rstrip()
        calls = message.get("tool_calls") or ()
        blocks += [_tool_use(call, row, j) for j, call in enumerate(calls)]
        blocks[:0] = [dict(block) for block in thinking]
    return role, blocks


def _thinking_ahead(blocks: list[dict[str, Any]]) -> int:
    """How many blocks at the start of ``blocks`` are thinking blocks."""
    n = 0
    while n < len(blocks) and blocks[n]["type"] in THINKING_TYPES:
        n += 1
    return n


def merge_turn(turn: list[dict[str, Any]], blocks: list[dict[str, Any]]) -> None:
    """Append a message's ``blocks`` to the blocks of the turn of its role before it.

    The thinking blocks ``blocks`` starts with go after those ``turn``
    starts with, before its other blocks, so the merged turn starts with
    every thinking block it holds, as the API takes an assistant turn.
    """
    ahead = _thinking_ahead(blocks)
    at = _thinking_ahead(turn)
    turn[at:at] = blocks[:ahead]
    turn.extend(blocks[ahead:])


def sends_blocks(message: dict[str, Any]) -> bool:
    """Whether an OpenAI message is sent in an Anthropic request's ``messages``.

    A system or developer message goes to ``system``; a user or assistant
    message whose content renders no block (blank text, no image, no name)
    and that makes no tool call is left out.
    """
    role = message["role"]
    if role in SYSTEM_ROLES:
        return False
    if role == "tool" or (role == "assistant" and message.get("tool_calls")):
        return True
    return bool(_content_blocks(message.get("content"), message.get("name")))


def system_text(message: dict[str, Any]) -> str:
    """The text a system or developer message adds to an Anthropic request's ``system``."""
    blocks = _content_blocks(message.get("content"), message.get("name"))
    return "\n".join(b["text"] for b in blocks if b["type"] == "text")


def _opening(placeholder: str | None) -> dict[str, Any]:
    """The user message put first when a request would not start with one."""
    text = placeholder or OPENING
    return {"role": "user", "content": [{"type": "text", "text": text}]}


def anthropic_request(
    messages: Sequence[dict[str, Any]],
    *,
    placeholder: str | None = None,
    failed: frozenset[str] = frozenset(),
    thinking: Mapping[int, Sequence[dict[str, str]]] | None = None,
) -> dict[str, Any]:
    """Render OpenAI chat messages as an Anthropic request (rules: ``ContextPack.to_anthropic``).

    Parameters
    ----------
    messages
        OpenAI Chat Completions messages, as :mod:`cognoxium.packing._messages`
        renders items, ``n`` of them.
    placeholder
        The text of the user message put first when the request would start
        with an assistant message or hold no message (the API needs a user
        message first); ``None`` or ``""``: :data:`OPENING`.
    failed
        The ids of the tool calls whose results say the tool failed
        (:func:`failed_calls`): their ``tool_result`` blocks are sent with
        ``"is_error": true``, unless blank (see
        :func:`~cognoxium.packing.message_rules.blank_result`).
    thinking
        Message index -> the thinking blocks of its item
        (:func:`~cognoxium.packing._messages.sent_thinking`): an assistant
        message sends them first, as they are; ``None``: none.

    Returns
    -------
    dict
        ``{"system": str, "messages": [...]}`` (``system`` only when there
        is a system or developer message); ``messages`` starts with a user
        message, alternates and is never empty.

    Raises
    ------
    RecordError
        If a tool call's arguments are not a JSON object (``row`` the
        message's index, ``field`` ``tool_calls[j].function.arguments``),
        or its id is an earlier call's (``field`` ``tool_calls[j].id``).

    Examples
    --------
    >>> call = {"id": "c1", "type": "function",
    ...         "function": {"name": "weather", "arguments": '{"city":"Paris"}'}}
    >>> request = anthropic_request([
    ...     {"role": "system", "content": "Be brief."},
    ...     {"role": "user", "content": "Weather in Paris?"},
    ...     {"role": "assistant", "content": None, "tool_calls": [call]},
    ...     {"role": "tool", "content": "18 C", "tool_call_id": "c1"}])
    >>> request["system"]
    'Be brief.'
    >>> for message in request["messages"]:
    ...     print(message)
    {'role': 'user', 'content': [{'type': 'text', 'text': 'Weather in Paris?'}]}
    {'role': 'assistant', 'content': [{'type': 'tool_use', 'id': 'c1', 'name': 'weather',
    'input': {'city': 'Paris'}}]}
    {'role': 'user', 'content': [{'type': 'tool_result', 'tool_use_id': 'c1', 'content': '18 C'}]}
    """
    system: list[str] = []
    turns: list[dict[str, Any]] = []
    given: dict[str, int] = {}  # tool_use id -> the message that gives it
    for row, message in enumerate(messages):
        if message["role"] in SYSTEM_ROLES:
            system.append(system_text(message))
            continue
        role, blocks = anthropic_turn(message, row, failed, (thinking or {}).get(row, ()))
        _check_tool_use_ids(message, blocks, row, given)
        if not blocks:
            continue
        if not turns and role == "assistant":
            turns.append(_opening(placeholder))
        if turns and turns[-1]["role"] == role:
            merge_turn(turns[-1]["content"], blocks)
        else:
            turns.append({"role": role, "content": blocks})
    if not turns:
        turns.append(_opening(placeholder))
    request: dict[str, Any] = {"system": "\n\n".join(system)} if system else {}
    request["messages"] = turns
    return request


def _check_tool_use_ids(
    message: dict[str, Any], blocks: list[dict[str, Any]], row: int, given: dict[str, int]
) -> None:
    """Raise :class:`RecordError` if a ``tool_use`` of ``blocks`` reuses an id of ``given``.

    Anthropic takes each ``tool_use`` id once per request. A pack built for
    Anthropic leaves a reused call out (rule ``tool_use_id_duplicate``); one
    built for OpenAI, which takes a reused id, may hold it.
    """
    uses = [block["id"] for block in blocks if block["type"] == "tool_use"]
    for j, use in enumerate(uses):
        if use in given:
            raise RecordError(
                f"tool call id {message['tool_calls'][j]['id']!r} was given by message "
                f"{given[use]} too: Anthropic takes each tool_use id once per request; pack "
                "with target='anthropic' to leave the reused call out",
                row=row,
                field=f"tool_calls[{j}].id",
            )
        given[use] = row


def _text_part(part: dict[str, Any]) -> str:
    """One content part of the transcript: its text, or an ``[image ...]`` line."""
    if part["type"] == "text":
        return str(part["text"])
    url: str = part["image_url"]["url"]
    if url.startswith(_DATA_PREFIX) and ";base64," in url:
        return f"[image {url[len(_DATA_PREFIX) :].split(';', 1)[0]}, base64]"
    return f"[image {url}]"


def _transcript_block(message: dict[str, Any]) -> str:
    """One message of the transcript: header, content, tool calls."""
    role, content = message["role"], message.get("content")
    header = role
    if role == "tool" and "tool_call_id" in message:
        header += f" [{message['tool_call_id']}]"
    if message.get("name") is not None:
        header += f" ({message['name']})"
    lines = [header + ":"]
    if isinstance(content, str):
        lines.append(content)
    elif content:
        lines.extend(_text_part(part) for part in content)
    for call in message.get("tool_calls") or ():
        function = call["function"]
        lines.append(f"-> call {call['id']}: {function['name']}({function['arguments']})")
    return "\n".join(lines)


def text_transcript(messages: Sequence[dict[str, Any]]) -> str:
    """Render OpenAI chat messages as a plain transcript (format: ``ContextPack.to_text``).

    Parameters
    ----------
    messages
        OpenAI Chat Completions messages, as :mod:`cognoxium.packing._messages`
        renders items.

    Returns
    -------
    str
        The transcript; ``""`` for no message.

    Examples
    --------
    >>> call = {"id": "r1", "type": "function",
    ...         "function": {"name": "fx", "arguments": '{"from":"EUR"}'}}
    >>> print(text_transcript([
    ...     {"role": "user", "content": "Convert 20 EUR", "name": "ada"},
    ...     {"role": "assistant", "content": "Checking.", "tool_calls": [call]},
    ...     {"role": "tool", "content": "1.08", "tool_call_id": "r1"}]))
    user (ada):
    Convert 20 EUR
    <BLANKLINE>
    assistant:
    Checking.
    -> call r1: fx({"from":"EUR"})
    <BLANKLINE>
    tool [r1]:
    1.08
    """
    return "\n\n".join(_transcript_block(message) for message in messages)


def mark_cache(
    request: dict[str, Any],
    blocks: Sequence[int],
    *,
    system: bool,
    ttl: str | None = None,
) -> dict[str, Any]:
    """Put Anthropic ``cache_control`` breakpoints on a request made by :func:`anthropic_request`.

    Where they go is decided by
    :func:`~cognoxium.packing._request_prefix.cache_breakpoints`; this
    only writes them.

    Parameters
    ----------
    request
        ``anthropic_request(...)``; changed in place.
    blocks
        The 0-based indexes of the blocks to mark, counted over the content
        blocks of ``request["messages"]`` in order.
    system
        Mark the system prompt (it is then sent as one text block).
    ttl
        ``"1h"`` for the 1-hour cache; ``None``: the default 5-minute cache.

    Returns
    -------
    dict
        ``request``.

    Examples
    --------
    >>> messages = [{"role": "system", "content": "Be brief."},
    ...             {"role": "user", "content": "Hi"}, {"role": "user", "content": "Doc"}]
    >>> marked = mark_cache(anthropic_request(messages), [0], system=True)
    >>> marked["system"]
    [{'type': 'text', 'text': 'Be brief.', 'cache_control': {'type': 'ephemeral'}}]
    >>> marked["messages"][0]["content"]
    [{'type': 'text', 'text': 'Hi', 'cache_control': {'type': 'ephemeral'}},
     {'type': 'text', 'text': 'Doc'}]
    """
    control: dict[str, Any] = {"type": "ephemeral"}
    if ttl is not None:
        control["ttl"] = ttl
    if system and request.get("system"):
        request["system"] = [
            {"type": "text", "text": request["system"], "cache_control": dict(control)}
        ]
    flat = [block for message in request["messages"] for block in message["content"]]
    for at in blocks:
        flat[at]["cache_control"] = dict(control)
    return request
