"""The command line: the sample batch, exit codes and messages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cognoxium.cli import EXIT_BAD_INPUT, EXIT_BUDGET, EXIT_OK, EXIT_USAGE, app

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "examples" / "sample"
AS_OF = "2026-01-01T00:00:00Z"

runner = CliRunner()


def pack(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["pack", *args, "--no-progress"])
    return result.exit_code, result.stdout, result.stderr


def test_pack_on_the_sample(tmp_path: Path) -> None:
    out = tmp_path / "sample"
    code, stdout, stderr = pack(
        str(SAMPLE / "items.jsonl"),
        str(SAMPLE / "requests.jsonl"),
        "--out",
        str(out),
        "--as-of",
        AS_OF,
    )
    assert code == EXIT_OK, stderr
    assert "6 requests" in stdout
    assert "packs/s" in stdout
    assert "p95" in stdout
    packs = [json.loads(line) for line in (out / "packs.jsonl").read_text().splitlines()]
    manifests = [json.loads(line) for line in (out / "manifests.jsonl").read_text().splitlines()]
    requests = [json.loads(line) for line in (SAMPLE / "requests.jsonl").read_text().splitlines()]
    assert [p["request_id"] for p in packs] == [r["id"] for r in requests]
    assert [m["label"] for m in manifests] == [r["id"] for r in requests]
    for p, r in zip(packs, requests, strict=True):
        assert p["budget"] == r["budget"]
        assert p["used_tokens"] <= p["budget"]
    by_id = {p["request_id"]: p for p in packs}
    # Every request's scope holds the required policy, so every pack has it.
    assert all("policy" in p["ids"] for p in packs)
    # Binary never packs; the expired offer packs only before it expires.
    assert "attachment-screenshot" not in by_id["everything"]["ids"]
    assert "promo-blackfriday" not in by_id["everything"]["ids"]
    assert "promo-blackfriday" in by_id["offers-in-november"]["ids"]
    reasons = {e["id"]: e["reason"] for e in manifests[-1]["entries"]}
    assert reasons["attachment-screenshot"] == "not_packable"
    assert reasons["promo-blackfriday"] == "expired"

    # Byte-identical manifests with a fixed --as-of.
    again = tmp_path / "again"
    code, _, stderr = pack(
        str(SAMPLE / "items.jsonl"),
        str(SAMPLE / "requests.jsonl"),
        "--out",
        str(again),
        "--as-of",
        AS_OF,
        "--rank",
        "bm25",
    )
    assert code == EXIT_OK, stderr
    assert (again / "manifests.jsonl").read_bytes() == (out / "manifests.jsonl").read_bytes()


def test_bad_request_exits_2_naming_file_line_and_field(tmp_path: Path) -> None:
    requests = tmp_path / "requests.jsonl"
    requests.write_text('{"id": "a", "budget": 64}\n{"id": "b", "budget": "lots"}\n')
    code, stdout, stderr = pack(
        str(SAMPLE / "items.jsonl"), str(requests), "--out", str(tmp_path / "out"), "--as-of", AS_OF
    )
    assert code == EXIT_BAD_INPUT
    assert f"{requests}:2: field budget:" in stderr
    assert "Traceback" not in stderr + stdout
    assert not (tmp_path / "out" / "packs.jsonl").exists()


def test_bad_item_exits_2_naming_file_line_and_field(tmp_path: Path) -> None:
    items = tmp_path / "items.jsonl"
    items.write_text(
        '{"id": "a", "role": "user", "text": "hi", "created_at": "2025-01-01T00:00:00Z"}\n'
        "\n"
        '{"id": "b", "role": "narrator", "text": "hi", "created_at": "2025-01-01T00:00:00Z"}\n'
    )
    code, _, stderr = pack(
        str(items), str(SAMPLE / "requests.jsonl"), "--out", str(tmp_path / "out")
    )
    assert code == EXIT_BAD_INPUT
    assert f"{items}:3: field role:" in stderr
    assert "Traceback" not in stderr


def test_bad_where_exits_2(tmp_path: Path) -> None:
    requests = tmp_path / "requests.jsonl"
    requests.write_text('{"id": "w", "budget": 64, "where": "metadata.topic = = 1"}\n')
    code, _, stderr = pack(
        str(SAMPLE / "items.jsonl"), str(requests), "--out", str(tmp_path / "out"), "--as-of", AS_OF
    )
    assert code == EXIT_BAD_INPUT
    assert f"{requests}:1: field where: request 'w': invalid where clause" in stderr


def test_infeasible_budget_exits_3(tmp_path: Path) -> None:
    requests = tmp_path / "requests.jsonl"
    requests.write_text('{"id": "small", "budget": 64}\n{"id": "tiny", "budget": 8}\n')
    code, _, stderr = pack(
        str(SAMPLE / "items.jsonl"), str(requests), "--out", str(tmp_path / "out"), "--as-of", AS_OF
    )
    assert code == EXIT_BUDGET
    assert "request 'tiny'" in stderr
    assert "'policy'" in stderr
    assert "budget is 8" in stderr
    assert "Traceback" not in stderr
    assert not (tmp_path / "out" / "packs.jsonl").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--rank", "fuzzy"], "fuzzy"),
        (["--profile", "gpt2"], "unknown token profile 'gpt2'"),
        (["--as-of", "2026-01-01T00:00:00"], "has no timezone"),
        (["--as-of", "tomorrow"], "not an ISO 8601 time"),
        (["--frobnicate"], "No such option"),
    ],
)
def test_usage_errors_exit_1(tmp_path: Path, args: list[str], message: str) -> None:
    code, stdout, stderr = pack(
        str(SAMPLE / "items.jsonl"),
        str(SAMPLE / "requests.jsonl"),
        "--out",
        str(tmp_path / "out"),
        *args,
    )
    assert code == EXIT_USAGE
    assert message in " ".join((stdout + stderr).split())


def test_missing_file_and_missing_out_exit_1(tmp_path: Path) -> None:
    code, _, stderr = pack(
        str(tmp_path / "absent.jsonl"),
        str(SAMPLE / "requests.jsonl"),
        "--out",
        str(tmp_path / "out"),
    )
    assert code == EXIT_USAGE
    assert "does not exist" in stderr
    code, _, stderr = pack(str(SAMPLE / "items.jsonl"), str(SAMPLE / "requests.jsonl"))
    assert code == EXIT_USAGE
    assert "--out" in stderr
    result = runner.invoke(app, ["unpack"])
    assert result.exit_code == EXIT_USAGE


def test_locomo_budgets_are_checked(tmp_path: Path) -> None:
    data = tmp_path / "tiny.json"
    data.write_text("[]")
    result = runner.invoke(app, ["locomo", str(data), "--out", str(tmp_path), "--budgets", "1k"])
    assert result.exit_code == EXIT_USAGE
    assert "comma-separated" in result.stderr
    result = runner.invoke(
        app, ["locomo", str(data), "--out", str(tmp_path / "o"), "--budgets", "64", "--no-progress"]
    )
    assert result.exit_code == EXIT_OK, result.stderr
    data.write_text("{}")
    result = runner.invoke(app, ["locomo", str(data), "--out", str(tmp_path / "o")])
    assert result.exit_code == EXIT_BAD_INPUT
    assert "expected a JSON list of conversations" in result.stderr


def test_help_shows_examples_and_exit_codes() -> None:
    def text(args: list[str]) -> str:
        result = runner.invoke(app, args)
        assert result.exit_code == EXIT_OK
        return " ".join(result.stdout.split())  # rich wraps to the terminal width

    top = text(["--help"])
    assert "cognoxium pack examples/sample/items.jsonl" in top
    assert "Exit codes: 0 ok, 1 usage error, 2 bad input, 3 infeasible budget." in top
    pack_help = text(["pack", "--help"])
    assert "--as-of" in pack_help
    assert "byte-identical" in pack_help
    assert "--budgets" in text(["locomo", "--help"])
