"""Batch packing: reading requests, run_batch outputs, shared work across requests."""

from __future__ import annotations

import gc
import json
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import polars as pl
import pytest
from pydantic import ValidationError

from cognoxium.app import batch as batch_module
from cognoxium.app.batch import BatchStats, Request, read_requests, request_body, run_batch
from cognoxium.exceptions import (
    BudgetError,
    MessageError,
    PlanError,
    PredicateError,
    RecordError,
)
from cognoxium.formats import from_openai_messages
from cognoxium.frame.frame import CognitionFrame
from cognoxium.items.model import canonical_json
from cognoxium.items.records import records_to_frame
from cognoxium.packing import PackManifest
from cognoxium.packing.manifests import (
    PARQUET_SCHEMA,
    read_bodies,
    read_manifests,
    scan_manifests,
)
from cognoxium.packing.options import PackOptions
from cognoxium.retrieval.ranking import bm25_cache_clear, bm25_cache_info
from tests.app.parts import joined, layout, records
from tests.app.stores import chats_ending_long_and_short
from tests.pins import assert_same_outputs

AS_OF = datetime(2026, 1, 1, tzinfo=UTC)


def store() -> pl.DataFrame:
    def item(id_: str, role: str, text: str, day: int, topic: str, **kw: Any) -> dict[str, Any]:
        return {
            "id": id_,
            "role": role,
            "text": text,
            "created_at": f"2025-03-{day:02d}T10:00:00Z",
            "metadata": {"topic": topic, "conversation": "c1"},
            **kw,
        }

    return records_to_frame(
        [
            item(
                "policy",
                "system",
                "Answer politely and cite sources.",
                1,
                "policy",
                retention="required",
                trust="trusted",
            ),
            item("u1", "user", "My invoice shows a double charge for March.", 2, "billing"),
            item(
                "a1",
                "assistant",
                "I have refunded the duplicate charge on your invoice.",
                3,
                "billing",
            ),
            item("u2", "user", "The mobile app crashes when I open settings.", 4, "bugs"),
            item(
                "a2",
                "assistant",
                "Please update the app to version 5.1, which fixes the crash.",
                5,
                "bugs",
            ),
            item(
                "promo",
                "document",
                "Spring sale: half price on yearly plans.",
                6,
                "billing",
                expires_at="2025-04-01T00:00:00Z",
            ),
            item("long", "document", "refund " * 400, 7, "billing"),
        ]
    )


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


# ---------------------------------------------------------------------------
# read_requests


def test_read_requests_reads_evaluation_fields_and_skips_blank_lines(tmp_path: Path) -> None:
    path = write_lines(
        tmp_path / "r.jsonl",
        [
            '{"id": "r1", "budget": 64, "query": "refund", "evidence": ["u1", "a1"], '
            '"labels": {"category": 4, "tags": ["x", null], "note": {"by": "qa"}}}',
            "",
            '{"id": "r2", "budget": 0, "where": "role = \'user\'", '
            '"as_of": "2025-01-01T01:00:00+01:00"}',
        ],
    )
    first, second = read_requests(path)
    assert (first.id, first.budget, first.query, first.where, first.as_of) == (
        "r1",
        64,
        "refund",
        None,
        None,
    )
    assert first.evidence == ["u1", "a1"]
    assert first.labels == {"category": 4, "tags": ["x", None], "note": {"by": "qa"}}
    assert (second.evidence, second.labels) == ([], {})  # both default to empty
    assert second.as_of == datetime(2025, 1, 1, tzinfo=UTC)


def test_request_has_exactly_its_documented_fields() -> None:
    assert list(Request.model_fields) == [
        "id",
        "budget",
        "reserve",
        "overflow",
        "query",
        "where",
        "as_of",
        "evidence",
        "labels",
        "turns",
        "start_on",
        "gaps",
        "tool_errors",
        "target",
        "gap_note",
        "previous",
    ]
    # The how-to names them all, in its sentence and in its table of accepted values.
    page = (Path(__file__).parents[2] / "docs" / "how-to" / "batch.md").read_text()
    sentence = re.search(r"A request has exactly the fields(.*?): an unknown", page, re.S)
    assert sentence is not None
    assert re.findall(r"`(\w+)`", sentence.group(1)) == list(Request.model_fields)
    table = re.findall(r"^\| `(\w+)`(?:, `(\w+)`)? \|", page, re.M)
    assert [name for row in table for name in row if name] == list(Request.model_fields)
    # So does `cognoxium pack --help`.
    from typer.main import get_command

    from cognoxium.app.cli import app

    epilog = get_command(app).commands["pack"].epilog  # type: ignore[attr-defined]
    listed = re.search(r"JSON object per line: \{([^}]*)\}", epilog)
    assert listed is not None
    assert re.findall(r'"(\w+)"', listed.group(1)) == list(Request.model_fields)
    # Built in Python, an unknown field is refused just as in a file.
    with pytest.raises(ValidationError, match="qurey"):
        Request.model_validate({"id": "r", "budget": 1, "qurey": "refund"})
    with pytest.raises(ValidationError, match="category"):
        Request(id="r", budget=1, category=4)  # type: ignore[call-arg]
    # labels hold JSON only, so every request can be written back as a JSON line.
    with pytest.raises(ValidationError, match="labels"):
        Request(id="r", budget=1, labels={"when": object()})


def test_request_round_trips_through_json() -> None:
    request = Request(
        id="r",
        budget=8,
        query="q",
        where="role = 'user'",
        as_of=datetime(2025, 1, 1, tzinfo=UTC),
        evidence=["a", "b"],
        labels={"category": 2, "nested": {"ok": [1, 2.5, None, True]}},
    )
    dumped = json.loads(json.dumps(request.model_dump(mode="json")))
    assert Request.model_validate(dumped) == request


@pytest.mark.parametrize(
    ("bad_line", "field", "message"),
    [
        ('{"id": "r2", "budget": -5}', "budget", "greater than or equal to 0"),
        ('{"id": "r2", "budget": "64"}', "budget", "valid integer"),
        ('{"id": "r2", "budget": 1.5}', "budget", "valid integer"),
        ('{"id": "r2"}', "budget", "Field required"),
        ('{"budget": 5}', "id", "Field required"),
        ('{"id": "", "budget": 5}', "id", "must not be blank"),
        ('{"id": " \\t ", "budget": 5}', "id", "must not be blank"),
        ('{"id": "r\\u0000", "budget": 5}', "id", "control characters (found U+0000"),
        ('{"id": "\\ud800", "budget": 5}', "id", "lone surrogate U+D800"),
        ('{"id": "' + "r" * 1025 + '", "budget": 5}', "id", "at most 1024 characters"),
        ('{"id": "r2", "budget": true}', "budget", "valid integer"),
        ('{"id": "r2", "budget": 64.0}', "budget", "valid integer"),
        ('{"id": "r2", "budget": 9223372036854775808}', "budget", "less than or equal to"),
        ('{"id": "r2", "budget": 5, "query": "\\udc00"}', "query", "lone surrogate U+DC00"),
        ('{"id": "r2", "budget": 5, "where": "\\ud800 = 1"}', "where", "lone surrogate"),
        ('{"id": "r2", "budget": 5, "evidence": ["a\\nb"]}', "evidence.0", "control characters"),
        ('{"id": "r2", "budget": 5, "labels": {"x": NaN}}', "labels", "without NaN or infinity"),
        ('{"id": "r2", "budget": 5, "labels": {"x": "\\ud800"}}', "labels", "lone surrogate"),
        (
            '{"id": "r2", "budget": 5, "labels": ' + '{"a": ' * 65 + "1" + "}" * 66,
            "labels",
            "nested deeper than 64 levels",
        ),
        (
            '{"id": "r2", "budget": 5, "labels": ' + "[" * 10_000 + "]" * 10_000 + "}",
            "labels",
            "nested deeper than 64 levels",
        ),
        ('{"id": "r2", "budget": 5, "as_of": 1700000000}', "as_of", "ISO 8601"),
        ('{"id": "r2", "budget": 5, "as_of": "2025-01-01T00:00:00"}', "as_of", "timezone"),
        ('{"id": "r2", "budget": 5, "where": "  "}', "where", "must not be blank"),
        ('{"id": "r2", "budget": 5, "query": 7}', "query", "valid string"),
        ('{"id": "r1", "budget": 5}', "id", "duplicate request id 'r1' (first on line 1)"),
        ('{"id": "r2", "budget": 5, "id": "r3"}', "id", "the key 'id' appears twice"),
        ('["r2", 5]', None, "must be a JSON object"),
        ('{"id": "r2", "budget": 5', None, "invalid JSON"),
        (
            '{"id": "r2", "budget": 5, "qurey": "refund"}',
            "qurey",
            "unknown field 'qurey'; did you mean 'query'? a request has the fields id, budget, "
            "reserve, overflow, query, where, as_of, evidence, labels, turns, start_on, gaps, "
            "tool_errors, target, gap_note, previous (put other data under 'labels')",
        ),
        # The misspelt field is named, not the real one it leaves missing.
        ('{"id": "r2", "budjet": 5}', "budjet", "unknown field 'budjet'; did you mean 'budget'?"),
        ('{"id": "r2", "budget": 5, "category": 4}', "category", "put other data under 'labels'"),
        ('{"id": "r2", "budget": 5, "x": 1, "y": 2}', "x", "unknown fields 'x', 'y'"),
        ('{"id": "r2", "budget": 5, "evidence": "u1"}', "evidence", "valid list"),
        ('{"id": "r2", "budget": 5, "evidence": [""]}', "evidence.0", "must not be blank"),
        ('{"id": "r2", "budget": 5, "labels": ["x"]}', "labels", "valid dictionary"),
    ],
)
def test_read_requests_names_file_line_and_field(
    tmp_path: Path, bad_line: str, field: str | None, message: str
) -> None:
    path = write_lines(
        tmp_path / "r.jsonl", ['{"id": "r1", "budget": 64}', bad_line, '{"id": "r3", "budget": 64}']
    )
    with pytest.raises(RecordError) as info:
        read_requests(path)
    error = info.value
    assert (error.source, error.line, error.field) == (str(path), 2, field)
    assert message in str(error)
    assert str(error).startswith(f"{path}:2: ")


def test_read_requests_missing_file(tmp_path: Path) -> None:
    with pytest.raises(RecordError, match="cannot read the requests file"):
        read_requests(tmp_path / "absent.jsonl")


# ---------------------------------------------------------------------------
# run_batch


@pytest.mark.parametrize("form", ["parquet", "jsonl"])
def test_the_headers_name_the_target_when_not_openai(tmp_path: Path, form: str) -> None:
    requests = [
        Request(id="openai", budget=4000),
        Request(id="anthropic", budget=4000, target="anthropic"),
    ]
    run_batch(store(), requests, out_dir=tmp_path, manifests=form, options=PackOptions(as_of=AS_OF))
    lines_table = "manifests" if form == "jsonl" else "manifest_headers"
    raw = [json.loads(line) for line in joined(tmp_path, lines_table).decode().splitlines()]
    assert [line.get("target") for line in raw] == [None, "anthropic"]
    assert "target" not in raw[0]  # left out for the default, so those bytes do not change
    manifests = list(read_manifests(tmp_path))
    assert [m.target for m in manifests] == ["openai", "anthropic"]


@pytest.mark.parametrize("form", ["parquet", "jsonl"])
def test_run_batch_writes_one_pack_and_one_manifest_per_request(tmp_path: Path, form: str) -> None:
    requests = [
        Request(
            id="billing", budget=200, query="refund invoice", where="metadata.topic = 'billing'"
        ),
        Request(
            id="bugs", budget=200, query="crash", where="metadata.topic = 'bugs' OR role = 'system'"
        ),
        Request(id="all", budget=4000),
    ]
    stats = run_batch(
        store(), requests, out_dir=tmp_path, manifests=form, options=PackOptions(as_of=AS_OF)
    )  # type: ignore[arg-type]
    assert isinstance(stats, BatchStats)
    assert stats.requests == 3
    assert len(stats.latencies_ms) == 3
    assert 0 < stats.p50_ms <= stats.p95_ms
    assert stats.packs_per_s > 0

    packs = records(tmp_path)
    assert [p["request_id"] for p in packs] == ["billing", "bugs", "all"]
    assert all(set(p) == {"body", "budget", "ids", "request_id", "used_tokens"} for p in packs)
    assert packs[0]["ids"] == ["u1", "a1"]  # promo expired, "long" over budget
    assert packs[1]["ids"] == ["policy", "u2", "a2"]  # conversational order kept
    assert packs[2]["ids"] == ["policy", "u1", "a1", "u2", "a2", "long"]

    lines_table = "manifests" if form == "jsonl" else "manifest_headers"
    raw = joined(tmp_path, lines_table).decode("utf-8").splitlines()
    assert len(raw) == 3
    for line, pack in zip(raw, packs, strict=True):
        assert line == canonical_json(json.loads(line))  # canonical JSON, one per line
        if form == "parquet":  # the manifest without its entries, with the request id
            assert "entries" not in json.loads(line)
            assert json.loads(line)["request_id"] == pack["request_id"]
    manifests = [m.to_dict() for m in read_manifests(tmp_path)]
    assert len(manifests) == 3
    for manifest, pack in zip(manifests, packs, strict=True):
        assert manifest["label"] == pack["request_id"]
        assert manifest["used_tokens"] == pack["used_tokens"] <= pack["budget"]
        included = sorted(
            (e for e in manifest["entries"] if e["decision"] == "included"),
            key=lambda e: e["pack_position"],
        )
        assert [e["id"] for e in included] == pack["ids"]
    scope = {e["id"] for e in manifests[0]["entries"]}
    assert scope == {"u1", "a1", "promo", "long"}
    reasons = {e["id"]: e["reason"] for e in manifests[2]["entries"]}
    assert reasons["promo"] == "expired"


def test_run_batch_is_deterministic_with_a_fixed_as_of(tmp_path: Path) -> None:
    requests = [Request(id=f"r{b}", budget=b, query="refund crash") for b in (30, 60, 120, 500)]
    for form in ("parquet", "jsonl"):
        for run in ("a", "b"):
            out = tmp_path / f"{form}-{run}"
            run_batch(
                store(), requests, out_dir=out, manifests=form, options=PackOptions(as_of=AS_OF)
            )  # type: ignore[arg-type]
        first, second = tmp_path / f"{form}-a", tmp_path / f"{form}-b"
        names = layout(first.resolve())
        assert names == layout(second.resolve())
        assert len(names) == (3 if form == "parquet" else 2)  # one part of each table
        assert_same_outputs(second.resolve(), first.resolve(), names)  # Parquet: fixed settings


def test_parquet_manifests_rebuild_the_jsonl_manifests_exactly(tmp_path: Path) -> None:
    requests = [
        Request(id="billing", budget=60, query="refund", where="metadata.topic = 'billing'"),
        Request(id="none", budget=500, where="id = 'nothing'"),  # an empty scope: no entries
        Request(id="all", budget=4000, query="crash"),
    ]
    run_batch(
        store(),
        requests,
        out_dir=tmp_path / "p",
        manifests="parquet",
        options=PackOptions(as_of=AS_OF),
    )
    run_batch(
        store(),
        requests,
        out_dir=tmp_path / "j",
        manifests="jsonl",
        options=PackOptions(as_of=AS_OF),
    )
    from_parquet = read_manifests(tmp_path / "p")
    lines = joined(tmp_path / "j", "manifests").decode("utf-8").splitlines()
    assert [m.to_json() for m in from_parquet] == lines  # byte-identical manifests
    assert from_parquet == [PackManifest.from_json(line) for line in lines]
    assert from_parquet[1].totals.items == 0
    # The Parquet rows: the entry columns after request_id, requests in order.
    rows = pl.read_parquet(tmp_path / "p" / "manifests" / "part-00000.parquet")
    assert rows.schema == PARQUET_SCHEMA
    assert rows.get_column("request_id").unique(maintain_order=True).to_list() == [
        "billing",
        "all",
    ]
    # Both forms scan to the same rows.
    for form in ("p", "j"):
        assert scan_manifests(tmp_path / form).collect().equals(rows)


def test_request_as_of_wins_over_the_batch_as_of(tmp_path: Path) -> None:
    requests = [
        Request(
            id="old", budget=500, where="id = 'promo'", as_of=datetime(2025, 3, 15, tzinfo=UTC)
        ),
        Request(id="new", budget=500, where="id = 'promo'"),
    ]
    run_batch(store(), requests, out_dir=tmp_path, options=PackOptions(as_of=AS_OF))
    old, new = records(tmp_path)
    assert old["ids"] == ["promo"]
    assert new["ids"] == []
    manifests = read_manifests(tmp_path)
    assert manifests[0].as_of == datetime(2025, 3, 15, tzinfo=UTC)
    assert manifests[1].as_of == AS_OF


def test_rank_methods_change_the_selection(tmp_path: Path) -> None:
    # Budget for the policy and one short turn: the ranking decides which turn.
    request = Request(
        id="r", budget=30, query="crash settings app", where="role IN ('user', 'system')"
    )
    chosen = {}
    for method in ("bm25", "recency", "none"):
        run_batch(
            store(),
            [request],
            out_dir=tmp_path / method,
            rank=method,
            options=PackOptions(as_of=AS_OF),
        )
        chosen[method] = records(tmp_path / method)[0]["ids"]
    assert chosen["bm25"] == ["policy", "u2"]
    assert chosen["recency"] == ["policy", "u2"]  # u2 is the most recent user turn
    assert chosen["none"] == ["policy", "u2"]  # unranked: the conversation goes newest first
    manifest = read_manifests(tmp_path / "none")[0]
    assert manifest.to_polars().get_column("rank").is_null().all()
    with pytest.raises(PlanError, match="unknown rank method"):
        run_batch(store(), [request], out_dir=tmp_path / "x", rank="bogus")  # type: ignore[arg-type]


def test_scopes_are_checked_once_per_key_and_split_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[object] = []
    original = CognitionFrame.filter

    def counting(self: CognitionFrame, predicate: Any) -> CognitionFrame:
        calls.append(predicate)
        return original(self, predicate)

    monkeypatch.setattr(CognitionFrame, "filter", counting)
    billing = "metadata.topic = 'billing'"
    bugs = "metadata.topic = 'bugs'"
    requests = [
        Request(id=f"r{i}", budget=100, query=q, where=w)
        for i, (q, w) in enumerate(
            [
                ("refund", billing),
                ("crash", bugs),
                ("invoice", billing),
                ("settings", bugs),
                ("charge", billing),
            ]
        )
    ]
    bm25_cache_clear()
    run_batch(store(), requests, out_dir=tmp_path, options=PackOptions(as_of=AS_OF))
    # 'bugs' fixes the key 'billing' fixes, to other text: it is checked with the
    # first clause of its key and served by the split of the store, never filtered.
    assert calls == [billing]
    info = bm25_cache_info()
    # The default (learned) indexes two corpora per scope, the items and their
    # windows (no item has derived items), each built once: 2 scopes x 2, then hits.
    assert (info.misses, info.hits) == (4, 6)


def test_bad_where_names_the_request_line_and_field(tmp_path: Path) -> None:
    path = write_lines(
        tmp_path / "r.jsonl",
        [
            '{"id": "ok", "budget": 64}',
            '{"id": "bad", "budget": 64, "where": "no_such_column = 1"}',
        ],
    )
    with pytest.raises(RecordError) as info:
        run_batch(
            store(), read_requests(path), out_dir=tmp_path / "out", options=PackOptions(as_of=AS_OF)
        )
    assert (info.value.source, info.value.line, info.value.field) == (str(path), 2, "where")
    assert "request 'bad'" in str(info.value)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("where", "why"),
    [
        (
            "id IN (SELECT column_1 FROM read_csv('{path}'))",
            "a subquery is not allowed (it calls the table function read_csv, which reads files)",
        ),
        (
            "id IN (SELECT * FROM read_ndjson('{path}'))",
            "a subquery is not allowed (it calls the table function read_ndjson, which reads "
            "files)",
        ),
        ("read_parquet('{path}') IS NULL", "the table function read_parquet is not allowed"),
        ("role = 'user' -- AND id = '{path}'", "a comment is not allowed"),
    ],
)
def test_where_that_reads_a_file_is_refused_naming_the_request_line_and_field(
    tmp_path: Path, where: str, why: str
) -> None:
    canary = tmp_path / "secret.csv"
    canary.write_text("canary-51d2 secret line\n")
    request = {"id": "bad", "budget": 64, "where": where.format(path=canary)}
    path = write_lines(tmp_path / "r.jsonl", ['{"id": "ok", "budget": 64}', json.dumps(request)])
    with pytest.raises(RecordError) as info:
        run_batch(
            store(), read_requests(path), out_dir=tmp_path / "out", options=PackOptions(as_of=AS_OF)
        )
    error = info.value
    assert (error.source, error.line, error.field) == (str(path), 2, "where")
    assert str(error).startswith(
        f"{path}:2: field where: request 'bad': invalid where clause: "
        f"predicate {request['where']!r}, at character "
    )
    assert why in str(error)
    assert "canary-51d2" not in str(error)
    assert isinstance(error.__cause__, PredicateError)
    assert not (tmp_path / "out").exists()


def test_where_with_a_metadata_key_no_item_has_names_the_request_line_and_field(
    tmp_path: Path,
) -> None:
    path = write_lines(
        tmp_path / "r.jsonl",
        [
            '{"id": "ok", "budget": 64, "where": "metadata.topic = \'billing\'"}',
            '{"id": "typo", "budget": 64, "where": "metadata.topik = \'billing\'"}',
        ],
    )
    with pytest.raises(RecordError) as info:
        run_batch(
            store(), read_requests(path), out_dir=tmp_path / "out", options=PackOptions(as_of=AS_OF)
        )
    error = info.value
    assert (error.source, error.line, error.field) == (str(path), 2, "where")
    assert str(error) == (
        f"{path}:2: field where: request 'typo': invalid where clause "
        "\"metadata.topik = 'billing'\": no item has the metadata key 'topik' "
        "(in SQL predicate \"metadata.topik = 'billing'\"), so it would read as null for "
        "every row; did you mean 'topic'? the metadata keys are ['conversation', 'topic']"
    )
    assert not (tmp_path / "out").exists()


def test_where_with_a_metadata_key_some_items_have(tmp_path: Path) -> None:
    extra = records_to_frame(
        [
            {
                "id": "urgent",
                "role": "user",
                "text": "Please call me back today.",
                "created_at": "2025-03-08T10:00:00Z",
                "metadata": {"topic": "bugs", "conversation": "c1", "urgent": True},
            }
        ]
    )
    requests = [
        Request(id="yes", budget=500, where="metadata.urgent"),
        Request(id="null", budget=500, where="metadata.urgent IS NULL AND role = 'user'"),
    ]
    run_batch(
        pl.concat([store(), extra]), requests, out_dir=tmp_path, options=PackOptions(as_of=AS_OF)
    )
    yes, null = records(tmp_path)
    assert yes["ids"] == ["urgent"]
    assert null["ids"] == ["u1", "u2"]  # the key reads as null where it is absent


def test_infeasible_budget_names_the_request_and_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "out"
    run_batch(
        store(), [Request(id="previous", budget=500)], out_dir=out, options=PackOptions(as_of=AS_OF)
    )
    before = {name: (out / name).read_bytes() for name in layout(out.resolve())}
    assert sorted(before) == [
        "manifest_headers/part-00000.jsonl",
        "manifests/part-00000.parquet",
        "packs/part-00000.jsonl",
    ]
    committed = out.resolve()
    requests = [Request(id="fine", budget=500), Request(id="tight", budget=5)]
    with pytest.raises(BudgetError, match="request 'tight'") as info:
        run_batch(store(), requests, out_dir=out, options=PackOptions(as_of=AS_OF))
    assert "policy" in info.value.costs
    assert {name: (out / name).read_bytes() for name in before} == before  # untouched
    # No temporary files left: the link and its one version (the lock file is removed).
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", committed.name]


def test_duplicate_request_ids_are_rejected(tmp_path: Path) -> None:
    requests = [Request(id="same", budget=100), Request(id="same", budget=200)]
    with pytest.raises(RecordError, match="duplicate request id") as info:
        run_batch(store(), requests, out_dir=tmp_path, options=PackOptions(as_of=AS_OF))
    assert info.value.field == "id"
    assert not (tmp_path / "packs").exists()


def test_empty_batch_writes_empty_files(tmp_path: Path) -> None:
    stats = run_batch(store(), [], out_dir=tmp_path, options=PackOptions(as_of=AS_OF))
    assert (stats.requests, stats.p50_ms, stats.p95_ms) == (0, 0.0, 0.0)
    # No task, yet part 0 of every table: the layout is the same for every batch.
    assert layout(tmp_path.resolve()) == [
        "manifest_headers/part-00000.jsonl",
        "manifests/part-00000.parquet",
        "packs/part-00000.jsonl",
    ]
    assert (tmp_path / "packs" / "part-00000.jsonl").read_text() == ""
    assert (tmp_path / "manifest_headers" / "part-00000.jsonl").read_text() == ""
    empty = pl.read_parquet(tmp_path / "manifests" / "part-00000.parquet")  # no rows
    assert (empty.height, empty.schema) == (0, PARQUET_SCHEMA)
    assert read_manifests(tmp_path) == []
    # Requests whose scopes are empty: headers, and no rows.
    nothing = [Request(id=f"none{i}", budget=10, where="id = 'nothing'") for i in range(2)]
    run_batch(store(), nothing, out_dir=tmp_path / "none", options=PackOptions(as_of=AS_OF))
    assert [m.totals.items for m in read_manifests(tmp_path / "none")] == [0, 0]
    assert scan_manifests(tmp_path / "none").collect().height == 0
    run_batch(
        store(), [], out_dir=tmp_path / "j", manifests="jsonl", options=PackOptions(as_of=AS_OF)
    )
    assert layout(tmp_path / "j") == ["manifests/part-00000.jsonl", "packs/part-00000.jsonl"]
    assert joined(tmp_path / "j", "manifests") == b""
    with pytest.raises(PlanError, match="unknown manifest form 'csv'"):
        run_batch(store(), [], out_dir=tmp_path / "x", manifests="csv")  # type: ignore[arg-type]


def test_an_as_of_outside_the_years_1_to_9999_utc_is_a_validation_error() -> None:
    with pytest.raises(ValidationError, match="must fall in the years 1 to 9999 UTC"):
        Request.model_validate({"id": "r", "budget": 8, "as_of": "0001-01-01T00:30:00+01:00"})


# ---------------------------------------------------------------------------
# reply reserve and overflow


def test_request_reserve_must_fit_in_its_budget(tmp_path: Path) -> None:
    path = write_lines(
        tmp_path / "r.jsonl",
        ['{"id": "r1", "budget": 64, "reserve": 16}', '{"id": "r2", "budget": 64, "reserve": 65}'],
    )
    with pytest.raises(RecordError, match="must not exceed the budget") as info:
        read_requests(path)
    assert (info.value.line, info.value.field) == (2, "reserve")
    with pytest.raises(ValidationError, match="overflow"):
        Request.model_validate({"id": "r", "budget": 64, "overflow": "drop"})


def test_run_batch_packs_under_budget_less_reserve_and_records_it(tmp_path: Path) -> None:
    where = "role = 'system' OR metadata.topic = 'bugs'"
    requests = [
        Request(id="own", budget=60, reserve=20, where=where),
        Request(id="batch", budget=60, where=where),
        Request(id="none", budget=60, reserve=0, where=where),
    ]
    run_batch(
        store(),
        requests,
        out_dir=tmp_path,
        rank="none",
        manifests="jsonl",
        options=PackOptions(as_of=AS_OF, reserve=10),
    )
    manifests = {m["label"]: m for m in records(tmp_path, "manifests")}
    # The request's own reserve wins; the batch's applies to requests without one.
    assert manifests["own"]["reserve_tokens"] == 20
    assert manifests["batch"]["reserve_tokens"] == 10
    assert "reserve_tokens" not in manifests["none"]
    for label, manifest in manifests.items():
        reserve = manifest.get("reserve_tokens", 0)
        assert manifest["used_tokens"] + reserve + manifest["remaining_tokens"] == 60, label
    # policy (10 tokens) + u2 (13) + a2 (20) + priming (3) = 46 fits 60 - 10; under 60 - 20
    # the newest, a2, fits and then u2 no longer does, and a pack with no user message
    # drops a2 to let u2 in: 10 + 13 + 3 = 26.
    used = {label: m["used_tokens"] for label, m in manifests.items()}
    assert used == {"own": 26, "batch": 46, "none": 46}


def test_batch_reserve_above_a_request_budget_names_the_request(tmp_path: Path) -> None:
    with pytest.raises(RecordError, match="reserve 100") as info:
        run_batch(
            store(),
            [Request(id="small", budget=50)],
            out_dir=tmp_path,
            options=PackOptions(reserve=100),
        )
    assert info.value.field == "reserve"


def test_batch_overflow_truncate_cuts_a_required_truncatable_item(tmp_path: Path) -> None:
    items = store().with_columns(
        pl.when(pl.col("id") == "long")
        .then(pl.lit('{"truncate":{"min_tokens":5}}'))
        .otherwise(pl.col("metadata"))
        .alias("metadata"),
        pl.when(pl.col("id") == "long")
        .then(pl.lit("required"))
        .otherwise(pl.col("retention").cast(pl.String))
        .cast(pl.Enum(["required", "preferred", "optional"]))
        .alias("retention"),
    )
    requests = [Request(id="r", budget=100, where="id = 'long'", overflow="truncate")]
    run_batch(
        items,
        requests,
        out_dir=tmp_path / "a",
        rank="none",
        manifests="jsonl",
        options=PackOptions(as_of=AS_OF),
    )
    (manifest,) = records(tmp_path / "a", "manifests")
    # 100 - 3 priming - 4 framing = 93 tokens of the 400 of "refund " * 400.
    assert manifest["truncations"][0]["kept_tokens"] == 93
    assert manifest["used_tokens"] == 100
    with pytest.raises(BudgetError, match="request 'r'"):
        run_batch(
            items,
            [Request(id="r", budget=100, where="id = 'long'")],
            out_dir=tmp_path / "b",
            rank="none",
            options=PackOptions(as_of=AS_OF),
        )


def test_requests_pack_whole_turns_and_start_on_a_user_message(tmp_path: Path) -> None:
    # The scope leaves out u1, so its answer a1 would open the conversation.
    where = "id <> 'u1' AND role <> 'document'"
    requests = [
        Request(id="plain", budget=500, where=where),
        Request(id="user-first", budget=500, where=where, turns=True, start_on="user"),
    ]
    run_batch(
        store(),
        requests,
        out_dir=tmp_path,
        rank="none",
        manifests="jsonl",
        options=PackOptions(as_of=AS_OF),
    )
    plain, user_first = records(tmp_path)
    assert plain["ids"] == ["policy", "a1", "u2", "a2"]
    assert user_first["ids"] == ["policy", "u2", "a2"]
    manifest = records(tmp_path, "manifests")[1]
    reasons = {e["id"]: e["reason"] for e in manifest["entries"]}
    assert reasons == {
        "policy": "required",
        "a1": "before_first_user",
        "u2": "selected",
        "a2": "selected",
    }
    # The same pack as the Python API gives.
    direct = (
        CognitionFrame(store())
        .filter(where)
        .pack(500, as_of=AS_OF, label="user-first", turns=True, start_on="user")
    )
    assert direct.manifest.to_json() == canonical_json(manifest)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("turns", "yes"),
        ("turns", 1),
        ("start_on", "human"),
        ("gaps", "skip"),
        ("gaps", None),
        ("tool_errors", "drop"),
        ("target", "claude"),
        ("gap_note", "({count} omitted)"),
        ("gap_note", " "),
        ("gap_note", 7),
    ],
)
def test_conversation_options_of_a_request_are_checked(field: str, value: Any) -> None:
    with pytest.raises(ValidationError, match=field):
        Request.model_validate({"id": "r", "budget": 1, field: value})


def test_batch_conversation_options_apply_to_requests_without_their_own(tmp_path: Path) -> None:
    where = "id <> 'u1' AND role <> 'document'"
    requests = [
        Request(id="batch", budget=500, where=where),
        Request(id="own", budget=500, where=where, start_on=None, turns=False),
    ]
    run_batch(
        store(),
        requests,
        out_dir=tmp_path,
        rank="none",
        options=PackOptions(as_of=AS_OF, turns=True, start_on="user"),
    )
    batch, own = records(tmp_path)
    assert batch["ids"] == ["policy", "u2", "a2"]  # the batch's start_on="user" drops a1
    assert own["ids"] == ["policy", "a1", "u2", "a2"]  # the request's own options win


def _chat_store() -> pl.DataFrame:
    """A chat with a tool exchange, a long reply and a pending call at its end."""

    def asks(call: str, city: str) -> dict[str, Any]:
        arguments = json.dumps({"city": city})
        function = {"name": "get_weather", "arguments": arguments}
        return {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": call, "type": "function", "function": function}],
        }

    history = [
        {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "Weather in Paris?"},
        asks("c1", "Paris"),
        {"role": "tool", "tool_call_id": "c1", "content": "18 C"},
        {"role": "assistant", "content": "It is 18 C in Paris. " + "More on Paris. " * 40},
        {"role": "user", "content": "And Rome?"},
        {"role": "assistant", "content": "22 C in Rome."},
        {"role": "user", "content": "Thanks. And Oslo?"},
        asks("c2", "Oslo"),
    ]
    return from_openai_messages(history, conversation_id="c").collect()


def test_each_request_packs_with_its_own_target_tool_errors_and_gap_note(tmp_path: Path) -> None:
    note = "({n} earlier messages omitted)"
    own = {"target": "anthropic", "gaps": "fill", "gap_note": note}
    requests = [Request(id="plain", budget=90), Request(id="noted", budget=90, **own)]
    run_batch(
        _chat_store(), requests, out_dir=tmp_path, rank="none", manifests="jsonl",
        options=PackOptions(as_of=AS_OF),
    )  # fmt: skip
    plain, noted = records(tmp_path, "manifests")
    assert "gap_records" not in plain  # gaps="stop": an unbroken tail, no hole, no note
    (hole,) = noted["gap_records"]
    assert (hole["items"], hole["note_tokens"] > 0) == (1, True)  # the long reply, noted
    assert {e["id"]: e["reason"] for e in noted["entries"]}["c:8"] == "tool_call_unanswered"
    # The same packs as the Python API gives with the same options.
    frame = CognitionFrame(_chat_store())
    for manifest, given in [(plain, {}), (noted, own)]:
        direct = frame.pack(90, as_of=AS_OF, label=manifest["label"], **given)
        assert direct.manifest.to_json() == canonical_json(manifest)
    back = read_requests_back(requests, tmp_path)
    assert [r.to_record() for r in back] == [r.to_record() for r in requests]
    assert "target" not in back[0].to_record()  # options left out unless given


def test_requests_for_anthropic_and_openai_over_one_store_each_keep_their_target(
    tmp_path: Path,
) -> None:
    """A call whose arguments are cut off: sent to OpenAI, left out of the Anthropic body."""
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1'}}
    history = [
        {"role": "user", "content": "Go."},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "done"},
        {"role": "user", "content": "Thanks."},
    ]
    chat = from_openai_messages(history, conversation_id="c").collect()
    requests = [
        Request(id="gpt", budget=200),
        Request(id="claude", budget=200, target="anthropic"),
        Request(id="gpt-again", budget=200),
    ]
    run_batch(chat, requests, out_dir=tmp_path, rank="none", options=PackOptions(as_of=AS_OF))
    gpt, claude, again = records(tmp_path)
    assert gpt["ids"] == again["ids"] == ["c:0", "c:1", "c:2", "c:3"]
    assert gpt["body"]["messages"][1]["tool_calls"] == [call]
    assert claude["ids"] == ["c:0", "c:3"]
    assert claude["body"] == {
        "messages": [
            {"role": "user", "content": [
                {"type": "text", "text": "Go."}, {"type": "text", "text": "Thanks."}]},
        ]
    }  # fmt: skip


def test_each_pack_line_holds_the_body_its_pack_sends_cuts_notes_and_all(tmp_path: Path) -> None:
    long_reply = pl.col("text").str.starts_with("It is 18 C")
    truncatable = pl.lit('{"conversation":"c","truncate":{"min_tokens":5}}')
    cut = _chat_store().with_columns(
        pl.when(long_reply).then(truncatable).otherwise(pl.col("metadata")).alias("metadata")
    )
    note = {"gaps": "fill", "gap_note": "({n} earlier messages omitted)"}
    escaped = records_to_frame(  # read back as packed: backslashes, a tab, a control character
        [{"id": "path", "role": "user", "text": "Open C:\\new\\table.txt\tnow\x01 \\d+\\s"}]
    )
    batches = {
        "escaped": (escaped, [Request(id="escaped", budget=100)]),
        "cut": (cut, [Request(id="cut", budget=120)]),
        "noted": (
            _chat_store(),
            [
                Request(id="openai", budget=90, **note),
                Request(id="anthropic", budget=90, target="anthropic", **note),
                Request(id="cached", budget=90, target="anthropic", previous="anthropic"),
            ],
        ),
    }
    options = PackOptions(as_of=AS_OF, cache_model="anthropic")
    bodies: dict[str, Any] = {}
    for name, (items, requests) in batches.items():
        run_batch(items, requests, out_dir=tmp_path / name, rank="none", options=options)
        frame, packs = CognitionFrame(items), {}
        for request, line in zip(requests, records(tmp_path / name), strict=True):
            own = request.over(options)
            earlier = packs.get(request.previous) if request.previous else None
            packs[request.id] = frame.pack(request.budget, options=own, previous=earlier)
            assert line["body"] == request_body(packs[request.id], own), request.id
            bodies[request.id] = line["body"]
        assert dict(read_bodies(tmp_path / name)) == {r.id: bodies[r.id] for r in requests}
    assert bodies["escaped"]["messages"][0]["content"] == escaped["text"].item()
    (sent,) = [m["content"] for m in bodies["cut"]["messages"] if "Paris. More" in m["content"]]
    whole = cut.filter(long_reply)["text"].item()
    assert whole.startswith(sent)  # the text the pack cut
    assert len(sent) < len(whole)
    assert {"role": "system", "content": "(1 earlier messages omitted)"} in (
        bodies["openai"]["messages"]
    )
    assert bodies["anthropic"]["system"] == "Answer briefly."
    assert "(1 earlier messages omitted)" in json.dumps(bodies["anthropic"])
    assert "cache_control" in json.dumps(bodies["cached"])  # the cache model's breakpoints
    items, requests = batches["noted"]
    run_batch(items, requests, out_dir=tmp_path / "ids", rank="none", options=options, bodies=False)
    without = records(tmp_path / "ids")
    assert [set(line) for line in without] == [{"budget", "ids", "request_id", "used_tokens"}] * 3
    assert [{**line, "body": bodies[line["request_id"]]} for line in without] == records(
        tmp_path / "noted"
    )


def test_the_stats_list_the_requests_that_left_out_their_newest_user_message(
    tmp_path: Path,
) -> None:
    items, requests = chats_ending_long_and_short()
    stats = run_batch(items, requests, out_dir=tmp_path, options=PackOptions(as_of=AS_OF))
    assert stats.newest_user_left_out == ("long@60",)
    assert stats.to_dict()["newest_user_left_out"] == 1
    (entry,) = [
        e
        for m in read_manifests(tmp_path)
        if m.label == "long@60"
        for e in m.entries
        if e.id == "long:3"
    ]
    assert entry.reason == "over_budget"  # the manifest tells which message and why


def test_a_call_anthropic_cannot_take_is_left_out_of_its_request_alone(
    tmp_path: Path,
) -> None:
    """The batch writes every request: only the Anthropic body leaves the call out."""
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "[1, 2]"}}
    chat = [
        {"role": "user", "content": "Sum?"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "3"},
    ]
    items = from_openai_messages(chat, conversation_id="c").collect()
    requests = [
        Request(id="openai", budget=200),
        Request(id="claude", budget=200, target="anthropic"),
    ]
    run_batch(items, requests, out_dir=tmp_path / "out", options=PackOptions(as_of=AS_OF))
    openai, claude = records(tmp_path / "out")
    assert openai["body"]["messages"][1]["tool_calls"] == [call]  # Chat Completions takes it
    assert claude["ids"] == ["c:0"]
    assert claude["body"] == {"messages": [{"role": "user", "content": [
        {"type": "text", "text": "Sum?"}]}]}  # fmt: skip
    strict = [Request(id="claude", budget=200, target="anthropic", tool_errors="error")]
    with pytest.raises(MessageError, match=r"rule tool_call_arguments_invalid"):
        run_batch(items, strict, out_dir=tmp_path / "strict", options=PackOptions(as_of=AS_OF))
    assert not (tmp_path / "strict").exists()


def read_requests_back(requests: list[Request], tmp_path: Path) -> list[Request]:
    """The requests written as JSON lines and read again."""
    path = tmp_path / "requests.jsonl"
    path.write_text("".join(json.dumps(r.to_record()) + "\n" for r in requests))
    return read_requests(path)


def test_a_request_own_tool_errors_overrides_the_batch_and_errors_name_it(tmp_path: Path) -> None:
    batch = PackOptions(as_of=AS_OF, tool_errors="error")
    run_batch(
        _chat_store(), [Request(id="mends", budget=10_000, tool_errors="repair")],
        out_dir=tmp_path / "a", rank="none", options=batch,
    )  # fmt: skip
    (packed,) = records(tmp_path / "a")
    assert "c:8" not in packed["ids"]  # the pending call, left out by the request's "repair"
    with pytest.raises(MessageError, match=r"request 'strict': .*rule tool_call_unanswered") as e:
        run_batch(
            _chat_store(), [Request(id="strict", budget=10_000)],
            out_dir=tmp_path / "b", rank="none", options=batch,
        )  # fmt: skip
    assert (e.value.rule, e.value.params["request_id"], e.value.params["id"]) == (
        "tool_call_unanswered",
        "strict",
        "c:8",
    )
    assert not (tmp_path / "b").exists()  # nothing committed


def test_a_manifest_write_error_fails_the_batch_and_commits_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    run_batch(
        store(), [Request(id="previous", budget=500)], out_dir=out, options=PackOptions(as_of=AS_OF)
    )
    before = {name: (out / name).read_bytes() for name in layout(out.resolve())}

    def full_disk(writer: Any, frames: list[pl.DataFrame]) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("cognoxium.packing.manifests._write_row_group", full_disk)
    requests = [Request(id=f"r{b}", budget=b, query="refund") for b in (60, 500)]
    with pytest.raises(OSError, match="No space left on device"):
        run_batch(store(), requests, out_dir=out, options=PackOptions(as_of=AS_OF))
    assert {name: (out / name).read_bytes() for name in before} == before  # untouched


def test_a_batch_freezes_the_older_heap_while_it_runs_and_leaves_it_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Objects made before the batch are out of its garbage collections; after it,
    # and after a failed one, the process's collector is as it was.
    seen: list[int] = []
    packing = batch_module.pack_scope

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(gc.get_freeze_count())
        return packing(*args, **kwargs)

    monkeypatch.setattr(batch_module, "pack_scope", spy)
    requests = [Request(id="r1", budget=60, query="refund")]
    run_batch(
        store(), requests, out_dir=tmp_path / "a", rank="bm25", options=PackOptions(as_of=AS_OF)
    )
    assert len(seen) == 1
    assert seen[0] > 0
    assert gc.get_freeze_count() == 0
    with pytest.raises(BudgetError):
        run_batch(
            store(),
            [Request(id="r2", budget=5)],
            out_dir=tmp_path / "b",
            options=PackOptions(as_of=AS_OF),
        )
    assert gc.get_freeze_count() == 0
    gc.freeze()  # a process that froze its own objects keeps them frozen
    calls: list[str] = []
    spy_gc = SimpleNamespace(
        get_freeze_count=gc.get_freeze_count,
        freeze=lambda: calls.append("freeze"),
        unfreeze=lambda: calls.append("unfreeze"),
    )
    monkeypatch.setattr(batch_module, "gc", spy_gc)
    try:
        run_batch(
            store(), requests, out_dir=tmp_path / "c", rank="bm25", options=PackOptions(as_of=AS_OF)
        )
        # (a count of frozen objects can drop while it runs: a frozen object may be freed)
        assert calls == []
    finally:
        gc.unfreeze()


# ---------------------------------------------------------------------------
# parts: each task writes its own, cut the same whatever the number of workers


def conversations(count: int = 6) -> tuple[pl.DataFrame, list[Request]]:
    """``count`` conversations of the store's 7 items, and requests over them, interleaved."""
    copies = [
        store().with_columns(
            pl.col("id") + f"-c{c}",
            pl.col("metadata").str.replace('"c1"', f'"c{c}"', literal=True),
        )
        for c in range(count)
    ]
    requests = [
        Request(
            id=f"r{k}",
            budget=(60, 500)[k % 2],
            query=("refund invoice", "crash settings")[k % 2],
            where=f"metadata.conversation = 'c{(k * 5) % count}'",
        )
        for k in range(3 * count)
    ]
    return pl.concat(copies), [*requests, Request(id="all", budget=300, query="refund")]


@pytest.mark.parametrize("form", ["parquet", "jsonl"])
def test_parts_are_the_same_whatever_the_number_of_workers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, form: str
) -> None:
    items, requests = conversations()
    monkeypatch.setattr("cognoxium.app._workers.TASK_ITEMS", 14)  # two conversations a task
    runs = {}
    for workers in (1, 2):
        out = tmp_path / f"w{workers}"
        runs[workers] = run_batch(
            items,
            requests,
            out_dir=out,
            rank="bm25",
            manifests=form,
            workers=workers,
            options=PackOptions(as_of=AS_OF),
        )
    first, second = (tmp_path / "w1").resolve(), (tmp_path / "w2").resolve()
    # Six conversations in three tasks, then the whole store in a fourth.
    assert layout(first) == layout(second)
    assert [name for name in layout(first) if name.startswith("packs/")] == [
        f"packs/part-0000{k}.jsonl" for k in range(4)
    ]
    for name in layout(first):
        assert (first / name).read_bytes() == (second / name).read_bytes(), name
    assert [r["request_id"] for r in records(first)][-1] == "all"
    assert len(runs[1].latencies_ms) == len(runs[2].latencies_ms) == len(requests)


def test_the_parts_in_order_are_the_one_file_of_a_single_task(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pyarrow.parquet as pq

    from cognoxium.packing.manifests import PARQUET_SETTINGS

    items, requests = conversations()
    for form in ("parquet", "jsonl"):
        run_batch(items,
                  requests,
                  out_dir=tmp_path / f"one-{form}",
                  rank="bm25",
                  manifests=form,
                  options=PackOptions(as_of=AS_OF))  # fmt: skip
    monkeypatch.setattr("cognoxium.app._workers.TASK_ITEMS", 14)
    for form in ("parquet", "jsonl"):
        run_batch(items,
                  requests,
                  out_dir=tmp_path / f"many-{form}",
                  rank="bm25",
                  manifests=form,
                  options=PackOptions(as_of=AS_OF))  # fmt: skip
    one, many = tmp_path / "one-jsonl", tmp_path / "many-jsonl"
    assert len(layout(one.resolve())) == 2
    assert len(layout(many.resolve())) == 8
    for table in ("packs", "manifests"):  # the text parts concatenate to the one file
        assert joined(many, table) == joined(one, table)
    one, many = tmp_path / "one-parquet", tmp_path / "many-parquet"
    assert joined(many, "manifest_headers") == joined(one, "manifest_headers")
    # The Parquet parts' rows, written as one file as a single task writes it (one
    # row group below 131,072 entries), give that file byte for byte.
    assert len(list((many / "manifests").iterdir())) == 4
    rows = scan_manifests(many).collect().to_arrow().combine_chunks()
    rewritten = tmp_path / "rewritten.parquet"
    schema = pl.DataFrame(schema=PARQUET_SCHEMA).to_arrow().schema
    with pq.ParquetWriter(rewritten, schema, **PARQUET_SETTINGS) as writer:
        writer.write_table(rows, row_group_size=rows.num_rows)
    assert rewritten.read_bytes() == (one / "manifests" / "part-00000.parquet").read_bytes()


def test_a_task_packed_again_replaces_its_parts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A task run twice (its process died after writing part of its files) writes
    # the same parts again: replaced, never doubled; a dead attempt's temporary
    # files are removed before the commit.
    from cognoxium.app import _workers

    items, requests = conversations()
    monkeypatch.setattr(_workers, "TASK_ITEMS", 14)
    run_batch(
        items, requests, out_dir=tmp_path / "once", rank="bm25", options=PackOptions(as_of=AS_OF)
    )
    packing = _workers.pack_task

    def twice(task: Any, settings: Any, form: Any, folder: Path, done: Any = None) -> Any:
        stale = folder / "manifests" / f".part-{task.index:05d}.parquet.0123456789abcdef.tmp"
        stale.parent.mkdir(parents=True, exist_ok=True)
        stale.write_bytes(b"half a part")
        packing(task, settings, form, folder)
        return packing(task, settings, form, folder, done)

    monkeypatch.setattr(_workers, "pack_task", twice)
    run_batch(
        items, requests, out_dir=tmp_path / "twice", rank="bm25", options=PackOptions(as_of=AS_OF)
    )
    once, again = (tmp_path / "once").resolve(), (tmp_path / "twice").resolve()
    assert layout(again) == layout(once)
    assert all((once / n).read_bytes() == (again / n).read_bytes() for n in layout(once))


SESSION_START = datetime(2026, 1, 1, tzinfo=UTC)


def _session(name: str, turns: int) -> pl.DataFrame:
    """A chat of ``turns`` questions and answers, message ``i`` created at µs ``i``."""
    history = [{"role": "system", "content": "You answer questions about the project. " * 20}]
    for turn in range(turns):
        history.append({"role": "user", "content": f"Question {turn} of {name}: " + "why " * 100})
        history.append({"role": "assistant", "content": f"Answer {turn}: " + "because " * 200})
    return from_openai_messages(history, conversation_id=name, start=SESSION_START).collect()


def _turn_requests(name: str, turns: int) -> list[Request]:
    """One request per user turn of session ``name``, each continuing the one before."""
    return [
        Request(
            id=f"{name}{turn}",
            budget=2_000,
            where=f"id LIKE '{name}:%'",
            as_of=SESSION_START + timedelta(microseconds=2 * turn + 1),
            **({"previous": f"{name}{turn - 1}"} if turn else {}),
        )
        for turn in range(turns)
    ]


def test_requests_with_previous_replay_sessions_as_continuing_packs(tmp_path: Path) -> None:
    store = pl.concat([_session("a", 12), _session("b", 12)])
    a, b = _turn_requests("a", 12), _turn_requests("b", 12)
    interleaved = [r for pair in zip(a, b, strict=True) for r in pair]
    billed = PackOptions(as_of=AS_OF, cache_model="openai:gpt-5")
    run_batch(store, interleaved, out_dir=tmp_path, rank="none", manifests="jsonl", options=billed)
    manifests = {m["label"]: m for m in records(tmp_path, "manifests")}
    # Each manifest is the one the Python API gives, continuing the pack before it.
    for name, requests in [("a", a), ("b", b)]:
        frame = CognitionFrame(store.filter(pl.col("id").str.starts_with(f"{name}:")))
        previous = None
        for request in requests:
            previous = frame.pack(
                2_000, as_of=request.as_of, label=request.id, previous=previous,
                cache_model="openai:gpt-5",
            )  # fmt: skip
            assert previous.manifest.to_json() == canonical_json(manifests[request.id])
    # The first pack continues none; the others keep a cached prefix, evicting once full.
    assert "cache" not in manifests["a0"]
    caches = [manifests[f"a{turn}"]["cache"] for turn in range(1, 12)]
    assert all(c["prefix_items"] >= 1 for c in caches)
    # OpenAI reads a cached prefix of 1,024 tokens or more.
    assert [c["cached_tokens"] > 0 for c in caches] == [c["prefix_tokens"] >= 1024 for c in caches]
    assert sum(c["cached_tokens"] > 0 for c in caches) >= 4
    assert sum(c["eviction_steps"] > 0 for c in caches) >= 2
    assert caches[0]["continues"] == PackManifest.from_json(json.dumps(manifests["a0"])).digest
    back = read_requests_back(interleaved, tmp_path)
    assert [r.previous for r in back] == [r.previous for r in interleaved]
    assert "previous" not in back[0].to_record()  # left out unless given


@pytest.mark.parametrize(
    ("previous", "message"),
    [
        ("nowhere", "previous names request 'nowhere', which is not in the batch"),
        ("a2", "previous names request 'a2', which comes after it"),
        ("a1", "previous names the request itself"),
        ("b0", r"whose where clause \"id LIKE 'b:%'\" is not this request's"),
    ],
)
def test_previous_must_name_an_earlier_request_of_the_same_scope(
    tmp_path: Path, previous: str, message: str
) -> None:
    a0, a1, a2 = _turn_requests("a", 3)
    bad = a1.model_copy(update={"previous": previous})
    requests = [*_turn_requests("b", 1), a0, bad, a2]
    path = tmp_path / "requests.jsonl"
    path.write_text("".join(json.dumps(r.to_record()) + "\n" for r in requests))
    with pytest.raises(RecordError, match=message) as error:
        run_batch(
            _session("a", 3), read_requests(path), out_dir=tmp_path / "out", rank="none",
            options=PackOptions(as_of=AS_OF),
        )  # fmt: skip
    assert (error.value.line, error.value.field) == (3, "previous")
    assert not (tmp_path / "out").exists()  # refused before anything is packed


def test_a_request_that_is_not_a_request_is_refused_by_its_index(tmp_path: Path) -> None:
    record = {"id": "x", "budget": 100}
    with pytest.raises(RecordError, match=r"a request must be a Request, got dict") as info:
        run_batch(store(), [Request(id="a", budget=10), record], out_dir=tmp_path / "out")  # type: ignore[list-item]
    assert info.value.row == 1
    assert not (tmp_path / "out").exists()


def test_a_batch_does_not_tokenize_an_item_too_large_for_every_budget_of_its_scope(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import cognoxium.tokens.profiles as profiles

    big = "log line with words " * 60_000  # 1.2 MB, far over every budget below
    items = records_to_frame(
        [
            {"id": "q", "role": "user", "text": "Why did the sync fail?", "created_at": AS_OF},
            {"id": "log", "role": "tool", "text": big, "created_at": AS_OF},
            {"id": "kb", "role": "document", "text": "Sync fails on expired tokens."},
        ]
    )
    longest: list[int] = [0]
    counted = profiles.token_lengths

    def spying(encoding: Any, texts: list[str]) -> Any:
        longest[0] = max([longest[0], *(len(t) for t in texts)])
        return counted(encoding, texts)

    monkeypatch.setattr(profiles, "token_lengths", spying)
    requests = [Request(id="a", budget=256, query="sync"), Request(id="b", budget=512)]
    options = PackOptions(as_of=AS_OF)
    run_batch(items, requests, out_dir=tmp_path / "out", rank="bm25", options=options)
    assert longest[0] < len(big)
    written = {m.label: m for m in read_manifests(tmp_path / "out")}
    monkeypatch.setattr(profiles, "token_lengths", counted)
    for request in requests:
        frame = CognitionFrame(items)
        frame = frame.rank("bm25", query=request.query) if request.query else frame
        alone = frame.pack(request.budget, as_of=AS_OF, label=request.id)
        assert written[request.id].to_json() == alone.manifest.to_json()
        assert written[request.id].to_polars().filter(pl.col("id") == "log")["tokens"][0] is None


def test_conversation_requests_pack_each_conversation_in_order_of_its_first_item() -> None:
    from cognoxium.app.batch import conversation_requests

    rows = [
        {"id": f"m{n}", "role": "user", "text": f"turn {n}", "metadata": {"conversation": c}}
        for n, c in enumerate(["b", "a", "b", "o'k", "a"])
    ]
    store = CognitionFrame(rows)
    requests = conversation_requests(store, 64)
    assert [(r.id, r.budget, r.where, r.query) for r in requests] == [
        ("b", 64, "metadata.conversation = 'b'", None),
        ("a", 64, "metadata.conversation = 'a'", None),
        ("o'k", 64, "metadata.conversation = 'o''k'", None),
    ]
    assert [batch_module.scope_rows(store, r)["id"].to_list() for r in requests] == [
        ["m0", "m2"],
        ["m1", "m4"],
        ["m3"],
    ]
    assert conversation_requests(store.filter(pl.col("id") == "none"), 64) == []


def test_conversation_requests_name_an_item_without_a_conversation_and_a_bad_id() -> None:
    from cognoxium.app.batch import conversation_requests

    rows = [
        {"id": "m0", "role": "user", "text": "a", "metadata": {"conversation": "c1"}},
        {"id": "m1", "role": "user", "text": "b", "metadata": {"thread": "c1"}},
    ]
    with pytest.raises(RecordError) as caught:
        conversation_requests(CognitionFrame(rows), 64)
    assert (caught.value.row, caught.value.field) == (1, "metadata")
    assert "no metadata.conversation" in caught.value.message
    threads = CognitionFrame(rows).with_columns(metadata=pl.lit('{"thread":"t1"}'))
    assert [r.where for r in conversation_requests(threads, 64, key="thread")] == [
        "metadata.thread = 't1'"
    ]
    rows[1]["metadata"] = {"conversation": "c\x07"}
    with pytest.raises(RecordError, match="conversation 'c\\\\x07' cannot be a request id"):
        conversation_requests(CognitionFrame(rows), 64)


def test_a_batch_off_a_terminal_writes_a_progress_line_every_interval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A long run in a log or a job says how far it is; a terminal gets its bar instead."""
    lines = batch_module._ProgressLines(total=4, every=0.01)
    with lines:
        lines.advance()
        deadline = time.monotonic() + 10
        while "of 4 requests" not in capsys.readouterr().err and time.monotonic() < deadline:
            time.sleep(0.01)
        line = lines.line()
        lines.advance(3)  # all done: no more lines
        time.sleep(0.05)
        capsys.readouterr()
        time.sleep(0.05)
    assert capsys.readouterr().err == ""
    assert re.fullmatch(r"packing: 1 of 4 requests, \d+ s, about \d+ s left", line)
    assert batch_module._duration(59.6) == "1 min 0 s"
    assert batch_module._duration(8045) == "2 h 14 min"
    # Through run_batch: lines while it runs, none with progress off.
    monkeypatch.setattr(batch_module, "PROGRESS_EVERY_S", 0.001)
    requests = [Request(id=f"r{k}", budget=200) for k in range(3)]
    options = PackOptions(as_of=AS_OF)
    run_batch(store(), requests, out_dir=tmp_path / "on", options=options, progress=True)
    assert "packing: " in capsys.readouterr().err
    run_batch(store(), requests, out_dir=tmp_path / "off", options=options, progress=False)
    assert capsys.readouterr().err == ""


def test_progress_counts_each_scope_packed_in_this_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch of one task reports each scope as it is packed, not only at its end."""
    counts: list[int] = []

    @contextmanager
    def recording(total: int, enabled: bool) -> Iterator[Callable[[int], None]]:
        assert (total, enabled) == (3, True)
        yield counts.append

    monkeypatch.setattr(batch_module, "_progress", recording)
    requests = [
        Request(id="billing", budget=200, where="metadata.topic = 'billing'"),
        Request(id="bugs", budget=200, where="metadata.topic = 'bugs'"),
        Request(id="all", budget=4000),
    ]
    options = PackOptions(as_of=AS_OF)
    run_batch(store(), requests, out_dir=tmp_path, options=options, rank="bm25", progress=True)
    assert counts == [1, 1, 1]
