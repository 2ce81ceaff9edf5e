"""A batch's packs and manifests equal a one-request pack() for every request.

The batch packs the requests of a scope together (:func:`pack_scope`, over a
:class:`~cognoxium.packing.packer.PackScope`); each of its packs and
manifests must be exactly what :meth:`CognitionFrame.pack` gives for that
request alone, over the frame :func:`rank_request` ranks.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from cognoxium.app._scopes import batch_units
from cognoxium.app.batch import (
    BatchSettings,
    PreparedScope,
    RankMethod,
    Request,
    pack_scope,
    prepare_requests,
    rank_request,
    read_requests,
    run_batch,
)
from cognoxium.app.locomo_dataset import load_locomo, locomo_requests
from cognoxium.exceptions import BudgetError, RecordError
from cognoxium.frame.frame import CognitionFrame
from cognoxium.items.records import records_to_frame
from cognoxium.packing.manifests import read_manifests
from cognoxium.packing.options import PackOptions
from cognoxium.packing.packer import ContextPack, PackScope, pack
from cognoxium.testing import assert_manifest_equal, assert_pack_equal
from tests.app.parts import layout, records
from tests.data import LOCOMO, needs_locomo
from tests.pins import assert_same_outputs

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "examples" / "sample"
AS_OF = datetime(2026, 1, 1, tzinfo=UTC)


def one_request_pack(
    store: CognitionFrame, request: Request, method: RankMethod, batch: PackOptions
) -> ContextPack:
    """The request packed alone, as a user of the Python API packs it."""
    scope = store if request.where is None else store.filter(request.where)
    prepared = prepare_requests([request], options=batch)[0]
    options = prepared.options
    ranked = rank_request(scope, prepared, method, store=store, as_of=options.as_of)
    return ranked.pack(request.budget, options, label=request.id)


def assert_batch_equals_one_request_packs(
    store: CognitionFrame,
    requests: Sequence[Request],
    method: RankMethod,
    out: Path,
    manifests: str = "parquet",
    as_of: datetime = AS_OF,
    **options: Any,
) -> None:
    batch = PackOptions(as_of=as_of, **options)
    run_batch(
        store,
        requests,
        out_dir=out,
        options=batch,
        rank=method,
        manifests=manifests,  # type: ignore[arg-type]
    )
    packs = records(out)
    written = read_manifests(out)
    by_scope = [r for unit in batch_units(requests) for r in unit.requests]
    assert [p["request_id"] for p in packs] == [r.id for r in by_scope]
    assert len(written) == len(requests)
    for request, line, manifest in zip(by_scope, packs, written, strict=True):
        alone = one_request_pack(store, request, method, batch)
        assert line["ids"] == alone.ids, request.id
        assert (line["used_tokens"], line["budget"]) == (alone.used_tokens, alone.budget)
        assert_manifest_equal(manifest, alone.manifest)
        assert manifest.to_json() == alone.manifest.to_json(), request.id


@pytest.fixture(scope="module")
def sample() -> tuple[CognitionFrame, list[Request]]:
    return CognitionFrame.read_jsonl(SAMPLE / "items.jsonl"), read_requests(
        SAMPLE / "requests.jsonl"
    )


@pytest.mark.parametrize("method", ["bm25", "recency", "none", "learned"])
@pytest.mark.parametrize("manifests", ["parquet", "jsonl"])
def test_the_sample_batch_equals_one_request_packs(
    sample: tuple[CognitionFrame, list[Request]], method: RankMethod, manifests: str, tmp_path: Path
) -> None:
    store, requests = sample
    assert_batch_equals_one_request_packs(store, requests, method, tmp_path / "out", manifests)


def test_the_sample_batch_with_pack_options_equals_one_request_packs(
    sample: tuple[CognitionFrame, list[Request]], tmp_path: Path
) -> None:
    store, requests = sample
    options = {"turns": True, "start_on": "user", "reserve": 16, "overflow": "truncate"}
    assert_batch_equals_one_request_packs(store, requests, "bm25", tmp_path / "out", **options)


def test_requests_of_one_scope_out_of_order_equal_one_request_packs(
    sample: tuple[CognitionFrame, list[Request]], tmp_path: Path
) -> None:
    # Scopes interleave, and one query repeats at several budgets (its rank is reused).
    store, requests = sample
    mixed = [
        r.model_copy(update={"id": f"{r.id}:{budget}", "budget": budget})
        for budget in (96, 400)
        for r in requests
    ]
    assert_batch_equals_one_request_packs(store, mixed[::-1], "bm25", tmp_path / "out")


def _rows() -> pl.DataFrame:
    """Groups, lineage (parents and a redact edge), a truncatable document, a tool exchange."""
    words = "word " * 60
    records: list[dict[str, Any]] = [
        {"id": "sys", "role": "system", "text": "Be brief.", "retention": "required"},
        {"id": "q1", "role": "user", "text": "What is the refund window for shoes?"},
        {"id": "a1", "role": "assistant", "text": "Thirty days from delivery.", "group_id": "g"},
        {"id": "a2", "role": "assistant", "text": "Sale items are final.", "group_id": "g"},
        {"id": "m1", "role": "memory", "text": "Buys shoes often.", "parents": ["q1", "zz"]},
        {
            "id": "doc",
            "role": "document",
            "text": f"Refund policy. {words}",
            "metadata": {"truncate": {"side": "head", "min_tokens": 8}},
        },
        {"id": "q2", "role": "user", "text": "And shipping costs for shoes?"},
        {"id": "a3", "role": "assistant", "text": "Free over fifty dollars."},
    ]
    return records_to_frame(
        [{"created_at": "2024-01-01T00:00:00Z", **record} for record in records]
    )


@pytest.mark.parametrize("budget", [20, 40, 60, 90, 200])
@pytest.mark.parametrize("options", [{}, {"turns": True}, {"start_on": "user", "reserve": 4}])
def test_pack_scope_packs_equal_pack(budget: int, options: dict[str, Any]) -> None:
    df = _rows()
    scope = PackScope(df)
    ranks = [
        [float(i) for i in range(df.height)],
        [float(-i) for i in range(df.height)],
        [None, 3.0, float("nan"), 1.0, 2.0, 5.0, 0.5, None],
    ]
    outcomes = []
    for values in ranks:
        rank = pl.Series("rank", values, pl.Float64)
        ranked = df.with_columns(rank)
        alone = pack(ranked, budget, PackOptions(as_of=AS_OF, **options), label="r")
        together = scope.pack(budget, PackOptions(as_of=AS_OF, **options), label="r", rank=rank)
        assert_pack_equal(together, alone)
        assert together.manifest.to_json() == alone.manifest.to_json()
        outcomes.append(
            scope.outcome(budget, PackOptions(as_of=AS_OF, **options), label="r", rank=rank)
        )
    # The entries of several packs, built at once, are each pack's entries.
    entries = scope.entries(outcomes)
    for k, values in enumerate(ranks):
        ranked = df.with_columns(pl.Series("rank", values, pl.Float64))
        alone = pack(
            ranked, budget, PackOptions(as_of=AS_OF, **options), label="r"
        ).manifest.to_polars()
        assert entries.slice(k * df.height, df.height).equals(alone, null_equal=True)


def test_a_cut_item_carries_its_new_hash_and_lineage_in_the_batch() -> None:
    df = _rows()
    rank = pl.Series("rank", [0.0, 0.0, 0.0, 0.0, 0.0, 9.0, 0.0, 0.0])
    together = PackScope(df).pack(40, PackOptions(as_of=AS_OF), rank=rank)
    alone = pack(df.with_columns(rank), 40, PackOptions(as_of=AS_OF))
    assert [t.id for t in together.manifest.truncations] == ["doc"]  # the case is exercised
    assert any(edge["operation"] == "truncate" for edge in together.manifest.lineage)
    assert_pack_equal(together, alone)


def test_a_rank_of_the_wrong_length_is_refused() -> None:
    scope = PackScope(_rows())
    with pytest.raises(ValueError, match="rank has 2 values for 8 rows"):
        scope.outcome(100, PackOptions(as_of=AS_OF), rank=pl.Series([1.0, 2.0]))


def test_pack_scope_names_the_request_that_cannot_be_packed() -> None:
    store = CognitionFrame(_rows())
    settings = BatchSettings(PackOptions(as_of=AS_OF), "bm25")
    fine = Request(id="fine", budget=200, query="refund")
    tight = Request(id="tight", budget=3, query="refund")
    with pytest.raises(BudgetError, match="request 'tight'"):
        pack_scope(store, [fine, tight], settings)
    other = Request(id="other", budget=200, where="role = 'user'")
    with pytest.raises(RecordError, match="not the scope's"):
        pack_scope(store, [fine, other], settings)


def test_a_prepared_scope_is_reused_across_calls() -> None:
    store = CognitionFrame(_rows())
    settings = BatchSettings(PackOptions(as_of=AS_OF), "bm25")
    prepared = PreparedScope(store, store.collect(), settings)
    first = pack_scope(store, [Request(id="r1", budget=90, query="refund")], settings)
    again = pack_scope(
        store, [Request(id="r1", budget=90, query="refund")], settings, prepared=prepared
    )
    assert first.packs.equals(again.packs)
    assert first.entries.equals(again.entries, null_equal=True)
    assert prepared.pack(Request(id="x", budget=1)) is prepared.pack(Request(id="y", budget=1))


def test_a_scope_is_counted_at_once_only_for_packs_that_reach_most_of_it() -> None:
    # One pack of 100 tokens over a scope of about 8,000 counted every row first.
    rows = [
        {"id": f"d{k}", "role": "document", "text": f"refund note {k} " + "word " * 60}
        for k in range(120)
    ]
    store = CognitionFrame(rows)
    settings = BatchSettings(PackOptions(as_of=AS_OF), "bm25")
    few = [Request(id="a", budget=100, query="refund"), Request(id="b", budget=300, query="x")]
    many = [Request(id=f"r{k}", budget=400, query="refund") for k in range(12)]
    for batch, at_once in ((few, False), (many, True)):
        prepared = PreparedScope(store, store.collect(), settings)
        prepared.count_tokens(batch)
        assert (prepared.pack(batch[0])._row_tokens is not None) == at_once
    lazily = pack_scope(store, few, settings)
    counted = PreparedScope(store, store.collect(), settings)
    counted.pack(few[0]).count_tokens()  # every row counted first: the same packs
    first = pack_scope(store, few, settings, prepared=counted)
    assert lazily.packs.equals(first.packs)
    assert lazily.entries.equals(first.entries, null_equal=True)


@needs_locomo
@pytest.mark.parametrize("method", ["bm25", "recency"])
def test_a_locomo_subset_batch_equals_one_request_packs(method: RankMethod, tmp_path: Path) -> None:
    store = CognitionFrame(load_locomo(LOCOMO))
    requests = locomo_requests(LOCOMO, [256, 1024])
    by_conversation: dict[str, list[Request]] = {}
    for request in requests:
        by_conversation.setdefault(request.id.split(":q")[0], []).append(request)
    # Two conversations, 12 questions at two budgets each: four runs over two scopes.
    subset = [
        r
        for budget in (256, 1024)
        for conv in list(by_conversation)[:2]
        for r in by_conversation[conv]
        if r.budget == budget and int(r.id.split(":q")[1].split(":")[0]) < 12
    ]
    assert len(subset) == 48
    assert_batch_equals_one_request_packs(store, subset, method, tmp_path / "out")


@pytest.mark.parametrize("form", ["parquet", "jsonl"])
def test_write_many_stores_what_write_stores(form: str, tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    from cognoxium.packing.manifests import ManifestWriter, scan_manifests

    df = _rows()
    scope = PackScope(df)
    budgets = [20, 60, 90, 200]
    outcomes = [scope.outcome(b, PackOptions(as_of=AS_OF), label=f"r{b}") for b in budgets]
    ids = [f"r{b}" for b in budgets]
    one, many = tmp_path / "one", tmp_path / "many"
    one.mkdir()
    many.mkdir()
    with ManifestWriter(one, form) as writer:  # type: ignore[arg-type]
        for request_id, b in zip(ids, budgets, strict=True):
            writer.write(
                request_id, pack(df, b, PackOptions(as_of=AS_OF), label=request_id).manifest
            )
    with ManifestWriter(many, form) as writer:  # type: ignore[arg-type]
        writer.write_many(ids[:1], [outcomes[0].manifest], scope.entries(outcomes[:1]))
        writer.write_many(ids[1:], [o.manifest for o in outcomes[1:]], scope.entries(outcomes[1:]))
    names = layout(one)
    assert names == layout(many)
    assert_same_outputs(many, one, [name for name in names if name.endswith(".jsonl")])
    assert scan_manifests(one).collect().equals(scan_manifests(many).collect(), null_equal=True)
    if form == "parquet":
        part = Path("manifests", "part-00000.parquet")
        rows = [pq.ParquetFile(d / part).metadata.num_rows for d in (one, many)]
        assert rows == [len(budgets) * df.height] * 2


def test_write_many_refuses_entries_that_do_not_split_evenly(tmp_path: Path) -> None:
    from cognoxium.exceptions import PlanError
    from cognoxium.packing.manifests import ManifestWriter

    scope = PackScope(_rows())
    outcome = scope.outcome(90, PackOptions(as_of=AS_OF))
    with (
        ManifestWriter(tmp_path, "parquet") as writer,
        pytest.raises(PlanError, match="do not make k manifests"),
    ):
        writer.write_many(["a", "b"], [outcome.manifest] * 2, scope.entries([outcome]).head(5))


@pytest.mark.parametrize("form", ["parquet", "jsonl"])
def test_a_scope_result_written_in_pieces_writes_the_whole(form: str, tmp_path: Path) -> None:
    from cognoxium.app._workers import open_part

    store = CognitionFrame(_rows())
    settings = BatchSettings(PackOptions(as_of=AS_OF), "bm25")
    requests = [Request(id=f"r{b}", budget=b, query="refund") for b in (20, 60, 90, 200)]
    result = pack_scope(store, requests, settings)
    whole, pieces = tmp_path / "whole", tmp_path / "pieces"
    for folder, parts in ((whole, [(0, 4)]), (pieces, [(0, 1), (1, 1), (1, 3), (3, 4)])):
        with open_part(folder, form, 0) as (packs, writer):  # type: ignore[arg-type]
            for start, stop in parts:
                result.take(start, stop).write(packs, writer)
    names = layout(whole)
    assert names == layout(pieces)
    assert_same_outputs(pieces, whole, names)
    assert [line["request_id"] for line in records(whole)] == [r.id for r in requests]
    assert [m.label for m in read_manifests(pieces)] == [r.id for r in requests]
    middle = result.take(1, 3)
    assert middle.entries.height == 2 * store.count()
    assert middle.latencies_ms == result.latencies_ms[1:3]


def test_take_refuses_a_range_outside_the_requests() -> None:
    from cognoxium.exceptions import PlanError

    store = CognitionFrame(_rows())
    settings = BatchSettings(PackOptions(as_of=AS_OF), "none")
    result = pack_scope(store, [Request(id="a", budget=50), Request(id="b", budget=90)], settings)
    for start, stop in ((0, 3), (2, 1), (-1, 1)):
        with pytest.raises(PlanError, match=f"requests {start} to {stop}"):
            result.take(start, stop)


def test_the_required_item_cut_does_not_depend_on_the_costs_counted_before() -> None:
    # Two truncatable system prompts and eight required user messages exceed 90 tokens.
    # The required units are cut last first in the whole selection order (cost asc
    # among equal keys): s0 (22 tokens of text) after s1 (21). A scope that had counted
    # every cost for an earlier pack ordered them so, a cold one in input order, and
    # the two cut different prompts (s0, s1).
    prompt = {"role": "system", "retention": "required", "created_at": AS_OF,
              "metadata": {"truncate": {"side": "tail", "min_tokens": 4}}}  # fmt: skip
    df = records_to_frame(
        [
            prompt | {"id": "s0", "text": "refund refund refund refund 朗琴" + " refund" * 13},
            prompt | {"id": "s1", "text": " ".join(["refund"] * 21)},
            *(
                {
                    "id": f"m{i}",
                    "role": "user",
                    "text": "refund",
                    "retention": "required",
                    "created_at": AS_OF,
                }
                for i in range(8)
            ),
        ]
    )
    options = PackOptions(as_of=AS_OF, overflow="truncate")
    rank = df.get_column("rank")
    scope = PackScope(df)
    scope.pack(1000, options, rank=rank)  # counts every cost
    warm = scope.pack(90, options, rank=rank)
    cold = pack(df, 90, options)
    assert [(t.id, t.kept_tokens) for t in cold.manifest.truncations] == [("s0", 18)]
    assert_pack_equal(warm, cold)
