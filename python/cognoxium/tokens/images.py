"""What an image costs: OpenAI's tile rule and Anthropic's area rule.

OpenAI's tile rule
------------------
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

Anthropic's area rule
---------------------
Source: Anthropic API documentation, "Vision", sections "Evaluate image
size" and "Calculate image costs"
(https://docs.anthropic.com/en/docs/build-with-claude/vision). An image
whose long edge is more than 1568 px, or that is more than about 1,600
tokens, is first scaled down, keeping its aspect ratio, until it is within
both limits; it then costs ``tokens = (width px * height px) / 750``. The
documented examples: 200 x 200 costs about 54, 1000 x 1000 about 1334,
1092 x 1092 (the largest square sent unscaled) about 1590. A pack built for
Anthropic costs its images by :data:`CLAUDE_IMAGES`
(:class:`AnthropicImageRule`); Anthropic's API has no ``detail``, so an
image costs the same at every detail.

Choices where the page is silent:

* The quotient is rounded up to a whole token, as the three documented
  examples are (53.3, 1333.3 and 1589.95 give 54, 1334 and 1590).
* Scaling only shrinks, and scaled sizes are kept exact: the long edge is
  brought to 1568 px, then an image still over ``max_tokens`` (1,640) is
  scaled to cost exactly that, so no image costs more than 1,640 tokens.
  The cap is not the page's "about 1,600": its table of sizes sent
  unscaled ends at 784 x 1568, 1,639.1 tokens by the formula, and a count
  meant to fit a budget stays at or above what the API sends (a pack built
  for Anthropic says its counts are estimated).
* An image of unknown size costs the most any image can: ``max_tokens``
  (1,640).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from cognoxium.items.images import IMAGE_DETAILS

__all__ = ["CLAUDE_IMAGES", "GPT_4O_IMAGES", "AnthropicImageRule", "ImageRule"]


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
        _check_detail(detail)
        if size is None:
            return self.base_tokens + self.tile_tokens * self.max_tiles
        width, height = _checked_size(size)
        return self.base_tokens + self.tile_tokens * self.tiles(width, height)


GPT_4O_IMAGES = ImageRule(base_tokens=85, tile_tokens=170)
"""The image rule of the GPT-4o family (and GPT-4 Turbo): 85 tokens base, 170 per tile."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AnthropicImageRule:
    """Anthropic's area rule for the cost of one image, in tokens (see the module's notes).

    Parameters
    ----------
    pixels_per_token
        Pixels of the image (after scaling) per token (750).
    long_edge_px
        The longest edge an image is sent with (1568), in pixels; a longer
        one is scaled down to it.
    max_tokens
        The most an image costs (1,640, that of 784 x 1568, the largest size
        Anthropic's table sends unscaled): one that would cost more after
        fitting its long edge is scaled down to cost that.

    Raises
    ------
    ValueError
        If a figure is not an ``int`` >= 1.

    Examples
    --------
    >>> [CLAUDE_IMAGES.tokens("auto", size) for size in [(200, 200), (1000, 1000), (1092, 1092)]]
    [54, 1334, 1590]
    >>> CLAUDE_IMAGES.tokens("high", (4000, 3000)), CLAUDE_IMAGES.tokens("low", None)
    (1640, 1640)
    """

    pixels_per_token: int = 750
    long_edge_px: int = 1568
    max_tokens: int = 1640

    def __post_init__(self) -> None:
        for field in ("pixels_per_token", "long_edge_px", "max_tokens"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"image rule: {field} must be an int >= 1, got {value!r}")

    def pixels(self, width: int, height: int) -> Fraction:
        """The pixels an image of ``width`` x ``height`` is sent with, after fitting its long edge.

        Exact (a :class:`~fractions.Fraction`), before the cap of
        ``max_tokens``, which :meth:`tokens` applies.
        """
        area = Fraction(width * height)
        longest = max(width, height)
        if longest > self.long_edge_px:
            area *= Fraction(self.long_edge_px, longest) ** 2
        return area

    def tokens(self, detail: str, size: tuple[int, int] | None) -> int:
        """Return the tokens of one image.

        Parameters
        ----------
        detail
            ``"low"``, ``"high"`` or ``"auto"``: checked, then ignored
            (Anthropic's API takes no detail).
        size
            ``(width, height)`` in pixels, or ``None`` when unknown (the
            image then costs ``max_tokens``).

        Returns
        -------
        int
            ``min(ceil(pixels / pixels_per_token), max_tokens)``, with
            ``pixels`` as :meth:`pixels` gives them.

        Raises
        ------
        ValueError
            If ``detail`` is none of the three, or a size is not positive.
        """
        _check_detail(detail)
        if size is None:
            return self.max_tokens
        width, height = _checked_size(size)
        return min(math.ceil(self.pixels(width, height) / self.pixels_per_token), self.max_tokens)


CLAUDE_IMAGES = AnthropicImageRule()
"""Claude's image rule: 750 pixels a token, 1568 px long edge, 1,640 tokens at most."""


def _check_detail(detail: str) -> None:
    """Raise ``ValueError`` unless ``detail`` is one of :data:`IMAGE_DETAILS`."""
    if detail not in IMAGE_DETAILS:
        known = ", ".join(IMAGE_DETAILS)
        raise ValueError(f"an image's detail is one of {known}, got {detail!r}")


def _checked_size(size: tuple[int, int]) -> tuple[int, int]:
    """``size`` as ``(width, height)``; ``ValueError`` unless both are positive."""
    width, height = size
    if width <= 0 or height <= 0:
        raise ValueError(f"an image's size is positive, got {width} x {height}")
    return width, height
