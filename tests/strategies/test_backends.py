"""Strategy backends: item store, BM25 text, exact-cosine vector, graph edges, temporal tiers."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import polars as pl
import pytest

from cognoxium import CognitionFrame
from cognoxium.app.locomo_dataset import load_locomo
from cognoxium.exceptions import RecordError, StrategyError
from cognoxium.strategies import (
    BACKEND_KINDS,
    DEFAULT_HOT_SECONDS,
    DEFAULT_WARM_SECONDS,
    Backends,
    BreadthDepthNavigatorStrategy,
    ContextRequest,
    EdgeWeights,
    GraphBackend,
    ItemStore,
    TemporalBackend,
)
from tests.strategies.helpers import AS_OF, T0, embedding_cache, node_ids


def test_item_store_reads_metadata_and_hierarchy(backends: Backends) -> None:
    store = backends.store
    row = store.table.filter(pl.col("id") == "c1:D2:5").row(0, named=True)
    assert (row["conversation"], row["session"], row["speaker"], row["kind"]) == (
        "c1", "2", "Bo", "turn",
    )  # fmt: skip
    assert sorted(store.hierarchy.rows()) == [
        ("d-goal", "goal"), ("d-hot", "plan"), ("d-plan", "plan"), ("plan", "goal"),
        ("step", "plan"),
    ]  # fmt: skip
    assert store.ancestors(["step", "absent"]).rows() == [("step", 0), ("plan", 1), ("goal", 2)]
    assert store.ancestors(["step"], max_depth=1).rows() == [("step", 0), ("plan", 1)]


def test_item_store_rejects_bad_frames() -> None:
    with pytest.raises(StrategyError, match="missing"):
        ItemStore(pl.DataFrame({"id": ["a"]}))


def test_item_store_refuses_a_polars_frame_whose_content_hash_is_of_other_content() -> None:
    df = CognitionFrame.from_records(
        [{"id": "a", "role": "user", "text": "hi"}, {"id": "b", "role": "user", "text": "yo"}]
    ).collect()
    assert ItemStore(df).items.height == 2
    edited = df.with_columns(text=pl.Series(["hi", "an edited text"]))  # the hash left as it was
    with pytest.raises(RecordError, match="row 1: field content_hash"):
        ItemStore(edited)


def test_item_store_skips_binary_items() -> None:
    frame = CognitionFrame.from_records(
        [
            {"id": "t", "role": "user", "text": "hello"},
            {"id": "b", "role": "tool", "payload": {"kind": "binary", "data": "aGk="}},
        ]
    )
    store = ItemStore(frame)
    assert store.table.get_column("id").to_list() == ["t"]
    assert store.items.height == 2


def test_text_backend_ranks_by_bm25(backends: Backends) -> None:
    assert backends.text is not None
    hits = backends.text.search("marathon October")
    assert hits.get_column("id").to_list()[:2] == ["c1:D2:5", "c1:D1:3"]
    assert hits.schema == pl.Schema({"id": pl.String, "score": pl.Float64})
    assert backends.text.search("the and of").height == 0


def test_vector_backend_exact_cosine(backends: Backends) -> None:
    assert backends.vector is not None
    matrix = backends.vector.matrix
    assert matrix.shape == (len(backends.store), backends.vector.embedder.dim)
    sims = backends.vector.similarities("puppy Biscuit")
    expected = matrix @ backends.vector.embedder.vector("puppy Biscuit")
    assert sims.tolist() == pytest.approx(expected.tolist())
    assert backends.vector.similarity_search("puppy Biscuit", k=1).item(0, "id") == "c1:D1:0"


@pytest.mark.parametrize(
    ("weights", "hops", "expected"),
    [
        # adjacency only: the neighbouring turns of the same session
        (EdgeWeights(lineage=0, adjacent=1.0, session=0, speaker=0), 1,
         {"c1:D1:0", "c1:D1:1", "c1:D1:2"}),
        (EdgeWeights(lineage=0, adjacent=1.0, session=0, speaker=0), 2,
         {"c1:D1:0", "c1:D1:1", "c1:D1:2", "c1:D1:3"}),
        (EdgeWeights(lineage=0, adjacent=1.0, session=0, speaker=0), 3,
         {"c1:D1:0", "c1:D1:1", "c1:D1:2", "c1:D1:3"}),  # sessions are not adjacent
        # same session: every item of session 1
        (EdgeWeights(lineage=0, adjacent=0, session=1.0, speaker=0), 1,
         {"c1:D1:0", "c1:D1:1", "c1:D1:2", "c1:D1:3"}),
        # same speaker (Bo) across both sessions
        (EdgeWeights(lineage=0, adjacent=0, session=0, speaker=1.0), 1,
         {"c1:D1:1", "c1:D1:3", "c1:D2:5", "c1:D2:7"}),
    ],
)  # fmt: skip
def test_graph_edge_kinds(
    backends: Backends, weights: EdgeWeights, hops: int, expected: set[str]
) -> None:
    graph = GraphBackend(backends.store, weights)
    assert set(graph.traverse(["c1:D1:1"], hops=hops).get_column("id")) == expected


def test_graph_lineage_edges_and_scores(backends: Backends) -> None:
    graph = GraphBackend(backends.store, EdgeWeights(lineage=0.5, adjacent=0, session=0, speaker=0))
    reached = graph.traverse(["step"], hops=2)
    assert reached.rows() == [
        ("step", 1.0, 0), ("plan", 0.5, 1), ("d-hot", 0.25, 2), ("d-plan", 0.25, 2),
        ("goal", 0.25, 2),
    ]  # fmt: skip
    assert graph.traverse(["step"], hops=0).rows() == [("step", 1.0, 0)]
    with pytest.raises(StrategyError, match="hops"):
        graph.traverse(["step"], hops=-1)


def test_temporal_tiers_in_seconds(backends: Backends) -> None:
    assert backends.temporal is not None
    tiers = dict(backends.temporal.tiers().select("id", "tier").iter_rows())
    assert tiers["d-hot"] == "hot"  # age 0 s
    assert tiers["c1:D2:4"] == "warm"  # 9 days
    assert tiers["goal"] == "warm"  # 29 days, under the 30-day threshold
    assert DEFAULT_HOT_SECONDS == 86_400
    assert DEFAULT_WARM_SECONDS == 30 * 86_400
    strict = TemporalBackend(backends.store, as_of=AS_OF, hot_seconds=3600, warm_seconds=3600)
    assert set(strict.tiers().get_column("tier")) == {"hot", "cold"}
    early = backends.temporal.tiers(as_of=T0 + timedelta(minutes=1, seconds=30))
    assert set(early.get_column("id")) == {"c1:D1:0", "c1:D1:1", "goal", "plan", "step",
                                           "d-goal", "d-plan", "d-other"}  # fmt: skip
    with pytest.raises(StrategyError, match="hot_seconds"):
        TemporalBackend(backends.store, hot_seconds=10, warm_seconds=5)
    with pytest.raises(StrategyError, match="unknown temporal tiers"):
        backends.temporal.query_by_tier(["lukewarm"])


def test_temporal_reference_defaults_to_latest_item(items: CognitionFrame) -> None:
    store = ItemStore(items)
    assert TemporalBackend(store).reference() == AS_OF


def test_locomo_items_use_speaker_and_session_edges(tmp_path: Path) -> None:
    path = tmp_path / "tiny.json"
    path.write_text(
        json.dumps(
            [
                {
                    "sample_id": "c9",
                    "conversation": {
                        "speaker_a": "Ann",
                        "speaker_b": "Bo",
                        "session_1_date_time": "9:00 am on 2 March, 2024",
                        "session_1": [
                            {"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a cat."},
                            {"speaker": "Bo", "dia_id": "D1:2", "text": "What is its name?"},
                            {"speaker": "Ann", "dia_id": "D1:3", "text": "Her name is Miso."},
                        ],
                        "session_2_date_time": "9:00 am on 9 March, 2024",
                        "session_2": [
                            {"speaker": "Bo", "dia_id": "D2:1", "text": "How is Miso?"},
                        ],
                    },
                }
            ]
        )
    )
    frame = load_locomo(path)
    backends = Backends.from_frame(frame, vector="local_hash", embedding_cache=embedding_cache())
    graph = GraphBackend(backends.store, EdgeWeights(lineage=0, adjacent=0, session=0, speaker=1))
    assert set(graph.traverse(["c9:D1:2"], hops=1).get_column("id")) == {"c9:D1:2", "c9:D2:1"}
    request = ContextRequest(query="", focus_nodes=("c9:D1:1",), breadth=1)
    found = BreadthDepthNavigatorStrategy().assemble(request, backends, 1000, None)
    assert node_ids(found)[:2] == ["c9:D1:1", "c9:D1:2"]


def test_backend_kinds_constant() -> None:
    assert BACKEND_KINDS == ("text", "vector", "graph", "temporal")
    with pytest.raises(StrategyError, match="unknown backend kinds"):
        Backends.from_frame(
            CognitionFrame([{"id": "a", "role": "user", "text": "x"}]), vector=False
        ).without("sql")
