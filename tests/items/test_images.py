"""Which items are images, with which media type, size and detail."""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import Any

import pytest

from cognoxium.exceptions import RecordError
from cognoxium.items.convert import items_to_frame
from cognoxium.items.images import ImageSpec, image_media_type, image_size, image_specs
from cognoxium.items.model import ContextItem
from tests.image_files import BUILDERS, png

START = datetime(2024, 5, 1, tzinfo=UTC)


def item(i: int, payload: dict[str, Any], **metadata: Any) -> ContextItem:
    return ContextItem(
        id=f"i{i}", role="user", payload=payload, metadata=metadata, created_at=START
    )


def specs(*items: ContextItem) -> dict[int, ImageSpec]:
    return image_specs(items_to_frame(list(items)))


@pytest.mark.parametrize("media_type", sorted(BUILDERS))
def test_media_type_and_size_are_read_from_the_header(media_type: str) -> None:
    data = BUILDERS[media_type](1234, 567)
    assert image_media_type(data) == media_type
    assert image_size(data) == (1234, 567)


def test_bytes_of_no_image_have_no_media_type() -> None:
    assert image_media_type(b"%PDF-1.7\n") is None
    assert image_media_type(b"RIFF\x00\x00\x00\x00WAVEfmt ") is None
    assert image_media_type(b"") is None


def test_a_binary_image_is_sent_as_a_data_url_with_its_size_and_detail() -> None:
    data = png(800, 600)
    found = specs(
        item(0, {"kind": "binary", "data": data}, media_type="image/png", detail="low"),
        item(1, {"kind": "binary", "data": b"\x00\x01"}),
        item(2, {"kind": "text", "text": "hello.png"}, media_type="image/png"),
    )
    url = "data:image/png;base64," + base64.b64encode(data).decode("ascii")
    assert found == {0: ImageSpec(url=url, detail="low", size=(800, 600))}
    assert found[0].part() == {"type": "image_url", "image_url": {"url": url, "detail": "low"}}


def test_binary_is_an_image_only_when_its_metadata_says_so() -> None:
    # Stored attachments are not sent unless the application declares them images.
    assert specs(item(0, {"kind": "binary", "data": png(8, 8)})) == {}
    pdf = item(0, {"kind": "binary", "data": b"%PDF-1.7"}, media_type="application/pdf")
    assert specs(pdf) == {}
    svg = item(0, {"kind": "binary", "data": b"<svg/>"}, media_type="image/svg+xml")
    assert specs(svg) == {}
    nested = item(0, {"kind": "binary", "data": png(8, 8)}, source={"media_type": "image/png"})
    assert specs(nested) == {}


@pytest.mark.parametrize(
    ("uri", "metadata", "is_image"),
    [
        ("https://x.org/cat.png", {}, True),
        ("https://x.org/cat.JPEG?w=200#top", {}, True),
        ("s3://bucket/a/b.webp", {}, True),
        ("https://x.org/a.gif/page.html", {}, False),
        ("https://x.org/image?id=3", {}, False),
        ("https://x.org/image?id=3", {"media_type": "image/jpeg"}, True),
        ("https://x.org/cat.png", {"media_type": "text/html"}, False),
        ("https://x.org/logo.svg", {}, False),
        ("data:image/png;base64,AAAA", {}, True),
        ("data:text/plain,hello.png?", {}, False),
    ],
)
def test_a_reference_is_an_image_by_its_media_type_or_else_its_uri(
    uri: str, metadata: dict[str, Any], is_image: bool
) -> None:
    found = specs(item(0, {"kind": "reference", "uri": uri, "title": "t"}, **metadata))
    assert (0 in found) is is_image
    if is_image:
        assert found[0] == ImageSpec(url=uri, detail=None, size=None)


def test_a_reference_takes_its_size_from_metadata() -> None:
    ref = {"kind": "reference", "uri": "https://x.org/cat.png"}
    found = specs(item(0, ref, width=2048, height=4096, detail="high"))
    assert found[0].size == (2048, 4096)
    assert found[0].detail == "high"


PNG = {"kind": "binary", "data": png(8, 8)}
AS_PNG = {"media_type": "image/png"}


@pytest.mark.parametrize(
    ("payload", "metadata", "field", "words"),
    [
        (PNG, AS_PNG | {"detail": "medium"}, "metadata.detail", "one of"),
        ({"kind": "reference", "uri": "a.png"}, {"width": 10}, "metadata.height", "both or"),
        ({"kind": "reference", "uri": "a.png"}, {"width": 0, "height": 5}, "metadata.width", "0"),
        (
            {"kind": "reference", "uri": "a.png"},
            {"width": True, "height": 5},
            "metadata.width",
            "True",
        ),
        (PNG, {"media_type": "image/jpeg"}, "metadata.media_type", "show an image/png"),
        (
            {"kind": "binary", "data": b"not an image"},
            AS_PNG,
            "metadata.media_type",
            "no PNG, JPEG, GIF or WebP",
        ),
        ({"kind": "binary", "data": b"\x89PNG\r\n\x1a\n"}, AS_PNG, "binary", "no width"),
    ],
)
def test_bad_image_metadata_is_a_record_error_naming_row_and_field(
    payload: dict[str, Any], metadata: dict[str, Any], field: str, words: str
) -> None:
    good = item(0, PNG, **AS_PNG)
    with pytest.raises(RecordError) as caught:
        specs(good, item(1, payload, **metadata))
    assert (caught.value.row, caught.value.field) == (1, field)
    assert words in caught.value.message


def test_an_image_part_has_a_detail_only_when_given() -> None:
    url = "https://x.org/cat.png"
    assert ImageSpec(url=url, detail=None, size=None).part() == {
        "type": "image_url",
        "image_url": {"url": url},
    }
    assert ImageSpec(url=url, detail=None, size=None).costed_detail == "auto"
    assert ImageSpec(url=url, detail="low", size=None).part()["image_url"]["detail"] == "low"
    found = specs(item(0, {"kind": "reference", "uri": url}))
    assert found[0].detail is None
