"""What an image costs: OpenAI's tile rule for the ``image_url`` parts of a chat message.

Source: OpenAI API documentation, "Images and vision", section "Calculating
costs" (https://platform.openai.com/docs/guides/images-vision#calculating-costs).
For the GPT-4o family (``gpt-4o``, ``gpt-4.1``, ``gpt-4.5``, and ``gpt-4-turbo``
with vision), an image costs:

* ``detail: "low"``: a fixed ``base_tokens`` (85), whatever its size;
* ``detail: "high"``: the image is scaled down to fit a 2048 x 2048 square,
  then scaled down so that its shortest side is 768 px; each 512 px square
  tile that the result covers costs ``tile_tokens`` (170), plus
  ``base_tokens`` (85) once. The documented examples: 1024 x 1024 costs 765
  (4 tiles), 2048 x 4096 costs 1105 (6 tiles).

The same page gives other figures for other models, to be set as an
:class:`ImageRule` of the profile (``dataclasses.replace(profile,
image_rule=...)``):

===============================  ===========  ===========
models                           base_tokens  tile_tokens
===============================  ===========  ===========
gpt-4o, gpt-4.1, gpt-4.5         85           170
gpt-4o-mini                      2833         5667
o1, o1-pro, o3                   75           150
computer-use-preview             65           129
===============================  ===========  ===========

(``gpt-4.1-mini``, ``gpt-4.1-nano`` and ``o4-mini`` count 32 px patches
instead; no rule here covers them.)

Choices where the page is silent, each keeping the cost an upper bound:

* ``detail: "auto"`` (the API's default; the model picks low or high) costs
  as ``"high"``.
* Scaling only shrinks: an image already within 2048 px and 768 px on its
  shortest side is tiled as it is (the documented examples only shrink).
* Scaled sizes are kept exact, not rounded to pixels, so a fraction of a
  pixel past a tile boundary counts that tile.
* An image of unknown size at high detail costs the most any image can:
  ``base_tokens + tile_tokens * 8`` (a 768 x 2048 image fills 2 x 4 tiles,
  and no image covers more after scaling); 1445 for the GPT-4o family.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from cognoxium.items.images import IMAGE_DETAILS

__all__ = ["GPT_4O_IMAGES", "ImageRule"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ImageRule:
    """OpenAI's tile rule for the cost of one image, in tokens (see the module's notes).

    Parameters
    ----------
    base_tokens
        Tokens of every image, and all a low-detail image costs.
    tile_tokens
        Tokens of each 512 px tile of a high-detail image.
    tile_px, fit_px, short_px
        Tile side (512), the square a high-detail image is fitted into
        (2048) and its shortest side after scaling (768), in pixels.

    Raises
    ------
    ValueError
        If a figure is not a positive ``int`` (``base_tokens``,
        ``tile_tokens`` may be 0).

    Examples
    --------
    >>> GPT_4O_IMAGES.tokens("high", (1024, 1024)), GPT_4O_IMAGES.tokens("high", (2048, 4096))
    (765, 1105)
    >>> GPT_4O_IMAGES.tokens("low", (4096, 8192)), GPT_4O_IMAGES.tokens("auto", None)
    (85, 1445)
    """

    base_tokens: int
    tile_tokens: int
    tile_px: int = 512
    fit_px: int = 2048
    short_px: int = 768

    def __post_init__(self) -> None:
        for field in ("base_tokens", "tile_tokens", "tile_px", "fit_px", "short_px"):
            value = getattr(self, field)
            least = 0 if field.endswith("tokens") else 1
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ValueError(f"image rule: {field} must be an int >= {least}, got {value!r}")

    def tiles(self, width: int, height: int) -> int:
        """Number of tiles a high-detail image of ``width`` x ``height`` pixels covers."""
        w, h = Fraction(width), Fraction(height)
        longest = max(w, h)
        if longest > self.fit_px:
            w, h = w * self.fit_px / longest, h * self.fit_px / longest
        shortest = min(w, h)
        if shortest > self.short_px:
            w, h = w * self.short_px / shortest, h * self.short_px / shortest
        return math.ceil(w / self.tile_px) * math.ceil(h / self.tile_px)

    @property
    def max_tiles(self) -> int:
        """The most tiles any image covers: ``ceil(short/tile) * ceil(fit/tile)`` (8)."""
        return -(-self.short_px // self.tile_px) * -(-self.fit_px // self.tile_px)

    def tokens(self, detail: str, size: tuple[int, int] | None) -> int:
        """Return the tokens of one image.

        Parameters
        ----------
        detail
            ``"low"``, ``"high"`` or ``"auto"`` (costed as ``"high"``).
        size
            ``(width, height)`` in pixels, or ``None`` when unknown (a high
            or auto detail image then costs :attr:`max_tiles` tiles).

        Returns
        -------
        int
            Tokens, by the rule of the module's notes.

        Raises
        ------
        ValueError
            If ``detail`` is none of the three, or a size is not positive.
        """
        if detail == "low":
            return self.base_tokens
        if detail not in IMAGE_DETAILS:
            known = ", ".join(IMAGE_DETAILS)
            raise ValueError(f"an image's detail is one of {known}, got {detail!r}")
        if size is None:
            return self.base_tokens + self.tile_tokens * self.max_tiles
        width, height = size
        if width <= 0 or height <= 0:
            raise ValueError(f"an image's size is positive, got {width} x {height}")
        return self.base_tokens + self.tile_tokens * self.tiles(width, height)


GPT_4O_IMAGES = ImageRule(base_tokens=85, tile_tokens=170)
"""The image rule of the GPT-4o family (and GPT-4 Turbo): 85 tokens base, 170 per tile."""
