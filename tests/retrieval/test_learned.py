"""The learned ranker: features on a hand-built scope, the logistic solver, the model file,
and rank("learned") as a plan node."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from cognoxium.exceptions import PlanError, RecordError
from cognoxium.frame.frame import CognitionFrame
from cognoxium.items.records import records_to_frame
from cognoxium.retrieval.embeddings import MAX_READ_CHARS, EmbeddingCache
from cognoxium.retrieval.features import (
    FEATURE_NAMES,
    FeatureExtractor,
    is_when_question,
    time_expression_expr,
)
from cognoxium.retrieval.learned import (
    LearnedModel,
    default_model_path,
    fit_logistic,
    learned_scores,
    load_model,
)
from cognoxium.retrieval.scope import RetrievalSettings
from cognoxium.tokens.profiles import get_profile

T0 = "2024-01-01T00:00:00Z"
STORE_T1 = "Ann: We moved to Lyon last spring."


def store(t3: str = "Ann: Near the old bakery.") -> pl.DataFrame:
    turns = [
        ("t1", "user", "Ann", 1, "Ann: We moved to Lyon last spring."),
        ("t2", "assistant", "Bo", 1, "Bo: Where in Lyon?"),
        ("t3", "user", "Ann", 1, t3),
        ("t4", "assistant", "Bo", 2, "Bo: I bought a red bicycle."),
    ]
    rows = [
        {
            "id": i,
            "role": r,
            "text": t,
            "created_at": T0,
            "metadata": {"kind": "turn", "speaker": s, "session": n},
        }
        for i, r, s, n, t in turns
    ]
    rows += [
        {"id": "o1", "role": "memory", "text": "Ann lives in Lyon.", "parents": ["t1"]},
        {
            "id": "s1",
            "role": "memory",
            "text": "Ann and Bo talk about moving house.",
            "parents": ["t1", "t2", "t3"],
        },
    ]
    return records_to_frame(rows)


def extractor(items: pl.DataFrame | None = None) -> FeatureExtractor:
    items = store() if items is None else items
    scope = items.filter(pl.col("role") != "memory")
    return FeatureExtractor(
        scope,
        lineage=items,
        settings=RetrievalSettings(model="local_hash"),
        cache=EmbeddingCache(persist=False),
    )


def test_features_have_one_row_per_item_and_every_named_column() -> None:
    rows = extractor().features("Where does Ann live? Lyon")
    assert rows.columns == ["id", *FEATURE_NAMES]
    assert rows["id"].to_list() == ["t1", "t2", "t3", "t4"]
    assert all(rows.schema[name] == pl.Float64 for name in FEATURE_NAMES)
    assert np.isfinite(rows.select(FEATURE_NAMES).to_numpy()).all()


def test_feature_values_on_a_hand_built_scope() -> None:
    rows = extractor().features("When did Ann move to Lyon?").rows_by_key("id", named=True)
    t1, t2, t3, t4 = (rows[i][0] for i in ("t1", "t2", "t3", "t4"))
    # BM25: t1 holds "Ann", "moved" and "Lyon", t2 "Lyon", t3 "Ann"; the best is normalised to 1.
    assert t1["bm25"] == 1.0
    assert 0 < t3["bm25"] < 1
    assert 0 < t2["bm25"] < 1
    assert t4["bm25"] == 0.0
    assert t1["bm25_rank"] == math.log2(2)
    assert t4["bm25_rank"] == math.log2(5)
    # The window of t4 is t3 + t4: t3's "Ann" counts for t4, which has no query term itself.
    assert t1["bm25_window"] == 1.0
    assert t4["bm25_window"] > 0
    # Lineage: t1 has the observation and the summary; t2, t3 the summary only; t4 nothing.
    assert [r["has_derived"] for r in (t1, t2, t3, t4)] == [1.0, 1.0, 1.0, 0.0]
    assert t1["bm25_lineage"] == 1.0
    assert t4["bm25_lineage"] == 0.0
    assert t4["cos_lineage"] == 0.0
    assert t4["cos_summary"] == 0.0
    assert t1["cos_summary"] == t2["cos_summary"] == t3["cos_summary"] != 0.0
    assert t1["cos_lineage"] >= t1["cos_summary"]
    # Speakers: the question names Ann, the speaker of t1 and t3.
    assert [r["names_speaker"] for r in (t1, t2, t3, t4)] == [1.0, 0.0, 1.0, 0.0]
    assert [r["names_other"] for r in (t1, t2, t3, t4)] == [0.0, 1.0, 0.0, 1.0]
    # Time: "last spring" in t1, and the question asks when.
    assert [r["has_time"] for r in (t1, t2, t3, t4)] == [1.0, 0.0, 0.0, 0.0]
    assert t1["when_time"] == 1.0
    # Cost: tokens of the text plus the role's framing.
    profile = get_profile("cl100k_base")
    tokens = int(profile.count(["Ann: We moved to Lyon last spring."])[0]) + profile.framing("user")
    assert t1["log_cost"] == pytest.approx(math.log(tokens))
    # Gaps are <= 0 and 0 for the best item.
    assert max(r["cos_gap"] for r in (t1, t2, t3, t4)) == 0.0
    # Neighbours and session prior from the fused score.
    assert t2["fused_neighbour"] == max(t1["fused"], t3["fused"])
    top = sorted((t1["fused"], t2["fused"], t3["fused"]), reverse=True)
    assert t1["session_prior"] == pytest.approx(sum(top) / 3)
    assert t4["session_prior"] == pytest.approx(t4["fused"])


UNNAMED = {
    "cos_unnamed": "cos",
    "cos_unnamed_gap": "cos_gap",
    "cos_window_unnamed": "cos_window",
    "cos_window_unnamed_gap": "cos_window_gap",
}


@pytest.mark.parametrize(
    ("query", "without"),
    [
        ("Where did Ann's family move to?", "Where did family move to?"),
        ("Where did ANN’s family move to?", "Where did family move to?"),
        ("Where did ann and bo's family move?", "Where did and family move?"),
    ],
)
def test_unnamed_cosines_read_the_query_without_the_speaker_names(query: str, without: str) -> None:
    ex = extractor()
    named, plain = ex.features(query), ex.features(without)
    # The speaker names (any case, whole word, with a possessive 's) are taken out.
    for unnamed, name in UNNAMED.items():
        assert named[unnamed].to_list() == plain[name].to_list()
    assert named["cos_unnamed"].to_list() != named["cos"].to_list()


@pytest.mark.parametrize(
    "query", ["Where is the bakery?", "Annie bought a bicycle?", "Ann / Bo?", "Ann's"]
)
def test_unnamed_cosines_are_the_cosines_when_no_word_is_left(query: str) -> None:
    # No speaker named ("Annie" is not "Ann"), or no word but names: the query as it is.
    rows = extractor().features(query)
    for unnamed, name in UNNAMED.items():
        assert rows[unnamed].to_list() == rows[name].to_list()


def chat(speakers: list[object]) -> pl.DataFrame:
    """Turns ``"<speaker>: ..."`` with ``metadata.speaker`` as given (any JSON value)."""
    rows = [
        {
            "id": f"t{i}",
            "role": "user",
            "text": f"{speaker}: I read a book about {topic}.",
            "created_at": T0,
            "metadata": {"speaker": speaker},
        }
        for i, (speaker, topic) in enumerate(
            zip(speakers, ("Lyon", "bees", "ships", "tea"), strict=True)
        )
    ]
    return records_to_frame(rows)


@pytest.mark.parametrize(
    ("speaker", "query", "without"),
    [
        ("@ann", "What did @ann read?", "What did read?"),
        ("J.R.", "What did J.R. read?", "What did read?"),
        ("J.R.", "What did J.R.'s friend read?", "What did friend read?"),
        ("(Al)", "What did (Al) read?", "What did read?"),
        ("C++ Bot", "What did c++ bot read?", "What did read?"),
        ("O'Brien", "What did O\u2019Brien read?", "What did read?"),
        ("James", "What did James' friend read?", "What did friend read?"),
        # The query decomposed (e + combining diaeresis), the name composed.
        ("Zo\u00eb", "What did Zoe\u0308 read?", "What did read?"),
        # Chinese is written without spaces: the name is found inside the sentence.
        (
            "\u674e\u96f7",
            "\u674e\u96f7\u8bfb\u4e86\u4ec0\u4e48\u4e66\uff1f",
            "\u8bfb\u4e86\u4ec0\u4e48\u4e66\uff1f",
        ),
    ],
)
def test_a_speaker_is_named_whatever_characters_edge_the_name(
    speaker: str, query: str, without: str
) -> None:
    ex = extractor(chat([speaker, "Bo", speaker, "Bo"]))
    rows, plain = ex.features(query), ex.features(without)
    assert rows["names_speaker"].to_list() == [1.0, 0.0, 1.0, 0.0]
    assert rows["names_other"].to_list() == [0.0, 1.0, 0.0, 1.0]
    # The name and its possessive are taken out of the query of the unnamed cosines.
    for unnamed, name in UNNAMED.items():
        assert rows[unnamed].to_list() == plain[name].to_list()


@pytest.mark.parametrize("query", ["What did Annie read?", "What did Bob read?", "Ann2?"])
def test_a_name_inside_a_longer_word_is_not_the_speaker(query: str) -> None:
    rows = extractor(chat(["Ann", "Bo", "Ann", "Bo"])).features(query)
    assert rows["names_speaker"].to_list() == [0.0] * 4
    assert rows["cos_unnamed"].to_list() == rows["cos"].to_list()


@pytest.mark.parametrize("speaker", ["", "  ", 5, True, ["Ann", "Bo"], {"name": "Ann"}, None])
def test_a_blank_or_non_string_speaker_names_no_one(speaker: object) -> None:
    rows = extractor(chat([speaker, "Bo", speaker, "Bo"])).features("What did 5 true Ann read?")
    assert rows["names_speaker"].to_list() == [0.0] * 4
    assert rows["names_other"].to_list() == [0.0] * 4
    assert rows["cos_unnamed"].to_list() == rows["cos"].to_list()


def test_a_speaker_name_is_read_stripped() -> None:
    rows = extractor(chat([" Ann ", "Bo", "Ann", "Bo"])).features("Ann?")
    assert rows["names_speaker"].to_list() == [1.0, 0.0, 1.0, 0.0]


def test_unnamed_cosines_without_speakers_are_the_cosines() -> None:
    items = store().with_columns(pl.lit(None, dtype=pl.String).alias("metadata"))
    rows = extractor(items).features("Where did Ann move to?")
    for unnamed, name in UNNAMED.items():
        assert rows[unnamed].to_list() == rows[name].to_list()


def test_features_of_a_huge_text_read_its_first_max_read_chars() -> None:
    huge = "Ann: near the old bakery in Lyon, last spring. " * 3_000  # 141,000 characters
    query = "When did Ann move to Lyon?"
    whole = extractor(store(t3=huge)).features(query)
    cut = extractor(store(t3=huge[:MAX_READ_CHARS])).features(query)
    lexical = [name for name in FEATURE_NAMES if name != "log_cost"]
    assert_frame_equal(whole.select("id", *lexical), cut.select("id", *lexical))
    # The cost of the huge text: its prefix's tokens per character, times its characters.
    profile = get_profile("cl100k_base")
    prefix = int(profile.count([huge[:MAX_READ_CHARS]])[0])
    tokens = round(prefix * len(huge) / MAX_READ_CHARS) + profile.framing("user")
    costs = dict(whole.select("id", "log_cost").iter_rows())
    assert costs["t3"] == pytest.approx(math.log(tokens))
    assert costs["t3"] > dict(cut.select("id", "log_cost").iter_rows())["t3"]
    ordinary = int(profile.count([STORE_T1])[0]) + profile.framing("user")
    assert costs["t1"] == pytest.approx(math.log(ordinary))


def test_ties_share_a_competition_rank() -> None:
    rows = extractor().features("Lyon")
    # t1 and t2 hold "Lyon"; t3 and t4 tie at 0 and share rank 3.
    assert rows["bm25_rank"].to_list()[2:] == [math.log2(4), math.log2(4)]


def test_features_without_the_when_question_turn_off_when_time() -> None:
    rows = extractor().features("Where does Ann live?")
    assert rows["when_time"].to_list() == [0.0, 0.0, 0.0, 0.0]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("I went there yesterday", True),
        ("in May 2023", True),
        ("two weeks ago", True),
        ("next weekend", True),
        ("a mayor", False),
        ("I like apples", False),
    ],
)
def test_time_expressions(text: str, expected: bool) -> None:
    assert pl.select(time_expression_expr(pl.lit(text))).item() is expected


def test_when_questions() -> None:
    assert is_when_question("When did she go?")
    assert is_when_question("In which year did he move?")
    assert is_when_question("How long ago was the trip?")
    assert not is_when_question("What did she buy?")


# ---------------------------------------------------------------------------
# the solver


def synthetic(seed: int = 7) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(20000, 3))
    w, b = np.array([1.5, -2.0, 0.0]), -1.0
    y = (rng.random(20000) < 1.0 / (1.0 + np.exp(-(x @ w + b)))).astype(np.float64)
    return x, y, w, b


def test_solver_recovers_known_weights() -> None:
    x, y, w, b = synthetic()
    weights, bias = fit_logistic(x, y, l2=0.0)
    assert np.allclose(weights, w, atol=0.08)
    assert bias == pytest.approx(b, abs=0.08)


def test_l2_shrinks_the_weights() -> None:
    x, y, _, _ = synthetic()
    free, _ = fit_logistic(x, y, l2=0.0)
    shrunk, _ = fit_logistic(x, y, l2=5000.0)
    assert np.linalg.norm(shrunk) < np.linalg.norm(free)


def test_fitting_twice_gives_the_same_bytes(tmp_path: Path) -> None:
    x, y, _, _ = synthetic()
    names = ("bm25", "cos", "log_cost")
    one = LearnedModel.fit(x, y, feature_names=names).to_json()
    two = LearnedModel.fit(x.copy(), y.copy(), feature_names=names).to_json()
    assert one == two
    path = tmp_path / "m.json"
    path.write_text(one)
    assert load_model(path).to_json() == one


@pytest.mark.parametrize(
    ("x", "y", "message"),
    [
        (np.ones((3, 2)), np.array([0, 1]), "x \\(m, d\\) and y \\(m,\\)"),
        (np.array([[np.nan], [1.0]]), np.array([0, 1]), "finite"),
        (np.ones((2, 1)), np.array([0, 2]), "labels must be 0 or 1"),
    ],
)
def test_solver_rejects_bad_input(x: np.ndarray, y: np.ndarray, message: str) -> None:
    with pytest.raises(PlanError, match=message):
        fit_logistic(x, y)


def test_model_rejects_unknown_features_and_bad_files(tmp_path: Path) -> None:
    with pytest.raises(PlanError, match="unknown features"):
        LearnedModel(feature_names=("nope",), weights=(1.0,), means=(0.0,), scales=(1.0,), bias=0)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": "something else"}))
    with pytest.raises(RecordError, match="not a learned ranker model"):
        load_model(bad)
    broken = tmp_path / "broken.json"
    broken.write_text('{"format": "cognoxium.learned_ranker/1"}')
    with pytest.raises(RecordError, match="missing field"):
        load_model(broken)


def test_utility_subtracts_the_cost_penalty() -> None:
    model = LearnedModel(
        feature_names=("bm25",),
        weights=(2.0,),
        means=(0.0,),
        scales=(1.0,),
        bias=-1.0,
        cost_penalty=0.5,
    )
    x = np.array([[1.0], [0.0]])
    got = model.utility(x, np.array([math.log(4.0), 0.0]))
    expected = [-math.log1p(math.exp(-1.0)) - 0.5 * math.log(4.0), -math.log1p(math.exp(1.0))]
    assert got.tolist() == pytest.approx(expected, abs=1e-9)


# ---------------------------------------------------------------------------
# rank("learned")


def tiny_model(tmp_path: Path) -> Path:
    """A model over two features: BM25 and naming the speaker, with the local_hash embedder."""
    model = LearnedModel(
        feature_names=("bm25", "names_speaker"),
        weights=(2.0, 1.0),
        means=(0.0, 0.0),
        scales=(1.0, 1.0),
        bias=-3.0,
        embedding_model="local_hash",
    )
    path = tmp_path / "tiny.json"
    path.write_text(model.to_json())
    return path


def test_rank_learned_is_a_plan_node_scored_by_the_model(tmp_path: Path) -> None:
    items = CognitionFrame(store())
    scope = items.filter(pl.col("role") != "memory")
    path = tiny_model(tmp_path)
    ranked = scope.rank("learned", query="Where does Ann live? Lyon", lineage=items, model=path)
    plan = ranked.explain(optimized=False)
    assert plan.splitlines()[0].startswith("Rank learned query='Where does Ann live? Lyon' model=")
    assert "lineage from the second input" in plan
    scores = ranked.to_polars()["rank"].to_numpy()
    expected = learned_scores(extractor(), "Where does Ann live? Lyon", load_model(path))
    assert scores.tolist() == expected.tolist()
    assert int(np.argmax(scores)) == 0
    assert (scores <= 0).all()  # log p with no cost penalty
    again = scope.rank("learned", query="Where does Ann live? Lyon", lineage=items, model=path)
    assert again.to_polars()["rank"].to_numpy().tobytes() == scores.tobytes()


def test_rank_learned_needs_a_query_and_defaults_its_lineage_to_the_frame(
    tmp_path: Path,
) -> None:
    scope = CognitionFrame(store())
    path = tiny_model(tmp_path)
    alone = scope.rank("learned", query="Where does Ann live?", model=path)
    given = scope.rank("learned", query="Where does Ann live?", lineage=scope, model=path)
    assert alone.explain() == given.explain()
    scores = alone.to_polars()["rank"].to_numpy()
    assert scores.tobytes() == given.to_polars()["rank"].to_numpy().tobytes()
    with pytest.raises(PlanError, match="non-empty query"):
        scope.rank("learned", query=" ")


def test_learned_ranks_of_many_queries_embed_them_at_once_and_equal_each_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A batch over one scope embeds its queries, and their forms without the
    # speakers' names, in one run of the model; each rank is the rank alone, bit for bit.
    from collections import OrderedDict

    from cognoxium.engine.ranks import collect_ranks
    from cognoxium.retrieval import features
    from cognoxium.retrieval import scope as scopes
    from cognoxium.retrieval.embeddings import MiniLMEmbedder

    items = CognitionFrame(store("Ann: Near the new bakery."))
    scope = items.filter(pl.col("role") != "memory")
    queries = ["Where does Ann live?", "What did Bo buy?", "bicycle colour", "Where does Ann live?"]
    alone = [
        scope.rank("learned", query=q, lineage=items).to_polars()["rank"].to_numpy().tobytes()
        for q in queries
    ]
    assert len(set(alone)) == 3
    # The scope's retrievers and features built anew: no query vector kept.
    monkeypatch.setattr(scopes, "_RETRIEVERS", OrderedDict())
    monkeypatch.setattr(features, "_EXTRACTORS", OrderedDict())
    calls: list[list[str]] = []
    embed = MiniLMEmbedder.embed

    def counted(self: MiniLMEmbedder, texts: list[str]) -> np.ndarray:
        calls.append(list(texts))
        return embed(self, texts)

    monkeypatch.setattr(MiniLMEmbedder, "embed", counted)
    nodes = [scope.rank("learned", query=q, lineage=items)._plan for q in queries]
    together = collect_ranks(nodes)  # type: ignore[arg-type]
    asked = [c for c in calls if set(c) & set(queries)]
    assert asked == [["Where does Ann live?", "What did Bo buy?", "bicycle colour",
                      "Where does live?", "What did buy?"]]  # fmt: skip
    assert [c.to_numpy().tobytes() for c in together] == alone


def test_the_shipped_model_loads_and_names_its_provenance() -> None:
    assert default_model_path().is_file()
    model = load_model()
    assert model.feature_names == FEATURE_NAMES
    provenance = model.provenance
    assert provenance["data"]["file"] == "locomo7.json"
    assert len(provenance["data"]["sha256"]) == 64
    assert {"date", "command", "metrics", "conversations"} <= set(provenance)
