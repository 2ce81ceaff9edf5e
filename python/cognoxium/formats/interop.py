"""Interoperability: LangChain and LlamaIndex objects in, Arrow and Polars out.

Inputs
------
:func:`from_langchain_messages`
    LangChain chat messages (``SystemMessage``, ``HumanMessage``,
    ``AIMessage`` with ``tool_calls``, ``ToolMessage``) as one item per
    message. The messages go through LangChain's own
    ``convert_to_openai_messages`` and then :mod:`cognoxium.formats.openai`, so the
    mapping is the one of :func:`cognoxium.formats.openai.openai_messages_to_items`:
    an assistant message with tool calls and the tool results answering them
    share a ``group_id`` and are packed or dropped together.
:func:`from_langchain_documents`
    LangChain ``Document`` objects (``page_content``, ``metadata``, ``id``)
    as ``document`` items, the loader's ``metadata["source"]`` as provenance.
:func:`from_llamaindex_messages`
    LlamaIndex ``ChatMessage`` objects (a ``ChatMemoryBuffer``'s history) as
    one item per message, read as the OpenAI messages they stand for.
:func:`from_llamaindex_nodes`
    LlamaIndex nodes (``TextNode``, ``Document``) or retrieval results
    (``NodeWithScore``) as ``document`` items; a retrieval score becomes the
    item's ``rank`` and the node's source document its parent.

Outputs
-------
:func:`to_langchain_messages`, :func:`to_llamaindex_messages`
    Packed items back as LangChain or LlamaIndex messages.
:func:`manifests_to_polars`
    Many manifests' entries as one Polars frame (one manifest's entries are
    :meth:`PackManifest.to_polars <cognoxium.packing.packer.PackManifest.to_polars>`
    and :meth:`PackManifest.to_arrow <cognoxium.packing.packer.PackManifest.to_arrow>`).
:func:`lineage_to_polars`, :func:`lineage_to_arrow`
    The lineage edges of a manifest or a frame (columns of
    :data:`cognoxium.governance.lineage.EDGE_SCHEMA`).

LangChain (``langchain-core``) and LlamaIndex (``llama-index-core``) are
optional: they are imported on first use, and a missing one raises
:class:`~cognoxium.exceptions.DependencyError` naming the extra that installs
it (``pip install 'cognoxium-engine[langchain]'``, ``'cognoxium-engine[llamaindex]'``).

Examples
--------
>>> from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
>>> cf = from_langchain_messages([
...     HumanMessage("Weather in Paris?"),
...     AIMessage("", tool_calls=[{"name": "weather", "args": {"city": "Paris"}, "id": "c1"}]),
...     ToolMessage("18 C, cloudy", tool_call_id="c1"),
... ], conversation_id="conv")
>>> cf.select("id", "role", "payload_kind", "group_id").to_polars().rows()
[('conv:0', 'user', 'text', None),
 ('conv:1', 'assistant', 'json', 'conv:tools:1'),
 ('conv:2', 'tool', 'text', 'conv:tools:1')]
"""

from __future__ import annotations

import base64
import importlib
import json
import math
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from operator import attrgetter
from types import ModuleType
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
from pydantic import ValidationError

from cognoxium._distribution import install_command
from cognoxium.exceptions import DependencyError, RecordError, SchemaError
from cognoxium.formats.openai import (
    CHAT_EPOCH,
    ChatColumns,
    ImportToolErrors,
    MessageLocation,
    to_openai_messages,
)
from cognoxium.frame.frame import CognitionFrame
from cognoxium.governance.lineage import EDGE_SCHEMA, lineage_edges
from cognoxium.items.model import ContextItem, Retention, canonical_json_list
from cognoxium.items.schema import POLARS_SCHEMA
from cognoxium.items.validation import conform
from cognoxium.packing._messages import message_parts, sent_messages
from cognoxium.packing._renderers import failed_calls
from cognoxium.packing.packer import ENTRY_SCHEMA as ENTRY_SCHEMA
from cognoxium.packing.packer import ContextPack, PackManifest

__all__ = [
    "EXTRAS",
    "from_langchain_documents",
    "from_langchain_messages",
    "from_llamaindex_messages",
    "from_llamaindex_nodes",
    "lineage_to_arrow",
    "lineage_to_polars",
    "manifests_to_polars",
    "to_langchain_messages",
    "to_llamaindex_messages",
]

EXTRAS: dict[str, str] = {"langchain_core": "langchain", "llama_index.core": "llamaindex"}
"""The optional extra of this package that installs each third-party module."""

_DISTRIBUTIONS = {"langchain_core": "langchain-core", "llama_index.core": "llama-index-core"}
_MESSAGES_KIND = "langchain_messages"
_DOCUMENT_KIND = "langchain_document"
_NODE_KIND = "llamaindex_node"
_NODE_URI_KEYS = ("source", "file_path", "url")


def _require(module: str) -> ModuleType:
    """Import an optional third-party module, or say which extra installs it."""
    root = "llama_index.core" if module.startswith("llama_index") else "langchain_core"
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        extra = EXTRAS[root]
        raise DependencyError(
            f"{module} is not installed ({exc}); it comes with the {extra!r} extra: "
            f"{install_command(extra)} (or pip install {_DISTRIBUTIONS[root]})"
        ) from exc


def _checked_start(start: datetime | None, source: str | None) -> datetime:
    if start is None:
        return CHAT_EPOCH
    if not isinstance(start, datetime) or start.tzinfo is None:
        raise RecordError(
            f"must be a timezone-aware datetime, got {start!r}", source=source, field="created_at"
        )
    return start


def _item(data: dict[str, Any], *, row: int, source: str | None) -> ContextItem:
    """Validate one item, naming the 0-based row and the field on failure."""
    try:
        return ContextItem.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(part) for part in first["loc"]) or None
        raise RecordError(first["msg"], source=source, row=row, field=field) from None


# ---------------------------------------------------------------------------
# LangChain


def from_langchain_messages(
    messages: Iterable[Any],
    *,
    conversation_id: str | None = None,
    start: datetime | None = None,
    source: str | None = None,
    system_retention: Retention | str = Retention.REQUIRED,
    tool_errors: ImportToolErrors = "error",
) -> CognitionFrame:
    """Build a frame from LangChain chat messages, one item per message, in order.

    The messages are converted with LangChain's ``convert_to_openai_messages``
    (text content parts joined, tool call arguments JSON-encoded) and then
    mapped as :func:`cognoxium.formats.openai.openai_messages_to_items` maps OpenAI
    messages: ids ``"<conversation_id>:<index>"``, ``created_at`` = ``start``
    + ``index`` microseconds, and a tool-calling assistant message grouped
    with its tool results. An ``AIMessage``'s ``invalid_tool_calls`` (which
    the converter leaves out) follow its valid calls, their ``args`` text
    as the arguments, as Chat Completions returned them. A message's own
    LangChain ``id``, when set, is kept as ``metadata["message_id"]``.
    System (and developer) messages are ``required`` by default, every
    other message ``optional``. What ``convert_to_openai_messages`` leaves
    out is not kept either: a
    message's ``additional_kwargs``, ``response_metadata`` and
    ``usage_metadata``, and a ``ToolMessage``'s ``artifact`` (none of them
    is sent to a model); keep what you need in the items' metadata with
    ``with_columns``.

    Content may be a string or a list of content parts: text parts, and in
    a ``HumanMessage`` image parts in LangChain's documented shapes, the
    standard ``{"type": "image", "url": ...}`` or ``{"type": "image",
    "base64": ..., "mime_type": ...}`` (and the older ``source_type``
    form), or OpenAI's ``{"type": "image_url", "image_url": {"url": ...}}``.
    A message with images becomes one item per segment (a run of text, or
    one image as a Reference payload), grouped, as
    :mod:`cognoxium.formats.openai` describes; a base64 image becomes a
    ``data:`` URL, which must hold a PNG, JPEG, GIF or WebP image of its
    declared type (an SVG, data that is not base64 or bytes of another
    type raise ``RecordError``, code ``record.image_invalid``, field
    ``content[1].image_url.url``).

    Parameters
    ----------
    messages
        ``langchain_core.messages.BaseMessage`` objects: ``SystemMessage``,
        ``HumanMessage``, ``AIMessage`` (optionally with ``tool_calls``),
        ``ToolMessage``.
    conversation_id
        Prefix of item ids and group ids; ``"msg"`` when not given.
    start
        Timezone-aware time of the first message; defaults to
        :data:`cognoxium.formats.openai.CHAT_EPOCH` (1970-01-01T00:00:00Z), so ids and
        times are the same on every run.
    source
        Provenance uri recorded in every item's ``sources`` (kind
        ``"langchain_messages"``) and named in errors.
    system_retention
        The retention of system and developer messages: ``required`` by
        default, so packing never drops the instructions; ``"optional"``
        gives them the item default, as every other message has.
    tool_errors
        ``"error"`` (the default) raises at a ``ToolMessage`` that breaks
        the chat APIs' rules (no earlier call, answered already, or after
        another message than its call's); ``"keep"`` imports it as a tool
        message with no group, for the pack to leave out (as in
        :func:`~cognoxium.formats.openai.openai_messages_to_items`).

    Returns
    -------
    CognitionFrame
        One row per message, in message order.

    Raises
    ------
    DependencyError
        If ``langchain-core`` is not installed (extra ``langchain``).
    RecordError
        At the first message that is not a ``BaseMessage`` or cannot be
        mapped (an unsupported role such as ``function``, an image given by
        a provider file id, audio, an image outside a ``HumanMessage``, a
        tool result without its call), naming its 0-based ``row`` and the
        field, or when ``system_retention`` is not a retention tier; nothing
        is returned.

    Examples
    --------
    >>> from langchain_core.messages import HumanMessage, SystemMessage
    >>> cf = from_langchain_messages(
    ...     [SystemMessage("Be brief."), HumanMessage("Hi", id="m-7", name="ada")],
    ...     conversation_id="c1")
    >>> cf.select("id", "role", "text", "metadata", "retention").to_polars().rows()
    [('c1:0', 'system', 'Be brief.', '{}', 'required'),
     ('c1:1', 'user', 'Hi', '{"message_id":"m-7","name":"ada"}', 'optional')]
    """
    lc = _require("langchain_core.messages")
    rows = list(messages)
    if not all(issubclass(kind, lc.BaseMessage) for kind in set(map(type, rows))):
        for row, message in enumerate(rows):
            if not isinstance(message, lc.BaseMessage):
                raise RecordError(
                    f"expected a langchain_core BaseMessage, got {type(message).__name__}",
                    source=source,
                    row=row,
                )
    where = MessageLocation(source)
    columns = ChatColumns(
        where, conversation_id, start, system_retention, _MESSAGES_KIND, tool_errors=tool_errors
    )
    # the messages' own ids; an empty or missing one is left out of the metadata
    message_ids = _add_plain(lc, columns, rows)
    if message_ids is None:
        columns.add_all(
            _openai_message(lc, message, row, source) for row, message in enumerate(rows)
        )
        _mark_failed_results(lc, columns, rows)
        message_ids = list(map(attrgetter("id"), rows))
    if columns.plain:
        return CognitionFrame.from_conformed(columns.frame(("message_id", message_ids)))
    per_item = [message_ids[index] for index in columns.index]
    return CognitionFrame.from_conformed(columns.frame(("message_id", per_item)))


def _add_plain(lc: ModuleType, columns: ChatColumns, rows: list[Any]) -> list[Any] | None:
    """Lay out plain text messages a column at a time; their ids, or ``None`` (nothing added).

    Plain: every message a ``SystemMessage``, ``HumanMessage`` or
    ``AIMessage`` (not a subclass) with text content, no
    ``additional_kwargs`` and no tool calls, which LangChain's
    ``convert_to_openai_messages`` turns into ``{"role", "content"}`` and
    ``"name"`` when the name is not empty.

    The fields are read in one pass over the messages, each message's at
    once: the messages are objects spread over memory, and a pass per field
    costs more than the reading itself (``benchmarks/bench_peers.py``,
    the whole call from LangChain messages).
    """
    plain = {lc.SystemMessage: "system", lc.HumanMessage: "user", lc.AIMessage: "assistant"}
    roles = list(map(plain.get, map(type, rows)))
    if None in roles:
        return None
    reply = lc.AIMessage
    texts: list[Any] = []
    names: list[Any] = []
    ids: list[Any] = []
    add_text, add_name, add_id = texts.append, names.append, ids.append
    for message in rows:
        if message.additional_kwargs or (
            type(message) is reply and (message.tool_calls or message.invalid_tool_calls)
        ):
            return None
        add_text(message.content)
        add_name(message.name)
        add_id(message.id)
    if names.count(None) != len(names):
        names = [name or None for name in names]  # an empty name is left out
    return ids if columns.add_plain(roles, texts, names) else None


def _mark_failed_results(lc: ModuleType, columns: ChatColumns, rows: list[Any]) -> None:
    """Keep a failed tool's ``ToolMessage(status="error")`` as ``metadata.is_error``.

    LangChain's converter drops ``status``; the Anthropic rendering sends it
    back as ``is_error`` and :func:`to_langchain_messages` as ``status``.
    """
    failed = {
        row
        for row, message in enumerate(rows)
        if isinstance(message, lc.ToolMessage) and message.status == "error"
    }
    for at, row in enumerate(columns.index):
        if row in failed:
            columns.metadata[at]["is_error"] = True


def _openai_message(lc: ModuleType, message: Any, row: int, source: str | None) -> Any:
    """One LangChain message as an OpenAI message dict, by LangChain's own converter.

    LangChain's converter leaves out an ``AIMessage``'s ``invalid_tool_calls``
    (calls whose arguments did not parse, such as a call cut off by the
    output limit): they are put back after its valid calls, their
    ``args`` text as the ``arguments`` word for word, as Chat Completions
    returned them, so that no call is lost and the results answering them
    pair with them. The importer's ``tool_errors`` then decides, as for
    OpenAI messages (:func:`~cognoxium.formats.openai.from_openai_messages`).
    """
    if isinstance(message, lc.RemoveMessage):
        raise RecordError(
            "a RemoveMessage is an instruction to delete a message from a LangGraph state, "
            "not a message to send; apply it to the history first",
            source=source,
            row=row,
            field="type",
        )
    converted = _converted(lc, message, row, source)
    invalid = getattr(message, "invalid_tool_calls", None)
    if invalid:
        calls = converted.setdefault("tool_calls", [])
        for call in invalid:
            function = {"name": call.get("name"), "arguments": call.get("args") or ""}
            calls.append({"id": call.get("id"), "type": "function", "function": function})
    return converted


def _converted(lc: ModuleType, message: Any, row: int, source: str | None) -> Any:
    """LangChain's own conversion of one message to an OpenAI message dict."""
    try:
        return lc.convert_to_openai_messages(message)
    except ValueError as exc:
        raise RecordError(
            f"LangChain cannot convert this message to the OpenAI format: {exc}",
            source=source,
            row=row,
            field="content",
        ) from None


def from_langchain_documents(
    documents: Iterable[Any],
    *,
    id_prefix: str = "doc",
    created_at: datetime | None = None,
) -> CognitionFrame:
    """Build a frame of ``document`` items from LangChain ``Document`` objects, in order.

    Parameters
    ----------
    documents
        ``langchain_core.documents.Document`` objects.
    id_prefix
        Item id of a document without an ``id``: ``"<id_prefix>:<index>"``
        (``index`` its 0-based position).
    created_at
        Timezone-aware creation time of every item; defaults to
        :data:`cognoxium.formats.openai.CHAT_EPOCH` so that the frame is the same on
        every run.

    Returns
    -------
    CognitionFrame
        One row per document: ``text`` is ``page_content``, ``metadata`` the
        document's metadata (a JSON object), and ``sources`` holds
        ``{"uri": metadata["source"], "kind": "langchain_document", "title":
        metadata["title"]}`` when the metadata has a ``source`` (as
        LangChain's document loaders write it).

    Raises
    ------
    DependencyError
        If ``langchain-core`` is not installed (extra ``langchain``).
    RecordError
        At the first element that is not a ``Document``, or whose metadata is
        not JSON (naming its 0-based ``row`` and the field); also for two
        documents with one id.

    Examples
    --------
    >>> from langchain_core.documents import Document
    >>> cf = from_langchain_documents([
    ...     Document("Refunds take 5 days.", metadata={"source": "faq.md", "page": 2}),
    ...     Document("Shipping is free.", id="ship")])
    >>> cf.select("id", "role", "text").to_polars().rows()
    [('doc:0', 'document', 'Refunds take 5 days.'), ('ship', 'document', 'Shipping is free.')]
    >>> cf.to_items()[0].sources[0].uri
    'faq.md'
    """
    documents_module = _require("langchain_core.documents")
    when = _checked_start(created_at, None)
    records: list[dict[str, Any]] = []
    with _earlier_errors_first(records):
        for row, document in enumerate(documents):
            records.append(_document_record(documents_module, document, row, id_prefix, when))
    return CognitionFrame.from_conformed(_records_frame(records))


def _document_record(
    documents_module: ModuleType, document: Any, row: int, id_prefix: str, when: datetime
) -> dict[str, Any]:
    """One LangChain document as a record of item fields; ``RecordError`` if it cannot be."""
    if not isinstance(document, documents_module.Document):
        raise RecordError(
            f"expected a langchain_core Document, got {type(document).__name__}", row=row
        )
    metadata = dict(document.metadata)
    uri = metadata.get("source")
    title = metadata.get("title")
    sources: list[dict[str, str]] = []
    if uri is not None:
        sources.append({"uri": str(uri), "kind": _DOCUMENT_KIND})
        if isinstance(title, str):
            sources[0]["title"] = title
    item_id = document.id if isinstance(document.id, str) and document.id else None
    return {
        "id": item_id or f"{id_prefix}:{row}",
        "role": "document",
        "text": document.page_content,
        "sources": sources,
        "created_at": when,
        "metadata": _json_object(metadata, row=row, source=None),
    }


@contextmanager
def _earlier_errors_first(records: list[dict[str, Any]]) -> Iterator[None]:
    """At a ``RecordError`` while records are gathered, first report an earlier invalid one.

    Item by item conversion validates each record before reading the next,
    so an invalid record before the one that cannot be read is the first error.
    """
    try:
        yield
    except RecordError:
        _records_frame(records)
        raise


def _records_frame(records: list[dict[str, Any]]) -> pl.DataFrame:
    """Validate document records as one table (:func:`conform`), all or nothing.

    Only a record that fails is validated as a :class:`ContextItem`, to word
    its error as the item model does (naming its 0-based ``row`` and field).
    """
    try:
        return conform(_record_columns(records))
    except RecordError as exc:
        if exc.row is not None and not exc.message.startswith("duplicate id"):
            _item(_item_data(records[exc.row]), row=exc.row, source=None)
        raise
    except (UnicodeError, ValueError, TypeError, pl.exceptions.PolarsError):
        # A value Arrow cannot hold (a lone surrogate): find its record.
        for row, record in enumerate(records):
            _item(_item_data(record), row=row, source=None)
        raise


def _item_data(record: dict[str, Any]) -> dict[str, Any]:
    """A document record as the item model's fields (a Text payload)."""
    data = {key: value for key, value in record.items() if key != "text"}
    return {**data, "payload": {"kind": "text", "text": record["text"]}}


def _record_columns(records: list[dict[str, Any]]) -> pl.DataFrame:
    """The records' fields as item columns; ``metadata`` as canonical JSON text."""
    columns: dict[str, pl.Series] = {}
    names = {key for record in records for key in record}
    for name in ("id", "role", "text", "rank", "created_at"):
        if name in names:
            values = [record.get(name) for record in records]
            columns[name] = pl.Series(name, values, POLARS_SCHEMA[name], strict=True)
    for name in ("sources", "parents"):
        if name in names:
            values = [record.get(name, []) for record in records]
            columns[name] = pl.Series(name, values, POLARS_SCHEMA[name], strict=True)
    metadata = canonical_json_list([record["metadata"] for record in records])
    columns["metadata"] = pl.Series("metadata", metadata, pl.String)
    if not records:
        return pl.DataFrame(schema={"role": pl.String, "text": pl.String})
    return pl.DataFrame(list(columns.values()))


def to_langchain_messages(data: ContextPack | CognitionFrame | pl.DataFrame) -> list[Any]:
    """Render items as LangChain messages, in row order.

    A pack is rendered from :attr:`ContextPack.messages
    <cognoxium.packing.packer.ContextPack.messages>`, what it costs and
    checks: a policy's rendering (a message wrapped as untrusted data and
    sent as the user's) and the note in place of each hole are sent as
    they were packed. Other items are rendered as OpenAI chat messages by
    :func:`cognoxium.formats.openai.to_openai_messages` (documents and memories as user
    messages, tool-call groups with their calls). Either is converted by
    LangChain's ``convert_to_messages``.

    Parameters
    ----------
    data
        A :class:`~cognoxium.packing.packer.ContextPack` (its selected items), a
        :class:`CognitionFrame` or a Polars frame of items.

    Returns
    -------
    list of langchain_core.messages.BaseMessage
        One message per item, except that the parts of one user message
        (``metadata.message_part``, see :mod:`cognoxium.packing._messages`)
        are one message again, and a pack's gap notes are messages of their
        own (``SystemMessage``, no ``id``); an item's
        ``metadata["message_id"]`` (see :func:`from_langchain_messages`)
        becomes the message's ``id``.

    Raises
    ------
    DependencyError
        If ``langchain-core`` is not installed (extra ``langchain``).
    RecordError, SchemaError
        As :func:`cognoxium.formats.openai.to_openai_messages` raises them.

    Examples
    --------
    >>> from langchain_core.messages import HumanMessage, SystemMessage
    >>> cf = from_langchain_messages([SystemMessage("Be brief."), HumanMessage("Hi")])
    >>> [type(m).__name__ for m in to_langchain_messages(cf)]
    ['SystemMessage', 'HumanMessage']
    """
    lc = _require("langchain_core.messages")
    notes: set[int] = set()
    if isinstance(data, ContextPack):
        df, messages = data.frame, data.to_openai()
        notes = {g.note_at for g in data.manifest.gap_records if g.note_at is not None}
    else:
        df = data.collect() if isinstance(data, CognitionFrame) else data
        messages = to_openai_messages(df)
    converted: list[Any] = lc.convert_to_messages(messages)
    # The parts of one message are sent as one: its id is its first part's.
    sent = sent_messages(message_parts(df), np.arange(df.height, dtype=np.int64))
    metadatas = df.get_column("metadata").gather([p[0] for p in sent]).to_list()
    failed = failed_calls(df)
    of_items = [m for at, m in enumerate(converted) if at not in notes]
    for message, metadata in zip(of_items, metadatas, strict=True):
        if isinstance(message, lc.ToolMessage) and message.tool_call_id in failed:
            message.status = "error"
        message_id = json.loads(metadata).get("message_id")
        if isinstance(message_id, str):
            message.id = message_id
    return converted


# ---------------------------------------------------------------------------
# LlamaIndex


_LLAMAINDEX_KIND = "llamaindex_messages"


@dataclass(frozen=True)
class _LlamaIndexWhere(MessageLocation):
    """Names the LlamaIndex block of an image whose ``data:`` URL is refused.

    A message with an image has one content part per block, in order, so
    the URL of part ``content[j]`` is the image of ``blocks[j]``.
    """

    def error(
        self,
        index: int,
        field: str | None,
        message: str,
        *,
        code: str | None = None,
        params: Mapping[str, Any] | None = None,
    ) -> RecordError:
        """The error of message ``index``, an image's field named as its LlamaIndex block."""
        if field is not None and field.startswith("content[") and field.endswith(".image_url.url"):
            field = "blocks" + field.removeprefix("content").removesuffix(".image_url.url")
        return super().error(index, field, message, code=code, params=params)


_LLAMAINDEX_ROLES = {
    "system": "system",
    "developer": "developer",
    "user": "user",
    "assistant": "assistant",
    "chatbot": "assistant",
    "model": "assistant",
    "tool": "tool",
}
"""LlamaIndex message roles and the chat role each is sent as (``function`` has none)."""
_LLAMAINDEX_FIELDS = {"assistant": ("tool_calls", "name"), "tool": ("tool_call_id", "name")}
"""The ``additional_kwargs`` keys taken per chat role (every other role: ``name``)."""


def from_llamaindex_messages(
    messages: Iterable[Any],
    *,
    conversation_id: str | None = None,
    start: datetime | None = None,
    source: str | None = None,
    system_retention: Retention | str = Retention.REQUIRED,
    tool_errors: ImportToolErrors = "error",
) -> CognitionFrame:
    """Build a frame from LlamaIndex chat messages (``ChatMessage``), one item per message.

    What a ``ChatMemoryBuffer`` or an agent holds. Each message is read as
    the OpenAI message it stands for and mapped as
    :func:`cognoxium.formats.openai.openai_messages_to_items` maps one (ids
    ``"<conversation_id>:<index>"``, a tool-calling assistant message grouped
    with its results, system messages ``required`` by default):

    - ``role``: ``system``, ``developer``, ``user``, ``assistant`` (and
      ``chatbot`` and ``model``, sent as ``assistant``) and ``tool``;
      ``function`` (the legacy function-calling API) is refused;
    - ``blocks``: text blocks, and in a user message image blocks given by
      URL or by bytes (sent as a ``data:`` URL);
    - ``additional_kwargs``: ``tool_calls`` (OpenAI's form, as LlamaIndex's
      OpenAI integration stores them) of an assistant message,
      ``tool_call_id`` of a tool message, and ``name``. Any other key is
      refused rather than lost.

    Parameters
    ----------
    messages
        ``llama_index.core.llms.ChatMessage`` objects.
    conversation_id, start, source, system_retention, tool_errors
        As in :func:`from_langchain_messages` (the source's kind is
        ``"llamaindex_messages"``).

    Returns
    -------
    CognitionFrame
        One row per message (a message with images: one per segment,
        grouped), in message order.

    Raises
    ------
    DependencyError
        If ``llama-index-core`` is not installed (extra ``llamaindex``).
    RecordError
        At the first message that is not a ``ChatMessage`` or cannot be
        mapped (a ``function`` role, a block other than text or image, an
        image outside a user message, an unknown ``additional_kwargs`` key,
        a tool result without its call), naming its 0-based ``row`` and the
        field (``blocks[1]``); nothing is returned. An image given by bytes
        that are not a PNG, JPEG, GIF or WebP image of its
        ``image_mimetype`` is refused as the OpenAI importer refuses its
        ``data:`` URL (code ``record.image_invalid``).

    Examples
    --------
    >>> from llama_index.core.llms import ChatMessage
    >>> cf = from_llamaindex_messages([
    ...     ChatMessage(role="system", content="Be brief."),
    ...     ChatMessage(role="user", content="Weather in Paris?"),
    ...     ChatMessage(role="assistant", content="", additional_kwargs={"tool_calls": [
    ...         {"id": "c1", "type": "function",
    ...          "function": {"name": "weather", "arguments": '{"city": "Paris"}'}}]}),
    ...     ChatMessage(role="tool", content="18 C", additional_kwargs={"tool_call_id": "c1"}),
    ... ], conversation_id="c")
    >>> cf.select("id", "role", "group_id").to_polars().rows()
    [('c:0', 'system', None), ('c:1', 'user', None), ('c:2', 'assistant', 'c:tools:2'),
     ('c:3', 'tool', 'c:tools:2')]
    """
    llms = _require("llama_index.core.llms")
    where = _LlamaIndexWhere(source)
    columns = ChatColumns(
        where, conversation_id, start, system_retention, _LLAMAINDEX_KIND, tool_errors=tool_errors
    )
    converted: list[Any] = []
    failure: RecordError | None = None
    try:
        for row, message in enumerate(messages):
            if not isinstance(message, llms.ChatMessage):
                raise RecordError(
                    f"expected a llama_index ChatMessage, got {type(message).__name__}",
                    source=source,
                    row=row,
                )
            converted.append(_llamaindex_openai(llms, message, row, where))
    except RecordError as exc:
        failure = exc
    # Added at once, so that an error of a message before the one that failed is raised first.
    columns.add_all(converted)
    if failure is not None:
        raise failure
    return CognitionFrame.from_conformed(columns.frame())


def _llamaindex_openai(llms: ModuleType, message: Any, row: int, where: MessageLocation) -> Any:
    """One LlamaIndex ``ChatMessage`` as the OpenAI message dict it stands for."""
    given = getattr(message.role, "value", message.role)
    role = _LLAMAINDEX_ROLES.get(given)
    if role is None:
        raise where.error(
            row, "role", f"role {given!r} is not supported; send function results as tool messages"
        )
    out: dict[str, Any] = {"role": role, "content": _llamaindex_content(llms, message, row, where)}
    taken = _LLAMAINDEX_FIELDS.get(role, ("name",))
    for key, value in message.additional_kwargs.items():
        if key not in taken:
            raise where.error(
                row,
                f"additional_kwargs.{key}",
                f"not supported in a {given} message, which takes {list(taken)}",
            )
        out[key] = _plain(value)
    if role == "assistant" and out["content"] == "" and out.get("tool_calls"):
        out["content"] = None  # a message that only calls tools
    return out


def _llamaindex_content(llms: ModuleType, message: Any, row: int, where: MessageLocation) -> Any:
    """The OpenAI content of a message's blocks: its text, or text and image_url parts."""
    blocks = message.blocks
    if all(isinstance(block, llms.TextBlock) for block in blocks):
        return "\n".join(block.text for block in blocks)  # as ChatMessage.content joins them
    parts: list[dict[str, Any]] = []
    for j, block in enumerate(blocks):
        if isinstance(block, llms.TextBlock):
            parts.append({"type": "text", "text": block.text})
        elif isinstance(block, llms.ImageBlock) and (block.url or block.image):
            parts.append({"type": "image_url", "image_url": {"url": _image_url(block)}})
        else:
            kind = type(block).__name__
            given = " given by path" if isinstance(block, llms.ImageBlock) else ""
            raise where.error(
                row,
                f"blocks[{j}]",
                f"only text blocks and image blocks given by URL or bytes are supported, got "
                f"{kind}{given}",
            )
    return parts


def _image_url(block: Any) -> str:
    """An image block's URL: its own, or its bytes as a base64 ``data:`` URL."""
    if block.url:
        return str(block.url)
    data = block.image
    text = data.decode("ascii") if _is_base64(data) else base64.b64encode(data).decode("ascii")
    return f"data:{block.image_mimetype or 'image/png'};base64,{text}"


def _is_base64(data: bytes) -> bool:
    """Whether ``data`` is already base64 text (LlamaIndex stores image bytes encoded)."""
    try:
        return base64.b64encode(base64.b64decode(data, validate=True)) == data
    except ValueError:
        return False


def _plain(value: Any) -> Any:
    """``value`` with pydantic models (OpenAI SDK tool calls) as plain dicts and lists."""
    if isinstance(value, list):
        return [_plain(v) for v in value]
    dump = getattr(value, "model_dump", None)
    return dump(mode="json", exclude_none=True) if callable(dump) else value


def to_llamaindex_messages(data: ContextPack | CognitionFrame | pl.DataFrame) -> list[Any]:
    """Render items as LlamaIndex ``ChatMessage`` objects, in row order.

    A pack is rendered from :attr:`ContextPack.messages
    <cognoxium.packing.packer.ContextPack.messages>` (policy renderings and
    gap notes as packed), other items by
    :func:`cognoxium.formats.openai.to_openai_messages`: each OpenAI message
    becomes a ``ChatMessage`` of its role, its text as a text block, its
    images as image blocks, and ``tool_calls``, ``tool_call_id`` and
    ``name`` in ``additional_kwargs``, as :func:`from_llamaindex_messages`
    reads them.

    Parameters
    ----------
    data
        A :class:`~cognoxium.packing.packer.ContextPack`, a
        :class:`CognitionFrame` or a Polars frame of items.

    Returns
    -------
    list of llama_index.core.llms.ChatMessage
        One per message sent.

    Raises
    ------
    DependencyError
        If ``llama-index-core`` is not installed (extra ``llamaindex``).
    RecordError, SchemaError
        As :func:`cognoxium.formats.openai.to_openai_messages` raises them.

    Examples
    --------
    >>> from llama_index.core.llms import ChatMessage
    >>> cf = from_llamaindex_messages([ChatMessage(role="user", content="Hi")])
    >>> [(m.role.value, m.content) for m in to_llamaindex_messages(cf)]
    [('user', 'Hi')]
    """
    llms = _require("llama_index.core.llms")
    if isinstance(data, ContextPack):
        messages = data.to_openai()
    else:
        messages = to_openai_messages(data.collect() if isinstance(data, CognitionFrame) else data)
    return [_chat_message(llms, message) for message in messages]


def _chat_message(llms: ModuleType, message: dict[str, Any]) -> Any:
    """One OpenAI message dict as a LlamaIndex ``ChatMessage``."""
    content = message.get("content")
    if isinstance(content, list):
        blocks = [
            llms.TextBlock(text=part["text"])
            if part["type"] == "text"
            else llms.ImageBlock(url=part["image_url"]["url"])
            for part in content
        ]
    else:
        blocks = [llms.TextBlock(text=content or "")]
    extra = {k: message[k] for k in ("tool_calls", "tool_call_id", "name") if k in message}
    return llms.ChatMessage(role=message["role"], blocks=blocks, additional_kwargs=extra)


def from_llamaindex_nodes(
    nodes: Iterable[Any],
    *,
    created_at: datetime | None = None,
) -> CognitionFrame:
    """Build a frame of ``document`` items from LlamaIndex nodes or retrieval results.

    Parameters
    ----------
    nodes
        ``llama_index.core.schema`` nodes (``TextNode``, ``Document``, any
        ``BaseNode`` with text) or ``NodeWithScore`` retrieval results.
    created_at
        Timezone-aware creation time of every item; defaults to
        :data:`cognoxium.formats.openai.CHAT_EPOCH`.

    Returns
    -------
    CognitionFrame
        One row per node, in order: ``id`` is the node id, ``text`` its
        content without metadata (``get_content(MetadataMode.NONE)``),
        ``metadata`` its metadata, ``rank`` the retrieval score (null without
        one), ``parents`` the id of its source document (``ref_doc_id``) when
        it has one, and ``sources`` ``{"uri", "kind": "llamaindex_node"}``
        from the first of the metadata keys ``source``, ``file_path``,
        ``url`` that is present.

    Raises
    ------
    DependencyError
        If ``llama-index-core`` is not installed (extra ``llamaindex``).
    RecordError
        At the first element that is not a node, a node with image content
        and no text, a score that is not a finite number, or metadata that is
        not JSON (naming its 0-based ``row`` and the field); also for two
        nodes with one id.

    Examples
    --------
    >>> from llama_index.core.schema import NodeWithScore, TextNode
    >>> hits = [NodeWithScore(node=TextNode(id_="n1", text="Refunds take 5 days.",
    ...                                     metadata={"file_path": "faq.md"}), score=0.8),
    ...         NodeWithScore(node=TextNode(id_="n2", text="Shipping is free."), score=0.3)]
    >>> from_llamaindex_nodes(hits).select("id", "text", "rank").to_polars().rows()
    [('n1', 'Refunds take 5 days.', 0.8), ('n2', 'Shipping is free.', 0.3)]
    """
    schema = _require("llama_index.core.schema")
    when = _checked_start(created_at, None)
    records: list[dict[str, Any]] = []
    with _earlier_errors_first(records):
        for row, element in enumerate(nodes):
            records.append(_node_record(schema, element, row, when))
    return CognitionFrame.from_conformed(_records_frame(records))


def _node_record(schema: ModuleType, element: Any, row: int, when: datetime) -> dict[str, Any]:
    """One LlamaIndex node as a record of item fields; ``RecordError`` if it cannot be."""
    score: Any = None
    node = element
    if isinstance(element, schema.NodeWithScore):
        node, score = element.node, element.score
    if not isinstance(node, schema.BaseNode):
        raise RecordError(
            f"expected a llama_index BaseNode or NodeWithScore, got {type(node).__name__}",
            row=row,
        )
    if score is not None and (
        isinstance(score, bool)
        or not isinstance(score, int | float)
        or not math.isfinite(float(score))
    ):
        raise RecordError(f"must be a finite number, got {score!r}", row=row, field="score")
    text = node.get_content(metadata_mode=schema.MetadataMode.NONE)
    if not text and getattr(node, "image", None) is not None:
        raise RecordError(
            "an image node has no text; describe or caption it as text first",
            row=row,
            field="text",
        )
    metadata = dict(node.metadata)
    uri = next((metadata[k] for k in _NODE_URI_KEYS if metadata.get(k) is not None), None)
    parent = node.ref_doc_id
    return {
        "id": node.node_id,
        "role": "document",
        "text": text,
        "sources": [{"uri": str(uri), "kind": _NODE_KIND}] if uri is not None else [],
        "rank": None if score is None else float(score),
        "parents": [parent] if isinstance(parent, str) and parent else [],
        "created_at": when,
        "metadata": _json_object(metadata, row=row, source=None),
    }


def _json_object(metadata: Mapping[str, Any], *, row: int, source: str | None) -> dict[str, Any]:
    """Check that metadata is a JSON object (names the first key that is not JSON)."""
    for key, value in metadata.items():
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise RecordError(
                f"metadata values must be JSON, got {type(value).__name__} ({exc})",
                source=source,
                row=row,
                field=f"metadata.{key}",
            ) from None
    return dict(metadata)


# ---------------------------------------------------------------------------
# manifests and lineage as Arrow and Polars


def manifests_to_polars(manifests: Iterable[PackManifest]) -> pl.DataFrame:
    """The entries of many manifests as one Polars frame, one row per (manifest, item).

    Parameters
    ----------
    manifests
        Manifests, for example those of a batch (see
        :func:`cognoxium.packing.manifests.read_manifests`).

    Returns
    -------
    polars.DataFrame
        The columns ``manifest`` (0-based index of the manifest, UInt32),
        ``label``, ``budget`` and ``used_tokens`` (tokens) followed by the
        entry columns of :meth:`PackManifest.to_polars
        <cognoxium.packing.packer.PackManifest.to_polars>`; manifests in order,
        entries in input order.

    Examples
    --------
    >>> from datetime import UTC, datetime
    >>> cf = CognitionFrame([{"id": "a", "role": "user", "text": "hi"}])
    >>> packs = [cf.pack(b, as_of=datetime(2030, 1, 1, tzinfo=UTC), label=f"b{b}")
    ...          for b in (5, 50)]
    >>> df = manifests_to_polars(p.manifest for p in packs)
    >>> df.select("label", "budget", "id", "decision", "reason").rows()
    [('b5', 5, 'a', 'excluded', 'over_budget'), ('b50', 50, 'a', 'included', 'selected')]
    """
    frames = []
    for index, manifest in enumerate(manifests):
        entries = manifest.to_polars()
        frames.append(
            entries.select(
                pl.lit(index, pl.UInt32).alias("manifest"),
                pl.lit(manifest.label, pl.String).alias("label"),
                pl.lit(manifest.budget, pl.Int64).alias("budget"),
                pl.lit(manifest.used_tokens, pl.Int64).alias("used_tokens"),
                pl.all(),
            )
        )
    if not frames:
        return pl.DataFrame(
            schema={
                "manifest": pl.UInt32(),
                "label": pl.String(),
                "budget": pl.Int64(),
                "used_tokens": pl.Int64(),
                **ENTRY_SCHEMA,
            }
        )
    return pl.concat(frames, how="vertical")


def lineage_to_polars(data: PackManifest | CognitionFrame | pl.DataFrame) -> pl.DataFrame:
    """The lineage edges of a manifest (its packed items) or of a frame of items.

    Parameters
    ----------
    data
        A :class:`~cognoxium.packing.packer.PackManifest` (the edges it recorded
        for the items it packed), a :class:`CognitionFrame` (run first) or a
        Polars frame with ``id``, ``content_hash``, ``parents`` and
        ``lineage``.

    Returns
    -------
    polars.DataFrame
        Columns of :data:`cognoxium.governance.lineage.EDGE_SCHEMA`, children in row order.

    Raises
    ------
    SchemaError
        If ``data`` is of another type.

    Examples
    --------
    >>> cf = CognitionFrame([
    ...     {"id": "t1", "role": "user", "text": "I moved to Lyon."},
    ...     {"id": "m1", "role": "memory", "text": "Lives in Lyon.", "parents": ["t1"]}])
    >>> lineage_to_polars(cf).select("child_id", "parent_id", "operation").rows()
    [('m1', 't1', 'derive')]
    """
    if isinstance(data, PackManifest):
        return pl.DataFrame(data.lineage, schema=EDGE_SCHEMA)
    if isinstance(data, CognitionFrame):
        return data.lineage()
    if isinstance(data, pl.DataFrame):
        return lineage_edges(data)
    raise SchemaError(
        "lineage_to_polars takes a PackManifest, a CognitionFrame or a Polars frame of items, "
        f"got {type(data).__name__}"
    )


def lineage_to_arrow(data: PackManifest | CognitionFrame | pl.DataFrame) -> pa.Table:
    """The lineage edges of :func:`lineage_to_polars` as an Arrow table (all columns strings).

    Parameters
    ----------
    data
        As in :func:`lineage_to_polars`.

    Returns
    -------
    pyarrow.Table
        The rows and columns of :func:`lineage_to_polars`.

    Raises
    ------
    SchemaError
        As in :func:`lineage_to_polars`.

    Examples
    --------
    >>> cf = CognitionFrame([{"id": "a", "role": "user", "text": "hi", "parents": ["x"]}])
    >>> lineage_to_arrow(cf).to_pylist()[0]["parent_id"]
    'x'
    """
    return lineage_to_polars(data).to_arrow()
