"""A pack built for Anthropic costs images by Anthropic's rule and says its counts are estimated.

The expected figures are worked out here from the documented rule (Anthropic,
"Vision", "Evaluate image size" and "Calculate image costs"): an image whose
long edge is over 1568 px is scaled down to it, one still over 1,640 tokens
(784 x 1568, the largest size the documented table sends unscaled) is scaled
down to that, and an image costs ``width * height / 750`` tokens, rounded up.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
from datetime import UTC, datetime
from typing import Any

import polars as pl
import pytest

from cognoxium.formats.openai import from_openai_messages
from cognoxium.frame import CognitionFrame
from cognoxium.items.convert import items_to_frame
from cognoxium.items.model import ContextItem
from cognoxium.packing.message_rules import validate_anthropic_messages
from cognoxium.packing.packer import ContextPack
from tests.image_files import png

T = datetime(2026, 1, 1, tzinfo=UTC)
SHOT = "https://example.org/shot.png"
QUESTION = "What is in this screenshot?"
QUESTION_TOKENS = 10  # framing 4 ("user" and 3) + 6 for the question, as OpenAI's packs cost it
PRIMING = 3
CAP = 1640  # 784 x 1568, the largest size the documented table sends unscaled


def screenshot(size: tuple[int, int] | None = None, detail: str | None = None) -> CognitionFrame:
    """The user's message of a question and an image by URL, the image's size in its metadata."""
    image: dict[str, str] = {"url": SHOT} if detail is None else {"url": SHOT, "detail": detail}
    message = {
        "role": "user",
        "content": [{"type": "text", "text": QUESTION}, {"type": "image_url", "image_url": image}],
    }
    frame = from_openai_messages([message], conversation_id="c")
    if size is None:
        return frame
    sized = pl.col("metadata").str.replace("}$", f',"width":{size[0]},"height":{size[1]}}}')
    return frame.with_columns(
        pl.when(pl.col("payload_kind") == "reference")
        .then(sized)
        .otherwise(pl.col("metadata"))
        .alias("metadata")
    )


def costs(pack: ContextPack) -> list[tuple[str, int | None]]:
    return [(e.id, e.tokens) for e in pack.manifest.entries]


def test_the_screenshot_costs_anthropics_rule() -> None:
    pack = screenshot((1092, 1092)).pack(100_000, as_of=T, target="anthropic")
    image = -(-1092 * 1092 // 750)  # 1,192,464 px / 750 = 1589.95: 1590, the page's "~1590"
    assert costs(pack) == [("c:0.0", QUESTION_TOKENS), ("c:0.1", image)]
    assert pack.used_tokens == QUESTION_TOKENS + image + PRIMING == 1603


@pytest.mark.parametrize(
    ("size", "image"),
    [
        # Long edge 4000 > 1568: 1568 x 1176 = 1,843,968 px, 2458.6 tokens; then to the cap.
        ((4000, 3000), CAP),
        # Long edge within, 1,500,000 px = 2000 tokens: scaled down to the cap.
        ((1500, 1000), CAP),
        # Long edge 3136 > 1568: 1568 x 100 = 156,800 px, 209.07 tokens.
        ((3136, 200), -(-1568 * 100 // 750)),
        ((200, 3136), 210),
    ],
)
def test_a_large_image_is_scaled_down_to_the_documented_limits(
    size: tuple[int, int], image: int
) -> None:
    pack = screenshot(size).pack(100_000, as_of=T, target="anthropic")
    assert costs(pack) == [("c:0.0", QUESTION_TOKENS), ("c:0.1", image)]


@pytest.mark.parametrize("detail", [None, "low", "high", "auto"])
def test_an_image_of_unknown_size_costs_the_cap_at_any_detail(detail: str | None) -> None:
    pack = screenshot(None, detail).pack(100_000, as_of=T, target="anthropic")
    assert costs(pack) == [("c:0.0", QUESTION_TOKENS), ("c:0.1", CAP)]


def test_a_small_image_that_fits_anthropics_cost_is_packed() -> None:
    # 200 x 200: 53.3, so 54 tokens for Anthropic, 85 + 170 = 255 by OpenAI's tiles.
    frame = screenshot((200, 200))
    budget = QUESTION_TOKENS + 54 + PRIMING
    pack = frame.pack(budget, as_of=T, target="anthropic")
    assert pack.ids == ["c:0.0", "c:0.1"]
    assert pack.used_tokens == budget
    # OpenAI's 255 does not fit, and the message goes whole or not at all.
    assert frame.pack(budget, as_of=T).ids == []


# The manifests OpenAI's packs of these cases had, as bytes (SHA-256 of to_json()).
OPENAI_MANIFESTS = {
    ((1092, 1092), 100_000): "08ffaafa408b2f8a4f468d2fe3fba0f8ab77da04b9a75ad1da042da7a6f10664",
    ((1092, 1092), 800): "2b21b2847d56db6f605889f1d35e3fafc86864ca90d4ce8fe35aad3149f8932b",
    (None, 100_000): "ce5c513191615423f6d2c50088e9ee58c570cee39e55253a40a7aa7a456df40b",
}


@pytest.mark.parametrize(("case", "digest"), OPENAI_MANIFESTS.items())
@pytest.mark.parametrize("target", [None, "openai"])
def test_openai_packs_keep_their_manifests(
    case: tuple[tuple[int, int] | None, int], digest: str, target: str | None
) -> None:
    size, budget = case
    options: dict[str, Any] = {} if target is None else {"target": target}
    pack = screenshot(size).pack(budget, as_of=T, **options)
    text = pack.manifest.to_json()
    assert hashlib.sha256(text.encode("utf-8")).hexdigest() == digest
    assert '"estimated"' not in text
    assert not pack.manifest.estimated


def test_openai_tile_costs_are_unchanged() -> None:
    openai = screenshot((1092, 1092)).pack(100_000, as_of=T, target="openai")
    assert costs(openai) == [("c:0.0", QUESTION_TOKENS), ("c:0.1", 85 + 170 * 4)]
    unknown = screenshot().pack(100_000, as_of=T)
    assert costs(unknown) == [("c:0.0", QUESTION_TOKENS), ("c:0.1", 85 + 170 * 8)]


@pytest.mark.parametrize("size", [(1092, 1092), None])
def test_an_anthropic_manifest_says_its_counts_are_estimated(size: tuple[int, int] | None) -> None:
    pack = screenshot(size).pack(100_000, as_of=T, target="anthropic")
    assert pack.manifest.estimated
    assert json.loads(pack.manifest.to_json())["estimated"] is True


def test_an_anthropic_manifest_without_images_says_so_too() -> None:
    frame = from_openai_messages([{"role": "user", "content": QUESTION}], conversation_id="c")
    assert frame.pack(100, as_of=T, target="anthropic").manifest.estimated
    assert not frame.pack(100, as_of=T).manifest.estimated


def test_anthropic_image_packs_are_deterministic() -> None:
    first = screenshot((4000, 3000)).pack(1000, as_of=T, target="anthropic")
    second = screenshot((4000, 3000)).pack(1000, as_of=T, target="anthropic")
    assert first.manifest.to_json() == second.manifest.to_json()
    assert first.to_anthropic() == second.to_anthropic()


def test_one_frame_packs_for_both_targets_each_by_its_own_rule() -> None:
    frame = screenshot((1000, 1000))
    rounds = [frame.pack(5000, as_of=T, target=t) for t in ("openai", "anthropic", "openai")]
    assert [costs(p)[1][1] for p in rounds] == [85 + 170 * 4, 1334, 85 + 170 * 4]


def _data_url(width: int, height: int) -> str:
    return "data:image/png;base64," + base64.b64encode(png(width, height)).decode("ascii")


def _chat(turns: int) -> list[dict[str, Any]]:
    """A history of ``turns`` screenshots (1000 x 1000, 1334 tokens each), each answered."""
    messages: list[dict[str, Any]] = []
    for n in range(turns):
        image = {"type": "image_url", "image_url": {"url": _data_url(1000, 1000)}}
        text = {"type": "text", "text": f"Screenshot {n}: what changed?"}
        messages.append({"role": "user", "content": [text, image]})
        messages.append({"role": "assistant", "content": f"Step {n} moved the button."})
    return messages


MODEL = "anthropic:claude-sonnet-4-5"


def test_continuing_anthropic_packs_keep_their_prefix_and_bill_the_cache() -> None:
    earlier: ContextPack | None = None
    packs: list[ContextPack] = []
    for turns in (1, 2, 3, 4):
        frame = from_openai_messages(_chat(turns), conversation_id="c")
        earlier = frame.pack(4500, as_of=T, target="anthropic", previous=earlier, cache_model=MODEL)
        validate_anthropic_messages(earlier.to_anthropic())
        packs.append(earlier)
    images = [e.tokens for e in packs[-1].manifest.entries if e.id.endswith(".1")]
    assert images == [None, None, 1334, 1334]  # 1,000,000 px / 750 = 1333.3; two evicted
    for before, after in itertools.pairwise(packs):
        report = after.manifest.cache
        assert report is not None
        assert after.manifest.estimated
        assert report.cache_model == MODEL
        assert report.input_tokens == after.used_tokens  # the input billed is the pack's count
        assert report.billed_tokens is not None
        assert report.billed_tokens > 0
        if report.eviction_steps == 0:
            n = len(before.messages)
            assert after.messages[:n] == before.messages
    assert packs[-1].used_tokens <= 4500
    assert any(p.manifest.cache and p.manifest.cache.eviction_steps for p in packs)


def test_an_image_item_costs_its_message_around_anthropics_figure() -> None:
    start = datetime(2024, 5, 1, tzinfo=UTC)
    text = {"kind": "text", "text": "Compare."}
    wide = {"kind": "reference", "uri": "https://x.org/wide.png", "title": "Wide"}
    items = [
        ContextItem(id="q", role="user", payload=text, created_at=start),
        ContextItem(
            id="wide",
            role="document",
            payload=wide,
            metadata={"width": 6272, "height": 400},
            created_at=start,
        ),
    ]
    frame = CognitionFrame.from_conformed(items_to_frame(items))
    anthropic = dict(costs(frame.pack(5000, as_of=T, target="anthropic")))["wide"]
    openai = dict(costs(frame.pack(5000, as_of=T)))["wide"]
    # Anthropic: 6272 x 400 to 1568 x 100, 156,800 px, 209.07 tokens: 210.
    # OpenAI: 2048 x 130.6 after fitting, 4 x 1 tiles: 85 + 170 * 4.
    assert anthropic is not None
    assert openai is not None
    assert anthropic - openai == 210 - (85 + 170 * 4)
