"""A ranked in-memory frame packs what pack() gives over its collected rows.

A rank scores the rows of its input and keeps them, their order and every
other column, so :meth:`CognitionFrame.pack` of ``frame.rank(...)`` over an
in-memory table reuses the table's kept
:class:`~cognoxium.packing.packer.PackScope` with the rank's scores. Each such
pack must be byte for byte the pack computed from scratch over the ranked
rows, whatever was packed before; a frame whose rows differ from the table's
(filtered, with changed columns) must not take the table's kept state.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from cognoxium.exceptions import BudgetError, PackError
from cognoxium.frame.frame import CognitionFrame
from cognoxium.items.schema import packed_text_expr
from cognoxium.items.validation import conform
from cognoxium.packing import packer
from cognoxium.packing.options import PackOptions
from cognoxium.packing.packer import ContextPack, pack
from cognoxium.retrieval.ranking import bm25_cache_clear, bm25_scores
from cognoxium.testing import assert_pack_equal

WHEN = datetime(2024, 6, 1, tzinfo=UTC)

_TEXTS = [
    "Be brief and cite the policy.",
    "Hello! How can I help with your order?",
    "What is the refund window for a damaged package?",
    "Refunds are accepted within 30 days; " + "the refund policy covers damage. " * 12,
    "And shipping to Lyon, how long does it take?",
    "Shipping takes five days; tracking number by email.",
    "Thanks, the refund worked.",
    "lookup result: order #4521 delivered",
    "Can I change my billing address and the invoice email?",
    "Billing address updated; invoice sent again.",
    "word " * 90,
    "Is there a refund for shipping fees?",
]


def _rows(texts: list[str] = _TEXTS) -> pl.DataFrame:
    n = len(texts)
    roles = ["system"] + ["user", "assistant"] * 3 + ["tool"] + ["user", "assistant"] * 2
    return conform(
        pl.DataFrame(
            {
                "id": [f"m{i:02d}" for i in range(n)],
                "role": roles,
                "text": texts,
                "retention": ["required"] + ["optional"] * (n - 2) + ["preferred"],
                "priority": [0, 1, 5, 2, 4, 3, 0, 1, 2, 2, 0, 3],
                # The table's own rank, which every rank below replaces.
                "rank": [float(n - i) for i in range(n)],
                "created_at": [
                    (datetime(2024, 1, 1, tzinfo=UTC) + timedelta(days=13 * i)).isoformat()
                    for i in range(n)
                ],
                "group_id": [None] * 6 + ["g", "g"] + [None] * 4,
                "metadata": ["{}"] * 10
                + ['{"truncate": {"min_tokens": 8}}', '{"truncate": {"min_tokens": 4}}'],
            }
        )
    )


RANKS: list[tuple[str, dict[str, Any]]] = [
    ("bm25", {"query": "refund policy"}),
    ("bm25", {"query": "shipping to Lyon"}),
    ("recency", {"half_life": timedelta(days=30)}),
    ("recency", {"half_life": 86400.0 * 60, "reference": datetime(2024, 3, 1, tzinfo=UTC)}),
    ("priority", {}),
    ("embedding", {"query": "money back for a broken parcel", "model": "local_hash"}),
    ("hybrid", {"query": "refund shipping", "model": "local_hash"}),
]

OPTIONS: list[dict[str, Any]] = [
    {"budget": 60},
    {"budget": 140, "label": "r1"},
    {"budget": 120, "turns": True, "start_on": "user"},
    {"budget": 110, "reserve": 15, "as_of": WHEN - timedelta(days=20)},
    {"budget": 90, "profile": "o200k_base"},
    {"budget": 75, "overflow": "truncate"},
    {"budget": 400},
]


def _from_scratch(
    make: Callable[[CognitionFrame], CognitionFrame], budget: int, settings: dict[str, Any]
) -> ContextPack:
    """pack() over the rows of ``make`` applied to a new table, with a cold BM25 cache."""
    bm25_cache_clear()
    rows = make(CognitionFrame(_rows())).collect()
    options = {k: v for k, v in settings.items() if k != "label"}
    return pack(rows, budget, PackOptions(**options), label=settings.get("label"))


def _assert_same(got: ContextPack, want: ContextPack) -> None:
    assert_pack_equal(got, want)
    assert got.ids == want.ids
    assert got.frame.equals(want.frame)
    assert got.manifest.to_json() == want.manifest.to_json()


@pytest.mark.parametrize("options", OPTIONS)
def test_every_rank_of_a_table_packs_what_pack_gives_over_the_ranked_rows(
    options: dict[str, Any],
) -> None:
    frame = CognitionFrame(_rows())
    settings = {"as_of": WHEN, **options}
    budget = settings.pop("budget")
    frame.pack(500, as_of=WHEN)  # the kept scope holds counts, bounds and exclusions
    for method, arguments in RANKS:
        ranked = frame.rank(method, **arguments)
        for _ in range(2):
            want = _from_scratch(
                partial(CognitionFrame.rank, method=method, **arguments), budget, settings
            )
            _assert_same(ranked.pack(budget, **settings), want)
    # The table's own rank is still the one its own packs use.
    label = settings.pop("label", None)
    _assert_same(
        frame.pack(budget, label=label, **settings),
        pack(_rows(), budget, PackOptions(**settings), label=label),
    )


def test_the_ranks_of_one_table_share_one_scope_per_profile(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made: list[int] = []
    scope_init = packer.PackScope.__init__

    def counted(self: packer.PackScope, *args: Any, **kwargs: Any) -> None:
        made.append(1)
        scope_init(self, *args, **kwargs)

    monkeypatch.setattr(packer.PackScope, "__init__", counted)
    frame = CognitionFrame(_rows())
    for method, arguments in RANKS:
        frame.rank(method, **arguments).pack(90, as_of=WHEN)
        frame.rank(method, **arguments).pack(90, as_of=WHEN, profile="o200k_base")
    frame.rank("priority").rank("bm25", query="refund").pack(90, as_of=WHEN)
    assert len(made) == 2


def test_a_rank_of_a_rank_packs_with_the_last_rank() -> None:
    frame = CognitionFrame(_rows())
    twice = frame.rank("priority").rank("bm25", query="billing invoice")
    once = frame.rank("bm25", query="billing invoice")
    settings: dict[str, Any] = {"as_of": WHEN}
    want = _from_scratch(
        lambda f: f.rank("priority").rank("bm25", query="billing invoice"), 70, settings
    )
    _assert_same(twice.pack(70, **settings), want)
    _assert_same(twice.pack(70, **settings), once.pack(70, **settings))
    assert "m08" in twice.pack(70, **settings).ids


@pytest.mark.parametrize(
    "derive",
    [
        pytest.param(lambda f: f.filter(pl.col("priority") > 1), id="filter"),
        pytest.param(
            lambda f: f.filter(pl.col("priority") > 1).rank("bm25", query="refund"),
            id="filter-then-rank",
        ),
        pytest.param(
            lambda f: f.rank("bm25", query="refund").filter(pl.col("rank") > 0),
            id="rank-then-filter",
        ),
        pytest.param(
            lambda f: f.with_columns(pl.col("text").str.to_uppercase()).rank(
                "bm25", query="REFUND"
            ),
            id="changed-text-then-rank",
        ),
        pytest.param(lambda f: f.with_columns(pl.lit(2.0).alias("rank")), id="with-columns-rank"),
        pytest.param(lambda f: f.with_columns(pl.col("priority") * 0), id="with-columns-priority"),
        pytest.param(
            lambda f: f.rank("recency").sort("rank", descending=True), id="rank-then-sort"
        ),
        pytest.param(lambda f: f.rank("priority").head(7), id="rank-then-head"),
    ],
)
def test_a_derived_frame_does_not_take_its_tables_kept_state(derive: Any) -> None:
    frame = CognitionFrame(_rows())
    for method, arguments in RANKS[:3]:  # warm the table's scope with ranked packs
        frame.rank(method, **arguments).pack(100, as_of=WHEN)
    derived = derive(frame)
    settings: dict[str, Any] = {"as_of": WHEN, "turns": True}
    for budget in (60, 150):
        _assert_same(derived.pack(budget, **settings), _from_scratch(derive, budget, settings))


def test_a_ranked_pack_raises_what_pack_raises() -> None:
    frame = CognitionFrame(_rows())
    ranked = frame.rank("bm25", query="refund")
    ranked.pack(200, as_of=WHEN)
    with pytest.raises(BudgetError) as kept_error:
        ranked.pack(3, as_of=WHEN)
    with pytest.raises(BudgetError) as plain_error:
        pack(
            CognitionFrame(_rows()).rank("bm25", query="refund").collect(),
            3,
            PackOptions(as_of=WHEN),
        )
    assert str(kept_error.value) == str(plain_error.value)
    assert kept_error.value.costs == plain_error.value.costs
    assert list(kept_error.value.costs) == ["m00"]
    with pytest.raises(PackError, match="budget"):
        ranked.pack(-1, as_of=WHEN)


@pytest.mark.parametrize(
    "derive",
    [
        pytest.param(lambda f: f, id="table"),
        pytest.param(lambda f: f.filter(pl.col("priority") > 1), id="filter"),
        pytest.param(
            lambda f: f.with_columns(pl.col("text").str.replace_all("refund", "parcel")),
            id="changed-text",
        ),
        pytest.param(lambda f: f.rank("priority"), id="rank"),
    ],
)
def test_bm25_of_a_table_and_of_its_derived_frames_scores_their_own_rows(derive: Any) -> None:
    frame = CognitionFrame(_rows())
    for query in ("refund policy", "parcel"):  # the table keeps its BM25 corpus
        frame.rank("bm25", query=query).collect()
    for query in ("refund policy", "parcel", "shipping Lyon"):
        bm25_cache_clear()
        got = derive(frame).rank("bm25", query=query).collect()
        texts = derive(CognitionFrame(_rows())).collect().select(packed_text_expr()).to_series()
        want = bm25_scores(texts.to_list(), query)
        assert got.get_column("rank").to_list() == want.tolist()
        assert got.drop("rank").equals(derive(frame).collect().drop("rank"))


def test_a_rank_of_a_scanned_file_packs_the_files_rows_as_they_are_now(tmp_path: Path) -> None:
    path = tmp_path / "items.parquet"
    CognitionFrame(_rows()).sink_parquet(path)
    ranked = CognitionFrame.scan_parquet(path).rank("bm25", query="refund")
    settings: dict[str, Any] = {"as_of": WHEN}
    first = ranked.pack(120, **settings)
    assert "m03" in first.ids
    _assert_same(
        first,
        _from_scratch(partial(CognitionFrame.rank, method="bm25", query="refund"), 120, settings),
    )
    changed = _rows([text.replace("refund", "parcel") for text in _TEXTS])
    CognitionFrame(changed).sink_parquet(path)
    again = ranked.pack(120, **settings)
    bm25_cache_clear()
    want = pack(
        CognitionFrame(changed).rank("bm25", query="refund").collect(), 120, PackOptions(**settings)
    )
    _assert_same(again, want)
    assert again.manifest.to_json() != first.manifest.to_json()
