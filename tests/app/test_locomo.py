"""The LoCoMo importer, requests and evaluation; end to end on the real data when present."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from typer.testing import CliRunner

from cognoxium.app.batch import Request, read_requests
from cognoxium.app.cli import app
from cognoxium.app.locomo import evaluate, run_locomo
from cognoxium.app.locomo_dataset import (
    load_locomo,
    locomo_requests,
    normalize_evidence,
    parse_session_time,
    read_locomo,
)
from cognoxium.exceptions import RecordError
from cognoxium.packing.manifests import read_manifests
from tests.app.parts import records
from tests.data import LOCOMO, needs_locomo
from tests.pins import ManifestDigests

REPO = Path(__file__).resolve().parents[2]


def tiny() -> list[dict[str, Any]]:
    """A LoCoMo-shaped conversation written for these tests (not from LoCoMo)."""
    return [
        {
            "sample_id": "t-1",
            "conversation": {
                "speaker_a": "Ann",
                "speaker_b": "Bo",
                "session_1_date_time": "1:56 pm on 8 May, 2023",
                "session_1": [
                    {"speaker": "Ann", "dia_id": "D1:1", "text": "I started a pottery class."},
                    {
                        "speaker": "Bo",
                        "dia_id": "D1:2",
                        "text": "Look at my new bike!",
                        "img_url": ["https://img.example/bike.jpg"],
                        "blip_caption": "a photo of a red bicycle",
                        "query": "red bike",
                    },
                    {
                        "speaker": "Ann",
                        "dia_id": "D1:3",
                        "text": "Nice. Here is my first bowl.",
                        "blip_caption": "a photo of a clay bowl",
                    },
                ],
                "session_2_date_time": "12:05 am on 19 June, 2023",
                "session_2": [
                    {"speaker": "Bo", "dia_id": "D2:1", "text": "I rode 50 km yesterday."},
                    {"speaker": "Ann", "dia_id": "D2:2", "text": "My bowl cracked in the kiln."},
                ],
            },
            "observation": {
                "session_1_observation": {
                    "Ann": [
                        ["Ann takes a pottery class.", "D1:1"],
                        ["Ann made a clay bowl.", ["D1:3", "D9:9"]],
                    ],
                    "Bo": [["Bo has a red bike.", "D1:2, D1:2; D:1:3"]],
                },
                "session_2_observation": {"Ann": [["Ann's bowl cracked.", "D2:2"]]},
            },
            "session_summary": {
                "session_1_summary": "Ann and Bo talked about pottery and a bike.",
                "session_2_summary": "Bo cycled; Ann's bowl cracked.",
            },
            "event_summary": {},
            "qa": [
                {
                    "question": "What class did Ann start?",
                    "answer": "pottery",
                    "evidence": ["D1:1"],
                    "category": 4,
                },
                {
                    "question": "What did Ann make and what happened to it?",
                    "answer": "a bowl",
                    "evidence": ["D1:3; D2:2"],
                    "category": 1,
                },
                {
                    "question": "When did Bo ride 50 km?",
                    "answer": "18 June 2023",
                    "evidence": ["D"],
                    "category": 2,
                },
                {
                    "question": "What colour is Ann's bike?",
                    "adversarial_answer": "red",
                    "evidence": ["D:1:2", "D7:7"],
                    "category": 5,
                },
            ],
        }
    ]


@pytest.fixture
def tiny_path(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(tiny()), encoding="utf-8")
    return path


def meta(df: pl.DataFrame, item_id: str) -> dict[str, Any]:
    value: dict[str, Any] = json.loads(df.filter(pl.col("id") == item_id)["metadata"].item())
    return value


# ---------------------------------------------------------------------------
# importer


def test_turn_items_have_ids_roles_text_and_order(tiny_path: Path) -> None:
    df = load_locomo(tiny_path)
    turns = df.filter(pl.col("metadata").str.contains('"kind":"turn"'))
    assert turns["id"].to_list() == ["t-1:D1:1", "t-1:D1:2", "t-1:D1:3", "t-1:D2:1", "t-1:D2:2"]
    assert turns["role"].cast(pl.String).to_list() == [
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
    ]
    assert turns["text"][0] == "Ann: I started a pottery class."
    assert (
        turns["text"][1] == "Bo: Look at my new bike! [shares an image: a photo of a red bicycle]"
    )
    assert (
        turns["text"][2]
        == "Ann: Nice. Here is my first bowl. [shares an image: a photo of a clay bowl]"
    )
    assert meta(df, "t-1:D1:2") == {
        "conversation": "t-1",
        "dia_id": "D1:2",
        "kind": "turn",
        "session": 1,
        "speaker": "Bo",
    }


def test_turn_times_are_session_time_plus_turn_index_seconds(tiny_path: Path) -> None:
    df = load_locomo(tiny_path)
    times = dict(zip(df["id"].to_list(), df["created_at"].to_list(), strict=True))
    assert times["t-1:D1:1"] == datetime(2023, 5, 8, 13, 56, 0, tzinfo=UTC)
    assert times["t-1:D1:3"] == datetime(2023, 5, 8, 13, 56, 2, tzinfo=UTC)
    assert times["t-1:D2:1"] == datetime(2023, 6, 19, 0, 5, 0, tzinfo=UTC)
    assert times["t-1:D2:2"] == datetime(2023, 6, 19, 0, 5, 1, tzinfo=UTC)


def test_image_turns_carry_their_reference_as_a_source(tiny_path: Path) -> None:
    df = load_locomo(tiny_path)
    sources = dict(zip(df["id"].to_list(), df["sources"].to_list(), strict=True))
    assert [(s["uri"], s["kind"], s["title"]) for s in sources["t-1:D1:2"]] == [
        ("locomo://t-1/D1:2", "conversation_turn", None),
        ("https://img.example/bike.jpg", "image", "a photo of a red bicycle"),
    ]
    # A caption without an image url is in the text but adds no image source.
    assert [s["kind"] for s in sources["t-1:D1:3"]] == ["conversation_turn"]


def test_derived_items_have_parents_times_and_kinds(tiny_path: Path) -> None:
    df = load_locomo(tiny_path)
    assert df["id"].to_list() == [
        "t-1:D1:1",
        "t-1:D1:2",
        "t-1:D1:3",
        "t-1:S1:observation:1",
        "t-1:S1:observation:2",
        "t-1:S1:observation:3",
        "t-1:S1:summary",
        "t-1:D2:1",
        "t-1:D2:2",
        "t-1:S2:observation:1",
        "t-1:S2:summary",
    ]
    parents = dict(zip(df["id"].to_list(), df["parents"].to_list(), strict=True))
    assert parents["t-1:S1:observation:1"] == ["t-1:D1:1"]
    assert parents["t-1:S1:observation:2"] == ["t-1:D1:3"]  # D9:9 names no turn: dropped
    assert parents["t-1:S1:observation:3"] == ["t-1:D1:2", "t-1:D1:3"]  # split, deduped
    assert parents["t-1:S1:summary"] == ["t-1:D1:1", "t-1:D1:2", "t-1:D1:3"]
    assert parents["t-1:S2:summary"] == ["t-1:D2:1", "t-1:D2:2"]
    derived = df.filter(pl.col("id").str.contains(":S"))
    assert set(derived["role"].cast(pl.String).to_list()) == {"memory"}
    assert meta(df, "t-1:S1:observation:3") == {
        "conversation": "t-1",
        "kind": "observation",
        "session": 1,
        "speaker": "Bo",
    }
    assert meta(df, "t-1:S2:summary")["kind"] == "session_summary"
    times = dict(zip(df["id"].to_list(), df["created_at"].to_list(), strict=True))
    assert times["t-1:S2:observation:1"] == datetime(2023, 6, 19, 0, 5, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1:56 pm on 8 May, 2023", datetime(2023, 5, 8, 13, 56, tzinfo=UTC)),
        ("12:05 am on 19 June, 2023", datetime(2023, 6, 19, 0, 5, tzinfo=UTC)),
        ("12:30 pm on 1 Jan, 2024", datetime(2024, 1, 1, 12, 30, tzinfo=UTC)),
        ("9:01 AM on 29 February, 2024", datetime(2024, 2, 29, 9, 1, tzinfo=UTC)),
    ],
)
def test_parse_session_time(text: str, expected: datetime) -> None:
    assert parse_session_time(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "13:00 pm on 8 May, 2023",
        "1:56 on 8 May, 2023",
        "1:56 pm on 30 February, 2023",
        "1:56 pm on 8 Mayo, 2023",
        "",
    ],
)
def test_parse_session_time_rejects(text: str) -> None:
    with pytest.raises(ValueError, match=r"LoCoMo date|12-hour|day is out of range"):
        parse_session_time(text)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("D1:1", (["D1:1"], 0, 0)),
        (["D8:6; D9:17"], (["D8:6", "D9:17"], 0, 0)),
        ("D8:6, D9:17 D8:6", (["D8:6", "D9:17"], 0, 0)),
        (["D:9:17"], (["D9:17"], 0, 0)),
        (["D08:06"], (["D8:6"], 0, 0)),
        (["D"], ([], 1, 0)),
        (["D10:19"], ([], 0, 1)),
        ([], ([], 0, 0)),
        ([None, 3], ([], 2, 0)),
    ],
)
def test_normalize_evidence(raw: object, expected: tuple[list[str], int, int]) -> None:
    assert normalize_evidence(raw, known={"D1:1", "D8:6", "D9:17"}) == expected


def test_bad_shapes_raise_record_errors_naming_the_field(tmp_path: Path) -> None:
    data = tiny()
    data[0]["conversation"]["session_2_date_time"] = "yesterday"
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(RecordError) as info:
        load_locomo(path)
    assert info.value.field == "[0].conversation.session_2_date_time"
    assert info.value.source == str(path)

    data = tiny()
    data[0]["conversation"]["session_1"][1]["speaker"] = "Cy"
    path.write_text(json.dumps(data))
    with pytest.raises(RecordError, match="neither speaker_a") as info:
        load_locomo(path)
    assert info.value.field == "[0].conversation.session_1[1].speaker"

    path.write_text("[{")
    with pytest.raises(RecordError, match="invalid JSON") as info:
        load_locomo(path)
    assert info.value.line == 1


# ---------------------------------------------------------------------------
# requests and evaluation


def test_requests_per_question_and_budget(tiny_path: Path) -> None:
    requests = locomo_requests(tiny_path, [256, 1024])
    assert [r.id for r in requests] == [
        "t-1:q0:b256",
        "t-1:q1:b256",
        "t-1:q2:b256",
        "t-1:q3:b256",
        "t-1:q0:b1024",
        "t-1:q1:b1024",
        "t-1:q2:b1024",
        "t-1:q3:b1024",
    ]
    first = requests[0]
    assert first.query == "What class did Ann start?"
    assert first.where == "metadata.conversation = 't-1' AND metadata.kind = 'turn'"
    assert first.as_of == datetime(2023, 6, 19, 0, 5, 1, tzinfo=UTC)  # the latest turn
    evidence = [r.evidence for r in requests[:4]]
    assert evidence == [["t-1:D1:1"], ["t-1:D1:3", "t-1:D2:2"], [], ["t-1:D1:2"]]
    assert [r.labels for r in requests[:4]] == [
        {"category": 4},
        {"category": 1},
        {"category": 2},
        {"category": 5},
    ]
    assert [(r.evidence, r.labels) for r in requests[4:]] == [
        (r.evidence, r.labels) for r in requests[:4]
    ]


def test_one_read_serves_the_items_and_the_requests(tiny_path: Path) -> None:
    data = read_locomo(tiny_path)
    assert data.sample_ids == ["t-1"]
    assert data.items().equals(load_locomo(tiny_path))
    assert data.counts["turns"] == 5
    assert data.counts["questions"] == 0  # questions are read when the requests are built
    built = data.requests([256])
    assert [r.model_dump() for r in built] == [
        r.model_dump() for r in locomo_requests(tiny_path, [256])
    ]
    question_counts = {
        "questions": 4,
        "questions_without_evidence": 1,
        "question_evidence_malformed": 1,
        "question_evidence_missing": 1,
    }
    assert {key: data.counts[key] for key in question_counts} == question_counts
    assert len(data.requests([256, 1024])) == 8
    # A second build sets the same counts instead of adding to them.
    assert {key: data.counts[key] for key in question_counts} == question_counts


def test_evaluate_recall_hit_rate_and_exclusions(tiny_path: Path) -> None:
    requests = locomo_requests(tiny_path, [256])
    packs = [
        {"request_id": "t-1:q0:b256", "ids": ["t-1:D1:1"], "used_tokens": 10},
        {"request_id": "t-1:q1:b256", "ids": ["t-1:D1:3"], "used_tokens": 20},
        {"request_id": "t-1:q2:b256", "ids": [], "used_tokens": 0},
        {"request_id": "t-1:q3:b256", "ids": [], "used_tokens": 30},
    ]
    out = evaluate(packs, requests)["budgets"]["256"]
    assert out["questions"] == 4
    assert out["excluded_no_evidence"] == 1
    assert out["evaluated"] == 3
    assert out["recall_answerable"] == pytest.approx((1.0 + 0.5) / 2)
    assert out["recall_all"] == pytest.approx((1.0 + 0.5 + 0.0) / 3)
    assert out["hit_rate_answerable"] == pytest.approx(0.5)
    assert out["hit_rate_all"] == pytest.approx(1 / 3)
    assert out["per_category"] == {
        "1": {"questions": 1, "recall": 0.5, "hit_rate": 0.0},
        "4": {"questions": 1, "recall": 1.0, "hit_rate": 1.0},
        "5": {"questions": 1, "recall": 0.0, "hit_rate": 0.0},
    }
    assert out["mean_used_tokens"] == pytest.approx(15.0)


def test_evaluate_needs_a_pack_per_request() -> None:
    request = Request(id="x", budget=1, evidence=["a"], labels={"category": 1})
    with pytest.raises(RecordError, match="has no pack"):
        evaluate([], [request])


@pytest.mark.parametrize(
    "labels",
    [{}, {"category": "1"}, {"category": True}, {"category": 1.0}, {"Category": 1}],
)
def test_evaluate_needs_an_integer_category_label(labels: dict[str, Any]) -> None:
    request = Request(id="x", budget=1, evidence=["a"], labels=labels)
    with pytest.raises(RecordError) as info:
        evaluate([{"request_id": "x", "ids": ["a"]}], [request])
    assert info.value.field == "labels.category"
    assert str(info.value).startswith(
        "field labels.category: request 'x': an evaluation request needs an integer "
        "question category, got "
    )


def test_evaluate_excludes_requests_without_evidence() -> None:
    requests = [
        Request(id="none", budget=8, labels={"category": 1}),  # evidence defaults to empty
        Request(id="some", budget=8, evidence=["a", "b"], labels={"category": 1}),
    ]
    packs = [{"request_id": "none", "ids": ["a"]}, {"request_id": "some", "ids": ["b"]}]
    out = evaluate(packs, requests)["budgets"]["8"]
    assert (out["questions"], out["evaluated"], out["excluded_no_evidence"]) == (2, 1, 1)
    assert out["recall_all"] == 0.5


def test_requests_file_reads_back_as_the_requests(tiny_path: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    run_locomo(tiny_path, out, [64])
    lines = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]
    assert lines[1] == {
        "id": "t-1:q1:b64",
        "budget": 64,
        "query": "What did Ann make and what happened to it?",
        "where": "metadata.conversation = 't-1' AND metadata.kind = 'turn'",
        "as_of": "2023-06-19T00:05:01Z",
        "evidence": ["t-1:D1:3", "t-1:D2:2"],
        "labels": {"category": 1},
    }
    # The file is valid input for `cognoxium pack` (no unknown fields).
    read = [r.model_dump() for r in read_requests(out / "requests.jsonl")]
    assert read == [r.model_dump() for r in locomo_requests(tiny_path, [64])]


def test_locomo_command_explains_the_report_columns(tiny_path: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["locomo", str(tiny_path), "--out", str(tmp_path / "o"), "--no-progress"]
    )
    assert result.exit_code == 0, result.stderr
    text = " ".join(result.stdout.split())
    for caption in CAPTIONS:
        assert caption in text
    assert "Rank methods compared (recall 1-4)" in text
    report = json.loads((tmp_path / "o" / "report.json").read_text())
    assert report["settings"]["rank"] == "learned"
    assert sorted(report["compare"]) == ["bm25", "recency"]  # the default --compare
    for method in ("learned", "bm25", "recency"):
        assert f" {method} " in f" {text} "
    assert (tmp_path / "o" / "compare" / "bm25" / "packs" / "part-00000.jsonl").is_file()


def test_run_locomo_on_tiny_data(tiny_path: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    report = run_locomo(tiny_path, out, [20, 4096], rank="bm25")
    assert {p.name for p in out.iterdir()} >= {
        "items.parquet",
        "requests.jsonl",
        "packs",
        "manifests",
        "manifest_headers",
        "report.json",
    }
    manifests = read_manifests(out)
    packs = records(out)
    assert [m.label for m in manifests] == [p["request_id"] for p in packs]
    assert json.loads((out / "report.json").read_text()) == report
    imported = report["import"]
    assert imported["turns"] == 5
    assert imported["observations"] == 4
    assert imported["session_summaries"] == 2
    assert imported["question_evidence_malformed"] == 1  # "D"
    assert imported["question_evidence_missing"] == 1  # "D7:7"
    assert imported["observation_evidence_missing"] == 1  # "D9:9"
    assert imported["questions_without_evidence"] == 1
    # At 4096 tokens the whole conversation fits: every evidence turn is found.
    assert report["budgets"]["4096"]["recall_all"] == 1.0
    assert report["budgets"]["20"]["recall_all"] < 1.0  # room for one turn only
    packs = records(out)
    assert all(
        not set(p["ids"]) - {f"t-1:D{s}:{t}" for s, t in [(1, 1), (1, 2), (1, 3), (2, 1), (2, 2)]}
        for p in packs
    )


# ---------------------------------------------------------------------------
# end to end on the real data


_EVIDENCE = re.compile(r"D:?(\d+):(\d+)")


def _independent_evidence(path: Path) -> dict[str, tuple[set[str], int]]:
    """Request-id prefix '<sample>:q<i>' -> (qualified evidence, category), from the raw JSON."""
    out: dict[str, tuple[set[str], int]] = {}
    for sample in json.loads(path.read_text(encoding="utf-8")):
        sid = sample["sample_id"]
        conv = sample["conversation"]
        turns = {
            turn["dia_id"]
            for key, value in conv.items()
            if re.fullmatch(r"session_\d+", key)
            for turn in value
        }
        for index, qa in enumerate(sample["qa"]):
            found = set()
            for raw in qa["evidence"]:
                for part in re.split(r"[;,\s]+", raw):
                    m = _EVIDENCE.fullmatch(part)
                    if m and f"D{int(m[1])}:{int(m[2])}" in turns:
                        found.add(f"{sid}:D{int(m[1])}:{int(m[2])}")
            out[f"{sid}:q{index}"] = (found, qa["category"])
    return out


def _turns_by_conversation(path: Path) -> dict[str, set[str]]:
    return {
        sample["sample_id"]: {
            f"{sample['sample_id']}:{turn['dia_id']}"
            for key, value in sample["conversation"].items()
            if re.fullmatch(r"session_\d+", key)
            for turn in value
        }
        for sample in json.loads(path.read_text(encoding="utf-8"))
    }


CAPTIONS = (
    "recall 1-4 = mean per-question evidence recall (share of a question's evidence turns "
    "that are packed) over categories 1-4; recall all = the same over all categories; "
    "all found 1-4 = share of questions of categories 1-4 whose evidence is all packed; "
    "tokens = mean tokens used per pack; packs/s = packs per second of packing. "
    "Questions without valid evidence are excluded.",
    "Mean per-question evidence recall of each LoCoMo question category "
    "(5 adversarial: questions the conversation does not answer); - = no question.",
)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cognoxium.app.cli", *args],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO,
    )


PINNED_MANIFESTS = {
    "bm25": "a0041f48b4e8ddfe870d90ca10a94b8f2ef9108b0f0c0655e12f42585dd730f4",
    "recency": "ec325389c3eaa1c0540c271591da0747fbc98b0c110f4a5309469418803d7a82",
}
"""sha256 of the manifests of ``--budgets 1024,2048`` (all 1,347 questions of locomo7).

The digest of their JSONL form (``--manifests jsonl``): one canonical
manifest per line, as :func:`_jsonl_bytes` rebuilds it from the Parquet form.
"""

PINNED_DIGESTS = Path(__file__).parent / "data"
"""``locomo_manifests_<method>.digests.json``: short digests of the pinned manifests.

Per request, per item and per field (:class:`tests.pins.ManifestDigests`):
when a run's bytes differ from the pin, the failure names the first differing
request, its items whose entries differ and the fields that differ (the
manifests, 550 MB per ranking, are too large to keep). A failing run writes
its own digests beside its outputs: to pin a change of behaviour made on
purpose, copy them here and set PINNED_MANIFESTS to the new sha256.
"""


def _assert_pinned(directory: Path, method: str) -> None:
    written = _jsonl_bytes(directory)
    if hashlib.sha256(written).hexdigest() == PINNED_MANIFESTS[method]:
        return
    pinned = PINNED_DIGESTS / f"locomo_manifests_{method}.digests.json"
    digests = ManifestDigests.from_json(pinned.read_text(encoding="utf-8"))
    update = directory / f"locomo_manifests_{method}.digests.json"
    digests.assert_match(written.decode("utf-8").splitlines(), what=method, update=update)
    raise AssertionError(f"{method}: the manifests match the digests, not the sha256 pin")


def _jsonl_bytes(directory: Path) -> bytes:
    """The manifests of an output directory (either form, every part in order) as JSONL bytes."""
    return "".join(m.to_json() + "\n" for m in read_manifests(directory)).encode("utf-8")


@needs_locomo
def test_locomo_end_to_end(tmp_path: Path) -> None:
    budgets = (1024, 2048)
    first = tmp_path / "first"
    run = _cli(
        "locomo",
        str(LOCOMO),
        "--out",
        str(first),
        "--budgets",
        ",".join(map(str, budgets)),
        "--compare",
        "bm25,recency",
        "--no-progress",
    )
    assert run.returncode == 0, run.stderr
    # The bm25 and recency manifests are pinned: a change of their bytes is a
    # change of behaviour, to be made on purpose (update the digests with it).
    for method in PINNED_MANIFESTS:
        _assert_pinned(first / "compare" / method, method)  # the default Parquet form
    assert "recall 1-4" in run.stdout
    assert all(caption in " ".join(run.stdout.split()) for caption in CAPTIONS)
    report = json.loads((first / "report.json").read_text(encoding="utf-8"))

    # Report figures equal a recomputation from the packs and the raw JSON.
    evidence = _independent_evidence(LOCOMO)
    # The requests carry the evidence and, under labels, the category of the raw JSON.
    written_lines = (first / "requests.jsonl").read_text(encoding="utf-8").splitlines()
    written = [json.loads(line) for line in written_lines]
    assert len(written) == len(evidence) * len(budgets)
    for request in written:
        wanted, category = evidence[request["id"].rsplit(":b", 1)[0]]
        assert set(request) == {"id", "budget", "query", "where", "as_of", "evidence", "labels"}
        assert (set(request["evidence"]), request["labels"]) == (wanted, {"category": category})
    packs = records(first)
    assert len(packs) == len(evidence) * len(budgets)
    for budget in budgets:
        recalls: dict[int, list[float]] = {}
        hits: list[float] = []
        excluded = 0
        for record in packs:
            if record["budget"] != budget:
                continue
            key, suffix = record["request_id"].rsplit(":b", 1)
            assert int(suffix) == budget
            wanted, category = evidence[key]
            if not wanted:
                excluded += 1
                continue
            found = len(wanted & set(record["ids"]))
            recalls.setdefault(category, []).append(found / len(wanted))
            if category != 5:
                hits.append(float(found == len(wanted)))
        answerable = [v for c in (1, 2, 3, 4) for v in recalls.get(c, [])]
        every = [v for values in recalls.values() for v in values]
        figures = report["budgets"][str(budget)]
        assert figures["excluded_no_evidence"] == excluded
        assert figures["recall_answerable"] == pytest.approx(sum(answerable) / len(answerable))
        assert figures["recall_all"] == pytest.approx(sum(every) / len(every))
        assert figures["hit_rate_answerable"] == pytest.approx(sum(hits) / len(hits))
        for category, values in recalls.items():
            assert figures["per_category"][str(category)]["recall"] == pytest.approx(
                sum(values) / len(values)
            )
    # The default ranking (the shipped learned ranker) against BM25, same run. The
    # shipped model was fitted on these conversations: these are training figures
    # (leave one conversation out, cognoxium locomo --loco gives 0.89 and 0.93).
    assert report["settings"]["rank"] == "learned"
    assert report["budgets"]["1024"]["recall_answerable"] >= 0.86
    assert report["budgets"]["2048"]["recall_answerable"] >= 0.92
    bm25 = report["compare"]["bm25"]["budgets"]
    for budget in budgets:
        assert report["budgets"][str(budget)]["recall_answerable"] > (
            bm25[str(budget)]["recall_answerable"] + 0.1
        )
        held_out = report["splits"]["held_out"]
        assert held_out["conversations"] == ["conv-41", "conv-42", "conv-43", "conv-44", "conv-47"]
        assert held_out["budgets"][str(budget)]["recall_answerable"] >= 0.78

    # Every manifest: token totals add up, and each in-scope turn appears exactly once.
    turns = _turns_by_conversation(LOCOMO)
    packs_by_id = {p["request_id"]: p for p in packs}
    lines = _jsonl_bytes(first).decode("utf-8").splitlines()
    assert len(lines) == len(packs)
    for line in lines:
        manifest = json.loads(line)
        pack = packs_by_id[manifest["label"]]
        entries = manifest["entries"]
        included = [e for e in entries if e["decision"] == "included"]
        assert manifest["used_tokens"] <= manifest["budget"] == pack["budget"]
        assert (
            manifest["used_tokens"]
            == pack["used_tokens"]
            == (sum(e["tokens"] for e in included) + manifest["pack_overhead_tokens"])
        )
        ids = [e["id"] for e in entries]
        assert len(ids) == len(set(ids))
        assert set(ids) == turns[manifest["label"].split(":q")[0]]
        assert [e["id"] for e in sorted(included, key=lambda e: e["pack_position"])] == pack["ids"]

    # A new process packing every 7th request again with `cognoxium pack` (its
    # default rank is the same learned ranker) writes byte-identical manifests:
    # the same inputs and settings give the same bytes, whatever the command.
    sample = tmp_path / "sample.jsonl"
    with sample.open("w", encoding="utf-8") as handle:
        handle.writelines(line + "\n" for line in written_lines[::7])
    second = tmp_path / "second"
    again = _cli("pack", str(first / "items.parquet"), str(sample), "--out", str(second))
    assert again.returncode == 0, again.stderr
    again_lines = _jsonl_bytes(second).decode("utf-8").splitlines()
    by_label = {json.loads(line)["label"]: line for line in lines}
    asked = [json.loads(line)["id"] for line in written_lines[::7]]
    assert sorted(again_lines) == sorted(by_label[label] for label in asked)
    # Do not leave the manifests in pytest's kept temp dirs.
    for directory in (first, second, first / "compare" / "bm25", first / "compare" / "recency"):
        for path in directory.glob("manifest*"):
            shutil.rmtree(path)
