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
            (any case). It is sent as its URI; its size, if known, is
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
    "image_media_type",
    "image_media_type_expr",
    "image_size",
    "image_specs",
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
    if width is None and height is None:
        return ImageSpec(url=uri, detail=_detail(meta), size=None)
    size = (_pixels(width, "width"), _pixels(height, "height"))
    return ImageSpec(url=uri, detail=_detail(meta), size=size)


def _pixels(value: Any, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise RecordError(
            f"an image's width and height are positive integers (pixels), both or "
            f"neither; got {value!r}",
            field=f"metadata.{field}",
        )
    return value
