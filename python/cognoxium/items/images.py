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

An inline image, a ``data:`` URL that a chat importer reads from an image
part (:mod:`cognoxium.formats`), is checked when it becomes an item, by
:func:`check_image_data_url`: it must be base64-encoded
(``data:<media type>;base64,<data>``), its media type one of
:data:`IMAGE_MEDIA_TYPES` (the formats both OpenAI and Anthropic accept; not
``image/svg+xml``, ``image/bmp``, ...), its data valid base64 and its bytes
start with that format's signature; otherwise the importer raises a
:class:`~cognoxium.exceptions.RecordError` (code ``record.image_invalid``)
naming the message and the content part. A URL of another scheme
(``https:``) is kept as it is: it is not fetched.

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
>>> check_image_data_url("data:image/png;base64," + base64.b64encode(png).decode())[1]
'image/png'
"""

from __future__ import annotations

import base64
import io
import json
import re
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
    "check_image_data_url",
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
_BASE64 = re.compile(r"[A-Za-z0-9+/]*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?")
"""Standard base64 with its padding (RFC 4648, section 4), no whitespace; the length is apart."""
_HEADER_CHARS = 256
"""How far a ``data:`` URL's comma is looked for: a media type and its parameters are short."""
_ACCEPTED = f"base64 data of {', '.join(IMAGE_MEDIA_TYPES[:-1])} or {IMAGE_MEDIA_TYPES[-1]}"
_ALIASES = {"image/jpg": "image/jpeg"}
"""Media types some tools write for an accepted one: read as it, sent as it."""
_FORMATS = {"image/png": "PNG", "image/jpeg": "JPEG", "image/gif": "GIF", "image/webp": "WebP"}


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


def _data_url_header(url: str) -> tuple[str, bool, int] | None:
    """``(media type, base64, start of the data)`` of a ``data:`` URL, or ``None``.

    The media type is lowercased, its parameters left out; ``base64`` says
    whether the last parameter is ``;base64`` (in any case, RFC 2397). ``None``
    when ``url`` is not a ``data:`` URL or has no comma in its first
    :data:`_HEADER_CHARS` characters. Only the header is read, never copied
    with the data.
    """
    if not is_data_url(url):
        return None
    comma = url.find(",", 5, _HEADER_CHARS)
    if comma < 0:
        return None
    media_type, *parameters = url[5:comma].split(";")
    encoded = bool(parameters) and parameters[-1].strip().lower() == "base64"
    return media_type.strip().lower(), encoded, comma + 1


def _shown(url: str) -> str:
    """The start of ``url``, to quote in an error without its megabytes of data."""
    return repr(url if len(url) <= 48 else url[:40] + "...")


def check_image_data_url(url: str) -> tuple[str, str]:
    r"""Check an inline image, a ``data:`` URL, as the chat APIs take it; return it and its type.

    OpenAI's Chat Completions API and Anthropic's Messages API take an
    inline image as base64 data of a PNG, JPEG, GIF or WebP file, whose
    declared media type must be the file's (OpenAI, "Images and vision";
    Anthropic, "Vision": ``media_type`` one of ``image/jpeg``, ``image/png``,
    ``image/gif``, ``image/webp``). This is the check every chat importer
    of :mod:`cognoxium.formats` runs on an image part's ``data:`` URL before
    the part becomes an item.

    The whole data is checked to be base64 (RFC 4648 alphabet and padding,
    a length that is a multiple of 4) without being decoded or copied; only
    its first 12 bytes are decoded, to read the format's signature (magic
    number): PNG ``\x89PNG\r\n\x1a\n``, JPEG ``\xff\xd8\xff``, GIF
    ``GIF87a`` or ``GIF89a``, WebP ``RIFF`` then ``WEBP`` at byte 8.

    Parameters
    ----------
    url
        A ``data:`` URL, ``data:<media type>;base64,<data>`` (the scheme,
        media type and ``base64`` in any case, parameters before
        ``;base64`` allowed, as RFC 2397 writes them; ``image/jpg``, which
        some tools write, is read as ``image/jpeg``).

    Returns
    -------
    tuple of str
        ``(url, media_type)``: the URL as the renderers send it,
        ``data:<media type>;base64,<data>`` (``url`` itself when it is
        already so written, else rebuilt once with the media type
        lowercased and its parameters left out), and its media type, one of
        :data:`IMAGE_MEDIA_TYPES`.

    Raises
    ------
    RecordError
        Code ``record.image_invalid``, without a row or field (the importer
        adds them), saying what was wrong and what is accepted; ``params``:
        ``problem`` (``"not_base64"``: no ``;base64`` before the data;
        ``"media_type"``: a type not in :data:`IMAGE_MEDIA_TYPES`;
        ``"invalid_base64"``: data that is not base64; ``"signature"``: bytes
        that are not of the declared type), ``part`` (``"media_type"`` or
        ``"data"``: the part of the URL to fix), ``media_type`` (declared),
        ``detected`` (the type the bytes show, or ``None``) and ``accepted``.

    See Also
    --------
    data_url_size : the size of a data URL's image, from its header.

    Examples
    --------
    >>> gif = "data:image/gif;base64,R0lGODlhAQABAIAAAAAAAP///yH5BAEAAAAALAAAAAABAAEAAAIBRAA7"
    >>> check_image_data_url(gif)[1]
    'image/gif'
    >>> check_image_data_url("data:image/svg+xml;base64,PHN2Zz48L3N2Zz4=")
    Traceback (most recent call last):
    ...
    cognoxium.exceptions.RecordError: an inline image's media type is 'image/svg+xml', which ...
    """
    header = _data_url_header(url)
    media_type, encoded, start = header if header is not None else ("", False, len(url))
    media_type = _ALIASES.get(media_type, media_type)
    params: dict[str, Any] = {"media_type": media_type or None, "detected": None}
    if not encoded:
        raise _image_error(
            f"an inline image must be base64-encoded, data:<media type>;base64,<data>; "
            f"got {_shown(url)}",
            "not_base64",
            "data",
            params,
        )
    if media_type not in IMAGE_MEDIA_TYPES:
        raise _image_error(
            f"an inline image's media type is {media_type!r}, which the chat APIs do not "
            "take as an image; convert the image to PNG, JPEG, GIF or WebP",
            "media_type",
            "media_type",
            params,
        )
    if (len(url) - start) % 4 or _BASE64.fullmatch(url, start) is None:
        raise _image_error(
            "an inline image's data is not valid base64: only the characters A-Z, a-z, 0-9, "
            "+ and /, padded with = to a multiple of 4 characters, no spaces or line breaks",
            "invalid_base64",
            "data",
            params,
        )
    detected = image_media_type(_Base64Reader(url, start).read(12))
    if detected != media_type:
        shown = (
            f"a {_FORMATS[detected]} image ({detected})"
            if detected
            else "no PNG, JPEG, GIF or WebP image"
        )
        raise _image_error(
            f"an inline image declares {media_type!r} but its bytes are {shown}; "
            + (f"declare {detected!r}" if detected else "send the image's own bytes"),
            "signature",
            "media_type" if detected else "data",
            {**params, "detected": detected},
        )
    prefix = f"data:{media_type};base64,"
    if len(prefix) != start or not url.startswith(prefix):
        url = prefix + url[start:]
    return url, media_type


def _image_error(message: str, problem: str, part: str, params: dict[str, Any]) -> RecordError:
    return RecordError(
        f"{message}; accepted: {_ACCEPTED}",
        code="record.image_invalid",
        params={**params, "problem": problem, "part": part, "accepted": list(IMAGE_MEDIA_TYPES)},
    )


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
        read, so a bad character there goes unnoticed (the chat importers
        check the whole data, :func:`check_image_data_url`). Costing takes
        an image whose size is ``None`` at the most its detail can cost (see
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
    header = _data_url_header(url)
    if header is None or not header[1] or (len(url) - header[2]) % 4:
        return None
    import imagesize  # with its urllib and XML imports, only when an image is read

    reader = _Base64Reader(url, header[2])
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
