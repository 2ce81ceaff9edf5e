"""The image rules (OpenAI's tiles, Anthropic's area): documented examples, scaling, image parts."""

from __future__ import annotations

import base64
import dataclasses
import math
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cognoxium.exceptions import RecordError
from cognoxium.tokens.images import CLAUDE_IMAGES, GPT_4O_IMAGES, AnthropicImageRule, ImageRule
from cognoxium.tokens.profiles import get_profile
from tests.image_files import BUILDERS, png

RULE = GPT_4O_IMAGES


@pytest.mark.parametrize(
    ("size", "tiles"),
    [
        ((1024, 1024), 4),  # documented: scaled to 768 x 768, 765 tokens
        ((2048, 4096), 6),  # documented: 1024 x 2048, then 768 x 1536, 1105 tokens
        ((512, 512), 1),
        ((513, 512), 2),
        ((100, 60), 1),  # small images are not enlarged
        ((768, 2048), 8),  # the most tiles any image covers
        ((1536, 768), 6),
        ((4096, 100), 4),  # fitted to 2048 x 50: short side already <= 768
        ((1025, 1025), 4),  # 768 x 768
        ((769, 2049), 8),  # 768.6 x 2048, then 768 x 2046.7: 2 x 4
        ((3000, 1000), 8),  # 2048 x 682.7: 4 x 2
        ((3000, 900), 8),  # 2048 x 614.4: 4 x 2
        ((3000, 700), 4),  # 2048 x 477.9: 4 x 1
    ],
)
def test_high_detail_tiles(size: tuple[int, int], tiles: int) -> None:
    assert RULE.tiles(*size) == tiles
    assert RULE.tokens("high", size) == 85 + 170 * tiles
    assert RULE.tokens("auto", size) == RULE.tokens("high", size)
    assert RULE.tiles(*reversed(size)) == tiles


def test_the_documented_examples() -> None:
    assert RULE.tokens("high", (1024, 1024)) == 765
    assert RULE.tokens("high", (2048, 4096)) == 1105
    assert RULE.tokens("low", (4096, 8192)) == 85


def test_an_image_of_unknown_size_costs_the_most_any_image_can() -> None:
    assert RULE.max_tiles == 8
    assert RULE.tokens("high", None) == RULE.tokens("auto", None) == 85 + 170 * 8 == 1445
    assert RULE.tokens("low", None) == 85


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 20000), st.integers(1, 20000))
def test_no_image_covers_more_than_max_tiles(width: int, height: int) -> None:
    assert 1 <= RULE.tiles(width, height) <= RULE.max_tiles


def test_other_models_figures() -> None:
    mini = ImageRule(base_tokens=2833, tile_tokens=5667)
    assert mini.tokens("high", (1024, 1024)) == 2833 + 4 * 5667
    assert mini.tokens("low", (1024, 1024)) == 2833


@pytest.mark.parametrize(
    "figures", [{"base_tokens": -1}, {"tile_tokens": 1.5}, {"tile_px": 0}, {"fit_px": True}]
)
def test_bad_figures_raise_value_error(figures: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="image rule"):
        ImageRule(**{"base_tokens": 85, "tile_tokens": 170, **figures})  # type: ignore[arg-type]


def test_bad_detail_or_size_raise_value_error() -> None:
    with pytest.raises(ValueError, match="one of low, high, auto"):
        RULE.tokens("medium", (10, 10))
    with pytest.raises(ValueError, match="positive"):
        RULE.tokens("high", (0, 10))


def test_the_default_rule_keeps_the_fingerprint_another_changes_it() -> None:
    profile = get_profile("o200k_base")
    same = dataclasses.replace(profile, image_rule=ImageRule(base_tokens=85, tile_tokens=170))
    other = dataclasses.replace(profile, image_rule=ImageRule(base_tokens=75, tile_tokens=150))
    assert same.fingerprint == profile.fingerprint
    assert other.fingerprint != profile.fingerprint
    with pytest.raises(ValueError, match="image_rule"):
        dataclasses.replace(profile, image_rule=(85, 170))  # type: ignore[arg-type]


def claude_tokens(width: int, height: int) -> int:
    """Anthropic's rule by hand: long edge to 1568 px, ceil(w * h / 750), at most 1640."""
    scale = min(Fraction(1), Fraction(1568, max(width, height)))
    return min(math.ceil(width * scale * height * scale / 750), 1640)


def test_anthropic_documented_examples() -> None:
    # "Calculate image costs": 200 x 200 about 54, 1000 x 1000 about 1334, 1092 x 1092 about 1590
    sizes = [(200, 200), (1000, 1000), (1092, 1092)]
    assert [CLAUDE_IMAGES.tokens("auto", size) for size in sizes] == [54, 1334, 1590]


@pytest.mark.parametrize(
    ("size", "tokens"),
    [
        ((3136, 200), 210),  # long edge 1568: 1568 x 100 = 156,800 px, 209.07 tokens
        ((1568, 100), 210),  # already within: the same pixels
        ((1500, 1000), 1640),  # 2,000 tokens: scaled down to the cap
        ((784, 1568), 1640),  # the largest size the documented table sends unscaled
        ((4000, 3000), 1640),  # 1568 x 1176 = 1,843,968 px, 2458.6 tokens: then to the cap
        ((1, 1), 1),  # small images are not enlarged
        ((1095, 1095), 1599),  # 1,199,025 px: 1598.7 tokens, just under the cap
    ],
)
def test_anthropic_scaling(size: tuple[int, int], tokens: int) -> None:
    assert CLAUDE_IMAGES.tokens("high", size) == tokens == claude_tokens(*size)
    assert CLAUDE_IMAGES.tokens("auto", size) == CLAUDE_IMAGES.tokens("low", size) == tokens
    assert CLAUDE_IMAGES.tokens("high", (size[1], size[0])) == tokens


def test_anthropic_long_edge_is_scaled_exactly() -> None:
    # 4000 x 3000 fits to 1568 x 1176; 3137 x 1000 to 1568 x 499.8 (not rounded to pixels)
    assert CLAUDE_IMAGES.pixels(4000, 3000) == 1568 * 1176
    assert CLAUDE_IMAGES.pixels(3137, 1000) == Fraction(1568 * 1568 * 1000, 3137)
    assert CLAUDE_IMAGES.tokens("high", (3137, 1000)) == 1046  # 1045.0001 tokens


def test_anthropic_image_of_unknown_size_costs_the_most_any_image_can() -> None:
    assert [CLAUDE_IMAGES.tokens(d, None) for d in ("low", "high", "auto")] == [1640] * 3


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 20000), st.integers(1, 20000))
def test_anthropic_cost_is_the_documented_formula(width: int, height: int) -> None:
    assert CLAUDE_IMAGES.tokens("high", (width, height)) == claude_tokens(width, height) <= 1640


def test_anthropic_rule_figures_and_errors() -> None:
    assert AnthropicImageRule(long_edge_px=2576, max_tokens=4784).tokens("auto", (2576, 1)) == 4
    with pytest.raises(ValueError, match="image rule: max_tokens"):
        AnthropicImageRule(max_tokens=0)
    with pytest.raises(ValueError, match="image rule: pixels_per_token"):
        AnthropicImageRule(pixels_per_token=True)
    with pytest.raises(ValueError, match="one of low, high, auto"):
        CLAUDE_IMAGES.tokens("medium", (10, 10))
    with pytest.raises(ValueError, match="positive"):
        CLAUDE_IMAGES.tokens("high", (10, -1))


def image_message(url: str, detail: str | None = None, text: str | None = None) -> dict:
    image: dict[str, str] = {"url": url}
    if detail is not None:
        image["detail"] = detail
    parts: list[dict] = [{"type": "text", "text": text}] if text else []
    return {"role": "user", "content": [*parts, {"type": "image_url", "image_url": image}]}


@pytest.mark.parametrize("media_type", sorted(BUILDERS))
def test_a_data_url_image_costs_its_size_read_from_its_bytes(media_type: str) -> None:
    profile = get_profile("cl100k_base")
    data = BUILDERS[media_type](2048, 4096)
    url = f"data:{media_type};base64," + base64.b64encode(data).decode("ascii")
    # framing 4 (3 + "user"), the title 2 tokens, the image 1105
    assert profile.message_tokens(image_message(url, "high", "A cat")) == 4 + 2 + 1105
    assert profile.message_tokens(image_message(url, "low")) == 4 + 85
    assert profile.message_tokens(image_message(url)) == 4 + 1105  # no detail: auto


def test_a_url_image_costs_its_given_size_or_the_most_its_detail_can() -> None:
    profile = get_profile("o200k_base")
    message = image_message("https://x.org/a.png", "high")
    sizes = {"https://x.org/a.png": (512, 512)}
    assert profile.message_tokens(message, image_sizes=sizes) == 4 + 255
    assert profile.message_tokens(message) == 4 + 1445
    assert profile.request_tokens([message], image_sizes=sizes) == 4 + 255 + 3


@pytest.mark.parametrize(
    ("content", "field"),
    [
        (
            [{"type": "image_url", "image_url": {"url": "u", "detail": "max"}}],
            "content[0].image_url.detail",
        ),
        ([{"type": "text", "text": "a"}, {"type": "input_audio"}], "content[1]"),
        ([{"type": "image_url", "image_url": "https://x.org/a.png"}], "content[0]"),
    ],
)
def test_bad_parts_name_the_part(content: list[object], field: str) -> None:
    with pytest.raises(RecordError) as caught:
        get_profile("cl100k_base").request_tokens([{"role": "user", "content": content}])
    assert (caught.value.row, caught.value.field) == (0, field)


@pytest.mark.parametrize(
    "url",
    [
        "data:image/png;base64," + base64.b64encode(png(10, 10)[:12]).decode("ascii"),  # truncated
        "data:image/png;base64,AAAA",  # not an image
        "data:image/png;base64,%%%%",  # not base64
        "data:image/png;base64,iVBORw0KGgo",  # a length not a multiple of 4
        "data:image/png,%89PNG",  # not base64 encoded
        "data:image/bmp;base64,Qk0eAAAAAAAAABoAAAAMAAAAAQABAAEAGAAAAP8A",  # another format
    ],
)
def test_a_data_url_without_a_readable_image_costs_the_most_its_detail_can(url: str) -> None:
    # Not a crash: an image of unknown size, which packing costs the same way.
    profile = get_profile("cl100k_base")
    assert profile.message_tokens(image_message(url, "high")) == 4 + 1445
    assert profile.message_tokens(image_message(url)) == 4 + 1445
    assert profile.message_tokens(image_message(url, "low")) == 4 + 85


def test_a_data_url_costs_its_own_size_whatever_image_sizes_says() -> None:
    profile = get_profile("cl100k_base")
    url = "data:image/png;base64," + base64.b64encode(png(1, 1)).decode("ascii")
    message = image_message(url, "high")
    assert profile.message_tokens(message, image_sizes={url: (2048, 4096)}) == 4 + 255


@pytest.mark.parametrize(
    ("size", "tokens"),
    [
        ((1, 1), 85 + 170),
        ((4000, 3000), 85 + 170 * 4),  # 2048 x 1536, then 1024 x 768: 2 x 2 tiles
        ((3000, 4000), 85 + 170 * 4),
        ((2048, 4096), 1105),  # documented
        ((1024, 1024), 765),  # documented
        ((10000, 10000), 85 + 170 * 4),  # 768 x 768
        ((8000, 1000), 85 + 170 * 4),  # 2048 x 256: 4 x 1
    ],
)
def test_a_large_data_url_image_is_tiled_by_the_documented_rule(
    size: tuple[int, int], tokens: int
) -> None:
    profile = get_profile("cl100k_base")
    url = "data:image/png;base64," + base64.b64encode(png(*size)).decode("ascii")
    assert profile.message_tokens(image_message(url, "high")) == 4 + tokens
    assert profile.message_tokens(image_message(url)) == 4 + tokens
