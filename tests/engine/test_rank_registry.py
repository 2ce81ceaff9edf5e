"""The rank registry: one declaration per method, read by the frame, the batch and the CLI.

A method registered by a fixture (rank by text length in characters) is
used through ``frame.rank``, ``explain()``, ``run_batch(rank=...)`` and
``cognoxium pack --rank``, and removed after; the registry's list of methods
is held equal to every list the docs give.
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar

import polars as pl
import pytest
from typer.testing import CliRunner

from cognoxium.app import batch as batch_module
from cognoxium.app.batch import (
    BatchSettings,
    PreparedScope,
    Request,
    batch_rank_methods,
    rank_request,
    run_batch,
)
from cognoxium.app.cli import app
from cognoxium.engine import lowering
from cognoxium.engine.plan import Scan, Source
from cognoxium.engine.ranks import (
    Rank,
    RankContext,
    collect_ranks,
    rank_entry,
    rank_methods,
    rank_node,
    register_rank,
    unregister_rank,
)
from cognoxium.exceptions import PlanError
from cognoxium.frame.frame import CognitionFrame
from cognoxium.items.records import records_to_frame
from cognoxium.packing.manifests import read_manifests, scan_packs
from cognoxium.packing.options import PackOptions
from cognoxium.retrieval import ranking
from cognoxium.retrieval.scope import RetrievalSettings

REPO = Path(__file__).resolve().parents[2]
AS_OF = datetime(2026, 1, 1, tzinfo=UTC)
BUILT_IN = (
    "bm25",
    "embedding",
    "hybrid",
    "hybrid-lineage",
    "learned",
    "recency",
    "priority",
    "strategies",
)


# -- a method added by a test: rank by text length in characters -----------------


@dataclass(frozen=True, slots=True, kw_only=True)
class RankLength(Rank):
    """The length of ``text`` in characters, at most ``cap``; 0.0 for no text."""

    method: ClassVar[str] = "length"
    columns: ClassVar[tuple[str, ...]] = ("text",)
    cap: int | None = None

    def _check(self) -> None:
        if self.cap is not None and (not isinstance(self.cap, int) or self.cap < 1):
            raise PlanError(
                f"rank('length'): cap must be a positive whole number, got {self.cap!r}"
            )
        Rank._check(self)


def _lower_length(node: RankLength, lf: pl.LazyFrame) -> pl.LazyFrame:
    length = pl.col("text").str.len_chars().fill_null(0)
    if node.cap is not None:
        length = length.clip(upper_bound=node.cap)
    return lf.with_columns(length.cast(pl.Float64).alias("rank"))


def _whole(value: Any, method: str) -> Any:
    """A cap given as text ("12") is read as a whole number."""
    return int(value) if isinstance(value, str) else value


@pytest.fixture
def length_rank() -> Iterator[str]:
    register_rank(RankLength, lower=_lower_length, convert={"cap": _whole})
    try:
        yield "length"
    finally:
        unregister_rank("length")


TEXTS = {
    "short": "Hi there.",
    "longest": "The hub pairs with every sensor once its firmware is updated to 4.2.",
    "middle": "Sensors blink amber when pairing fails.",
}


def _records() -> list[dict[str, Any]]:
    return [
        {
            "id": item_id,
            "role": "document",
            "text": text,
            "created_at": "2025-11-03T09:00:00Z",
            "metadata": {"topic": "setup"},
        }
        for item_id, text in TEXTS.items()
    ]


@pytest.fixture
def store() -> pl.DataFrame:
    return records_to_frame(_records())


def test_a_registered_method_ranks_through_the_frame_and_explain(
    length_rank: str, store: pl.DataFrame
) -> None:
    frame = CognitionFrame(store)
    ranked = frame.rank(length_rank)
    assert ranked.collect().select("id", "rank").rows() == [
        (item_id, float(len(text))) for item_id, text in TEXTS.items()
    ]
    assert ranked.sort("rank", descending=True).collect()["id"].to_list() == [
        "longest",
        "middle",
        "short",
    ]
    capped = frame.rank(length_rank, cap="20")  # converted as the entry says
    assert capped.explain().splitlines()[0] == "Rank length cap=20"
    assert capped.collect()["rank"].to_list() == [9.0, 20.0, 20.0]
    with pytest.raises(PlanError, match=r"rank\('length'\) takes no query; it takes cap"):
        frame.rank(length_rank, query="x")
    with pytest.raises(PlanError, match="cap must be a positive whole number"):
        frame.rank(length_rank, cap=0)
    # The pack orders a tier by rank: the longest text first.
    assert frame.rank(length_rank).pack(25).ids == ["longest"]


def test_a_registered_method_packs_a_batch(
    length_rank: str, store: pl.DataFrame, tmp_path: Path
) -> None:
    assert batch_rank_methods() == (*BUILT_IN, "length", "none")
    requests = [Request(id="all", budget=1000), Request(id="one", budget=25)]
    run_batch(
        store,
        requests,
        out_dir=tmp_path / "out",
        rank=length_rank,
        options=PackOptions(as_of=AS_OF),
    )
    packs = scan_packs(tmp_path / "out").collect().to_dicts()
    assert [(p["request_id"], p["ids"]) for p in packs] == [
        ("all", ["short", "longest", "middle"]),  # packed in the scope's order
        ("one", ["longest"]),
    ]
    manifests = {m.label: m for m in read_manifests(tmp_path / "out")}
    entries = {e.id: e for e in manifests["one"].entries}
    assert {i: e.rank for i, e in entries.items()} == {
        i: float(len(text)) for i, text in TEXTS.items()
    }
    assert {i: e.decision for i, e in entries.items()} == {
        "short": "excluded",
        "longest": "included",
        "middle": "excluded",
    }
    # The batch's pack equals the frame's over the rank_request frame.
    scope = CognitionFrame(store)
    ranked = rank_request(scope, requests[1], length_rank)
    assert ranked.explain().splitlines()[0] == "Rank length"
    assert ranked.pack(25, as_of=AS_OF).ids == ["longest"]


def test_a_registered_method_is_a_cli_choice(
    length_rank: str, store: pl.DataFrame, tmp_path: Path
) -> None:
    items = tmp_path / "items.jsonl"
    items.write_text("".join(json.dumps(r) + "\n" for r in _records()), encoding="utf-8")
    requests = tmp_path / "requests.jsonl"
    requests.write_text('{"id": "one", "budget": 25}\n', encoding="utf-8")
    out = tmp_path / "out"
    runner = CliRunner()
    args = [
        "pack",
        str(items),
        str(requests),
        "--out",
        str(out),
        "--rank",
        length_rank,
        "--as-of",
        "2026-01-01T00:00:00Z",
        "--manifests",
        "jsonl",
        "--workers",
        "1",
        "--no-progress",
        "--quiet",
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    (pack,) = scan_packs(out).collect().to_dicts()
    assert pack["ids"] == ["longest"]
    (manifest,) = read_manifests(out)
    assert {e.id: e.rank for e in manifest.entries}["middle"] == float(len(TEXTS["middle"]))
    help_text = _flat(runner.invoke(app, ["pack", "--help"]).output)
    assert "strategies, length, none" in help_text


def test_an_unregistered_method_is_gone(store: pl.DataFrame, tmp_path: Path) -> None:
    assert "length" not in rank_methods()
    with pytest.raises(PlanError, match="unknown rank method 'length'"):
        CognitionFrame(store).rank("length")
    sample = REPO / "examples" / "sample"
    args = [str(sample / "items.jsonl"), str(sample / "requests.jsonl"), "--out", str(tmp_path)]
    result = CliRunner().invoke(app, ["pack", *args, "--rank", "length"])
    assert result.exit_code == 1
    assert "unknown rank method 'length'" in " ".join(result.output.split())


def test_registration_is_checked(length_rank: str) -> None:
    with pytest.raises(PlanError, match="already registered"):
        register_rank(RankLength, lower=_lower_length)
    with pytest.raises(PlanError, match="needs a Rank subclass"):
        register_rank(Scan, lower=_lower_length)  # type: ignore[arg-type]

    @dataclass(frozen=True, slots=True, kw_only=True)
    class RankOther(Rank):
        method: ClassVar[str] = "other"
        size: int = 1

    with pytest.raises(PlanError, match=r"has no argument \['query'\]"):
        register_rank(RankOther, lower=_lower_length, batch={"query": "query"})
    with pytest.raises(PlanError, match=r"unknown batch sources \['weather'\]"):
        register_rank(RankOther, lower=_lower_length, batch={"size": "weather"})
    with pytest.raises(PlanError, match="must name the method"):
        register_rank(Rank, lower=_lower_length)
    assert "other" not in rank_methods()
    with pytest.raises(PlanError, match="unknown rank method 'nope'"):
        unregister_rank("nope")
    assert lowering.HANDLERS[RankLength] is _lower_length


# -- the built-in methods' batch behaviour ----------------------------------------


def _context(query: str | None, budget: int = 90) -> RankContext:
    return RankContext(
        query=query,
        budget=budget,
        as_of=AS_OF,
        profile="cl100k_base",
        retrieval=RetrievalSettings(
            model="local_hash", rrf_k=None, neighbours=0.5, ranker="m.json"
        ),
        lineage="the store",
    )


@pytest.mark.parametrize(
    ("method", "arguments", "key"),
    [
        ("bm25", {"query": "q"}, ("q",)),
        ("embedding", {"query": "q", "model": "local_hash"}, ("q",)),
        (
            "hybrid",
            {"query": "q", "model": "local_hash", "rrf_k": None, "neighbours": 0.5},
            ("q",),
        ),
        (
            "hybrid-lineage",
            {
                "query": "q",
                "model": "local_hash",
                "rrf_k": None,
                "neighbours": 0.5,
                "lineage": "the store",
            },
            ("q",),
        ),
        ("learned", {"query": "q", "model": "m.json", "lineage": "the store"}, ("q",)),
        ("recency", {}, ()),
        ("priority", {}, ()),
        (
            "strategies",
            {
                "query": "q",
                "budget": 90,
                "as_of": AS_OF,
                "profile": "cl100k_base",
                "model": "local_hash",
            },
            ("q", 90, AS_OF),
        ),
    ],
)
def test_what_a_batch_request_gives_each_method(
    method: str, arguments: dict[str, Any], key: tuple[Any, ...]
) -> None:
    entry = rank_entry(method)
    assert entry.batch_arguments(_context("q")) == arguments
    assert entry.batch_key(_context("q")) == key
    assert entry.reads_lineage == (method in ("hybrid-lineage", "learned"))
    if "query" in arguments:  # a request without a query is not ranked
        assert entry.batch_arguments(_context(None)) is None
        assert entry.batch_key(_context(None)) is None
    else:
        assert entry.batch_key(_context(None)) == ()


def test_reads_lineage_follows_the_registry(length_rank: str) -> None:
    reading = [m for m in batch_rank_methods() if BatchSettings(PackOptions(), m).reads_lineage]
    assert reading == ["hybrid-lineage", "learned"]


def test_the_rrf_default_is_the_method_s_own() -> None:
    scan = Scan(source=Source(records_to_frame(_records())))
    assert rank_node("hybrid", input=scan, query="q", model="local_hash").rrf_k == 5.0
    assert rank_node("hybrid", input=scan, query="q", model="local_hash", rrf_k=30).rrf_k == 30
    with pytest.raises(PlanError, match=r"rank\('hybrid'\): unknown model 'gpt'"):
        rank_node("hybrid", input=scan, query="q", model="gpt")
    recency = rank_node("recency", input=scan, half_life=timedelta(minutes=2))
    assert recency.half_life == 120.0
    learned = rank_node("learned", input=scan, query="q", lineage=scan, model=Path("m.json"))
    assert learned.model == "m.json"
    with pytest.raises(PlanError, match=r"rank\('learned'\): lineage must be a frame"):
        rank_node("learned", input=scan, query="q", lineage="store")


# -- batched lowering: BM25 scores a scope's queries in one call through the plan ----


def test_collect_ranks_equals_each_node_alone(store: pl.DataFrame) -> None:
    frame = CognitionFrame(store)
    queries = ["sensor firmware", "amber pairing", "hello there", "the and of"]
    nodes = [frame.rank("bm25", query=q)._plan for q in queries]
    together = collect_ranks([n for n in nodes if isinstance(n, Rank)])
    alone = [frame.rank("bm25", query=q).collect()["rank"] for q in queries]
    assert [c.to_list() for c in together] == [c.to_list() for c in alone]
    assert [c.name for c in together] == ["rank"] * 4
    assert together[3].to_list() == [0.0, 0.0, 0.0]  # only stop words
    with pytest.raises(PlanError, match="one method over the same input"):
        collect_ranks([nodes[0], frame.rank("priority")._plan])  # type: ignore[list-item]


def test_batch_bm25_scores_every_query_of_a_scope_in_one_plan_call(
    store: pl.DataFrame, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[list[str]] = []
    many = ranking.bm25_scores_many

    def counted(texts: Any, queries: Any, **kwargs: Any) -> Any:
        calls.append(list(queries))
        return many(texts, queries, **kwargs)

    monkeypatch.setattr(ranking, "bm25_scores_many", counted)
    assert not hasattr(batch_module, "bm25_scores_many")  # the batch scores through the plan
    settings = BatchSettings(PackOptions(as_of=AS_OF), "bm25")
    prepared = PreparedScope(CognitionFrame(store), store, settings)
    requests = [
        Request(id="a", budget=50, query="sensor firmware"),
        Request(id="b", budget=90, query="amber pairing"),
        Request(id="c", budget=50, query="sensor firmware"),
        Request(id="d", budget=50),
    ]
    prepared.rank_all(requests)
    assert calls == [["sensor firmware", "amber pairing"]]
    frame = CognitionFrame(store)
    for request in requests[:3]:
        expected = frame.rank("bm25", query=request.query).collect()["rank"]
        got = prepared.rank(request, AS_OF)
        assert got is not None
        assert got.to_list() == expected.to_list()
    assert prepared.rank(requests[3], AS_OF) is None
    assert len(calls) == 4  # three plans run alone above; the batch added no call
    prepared.rank_all(requests)
    assert len(calls) == 4  # ranked keys are not scored again


# -- the docs list the registry's methods ------------------------------------------


def _table_methods(doc: str) -> list[str]:
    """The first column of the first reST simple table of ``doc`` (after its header)."""
    lines = inspect.cleandoc(doc).splitlines()
    rules = [i for i, line in enumerate(lines) if re.fullmatch(r"=+( +=+)+", line)]
    start, end = rules[1], rules[2]
    return [line.split()[0] for line in lines[start + 1 : end] if not line[:1].isspace()]


def _flat(help_text: str) -> str:
    """Rich's help as one line of words: the boxes' borders left out."""
    return " ".join(re.sub("[│╭╮╰╯─]", " ", help_text).split())


def test_the_docs_list_the_registry_s_methods() -> None:
    methods = list(rank_methods())
    assert methods == list(BUILT_IN)
    batch = [*methods, "none"]
    assert _table_methods(CognitionFrame.rank.__doc__ or "") == methods
    assert _table_methods(run_batch.__doc__ or "") == batch
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    (listed,) = re.findall(r"\[--rank ([a-z0-9-]+(?:\|[a-z0-9-]+)+)\]", readme)
    assert listed.split("|") == batch


def test_the_cli_help_lists_the_registry_s_methods_without_loading_the_engine() -> None:
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from cognoxium.app.cli import main\n"
        "sys.argv = ['cognoxium', 'locomo', '--help']\n"
        "try:\n    main()\n"
        "except SystemExit:\n    pass\n"
        "assert 'cognoxium.engine' not in sys.modules\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=None
    )
    text = _flat(run.stdout)
    listed = ", ".join(batch_rank_methods())
    assert f"How to rank each scope by its query: {listed}." in text
    assert f"each one of {listed};" in text
