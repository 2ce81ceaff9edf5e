"""Smallest headers of PNG, JPEG, GIF and WebP files of a given size, built by their specs.

Enough bytes for a reader of headers to find the size; no pixel data. Built
here with ``struct`` so tests do not read sizes with the code under test.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable


def png(width: int, height: int) -> bytes:
    """PNG signature and IHDR chunk (PNG spec, section 11.2.2), with its CRC."""
    body = b"IHDR" + struct.pack(">IIBBBBB", width, height, 8, 6, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + body + struct.pack(">I", zlib.crc32(body))


def jpeg(width: int, height: int) -> bytes:
    """SOI, a JFIF APP0 segment, then a baseline SOF0 segment (ITU T.81, B.2.2)."""
    app0 = b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00"
    sof0 = b"\xff\xc0" + struct.pack(">HBHHB", 11, 8, height, width, 1) + b"\x01\x11\x00"
    return b"\xff\xd8" + app0 + sof0


def gif(width: int, height: int) -> bytes:
    """GIF89a header and logical screen descriptor (GIF89a spec, section 18)."""
    return b"GIF89a" + struct.pack("<HHBBB", width, height, 0, 0, 0)


def webp(width: int, height: int) -> bytes:
    """RIFF header and a VP8X chunk (WebP container spec): sizes minus one, 24-bit LE."""
    vp8x = b"VP8X" + struct.pack("<I", 10) + b"\x00" * 4
    vp8x += (width - 1).to_bytes(3, "little") + (height - 1).to_bytes(3, "little")
    return b"RIFF" + struct.pack("<I", 4 + len(vp8x)) + b"WEBP" + vp8x


BUILDERS: dict[str, Callable[[int, int], bytes]] = {
    "image/png": png,
    "image/jpeg": jpeg,
    "image/gif": gif,
    "image/webp": webp,
}
"""Media type -> builder of a file of that type and size."""
