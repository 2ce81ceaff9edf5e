"""How frames, packs and manifests show themselves: one-line reprs and escaped notebook HTML."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta

import polars as pl
import pytest

from cognoxium.frame.frame import CognitionFrame
from cognoxium.packing import ContextPack, PackManifest

T0 = datetime(2024, 5, 1, tzinfo=UTC)
AS_OF = T0 + timedelta(days=1)
SCRIPT = "<script>alert('x')</script>"


def _frame(n: int) -> CognitionFrame:
    return CognitionFrame(
        [
            {
                "id": f"i{k}" if k else SCRIPT,
                "role": "user",
                "text": f"{SCRIPT} turn {k} " + "words " * (k % 7),
                "created_at": (T0 + timedelta(minutes=k)).isoformat(),
            }
            for k in range(n)
        ]
    )


@pytest.fixture(scope="module")
def pack() -> ContextPack:
    return _frame(40).pack(120, as_of=AS_OF, label=SCRIPT)


def test_pack_repr_is_one_short_line(pack: ContextPack) -> None:
    text = repr(pack)
    totals = pack.manifest.totals
    assert text == (
        f"<ContextPack budget=120 used={pack.used_tokens} included={len(pack)} "
        f"excluded={totals.excluded} manifest sha256:{pack.manifest.digest[:12]}>"
    )
    assert len(pack) > 0
    assert totals.excluded > 0
    assert len(pack) + totals.excluded == 40
    big = _frame(400).pack(100_000, as_of=AS_OF)
    assert "\n" not in repr(big)
    assert len(repr(big)) < 120


def _counts(text: str) -> dict[str, str]:
    """The ``name=value`` counts of a one-line repr."""
    return dict(re.findall(r"\b([a-z_]+)=(\d+)\b", text))


def _html_counts(markup: str) -> dict[str, str]:
    """The ``<th>name</th><td>value</td>`` rows of an HTML repr whose value is a count."""
    return dict(re.findall(r"<tr><th>([^<]+)</th><td>(\d+)</td></tr>", markup))


def test_a_pack_names_its_counts_as_its_manifest_does(pack: ContextPack) -> None:
    # One meaning per name: a count the pack shows has the manifest's name and value.
    for ours, theirs in [
        (_counts(repr(pack)), _counts(repr(pack.manifest))),
        (_html_counts(pack._repr_html_()), _html_counts(pack.manifest._repr_html_())),
    ]:
        assert {"included", "excluded"} <= ours.keys()
        assert {name: ours[name] for name in ours.keys() & theirs.keys()} == {
            name: theirs[name] for name in ours.keys() & theirs.keys()
        }
        assert not {"kept", "dropped"} & ours.keys()
    totals = pack.manifest.totals
    assert _counts(repr(pack))["included"] == str(totals.included) == str(len(pack))
    assert _counts(repr(pack))["excluded"] == str(totals.excluded)


def test_manifest_repr_and_digest(pack: ContextPack) -> None:
    manifest = pack.manifest
    assert PackManifest.from_json(manifest.to_json()).digest == manifest.digest
    assert repr(manifest) == (
        f"<PackManifest label={SCRIPT!r} budget=120 used={manifest.used_tokens} "
        f"included={len(pack)} excluded={manifest.totals.excluded} of 40 items "
        f"sha256:{manifest.digest[:12]}>"
    )
    again = _frame(40).pack(120, as_of=AS_OF, label=SCRIPT).manifest
    assert again.digest == manifest.digest
    assert _frame(40).pack(121, as_of=AS_OF, label=SCRIPT).manifest.digest != manifest.digest
    relabelled = manifest.model_copy(update={"label": "x" * 1000})
    assert f"label='{'x' * 39}…' budget=120" in repr(relabelled)
    assert relabelled.digest != manifest.digest
    assert PackManifest.from_json(relabelled.to_json()).digest == relabelled.digest
    assert manifest.digest == again.digest  # the cached digest stays the manifest's own


def test_the_digest_follows_every_entry_value(pack: ContextPack) -> None:
    manifest = pack.manifest
    entries = manifest.to_polars()
    for column, value in [("tokens", 999_999), ("reason", "over_budget"), ("rank", 0.5)]:
        data = manifest.to_dict()
        row = next(i for i, e in enumerate(data["entries"]) if e[column] != value)
        if column == "reason":  # the header's totals follow, or the manifest is refused
            by_reason = data["totals"]["by_reason"]
            by_reason[data["entries"][row]["reason"]] -= 1
            by_reason[value] = by_reason.get(value, 0) + 1
        data["entries"][row][column] = value
        changed = PackManifest.from_json(json.dumps(data))
        assert changed != manifest
        assert changed.digest != manifest.digest, column
    # a NaN rank reads as null, as equality does
    nan = manifest.model_copy()
    nan._entries = entries.with_columns(pl.lit(float("nan")).alias("rank"))
    null = manifest.model_copy()
    null._entries = entries.with_columns(pl.lit(None, dtype=pl.Float64).alias("rank"))
    assert nan == null
    assert nan.digest == null.digest


def _cells(markup: str) -> list[str]:
    return re.findall(r"<td>(.*?)</td>", markup, flags=re.S)


def test_manifest_html_has_totals_and_the_first_entries(pack: ContextPack) -> None:
    markup = pack.manifest._repr_html_()
    totals = pack.manifest.totals
    for name, value in [
        ("budget (tokens)", "120"),
        ("used (tokens)", str(pack.used_tokens)),
        ("items", "40"),
        ("included", str(totals.included)),
        ("excluded", str(totals.excluded)),
        ("sha256", pack.manifest.digest),
    ]:
        assert f"<tr><th>{name}</th><td>{value}</td></tr>" in markup
    assert "entries (first 20 of 40)" in markup
    cells = _cells(markup)
    assert "&quot;i19&quot;" in cells
    assert "&quot;i20&quot;" not in cells
    assert "&quot;before_tail&quot;" in cells  # the oldest messages, left out for the tail


def test_small_manifest_shows_every_entry() -> None:
    markup = _frame(3).pack(1000, as_of=AS_OF).manifest._repr_html_()
    assert "<p><b>entries</b></p>" in markup
    assert {"&quot;i1&quot;", "&quot;i2&quot;"} <= set(_cells(markup))


def test_pack_html_has_totals_messages_and_manifest(pack: ContextPack) -> None:
    markup = pack._repr_html_()
    assert f"<tr><th>included</th><td>{len(pack)}</td></tr>" in markup
    assert "<b>messages</b>" in markup
    assert "<b>PackManifest</b>" in markup


def test_html_escapes_content_ids_and_labels(pack: ContextPack) -> None:
    frame = _frame(5)
    for markup in (pack._repr_html_(), pack.manifest._repr_html_(), frame._repr_html_()):
        assert "<script" not in markup.lower()
        assert "&lt;script&gt;" in markup


def test_frame_repr_is_one_line_and_html_shows_rows_and_plan() -> None:
    frame = _frame(30).filter(pl.col("text").str.contains("turn")).drop("json")
    text = repr(frame)
    assert text.startswith('<CognitionFrame: Select col("id"), col("role"), col("payload_kind")')
    assert text.endswith("… (3 plan steps); 22 columns>")
    assert len(text) == len("<CognitionFrame: ") + 60 + len(" (3 plan steps); 22 columns>")
    markup = frame._repr_html_()
    assert "shape: (10, 22)" in markup  # the first 10 rows, not all 30
    cells = _cells(markup)
    assert "&quot;i9&quot;" in cells
    assert "&quot;i10&quot;" not in cells
    plan = frame.explain()
    assert plan.splitlines()[-1] in markup
    assert "plan (optimized)" in markup


def test_frame_html_says_when_the_plan_does_not_run() -> None:
    frame = _frame(3).with_columns(when=pl.col("text").str.to_datetime("%Y-%m-%d"))
    markup = frame._repr_html_()
    assert "the plan did not run" in markup
    assert "InvalidOperationError: conversion from `str` to `datetime" in markup
    assert "WithColumns" in markup  # the plan is still shown


def test_an_empty_frame_shows_its_columns_and_plan() -> None:
    frame = _frame(3).head(0)
    assert repr(frame) == "<CognitionFrame: Limit 0 (2 plan steps); 23 columns>"
    markup = frame._repr_html_()
    assert "shape: (0, 23)" in markup
    assert "Limit 0" in markup
