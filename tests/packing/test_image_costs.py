"""Images are sent as ``image_url`` parts costing OpenAI's tile rule; other references as links."""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta
from typing import Any

import polars as pl
import pytest

from cognoxium.exceptions import RecordError
from cognoxium.formats.openai import to_openai_messages
from cognoxium.items.convert import items_to_frame
from cognoxium.items.model import ContextItem
from cognoxium.packing.options import PackOptions
from cognoxium.packing.packer import pack
from cognoxium.tokens.profiles import get_profile
from tests.image_files import BUILDERS, gif, jpeg, png

START = datetime(2024, 5, 1, tzinfo=UTC)
AS_OF = START + timedelta(days=1)
CL100K = get_profile("cl100k_base")
CAT_URI = "https://img.example.org/cat.jpg"


def item(i: str, role: str, payload: dict[str, Any], **metadata: Any) -> ContextItem:
    return ContextItem(id=i, role=role, payload=payload, metadata=metadata, created_at=START)


def data_url(media_type: str, data: bytes) -> str:
    return f"data:{media_type};base64," + base64.b64encode(data).decode("ascii")


PHOTO = png(1024, 1024)
ITEMS = [
    item("q", "user", {"kind": "text", "text": "What is in these pictures?"}),
    item("photo", "user", {"kind": "binary", "data": PHOTO}, media_type="image/png", detail="high"),
    item(
        "cat",
        "document",
        {"kind": "reference", "uri": CAT_URI, "title": "A cat"},
        width=2048,
        height=4096,
    ),
    item(
        "thumb",
        "memory",
        {"kind": "binary", "data": gif(4000, 3000)},
        media_type="image/gif",
        detail="low",
    ),
    item("page", "document", {"kind": "reference", "uri": "https://x.org/a.html", "title": "Spec"}),
]


def entries(result: Any) -> dict[str, tuple[str, int | None, str | None]]:
    df = result.manifest.to_polars()
    return {
        row["id"]: (row["decision"], row["tokens"], row["reason"])
        for row in df.select("id", "decision", "tokens", "reason").iter_rows(named=True)
    }


def test_images_are_sent_as_image_parts_and_cost_the_tile_rule() -> None:
    result = pack(items_to_frame(ITEMS), 5000, PackOptions(as_of=AS_OF, profile=CL100K))
    question, photo, cat, thumb, page = result.messages
    assert question == {"role": "user", "content": "What is in these pictures?"}
    assert photo == {
        "role": "user",
        "content": [
            {
                "type": "image_url",
                "image_url": {"url": data_url("image/png", PHOTO), "detail": "high"},
            }
        ],
    }
    assert cat == {
        "role": "user",
        "content": [
            {"type": "text", "text": "A cat"},
            # No detail given, none sent: the API's default, costed as "auto".
            {"type": "image_url", "image_url": {"url": CAT_URI}},
        ],
    }
    assert thumb["content"][0]["image_url"]["detail"] == "low"
    assert page == {"role": "user", "content": "Spec https://x.org/a.html"}
    # Before: the cat was costed as the text "A cat https://img.example.org/cat.jpg" (4 + 12),
    # the binary images were not packable. Now: framing 4 (+ title 2) + the image's tokens.
    assert entries(result) == {
        "q": ("included", 4 + 6, "selected"),
        "photo": ("included", 4 + 765, "selected"),
        "cat": ("included", 4 + 2 + 1105, "selected"),
        "thumb": ("included", 4 + 85, "selected"),
        "page": ("included", 4 + 7, "selected"),
    }
    assert result.used_tokens == 10 + 769 + 1111 + 89 + 11 + 3
    sizes = {CAT_URI: (2048, 4096)}
    assert CL100K.request_tokens(result.messages, image_sizes=sizes) == result.used_tokens
    assert result.messages == to_openai_messages(result)


def test_an_image_of_unknown_size_costs_the_most_its_detail_can() -> None:
    ref = {"kind": "reference", "uri": CAT_URI}
    items = [item("hi", "user", ref), item("lo", "user", ref, detail="low")]
    result = pack(items_to_frame(items), 5000, PackOptions(as_of=AS_OF, profile=CL100K))
    assert [e[1] for e in entries(result).values()] == [4 + 1445, 4 + 85]


@pytest.mark.parametrize("media_type", sorted(BUILDERS))
@pytest.mark.parametrize(
    ("size", "detail", "image_tokens"),
    [
        ((1, 1), None, 85 + 170),
        ((1, 1), "low", 85),
        ((4000, 3000), None, 85 + 170 * 4),  # 2048 x 1536, then 1024 x 768: 2 x 2 tiles
        ((4000, 3000), "high", 85 + 170 * 4),
        ((2048, 4096), "auto", 1105),  # documented
        ((4000, 3000), "low", 85),
    ],
)
def test_a_data_url_reference_costs_the_size_its_bytes_give(
    media_type: str, size: tuple[int, int], detail: str | None, image_tokens: int
) -> None:
    # Before, the size of a data URL's image was not read: every one cost 1445 (high, auto).
    url = data_url(media_type, BUILDERS[media_type](*size))
    meta = {} if detail is None else {"detail": detail}
    img = item("img", "user", {"kind": "reference", "uri": url}, **meta)
    result = pack(items_to_frame([img]), 5000, PackOptions(as_of=AS_OF, profile=CL100K))
    assert entries(result)["img"] == ("included", 4 + image_tokens, "selected")
    assert result.used_tokens == 4 + image_tokens + 3
    assert CL100K.request_tokens(result.messages) == result.used_tokens


@pytest.mark.parametrize(
    "url",
    [
        "data:image/png;base64,iVBORw0KGgo=",  # truncated before the size
        "data:image/png;base64,%%%%",  # not base64
        "data:image/png;base64,bm90IGFuIGltYWdl",  # "not an image"
        data_url("image/png", b"BM" + b"\0" * 28),  # a format the API does not take
    ],
)
def test_a_data_url_reference_without_a_readable_image_costs_the_most_its_detail_can(
    url: str,
) -> None:
    items = [
        item("hi", "user", {"kind": "reference", "uri": url}),
        item("lo", "user", {"kind": "reference", "uri": url}, detail="low"),
    ]
    result = pack(items_to_frame(items), 5000, PackOptions(as_of=AS_OF, profile=CL100K))
    assert [e[1] for e in entries(result).values()] == [4 + 1445, 4 + 85]
    assert CL100K.request_tokens(result.messages) == result.used_tokens == 4 + 1445 + 4 + 85 + 3


def test_an_image_that_does_not_fit_is_skipped_and_the_text_still_goes() -> None:
    options = PackOptions(as_of=AS_OF, profile=CL100K, gaps="fill")
    result = pack(items_to_frame(ITEMS[:2]), 100, options)
    # Its image alone (765) is a bound above the budget left: skipped without counting
    # (with gaps="fill" the older text is still tried).
    assert entries(result)["photo"] == ("excluded", None, "over_budget")
    assert result.ids == ["q"]
    assert result.used_tokens == 13


def test_binary_not_declared_an_image_is_still_not_packable() -> None:
    items = [
        item("blob", "user", {"kind": "binary", "data": b"\x00\x01\x02"}),
        # A stored attachment is not sent unless the application declares it an image.
        item("attachment", "user", {"kind": "binary", "data": PHOTO}),
    ]
    result = pack(items_to_frame(items), 10_000, PackOptions(as_of=AS_OF))
    assert entries(result)["blob"] == ("excluded", None, "not_packable")
    assert entries(result)["attachment"] == ("excluded", None, "not_packable")
    with pytest.raises(RecordError, match="media_type") as caught:
        to_openai_messages(items_to_frame(items))
    assert (caught.value.row, caught.value.field) == (0, "payload_kind")


@pytest.mark.parametrize("role", ["assistant", "system", "developer"])
def test_an_image_outside_a_user_message_is_a_record_error(role: str) -> None:
    img = item("img", role, {"kind": "binary", "data": jpeg(64, 64)}, media_type="image/jpeg")
    items = [ITEMS[0], img]
    with pytest.raises(RecordError, match="only in a user message") as caught:
        pack(items_to_frame(items), 5000, PackOptions(as_of=AS_OF))
    assert (caught.value.row, caught.value.field) == (1, "role")


def test_bad_image_metadata_fails_the_pack_naming_the_row() -> None:
    bad = item("img", "user", {"kind": "binary", "data": PHOTO}, media_type="image/png", detail="x")
    items = [ITEMS[0], bad]
    with pytest.raises(RecordError) as caught:
        pack(items_to_frame(items), 5000, PackOptions(as_of=AS_OF))
    assert (caught.value.row, caught.value.field) == (1, "metadata.detail")


def test_packs_with_images_are_deterministic() -> None:
    df = items_to_frame(ITEMS)
    first = pack(df, 1200, PackOptions(as_of=AS_OF))
    second = pack(df.clone(), 1200, PackOptions(as_of=AS_OF))
    assert first.manifest.to_json() == second.manifest.to_json()
    assert first.messages == second.messages
    included = first.manifest.to_polars().filter(pl.col("decision") == "included")
    assert included["tokens"].sum() + 3 == first.used_tokens <= 1200
