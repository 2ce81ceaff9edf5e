"""Which items are images, with which media type, size and detail."""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import Any

import pytest

from cognoxium.exceptions import RecordError
from cognoxium.items.convert import items_to_frame
from cognoxium.items.images import (
    IMAGE_MEDIA_TYPES,
    ImageSpec,
    check_image_data_url,
    data_url_size,
    image_media_type,
    image_size,
    image_specs,
    is_data_url,
)
from cognoxium.items.model import ContextItem
from tests.image_files import BUILDERS, jpeg, png

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


def data_url(media_type: str, data: bytes) -> str:
    return f"data:{media_type};base64," + base64.b64encode(data).decode("ascii")


# Whole files of one pixel, as the formats' encoders write them.
PNG_1X1 = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC"
)
GIF_1X1 = "R0lGODlhAQABAIAAAAAAAP///yH5BAEAAAAALAAAAAABAAEAAAIBRAA7"
WEBP_1X1 = "UklGRhoAAABXRUJQVlA4TA0AAAAvAAAAEAcQERGIiP4HAA=="  # lossless (VP8L)


@pytest.mark.parametrize(
    ("media_type", "encoded"),
    [("image/png", PNG_1X1), ("image/gif", GIF_1X1), ("image/webp", WEBP_1X1)],
)
def test_a_data_url_of_a_whole_one_pixel_image_is_one_by_one(media_type: str, encoded: str) -> None:
    assert data_url_size(f"data:{media_type};base64,{encoded}") == (1, 1)
    assert image_size(base64.b64decode(encoded)) == (1, 1)


@pytest.mark.parametrize("media_type", sorted(BUILDERS))
@pytest.mark.parametrize("size", [(1, 1), (2, 3), (4000, 3000)])
def test_a_data_url_gives_the_size_in_its_header(media_type: str, size: tuple[int, int]) -> None:
    data = BUILDERS[media_type](*size)
    assert data_url_size(data_url(media_type, data)) == size
    # The scheme and the base64 marker in any case; parameters before it.
    upper = "DATA:" + data_url(media_type, data)[5:].replace(";base64,", ";name=a;BASE64,")
    assert data_url_size(upper) == size


def test_a_data_url_is_decoded_only_as_far_as_its_header() -> None:
    # Past its first 1200 bytes the text is not base64: were it all decoded, it would fail.
    for media_type in sorted(BUILDERS):
        data = BUILDERS[media_type](640, 480)
        if media_type == "image/jpeg":  # the start of scan, where a JPEG's header ends
            data += b"\xff\xda" + (8).to_bytes(2, "big") + b"\x01\x01\x00\x00\x3f\x00"
        data += b"\0" * (1200 - len(data))  # 1600 base64 characters, no padding
        url = data_url(media_type, data) + "!!!!" * 2_000_000
        assert data_url_size(url) == (640, 480)


def test_a_jpeg_data_url_is_read_past_large_segments_before_its_size() -> None:
    # An ICC profile of 3 x 60 kB (APP2 segments) before the frame header, then scan data.
    app2 = (b"\xff\xe2" + (60_002).to_bytes(2, "big") + b"\x5a" * 60_000) * 3
    full = jpeg(1234, 567)
    data = full[:20] + app2 + full[20:] + b"\x00" * 100_000
    assert image_size(data) == (1234, 567)
    assert data_url_size(data_url("image/jpeg", data)) == (1234, 567)


@pytest.mark.parametrize(
    "url",
    [
        "https://x.org/cat.png",  # not a data URL
        "data:image/png,%89PNG%0D%0A",  # not base64
        "data:image/png;base64",  # no data
        data_url("image/png", png(8, 8))[:-1],  # a length not a multiple of 4
        "data:image/png;base64,%%%%" + PNG_1X1,  # not base64 where the header is
        "data:image/png;base64,bm90IGFuIGltYWdl",  # "not an image"
        data_url("image/png", png(8, 8)[:12]),  # truncated before the size
        data_url("image/jpeg", jpeg(8, 8)[:22]),  # truncated in the frame header
        data_url("image/bmp", b"BM" + b"\0" * 28),  # a format the API does not take
        "data:image/png;base64,",  # empty
    ],
)
def test_a_data_url_without_a_readable_image_has_no_size(url: str) -> None:
    assert data_url_size(url) is None


def test_data_urls_are_told_by_their_scheme() -> None:
    urls = ["data:,", "Data:image/png;base64,AAAA", "https://x.org/data:image", "dat"]
    assert [is_data_url(url) for url in urls] == [True, True, False, False]


def test_a_data_url_reference_takes_its_size_from_its_bytes() -> None:
    url = data_url("image/png", png(4000, 3000))
    found = specs(
        item(0, {"kind": "reference", "uri": url}),
        # What is sent is the bytes: the metadata's size, which a recount cannot see, is not used.
        item(1, {"kind": "reference", "uri": url}, width=10, height=10, detail="low"),
        item(2, {"kind": "reference", "uri": url}, media_type="image/*"),
    )
    assert found == {
        0: ImageSpec(url=url, detail=None, size=(4000, 3000)),
        1: ImageSpec(url=url, detail="low", size=(4000, 3000)),
        2: ImageSpec(url=url, detail=None, size=(4000, 3000)),
    }


def test_a_data_url_reference_without_a_readable_image_is_an_image_of_unknown_size() -> None:
    # Packing goes on, at the most the image's detail can cost; it is not an error.
    broken = "data:image/png;base64,iVBORw0KGgo="
    found = specs(item(0, {"kind": "reference", "uri": broken}, detail="high"))
    assert found == {0: ImageSpec(url=broken, detail="high", size=None)}


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


# An inline image (a data: URL) that OpenAI and Anthropic both refuse, the problem the
# check names, the part of the URL at fault, and words its message must hold.
BAD_INLINE_IMAGES = {
    "svg": ("data:image/svg+xml;base64,PHN2Zz48L3N2Zz4=", "media_type", "media_type", "svg"),
    "bmp": (data_url("image/bmp", b"BM" + b"\0" * 28), "media_type", "media_type", "bmp"),
    "no type": ("data:;base64," + PNG_1X1, "media_type", "media_type", "media type is ''"),
    "not base64 data": ("data:image/png;base64,!!!", "invalid_base64", "data", "not valid base64"),
    "percent-encoded": ("data:image/png,%89PNG%0D%0A", "not_base64", "data", "base64-encoded"),
    "plain text data": ("data:image/png,abc", "not_base64", "data", "base64-encoded"),
    "no comma": ("data:image/png;base64", "not_base64", "data", "base64-encoded"),
    "unpadded": (data_url("image/png", png(8, 8))[:-1], "invalid_base64", "data", "base64"),
    "line breaks": (data_url("image/png", png(8, 8)) + "\nAAAA", "invalid_base64", "data", "line"),
    "bad far after the header": (
        data_url("image/png", png(8, 8) + b"\0" * 30_000)[:-8] + "%%%%AAAA",
        "invalid_base64",
        "data",
        "not valid base64",
    ),
    "jpeg declared, png bytes": (
        data_url("image/jpeg", png(8, 8)),
        "signature",
        "media_type",
        "declares 'image/jpeg' but its bytes are a PNG image (image/png); declare 'image/png'",
    ),
    "gif declared, webp bytes": (
        data_url("image/gif", BUILDERS["image/webp"](8, 8)),
        "signature",
        "media_type",
        "a WebP image (image/webp)",
    ),
    "no image": (
        "data:image/png;base64,bm90IGFuIGltYWdl",
        "signature",
        "data",
        "no PNG, JPEG, GIF or WebP image",
    ),
    "empty": ("data:image/png;base64,", "signature", "data", "no PNG, JPEG, GIF or WebP image"),
}


@pytest.mark.parametrize(
    ("url", "problem", "part", "words"),
    list(BAD_INLINE_IMAGES.values()),
    ids=list(BAD_INLINE_IMAGES),
)
def test_an_inline_image_the_chat_apis_refuse_is_a_record_error(
    url: str, problem: str, part: str, words: str
) -> None:
    with pytest.raises(RecordError) as caught:
        check_image_data_url(url)
    error = caught.value
    assert error.code == "record.image_invalid"
    assert (error.params["problem"], error.params["part"]) == (problem, part)
    assert error.params["accepted"] == ["image/png", "image/jpeg", "image/gif", "image/webp"]
    assert words in error.message
    assert error.message.endswith(
        "accepted: base64 data of image/png, image/jpeg, image/gif or image/webp"
    )
    assert len(error.message) < 400  # the data is not quoted whole


@pytest.mark.parametrize("media_type", IMAGE_MEDIA_TYPES)
def test_an_inline_image_of_an_accepted_type_passes_as_it_is(media_type: str) -> None:
    url = data_url(media_type, BUILDERS[media_type](8, 8) + b"\0" * 1000)
    checked, found = check_image_data_url(url)
    assert (checked, found) == (url, media_type)
    assert checked is url  # not copied


def test_gif87a_and_a_truncated_png_pass_the_signature_check() -> None:
    # The signature is what is checked; a header cut before the size costs as the most.
    assert check_image_data_url(data_url("image/gif", b"GIF87a" + b"\0" * 7))[1] == "image/gif"
    assert check_image_data_url("data:image/png;base64,iVBORw0KGgo=")[1] == "image/png"


def test_an_inline_image_is_written_as_the_renderers_send_it() -> None:
    data = base64.b64encode(png(8, 8)).decode("ascii")
    checked = check_image_data_url(f"DATA:Image/PNG;name=cat.png;BASE64,{data}")
    assert checked == (f"data:image/png;base64,{data}", "image/png")


def test_the_jpg_alias_is_sent_as_image_jpeg() -> None:
    data = base64.b64encode(jpeg(8, 8)).decode("ascii")
    checked = check_image_data_url(f"data:image/jpg;base64,{data}")
    assert checked == (f"data:image/jpeg;base64,{data}", "image/jpeg")
    with pytest.raises(RecordError, match="declares 'image/jpeg' but its bytes are a PNG"):
        check_image_data_url(data_url("image/jpg", png(8, 8)))
