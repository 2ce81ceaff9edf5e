"""Chat messages laid out as columns give the frames and errors of item by item conversion.

The reference is the conversion one validated ``ContextItem`` at a time
(``openai_messages_to_items`` and, for LangChain, LangChain's own
``convert_to_openai_messages`` per message), laid out with ``items_to_frame``.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal
from pydantic import ValidationError

from cognoxium.exceptions import RecordError
from cognoxium.formats.openai import (
    MessageLocation,
    from_openai_messages,
    indexed_chat_items,
    openai_messages_to_items,
)
from cognoxium.items import MAX_ID_LENGTH
from cognoxium.items.convert import items_to_frame
from cognoxium.items.model import ContextItem, Source
from tests.reach import reached, reaching

lc = pytest.importorskip("langchain_core.messages")
from cognoxium.formats.interop import from_langchain_messages  # noqa: E402

TEXTS = st.one_of(
    st.text(max_size=12),
    st.sampled_from(["", "héllo wörld", "日本語 テキスト", "emoji 🙂", "a\nb\tc", '{"a": 1}']),
    st.just("bad \ud800 surrogate"),
)
NAMES = st.one_of(st.none(), st.sampled_from(["ada", "bo", "名前"]), st.just(""), st.just(7))
CALL_IDS = st.sampled_from(["c1", "c2", "c3"])
VALID_IMAGES: list[dict[str, Any]] = [
    {"type": "image_url", "image_url": {"url": "https://x.org/a.png"}},
    {
        "type": "image_url",
        "image_url": {"url": "data:image/png;base64,iVBORw0KGgo=", "detail": "low"},
    },
]
IMAGE = st.sampled_from(
    [
        *VALID_IMAGES,
        {"type": "image_url", "image_url": {"url": ""}},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},  # not a PNG
    ]
)


VALID_TEXTS = TEXTS.filter(lambda t: "\ud800" not in t)
VALID_NAMES = st.one_of(st.none(), st.sampled_from(["ada", "bo", "名前"]))
VALID_IMAGE = st.sampled_from(VALID_IMAGES)


@st.composite
def openai_message(draw: st.DrawFn, valid: bool = False) -> Any:
    """A chat message, mostly valid: text or parts, names, tool calls and results, bad roles.

    With ``valid``, only what the importers take: no unknown role, no tool
    result (whose call may be missing), no lone surrogate, empty or non-text
    name, empty image URL, inline image that is not one or tool arguments that are not JSON.
    """
    roles = ["system", "developer", "user", "assistant"]
    role = draw(st.sampled_from(roles if valid else [*roles, "tool", "robot"]))
    texts, image = (VALID_TEXTS, VALID_IMAGE) if valid else (TEXTS, IMAGE)
    content: Any = draw(texts)
    if role == "user" and draw(st.booleans()):
        content = draw(st.lists(st.one_of(texts.map(lambda t: {"type": "text", "text": t}), image)))
    message: dict[str, Any] = {"role": role, "content": content}
    name = draw(VALID_NAMES if valid else NAMES)
    if name is not None:
        message["name"] = name
    if role == "assistant" and draw(st.booleans()):
        ids = draw(st.lists(CALL_IDS, min_size=1, max_size=2, unique=True))
        arguments = draw(st.sampled_from(['{"q": "é"}', "{}"] + ([] if valid else ["not json"])))
        message["tool_calls"] = [
            {"id": i, "type": "function", "function": {"name": "f", "arguments": arguments}}
            for i in ids
        ]
        message["content"] = draw(st.sampled_from([None, "", "calling"]))
    if role == "tool":
        message["tool_call_id"] = draw(CALL_IDS)
    return message


def reference_frame(messages: list[Any], **options: Any) -> pl.DataFrame:
    return items_to_frame(openai_messages_to_items(messages, **options))


def outcome(convert: Any) -> tuple[str, Any]:
    """The frame a conversion gives, or its error's text, row, line and field."""
    try:
        frame = convert()
    except RecordError as exc:
        return "error", (str(exc), exc.row, exc.line, exc.field)
    except ValidationError as exc:  # the reference of documents validates items directly
        return "error", (str(exc), None, None, None)
    return "frame", frame


@st.composite
def histories(draw: st.DrawFn, message: Any) -> list[Any]:
    """Lists of up to 8 messages, all valid 15 times in 16, else each valid or not."""
    valid = draw(st.sampled_from([True] * 15 + [False]))
    return draw(st.lists(message(valid=valid), max_size=8))


@reaching(0.8)  # both outcomes compared exactly: the frames, or the errors
@settings(max_examples=150, deadline=None)
@given(
    messages=histories(openai_message),
    conversation_id=st.sampled_from([None, "conv", "日本"]),
    source=st.sampled_from([None, "chat.jsonl"]),
    retention=st.sampled_from(["required", "optional"]),
)
def test_openai_columns_equal_item_by_item_conversion(
    messages: list[Any], conversation_id: str | None, source: str | None, retention: str
) -> None:
    options = {
        "conversation_id": conversation_id,
        "source": source,
        "system_retention": retention,
        "start": datetime(2024, 5, 1, 12, tzinfo=timezone(timedelta(hours=2))),
    }
    kind, expected = outcome(lambda: reference_frame(messages, **options))
    got_kind, got = outcome(lambda: from_openai_messages(messages, **options).collect())
    assert got_kind == kind
    if kind == "frame":
        assert_frame_equal(got, expected)
        reached("frames equal")
    else:
        assert got == expected
        reached("refused alike")


@settings(max_examples=60, deadline=None)
@given(
    texts=st.lists(st.text(max_size=20), min_size=1, max_size=30),
    names=st.lists(st.sampled_from([None, "ada", "ü"]), min_size=30, max_size=30),
)
def test_plain_text_histories_take_the_column_path_with_equal_frames(
    texts: list[str], names: list[str | None]
) -> None:
    roles = ("system", "user", "assistant", "developer")
    messages = [
        {"role": roles[i % 4], "content": t, **({"name": names[i]} if names[i] else {})}
        for i, t in enumerate(texts)
    ]
    assert_frame_equal(from_openai_messages(messages).collect(), reference_frame(messages))


def test_an_invalid_item_before_a_malformed_message_is_the_error_reported() -> None:
    # Text that is not valid Unicode used to escape as pydantic's ValidationError.
    messages = [
        {"role": "user", "content": "fine"},
        {"role": "user", "content": "bad \ud800"},
        {"role": "robot", "content": "malformed"},
    ]
    with pytest.raises(RecordError) as expected:
        openai_messages_to_items(messages)
    with pytest.raises(RecordError) as got:
        from_openai_messages(messages)
    assert (got.value.row, got.value.field) == (1, "text")
    assert "lone surrogate U+D800 at character 4" in got.value.message
    assert str(got.value) == str(expected.value)


def test_an_invalid_conversation_id_is_worded_as_the_item_model_words_it() -> None:
    messages = [{"role": "user", "content": "hi"}]
    with pytest.raises(RecordError) as expected:
        openai_messages_to_items(messages, conversation_id="a\nb")
    with pytest.raises(RecordError) as got:
        from_openai_messages(messages, conversation_id="a\nb")
    assert str(got.value) == str(expected.value)
    assert got.value.field == "id"


# ---------------------------------------------------------------------------
# LangChain


def reference_langchain(messages: list[Any], source: str | None) -> pl.DataFrame:
    """The item by item conversion: LangChain's converter, then one validated item per part."""
    dicts = [lc.convert_to_openai_messages(m) for m in messages]
    pairs = indexed_chat_items(dicts, MessageLocation(source), None, None)
    sources = (Source(uri=source, kind="langchain_messages"),) if source else ()
    out = []
    for index, item in pairs:
        update: dict[str, Any] = {"sources": sources}
        message_id = messages[index].id
        if isinstance(message_id, str) and message_id:
            update["metadata"] = {**item.metadata, "message_id": message_id}
        out.append(item.model_copy(update=update))
    return items_to_frame(out)


@st.composite
def langchain_message(draw: st.DrawFn, valid: bool = False) -> Any:
    """A LangChain message; with ``valid``, no tool result, empty id or name, or empty URL."""
    kinds = ["system", "human", "ai", "ai_tools"]
    kind = draw(st.sampled_from(kinds if valid else [*kinds, "tool"]))
    text = draw(VALID_TEXTS)
    message_id = draw(st.sampled_from([None, "m-1", "ü-2"] if valid else [None, "m-1", "ü-2", ""]))
    name = draw(st.sampled_from([None, "ada"] if valid else [None, "ada", ""]))
    if kind == "system":
        return lc.SystemMessage(text, id=message_id, name=name)
    if kind == "human":
        if draw(st.booleans()):
            parts: Any = [{"type": "text", "text": text}, draw(VALID_IMAGE if valid else IMAGE)]
            return lc.HumanMessage(parts, id=message_id)
        return lc.HumanMessage(text, id=message_id, name=name)
    if kind == "ai":
        return lc.AIMessage(text, id=message_id, name=name)
    if kind == "ai_tools":
        calls = [{"name": "f", "args": {"q": text}, "id": draw(CALL_IDS)}]
        return lc.AIMessage(draw(st.sampled_from(["", "calling"])), tool_calls=calls, id=message_id)
    return lc.ToolMessage(text, tool_call_id=draw(CALL_IDS), id=message_id)


@reaching(0.8)  # both outcomes compared exactly: the frames, or the errors
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    messages=histories(langchain_message),
    source=st.sampled_from([None, "history"]),
)
def test_langchain_columns_equal_item_by_item_conversion(
    messages: list[Any], source: str | None
) -> None:
    kind, expected = outcome(lambda: reference_langchain(messages, source))
    got_kind, got = outcome(lambda: from_langchain_messages(messages, source=source).collect())
    assert got_kind == kind
    if kind == "frame":
        assert_frame_equal(got, expected)
        reached("frames equal")
    else:
        assert got == expected
        reached("refused alike")


def test_plain_langchain_messages_match_langchains_own_converter() -> None:
    messages = [
        lc.SystemMessage("Be brief.", name="policy"),
        lc.HumanMessage("", id="m1"),
        lc.AIMessage("Hello", name=""),
        lc.HumanMessage("x", additional_kwargs={"refusal": None}),
    ]
    assert_frame_equal(
        from_langchain_messages(messages).collect(), reference_langchain(messages, None)
    )


def test_a_system_message_with_another_openai_role_keeps_it() -> None:
    message = lc.SystemMessage("Rules.", additional_kwargs={"__openai_role__": "developer"})
    frame = from_langchain_messages([message]).collect()
    assert frame.get_column("role").cast(pl.String).to_list() == ["developer"]
    assert frame.get_column("created_at").to_list() == [datetime(1970, 1, 1, tzinfo=UTC)]


# ---------------------------------------------------------------------------
# LangChain documents and LlamaIndex nodes


def reference_documents(documents: list[Any]) -> pl.DataFrame:
    """Item by item: one validated ContextItem per document, as the importer first did."""
    items = []
    for row, document in enumerate(documents):
        metadata = dict(document.metadata)
        sources = []
        if metadata.get("source") is not None:
            sources.append({"uri": str(metadata["source"]), "kind": "langchain_document"})
            if isinstance(metadata.get("title"), str):
                sources[0]["title"] = metadata["title"]
        items.append(
            ContextItem(
                id=document.id or f"doc:{row}",
                role="document",
                text=document.page_content,
                sources=sources,
                created_at=datetime(1970, 1, 1, tzinfo=UTC),
                metadata=metadata,
            )
        )
    return items_to_frame(items)


@st.composite
def documents_drawn(draw: st.DrawFn) -> list[tuple[str, str | None, dict[str, Any]]]:
    """Up to 6 documents; 15 times in 16 valid (text, ids unique or none), else any."""
    valid = draw(st.sampled_from([True] * 15 + [False]))
    metadata = st.sampled_from([{}, {"source": "faq.md", "title": "FAQ"}, {"source": 3, "n": 1.5}])
    ids = st.sampled_from([None, "d1", "d2", "ü"])
    drawn = draw(st.lists(st.tuples(VALID_TEXTS if valid else TEXTS, ids, metadata), max_size=6))
    if valid:  # a document without an id is named by its row: doc:<row>
        drawn = [(t, i if i not in {d[1] for d in drawn[:k]} else None, m)
                 for k, (t, i, m) in enumerate(drawn)]  # fmt: skip
    return drawn


@reaching(0.8)  # both outcomes compared exactly: the frames, or the errors
@settings(max_examples=60, deadline=None)
@given(documents_drawn())
def test_langchain_documents_equal_item_by_item_conversion(
    drawn: list[tuple[str, str | None, dict[str, Any]]],
) -> None:
    from langchain_core.documents import Document

    from cognoxium.formats.interop import from_langchain_documents

    documents = [Document(text, id=i, metadata=m) for text, i, m in drawn]
    kind, expected = outcome(lambda: reference_documents(documents))
    got_kind, got = outcome(lambda: from_langchain_documents(documents).collect())
    assert got_kind == kind
    if kind == "frame":
        assert_frame_equal(got, expected)
        reached("frames equal")
    else:
        # The reference words errors as pydantic does; the importer names row and field.
        assert isinstance(got, tuple)
        assert got[1] is not None
        reached("refused alike")


def test_llamaindex_nodes_keep_rank_parents_and_sources_as_items_do() -> None:
    schema = pytest.importorskip("llama_index.core.schema")
    from cognoxium.formats.interop import from_llamaindex_nodes

    nodes = [
        schema.NodeWithScore(
            node=schema.TextNode(id_="n1", text="é", metadata={"url": "u"}), score=2
        ),
        schema.TextNode(id_="n2", text="two"),
    ]
    got = from_llamaindex_nodes(nodes).collect()
    expected = items_to_frame(
        [
            ContextItem(
                id="n1", role="document", text="é", rank=2.0,
                sources=[{"uri": "u", "kind": "llamaindex_node"}],
                created_at=datetime(1970, 1, 1, tzinfo=UTC), metadata={"url": "u"},
            ),
            ContextItem(
                id="n2", role="document", text="two",
                created_at=datetime(1970, 1, 1, tzinfo=UTC),
            ),
        ]
    )  # fmt: skip
    assert_frame_equal(got, expected)


def test_a_bad_document_before_a_wrong_object_is_the_error_reported() -> None:
    # Text that is not valid Unicode used to escape as pydantic's ValidationError.
    from langchain_core.documents import Document

    from cognoxium.formats.interop import from_langchain_documents

    with pytest.raises(RecordError) as got:
        from_langchain_documents([Document("ok"), Document("bad \ud800"), "not a document"])
    assert (got.value.row, got.value.field) == (1, "payload.text.text")
    assert "lone surrogate U+D800" in got.value.message


def test_two_documents_with_one_id_name_both_rows() -> None:
    from langchain_core.documents import Document

    from cognoxium.formats.interop import from_langchain_documents

    with pytest.raises(RecordError, match=r"duplicate id 'd' \(first at row 0\)") as got:
        from_langchain_documents([Document("a", id="d"), Document("b", id="d")])
    assert (got.value.row, got.value.field) == (1, "id")


@pytest.mark.parametrize(
    ("conversation_id", "field"),
    [("x" * 1030, "id"), ("a\x07b", "id")],
)
def test_plain_histories_check_their_id_prefix_once_and_word_errors_as_items_do(
    conversation_id: str, field: str
) -> None:
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
    with pytest.raises(RecordError) as expected:
        openai_messages_to_items(messages, conversation_id=conversation_id)
    with pytest.raises(RecordError) as got:
        from_openai_messages(messages, conversation_id=conversation_id)
    assert str(got.value) == str(expected.value)
    assert (got.value.row, got.value.field) == (0, field)


TOOL_STEP = [
    {"role": "user", "content": "hi"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "done"},
]
IMAGE_PARTS = [
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "look"},
            {"type": "image_url", "image_url": {"url": "https://x.org/a.png"}},
        ],
    }
]


@pytest.mark.parametrize(
    ("messages", "row", "field"),
    [(TOOL_STEP, 1, "group_id"), (IMAGE_PARTS, 0, "id")],
    ids=["tool-group", "image-part"],
)
def test_ids_longer_than_the_prefix_and_index_are_checked_whole(
    messages: list[Any], row: int, field: str
) -> None:
    # "p:1" fits the id limit where "p:tools:1" and "p:0.1" do not.
    conversation_id = "p" * (MAX_ID_LENGTH - 2)
    with pytest.raises(RecordError) as expected:
        openai_messages_to_items(messages, conversation_id=conversation_id)
    with pytest.raises(RecordError) as got:
        from_openai_messages(messages, conversation_id=conversation_id)
    assert str(got.value) == str(expected.value)
    assert (got.value.row, got.value.field) == (row, field)


def test_a_history_that_runs_past_the_year_9999_is_a_record_error() -> None:
    # Item by item conversion used to let Python's OverflowError escape.
    start = datetime(9999, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC)
    messages = [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
    with pytest.raises(RecordError) as expected:
        openai_messages_to_items(messages, start=start)
    with pytest.raises(RecordError) as got:
        from_openai_messages(messages, start=start)
    assert str(got.value) == str(expected.value)
    assert (got.value.row, got.value.field) == (1, "created_at")
    assert "years 1 to 9999" in got.value.message


@pytest.mark.parametrize("conversation_id", ["", " ", "\t\n"])
def test_a_blank_conversation_id_is_refused_by_both_conversions(conversation_id: str) -> None:
    messages = [{"role": "user", "content": "hi"}]
    for convert in (openai_messages_to_items, from_openai_messages):
        with pytest.raises(RecordError, match="non-blank string") as error:
            convert(messages, conversation_id=conversation_id)
        assert error.value.field == "conversation_id"
