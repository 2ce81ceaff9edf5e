"""The Polars-native surface of CognitionFrame, each operation checked against Polars itself.

Every case runs the operation on a frame and the same operation with Polars on
the frame's rows, and wants the same rows in the same order; then the errors
that come at the call instead of at ``collect()``, and the item columns that
packing needs.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl
import polars.selectors as cs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from cognoxium.exceptions import DependencyError, PlanError, SchemaError
from cognoxium.frame.frame import CognitionFrame, OptFlags

T0 = datetime(2024, 5, 1, tzinfo=UTC)
ROLES = ["system", "user", "assistant", "user", "document", "user", "memory", "assistant"]
PRIORITIES = [5, 1, 0, 1, 2, 3, 0, 1]  # ties, to check stability
SCORES = [0.5, None, 0.9, 0.1, None, 0.7, 0.3, 0.2]  # nulls, no ties among values


@pytest.fixture(scope="module")
def cf() -> CognitionFrame:
    records = [
        {
            "id": f"i{n}",
            "role": role,
            "text": f"turn {n} <b>{role}</b>",
            "priority": priority,
            "created_at": (T0 + timedelta(minutes=n)).isoformat(),
        }
        for n, (role, priority) in enumerate(zip(ROLES, PRIORITIES, strict=True))
    ]
    return CognitionFrame(records).with_columns(score=pl.lit(pl.Series(SCORES, dtype=pl.Float64)))


Op = Callable[[Any], Any]
"""An operation written once and applied to a CognitionFrame and to a Polars LazyFrame."""

SAME_AS_POLARS: list[tuple[str, Op]] = [
    ("select list of names", lambda f: f.select(["id", "role"])),
    ("select list and names", lambda f: f.select(["id", pl.col("priority") * 2], n=pl.lit(1))),
    ("with_columns list", lambda f: f.with_columns([pl.col("priority") + 1, pl.lit("x")])),
    ("filter constraint", lambda f: f.filter(role="user")),
    ("filter two constraints", lambda f: f.filter(role="user", priority=1)),
    ("filter constraint and expr", lambda f: f.filter(pl.col("priority") > 0, role="user")),
    ("filter list", lambda f: f.filter([pl.col("priority") > 0, pl.col("score") > 0.15])),
    ("drop one", lambda f: f.drop("text")),
    ("drop several and a list", lambda f: f.drop("text", ["json", "binary"])),
    ("drop a selector", lambda f: f.drop(cs.temporal())),
    ("drop unknown, not strict", lambda f: f.drop("nope", "text", strict=False)),
    ("rename", lambda f: f.rename({"role": "speaker", "score": "s"})),
    ("rename swap", lambda f: f.rename({"priority": "score", "score": "priority"})),
    ("rename function", lambda f: f.rename(lambda name: name.upper())),
    ("rename unknown, not strict", lambda f: f.rename({"nope": "x", "id": "key"}, strict=False)),
    ("head", lambda f: f.head(3)),
    ("limit default", lambda f: f.limit()),
    ("tail default", lambda f: f.tail()),
    *[(f"tail {n}", (lambda f, n=n: f.tail(n))) for n in (0, 1, 3, 8, 100)],
    *[
        (f"slice {o} {n}", (lambda f, o=o, n=n: f.slice(o, n)))
        for o in (-100, -9, -8, -3, -1, 0, 2, 7, 8, 100)
        for n in (None, 0, 2, 5, 100)
    ],
    ("tail after sort", lambda f: f.sort("priority", maintain_order=True).tail(3)),
    ("filter after tail", lambda f: f.tail(5).filter(role="user")),
    ("filter after slice", lambda f: f.slice(-6, 4).filter(pl.col("priority") > 0)),
    ("sort after slice", lambda f: f.slice(1).sort("priority", maintain_order=True)),
    ("pipe", lambda f: f.pipe(lambda g, n: g.filter(role="user").head(n), 2)),
]


@pytest.mark.parametrize(("case", "op"), SAME_AS_POLARS, ids=[c for c, _ in SAME_AS_POLARS])
def test_same_rows_in_the_same_order_as_polars(cf: CognitionFrame, case: str, op: Op) -> None:
    polars_frame = cf.collect().lazy()
    expected = op(polars_frame).collect()
    ours = op(_Frame(cf))
    assert_frame_equal(ours.collect(), expected)
    assert_frame_equal(ours.collect(OptFlags.none()), expected)


class _Frame:
    """A CognitionFrame whose ``sort`` takes Polars' ``maintain_order`` (ours is always stable)."""

    def __init__(self, frame: CognitionFrame) -> None:
        self.frame = frame

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self.frame, name)
        if not callable(attribute):
            return attribute

        def call(*args: Any, **kwargs: Any) -> Any:
            if name == "sort":
                assert kwargs.pop("maintain_order", True)
            if name == "pipe":
                function, *rest = args
                return _Frame(self.frame.pipe(lambda f, *a: function(_Frame(f), *a), *rest))
            out = attribute(*args, **kwargs)
            return _Frame(out) if isinstance(out, CognitionFrame) else out

        return call

    def collect(self, optimizations: OptFlags | None = None) -> pl.DataFrame:
        return self.frame.collect(optimizations)


TOP_K: list[tuple[str, int, Any, Any]] = [
    (name, k, by, reverse)
    for k in (0, 1, 3, 6, 8, 100)
    for name, by, reverse in [
        ("priority", "priority", False),
        ("priority reversed", "priority", True),
        ("score (nulls)", "score", False),
        ("score (nulls) reversed", "score", True),
        ("two keys", ["priority", "score"], False),
        ("two keys, one reversed", [pl.col("priority"), "score"], [False, True]),
    ]
]


@pytest.mark.parametrize(
    ("case", "k", "by", "reverse"), TOP_K, ids=[f"{c} k={k}" for c, k, *_ in TOP_K]
)
@pytest.mark.parametrize("method", ["top_k", "bottom_k"])
def test_top_k_and_bottom_k_match_polars(
    cf: CognitionFrame, method: str, case: str, k: int, by: Any, reverse: Any
) -> None:
    """Polars leaves the order of ``top_k`` open: ours is its stable sort, same rows."""
    df = cf.collect()
    keys = [by] if not isinstance(by, list) else by
    flags = [reverse] * len(keys) if isinstance(reverse, bool) else reverse
    largest = method == "top_k"
    descending = [flag != largest for flag in flags]
    expected = (
        df.lazy()
        .sort(keys, descending=descending, nulls_last=True, maintain_order=True)
        .head(k)
        .collect()
    )
    ours = getattr(cf, method)(k, by=by, reverse=reverse).collect()
    assert_frame_equal(ours, expected)
    # Polars' own top_k / bottom_k picks the same rows (the keys break every tie
    # but priority's alone, so compare the key values there).
    theirs = getattr(df.lazy(), method)(k, by=by, reverse=reverse).collect()
    names = [k if isinstance(k, str) else "priority" for k in keys]
    assert sorted(ours.select(names).rows(), key=repr) == sorted(
        theirs.select(names).rows(), key=repr
    )
    if not case.startswith("priority"):  # these keys have no ties: the very same rows
        assert set(ours["id"]) == set(theirs["id"])


@settings(max_examples=200, deadline=None)
@given(
    rows=st.integers(0, 8),
    offset=st.integers(-12, 12),
    length=st.one_of(st.none(), st.integers(0, 12)),
    tail=st.integers(0, 10),
)
def test_slice_and_tail_follow_polars_for_any_window(
    cf: CognitionFrame, rows: int, offset: int, length: int | None, tail: int
) -> None:
    frame = cf.head(rows)
    df = frame.collect()
    assert_frame_equal(frame.slice(offset, length).collect(), df.slice(offset, length))
    assert_frame_equal(frame.tail(tail).collect(), df.tail(tail))
    assert frame.slice(offset, length).count() == df.slice(offset, length).height


def test_top_k_keeps_ties_in_input_order(cf: CognitionFrame) -> None:
    # priority 1 is held by i1, i3, i7 (in that order); 0 by i2, i6
    assert cf.top_k(4, by="priority").collect()["id"].to_list() == ["i0", "i5", "i4", "i1"]
    assert cf.bottom_k(3, by="priority").collect()["id"].to_list() == ["i2", "i6", "i1"]
    assert cf.top_k(3, by="score").collect()["id"].to_list() == ["i2", "i5", "i0"]
    # nulls come last for either direction
    assert cf.bottom_k(8, by="score").collect()["id"].to_list()[-2:] == ["i1", "i4"]


def test_explain_shows_the_new_operations_as_plan_steps(cf: CognitionFrame) -> None:
    q = cf.drop("text").rename({"role": "speaker"}).tail(4).slice(1, 2).top_k(1, by="priority")
    lines = q.explain(optimized=False).splitlines()
    assert [line.strip().split(" ", 1)[0] for line in lines] == [
        "TopK",
        "Limit",
        "Limit",
        "Select",
        "Select",
        "WithColumns",
        "Scan",
    ]
    assert lines[0] == 'TopK 1 by col("priority") desc nulls last'
    assert lines[1].strip() == "Limit 2 offset 1"
    assert lines[2].strip() == "Limit 4 offset -4"
    assert 'col("role").alias("speaker")' in lines[3]
    assert 'col("text")' not in lines[4]
    assert lines[4].count("col(") == len(cf.columns) - 1
    assert cf.slice(-2).explain().splitlines()[0] == "Limit all offset -2"


def test_no_filter_moves_through_a_tail_or_a_slice(cf: CognitionFrame) -> None:
    for q in (
        cf.tail(3).filter(role="user"),
        cf.slice(-5, 3).filter(role="user"),
        cf.slice(2).filter(role="user"),
        cf.sort("priority").tail(2).filter(pl.col("priority") > 0),
    ):
        plan = q.explain()
        assert plan.splitlines()[0].startswith("Filter"), plan
        assert "TopK" not in plan
    # users among the last 3 rows: only i5; filtering first would give i1, i3, i5
    assert cf.tail(3).filter(role="user").collect()["id"].to_list() == ["i5"]


def test_a_head_over_a_sort_still_becomes_a_top_k(cf: CognitionFrame) -> None:
    assert cf.sort("priority").head(2).explain().startswith("TopK 2")
    assert cf.sort("priority").slice(0, 2).explain().startswith("TopK 2")


def test_collect_passes_the_engine_to_polars(
    cf: CognitionFrame, monkeypatch: pytest.MonkeyPatch
) -> None:
    q = cf.dedupe().rank("bm25", query="user turn").filter(role="user").top_k(2, by="rank")
    expected = q.collect()
    for engine in ("auto", "in-memory", "streaming"):
        assert_frame_equal(q.collect(engine=engine), expected)
    seen: list[Any] = []
    collect = pl.LazyFrame.collect

    def spy(self: pl.LazyFrame, *args: Any, **kwargs: Any) -> Any:
        seen.append(kwargs.get("engine"))
        return collect(self, *args, **kwargs)

    monkeypatch.setattr(pl.LazyFrame, "collect", spy)
    cf.filter(role="user").collect(engine="streaming")
    assert seen[-1] == "streaming"
    with pytest.raises(PlanError, match="unknown engine 'fast'"):
        cf.collect(engine="fast")  # type: ignore[arg-type]


@pytest.mark.parametrize("engine", ["gpu", pl.GPUEngine()])
def test_the_gpu_engine_without_cudf_polars_is_a_dependency_error(
    cf: CognitionFrame, engine: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *args: None if name == "cudf_polars" else find_spec(name, *args),
    )
    with pytest.raises(DependencyError, match=r"cudf_polars is not installed") as info:
        cf.collect(engine=engine)
    assert info.value.code == "dependency.missing"
    assert isinstance(info.value, ImportError)


BAD_CALLS: list[tuple[str, Callable[[CognitionFrame], Any], str]] = [
    ("constraint on an unknown column", lambda f: f.filter(nope=1), "nope"),
    ("constraint outside an enumeration", lambda f: f.filter(role="usr"), "role.*'user'"),
    ("filter of nothing", lambda f: f.filter([]), "at least one predicate"),
    ("drop unknown", lambda f: f.drop("txt"), "unknown column 'txt'; did you mean 'text'"),
    ("drop everything", lambda f: f.select("id").drop("id"), "every column"),
    ("drop a number", lambda f: f.drop(3), "column names or selectors"),
    ("rename unknown", lambda f: f.rename({"rol": "x"}), "unknown column 'rol'"),
    ("rename onto a column", lambda f: f.rename({"role": "id"}), "Select: .*id"),
    ("rename to a number", lambda f: f.rename({"role": 1}), "must be strings"),
    ("rename a list", lambda f: f.rename(["role"]), "mapping or a function"),
    ("tail negative", lambda f: f.tail(-1), "non-negative"),
    ("tail float", lambda f: f.tail(1.5), "non-negative"),
    ("slice negative length", lambda f: f.slice(0, -1), "non-negative"),
    ("slice float offset", lambda f: f.slice(0.5), "whole number"),
    ("limit from the end", lambda f: f.limit(2, offset=-1), "use slice"),
    ("top_k negative", lambda f: f.top_k(-1, by="priority"), "non-negative"),
    ("top_k no key", lambda f: f.top_k(1, by=[]), "at least one key"),
    ("top_k unknown key", lambda f: f.top_k(1, by="nope"), "nope"),
    ("bottom_k flags", lambda f: f.bottom_k(1, by="priority", reverse=[True, False]), "reverse"),
]


@pytest.mark.parametrize(("case", "call", "message"), BAD_CALLS, ids=[c for c, *_ in BAD_CALLS])
def test_bad_calls_fail_where_they_are_made(
    cf: CognitionFrame, case: str, call: Callable[[CognitionFrame], Any], message: str
) -> None:
    with pytest.raises(PlanError, match=message):
        call(cf)


def test_dropping_or_renaming_an_item_column_fails_where_it_matters(cf: CognitionFrame) -> None:
    dropped = cf.drop("content_hash")
    assert dropped.count() == 8  # a frame of other columns is fine
    with pytest.raises(SchemaError, match=r"pack needs the item columns; .*\['content_hash'\]"):
        dropped.pack(1000)
    with pytest.raises(PlanError, match=r"dedupe needs columns \['content_hash'\]"):
        dropped.dedupe()
    renamed = cf.rename({"role": "speaker"})
    for export in (renamed.to_items, renamed.to_records, renamed.to_arrow):
        with pytest.raises(SchemaError, match=r"lacks \['role'\]"):
            export()
    with pytest.raises(PlanError, match="role"):
        renamed.redact().quarantine().demote(pl.col("role") == "user", priority_delta=-1)
    # renamed back, it packs as the original does
    back = renamed.rename({"speaker": "role"})
    as_of = T0 + timedelta(days=1)
    assert back.pack(1000, as_of=as_of).manifest == cf.pack(1000, as_of=as_of).manifest


def test_renaming_a_column_onto_the_text_gives_a_fresh_content_hash(cf: CognitionFrame) -> None:
    out = cf.with_columns(body=pl.lit("new text")).drop("text").rename({"body": "text"})
    fresh = CognitionFrame([{"id": "x", "role": "user", "text": "new text"}]).collect()
    hashes = out.collect()["content_hash"].unique().to_list()
    assert hashes == fresh["content_hash"].to_list()
    assert cf.rename({"score": "s"}).collect()["content_hash"].equals(cf.collect()["content_hash"])


POLARS_PAGE = Path(__file__).resolve().parents[2] / "docs" / "concepts" / "polars.md"


def test_the_polars_page_lists_exactly_the_public_lazyframe_methods() -> None:
    """A Polars release that adds or removes a method fails here until the page follows it."""
    text = POLARS_PAGE.read_text(encoding="utf-8")
    table = text.split("## Every LazyFrame method", 1)[1]
    listed = re.findall(r"^\| `(\w+)` \|", table, flags=re.M)
    public = sorted(name for name in dir(pl.LazyFrame) if not name.startswith("_"))
    assert len(listed) == len(set(listed)), "a method is listed twice"
    assert sorted(listed) == public
    assert listed == sorted(listed), "keep the table in alphabetical order"
    lines = [line for line in table.splitlines() if re.match(r"^\| `\w+` \|", line)]
    for line in lines:  # an equivalent, or a reason where there is none
        _, equivalent, notes = (cell.strip() for cell in line.strip("|").split(" | ", 2))
        assert equivalent, line
        if equivalent.startswith("not offered"):
            assert "because" in equivalent or notes.strip(" |"), line
