"""The chat message each item sends: one rendering, which packing costs and sends.

:func:`chat_columns` lays out every row's message by column operations and
:func:`chat_message` builds its dict; costing reads the same columns (see
:mod:`cognoxium.packing._costing`) and counts what the dict sends by the chat
costing rule of :mod:`cognoxium.tokens.profiles`, so what a pack costs is what
it sends. ``ContextPack.messages`` and
:func:`cognoxium.formats.openai.to_openai_messages` are built here.

==========================  ===================================================
item                        message
==========================  ===================================================
any                         ``role``: :data:`~cognoxium._columns.CHAT_ROLES` of
                            the item role; ``content``: the packed text (text,
                            canonical JSON, ``"<title> <uri>"``)
an image (a Binary image,   ``content``: a text part with the reference's title
or a Reference to one; see  (if any), then an ``image_url`` part (a ``data:``
:mod:`cognoxium.items.      URL, or the URI) with the ``metadata.detail``
images`)                    (no ``detail`` when it has none); the message must
                            be a ``user`` one (roles user, document, memory),
                            else a RecordError
document, memory with       ``content``: one attribution line per source,
``sources``                 ``"Source: <title> <uri>"`` (``"Source: <uri>"``
                            without a title), in ``sources`` order, then the
                            packed text (see :func:`source_lines`)
system, developer, user,    ``name``: ``metadata.name`` when it is a string
assistant, tool
assistant with              ``tool_calls``: the Json payload's
``metadata.tool_call_ids``  ``{"tool_calls": [...]}`` (then ``content`` null),
                            else ``metadata.tool_calls``
tool with                   ``tool_call_id``: ``metadata.tool_call_id``
``metadata.tool_call_id``
tool without one, or whose  a ``user`` message (tool output given as context,
call (in its group) a       as documents are): the Chat Completions API takes
policy renders as ``user``  a ``tool`` message only as the result of a call
policy ``render_as_user``   ``user``, the packed text, nothing else
policy ``render_as_data``   ``user``, the packed text in a data block, nothing
                            else
assistant with              no key of the OpenAI message (the blocks are
``thinking_blocks`` in its  Anthropic's, signed): an Anthropic request sends
metadata                    them first in the message, as received (see
                            :data:`THINKING_KEY`)
a part of a user message    one message with the other parts of its message
(``metadata.message_part``  (same ``group_id``) that are sent, at the place
the part's 0-based index,   of the first of them: ``content`` lists their
and a ``group_id``)         text and ``image_url`` parts by ``message_part``;
                            the message's framing is counted once, on its
                            first part
==========================  ===================================================

The chat importers (:mod:`cognoxium.formats.openai`, and the Anthropic and
LangChain ones through it) split a user message with images into one item per
part, marked with ``metadata.message_part`` and grouped, so packing keeps or
drops the message whole and it is sent as the one message it was.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from cognoxium._columns import CHAT_ROLES
from cognoxium.exceptions import RecordError
from cognoxium.governance.policies import data_block_expr
from cognoxium.items.images import ImageSpec, image_specs
from cognoxium.items.schema import mapped_expr, packed_text_expr
from cognoxium.tokens.profiles import tool_call_texts

__all__ = [
    "ATTRIBUTED_ROLES",
    "CHAT_ROLE",
    "PART_KEY",
    "THINKING_KEY",
    "THINKING_TYPES",
    "ChatColumns",
    "chat_columns",
    "chat_message",
    "check_tool_results",
    "message_parts",
    "message_rows",
    "sent_messages",
    "sent_thinking",
    "source_lines",
    "thinking_block",
    "thinking_rows",
]

_NAMED_ROLES = [role for role, chat in CHAT_ROLES.items() if role == chat]
CHAT_ROLE = pl.Enum(list(dict.fromkeys(CHAT_ROLES.values())))
"""The chat roles a row is sent as: ``system``, ``developer``, ``user``, ``assistant``, ``tool``."""
ATTRIBUTED_ROLES: tuple[str, ...] = ("document", "memory")
"""The item roles whose messages name their sources: retrieved documents and memories."""
_NO_CONTENT_KEY = "no-content"
PART_KEY = "message_part"
"""The metadata key of an item that is one part of a user message: the part's 0-based index."""
THINKING_KEY = "thinking_blocks"
"""The metadata key of an assistant item's Anthropic thinking blocks, in the order received.

A list of ``{"type": "thinking", "thinking", "signature"}`` and
``{"type": "redacted_thinking", "data"}`` blocks, kept byte for byte: the
API checks their signature, and in a tool-use loop with thinking on it
takes the assistant turn that makes a ``tool_use`` only when it starts with
them. They are part of the item, so they are packed with its message and
its tool calls or not at all; only an Anthropic request sends them (first
in the message), and only a pack built for Anthropic counts them."""
THINKING_TYPES: dict[str, tuple[str, ...]] = {
    "thinking": ("thinking", "signature"),
    "redacted_thinking": ("data",),
}
"""Each Anthropic thinking block type and its keys after ``type``, in the API's order."""


def chat_message(
    role: str,
    content: str | list[dict[str, Any]] | None,
    *,
    name: str | None = None,
    tool_calls: list[Any] | None = None,
    tool_call_id: str | None = None,
) -> dict[str, Any]:
    """Build one OpenAI Chat Completions message dict.

    Keys, in order: ``role``, ``content`` (null for an assistant message
    that only calls tools), then ``name``, ``tool_calls`` and ``tool_call_id``
    when given.
    """
    message: dict[str, Any] = {"role": role, "content": content}
    if name is not None:
        message["name"] = name
    if tool_calls is not None:
        message["tool_calls"] = tool_calls
    if tool_call_id is not None:
        message["tool_call_id"] = tool_call_id
    return message


def source_lines(df: pl.DataFrame) -> pl.Series | None:
    r"""The attribution lines of every document and memory with sources.

    A row of role ``document`` or ``memory`` with at least one source sends
    one line per source, ``"Source: <title> <uri>"`` (``"Source: <uri>"``
    when the source has no title), in ``sources`` order, then a newline and
    its content; every other row sends its content unchanged. The lines are
    part of what is sent, so they are costed.

    Parameters
    ----------
    df
        The items, ``n`` rows (columns ``role`` and ``sources``).

    Returns
    -------
    polars.Series or None
        ``(n,)`` String: each row's lines joined by newlines, null for a row
        that is not attributed; None when no row is (or ``df`` has no
        ``sources`` column).

    Examples
    --------
    >>> from cognoxium.items.validation import conform
    >>> df = conform(pl.DataFrame({
    ...     "role": ["document", "user", "memory"], "text": ["Refunds take 5 days.", "Hi", "x"],
    ...     "sources": [[{"uri": "https://x.org/faq", "title": "FAQ"}, {"uri": "kb://7"}],
    ...                 [{"uri": "chat://1"}], []]}))
    >>> source_lines(df).to_list()
    ['Source: FAQ https://x.org/faq\nSource: kb://7', None, None]
    """
    if "sources" not in df.columns:
        return None
    # The role column is an Enum of the item roles: comparing it to strings needs no cast.
    attributed = pl.col("role").is_in(ATTRIBUTED_ROLES) & (pl.col("sources").list.len() > 0)
    mask = df.select(attributed).to_series()
    if not mask.any():
        return None
    rows = df.select(pl.int_range(pl.len(), dtype=pl.Int64).alias("row"), "sources").filter(mask)
    flat = rows.explode("sources").select("row", pl.col("sources").struct.unnest())
    line = pl.lit("Source: ") + (pl.col("title") + pl.lit(" ")).fill_null("") + pl.col("uri")
    lines = (
        flat.select("row", line.alias("line"))
        .group_by("row", maintain_order=True)
        .agg(pl.col("line"))
        .select("row", pl.col("line").list.join("\n"))
    )
    empty = pl.repeat(None, df.height, dtype=pl.String, eager=True).alias("source_lines")
    return empty.scatter(lines.get_column("row"), lines.get_column("line"))


@dataclass(frozen=True)
class ChatColumns:
    """Every row as the chat message it sends.

    Attributes
    ----------
    role
        ``(n,)`` :data:`CHAT_ROLE`: the chat role.
    content
        ``(n,)`` String: the content, null when the message sends none.
    key
        ``(n,)`` String: the token cache key of ``content`` (the content
        hash, or a key derived from the text when a policy rewrote it).
    fields
        Row -> ``{"name", "tool_calls", "tool_call_id"}`` (those it has), for
        the rows whose message has any of them.
    tool_texts
        Row -> :func:`~cognoxium.tokens.profiles.tool_call_texts` of its
        message, for the rows that send any.
    images
        Row -> the image it sends, for the image rows; their ``content`` is
        the text part sent before the image (empty for none).
    parts
        Row -> ``(group_id, part index)`` for the rows that are parts of a
        user message (see :func:`message_parts`).
    continued
        ``(n,)`` bool: the row is a part of a message whose earlier part is
        in the frame, so it is sent in that part's message, not framed on
        its own.
    thinking
        Row -> its thinking blocks (:func:`thinking_rows`), for the rows
        sent as ``assistant`` messages that hold any; no OpenAI message
        sends them.
    """

    role: pl.Series
    content: pl.Series
    key: pl.Series
    fields: dict[int, dict[str, Any]]
    tool_texts: dict[int, list[str]]
    images: dict[int, ImageSpec]
    parts: dict[int, tuple[str, int]]
    continued: np.ndarray
    thinking: dict[int, list[dict[str, str]]]

    def thinking_texts(self) -> dict[int, list[str]]:
        """Row -> the texts an Anthropic request's thinking blocks of the row cost.

        A ``thinking`` block's text and a ``redacted_thinking`` block's
        ``data`` (its encrypted text: Anthropic counts what it stands for
        and does not say how much that is, so its count is an estimate);
        the signature is not counted.
        """
        return {
            row: [block.get("thinking", block.get("data", "")) for block in blocks]
            for row, blocks in self.thinking.items()
        }

    def message(self, row: int) -> dict[str, Any]:
        """The message dict of ``row`` alone."""
        role, content = self.role[row], self.content[row]
        return chat_message(role, self._content(row, content), **self.fields.get(row, {}))

    def messages(self, rows: np.ndarray, cut: dict[int, str] | None = None) -> list[dict[str, Any]]:
        """The message dicts of ``rows`` (``(k,)`` int64), in that order.

        ``cut`` maps positions in ``rows`` to the content a truncation left;
        the parts of one message are sent as one (see :func:`sent_messages`).
        """
        roles = self.role.gather(rows).to_list()
        contents = self.content.gather(rows).to_list()
        for at, text in (cut or {}).items():
            contents[at] = text
        listed = rows.tolist()
        out: list[dict[str, Any]] = []
        for positions in sent_messages(self.parts, rows):
            head = positions[0]
            row = listed[head]
            content = self._content(row, contents[head])
            message = chat_message(roles[head], content, **self.fields.get(row, {}))
            if len(positions) > 1:
                joined: list[dict[str, Any]] = []
                for at in positions:
                    sent = self._content(listed[at], contents[at])
                    if isinstance(sent, str):
                        joined.append({"type": "text", "text": sent})
                    elif sent is not None:
                        joined.extend(sent)
                message["content"] = joined
            out.append(message)
        return out

    def _content(self, row: int, text: str | None) -> str | list[dict[str, Any]] | None:
        """What ``content`` sends: ``text``, or for an image row its parts."""
        image = self.images.get(row)
        if image is None:
            return text
        title = [{"type": "text", "text": text}] if text else []
        return [*title, image.part()]


def _content_and_key(df: pl.DataFrame) -> tuple[pl.Expr, pl.Expr, dict[int, ImageSpec]]:
    """Each row's message text and its cache key, and the image rows, before any policy."""
    all_text = bool((df.get_column("payload_kind") == "text").all())
    content = pl.col("text").fill_null("") if all_text else packed_text_expr()
    key = pl.col("content_hash")
    images = {} if all_text else image_specs(df)
    if images:
        # An image's text is its reference's title, sent as a text part before it.
        is_image = pl.lit(pl.Series(np.isin(np.arange(df.height), list(images))))
        title = pl.col("ref_title").fill_null("")
        content = pl.when(is_image).then(title).otherwise(content)
        key = pl.when(is_image).then(pl.concat_str([pl.lit("title:"), title])).otherwise(key)
    lines = source_lines(df)
    if lines is not None:
        line = pl.lit(lines)
        attributed = pl.concat_str([line, pl.lit("\n"), content])
        content = pl.when(line.is_null()).then(content).otherwise(attributed)
        # The cache key of an attributed text: its content hash and its source lines.
        key = pl.when(line.is_null()).then(key).otherwise(pl.concat_str([key, pl.lit("|"), line]))
    return content, key, images


def _rendered(
    content: pl.Expr, key: pl.Expr, action: pl.Series | None
) -> tuple[pl.Expr, pl.Expr, pl.Expr]:
    """Text and key after the policy actions, and whether each row is rendered as a user's."""
    if action is None:
        return content, key, pl.lit(False)
    act = pl.lit(action)
    as_data = act == "render_as_data"
    content = pl.when(as_data).then(data_block_expr(content)).otherwise(content)
    # The cache key of a rendered text is the text itself.
    key = pl.when(as_data).then(pl.concat_str([pl.lit("data:"), content])).otherwise(key)
    return content, key, act.is_in(["render_as_user", "render_as_data"])


def chat_columns(df: pl.DataFrame, action: pl.Series | None = None) -> ChatColumns:
    """Lay out every row of ``df`` as the chat message it sends (see the module's table).

    Parameters
    ----------
    df
        The items, ``n`` rows (columns ``role``, ``payload_kind``, ``text``,
        ``json``, ``ref_uri``, ``ref_title``, ``content_hash``, ``metadata``,
        and ``id`` and ``group_id`` with ``action``).
    action
        ``(n,)`` String: each row's policy action, or None without policies.

    Returns
    -------
    ChatColumns
        The messages' columns.

    Raises
    ------
    RecordError
        If a tool call of a row is malformed (it lacks a string ``id``,
        ``function.name`` or ``function.arguments``), naming the row and the
        field (``metadata.tool_calls[0].id`` or ``json.tool_calls[0].id``);
        if a thinking block is (see :func:`thinking_rows`);
        if an image's metadata is wrong (see
        :func:`~cognoxium.items.images.image_specs`), or an image would be
        sent in a message other than a user one (field ``role``).
    """
    role = pl.col("role")
    content, key, images = _content_and_key(df)
    content, key, rendered = _rendered(content, key, action)
    meta = pl.col("metadata")
    # Rows whose message may carry a name or tool fields; only these are parsed.
    maybe = (role.is_in(_NAMED_ROLES) & meta.str.contains('"name":', literal=True)) | (
        (role == "assistant") & meta.str.contains('"tool_call_ids":', literal=True)
    )
    maybe = maybe | (role == "tool")
    declares = (role == "assistant") & meta.str.contains('"tool_call_ids":', literal=True)
    chat_role = mapped_expr("role", df.schema["role"], CHAT_ROLES, CHAT_ROLE)
    cols = df.select(
        pl.when(rendered).then(pl.lit("user", CHAT_ROLE)).otherwise(chat_role).alias("role"),
        content.alias("content"),
        key.alias("key"),
        (maybe & ~rendered).alias("maybe"),
        (declares & rendered).alias("rendered_call"),
    )
    flagged = np.flatnonzero(cols.get_column("maybe").to_numpy())
    fields, texts = _fields_of(df, flagged, _rendered_calls(df, cols["rendered_call"]))
    chat, content_col, key_col = cols["role"], cols["content"], cols["key"]
    no_content = [r for r, f in fields.items() if f.pop("no_content", False)]
    as_user = [r for r, f in fields.items() if f.pop("as_user", False)]
    if no_content:
        content_col = content_col.clone().scatter(no_content, None)
        key_col = key_col.clone().scatter(no_content, _NO_CONTENT_KEY)
    if as_user:
        chat = chat.clone().scatter(as_user, "user")
    fields = {r: f for r, f in fields.items() if f}
    _check_image_roles(df, chat, images)
    parts = message_parts(df)
    thinking = {row: b for row, b in thinking_rows(df).items() if chat[row] == "assistant"}
    return ChatColumns(
        role=chat,
        content=content_col,
        key=key_col,
        fields=fields,
        tool_texts=texts,
        images=images,
        parts=parts,
        continued=_continued(df.height, parts),
        thinking=thinking,
    )


def message_parts(df: pl.DataFrame) -> dict[int, tuple[str, int]]:
    """The rows of ``df`` that are parts of one user message, with their message and index.

    A part is a ``user`` row with a ``group_id`` and an integer
    ``metadata.message_part`` (its 0-based index in the message), as the
    chat importers make them.

    Parameters
    ----------
    df
        The items, ``n`` rows (columns ``role``, ``metadata``, ``group_id``).

    Returns
    -------
    dict
        Row -> ``(group_id, part index)``; empty when no row is a part.
    """
    if "group_id" not in df.columns:
        return {}
    marked = (
        (pl.col("role") == "user")
        & pl.col("group_id").is_not_null()
        & pl.col("metadata").str.contains(f'"{PART_KEY}":', literal=True)
    )
    mask = df.select(marked).to_series().to_numpy()
    rows = np.flatnonzero(mask)
    if len(rows) == 0:
        return {}
    sub = df[rows].select("group_id", "metadata").iter_rows()
    parts: dict[int, tuple[str, int]] = {}
    for row, (group_id, metadata_text) in zip(rows.tolist(), sub, strict=True):
        index = json.loads(metadata_text).get(PART_KEY)
        if isinstance(index, int) and not isinstance(index, bool):
            parts[row] = (group_id, index)
    return parts


def _continued(n: int, parts: dict[int, tuple[str, int]]) -> np.ndarray:
    """``(n,)`` bool: every part row but the first of its message (lowest index, then row)."""
    first: dict[str, tuple[int, int]] = {}
    for row, (group_id, index) in parts.items():
        first[group_id] = min((index, row), first.get(group_id, (index, row)))
    out = np.zeros(n, dtype=bool)
    for row, (group_id, index) in parts.items():
        out[row] = first[group_id] != (index, row)
    return out


def sent_messages(parts: dict[int, tuple[str, int]], rows: np.ndarray) -> list[list[int]]:
    """The messages ``rows`` are sent as: the positions in ``rows`` each message holds.

    Every row is a message of its own, except the parts of one message (see
    :func:`message_parts`): they are one message, at the place of the first
    of them in ``rows``, holding them by part index (then row). A pack sends
    every part of a message or none (they share a group), so each message is
    framed once, as :attr:`ChatColumns.continued` costs it.

    Parameters
    ----------
    parts
        :func:`message_parts` of the frame ``rows`` index.
    rows
        ``(k,)`` int64: the rows as sent, in order.

    Returns
    -------
    list of list of int
        One list of positions per message, in sending order; the first
        position of each is the row whose role and fields the message has.

    Examples
    --------
    >>> parts = {1: ("g", 0), 2: ("g", 1)}
    >>> sent_messages(parts, np.array([0, 2, 3, 1]))
    [[0], [3, 1], [2]]
    """
    listed = rows.tolist()
    if not parts:
        return [[at] for at in range(len(listed))]
    messages: list[list[int]] = []
    by_group: dict[str, int] = {}
    for at, row in enumerate(listed):
        part = parts.get(row)
        if part is None:
            messages.append([at])
        elif part[0] in by_group:
            messages[by_group[part[0]]].append(at)
        else:
            by_group[part[0]] = len(messages)
            messages.append([at])
    for k in by_group.values():
        messages[k].sort(key=lambda at: (parts[listed[at]][1], listed[at]))
    return messages


def _check_image_roles(df: pl.DataFrame, chat: pl.Series, images: dict[int, ImageSpec]) -> None:
    """Raise a RecordError naming the first image row whose message is not a user message."""
    for row in sorted(images):
        if chat[row] != "user":
            raise RecordError(
                f"item {df['id'][row]!r} is an image, which the Chat Completions API takes "
                f"only in a user message, but it would be sent as {chat[row]!r}; give it the "
                "role user, document or memory",
                row=row,
                field="role",
            )


def _rendered_calls(df: pl.DataFrame, rendered_call: pl.Series) -> set[tuple[str, str]]:
    """``(group_id, call id)`` of every call made by an assistant row a policy renders as user."""
    if not rendered_call.any():
        return set()
    rows = df.filter(rendered_call).select("group_id", "metadata").iter_rows()
    return {
        (group_id, call_id)
        for group_id, metadata_text in rows
        if group_id is not None
        for call_id in json.loads(metadata_text).get("tool_call_ids", ())
        if isinstance(call_id, str)
    }


def _fields_of(
    df: pl.DataFrame, rows: np.ndarray, rendered_calls: set[tuple[str, str]]
) -> tuple[dict[int, dict[str, Any]], dict[int, list[str]]]:
    """Name and tool fields of ``rows``, from their metadata and payload; their tool texts.

    A field dict may also hold ``no_content`` (the payload is the tool calls)
    or ``as_user`` (a tool result without a call id, or whose call, in its
    group, is among ``rendered_calls``), which the caller applies.
    """
    if len(rows) == 0:
        return {}, {}
    sub = df[rows].select(
        pl.col("role").cast(pl.String),
        pl.col("payload_kind").cast(pl.String),
        "json",
        "metadata",
        pl.col("group_id") if "group_id" in df.columns else pl.lit(None, pl.String),
    )
    fields: dict[int, dict[str, Any]] = {}
    texts: dict[int, list[str]] = {}
    for row, (role, kind, json_text, metadata_text, group_id) in zip(
        rows.tolist(), sub.iter_rows(), strict=True
    ):
        meta: dict[str, Any] = json.loads(metadata_text)
        found: dict[str, Any] = {}
        where = "metadata"
        if isinstance(meta.get("name"), str):
            found["name"] = meta["name"]
        if role == "assistant" and "tool_call_ids" in meta:
            calls: Any = meta.get("tool_calls")
            if kind == "json":
                value = json.loads(json_text)
                if isinstance(value, dict) and list(value) == ["tool_calls"]:
                    calls, where, found["no_content"] = value["tool_calls"], "json", True
            if isinstance(calls, list):
                found["tool_calls"] = calls
        elif role == "tool":
            call_id = meta.get("tool_call_id")
            if isinstance(call_id, str) and (group_id, call_id) not in rendered_calls:
                found["tool_call_id"] = call_id
            else:
                found["as_user"] = True
        try:
            sent = tool_call_texts(found)
        except RecordError as error:
            raise RecordError(error.message, row=row, field=f"{where}.{error.field}") from None
        if sent:
            texts[row] = sent
        if found:
            fields[row] = found
    return fields, texts


def check_tool_results(messages: Sequence[dict[str, Any]]) -> int | None:
    """Return the index of the first tool result whose call no earlier message declares.

    ``None`` when every ``tool`` message answers a call that an earlier
    assistant message of ``messages`` declares in its ``tool_calls``, as the
    Chat Completions API requires.
    """
    declared: set[str] = set()
    for index, message in enumerate(messages):
        for call in message.get("tool_calls") or ():
            if isinstance(call, dict) and isinstance(call.get("id"), str):
                declared.add(call["id"])
        if message["role"] == "tool" and message.get("tool_call_id") not in declared:
            return index
    return None


def thinking_block(block: Any) -> dict[str, str]:
    """Check one Anthropic thinking block; return it with its keys in the API's order.

    Parameters
    ----------
    block
        ``{"type": "thinking", "thinking": str, "signature": str}`` (the
        text may be empty, the signature may not) or ``{"type":
        "redacted_thinking", "data": str}`` (not empty).

    Returns
    -------
    dict
        The block, ``type`` first and then the keys of :data:`THINKING_TYPES`;
        its values are the given strings, unchanged.

    Raises
    ------
    RecordError
        If it is not such a block; ``field`` names the key at fault
        (``type``, ``signature``, ``data``, an unknown key), relative to the block.

    Examples
    --------
    >>> thinking_block({"signature": "c2ln", "thinking": "x", "type": "thinking"})
    {'type': 'thinking', 'thinking': 'x', 'signature': 'c2ln'}
    >>> thinking_block({"type": "thinking", "thinking": "x"})
    Traceback (most recent call last):
    ...
    cognoxium.exceptions.RecordError: field signature: must be a non-empty string, got None; ...
    """
    if not isinstance(block, Mapping):
        raise RecordError(f"a thinking block must be an object, got {block!r}")
    kind = block.get("type")
    if kind not in THINKING_TYPES:
        raise RecordError(f"must be one of {list(THINKING_TYPES)}, got {kind!r}", field="type")
    keys = THINKING_TYPES[kind]
    extra = sorted(set(block) - {"type", *keys})
    if extra:
        raise RecordError(f"unknown key in a {kind} block", field=extra[0])
    checked = {"type": kind}
    for key in keys:
        value = block.get(key)
        if not isinstance(value, str) or (not value and key != "thinking"):
            raise RecordError(
                f"must be a non-empty string, got {value!r}; a {kind} block is sent back "
                "exactly as the API returned it",
                field=key,
            )
        checked[key] = value
    return checked


def thinking_rows(df: pl.DataFrame) -> dict[int, list[dict[str, str]]]:
    """The assistant rows of ``df`` that hold thinking blocks (:data:`THINKING_KEY`).

    Parameters
    ----------
    df
        The items, ``n`` rows (``role`` and ``metadata`` are read).

    Returns
    -------
    dict
        Row -> its blocks, checked by :func:`thinking_block`, in order; empty
        when no row has any.

    Raises
    ------
    RecordError
        If an assistant row's ``metadata.thinking_blocks`` is not a list of
        thinking blocks; it names the row and the field
        (``metadata.thinking_blocks[0].signature``).
    """
    flagged = (pl.col("role") == "assistant") & pl.col("metadata").str.contains(
        f'"{THINKING_KEY}":', literal=True
    )
    rows = np.flatnonzero(df.select(flagged.fill_null(False)).to_series().to_numpy())
    out: dict[int, list[dict[str, str]]] = {}
    if len(rows) == 0:
        return out
    texts = df.get_column("metadata").gather(rows).to_list()
    for row, text in zip(rows.tolist(), texts, strict=True):
        blocks = json.loads(text).get(THINKING_KEY)
        field = f"metadata.{THINKING_KEY}"
        if not isinstance(blocks, list):
            raise RecordError("must be a list of thinking blocks", row=row, field=field)
        checked = []
        for j, block in enumerate(blocks):
            try:
                checked.append(thinking_block(block))
            except RecordError as error:
                at = f"{field}[{j}]" + (f".{error.field}" if error.field else "")
                raise RecordError(error.message, row=row, field=at) from None
        if checked:
            out[row] = checked
    return out


def message_rows(frame: pl.DataFrame, notes: Sequence[int] = ()) -> list[list[int]]:
    """The pack positions of the items each message of the pack sends.

    Parameters
    ----------
    frame
        The packed rows, ``k`` of them, in pack order (``role``, ``group_id``
        and ``metadata`` are read).
    notes
        The indexes in the messages of the gap notes (``GapRecord.note_at``),
        ascending: they send no item.

    Returns
    -------
    list of list of int
        One list per message, in order; ``[]`` for a gap note.
    """
    rows = sent_messages(message_parts(frame), np.arange(frame.height, dtype=np.int64))
    for at in notes:
        rows.insert(at, [])
    return rows


def sent_thinking(
    frame: pl.DataFrame, notes: Sequence[int] = ()
) -> dict[int, list[dict[str, str]]]:
    """The thinking blocks an Anthropic request sends, by the index of their message.

    Parameters
    ----------
    frame
        The rows sent, ``k`` of them, in order (``role``, ``group_id`` and
        ``metadata`` are read).
    notes
        The indexes of the gap notes in the messages, ascending (see
        :func:`message_rows`).

    Returns
    -------
    dict
        Message index (in :func:`message_rows` order) -> the thinking blocks
        of the assistant item it sends (:func:`thinking_rows`); the
        renderer sends them only in a message sent as the assistant's.

    Raises
    ------
    RecordError
        As :func:`thinking_rows`.
    """
    by_row = thinking_rows(frame)
    if not by_row:
        return {}
    return {
        at: by_row[held[0]]
        for at, held in enumerate(message_rows(frame, notes))
        if held and held[0] in by_row
    }
