"""Fitting the learned ranker: train-ranker on a small LoCoMo-format file, folds, and packing."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from cognoxium.app.cli import EXIT_BAD_INPUT, EXIT_OK, app
from cognoxium.app.locomo import run_locomo
from cognoxium.app.ranker import Question, fit_fold_models, locomo_questions, pack_recall
from cognoxium.packing.manifests import read_manifests
from cognoxium.retrieval.features import FEATURE_NAMES
from cognoxium.retrieval.learned import load_model
from cognoxium.retrieval.scope import RetrievalSettings
from tests.app.parts import records
from tests.app.test_locomo import tiny

LOCAL = RetrievalSettings(model="local_hash")


def two_conversations() -> list[dict[str, object]]:
    """The tiny conversation of the LoCoMo tests, twice under two sample ids."""
    first, second = tiny()[0], json.loads(json.dumps(tiny()[0]))
    second["sample_id"] = "t-2"
    return [first, second]


@pytest.fixture
def data(tmp_path: Path) -> Path:
    path = tmp_path / "small.json"
    path.write_text(json.dumps(two_conversations()), encoding="utf-8")
    return path


def test_questions_are_the_answerable_ones_with_labels(data: Path) -> None:
    questions = locomo_questions(data, settings=LOCAL)
    # Per conversation: q0 (category 4, D1:1) and q1 (category 1, D1:3 and D2:2);
    # q2 has no valid evidence and q3 is adversarial.
    assert [(q.conversation, q.category) for q in questions] == [
        ("t-1", 4),
        ("t-1", 1),
        ("t-2", 4),
        ("t-2", 1),
    ]
    assert questions[0].x.shape == (5, len(FEATURE_NAMES))
    assert questions[0].y.tolist() == [1.0, 0.0, 0.0, 0.0, 0.0]
    assert questions[1].y.tolist() == [0.0, 0.0, 1.0, 0.0, 1.0]


def test_pack_recall_packs_greedily_by_score_then_cost() -> None:
    x = np.zeros((3, len(FEATURE_NAMES)))
    x[:, FEATURE_NAMES.index("log_cost")] = np.log([10.0, 30.0, 10.0])
    q = Question("c", 4, x, np.array([0.0, 1.0, 1.0]))
    # The best item (30 tokens) does not fit 25 tokens; the next ones do.
    assert pack_recall(np.array([1.0, 3.0, 2.0]), q, 25) == 0.5
    assert pack_recall(np.array([1.0, 3.0, 2.0]), q, 50) == 1.0


def test_train_ranker_command_fits_reproducibly(data: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    out_one = tmp_path / "one.json"
    first = runner.invoke(app, ["train-ranker", str(data), "--out", str(out_one), "--json"])
    assert first.exit_code == EXIT_OK, first.stderr
    summary = json.loads(first.stdout)
    assert summary["command"] == "train-ranker"
    assert summary["model"] == str(out_one)
    written = out_one.read_bytes()
    second = runner.invoke(app, ["train-ranker", str(data), "--out", str(out_one), "--quiet"])
    assert second.exit_code == EXIT_OK, second.stderr
    assert out_one.read_bytes() == written
    model = load_model(out_one)
    assert model.feature_names == FEATURE_NAMES
    provenance = model.provenance
    assert provenance["data"]["file"] == "small.json"
    assert provenance["questions"] == 4
    assert provenance["rows"] == 20
    assert provenance["positives"] == 6
    assert provenance["conversations"] == ["t-1", "t-2"]
    assert set(provenance["metrics"]["training_recall_1_4"]) == {"1024", "2048"}
    assert provenance["command"] == (
        f"cognoxium train-ranker {data} --out {out_one} --l2 1.0 --cost-penalty 0.5"
    )


def test_train_ranker_rejects_a_file_that_is_not_locomo(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"sample_id": "x"}]))
    result = CliRunner().invoke(app, ["train-ranker", str(bad), "--out", str(tmp_path / "m")])
    assert result.exit_code == EXIT_BAD_INPUT
    assert "conversation" in result.stderr


def test_fold_models_never_see_their_conversation(data: Path, tmp_path: Path) -> None:
    models = fit_fold_models(data, tmp_path / "folds", settings=LOCAL)
    assert sorted(models) == ["t-1", "t-2"]
    for held, path in models.items():
        model = load_model(path)
        assert model.provenance["held_out"] == held
        assert model.provenance["rows"] == 10  # the other conversation's two questions
        assert model.embedding_model == "local_hash"


def test_run_locomo_ranks_learned_leaving_one_conversation_out(data: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    report = run_locomo(
        data, out, [20, 4096], rank="learned", compare=("bm25",), retrieval=LOCAL, loco=True
    )
    assert report["settings"]["leave_one_conversation_out"] is True
    assert (out / "models" / "t-1.json").is_file()
    packs = records(out)
    requests = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]
    assert [p["request_id"] for p in packs] == [r["id"] for r in requests]
    assert report["budgets"]["4096"]["recall_all"] == 1.0
    assert set(report["per_conversation"]) == {"t-1", "t-2"}
    assert "bm25" in report["compare"]


def test_pack_and_locomo_rank_with_a_fitted_model_given_by_ranker(
    data: Path, tmp_path: Path
) -> None:
    runner = CliRunner()
    model = tmp_path / "model.json"
    fitted = runner.invoke(app, ["train-ranker", str(data), "--out", str(model), "--quiet"])
    assert fitted.exit_code == EXIT_OK, fitted.stderr
    base = ["locomo", str(data), "--budgets", "64", "--compare", "", "--quiet"]
    shipped = runner.invoke(app, [*base, "--out", str(tmp_path / "shipped")])
    own = runner.invoke(app, [*base, "--out", str(tmp_path / "own"), "--ranker", str(model)])
    assert (shipped.exit_code, own.exit_code) == (EXIT_OK, EXIT_OK), own.stderr
    # The same requests, ranked by other weights: other rank values in the manifests.
    manifests = [
        [m.to_json() for m in read_manifests(tmp_path / run)] for run in ("shipped", "own")
    ]
    assert manifests[0] != manifests[1]
    repacked = runner.invoke(
        app,
        [
            "pack",
            str(tmp_path / "own" / "items.parquet"),
            str(tmp_path / "own" / "requests.jsonl"),
            "--out",
            str(tmp_path / "repacked"),
            "--ranker",
            str(model),
            "--quiet",
        ],
    )
    assert repacked.exit_code == EXIT_OK, repacked.stderr
    assert [m.to_json() for m in read_manifests(tmp_path / "repacked")] == manifests[1]


def test_a_file_that_is_not_a_model_given_by_ranker_exits_2(data: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{}", encoding="utf-8")
    result = CliRunner().invoke(
        app,
        [
            "locomo",
            str(data),
            "--out",
            str(tmp_path / "o"),
            "--budgets",
            "64",
            "--compare",
            "",
            "--ranker",
            str(bad),
        ],
    )
    assert result.exit_code == EXIT_BAD_INPUT
    assert "not a learned ranker model" in result.stderr
    assert "Traceback" not in result.stderr
