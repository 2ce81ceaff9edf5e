"""A user message with text and images stays one message in every round trip through a pack."""

from __future__ import annotations

import copy
import json
from base64 import b64encode
from datetime import UTC, datetime
from typing import Any

import numpy as np
import polars as pl
import pytest

from cognoxium.exceptions import RecordError
from cognoxium.formats.anthropic import from_anthropic_messages, to_anthropic_messages
from cognoxium.formats.interop import from_langchain_messages, to_langchain_messages
from cognoxium.formats.openai import from_openai_messages, read_openai_jsonl, to_openai_messages
from cognoxium.packing._messages import chat_columns, message_parts, sent_messages
from cognoxium.packing.message_rules import validate_anthropic_messages, validate_openai_messages
from cognoxium.packing.options import PackOptions
from cognoxium.packing.packer import pack
from cognoxium.tokens.profiles import get_profile
from tests.image_files import BUILDERS, png
from tests.packing.chats import documents

PROFILE = get_profile("cl100k_base")
AS_OF = datetime(2024, 1, 1, tzinfo=UTC)
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC"
PNG_URL = f"data:image/png;base64,{PNG}"
CAT = "https://example.org/cat.png"
DOG = "https://example.org/dog.jpg"


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def image_url(url: str, detail: str | None = None) -> dict[str, Any]:
    inner = {"url": url} if detail is None else {"url": url, "detail": detail}
    return {"type": "image_url", "image_url": inner}


OPENAI: list[dict[str, Any]] = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": [text("What is on this?"), image_url(CAT, "low")], "name": "ada"},
    {"role": "assistant", "content": "A cat."},
    # Two multi-part messages in a row stay two messages.
    {"role": "user", "content": [image_url(DOG, "high"), text("And this?")]},
    {"role": "user", "content": [text("Compare:"), image_url(CAT, "auto"), text("Same cat?")]},
    {"role": "assistant", "content": "Yes."},
]


def assert_counted(result: Any) -> None:
    """The pack costs what it sends, and sends what the APIs take."""
    assert result.used_tokens == PROFILE.request_tokens(result.messages)
    validate_openai_messages(result.messages)
    validate_anthropic_messages(result.to_anthropic())


def assert_valid(result: Any) -> None:
    validate_openai_messages(result.messages)
    validate_anthropic_messages(result.to_anthropic())


def test_openai_round_trip_keeps_each_message_whole() -> None:
    cf = from_openai_messages(OPENAI, conversation_id="c")
    result = cf.pack(10_000, as_of=AS_OF, profile=PROFILE)
    assert result.to_openai() == OPENAI
    assert to_openai_messages(cf) == OPENAI
    assert_counted(result)
    # The message's framing (name included) is counted once, on its first part.
    costs = dict(
        zip(result.manifest.to_polars()["id"], result.manifest.to_polars()["tokens"], strict=True)
    )
    assert costs["c:1.0"] + costs["c:1.1"] == PROFILE.message_tokens(OPENAI[1])


def test_openai_pack_sends_a_message_whole_or_not_at_all() -> None:
    cf = from_openai_messages(OPENAI, conversation_id="c")
    full = cf.pack(10_000, as_of=AS_OF, profile=PROFILE)
    short = cf.pack(full.used_tokens - 1, as_of=AS_OF, profile=PROFILE)
    assert short.used_tokens < full.used_tokens
    for message in short.to_openai():
        if message["role"] == "user":
            assert message in OPENAI
    sent = set(short.ids)
    for prefix in ("c:1.", "c:3.", "c:4."):
        parts = {i for i in full.ids if i.startswith(prefix)}
        assert parts <= sent or not parts & sent
    assert_counted(short)


def anthropic_image(source: dict[str, Any]) -> dict[str, Any]:
    return {"type": "image", "source": source}


ANTHROPIC: list[dict[str, Any]] = [
    {
        "role": "user",
        "content": [text("What is on this?"), anthropic_image({"type": "url", "url": CAT})],
    },
    {"role": "assistant", "content": [text("A cat.")]},
    {
        "role": "user",
        "content": [anthropic_image({"type": "url", "url": DOG}), text("And this?")],
    },
]


def test_anthropic_round_trip_keeps_each_message_whole() -> None:
    cf = from_anthropic_messages(copy.deepcopy(ANTHROPIC), system="Be brief.", conversation_id="c")
    result = cf.pack(10_000, as_of=AS_OF, profile=PROFILE)
    assert result.to_anthropic() == {"system": "Be brief.", "messages": ANTHROPIC}
    assert to_anthropic_messages(cf) == result.to_anthropic()
    assert [len(m["content"]) for m in result.messages if m["role"] == "user"] == [2, 2]
    assert_counted(result)


def test_anthropic_base64_image_round_trip_keeps_the_message_whole() -> None:
    base64 = {"type": "base64", "media_type": "image/png", "data": PNG}
    messages = [{"role": "user", "content": [anthropic_image(base64), text("And this?")]}]
    cf = from_anthropic_messages(copy.deepcopy(messages), conversation_id="c")
    result = cf.pack(10_000, as_of=AS_OF, profile=PROFILE)
    assert result.to_anthropic() == {"messages": messages}
    assert result.messages == [{"role": "user", "content": [image_url(PNG_URL), text("And this?")]}]
    # The 1 x 1 PNG: framing 4, one tile 255, "And this?" 3, priming 3. Before: 1455.
    assert result.used_tokens == 4 + 255 + 3 + 3
    assert_counted(result)


NO_DETAIL: list[dict[str, Any]] = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": [text("What is on this?"), image_url(CAT)], "name": "ada"},
    {"role": "assistant", "content": "A cat."},
    {"role": "user", "content": [image_url(PNG_URL), image_url(DOG, "low"), text("And this?")]},
]


def test_openai_images_without_detail_round_trip_without_one() -> None:
    # Before, each came back with "detail": "auto" added.
    cf = from_openai_messages(copy.deepcopy(NO_DETAIL), conversation_id="c")
    result = cf.pack(10_000, as_of=AS_OF, profile=PROFILE)
    assert result.to_openai() == NO_DETAIL
    assert to_openai_messages(cf) == NO_DETAIL
    assert_counted(result)
    # Costed as "auto": the URL of unknown size at the most (1445), the data URL at its size.
    costs = dict(
        zip(result.manifest.to_polars()["id"], result.manifest.to_polars()["tokens"], strict=True)
    )
    assert costs["c:1.1"] == 1445
    assert costs["c:3.0"] == 4 + 255
    assert costs["c:3.1"] == 85


def test_a_data_url_image_costs_what_a_recount_of_the_request_gives() -> None:
    messages = [{"role": "user", "content": [image_url(PNG_URL)]}]
    result = from_openai_messages(messages, conversation_id="c").pack(
        10_000, as_of=AS_OF, profile=PROFILE
    )
    # Framing 4, the 1 x 1 image one 512 px tile (85 + 170), priming 3. Before: 1452.
    assert result.used_tokens == PROFILE.request_tokens(result.messages) == 262
    assert result.to_openai() == messages


@pytest.mark.parametrize(
    ("detail", "used"),
    [(None, 772), ("high", 772), ("auto", 772), ("low", 92)],
)
def test_a_large_data_url_image_is_tiled_as_the_provider_documents(
    detail: str | None, used: int
) -> None:
    # A PNG header claiming 4000 x 3000: fitted to 2048 x 1536, its short side to 768, so
    # 1024 x 768 covers 2 x 2 tiles, 85 + 4 * 170 = 765; low detail 85. Framing 4, priming 3.
    url = "data:image/png;base64," + b64encode(png(4000, 3000)).decode("ascii")
    messages = [{"role": "user", "content": [image_url(url, detail)]}]
    result = from_openai_messages(messages, conversation_id="c").pack(
        10_000, as_of=AS_OF, profile=PROFILE
    )
    assert result.used_tokens == PROFILE.request_tokens(result.messages) == used
    assert result.to_openai() == messages


def test_a_png_data_url_cut_before_its_size_stays_an_image_at_the_most_it_can_cost() -> None:
    # Its signature is a PNG's, so it is taken; its size cannot be read. (A bmp or svg data
    # URL, once sent as text and then as an image at this cost, is refused: see below.)
    url = "data:image/png;base64,iVBORw0KGgo="
    messages = [{"role": "user", "content": [image_url(url)]}]
    result = from_openai_messages(messages, conversation_id="c").pack(
        10_000, as_of=AS_OF, profile=PROFILE
    )
    assert result.to_openai() == messages
    assert result.used_tokens == PROFILE.request_tokens(result.messages) == 4 + 1445 + 3


def test_anthropic_images_are_sent_to_openai_without_detail() -> None:
    cf = from_anthropic_messages(copy.deepcopy(ANTHROPIC), conversation_id="c")
    result = cf.pack(10_000, as_of=AS_OF, profile=PROFILE)
    sent = [p for m in result.messages if isinstance(m["content"], list) for p in m["content"]]
    assert [p for p in sent if p["type"] == "image_url"] == [image_url(CAT), image_url(DOG)]
    assert result.to_anthropic() == {"messages": ANTHROPIC}
    assert_counted(result)


def test_langchain_standard_image_blocks_come_back_in_openai_form_without_detail() -> None:
    m = pytest.importorskip("langchain_core.messages")
    blocks = [
        text("Which?"),
        {"type": "image", "url": CAT},
        {"type": "image", "base64": PNG, "mime_type": "image/png"},
    ]
    history = [m.HumanMessage(blocks, id="h1")]
    result = from_langchain_messages(history, conversation_id="c").pack(
        10_000, as_of=AS_OF, profile=PROFILE
    )
    # LangChain's own converter gives the OpenAI form, which comes back as it is.
    openai_form = [text("Which?"), image_url(CAT), image_url(PNG_URL)]
    assert m.convert_to_openai_messages(history[0])["content"] == openai_form
    assert [message.content for message in to_langchain_messages(result)] == [openai_form]
    assert_counted(result)


@pytest.mark.parametrize(
    ("first", "second"),
    [(image_url(CAT, "high"), image_url(DOG, "low")), (image_url(CAT), image_url(PNG_URL))],
    ids=["with detail", "without detail"],
)
def test_langchain_round_trip_keeps_each_message_whole(
    first: dict[str, Any], second: dict[str, Any]
) -> None:
    m = pytest.importorskip("langchain_core.messages")
    history = [
        m.SystemMessage("Be brief."),
        m.HumanMessage([text("What is on this?"), first], id="h1"),
        m.AIMessage("A cat.", id="a1"),
        m.HumanMessage([second, text("And this?")], id="h2"),
    ]
    cf = from_langchain_messages(history, conversation_id="c")
    result = cf.pack(10_000, as_of=AS_OF, profile=PROFILE)
    assert to_langchain_messages(result) == history
    assert to_langchain_messages(cf) == history
    assert_counted(result)


def test_the_parts_of_a_message_are_one_message_wherever_they_are_sent() -> None:
    df = from_openai_messages(OPENAI, conversation_id="c").collect()
    parts = message_parts(df)
    assert sorted(parts.values()) == [
        ("c:parts:1", 0),
        ("c:parts:1", 1),
        ("c:parts:3", 0),
        ("c:parts:3", 1),
        ("c:parts:4", 0),
        ("c:parts:4", 1),
        ("c:parts:4", 2),
    ]
    rows = np.arange(df.height, dtype=np.int64)
    assert sent_messages(parts, rows) == [[0], [1, 2], [3], [4, 5], [6, 7, 8], [9]]
    # Out of part order, or apart: one message at the place of the first, parts in order.
    assert sent_messages(parts, rows[[2, 0, 1]]) == [[2, 0], [1]]
    assert sent_messages(parts, rows[[8, 3, 6, 7]]) == [[2, 3, 0], [1]]
    chat = chat_columns(df)
    # The later parts of each message: c:1.1, c:3.1, c:4.1 and c:4.2.
    assert np.flatnonzero(chat.continued).tolist() == [2, 5, 7, 8]
    assert chat.messages(rows[[2, 1]], {1: "What?"}) == [
        {"role": "user", "content": [text("What?"), image_url(CAT, "low")], "name": "ada"}
    ]


@pytest.mark.parametrize("order", ["reversed", "shuffled"])
def test_a_frame_in_any_row_order_packs_each_message_whole_at_its_cost(order: str) -> None:
    df = from_openai_messages(OPENAI, conversation_id="c").collect()
    frame = df.reverse() if order == "reversed" else df.sample(fraction=1.0, shuffle=True, seed=3)
    result = pack(frame, 10_000, PackOptions(as_of=AS_OF))
    assert sorted(result.ids) == sorted(df["id"].to_list())
    assert sorted(map(str, result.messages)) == sorted(map(str, OPENAI))
    assert result.used_tokens == PROFILE.request_tokens(result.messages)


def test_anthropic_cache_breakpoint_counts_a_multi_part_message_once() -> None:
    history = from_openai_messages(OPENAI[:5], conversation_id="c").collect()
    docs = documents(["d1"], ["retrieved text"], [1.0], created_at=datetime(2023, 1, 1, tzinfo=UTC))
    first = pack(history, 10_000, PackOptions(as_of=AS_OF))
    packed = pack(pl.concat([history, docs]), 10_000, PackOptions(as_of=AS_OF), previous=first)
    assert packed.ids[-1] == "d1"
    request = packed.to_anthropic(cache=True, cache_model="anthropic:claude-sonnet-4-5:1h")
    last = request["messages"][-1]["content"]
    assert last[-1] == {"type": "text", "text": "retrieved text"}  # the document: not marked
    # The history's last block, the last part of its last message, is marked.
    assert last[-2] == {
        "type": "text",
        "text": "Same cat?",
        "cache_control": {"type": "ephemeral", "ttl": "1h"},
    }
    validate_anthropic_messages(request)


def b64(data: bytes) -> str:
    return b64encode(data).decode("ascii")


# Inline images both providers refuse: (media type, base64 data) of an Anthropic base64
# source, or a data URL without ;base64 (an Anthropic url source); the problem; the field
# of an Anthropic block at fault; words of the message.
REFUSED: dict[str, tuple[tuple[str, str] | str, str, str, str]] = {
    "svg": (("image/svg+xml", "PHN2Zz48L3N2Zz4="), "media_type", "media_type", "'image/svg+xml'"),
    "not base64": (("image/png", "!!!"), "invalid_base64", "data", "not valid base64"),
    "not base64-encoded": ("data:image/png,abc", "not_base64", "url", "must be base64-encoded"),
    "jpeg declared, png bytes": (
        ("image/jpeg", b64(png(8, 8))),
        "signature",
        "media_type",
        "declares 'image/jpeg' but its bytes are a PNG image (image/png)",
    ),
}
ACCEPTED = "accepted: base64 data of image/png, image/jpeg, image/gif or image/webp"


def data_url_of(image: tuple[str, str] | str) -> str:
    return image if isinstance(image, str) else f"data:{image[0]};base64,{image[1]}"


def anthropic_source(image: tuple[str, str] | str) -> dict[str, Any]:
    if isinstance(image, str):
        return {"type": "url", "url": image}
    return {"type": "base64", "media_type": image[0], "data": image[1]}


def import_openai(image: tuple[str, str] | str) -> tuple[str, Any]:
    messages = [
        {"role": "user", "content": "Hi."},
        {"role": "assistant", "content": "Hello."},
        {"role": "user", "content": [text("See:"), image_url(data_url_of(image))]},
    ]
    return "content[1].image_url.url", from_openai_messages(messages)


def import_anthropic(image: tuple[str, str] | str) -> tuple[str, Any]:
    messages = [
        {"role": "user", "content": "Hi."},
        {"role": "assistant", "content": "Hello."},
        {"role": "user", "content": [text("See:"), anthropic_image(anthropic_source(image))]},
    ]
    return "content[1].source", from_anthropic_messages(messages, system="Be brief.")


def import_langchain(image: tuple[str, str] | str) -> tuple[str, Any]:
    m = pytest.importorskip("langchain_core.messages")
    history = [
        m.HumanMessage("Hi."),
        m.AIMessage("Hello."),
        m.HumanMessage([text("See:"), image_url(data_url_of(image))]),
    ]
    return "content[1].image_url.url", from_langchain_messages(history)


IMPORTERS = {"openai": import_openai, "anthropic": import_anthropic, "langchain": import_langchain}


@pytest.mark.parametrize("importer", sorted(IMPORTERS))
@pytest.mark.parametrize(
    ("image", "problem", "part", "words"), list(REFUSED.values()), ids=list(REFUSED)
)
def test_an_inline_image_both_providers_refuse_is_refused_at_import_naming_its_part(
    importer: str, image: tuple[str, str] | str, problem: str, part: str, words: str
) -> None:
    # Before, each was imported and sent to both providers (svg costed at 1445 tokens).
    with pytest.raises(RecordError) as caught:
        IMPORTERS[importer](image)
    error = caught.value
    field = "content[1].image_url.url"
    if importer == "anthropic":
        field = f"content[1].source.{part}"
    assert (error.code, error.row, error.field) == ("record.image_invalid", 2, field)
    assert error.params["problem"] == problem
    assert str(error).startswith(f"row 2: field {field}: ")
    assert words in error.message
    assert error.message.endswith(ACCEPTED)


def test_an_anthropic_image_after_a_tool_result_is_named_by_its_own_block() -> None:
    # The tool result becomes a message of its own: the image is part 1 of the next one,
    # but the error names the Anthropic block, content[2].
    bad = {"type": "base64", "media_type": "image/png", "data": "!!!"}
    messages = [
        {"role": "user", "content": "Look it up."},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t1", "name": "find", "input": {}}],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "found"},
                text("See:"),
                anthropic_image(bad),
            ],
        },
    ]
    with pytest.raises(RecordError) as caught:
        from_anthropic_messages(messages)
    assert (caught.value.row, caught.value.field) == (2, "content[2].source.data")


def test_an_inline_image_refused_in_a_jsonl_file_names_its_line(tmp_path: Any) -> None:
    path = tmp_path / "chat.jsonl"
    lines = [
        {"role": "user", "content": "Hi."},
        {"role": "user", "content": [image_url("data:image/svg+xml;base64,PHN2Zz48L3N2Zz4=")]},
    ]
    path.write_text("\n".join(map(json.dumps, lines)) + "\n", encoding="utf-8")
    with pytest.raises(RecordError) as caught:
        read_openai_jsonl(path)
    error = caught.value
    assert (error.code, error.line, error.field) == (
        "record.image_invalid",
        2,
        "content[0].image_url.url",
    )
    assert "(message 1)" in error.message


@pytest.mark.parametrize("importer", sorted(IMPORTERS))
@pytest.mark.parametrize("media_type", sorted(BUILDERS))
def test_an_inline_image_of_each_accepted_type_imports_and_renders_to_both_providers(
    importer: str, media_type: str
) -> None:
    data = b64(BUILDERS[media_type](640, 480))
    _, cf = IMPORTERS[importer]((media_type, data))
    result = cf.pack(10_000, as_of=AS_OF, profile=PROFILE)
    url = f"data:{media_type};base64,{data}"
    assert result.messages[-1] == {"role": "user", "content": [text("See:"), image_url(url)]}
    source = {"type": "base64", "media_type": media_type, "data": data}
    assert result.to_anthropic()["messages"][-1] == {
        "role": "user",
        "content": [text("See:"), anthropic_image(source)],
    }
    images = result.frame.filter(pl.col("payload_kind") == "reference")
    assert [json.loads(m)["media_type"] for m in images["metadata"]] == [media_type]
    assert_counted(result)
    # Costed at its size read from the header: 640 x 480 is 2 x 1 tiles, 85 + 2 * 170.
    manifest = result.manifest.to_polars()
    assert manifest.filter(pl.col("id") == images["id"][0])["tokens"].to_list() == [425]


def test_a_langchain_standard_base64_block_of_svg_is_refused() -> None:
    m = pytest.importorskip("langchain_core.messages")
    block = {"type": "image", "base64": "PHN2Zz48L3N2Zz4=", "mime_type": "image/svg+xml"}
    with pytest.raises(RecordError) as caught:
        from_langchain_messages([m.HumanMessage([text("See:"), block])])
    assert (caught.value.code, caught.value.row) == ("record.image_invalid", 0)
    assert caught.value.field == "content[1].image_url.url"


def test_an_https_image_is_kept_as_it_is_not_fetched() -> None:
    for importer in ("openai", "anthropic"):
        url = "https://example.org/not-even-an-image.svg"
        if importer == "openai":
            cf = from_openai_messages([{"role": "user", "content": [image_url(url)]}])
        else:
            source = {"type": "url", "url": url}
            cf = from_anthropic_messages([{"role": "user", "content": [anthropic_image(source)]}])
        assert cf.collect()["ref_uri"].to_list() == [url]


def test_a_llamaindex_image_of_svg_bytes_is_refused_naming_its_block() -> None:
    llms = pytest.importorskip("llama_index.core.llms")
    from cognoxium.formats.interop import from_llamaindex_messages

    svg = llms.ImageBlock(image=b"<svg></svg>", image_mimetype="image/svg+xml")
    message = llms.ChatMessage(role="user", blocks=[llms.TextBlock(text="See:"), svg])
    with pytest.raises(RecordError) as caught:
        from_llamaindex_messages([message])
    error = caught.value
    assert (error.code, error.row, error.field) == ("record.image_invalid", 0, "blocks[1]")
    assert error.params["problem"] == "media_type"


def test_an_inline_image_written_in_another_case_is_sent_as_a_base64_source() -> None:
    # Before, "DATA:IMAGE/PNG;BASE64,..." became an Anthropic url source holding the data URL.
    data = b64(png(8, 8))
    messages = [{"role": "user", "content": [image_url(f"DATA:IMAGE/PNG;BASE64,{data}")]}]
    result = from_openai_messages(messages).pack(10_000, as_of=AS_OF, profile=PROFILE)
    assert result.messages == [
        {"role": "user", "content": [image_url(f"data:image/png;base64,{data}")]}
    ]
    source = {"type": "base64", "media_type": "image/png", "data": data}
    assert result.to_anthropic() == {
        "messages": [{"role": "user", "content": [anthropic_image(source)]}]
    }
