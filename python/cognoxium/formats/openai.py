r"""OpenAI chat messages as context items, and packed items back as chat messages.

A conversation in the OpenAI Chat Completions format (a list of
``{"role", "content", ...}`` messages) becomes one :class:`ContextItem` per
message; a pack of items becomes a list of messages again, ready for
``client.chat.completions.create(messages=...)``.

Mapping to items
----------------
id
    ``"<conversation_id>:<index>"``, ``index`` the message's 0-based
    position; ``"msg:<index>"`` without a conversation id.
role
    The message role: ``system``, ``developer``, ``user``, ``assistant`` or
    ``tool``. Any other role raises.
payload
    A Text payload with the message text. ``content`` may be a string or a
    list of content parts: ``{"type": "text", "text": ...}`` parts, joined
    with ``"\n"``, and in a user message ``{"type": "image_url",
    "image_url": {"url": ..., "detail": ...}}`` parts. A user message with
    image parts becomes one item per segment (a run of text parts, or one
    image), ids ``"<conversation_id>:<index>.<k>"`` (``k`` from 0), all in
    group ``"<conversation_id>:parts:<index>"`` so they are packed together,
    each with ``metadata.message_part`` ``k`` so the renderers send them as
    one message again (its parts in order, its framing counted once);
    an image is a Reference payload whose ``uri`` is the part's URL, its
    ``detail`` (when given) in ``metadata.detail`` and its
    ``metadata.media_type`` ``"image/*"`` for a URL of another scheme
    (``https:``, kept as it is and not fetched), so it is sent as an image
    (see :mod:`cognoxium.items.images`). A ``data:`` URL (an inline image)
    must be base64 data of a PNG, JPEG, GIF or WebP image of the type it
    declares, the images both OpenAI and Anthropic take
    (:func:`~cognoxium.items.images.check_image_data_url`), else it is a
    :class:`~cognoxium.exceptions.RecordError` (code
    ``record.image_invalid``) naming the message and the part
    (``content[1].image_url.url``); its media type is the item's
    ``metadata.media_type``. An assistant message with tool calls
    and no text (``content`` null, absent, ``""`` or no parts) gets a Json
    payload ``{"tool_calls": [...]}`` instead, so the calls are what is
    packed and costed.
created_at
    ``start`` plus ``index`` microseconds. ``start`` defaults to
    :data:`CHAT_EPOCH` (the Unix epoch, 1970-01-01T00:00:00Z), so ids and
    times are the same on every run; give the conversation's real start
    time when it is known.
group_id
    ``"<conversation_id>:tools:<index>"`` on an assistant message with tool
    calls (``index`` its own), and the same on every tool result answering
    one of its calls, so packing keeps or drops a call and all of its
    results (parallel calls included) together.
metadata
    ``{"tool_call_ids": [...]}`` on an assistant message with tool calls,
    plus ``{"tool_calls": [...]}`` when it also has text;
    ``{"tool_call_id": ...}`` on a tool result; for a call id reused from
    an earlier assistant message, the new id there and the given one in
    ``original_tool_call_ids`` (on the call, parallel to ``tool_call_ids``)
    and ``original_tool_call_id`` (on its results), see below;
    ``{"name": ...}`` when the
    message has a ``name``; ``{"message_part": k}`` on each part of a user
    message with images; ``{"thinking_blocks": [...]}`` on an assistant
    message whose content parts start with Anthropic ``thinking`` or
    ``redacted_thinking`` blocks (LangChain's converter leaves them there):
    they are kept byte for byte, only an Anthropic request sends them back
    (see :data:`~cognoxium.packing._messages.THINKING_KEY`); a thinking
    block after another part, or without its ``signature`` (``data``),
    raises.
sources
    ``[{"uri": source, "kind": "openai_messages"}]`` when ``source`` is given.
retention
    ``required`` on ``system`` and ``developer`` messages (``system_retention``,
    so under budget pressure the instructions stay and the rest gives way;
    pass ``system_retention="optional"`` for the item default), ``optional``
    on every other message.
trust, sensitivity, priority
    The item defaults (untrusted, internal, 0): whether the system prompt is
    trusted is the application's assertion, not the converter's. Set them on
    the frame, for example with ``with_columns``.

Tool calls are checked against the rules of the chat APIs (see
:mod:`cognoxium.packing.message_rules`): every call needs an ``id`` that
no other call of its message has (else a result could not say which call
it answers: this raises whatever ``tool_errors`` is), ``type``
``"function"`` and ``function`` ``{"name": str, "arguments": str}``
(``arguments`` is kept verbatim, even when it is not valid JSON, as models
produce it: Chat Completions takes it back as it is, and a pack built for
Anthropic, whose ``tool_use`` input must be an object, leaves out a call
whose arguments are not a JSON object with its results, rule
``tool_call_arguments_invalid``); a tool result must answer a call of the assistant message right
before its run of tool messages (no other message between them, rule
``tool_result_orphan``) that no earlier result answered (rule
``tool_result_duplicate``); ``tool_errors="keep"`` imports a result that
breaks them as a tool message of its own, with no group, for the pack to
leave out. A declared call *without* a result is allowed:
logs of agent loops end with a call whose result is not back yet. Its group
then holds the call and whichever results exist; the APIs reject such a call
(rule ``tool_call_unanswered``), so a pack leaves it out with its partial
results (``tool_errors="repair"``, the default) or raises
(``tool_errors="error"``); append the missing results to send it.

A call may reuse the id of a call of an earlier assistant message (some
providers and local model servers number each turn's calls from
``call_0``): Chat Completions takes it, each run of tool messages
answering the assistant message right before it, but the items pair a call
with its results by id within the conversation, and Anthropic takes each
``tool_use`` id once in a request. Such a call, and the results that answer
it, get a new id: the first of ``<id>-2``, ``<id>-3``, ... that no earlier
call or result of the conversation has (so the same messages always get the
same ids, a message appended later changes no earlier id, and an id of
Anthropic's form ``^[a-zA-Z0-9_-]+$`` keeps it); the
given id is kept in :data:`ORIGINAL_CALL_IDS_KEY` and
:data:`ORIGINAL_CALL_ID_KEY`. This is no fault under either
``tool_errors``: a result after that message's run is out of place for the
latest call with its id, one more result right after it a duplicate of
that call's answer.

Keys that SDK response objects carry with empty values (``refusal``,
``audio``, ``function_call``, ``annotations``: null or empty) are accepted and
dropped; any other key, or those keys with a value, raises.

Examples
--------
>>> cf = from_openai_messages([
...     {"role": "user", "content": "Weather in Paris?"},
...     {"role": "assistant", "content": None, "tool_calls": [
...         {"id": "c1", "type": "function",
...          "function": {"name": "weather", "arguments": '{"city":"Paris"}'}}]},
...     {"role": "tool", "tool_call_id": "c1", "content": "18 C, cloudy"},
... ], conversation_id="conv")
>>> cf.select("id", "role", "payload_kind", "group_id").to_polars().rows()
[('conv:0', 'user', 'text', None),
 ('conv:1', 'assistant', 'json', 'conv:tools:1'),
 ('conv:2', 'tool', 'text', 'conv:tools:1')]
>>> [m["role"] for m in to_openai_messages(cf)]
['user', 'assistant', 'tool']
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from itertools import accumulate, chain, pairwise, repeat
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import polars as pl
from pydantic import ValidationError

from cognoxium.exceptions import CognoxiumError, RecordError, SchemaError
from cognoxium.frame.frame import CognitionFrame
from cognoxium.items._checks import TIME_RANGE_MESSAGE, id_problem, text_problem
from cognoxium.items.hashing import digests_in_background
from cognoxium.items.images import (
    ANY_IMAGE,
    check_image_data_url,
    image_media_type_expr,
    is_data_url,
)
from cognoxium.items.io import parse_json_lines
from cognoxium.items.model import (
    UNDATED,
    ContextItem,
    Json,
    Reference,
    Retention,
    Role,
    Source,
    Text,
    canonical_json_list,
    canonical_objects,
)
from cognoxium.items.schema import POLARS_SCHEMA
from cognoxium.items.validation import complete_valid_columns, conform
from cognoxium.packing._messages import (
    PART_KEY,
    THINKING_KEY,
    THINKING_TYPES,
    chat_columns,
    check_tool_results,
    thinking_block,
)
from cognoxium.packing.message_rules import validate_openai_messages
from cognoxium.packing.packer import ContextPack

if TYPE_CHECKING:
    from polars.lazyframe.in_process import InProcessQuery

__all__ = [
    "CHAT_EPOCH",
    "IMAGE_DETAILS",
    "IMPORT_TOOL_ERRORS",
    "MESSAGE_ROLES",
    "ORIGINAL_CALL_IDS_KEY",
    "ORIGINAL_CALL_ID_KEY",
    "ChatColumns",
    "from_openai_messages",
    "openai_messages_to_items",
    "read_openai_conversations",
    "read_openai_jsonl",
    "to_openai_messages",
    "validate_openai_messages",
]

CHAT_EPOCH = UNDATED
"""The default ``start`` of a conversation: the Unix epoch, 1970-01-01T00:00:00Z (UTC).

A fixed instant, so items converted twice get the same ``created_at``. It is
:data:`cognoxium.items.UNDATED`, the ``created_at`` of any item that gives none."""

IMAGE_DETAILS: tuple[str, ...] = ("auto", "low", "high")
"""The ``detail`` values of an ``image_url`` part."""

MESSAGE_ROLES: tuple[str, ...] = ("system", "developer", "user", "assistant", "tool")
"""The OpenAI chat roles :func:`openai_messages_to_items` accepts."""

ImportToolErrors = Literal["error", "keep"]
IMPORT_TOOL_ERRORS: tuple[ImportToolErrors, ...] = ("error", "keep")
"""What the chat importers do with a tool result that breaks the chat APIs' rules.

``"error"`` raises :class:`~cognoxium.exceptions.RecordError` at it;
``"keep"`` imports it as a tool message of its own (no group), which a pack
leaves out (``tool_errors="repair"``, reason ``tool_result_orphan`` or
``tool_result_duplicate``) or refuses (``tool_errors="error"``).

A duplicate result is a second result for one call. A call id that a later
assistant message reuses is none: that call gets a new id and imports with
either value (see :mod:`cognoxium.formats.openai`); one id given to two
calls of one message raises with either value."""

ORIGINAL_CALL_IDS_KEY = "original_tool_call_ids"
"""The metadata key of an assistant item's call ids as the conversation gave them.

Written only when one of them was reused from an earlier assistant message
and the item's ``tool_call_ids`` (and calls) hold a new id for it; the two
lists are parallel."""

ORIGINAL_CALL_ID_KEY = "original_tool_call_id"
"""The metadata key of a tool item's ``tool_call_id`` as the conversation gave it.

Written only when the call it answers was given a new id (see
:data:`ORIGINAL_CALL_IDS_KEY`); the item's ``tool_call_id`` is the new one."""

_KEYS: dict[str, frozenset[str]] = {
    "system": frozenset({"role", "content", "name"}),
    "developer": frozenset({"role", "content", "name"}),
    "user": frozenset({"role", "content", "name"}),
    "assistant": frozenset({"role", "content", "name", "tool_calls"}),
    "tool": frozenset({"role", "content", "name", "tool_call_id"}),
}
_INSTRUCTION_ROLES = frozenset({Role.SYSTEM, Role.DEVELOPER})
_PLAIN_KEYS = frozenset({"role", "content", "name"})
_PLAIN_ROLES = frozenset({"system", "developer", "user", "assistant"})
"""The roles whose messages with text content map to one Text item and nothing else."""
_EMPTY_OK = frozenset({"refusal", "audio", "function_call", "annotations"})
_SOURCE_KIND = "openai_messages"


@dataclass(frozen=True)
class MessageLocation:
    """Where chat messages come from, to name in errors: a list (row = index) or a file's lines.

    Shared by the chat importers of :mod:`cognoxium.formats`. ``export`` marks
    a chat export of conversations, the file ``cognoxium pack --conversations``
    reads, so that an error may name the command's option too.
    """

    source: str | None
    lines: Sequence[int] | None = None
    export: bool = False

    def error(
        self,
        index: int,
        field: str | None,
        message: str,
        *,
        code: str | None = None,
        params: Mapping[str, Any] | None = None,
    ) -> RecordError:
        """The error of message ``index``'s ``field``, with ``code`` and ``params`` if given."""
        if self.lines is None:
            return RecordError(
                message, source=self.source, row=index, field=field, code=code, params=params
            )
        return RecordError(
            f"{message} (message {index})",
            source=self.source,
            line=self.lines[index],
            field=field,
            code=code,
            params=params,
        )


@dataclass(frozen=True)
class _Image:
    """An ``image_url`` content part: its URL, ``detail`` (if given) and image media type.

    The media type is the one of a checked ``data:`` URL, else
    :data:`~cognoxium.items.images.ANY_IMAGE`.
    """

    url: str
    detail: str | None
    media_type: str


def _image_of(part: Mapping[str, Any], index: int, at: str, where: MessageLocation) -> _Image:
    """Check an ``image_url`` part, ``{"type": "image_url", "image_url": {"url", "detail"}}``."""
    extra = sorted(set(part) - {"type", "image_url"})
    if extra:
        raise where.error(index, f"{at}.{extra[0]}", "unknown key in an image_url part")
    image = part.get("image_url")
    if not isinstance(image, Mapping):
        raise where.error(
            index, f"{at}.image_url", f"must be an object {{url, detail}}, got {image!r}"
        )
    extra = sorted(set(image) - {"url", "detail"})
    if extra:
        raise where.error(index, f"{at}.image_url.{extra[0]}", "unknown key in an image_url")
    url, detail = image.get("url"), image.get("detail")
    if not isinstance(url, str) or not url:
        raise where.error(index, f"{at}.image_url.url", f"must be a non-empty string, got {url!r}")
    if detail is not None and detail not in IMAGE_DETAILS:
        raise where.error(
            index, f"{at}.image_url.detail", f"must be one of {list(IMAGE_DETAILS)}, got {detail!r}"
        )
    if not is_data_url(url):
        return _Image(url, detail, ANY_IMAGE)
    try:
        url, media_type = check_image_data_url(url)
    except RecordError as error:
        raise where.error(
            index, f"{at}.image_url.url", error.message, code=error.code, params=error.params
        ) from None
    return _Image(url, detail, media_type)


def _thinking_of(content: Any, index: int, where: MessageLocation) -> list[dict[str, str]]:
    """The thinking parts an assistant message's content starts with, checked.

    A thinking part after another part raises: the blocks are sent back
    first in the message, so they must have come first.
    """
    if not isinstance(content, list):
        return []
    blocks: list[dict[str, str]] = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, Mapping) else None
        if kind not in THINKING_TYPES:
            break
        try:
            blocks.append(thinking_block(part))
        except RecordError as error:
            raise where.error(index, f"content[{j}].{error.field}", error.message) from None
    for j, part in enumerate(content[len(blocks) :], start=len(blocks)):
        if isinstance(part, Mapping) and part.get("type") in THINKING_TYPES:
            raise where.error(
                index,
                f"content[{j}].type",
                f"a {part['type']} part after another part; thinking blocks come first in an "
                "assistant message, as the model returned them",
            )
    return blocks


def _segments_of(
    content: Any, index: int, where: MessageLocation, *, images: bool, skip: int = 0
) -> list[str | _Image] | None:
    """The message content as text and image segments, None when absent.

    Consecutive text parts are joined with newlines into one segment; each
    image part is a segment of its own (only when ``images`` is allowed).
    The first ``skip`` parts (an assistant message's thinking parts) are passed over.
    """
    if content is None or isinstance(content, str):
        return None if content is None else [content]
    if not isinstance(content, list):
        raise where.error(
            index,
            "content",
            f"must be a string or a list of content parts, got {type(content).__name__}",
        )
    segments: list[str | _Image] = []
    texts: list[str] = []
    for j, part in enumerate(content[skip:], start=skip):
        at = f"content[{j}]"
        if not isinstance(part, Mapping):
            raise where.error(index, at, f"a content part must be an object, got {part!r}")
        kind = part.get("type")
        if kind == "image_url" and images:
            if texts:
                segments.append("\n".join(texts))
                texts = []
            segments.append(_image_of(part, index, at, where))
            continue
        if kind != "text":
            raise where.error(index, f"{at}.type", _part_refused(kind, images))
        extra = sorted(set(part) - {"type", "text"})
        if extra:
            raise where.error(index, f"{at}.{extra[0]}", "unknown key in a text part")
        text = part.get("text")
        if not isinstance(text, str):
            raise where.error(index, f"{at}.text", f"must be a string, got {text!r}")
        texts.append(text)
    if texts or not segments:
        segments.append("\n".join(texts))
    return segments


def _text_of(content: Any, index: int, where: MessageLocation) -> str | None:
    """The message text: a string, text parts joined by newlines, or None when absent."""
    segments = _segments_of(content, index, where, images=False)
    return None if segments is None else str(segments[0])


def _tool_calls(value: Any, index: int, where: MessageLocation) -> list[dict[str, Any]]:
    """Validate an assistant message's ``tool_calls`` and return them normalised."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise where.error(index, "tool_calls", f"must be a list, got {type(value).__name__}")
    calls = []
    seen: set[str] = set()
    for j, call in enumerate(value):
        at = f"tool_calls[{j}]"
        if not isinstance(call, Mapping):
            raise where.error(index, at, f"a tool call must be an object, got {call!r}")
        extra = sorted(set(call) - {"id", "type", "function"})
        if extra:
            raise where.error(index, f"{at}.{extra[0]}", "unknown key in a tool call")
        call_id = call.get("id")
        if not isinstance(call_id, str) or not call_id.strip():
            raise where.error(index, f"{at}.id", f"must be a non-blank string, got {call_id!r}")
        if call_id in seen:
            raise where.error(
                index,
                f"{at}.id",
                f"tool call id {call_id!r} appears twice in this message's tool_calls, so a "
                "result could not tell which call it answers; give each call its own id",
            )
        seen.add(call_id)
        if call.get("type") != "function":
            raise where.error(
                index,
                f"{at}.type",
                f"only 'function' tool calls are supported, got {call.get('type')!r}",
            )
        function = call.get("function")
        if not isinstance(function, Mapping):
            raise where.error(index, f"{at}.function", "must be an object {name, arguments}")
        extra = sorted(set(function) - {"name", "arguments"})
        if extra:
            raise where.error(index, f"{at}.function.{extra[0]}", "unknown key in a function")
        name, arguments = function.get("name"), function.get("arguments")
        if not isinstance(name, str) or not name:
            raise where.error(
                index, f"{at}.function.name", f"must be a non-empty string, got {name!r}"
            )
        if not isinstance(arguments, str):
            raise where.error(
                index,
                f"{at}.function.arguments",
                f"must be a string (the JSON-encoded arguments), got {type(arguments).__name__}",
            )
        calls.append(
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
        )
    return calls


@dataclass
class _CallLedger:
    """A conversation's tool calls so far: the group declaring each, the result answering it.

    A call is known by its id in the items (``metadata.tool_call_ids``):
    the id the conversation gives it, or a new one when an earlier
    assistant message already made a call with that id (see
    :meth:`declare`). ``latest`` maps an id the conversation gives to the
    item id of the latest call made with it; ``waiting`` does the same for
    the calls whose results may come next (those of the last assistant
    message, while only tool messages have followed it); ``closed_by`` is
    the message that ended that run (its index and role).
    """

    group_of: dict[str, str] = field(default_factory=dict)  # item call id -> group id
    made_at: dict[str, int] = field(default_factory=dict)  # item call id -> index of its message
    answered: dict[str, int] = field(default_factory=dict)  # item call id -> index of its result
    latest: dict[str, str] = field(default_factory=dict)  # given call id -> item call id
    waiting: dict[str, str] = field(default_factory=dict)  # given call id -> item call id
    taken: set[str] = field(default_factory=set)  # every call id read so far, and made
    closed_by: tuple[int, str] | None = None
    keep: bool = False  # tool_errors="keep": a result that breaks a rule is kept, ungrouped

    def close(self, index: int, role: str) -> None:
        """Message ``index`` of ``role`` is not a result: no earlier call is answered after it."""
        if self.waiting:
            self.waiting, self.closed_by = {}, (index, role)

    def declare(self, given: list[str], index: int, group_id: str) -> list[str]:
        """Record the calls of assistant message ``index``, given ids ``given``; their item ids.

        A call keeps its id unless an earlier call of the conversation has
        it, given or made (a provider that numbers each turn's calls from
        ``call_0``); then its item id is the first of ``<id>-2``,
        ``<id>-3``, ... that no earlier message uses and no earlier call
        was given, so it pairs only with the results that answer it, and
        stays of the form Anthropic takes when the given id is. Only earlier
        messages decide it: a message appended later never changes the id
        of a call before it (a later call given a made id is renamed in
        turn), so an earlier request is sent again byte for byte.
        """
        ids = []
        for call_id in given:
            item_id = call_id
            if call_id in self.latest or call_id in self.made_at:
                item_id = self._new_id(call_id)
            self.taken.update((call_id, item_id))
            self.latest[call_id] = item_id
            self.group_of[item_id], self.made_at[item_id] = group_id, index
            ids.append(item_id)
        self.waiting, self.closed_by = dict(zip(given, ids, strict=True)), (index, "assistant")
        return ids

    def item_id(self, call_id: str) -> str:
        """The item id of the call a result with ``tool_call_id`` ``call_id`` answers.

        That of the last assistant message's call with that id when there
        is one, else of the latest call with it, else (no call was given
        it: an orphan) ``call_id`` itself, or a new id like a reused call's
        when ``call_id`` is the id made for an earlier call, which the
        result does not answer.
        """
        item_id = self.waiting.get(call_id) or self.latest.get(call_id)
        if item_id is None:
            item_id = call_id if call_id not in self.made_at else self._new_id(call_id)
        self.taken.update((call_id, item_id))
        return item_id

    def _new_id(self, call_id: str) -> str:
        """The first of ``<id>-2``, ``<id>-3``, ... that no id read or made so far is."""
        k = 2
        while f"{call_id}-{k}" in self.taken:
            k += 1
        return f"{call_id}-{k}"


def _checked_start(conversation_id: Any, start: Any, where: MessageLocation) -> datetime:
    """Check ``conversation_id`` and ``start``; return the start time (``CHAT_EPOCH`` if None)."""
    if conversation_id is not None and (
        not isinstance(conversation_id, str) or not conversation_id.strip()
    ):
        raise RecordError(
            f"must be a non-blank string, got {conversation_id!r}",
            source=where.source,
            field="conversation_id",
        )
    if start is None:
        return CHAT_EPOCH
    if not isinstance(start, datetime) or start.tzinfo is None:
        raise RecordError(
            f"must be a timezone-aware datetime, got {start!r}",
            source=where.source,
            field="start",
        )
    return start


def _part_refused(kind: object, images: bool) -> str:
    """Why a content part of type ``kind`` is refused, and what to do instead."""
    if kind == "image_url":
        return "an image part is sent in a user message only, not in this one"
    if kind in THINKING_TYPES:
        return (
            f"a {kind!r} part is Anthropic's signed reasoning, kept only at the start of an "
            "assistant message"
        )
    if kind == "reasoning":
        return (
            "a 'reasoning' part holds the model's reasoning, which is not packed as message "
            "content; leave it out of the content (keep its text parts)"
        )
    allowed = "text and image_url parts" if images else "text parts"
    return (
        f"only {allowed} are supported here, got {kind!r}; convert audio and files to text "
        "or to document items first"
    )


def _message_role(message: Any, index: int, where: MessageLocation) -> Role:
    """Check a message's shape, role, keys and name; return its role."""
    if not isinstance(message, Mapping):
        raise where.error(index, None, f"a message must be an object, got {message!r}")
    role = message.get("role")
    if not isinstance(role, str) or role not in _KEYS:
        raise where.error(index, "role", f"must be one of {list(MESSAGE_ROLES)}, got {role!r}")
    for key in sorted(set(message) - _KEYS[role]):
        value = message[key]
        if key in _EMPTY_OK and (value is None or value == []):
            continue
        article = "an" if role == "assistant" else "a"
        known = f"; {article} {role} message has {sorted(_KEYS[role])}"
        raise where.error(index, key, f"not supported here{known}")
    name = message.get("name")
    if name is not None and (not isinstance(name, str) or not name):
        raise where.error(index, "name", f"must be a non-empty string, got {name!r}")
    return Role(role)


def _assistant_payload(
    message: Mapping[str, Any],
    index: int,
    where: MessageLocation,
    text: str | None,
    group_id: str,
    ledger: _CallLedger,
    metadata: dict[str, Any],
) -> tuple[str, Any, str | None]:
    """An assistant message's payload and group id; declares its tool calls in ``ledger``."""
    calls = _tool_calls(message.get("tool_calls"), index, where)
    if calls:
        given = [c["id"] for c in calls]
        ids = ledger.declare(given, index, group_id)
        for call, item_id in zip(calls, ids, strict=True):
            call["id"] = item_id
        metadata["tool_call_ids"] = ids
        if ids != given:
            metadata[ORIGINAL_CALL_IDS_KEY] = given
    else:
        ledger.close(index, "assistant")
    if calls and not text:
        return "json", {"tool_calls": calls}, group_id
    if text is None:
        raise where.error(index, "content", "an assistant message needs content or tool_calls")
    if calls:
        metadata["tool_calls"] = calls
    return "text", text, group_id if calls else None


def _tool_result_group(
    message: Mapping[str, Any], index: int, where: MessageLocation, ledger: _CallLedger
) -> tuple[str, str, str | None]:
    """Check a tool result's ``tool_call_id``; return it, its call's item id and group id.

    A result that breaks a rule raises, or with ``ledger.keep`` has no group.
    """
    call_id = message.get("tool_call_id")
    if not isinstance(call_id, str) or not call_id.strip():
        raise where.error(index, "tool_call_id", f"must be a non-blank string, got {call_id!r}")
    item_id = ledger.item_id(call_id)
    fault = _result_fault(call_id, item_id, ledger)
    if fault is None:
        ledger.answered[item_id] = index
        return call_id, item_id, ledger.group_of[item_id]
    if ledger.keep:
        return call_id, item_id, None
    command = " (cognoxium pack --conversations: --tool-errors repair)" if where.export else ""
    keep = f"; or import with tool_errors='keep'{command} for the pack to leave it out"
    raise where.error(index, "tool_call_id", fault + keep)


def _result_fault(call_id: str, item_id: str, ledger: _CallLedger) -> str | None:
    """The rule a result for ``call_id`` (its call's ``item_id``) breaks here, worded; or None."""
    if call_id not in ledger.latest:
        return (
            f"tool result for call {call_id!r}, which no earlier assistant message "
            "declared in its tool_calls (rule tool_result_orphan); put the assistant "
            "message with that call right before its result"
        )
    if item_id in ledger.answered:
        return (
            f"call {call_id!r} of message {ledger.made_at[item_id]} was already answered by "
            f"message {ledger.answered[item_id]} "
            "(rule tool_result_duplicate: a tool call is answered once)"
        )
    if call_id not in ledger.waiting:
        made = ledger.made_at[item_id]
        after, role = ledger.closed_by or (made, "assistant")
        return (
            f"tool result for call {call_id!r} of message {made} comes after message "
            f"{after} ({role}); the chat APIs take a call's results only right after the "
            "assistant message that makes it (rule tool_result_orphan): move the result up, "
            "or the other message after it"
        )
    return None


_Part = tuple[str, Role | str, str, Any, str | None, dict[str, Any]]
"""One item of a message: id, role, payload kind, payload value (the text, the JSON
value or the reference's uri), group id, metadata."""


def _user_parts(
    segments: list[str | _Image], index: int, prefix: str, metadata: dict[str, Any]
) -> list[_Part]:
    """The items of a user message with image parts: one per segment, in one group."""
    group_id = f"{prefix}:parts:{index}"
    parts: list[_Part] = []
    for k, segment in enumerate(segments):
        item_id = f"{prefix}:{index}.{k}"
        part_meta = {**metadata, PART_KEY: k}
        if isinstance(segment, str):
            parts.append((item_id, Role.USER, "text", segment, group_id, part_meta))
            continue
        image_meta = {**part_meta, "media_type": segment.media_type}
        if segment.detail is not None:
            image_meta["detail"] = segment.detail
        parts.append((item_id, Role.USER, "reference", segment.url, group_id, image_meta))
    return parts


def _message_content(
    message: Any, index: int, where: MessageLocation, prefix: str, ledger: _CallLedger
) -> list[_Part]:
    """Check one message; return its items (one, or one per part for a user message with images)."""
    role = _message_role(message, index, where)
    if role not in ("assistant", "tool"):
        ledger.close(index, role.value)
    name = message.get("name")
    item_id = f"{prefix}:{index}"
    content = message.get("content")
    thinking = _thinking_of(content, index, where) if role == "assistant" else []
    segments = _segments_of(content, index, where, images=role == "user", skip=len(thinking))
    metadata: dict[str, Any] = {} if name is None else {"name": name}
    if thinking:
        metadata[THINKING_KEY] = thinking
    if segments is not None and any(isinstance(s, _Image) for s in segments):
        return _user_parts(segments, index, prefix, metadata)
    text = None if segments is None else str(segments[0])
    if role == "assistant":
        group = f"{prefix}:tools:{index}"
        kind, value, group_id = _assistant_payload(
            message, index, where, text, group, ledger, metadata
        )
        return [(item_id, role, kind, value, group_id, metadata)]
    if text is None:
        raise where.error(index, "content", f"a {role} message needs content")
    group_id = None
    if role == "tool":
        call_id, answers, group_id = _tool_result_group(message, index, where, ledger)
        metadata["tool_call_id"] = answers
        if answers != call_id:
            metadata[ORIGINAL_CALL_ID_KEY] = call_id
    return [(item_id, role, "text", text, group_id, metadata)]


def _checked_retention(value: Any, where: MessageLocation) -> Retention:
    """Check ``system_retention``: one of the retention tiers."""
    try:
        return Retention(value)
    except ValueError:
        raise RecordError(
            f"must be one of {[r.value for r in Retention]}, got {value!r}",
            source=where.source,
            field="system_retention",
        ) from None


def _ledger(tool_errors: Any, where: MessageLocation) -> _CallLedger:
    """A new ledger for ``tool_errors`` (one of :data:`IMPORT_TOOL_ERRORS`)."""
    if tool_errors not in IMPORT_TOOL_ERRORS:
        raise RecordError(
            f"must be one of {list(IMPORT_TOOL_ERRORS)}, got {tool_errors!r}",
            source=where.source,
            field="tool_errors",
        )
    return _CallLedger(keep=tool_errors == "keep")


def _convert(
    messages: Iterable[Any],
    where: MessageLocation,
    conversation_id: str | None,
    start: datetime | None,
    system_retention: Retention | str = Retention.REQUIRED,
    tool_errors: ImportToolErrors = "error",
) -> list[ContextItem]:
    pairs = indexed_chat_items(
        messages, where, conversation_id, start, system_retention, tool_errors
    )
    return [item for _, item in pairs]


def _chat_frame(
    messages: Iterable[Any],
    where: MessageLocation,
    conversation_id: str | None,
    start: datetime | None,
    system_retention: Retention | str,
    tool_errors: ImportToolErrors = "error",
) -> CognitionFrame:
    columns = ChatColumns(
        where, conversation_id, start, system_retention, tool_errors=tool_errors
    ).add_all(messages)
    return CognitionFrame.from_conformed(columns.frame())


def _payload_model(kind: str, value: Any) -> Text | Json | Reference:
    if kind == "text":
        return Text(text=value)
    if kind == "json":
        return Json(value=value)
    return Reference(uri=value)


def _part_item(
    index: int,
    part: _Part,
    first: datetime,
    sources: tuple[Source, ...],
    instructions: Retention,
    where: MessageLocation,
) -> ContextItem:
    """One part as a validated item, the error worded for its message when it is not valid."""
    item_id, role, kind, value, group_id, metadata = part
    try:
        created_at = first + timedelta(microseconds=index)
    except OverflowError:
        raise where.error(index, "created_at", TIME_RANGE_MESSAGE) from None
    try:
        return ContextItem(
            id=item_id,
            role=Role(role),
            payload=_payload_model(kind, value),
            sources=sources,
            created_at=created_at,
            group_id=group_id,
            metadata=metadata,
            retention=instructions if role in _INSTRUCTION_ROLES else Retention.OPTIONAL,
        )
    except ValidationError as exc:
        error = exc.errors()[0]
        raise where.error(
            index, ".".join(str(p) for p in error["loc"]) or None, error["msg"]
        ) from None


def indexed_chat_items(
    messages: Iterable[Any],
    where: MessageLocation,
    conversation_id: str | None,
    start: datetime | None,
    system_retention: Retention | str = Retention.REQUIRED,
    tool_errors: ImportToolErrors = "error",
) -> list[tuple[int, ContextItem]]:
    """The items of ``messages``, each with the 0-based index of its message.

    ``system`` and ``developer`` items take ``system_retention``; the others
    are optional; tool results that break a rule raise or are kept
    (``tool_errors``). One validated item per part: :class:`ChatColumns`
    builds the same items as columns.
    """
    first = _checked_start(conversation_id, start, where)
    instructions = _checked_retention(system_retention, where)
    prefix = conversation_id or "msg"
    sources = (Source(uri=where.source, kind=_SOURCE_KIND),) if where.source else ()
    ledger = _ledger(tool_errors, where)
    return [
        (index, _part_item(index, part, first, sources, instructions, where))
        for index, message in enumerate(messages)
        for part in _message_content(message, index, where, prefix, ledger)
    ]


class ChatColumns:
    """Chat messages checked one by one and laid out as item columns, validated in bulk.

    Each message is checked as :func:`openai_messages_to_items` checks it
    (roles, keys, content parts, tool calls against earlier calls); its
    items go to column lists, and :meth:`frame` validates them all at once:
    the values are built from checked parts, so the longest id, the start
    and the source are checked for them all, and only when one fails does
    :func:`cognoxium.items.validation.conform` check every row to name it.
    A list of plain text messages (``role`` system, developer, user or
    assistant, text ``content``, an optional ``name``) is laid out a column
    at a time. Only an item that fails is built as a
    :class:`ContextItem`, to word its error as the item model does.

    Parameters
    ----------
    where
        Where the messages come from, named in errors.
    conversation_id, start, system_retention, tool_errors
        As in :func:`openai_messages_to_items`.
    source_kind
        The ``kind`` of the provenance source recorded when ``where.source`` is set.
    background_digests
        Whether :meth:`add_plain` starts hashing the payloads on Polars'
        threads, for :meth:`frame`; ``False`` for columns framed together
        with other conversations', whose payloads are hashed all at once.

    Raises
    ------
    RecordError
        When built, for a bad ``conversation_id``, ``start``,
        ``system_retention`` or ``tool_errors``.
    """

    def __init__(
        self,
        where: MessageLocation,
        conversation_id: str | None,
        start: datetime | None,
        system_retention: Retention | str = Retention.REQUIRED,
        source_kind: str = _SOURCE_KIND,
        *,
        tool_errors: ImportToolErrors = "error",
        background_digests: bool = True,
    ) -> None:
        self.where = where
        self.first = _checked_start(conversation_id, start, where)
        self.instructions = _checked_retention(system_retention, where)
        self.prefix = conversation_id or "msg"
        self.source_kind = source_kind
        self.ledger = _ledger(tool_errors, where)
        self.plain = False  # laid out by add_plain: ids and constant columns made by Polars
        self.index: list[int] = []
        self.ids: list[str] = []
        self.roles: list[str] = []
        self.kinds: list[str] = []
        self.values: list[Any] = []
        self.groups: list[str | None] = []
        self.metadata: list[dict[str, Any]] = []
        self.text: pl.Series | None = None  # the text column of plain messages
        self.digests: InProcessQuery | None = None  # their content digests, being computed
        self.background_digests = background_digests

    def add(self, index: int, message: Any) -> None:
        """Check message ``index`` and append its items; ``RecordError`` if it is malformed.

        A call that reuses an earlier call's id gets a new id (see
        :data:`ORIGINAL_CALL_IDS_KEY`) that avoids the ids of the messages
        added so far; :meth:`add_all` makes it avoid those of all its
        messages, as a conversation's ids must.
        """
        for item_id, role, kind, value, group_id, metadata in _message_content(
            message, index, self.where, self.prefix, self.ledger
        ):
            self.index.append(index)
            self.ids.append(item_id)
            self.roles.append(str(role))
            self.kinds.append(kind)
            self.values.append(value)
            self.groups.append(group_id)
            self.metadata.append(metadata)

    def add_plain(self, roles: list[Any], texts: list[Any], names: list[Any]) -> bool:
        """Lay out plain text messages a column at a time; false (nothing added) otherwise.

        Plain: every role ``system``, ``developer``, ``user`` or
        ``assistant``, every content text, every name ``None`` or non-empty
        text. Such a message is one Text item, as :meth:`add` would make it.

        Parameters
        ----------
        roles, texts, names
            The messages' ``role``, ``content`` and ``name``, ``n`` each.

        Returns
        -------
        bool
            Whether the messages were plain and added (only into empty columns).
        """
        if self.index or set(map(type, roles)) != {str}:
            return False
        named = set(map(type, names)) != {type(None)}
        if not set(roles) <= _PLAIN_ROLES:
            return False
        if named and not all(n is None or (type(n) is str and n) for n in names):
            return False
        try:
            self.text = pl.Series("text", texts, pl.String, strict=True)
        except TypeError:  # content parts, or content that is not text
            return False
        except UnicodeError:  # a lone surrogate: frame() names its message
            if set(map(type, texts)) != {str}:
                return False
            self.text = None
        if self.text is not None and self.text.null_count():
            return False
        n = len(texts)
        self.plain = True
        self.index = list(range(n))
        self.roles = roles
        self.kinds = ["text"] * n
        self.values = texts
        self.groups = [None] * n
        self.metadata = [{} if m is None else {"name": m} for m in names] if named else [{}] * n
        if self.text is not None and self.background_digests:  # hashed while the rest is laid out
            binary = pl.repeat(None, n, dtype=pl.Binary, eager=True).alias("binary")
            self.digests = digests_in_background([*_payloads([self]), binary])
        return True

    def add_all(self, messages: Iterable[Any]) -> ChatColumns:
        """Add every message in order; at a malformed one, raise the first error of the run.

        An item of an earlier message that is not valid (text that is not
        valid Unicode, say) is reported before the malformed message, as
        item by item conversion would.
        """
        rows = list(messages)
        if set(map(type, rows)) == {dict} and all(map(_PLAIN_KEYS.issuperset, rows)):
            fields = (list(map(dict.get, rows, repeat(key))) for key in ("role", "content", "name"))
            if self.add_plain(*fields):
                return self
        try:
            for index, message in enumerate(rows):
                self.add(index, message)
        except RecordError:
            self.frame()
            raise
        return self

    def _sources(self) -> pl.Expr:
        """The ``sources`` of every item: the one provenance source, or none."""
        entries = (
            [{"uri": self.where.source, "kind": self.source_kind}] if self.where.source else []
        )
        return pl.lit(entries, POLARS_SCHEMA["sources"]).alias("sources")

    def _item_id(self, row: int) -> str:
        return f"{self.prefix}:{self.index[row]}" if self.plain else self.ids[row]

    def _item_error(self, row: int) -> RecordError | None:
        """The error of item ``row`` as item by item conversion words it, or ``None``."""
        sources = (
            (Source(uri=self.where.source, kind=self.source_kind),) if self.where.source else ()
        )
        part = (
            self._item_id(row),
            self.roles[row],
            self.kinds[row],
            self.values[row],
            self.groups[row],
            self.metadata[row],
        )
        try:
            _part_item(self.index[row], part, self.first, sources, self.instructions, self.where)
        except RecordError as exc:
            return exc
        return None

    def frame(self, extra: tuple[str, list[Any]] | None = None) -> pl.DataFrame:
        """The items as a validated frame of the item schema, in message order.

        The metadata the converter writes (names, tool call ids and calls,
        image media types) is canonical JSON by construction and only checked
        for valid Unicode. The other columns are valid by construction once
        the longest id, the start and the source are checked; where one of
        those fails, every column is checked by :func:`conform`, to name the
        row.

        Parameters
        ----------
        extra
            A key and one value per item to add to the items' metadata, after
            the items are validated with their message's own; a value that
            is not a non-empty text (``None``, ``""``) is left out.

        Returns
        -------
        polars.DataFrame
            One row per item, with :data:`cognoxium.items.schema.POLARS_SCHEMA`.

        Raises
        ------
        RecordError
            At the first item that is not valid, worded as
            :func:`openai_messages_to_items` words it.
        """
        if not self.index:
            return _empty_frame()
        try:
            texts = _metadata_texts([self], extra)
            if self._valid_by_construction():
                return _valid_frame([self], texts)
            return conform(_columns([self]), source=self.where.source).with_columns(texts)
        except RecordError as exc:
            row = exc.row
            error = None if row is None else self._item_error(row)
            if error is not None or row is None:
                raise error or exc from None
            raise self.where.error(self.index[row], exc.field, exc.message) from None
        except (UnicodeError, ValueError, TypeError, pl.exceptions.PolarsError):
            # A value Arrow cannot hold (a lone surrogate): find its item.
            raise self._first_error(_merged(self.metadata, extra)) from None

    def _valid_by_construction(self) -> bool:
        """Whether the columns hold only valid values, checked once rather than per row.

        Ids and group ids are the prefix and indexes (``msg:4``, ``msg:4.1``,
        ``msg:tools:4``), so the longest of each is checked for them all;
        roles, payload kinds, retention and sources are the same few values,
        the JSON payloads are tool calls of a fixed shape in canonical form,
        and times run on from a checked start. Text that is not valid
        Unicode cannot become a column at all.
        """
        last = self.index[-1]
        source = self.where.source
        try:
            self.first + timedelta(microseconds=last)
        except OverflowError:
            return False
        ids = [f"{self.prefix}:{last}"] if self.plain else self.ids
        groups = [group for group in self.groups if group is not None]
        longest = [max(values, key=len) for values in (ids, groups) if values]
        return all(id_problem(value) is None for value in longest) and (
            source is None or text_problem(source) is None
        )

    def _first_error(self, metadata: list[dict[str, Any]]) -> RecordError:
        """The first item's error, else the first metadata that is not valid Unicode."""
        for row in range(len(self.index)):
            error = self._item_error(row)
            if error is not None:
                return error
        for row, text in enumerate(canonical_json_list(metadata)):
            problem = text_problem(text)
            if problem is not None:
                return self.where.error(self.index[row], "metadata", problem)
        raise AssertionError("no value of the columns fails")  # pragma: no cover


def _frame_of_many(
    parts: Sequence[ChatColumns], extra: tuple[str, list[Any]] | None = None
) -> pl.DataFrame:
    """The items of several conversations as one validated frame: their frames concatenated.

    Built at once when every conversation is valid by construction and they
    share their start, retention and source (the values are then those
    each :meth:`ChatColumns.frame` builds, computed in one query each);
    otherwise, or when a value fails, each conversation is framed alone, so
    the first failing one raises its own error.

    Parameters
    ----------
    parts
        The conversations' columns, in order.
    extra
        A metadata key and one value per item of all the parts, in order,
        as :meth:`ChatColumns.frame` takes them.

    Returns
    -------
    polars.DataFrame
        One row per item, the parts in order, with :data:`POLARS_SCHEMA`.

    Raises
    ------
    RecordError
        At the first item that is not valid, as :meth:`ChatColumns.frame`
        words it for its conversation.
    """
    parts = [part for part in parts if part.index]
    settings = {(p.first, p.instructions, p.where.source, p.source_kind) for p in parts}
    if len(settings) == 1 and all(part._valid_by_construction() for part in parts):
        try:
            return _valid_frame(parts, _metadata_texts(parts, extra))
        except (CognoxiumError, UnicodeError, ValueError, TypeError, pl.exceptions.PolarsError):
            pass  # the conversation that holds the failing value words its error below
    frames = [part.frame(own) for part, own in zip(parts, _split(extra, parts), strict=True)]
    return pl.concat(frames) if frames else _empty_frame()


def _empty_frame() -> pl.DataFrame:
    """No items, with :data:`POLARS_SCHEMA`."""
    return conform(pl.DataFrame(schema={"role": pl.String, "text": pl.String}))


def _split(
    extra: tuple[str, list[Any]] | None, parts: Sequence[ChatColumns]
) -> list[tuple[str, list[Any]] | None]:
    """Each part's share of ``extra``'s values (``None`` for every part without ``extra``)."""
    if extra is None:
        return [None] * len(parts)
    key, values = extra
    bounds = pairwise(accumulate((len(part.index) for part in parts), initial=0))
    return [(key, values[start:end]) for start, end in bounds]


def _chained(lists: Iterable[list[Any]]) -> list[Any]:
    """The lists' values in one list, in order; the list itself when there is one."""
    lists = list(lists)
    return lists[0] if len(lists) == 1 else list(chain.from_iterable(lists))


def _valid_frame(parts: Sequence[ChatColumns], texts: pl.Series) -> pl.DataFrame:
    """The parts' items, every value valid by construction, with their metadata ``texts``."""
    columns = _columns(parts)  # while the digests of plain messages are computed
    queries = [part.digests for part in parts if part.digests is not None]
    digests = None
    if len(queries) == len(parts):
        digests = pl.concat([query.fetch_blocking().to_series() for query in queries])
    return complete_valid_columns(columns, digests).with_columns(texts)


def _plain_payloads(parts: Sequence[ChatColumns]) -> list[pl.Series]:
    """The payload columns of plain messages: their text, the text column laid out if any."""
    n = sum(len(part.values) for part in parts)
    laid = [part.text for part in parts if part.text is not None]
    text = (
        pl.concat(laid)
        if len(laid) == len(parts)
        else pl.Series("text", _chained(part.values for part in parts), pl.String)
    )
    nulls = pl.repeat(None, n, dtype=pl.String, eager=True)
    return [
        pl.repeat("text", n, dtype=pl.String, eager=True).alias("payload_kind"),
        text,
        nulls.alias("json"),
        nulls.alias("ref_uri"),
    ]


def _payloads(parts: Sequence[ChatColumns]) -> list[pl.Series]:
    """The ``payload_kind``, ``text``, ``json`` and ``ref_uri`` columns of the parts' items."""
    if all(part.plain for part in parts):
        return _plain_payloads(parts)
    kinds = _chained(part.kinds for part in parts)
    values = _chained(part.values for part in parts)
    n = len(values)
    texts: list[Any] = values
    payloads: list[str | None] = [None] * n
    uris: list[str | None] = [None] * n
    if any(kind != "text" for kind in kinds):
        texts = [v if k == "text" else None for k, v in zip(kinds, values, strict=True)]
        uris = [v if k == "reference" else None for k, v in zip(kinds, values, strict=True)]
        rows = [i for i, k in enumerate(kinds) if k == "json"]
        for i, text in zip(rows, canonical_json_list([values[i] for i in rows]), strict=True):
            payloads[i] = text
    return [
        pl.Series("payload_kind", kinds, pl.String),
        pl.Series("text", texts, pl.String),
        pl.Series("json", payloads, pl.String),
        pl.Series("ref_uri", uris, pl.String),
    ]


def _ids(parts: Sequence[ChatColumns], index: pl.Series) -> pl.Series:
    """Each item's id: the one laid out, or ``<prefix>:<index>`` for plain messages."""
    if not any(part.plain for part in parts):
        return pl.Series("id", _chained(part.ids for part in parts), pl.String)
    counts = [len(part.index) for part in parts]
    prefixes = pl.Series([part.prefix for part in parts], dtype=pl.String)
    prefixes = prefixes.gather(np.repeat(np.arange(len(parts)), counts))
    made = (prefixes + ":" + index.cast(pl.String)).alias("id")
    if all(part.plain for part in parts):
        return made
    laid = _chained([None] * len(part.index) if part.plain else part.ids for part in parts)
    return pl.Series("id", laid, pl.String).fill_null(made)


def _columns(parts: Sequence[ChatColumns]) -> pl.DataFrame:
    """Every item column but ``metadata``, for :func:`conform` to check.

    The parts share their start, retention and source: the first's are taken.
    """
    first = parts[0]
    plain = all(part.plain for part in parts)
    offset = (first.first - CHAT_EPOCH) // timedelta(microseconds=1)
    n = sum(len(part.index) for part in parts)
    index = (
        pl.int_range(n, dtype=pl.Int64, eager=True)
        if plain and len(parts) == 1
        else pl.Series(_chained(part.index for part in parts), dtype=pl.Int64)
    )
    created = (index + offset).alias("created_at")
    roles = _chained(part.roles for part in parts)
    role = pl.Series("role", roles, POLARS_SCHEMA["role"] if plain else pl.String)
    instruction = role.is_in([r.value for r in _INSTRUCTION_ROLES])
    retention_dtype = POLARS_SCHEMA["retention"]
    retention = pl.select(
        pl.when(instruction)
        .then(pl.lit(first.instructions.value, retention_dtype))
        .otherwise(pl.lit("optional", retention_dtype))
    ).to_series()
    groups = (
        pl.repeat(None, n, dtype=pl.String, eager=True)
        if plain
        else pl.Series("group_id", _chained(part.groups for part in parts), pl.String)
    )
    return pl.DataFrame(
        [
            _ids(parts, index),
            role,
            *_payloads(parts),
            retention.alias("retention"),
            created.cast(pl.Datetime("us", "UTC")),
            groups.alias("group_id"),
        ]
    ).with_columns(first._sources())


def _merged(
    metadata: list[dict[str, Any]], extra: tuple[str, list[Any]] | None
) -> list[dict[str, Any]]:
    """Each item's metadata with the ``extra`` key added where it has a value."""
    if extra is None:
        return metadata
    key, values = extra
    return [
        {**m, key: v} if isinstance(v, str) and v else m
        for m, v in zip(metadata, values, strict=True)
    ]


def _metadata_texts(parts: Sequence[ChatColumns], extra: tuple[str, list[Any]] | None) -> pl.Series:
    """Canonical JSON of each item's metadata; one key of text values written as columns."""
    metadata = _chained(part.metadata for part in parts)
    if extra is not None and not any(metadata):
        key, values = extra
        try:
            column = pl.Series("metadata", values, pl.String, strict=True)
        except TypeError:  # a value that is neither text nor None
            pass
        else:
            return canonical_objects(key, column.replace("", None))
    return pl.Series("metadata", canonical_json_list(_merged(metadata, extra)), pl.String)


def openai_messages_to_items(
    messages: Iterable[Mapping[str, Any]],
    *,
    conversation_id: str | None = None,
    start: datetime | None = None,
    source: str | None = None,
    system_retention: Retention | str = Retention.REQUIRED,
    tool_errors: ImportToolErrors = "error",
) -> list[ContextItem]:
    """Convert OpenAI chat messages to context items, one per message, in order.

    See the module docstring for the mapping of every field.

    Parameters
    ----------
    messages
        Chat Completions messages (``system``, ``developer``, ``user``,
        ``assistant``, ``tool``).
    conversation_id
        Prefix of item ids and group ids; ``"msg"`` when not given. Give
        distinct ids to conversations that share a frame.
    start
        Timezone-aware time of the first message; message ``i`` is created
        at ``start + i`` microseconds. Defaults to :data:`CHAT_EPOCH`.
    source
        Provenance uri recorded in every item's ``sources``, and named in
        errors.
    system_retention
        The retention of ``system`` and ``developer`` messages: ``required``
        by default, so packing never drops the instructions (it raises
        :class:`~cognoxium.exceptions.BudgetError` instead when they alone
        exceed the budget); ``"optional"`` gives them the item default, as
        every other message has.
    tool_errors
        A tool result that breaks the rules below (an orphan, a duplicate
        result of one call, a result after another message than its
        call's): ``"error"`` (the default) raises; ``"keep"`` imports it as
        a tool message with no group, so the history imports whole and a
        pack leaves the result out (``tool_errors="repair"``, the pack's
        default; reasons ``tool_result_orphan``, ``tool_result_duplicate``),
        and its call too when nothing else answers it
        (``tool_call_unanswered``). A call id reused by a later assistant
        message is no fault: the call and its results get a new id (see
        the module) with either value.

    Returns
    -------
    list of ContextItem
        One item per message, in message order.

    Raises
    ------
    RecordError
        At the first malformed message: ``row`` is its 0-based index and
        ``field`` the offending key (``role``, ``content[1].type``,
        ``tool_calls[0].function.arguments``, ``tool_call_id``, ...). Raised
        for an unknown role, a tool result whose ``tool_call_id`` no earlier
        assistant message declared, that an earlier result answered, or
        that comes after another message than its call's assistant message
        and results (the error names the rule), one call id given to two
        calls of one message (``field`` ``tool_calls[<k>].id``, the
        second), a naive
        ``start``, an empty ``conversation_id`` and a ``system_retention``
        that is not a retention tier. Code ``record.image_invalid`` for an
        image part whose ``data:`` URL (field ``content[1].image_url.url``)
        is not base64 data of a PNG, JPEG, GIF or WebP image of its declared
        type (see :func:`~cognoxium.items.images.check_image_data_url`).

    Examples
    --------
    >>> items = openai_messages_to_items(
    ...     [{"role": "system", "content": "Be brief."},
    ...      {"role": "user", "name": "ada", "content": [{"type": "text", "text": "Hi"}]}],
    ...     conversation_id="c7")
    >>> [(i.id, i.role.value, i.payload.text, i.metadata) for i in items]
    [('c7:0', 'system', 'Be brief.', {}), ('c7:1', 'user', 'Hi', {'name': 'ada'})]
    >>> [i.retention.value for i in items]
    ['required', 'optional']
    >>> items[1].created_at.isoformat()
    '1970-01-01T00:00:00.000001+00:00'
    >>> openai_messages_to_items([{"role": "tool", "tool_call_id": "x", "content": "42"}])
    Traceback (most recent call last):
    ...
    cognoxium.exceptions.RecordError: row 0: field tool_call_id: tool result for call 'x', ...
    """
    where = MessageLocation(source)
    return _convert(messages, where, conversation_id, start, system_retention, tool_errors)


def from_openai_messages(
    messages: Iterable[Mapping[str, Any]],
    *,
    conversation_id: str | None = None,
    start: datetime | None = None,
    source: str | None = None,
    system_retention: Retention | str = Retention.REQUIRED,
    tool_errors: ImportToolErrors = "error",
) -> CognitionFrame:
    """Build a frame from OpenAI chat messages; all or nothing.

    The same conversion as :func:`openai_messages_to_items` (see it for the
    parameters and errors), laid out as a :class:`CognitionFrame` in message
    order.

    Returns
    -------
    CognitionFrame
        One row per message.

    Raises
    ------
    RecordError
        At the first malformed message, naming its 0-based index (``row``)
        and field.

    Examples
    --------
    >>> from datetime import UTC
    >>> cf = from_openai_messages([{"role": "user", "content": "Hi"}], conversation_id="c1",
    ...                           start=datetime(2024, 5, 1, tzinfo=UTC))
    >>> cf.select("id", "created_at").to_polars().row(0)
    ('c1:0', datetime.datetime(2024, 5, 1, 0, 0, tzinfo=zoneinfo.ZoneInfo(key='UTC')))
    """
    where = MessageLocation(source)
    return _chat_frame(messages, where, conversation_id, start, system_retention, tool_errors)


def read_openai_jsonl(
    path: str | os.PathLike[str],
    *,
    conversation_id: str | None = None,
    start: datetime | None = None,
    system_retention: Retention | str = Retention.REQUIRED,
    tool_errors: ImportToolErrors = "error",
) -> CognitionFrame:
    r"""Read a JSONL file of OpenAI chat messages (one per line) as a frame; all or nothing.

    Blank lines are skipped; message indices (and so ids) count the
    messages, not the lines. Every item's ``sources`` holds the path as
    given. See :func:`openai_messages_to_items` for the mapping.

    Parameters
    ----------
    path
        The file, UTF-8.
    conversation_id
        Prefix of item ids and group ids; ``"msg"`` when not given.
    start
        Timezone-aware time of the first message; defaults to :data:`CHAT_EPOCH`.
    system_retention
        The retention of ``system`` and ``developer`` messages (``required``
        by default; ``"optional"`` for the item default).
    tool_errors
        ``"error"`` (the default) or ``"keep"``: a tool result that breaks
        the chat APIs' rules raises, or is kept for the pack to leave out
        (see :func:`openai_messages_to_items`).

    Returns
    -------
    CognitionFrame
        One row per message, in file order.

    Raises
    ------
    RecordError
        At the first bad line: not UTF-8, invalid JSON or a malformed
        message. ``source`` is the path, ``line`` the 1-based line number and
        ``field`` the offending key; nothing is returned.

    Examples
    --------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     path = Path(tmp, "chat.jsonl")
    ...     _ = path.write_text('{"role": "user", "content": "Hi"}\n\n'
    ...                         '{"role": "robot", "content": "Hello"}\n')
    ...     read_openai_jsonl(path)
    Traceback (most recent call last):
    ...
    cognoxium.exceptions.RecordError: .../chat.jsonl:3: field role: must be one of [...],
    got 'robot' (message 1)
    """
    name = str(path)
    lines = parse_json_lines(Path(path))
    if lines and isinstance(lines[0][1], dict) and "messages" in lines[0][1]:
        raise RecordError(
            "a line holds 'messages': this reads one message per line; read a file of one "
            "conversation per line with read_openai_conversations",
            source=name,
            line=lines[0][0],
            field="messages",
        )
    where = MessageLocation(name, [number for number, _ in lines])
    messages = (message for _, message in lines)
    return _chat_frame(messages, where, conversation_id, start, system_retention, tool_errors)


CONVERSATION_KEY = "conversation"
"""The metadata key :func:`read_openai_conversations` writes each item's conversation id under."""


def read_openai_conversations(
    path: str | os.PathLike[str],
    *,
    id_field: str = "conversation_id",
    start: datetime | None = None,
    system_retention: Retention | str = Retention.REQUIRED,
    tool_errors: ImportToolErrors = "error",
) -> CognitionFrame:
    r"""Read a JSONL file of OpenAI chat conversations, one per line, as one frame; all or nothing.

    Each line is a JSON object holding the conversation's id under
    ``id_field`` and its OpenAI chat messages under ``messages``, the form
    of chat logs and fine-tuning files: ``{"conversation_id": "c1",
    "messages": [{"role": "user", "content": "Hi"}, ...]}``. Each
    conversation's messages become items as :func:`read_openai_jsonl`
    makes them, their ids prefixed by the conversation id (``c1:0``,
    ``c1:1``, ...) and their ``metadata.conversation`` the conversation id,
    so that a batch request with ``where: "metadata.conversation = 'c1'"``
    packs that conversation (and the batch serves it from a split of the
    store by that key).

    Parameters
    ----------
    path
        The file, UTF-8; blank lines are skipped.
    id_field
        The key of each line that holds the conversation's id (non-blank
        text, unique in the file).
    start, system_retention, tool_errors
        As in :func:`read_openai_jsonl`, for every conversation.

    Returns
    -------
    CognitionFrame
        One row per message (or message part), conversations in file order.

    Raises
    ------
    RecordError
        At the first bad line: not UTF-8, invalid JSON, not an object, an id
        missing, not text, not valid as the start of an item id (blank, a
        control character, longer than an id) or given twice, ``messages``
        not a list, another key (nothing a line holds is dropped), or a
        malformed message.
        ``source`` is the path, ``line`` the 1-based line number and
        ``field`` the offending key; nothing is returned.

    Notes
    -----
    Each conversation's messages are checked one by one as it is read;
    the items of many conversations (about 65,536 at a time) are then
    laid out and validated as one frame, and a batch holding an item that
    is not valid is framed again one conversation at a time, so that the
    error is the one that conversation alone gives.

    Examples
    --------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     path = Path(tmp, "chats.jsonl")
    ...     _ = path.write_text(
    ...         '{"conversation_id": "c1", "messages": [{"role": "user", "content": "Hi"}]}\n'
    ...         '{"conversation_id": "c2", "messages": [{"role": "user", "content": "Yo"}, '
    ...         '{"role": "assistant", "content": "Hello"}]}\n')
    ...     frame = read_openai_conversations(path)
    >>> frame.select("id", "metadata").to_polars().rows()  # doctest: +NORMALIZE_WHITESPACE
    [('c1:0', '{"conversation":"c1"}'), ('c2:0', '{"conversation":"c2"}'),
     ('c2:1', '{"conversation":"c2"}')]
    """
    name = str(path)
    lines = parse_json_lines(Path(path))
    if not lines:
        empty = ChatColumns(MessageLocation(name), None, start).frame()
        return CognitionFrame.from_conformed(empty)
    batch = _Batch()
    frames: list[pl.DataFrame] = []
    first_line: dict[str, int] = {}
    try:
        for line, record in lines:
            conversation, messages = _conversation_line(record, name, line, id_field, first_line)
            where = MessageLocation(name, [line] * len(messages), export=True)
            columns = ChatColumns(
                where,
                conversation,
                start,
                system_retention,
                tool_errors=tool_errors,
                background_digests=False,
            )
            batch.add(conversation, columns.add_all(messages))
            if len(batch.tags) >= _BATCH_ITEMS:
                frames.append(batch.frame())
                batch = _Batch()
    except RecordError:
        batch.frame()  # an error of an earlier conversation's items is raised first
        raise
    df = pl.concat([*frames, batch.frame()])
    repeated = df.filter(pl.col("id").is_duplicated()).get_column("id")
    if len(repeated):
        raise RecordError(
            f"two conversations give the item id {repeated[0]!r}: give ids that are not "
            "another conversation's id followed by ':tools' or a message number",
            source=name,
            field=id_field,
        )
    return CognitionFrame.from_conformed(df)


_BATCH_ITEMS = 65_536
"""How many items (whole conversations) :func:`read_openai_conversations` frames at once."""


@dataclass
class _Batch:
    """Conversations checked and laid out as columns, not yet framed; each item's conversation."""

    parts: list[ChatColumns] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)

    def add(self, conversation: str, columns: ChatColumns) -> None:
        self.parts.append(columns)
        self.tags.extend(repeat(conversation, len(columns.index)))

    def frame(self) -> pl.DataFrame:
        """The items, each tagged with its conversation; ``RecordError`` at the first bad one."""
        return _frame_of_many(self.parts, (CONVERSATION_KEY, self.tags))


def _conversation_line(
    record: Any, source: str, line: int, id_field: str, first_line: dict[str, int]
) -> tuple[str, list[Any]]:
    """The id and messages of one line of :func:`read_openai_conversations`, checked."""
    if not isinstance(record, dict):
        raise RecordError(
            f"a line is a JSON object with {id_field!r} and 'messages'", source=source, line=line
        )
    extra = sorted(set(record) - {id_field, "messages"})
    if extra:
        raise RecordError(
            f"unknown key {extra[0]!r}: a line holds {id_field!r} and 'messages' only "
            "(nothing else would be kept)",
            source=source,
            line=line,
            field=extra[0],
        )
    conversation = record.get(id_field)
    if not isinstance(conversation, str) or not conversation.strip():
        raise RecordError(
            f"expected the conversation's id as non-blank text, got {conversation!r}"
            if id_field in record
            else f"missing: each line holds the conversation's id under {id_field!r}",
            source=source,
            line=line,
            field=id_field,
        )
    problem = id_problem(conversation)
    if problem is not None:
        raise RecordError(
            f"the conversation's id {problem}: it begins its messages' item ids",
            source=source,
            line=line,
            field=id_field,
        )
    if conversation in first_line:
        raise RecordError(
            f"duplicate conversation id {conversation!r} "
            f"(first on line {first_line[conversation]})",
            source=source,
            line=line,
            field=id_field,
        )
    first_line[conversation] = line
    messages = record.get("messages")
    if not isinstance(messages, list):
        raise RecordError(
            f"expected a list of messages, got {type(messages).__name__}"
            if "messages" in record
            else "missing: each line holds the conversation's messages under 'messages'",
            source=source,
            line=line,
            field="messages",
        )
    return conversation, messages


def _frame_of(data: ContextPack | CognitionFrame | pl.DataFrame) -> pl.DataFrame:
    if isinstance(data, ContextPack):
        return data.frame
    if isinstance(data, CognitionFrame):
        return data.collect()
    if isinstance(data, pl.DataFrame):
        return data
    raise SchemaError(
        f"to_openai_messages takes a ContextPack, a CognitionFrame or a Polars frame of items, "
        f"got {type(data).__name__}"
    )


_NEEDED = ("id", "role", "payload_kind", "text", "json", "ref_uri", "ref_title", "metadata")


def to_openai_messages(
    data: ContextPack | CognitionFrame | pl.DataFrame,
) -> list[dict[str, Any]]:
    """Render items as OpenAI chat messages, in row order (the inverse of the conversion).

    Parameters
    ----------
    data
        A :class:`~cognoxium.packing.packer.ContextPack` (its messages, as its
        policies rendered them), a :class:`CognitionFrame` (run first) or a
        Polars frame with the item columns.

    Returns
    -------
    list of dict
        One message per item, except that the parts of one user message
        (``metadata.message_part``), in part order one after another, are one
        message whose ``content`` lists their text and ``image_url`` parts.
        ``role`` is :data:`cognoxium.packing.packer.CHAT_ROLES`
        of the item role (documents and memories become ``user`` messages).
        ``content`` is the item's packed text (text, canonical JSON, or
        ``"<title> <uri>"`` for a reference; a document or memory with
        ``sources`` first names them, one ``"Source: <title> <uri>"`` line
        per source; for an image, the reference's title as a text part, then
        an ``image_url`` part, see :mod:`cognoxium.items.images`), except for
        an assistant item
        whose Json payload is ``{"tool_calls": [...]}`` and whose metadata has
        ``tool_call_ids``: that becomes ``content`` None with those
        ``tool_calls``. An assistant item with text and
        ``metadata.tool_calls`` gets them as ``tool_calls``; a tool item gets
        ``tool_call_id`` from its metadata, and a tool item without one (tool
        output that answers no call of the conversation) is sent as a
        ``user`` message, as documents are; ``metadata.name`` becomes
        ``name`` on the five chat roles (never on documents or memories).
        For a pack, this is ``pack.messages``: what the pack costs and sends.

    Raises
    ------
    RecordError
        Naming the 0-based ``row`` and the field, when an item has a Binary
        payload that is not an image (never packed), an image with bad metadata
        or outside a user message, malformed tool calls (a call without a string
        ``id``, ``function.name`` or ``function.arguments``), or a tool item
        answers a call that no earlier assistant message of the output
        declares (the API would reject it: keep the call and its results in
        one group, as :func:`openai_messages_to_items` does).
    SchemaError
        If ``data`` is of another type or lacks an item column.

    Notes
    -----
    Messages converted by :func:`openai_messages_to_items` come back equal,
    except that content parts come back as one string and an empty
    assistant text next to tool calls comes back as ``None``. Packing costs
    each item as the message rendered here, by the chat costing rule of
    :mod:`cognoxium.tokens.profiles` (framing, name, content, tool call id,
    each tool call's id, function name and arguments, and images), so a
    pack's ``used_tokens`` is ``profile.request_tokens(to_openai_messages(pack),
    image_sizes=...)``, given the sizes of the images sent by URL.

    Examples
    --------
    >>> cf = from_openai_messages([
    ...     {"role": "user", "content": "Convert 20 EUR"},
    ...     {"role": "assistant", "content": "Checking the rate.", "tool_calls": [
    ...         {"id": "r1", "type": "function",
    ...          "function": {"name": "fx", "arguments": '{"from":"EUR"}'}}]},
    ...     {"role": "tool", "tool_call_id": "r1", "content": "1.08"}])
    >>> for message in to_openai_messages(cf):
    ...     print(message)
    {'role': 'user', 'content': 'Convert 20 EUR'}
    {'role': 'assistant', 'content': 'Checking the rate.', 'tool_calls': [{'function':
    {'arguments': '{"from":"EUR"}', 'name': 'fx'}, 'id': 'r1', 'type': 'function'}]}
    {'role': 'tool', 'content': '1.08', 'tool_call_id': 'r1'}
    >>> from datetime import UTC
    >>> p = cf.pack(100, as_of=datetime(2024, 1, 1, tzinfo=UTC))
    >>> to_openai_messages(p) == p.messages
    True
    >>> from cognoxium.tokens.profiles import get_profile
    >>> p.used_tokens == get_profile("cl100k_base").request_tokens(p.messages)
    True
    """
    if isinstance(data, ContextPack):
        return copy.deepcopy(data.messages)
    df = _frame_of(data)
    missing = [name for name in _NEEDED if name not in df.columns]
    if missing:
        raise SchemaError(f"to_openai_messages needs the item columns; missing {missing}")
    kind = pl.col("payload_kind").cast(pl.String)
    no_image = (kind == "binary") & ~image_media_type_expr()
    binary = np.flatnonzero(df.select(no_image.fill_null(False)).to_series().to_numpy())
    if len(binary):
        raise RecordError(
            "a binary payload has no chat rendering unless its metadata.media_type is "
            "image/png, image/jpeg, image/gif or image/webp (it is never packed); "
            "filter it out",
            row=int(binary[0]),
            field="payload_kind",
        )
    if "content_hash" not in df.columns:
        df = df.with_columns(pl.lit(None, pl.String).alias("content_hash"))
    messages = chat_columns(df).messages(np.arange(df.height))
    at = check_tool_results(messages)
    if at is not None:
        raise RecordError(
            f"tool result for call {messages[at]['tool_call_id']!r} without an earlier "
            "assistant message declaring it; keep a call and its results together "
            "(one group_id)",
            row=at,
            field="metadata.tool_call_id",
        )
    return messages
