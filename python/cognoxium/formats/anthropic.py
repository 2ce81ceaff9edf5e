r"""Anthropic Messages as context items, and packed items back as an Anthropic request.

A conversation in the Anthropic Messages format (``system`` apart, then
``user`` and ``assistant`` messages whose content is a string or a list of
blocks) becomes the items that :mod:`cognoxium.formats.openai` gives for the
same conversation in the OpenAI format: same ids, roles, payloads, groups and
metadata. Each message is first mapped to the OpenAI messages it stands for,
then converted as :func:`~cognoxium.formats.openai.openai_messages_to_items`
converts them; errors name the Anthropic message and block.

Mapping
-------
``system``
    A string, or a list of ``text`` blocks (joined with ``"\n"``): one
    ``system`` message, the first (index 0).
``user`` message
    Its ``text`` and ``image`` blocks form one user message (``text`` blocks
    joined with ``"\n"``; an ``image`` block with a ``base64`` source is the
    URL ``data:<media_type>;base64,<data>``, one with a ``url`` source that
    URL, so a message with images becomes grouped text and image items as in
    the OpenAI mapping). An inline image is checked as the OpenAI importer
    checks a ``data:`` URL: base64 data of a PNG, JPEG, GIF or WebP image of
    its ``media_type``, else a ``RecordError`` (code
    ``record.image_invalid``) naming the block's ``source.media_type`` (a
    type the APIs do not take, or bytes of another image type),
    ``source.data`` (not base64, or no image) or ``source.url`` (a
    ``data:`` URL given as a url source). Each ``tool_result`` block
    becomes a ``tool`` message answering its ``tool_use_id``, in block
    order (its content a string or ``text`` blocks joined with ``"\n"``;
    ``is_error: true`` is kept as ``metadata.is_error``, which the Anthropic
    rendering sends back).
``assistant`` message
    One assistant message: its ``text`` blocks joined with ``"\n"``, and one
    tool call per ``tool_use`` block (``id``, ``name``, and ``input`` as
    compact JSON ``arguments``, keys in their order). Its ``thinking`` and
    ``redacted_thinking`` blocks (extended thinking), which must come before
    its other blocks, are kept byte for byte in the item's
    ``metadata.thinking_blocks`` (see
    :data:`~cognoxium.packing._messages.THINKING_KEY`): packed with the
    message and its tool calls, sent first in it by the Anthropic rendering,
    as received, and left out of every other rendering (they are
    Anthropic's, signed). A ``thinking`` block needs a non-empty
    ``signature``, a ``redacted_thinking`` block its ``data``.

Indices count the OpenAI messages: with a system prompt, the first user
message is index 1, and a user message holding two tool results and a text
stands for three messages. ``cache_control`` on a block is accepted and not
kept (it is a caching hint, not content). Other block types (``document``,
``server_tool_use``, ...), thinking blocks in a user message or after
another block, and unknown keys raise.

Examples
--------
>>> cf = from_anthropic_messages([
...     {"role": "user", "content": "Weather in Paris?"},
...     {"role": "assistant", "content": [
...         {"type": "tool_use", "id": "c1", "name": "weather", "input": {"city": "Paris"}}]},
...     {"role": "user", "content": [
...         {"type": "tool_result", "tool_use_id": "c1", "content": "18 C, cloudy"}]},
... ], system="Be brief.", conversation_id="conv")
>>> cf.select("id", "role", "payload_kind", "group_id").to_polars().rows()
[('conv:0', 'system', 'text', None),
 ('conv:1', 'user', 'text', None),
 ('conv:2', 'assistant', 'json', 'conv:tools:2'),
 ('conv:3', 'tool', 'text', 'conv:tools:2')]
>>> to_anthropic_messages(cf)["messages"][1]
{'role': 'assistant', 'content': [{'type': 'tool_use', 'id': 'c1', 'name': 'weather',
'input': {'city': 'Paris'}}]}
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import polars as pl

from cognoxium.exceptions import RecordError
from cognoxium.formats.openai import (
    ImportToolErrors,
    MessageLocation,
    indexed_chat_items,
    to_openai_messages,
)
from cognoxium.frame.frame import CognitionFrame
from cognoxium.items.model import ContextItem, Retention
from cognoxium.packing._messages import THINKING_TYPES, sent_thinking
from cognoxium.packing._renderers import anthropic_request, failed_calls
from cognoxium.packing.message_rules import validate_anthropic_messages
from cognoxium.packing.packer import ContextPack

__all__ = [
    "anthropic_messages_to_items",
    "from_anthropic_messages",
    "to_anthropic_messages",
    "validate_anthropic_messages",
]

_ROLES = ("user", "assistant")
_BLOCK_KEYS: dict[str, frozenset[str]] = {
    "text": frozenset({"type", "text"}),
    "image": frozenset({"type", "source"}),
    "tool_use": frozenset({"type", "id", "name", "input"}),
    "tool_result": frozenset({"type", "tool_use_id", "content", "is_error"}),
    **{kind: frozenset({"type", *keys}) for kind, keys in THINKING_TYPES.items()},
}
_IGNORED = frozenset({"cache_control"})
_BLOCKS_OF = {
    "user": ("text", "image", "tool_result"),
    "assistant": ("text", "tool_use", *THINKING_TYPES),
}


@dataclass(frozen=True)
class _Origin:
    """Where an OpenAI message comes from: the Anthropic message and its fields' paths."""

    index: int | None
    paths: dict[str, str] = field(default_factory=dict)
    is_error: bool = False


@dataclass(frozen=True)
class _AnthropicWhere(MessageLocation):
    """Names the Anthropic message and block of an error raised about an OpenAI message."""

    origins: list[_Origin] = field(default_factory=list)

    def error(
        self,
        index: int,
        field: str | None,
        message: str,
        *,
        code: str | None = None,
        params: Mapping[str, Any] | None = None,
    ) -> RecordError:
        """The error of the block behind OpenAI message ``index``'s ``field``.

        An image's ``data:`` URL stands for a base64 source's ``media_type``
        and ``data``: ``params["part"]`` says which one is at fault.
        """
        origin = self.origins[index]
        part = (params or {}).get("part")
        path = origin.paths.get(f"{field}:{part}") or origin.paths.get(field or "", field)
        return RecordError(
            message, source=self.source, row=origin.index, field=path, code=code, params=params
        )


def _fail(index: int | None, field: str | None, message: str, source: str | None) -> RecordError:
    return RecordError(message, source=source, row=index, field=field)


def _checked_block(block: Any, index: int | None, at: str, source: str | None) -> str:
    """Check a block's shape and keys; return its type."""
    if not isinstance(block, Mapping):
        raise _fail(index, at, f"a content block must be an object, got {block!r}", source)
    kind = block.get("type")
    if kind not in _BLOCK_KEYS:
        raise _fail(
            index,
            f"{at}.type",
            f"unsupported block type {kind!r}; supported: {sorted(_BLOCK_KEYS)}",
            source,
        )
    extra = sorted(set(block) - _BLOCK_KEYS[kind] - _IGNORED)
    if extra:
        raise _fail(index, f"{at}.{extra[0]}", f"unknown key in a {kind} block", source)
    return str(kind)


def _string(value: Any, index: int | None, at: str, source: str | None) -> str:
    if not isinstance(value, str) or not value:
        raise _fail(index, at, f"must be a non-empty string, got {value!r}", source)
    return value


def _text(block: Mapping[str, Any], index: int | None, at: str, source: str | None) -> str:
    text = block.get("text")
    if not isinstance(text, str):
        raise _fail(index, f"{at}.text", f"must be a string, got {text!r}", source)
    return text


def _image_url(block: Mapping[str, Any], index: int, at: str, source: str | None) -> str:
    """The URL of an image block: a data URL for a base64 source, the URL of a url source."""
    src = block.get("source")
    if not isinstance(src, Mapping) or src.get("type") not in ("base64", "url"):
        raise _fail(
            index,
            f"{at}.source",
            f"must be a base64 or url image source, got {src!r}",
            source,
        )
    if src["type"] == "url":
        return _string(src.get("url"), index, f"{at}.source.url", source)
    media_type = _string(src.get("media_type"), index, f"{at}.source.media_type", source)
    data = _string(src.get("data"), index, f"{at}.source.data", source)
    return f"data:{media_type};base64,{data}"


def _result_text(block: Mapping[str, Any], index: int, at: str, source: str | None) -> str:
    """The text of a tool_result block: a string, text blocks joined by newlines, or ``""``."""
    content = block.get("content", "")
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise _fail(index, f"{at}.content", "must be a string or a list of text blocks", source)
    texts = []
    for j, inner in enumerate(content):
        where = f"{at}.content[{j}]"
        if _checked_block(inner, index, where, source) != "text":
            raise _fail(index, f"{where}.type", "a tool result holds text blocks only here", source)
        texts.append(_text(inner, index, where, source))
    return "\n".join(texts)


@dataclass
class _Conversation:
    """The OpenAI messages made so far, each with its origin."""

    source: str | None
    messages: list[dict[str, Any]] = field(default_factory=list)
    origins: list[_Origin] = field(default_factory=list)

    def add(self, message: dict[str, Any], origin: _Origin) -> None:
        self.messages.append(message)
        self.origins.append(origin)

    def system(self, system: Any) -> None:
        if system is None:
            return
        if isinstance(system, str):
            self.add({"role": "system", "content": system}, _Origin(None, {"content": "system"}))
            return
        if not isinstance(system, list):
            raise _fail(None, "system", "must be a string or a list of text blocks", self.source)
        texts = []
        for j, block in enumerate(system):
            if _checked_block(block, None, f"system[{j}]", self.source) != "text":
                raise _fail(None, f"system[{j}].type", "must be a text block", self.source)
            texts.append(_text(block, None, f"system[{j}]", self.source))
        self.add({"role": "system", "content": "\n".join(texts)}, _Origin(None))

    def user(self, index: int, blocks: list[tuple[str, str, Mapping[str, Any]]]) -> None:
        parts: list[dict[str, Any]] = []
        paths: dict[str, str] = {"content": "content"}  # the OpenAI fields' Anthropic paths
        for kind, at, block in blocks:
            if kind == "text":
                parts.append({"type": "text", "text": _text(block, index, at, self.source)})
            elif kind == "image":
                url = _image_url(block, index, at, self.source)
                field = f"content[{len(parts)}].image_url.url"
                if block["source"]["type"] == "url":
                    paths[field] = f"{at}.source.url"
                else:
                    paths[f"{field}:media_type"] = f"{at}.source.media_type"
                    paths[f"{field}:data"] = f"{at}.source.data"
                parts.append({"type": "image_url", "image_url": {"url": url}})
            else:
                self._flush(index, parts, paths)
                parts, paths = [], {"content": "content"}
                is_error = block.get("is_error", False)
                if not isinstance(is_error, bool):
                    raise _fail(index, f"{at}.is_error", "must be a boolean", self.source)
                message = {
                    "role": "tool",
                    "tool_call_id": block.get("tool_use_id"),
                    "content": _result_text(block, index, at, self.source),
                }
                self.add(message, _Origin(index, {"tool_call_id": f"{at}.tool_use_id"}, is_error))
        self._flush(index, parts, paths)

    def _flush(self, index: int, parts: list[dict[str, Any]], paths: dict[str, str]) -> None:
        if parts:
            self.add({"role": "user", "content": parts}, _Origin(index, paths))

    def assistant(self, index: int, blocks: list[tuple[str, str, Mapping[str, Any]]]) -> None:
        texts: list[str] = []
        calls: list[dict[str, Any]] = []
        thinking: list[dict[str, Any]] = []
        paths: dict[str, str] = {"content": "content"}
        for kind, at, block in blocks:
            if kind in THINKING_TYPES:
                if texts or calls:
                    raise _fail(index, f"{at}.type", _THINKING_LATE.format(kind), self.source)
                thinking.append({k: v for k, v in block.items() if k not in _IGNORED})
                continue
            if kind == "text":
                texts.append(_text(block, index, at, self.source))
                continue
            call_id = _string(block.get("id"), index, f"{at}.id", self.source)
            name = _string(block.get("name"), index, f"{at}.name", self.source)
            arguments = block.get("input")
            if not isinstance(arguments, Mapping):
                raise _fail(index, f"{at}.input", "must be a JSON object", self.source)
            paths[f"tool_calls[{len(calls)}].id"] = f"{at}.id"
            encoded = json.dumps(arguments, separators=(",", ":"), ensure_ascii=False)
            calls.append(
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": name, "arguments": encoded},
                }
            )
        text = "\n".join(texts)
        # Thinking blocks lead the content parts (so their paths are the blocks' own).
        content: Any = [*thinking, {"type": "text", "text": text}] if thinking else text
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if calls:
            message["tool_calls"] = calls
        self.add(message, _Origin(index, paths))


_THINKING_LATE = (
    "a {} block after a text or tool_use block; thinking blocks come first in an assistant "
    "message, as the model returned them"
)


def _blocks(message: Any, index: int, source: str | None) -> tuple[str, list[Any]]:
    """Check a message's shape and role; return its role and checked ``(type, path, block)``s."""
    if not isinstance(message, Mapping):
        raise _fail(index, None, f"a message must be an object, got {message!r}", source)
    role = message.get("role")
    if role not in _ROLES:
        raise _fail(index, "role", f"must be one of {list(_ROLES)}, got {role!r}", source)
    extra = sorted(set(message) - {"role", "content"})
    if extra:
        raise _fail(index, extra[0], "not supported here; a message has role and content", source)
    content = message.get("content")
    if isinstance(content, str):
        return role, [("text", "content", {"type": "text", "text": content})]
    if not isinstance(content, list):
        raise _fail(index, "content", "must be a string or a list of content blocks", source)
    checked = []
    for j, block in enumerate(content):
        at = f"content[{j}]"
        kind = _checked_block(block, index, at, source)
        if kind not in _BLOCKS_OF[role]:
            raise _fail(index, f"{at}.type", f"{role} messages have no {kind} block", source)
        checked.append((kind, at, block))
    return role, checked


def anthropic_messages_to_items(
    messages: Iterable[Mapping[str, Any]],
    *,
    system: str | list[Mapping[str, Any]] | None = None,
    conversation_id: str | None = None,
    start: datetime | None = None,
    source: str | None = None,
    system_retention: Retention | str = Retention.REQUIRED,
    tool_errors: ImportToolErrors = "error",
) -> list[ContextItem]:
    """Convert Anthropic Messages to context items, in order (see the module's mapping).

    Parameters
    ----------
    messages
        The request's ``messages``: ``user`` and ``assistant`` messages.
    system
        The request's ``system``: a string or a list of ``text`` blocks.
    conversation_id
        Prefix of item ids and group ids; ``"msg"`` when not given.
    start
        Timezone-aware time of the first message; defaults to
        :data:`~cognoxium.formats.openai.CHAT_EPOCH`.
    source
        Provenance uri recorded in every item's ``sources``, and named in
        errors.
    system_retention
        The retention of the ``system`` item: ``required`` by default, as in
        :func:`~cognoxium.formats.openai.openai_messages_to_items`.
    tool_errors
        ``"error"`` (the default) raises at a ``tool_result`` that breaks
        the rules below; ``"keep"`` imports it as a tool message with no
        group, for the pack to leave out (as in
        :func:`~cognoxium.formats.openai.openai_messages_to_items`).

    Returns
    -------
    list of ContextItem
        The items the OpenAI importer gives for the same conversation.

    Raises
    ------
    RecordError
        At the first malformed message or block: ``row`` is the Anthropic
        message's 0-based index (None for ``system``) and ``field`` the path
        (``content[1].input``, ``content[0].tool_use_id``, ``system[0].text``).
        Raised for an unknown role or block type, a ``tool_use`` whose input
        is not an object, a ``tool_result`` whose call no earlier
        ``tool_use`` made, that an earlier result answered, or that is not
        in the message right after its ``tool_use`` (before any text of
        that message), and one id given to two ``tool_use`` blocks of one
        message. An id that a ``tool_use`` of a later message reuses is
        accepted: that call and its results get a new id, the given one
        kept in ``metadata.original_tool_call_ids`` and
        ``metadata.original_tool_call_id`` (see
        :mod:`cognoxium.formats.openai`), so the request a pack renders
        holds each ``tool_use`` id once. A ``tool_use`` without its
        result is accepted: an agent loop's last call waits for it (a pack
        leaves it out, see ``tool_errors`` in
        :class:`~cognoxium.packing.options.PackOptions`).

    Examples
    --------
    >>> items = anthropic_messages_to_items([{"role": "user", "content": [
    ...     {"type": "text", "text": "What is this?"},
    ...     {"type": "image", "source": {"type": "url", "url": "https://example.org/a.png"}}]}])
    >>> [(i.id, i.payload.kind, i.group_id) for i in items]
    [('msg:0.0', 'text', 'msg:parts:0'), ('msg:0.1', 'reference', 'msg:parts:0')]
    >>> anthropic_messages_to_items([{"role": "user", "content": [
    ...     {"type": "tool_result", "tool_use_id": "nobody", "content": "42"}]}])
    Traceback (most recent call last):
    ...
    cognoxium.exceptions.RecordError: row 0: field content[0].tool_use_id: tool result for ...
    """
    conversation = _Conversation(source)
    conversation.system(system)
    for index, message in enumerate(messages):
        role, blocks = _blocks(message, index, source)
        if role == "user":
            if not blocks:
                raise _fail(index, "content", "a user message needs at least one block", source)
            conversation.user(index, blocks)
        else:
            conversation.assistant(index, blocks)
    where = _AnthropicWhere(source, origins=conversation.origins)
    pairs = indexed_chat_items(
        conversation.messages, where, conversation_id, start, system_retention, tool_errors
    )
    return [
        item.model_copy(update={"metadata": {**item.metadata, "is_error": True}})
        if conversation.origins[index].is_error
        else item
        for index, item in pairs
    ]


def from_anthropic_messages(
    messages: Iterable[Mapping[str, Any]],
    *,
    system: str | list[Mapping[str, Any]] | None = None,
    conversation_id: str | None = None,
    start: datetime | None = None,
    source: str | None = None,
    system_retention: Retention | str = Retention.REQUIRED,
    tool_errors: ImportToolErrors = "error",
) -> CognitionFrame:
    """Build a frame from Anthropic Messages; all or nothing.

    The conversion of :func:`anthropic_messages_to_items` (see it for the
    parameters and errors), as a :class:`CognitionFrame` in message order.

    Returns
    -------
    CognitionFrame
        One row per item.

    Raises
    ------
    RecordError
        At the first malformed message or block, naming its index and path.
    """
    items = anthropic_messages_to_items(
        messages,
        system=system,
        conversation_id=conversation_id,
        start=start,
        source=source,
        system_retention=system_retention,
        tool_errors=tool_errors,
    )
    return CognitionFrame.from_items(items)


def to_anthropic_messages(
    data: ContextPack | CognitionFrame | pl.DataFrame, *, placeholder: str | None = None
) -> dict[str, Any]:
    """Render items as an Anthropic Messages request, ``{"system", "messages"}``.

    Parameters
    ----------
    data
        A :class:`~cognoxium.packing.packer.ContextPack` (then this is
        ``pack.to_anthropic()``), a :class:`CognitionFrame` (run first) or a
        Polars frame with the item columns.
    placeholder
        The text of the user message put first when the items would start
        with an assistant turn or send no message; ``None``: ``"(earlier
        messages omitted)"``.

    Returns
    -------
    dict
        The request, by the rules of
        :meth:`ContextPack.to_anthropic <cognoxium.packing.packer.ContextPack.to_anthropic>`
        (system apart, ``tool_use`` and ``tool_result`` blocks, consecutive
        same-role messages merged); no ``system`` key without a system or
        developer item.

    Raises
    ------
    RecordError, SchemaError
        As :func:`~cognoxium.formats.openai.to_openai_messages` raises them,
        and if a tool call's arguments are not a JSON object (a pack built
        with ``target="anthropic"`` holds no such call).
    """
    if isinstance(data, ContextPack):
        return data.to_anthropic(placeholder=placeholder)
    frame = data.collect() if isinstance(data, CognitionFrame) else data
    messages = to_openai_messages(frame)
    failed, thinking = failed_calls(frame), sent_thinking(frame)
    return anthropic_request(messages, placeholder=placeholder, failed=failed, thinking=thinking)
