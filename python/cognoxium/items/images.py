"""Images among the payloads: which items are images, and their media type, size and detail.

An item is sent as an image (an ``image_url`` content part of the OpenAI Chat
Completions API) when its payload is one, by this rule:

==========  ===================================================================
payload     is an image when
==========  ===================================================================
Binary      ``metadata.media_type`` is one of :data:`IMAGE_MEDIA_TYPES`
            (PNG, JPEG, GIF, WebP: the formats the OpenAI API accepts), and
            then its bytes must start with that format's signature, else it
            is an error. Its size is read from the format's header (the
            ``imagesize`` library; no pixel is decoded) and it is sent as a
            ``data:`` URL. Binary without an image media type stays storage
            only, never packed: stored attachments are not sent unless the
            application says they are images.
Reference   ``metadata.media_type`` is one of :data:`IMAGE_MEDIA_TYPES` or
            :data:`ANY_IMAGE` (an image whose format is not known, as the
            chat importers mark an ``image_url`` part); or,
            without a media type, the URI is a ``data:image/...`` URL or its
            path ends in ``.png``, ``.jpg``, ``.jpeg``, ``.gif`` or ``.webp``
            (any case). It is sent as its URI. The size of a ``data:`` URL's
            image is read from its bytes (:func:`data_url_size`, the header
            only), unknown if they hold no readable PNG, JPEG, GIF or WebP
            image; the size of another URI's image, if known, is
            ``metadata.width`` and ``metadata.height`` (pixels, both or
            neither). A reference that is not an image is sent as a link.
==========  ===================================================================

Either kind takes ``metadata.detail``, one of :data:`IMAGE_DETAILS`. It is
sent as the part's ``detail`` when given; when absent the part has no
``detail`` and is costed as ``"auto"``, the API's default. What an image
costs is the token profile's image rule
(:class:`cognoxium.tokens.images.ImageRule`).

Examples
--------
>>> png = bytes.fromhex("89504e470d0a1a0a0000000d4948445200000280000001e00806000000")
>>> image_media_type(png), image_size(png)
('image/png', (640, 480))
>>> image_media_type(b"plain bytes") is None
True
>>> import base64
>>> data_url_size("data:image/png;base64," + base64.b64encode(png).decode())
(640, 480)
"""

from __future__ import annotations

import base64
import io
import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from cognoxium.exceptions import RecordError

__all__ = [
    "ANY_IMAGE",
    "IMAGE_DETAILS",
    "IMAGE_MEDIA_TYPES",
    "ImageSpec",
    "data_url_size",
    "image_media_type",
    "image_media_type_expr",
    "image_size",
    "image_specs",
    "is_data_url",
]

IMAGE_MEDIA_TYPES: tuple[str, ...] = ("image/png", "image/jpeg", "image/gif", "image/webp")
"""The image types an item may send: those the OpenAI API accepts."""

ANY_IMAGE = "image/*"
"""``metadata.media_type`` of a Reference to an image whose format is not known."""

IMAGE_DETAILS: tuple[str, ...] = ("low", "high", "auto")
"""The values of ``metadata.detail`` (the ``detail`` of the ``image_url`` part)."""

# (offset, signature) pairs every file of the type starts with.
_SIGNATURES: dict[str, tuple[tuple[int, bytes], ...]] = {
    "image/png": ((0, b"\x89PNG\r\n\x1a\n"),),
    "image/jpeg": ((0, b"\xff\xd8\xff"),),
    "image/gif": ((0, b"GIF87a"),),
    "image/webp": ((0, b"RIFF"), (8, b"WEBP")),
}
_GIF89 = ((0, b"GIF89a"),)
_DATA_URL = r"(?i)^data:"
_IMAGE_DATA_URL = r"(?i)^data:image/(?:png|jpeg|gif|webp)[;,]"
_IMAGE_PATH = r"(?i)^[^?#]*\.(?:png|jpe?g|gif|webp)(?:[?#]|$)"


@dataclass(frozen=True, slots=True)
class ImageSpec:
    """One image as it is sent.

    Attributes
    ----------
    url
        The ``image_url.url``: a ``data:`` URL (Binary) or the URI (Reference).
    detail
        One of :data:`IMAGE_DETAILS`, or ``None`` when the item gives none
        (the part is sent without ``detail``, which the API takes as
        ``"auto"``).
    size
        ``(width, height)`` in pixels, or ``None`` when unknown.
    """

    url: str
    detail: str | None
    size: tuple[int, int] | None

    @property
    def costed_detail(self) -> str:
        """The detail the image is costed at: ``detail``, or ``"auto"`` when not given."""
        return "auto" if self.detail is None else self.detail

    def part(self) -> dict[str, Any]:
        """The ``image_url`` content part that sends the image (``detail`` only when given)."""
        image = (
            {"url": self.url} if self.detail is None else {"url": self.url, "detail": self.detail}
        )
        return {"type": "image_url", "image_url": image}


def _matches(data: bytes, signature: tuple[tuple[int, bytes], ...]) -> bool:
    return all(data[at : at + len(magic)] == magic for at, magic in signature)


def image_media_type(data: bytes) -> str | None:
    """Return the image media type that ``data`` starts with, or ``None``.

    Parameters
    ----------
    data
        The bytes of a Binary payload.

    Returns
    -------
    str or None
        One of :data:`IMAGE_MEDIA_TYPES`, told by the format's signature.
    """
    if _matches(data, _GIF89):
        return "image/gif"
    for media_type, signature in _SIGNATURES.items():
        if _matches(data, signature):
            return media_type
    return None


def image_size(data: bytes) -> tuple[int, int] | None:
    """Return ``(width, height)`` in pixels from an image's header, or ``None`` if unreadable.

    The header is parsed by the ``imagesize`` library; pixels are never
    decoded. A JPEG's EXIF rotation is applied, as a viewer shows it.
    """
    import imagesize  # with its urllib and XML imports, only when an image is read

    width, height = imagesize.get(io.BytesIO(data))
    return (width, height) if width > 0 and height > 0 else None


class _Base64Reader:
    """The bytes a base64 text encodes, as a seekable file that decodes only what is read.

    ``read`` decodes the 4-character groups covering the bytes asked for, so
    reading an image's header from a data URL of many megabytes decodes a
    few hundred bytes. A group that is not base64 raises ``binascii.Error``.
    """

    def __init__(self, text: str, start: int) -> None:
        self._text, self._start = text, start
        padding = 2 if text.endswith("==") else 1 if text.endswith("=") else 0
        self._size = (len(text) - start) // 4 * 3 - padding
        self._position = 0

    def read(self, size: int = -1) -> bytes:
        stop = self._size if size < 0 else min(self._size, self._position + size)
        if stop <= self._position:
            return b""
        first, last = self._position // 3, -(-stop // 3)
        groups = self._text[self._start + 4 * first : self._start + 4 * last]
        data = base64.b64decode(groups, validate=True)
        out = data[self._position - 3 * first : stop - 3 * first]
        self._position = stop
        return out

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self._size}[whence]
        if base + offset < 0:
            raise ValueError(f"negative seek position {base + offset}")
        self._position = base + offset
        return self._position

    def tell(self) -> int:
        return self._position


def data_url_size(url: str) -> tuple[int, int] | None:
    """Return ``(width, height)`` in pixels of the image a base64 ``data:`` URL holds, if readable.

    Only the bytes the image's header needs are decoded (through the
    ``imagesize`` library, as :func:`image_size` reads them), never the whole
    image: a data URL of many megabytes costs about as little as a small one.

    Parameters
    ----------
    url
        A URL; for an image, ``data:<media type>[;<parameter>...];base64,<data>``
        (the scheme in any case, as RFC 2397 allows).

    Returns
    -------
    tuple of int or None
        The size (a JPEG's EXIF rotation applied), or ``None`` when ``url``
        is not a ``data:`` URL or holds no image whose size can be read: it
        is not base64 (no ``;base64`` before the comma, a length that is
        not a multiple of 4, a character outside the base64 alphabet in the
        bytes read), its bytes do not start as a PNG, JPEG, GIF or WebP
        image, or the header gives no size. Bytes after the header are not
        read, so a bad character there goes unnoticed. Costing takes an
        image whose size is ``None`` at the most its detail can cost (see
        :mod:`cognoxium.tokens.images`), which is never less than its real
        cost.

    Examples
    --------
    >>> gif = "data:image/gif;base64,R0lGODlhAQABAIAAAAAAAP///yH5BAEAAAAALAAAAAABAAEAAAIBRAA7"
    >>> data_url_size(gif)
    (1, 1)
    >>> data_url_size("data:image/png;base64,bm90IGFuIGltYWdl") is None  # "not an image"
    True
    >>> data_url_size("https://example.org/cat.png") is None
    True
    """
    if not is_data_url(url):
        return None
    comma = url.find(",")
    if comma < 0 or not url[:comma].lower().endswith(";base64") or (len(url) - comma - 1) % 4:
        return None
    import imagesize  # with its urllib and XML imports, only when an image is read

    reader = _Base64Reader(url, comma + 1)
    try:
        if image_media_type(reader.read(12)) is None:
            return None
    except ValueError:  # binascii.Error: not base64
        return None
    width, height = imagesize.get(reader)  # (-1, -1) when unreadable, bad base64 included
    return (width, height) if width > 0 and height > 0 else None


def is_data_url(url: str) -> bool:
    """Return whether ``url`` is a ``data:`` URL (RFC 2397; the scheme in any case).

    Examples
    --------
    >>> is_data_url("DATA:image/png;base64,AAAA"), is_data_url("https://x.org/a.png")
    (True, False)
    """
    return url[:5].lower() == "data:"


def image_media_type_expr() -> pl.Expr:
    """Boolean expression: the row's ``metadata.media_type`` is one of :data:`IMAGE_MEDIA_TYPES`.

    Vectorised over the ``metadata`` column (canonical JSON text); never null.
    """
    declared = pl.col("metadata").str.json_path_match("$.media_type")
    return declared.is_in(list(IMAGE_MEDIA_TYPES)).fill_null(False)


def image_specs(df: pl.DataFrame) -> dict[int, ImageSpec]:
    """Find the rows of ``df`` that send an image (see the module's table) and describe each.

    Parameters
    ----------
    df
        The items, ``n`` rows (columns ``payload_kind``, ``binary``,
        ``ref_uri`` and ``metadata``).

    Returns
    -------
    dict of int to ImageSpec
        Row -> its image, for the image rows only.

    Raises
    ------
    RecordError
        Naming the row and the field, if ``metadata.detail`` is not one of
        :data:`IMAGE_DETAILS`; ``metadata.width``/``height`` are not both
        positive integers (or both absent); a Binary payload's bytes are not
        of the image type its ``metadata.media_type`` declares; or an
        image's header gives no size.
    """
    if not df.get_column("payload_kind").cast(pl.String).is_in(["binary", "reference"]).any():
        return {}
    if "binary" not in df.columns:
        df = df.with_columns(pl.lit(None, pl.Binary).alias("binary"))
    kind = pl.col("payload_kind").cast(pl.String)
    declares = pl.col("metadata").str.contains('"media_type":', literal=True)
    binary = (kind == "binary") & image_media_type_expr()
    reference = kind == "reference"
    uri = pl.col("ref_uri")
    image_uri = (
        pl.when(uri.str.contains(_DATA_URL))
        .then(uri.str.contains(_IMAGE_DATA_URL))
        .otherwise(uri.str.contains(_IMAGE_PATH))
    )
    flag = binary | (reference & (image_uri | declares))
    rows = np.flatnonzero(df.select(flag.fill_null(False)).to_series().to_numpy())
    if len(rows) == 0:
        return {}
    sub = df[rows].select(kind, "binary", "ref_uri", "metadata")
    specs: dict[int, ImageSpec] = {}
    for row, (payload_kind, data, uri, metadata_text) in zip(
        rows.tolist(), sub.iter_rows(), strict=True
    ):
        meta: dict[str, Any] = json.loads(metadata_text)
        try:
            spec = _binary_spec(data, meta) if payload_kind == "binary" else _ref_spec(uri, meta)
        except RecordError as error:
            raise RecordError(error.message, row=row, field=error.field) from None
        if spec is not None:
            specs[row] = spec
    return specs


def _detail(meta: dict[str, Any]) -> str | None:
    if "detail" not in meta:
        return None
    detail = meta["detail"]
    if detail not in IMAGE_DETAILS:
        raise RecordError(
            f"an image's detail is one of {', '.join(IMAGE_DETAILS)}, got {detail!r}",
            field="metadata.detail",
        )
    return str(detail)


def _binary_spec(data: bytes, meta: dict[str, Any]) -> ImageSpec:
    declared, media_type = meta["media_type"], image_media_type(data)
    if media_type != declared:
        shown = f"an {media_type}" if media_type else "no PNG, JPEG, GIF or WebP image"
        raise RecordError(
            f"declares {declared!r} but the binary payload's bytes show {shown}",
            field="metadata.media_type",
        )
    size = image_size(data)
    if size is None:
        raise RecordError(
            f"the {media_type} header gives no width and height; the image is truncated or corrupt",
            field="binary",
        )
    url = f"data:{media_type};base64,{base64.b64encode(data).decode('ascii')}"
    return ImageSpec(url=url, detail=_detail(meta), size=size)


def _ref_spec(uri: str, meta: dict[str, Any]) -> ImageSpec | None:
    declared = meta.get("media_type")
    if declared is not None and declared not in (*IMAGE_MEDIA_TYPES, ANY_IMAGE):
        return None
    width, height = meta.get("width"), meta.get("height")
    size = None
    if width is not None or height is not None:
        size = (_pixels(width, "width"), _pixels(height, "height"))
    if is_data_url(uri):
        # The bytes sent give the size, as a recount of the message reads it; None if unreadable.
        size = data_url_size(uri)
    return ImageSpec(url=uri, detail=_detail(meta), size=size)


def _pixels(value: Any, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise RecordError(
            f"an image's width and height are positive integers (pixels), both or "
            f"neither; got {value!r}",
            field=f"metadata.{field}",
        )
    return value
