"""The command line: the sample batch, exit codes and messages."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from cognoxium.app.cli import (
    EXIT_BAD_INPUT,
    EXIT_BUDGET,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    app,
)
from cognoxium.packing.manifests import read_manifests
from cognoxium.tokens.profiles import get_profile
from tests.app.parts import joined, layout, records
from tests.pins import assert_manifest_lines_equal, assert_same_outputs

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "examples" / "sample"
AS_OF = "2026-01-01T00:00:00Z"

runner = CliRunner()
MANIFESTS_JSONL = "manifests/part-00000.jsonl"
"""The one part of the sample's manifests in the jsonl form (the sample is one task)."""


def pack(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["pack", *args, "--no-progress"])
    return result.exit_code, result.stdout, result.stderr


SAMPLE_MANIFESTS = "033906391c929fb1af9b7af7904458993dfb4a61232d3494ca8e81a8e74144ac"
"""sha256 of the sample's manifests in the jsonl form (rank bm25, cl100k_base, as of AS_OF).

The bytes of the parts of ``manifests/`` concatenated in number order: the
same digest as the one manifests.jsonl file written before the output came in
parts, so the concatenation is that file, byte for byte.

Pinned with BM25, not the default rank: the default's MiniLM embeddings come
from ONNX Runtime, whose int8 kernels differ in the last bits from one CPU
generation to the next, so those ranks are byte-stable on one machine only.
"""

PINNED_SAMPLE = Path(__file__).parent / "data" / "sample_manifests.jsonl"
"""The pinned manifests.jsonl itself, whose sha256 is SAMPLE_MANIFESTS.

A run that writes other bytes is compared with it, manifest by manifest, and
the failure names the first differing request, item and field. To pin a
change of behaviour made on purpose, write it with ``cognoxium pack
examples/sample/items.jsonl examples/sample/requests.jsonl --out DIR --as-of
2026-01-01T00:00:00Z --rank bm25 --manifests jsonl``, write the parts
DIR/manifests/part-*.jsonl concatenated in number order here and set
SAMPLE_MANIFESTS to its sha256.
"""


def assert_pinned_sample(written: bytes) -> None:
    """``written`` are the pinned manifests' bytes; else name the request, item and field."""
    pinned = PINNED_SAMPLE.read_bytes()
    assert_manifest_lines_equal(
        written.decode("utf-8").splitlines(), pinned.decode("utf-8").splitlines(), what="sample"
    )
    assert written == pinned  # the same manifests, to the byte
    assert hashlib.sha256(written).hexdigest() == SAMPLE_MANIFESTS


def test_the_pinned_sample_file_has_the_pinned_digest() -> None:
    assert hashlib.sha256(PINNED_SAMPLE.read_bytes()).hexdigest() == SAMPLE_MANIFESTS


def test_a_changed_sample_manifest_is_named_by_request_item_and_field() -> None:
    lines = PINNED_SAMPLE.read_text(encoding="utf-8").splitlines()
    manifest = json.loads(lines[2])
    manifest["entries"][1]["tokens"] = 12345
    changed = [*lines[:2], json.dumps(manifest, separators=(",", ":")), *lines[3:]]
    written = "".join(line + "\n" for line in changed).encode("utf-8")
    label, item = manifest["label"], manifest["entries"][1]["id"]
    with pytest.raises(AssertionError) as info:
        assert_pinned_sample(written)
    message = str(info.value)
    assert f"sample: request {label!r} (line 3) is the first that differs" in message
    assert f"entries[id={item!r}].tokens\n[left]:  12345" in message


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
    assert "a pack after its scope's shared work (embeddings, indexes): p50" in stdout
    assert "p95" in stdout
    packs = records(out)
    manifests = [m.to_dict() for m in read_manifests(out)]
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
    )
    assert code == EXIT_OK, stderr
    # One task, so one part of each table, always parts: the layout is one.
    names = [
        "manifest_headers/part-00000.jsonl",
        "manifests/part-00000.parquet",
        "packs/part-00000.jsonl",
    ]
    assert layout(out.resolve()) == names
    assert_same_outputs(again.resolve(), out.resolve(), names)  # the Parquet part included


def test_the_sample_manifests_are_pinned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "bm25"
    args = ("--out", str(out), "--as-of", AS_OF, "--rank", "bm25", "--manifests", "jsonl")
    code, _, stderr = pack(str(SAMPLE / "items.jsonl"), str(SAMPLE / "requests.jsonl"), *args)
    assert code == EXIT_OK, stderr
    # Pinned: a change of these bytes is a change of behaviour, made on purpose.
    assert_pinned_sample(joined(out, "manifests"))
    # A task per scope: more parts, whose concatenation is the same bytes.
    monkeypatch.setattr("cognoxium.app._workers.TASK_ITEMS", 1)
    parted = tmp_path / "parted"
    args = ("--out", str(parted), "--as-of", AS_OF, "--rank", "bm25", "--manifests", "jsonl")
    code, _, stderr = pack(str(SAMPLE / "items.jsonl"), str(SAMPLE / "requests.jsonl"), *args)
    assert code == EXIT_OK, stderr
    assert len(list((parted / "manifests").iterdir())) == 6  # six distinct scopes
    assert_pinned_sample(joined(parted, "manifests"))
    assert joined(parted, "packs") == joined(out, "packs")
    monkeypatch.undo()
    # The Parquet form holds the same manifests: rebuilt, they give the pinned bytes.
    columnar = tmp_path / "columnar"
    args = ("--out", str(columnar), "--as-of", AS_OF, "--rank", "bm25")
    code, _, stderr = pack(str(SAMPLE / "items.jsonl"), str(SAMPLE / "requests.jsonl"), *args)
    assert code == EXIT_OK, stderr
    rebuilt = "".join(m.to_json() + "\n" for m in read_manifests(columnar))
    assert_pinned_sample(rebuilt.encode())


def test_pack_reserve_keeps_tokens_for_the_reply(tmp_path: Path) -> None:
    out = tmp_path / "reserved"
    args = (
        "--out",
        str(out),
        "--as-of",
        AS_OF,
        "--rank",
        "bm25",
        "--reserve",
        "16",
        "--manifests",
        "jsonl",
    )
    code, _, stderr = pack(str(SAMPLE / "items.jsonl"), str(SAMPLE / "requests.jsonl"), *args)
    assert code == EXIT_OK, stderr
    manifests = records(out, "manifests")
    assert len(manifests) == 6
    for m in manifests:
        assert m["reserve_tokens"] == 16
        assert m["used_tokens"] + 16 + m["remaining_tokens"] == m["budget"]
        assert m["used_tokens"] <= m["budget"] - 16


def test_items_without_created_at_pack_at_a_past_as_of(tmp_path: Path) -> None:
    # Undated items are created at the epoch, so an --as-of in the past keeps
    # them (a created_at of "now" made every one not_yet_valid, exit 0).
    items = tmp_path / "items.jsonl"
    lines = [
        {"id": "sys", "role": "system", "text": "Answer briefly.", "retention": "required"},
        {"id": "q", "role": "user", "text": "Where is my refund?"},
        {"id": "a", "role": "assistant", "text": "It was sent on Monday."},
    ]
    items.write_text("".join(json.dumps(line) + "\n" for line in lines))
    requests = tmp_path / "requests.jsonl"
    requests.write_text('{"id": "r", "budget": 512, "query": "refund"}\n')
    outputs = []
    for name in ("first", "second"):
        out = tmp_path / name
        args = ("--out", str(out), "--as-of", AS_OF, "--rank", "bm25", "--manifests", "jsonl")
        code, _, stderr = pack(str(items), str(requests), *args)
        assert code == EXIT_OK, stderr
        outputs.append(out)
    (packed,) = records(outputs[0])
    assert sorted(packed["ids"]) == ["a", "q", "sys"]
    (manifest,) = records(outputs[0], "manifests")
    reasons = {e["id"]: e["reason"] for e in manifest["entries"]}
    assert reasons == {"sys": "required", "q": "selected", "a": "selected"}
    assert joined(outputs[0], "manifests") == joined(outputs[1], "manifests")


@pytest.mark.parametrize(
    ("extra", "code", "message"),
    [
        (("--reserve", "-1"), EXIT_USAGE, "--reserve"),
        (("--reserve", "65"), EXIT_BAD_INPUT, "request 'tiny-setup': the batch's reserve 65"),
        (("--overflow", "drop"), EXIT_USAGE, "--overflow"),
        (("--gaps", "skip"), EXIT_USAGE, "--gaps"),
        (("--gap-note", "({count} omitted)"), EXIT_USAGE, "gap_note must be"),
    ],
)
def test_pack_bad_reserve_or_overflow(
    tmp_path: Path, extra: tuple[str, ...], code: int, message: str
) -> None:
    args = ("--out", str(tmp_path / "out"), "--as-of", AS_OF, "--rank", "bm25", *extra)
    got, _, stderr = pack(str(SAMPLE / "items.jsonl"), str(SAMPLE / "requests.jsonl"), *args)
    assert got == code
    assert message in stderr
    assert not (tmp_path / "out" / "packs").exists()


def test_bad_request_exits_2_naming_file_line_and_field(tmp_path: Path) -> None:
    requests = tmp_path / "requests.jsonl"
    requests.write_text('{"id": "a", "budget": 64}\n{"id": "b", "budget": "lots"}\n')
    code, stdout, stderr = pack(
        str(SAMPLE / "items.jsonl"), str(requests), "--out", str(tmp_path / "out"), "--as-of", AS_OF
    )
    assert code == EXIT_BAD_INPUT
    assert f"{requests}:2: field budget:" in stderr
    assert "Traceback" not in stderr + stdout
    assert not (tmp_path / "out" / "packs").exists()


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


def test_an_item_over_the_maximum_size_exits_2_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    items = tmp_path / "items.jsonl"
    items.write_text(
        '{"id": "a", "role": "user", "text": "hi", "created_at": "2025-01-01T00:00:00Z"}\n'
        '{"id": "log", "role": "document", "text": "' + "x" * 300 + '", '
        '"created_at": "2025-01-01T00:00:00Z"}\n'
    )
    monkeypatch.setenv("COGNOXIUM_MAX_ITEM_BYTES", "256")
    code, _, stderr = pack(
        str(items), str(SAMPLE / "requests.jsonl"), "--out", str(tmp_path / "out")
    )
    assert code == EXIT_BAD_INPUT
    assert f"{items}:2: field text: item 'log' has 300 bytes of payload" in stderr
    assert "maximum item size of 256 bytes" in stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("args", "loaded"),
    [
        ((), ["minilm"]),  # the learned rank's model embeds with MiniLM
        (("--rank", "hybrid", "--model", "local_hash"), ["local_hash"]),
        (("--rank", "bm25"), []),
        (("--rank", "recency"), []),
    ],
)
def test_pack_loads_the_embedding_model_its_rank_uses_while_it_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: tuple[str, ...], loaded: list[str]
) -> None:
    import cognoxium.retrieval.embeddings as embeddings

    started: list[str] = []
    real = embeddings.preload
    monkeypatch.setattr(embeddings, "preload", lambda name: started.append(name) or real(name))
    code, _, stderr = pack(
        str(SAMPLE / "items.jsonl"),
        str(SAMPLE / "requests.jsonl"),
        "--out",
        str(tmp_path / "out"),
        "--as-of",
        AS_OF,
        *args,
    )
    assert code == EXIT_OK, stderr
    assert started == loaded


_EXIT_WHILE_LOADING = """
import sys, threading

import onnxruntime  # imported first: the load goes straight into its C++ once let go

import cognoxium.retrieval.embeddings as embeddings
from cognoxium.app.cli import main

ended = threading.Event()
loading = threading.Event()
session = embeddings._session


def load_session_at_the_end(*args):
    ended.wait(10)
    loading.set()
    return session(*args)


embeddings._session = load_session_at_the_end
sys.argv = ["cognoxium", *sys.argv[1:]]
try:
    main()
finally:
    ended.set()
    loading.wait(10)
"""
"""The command line, its model's session created only as the command ends.

The interpreter then exits while the session is being created in ONNX
Runtime's C++, the worst case of a command that ends before the model it
started loading is loaded.
"""


@pytest.mark.parametrize(
    ("items", "request_line", "exit_code"),
    [
        (
            '{"id": "b", "role": "narrator", "text": "hi"}\n',
            '{"id": "r", "budget": 64}',
            EXIT_BAD_INPUT,
        ),
        (None, '{"id": "tiny", "budget": 8}', EXIT_BUDGET),
        (None, '{"id": "r", "budget": 64}', EXIT_OK),  # no query: nothing is embedded
    ],
    ids=["bad-record", "infeasible-budget", "no-query"],
)
def test_pack_exits_with_its_code_while_the_model_still_loads(
    tmp_path: Path, items: str | None, request_line: str, exit_code: int
) -> None:
    # The interpreter must not exit while the load is inside ONNX Runtime: a
    # thread stopped there at exit aborts the process (SIGABRT, exit 134).
    items_path = SAMPLE / "items.jsonl"
    if items is not None:
        items_path = tmp_path / "items.jsonl"
        items_path.write_text(items)
    requests = tmp_path / "requests.jsonl"
    requests.write_text(request_line + "\n")
    args = ["pack", str(items_path), str(requests), "--out", str(tmp_path / "out")]
    done = subprocess.run(
        [sys.executable, "-c", _EXIT_WHILE_LOADING, *args, "--as-of", AS_OF, "--no-progress"],
        cwd=REPO,
        env={**os.environ, "COGNOXIUM_CACHE_DIR": str(tmp_path / "cache")},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == exit_code, done.stderr
    assert "terminate called" not in done.stderr


def test_bad_where_exits_2(tmp_path: Path) -> None:
    requests = tmp_path / "requests.jsonl"
    requests.write_text('{"id": "w", "budget": 64, "where": "metadata.topic = = 1"}\n')
    code, _, stderr = pack(
        str(SAMPLE / "items.jsonl"), str(requests), "--out", str(tmp_path / "out"), "--as-of", AS_OF
    )
    assert code == EXIT_BAD_INPUT
    assert f"{requests}:1: field where: request 'w': invalid where clause" in stderr


def test_where_that_reads_a_file_exits_2_naming_file_and_line(tmp_path: Path) -> None:
    canary = tmp_path / "secret.csv"
    canary.write_text("canary-e41b first line\n")
    where = f"id IN (SELECT column_1 FROM read_csv('{canary}'))"
    requests = tmp_path / "requests.jsonl"
    requests.write_text(
        '{"id": "ok", "budget": 64}\n' + json.dumps({"id": "w", "budget": 64, "where": where})
    )
    code, stdout, stderr = pack(
        str(SAMPLE / "items.jsonl"), str(requests), "--out", str(tmp_path / "out"), "--as-of", AS_OF
    )
    assert code == EXIT_BAD_INPUT
    assert stderr.startswith(
        f"error: {requests}:2: field where: request 'w': invalid where clause: predicate "
    )
    assert "table function read_csv, which reads files" in stderr
    assert "canary-e41b" not in stderr + stdout
    assert "Traceback" not in stderr + stdout
    assert not (tmp_path / "out").exists()


def test_unknown_request_field_exits_2_naming_file_line_and_field(tmp_path: Path) -> None:
    requests = tmp_path / "requests.jsonl"
    requests.write_text('{"id": "a", "budget": 64, "qurey": "refund"}\n')
    code, stdout, stderr = pack(
        str(SAMPLE / "items.jsonl"), str(requests), "--out", str(tmp_path / "out"), "--as-of", AS_OF
    )
    assert code == EXIT_BAD_INPUT
    assert stderr.startswith(
        f"error: {requests}:1: field qurey: unknown field 'qurey'; did you mean 'query'?"
    )
    assert "Traceback" not in stderr + stdout


def test_where_with_a_metadata_key_no_item_has_exits_2(tmp_path: Path) -> None:
    requests = tmp_path / "requests.jsonl"
    requests.write_text(
        '{"id": "w", "budget": 64}\n{"id": "t", "budget": 64, "where": "metadata.topik = 1"}\n'
    )
    code, _, stderr = pack(
        str(SAMPLE / "items.jsonl"), str(requests), "--out", str(tmp_path / "out"), "--as-of", AS_OF
    )
    assert code == EXIT_BAD_INPUT
    assert stderr.startswith(f"error: {requests}:2: field where: request 't': invalid where clause")
    assert "no item has the metadata key 'topik'" in stderr
    assert "did you mean 'topic'? the metadata keys are ['collection', 'conversation', " in stderr
    assert not (tmp_path / "out").exists()


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
    assert not (tmp_path / "out" / "packs").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--rank", "fuzzy"], "fuzzy"),
        (["--profile", "o200k"], "unknown token profile 'o200k'"),
        (["--profile", "gpt2"], "model 'gpt2' uses the gpt2 encoding"),
        (["--profile", "huggingface:"], "names no file"),
        (["--as-of", "2026-01-01T00:00:00"], "Invalid value for '--as-of': "),
        (["--as-of", "2026-01-01T00:00:00"], "has no timezone"),
        (["--as-of", "tomorrow"], "Invalid value for '--as-of': not an ISO 8601 time"),
        (["--as-of", "0001-01-01T00:00:00+01:00"], "must fall in the years"),
        (["--as-of", "0001-01-01T00:00:00+01:00"], "'--as-of'"),
        (["--gaps", "holes"], "--gaps"),
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


@pytest.mark.parametrize(
    "args",
    [
        ["pack", "{absent}", str(SAMPLE / "requests.jsonl"), "--out", "{out}"],
        ["pack", str(SAMPLE / "items.jsonl"), "{absent}", "--out", "{out}"],
        ["pack", "{dir}", str(SAMPLE / "requests.jsonl"), "--out", "{out}"],
        ["locomo", "{absent}", "--out", "{out}"],
        ["redact", "{absent}", "{out}/x.jsonl"],
        ["inspect", "{absent}"],
        ["inspect", str(SAMPLE / "items.jsonl"), "--items", "{absent}"],
    ],
)
def test_an_input_file_that_cannot_be_read_is_bad_input(tmp_path: Path, args: list[str]) -> None:
    names = {"absent": str(tmp_path / "absent.jsonl"), "out": str(tmp_path / "out")}
    names["dir"] = str(tmp_path)
    result = runner.invoke(app, [a.format(**names) for a in args])
    assert result.exit_code == EXIT_BAD_INPUT
    assert one_line_error(result.stderr) in (
        f"error: cannot read {names['absent']}: no such file",
        f"error: cannot read {names['dir']}: is a directory, not a file",
    )
    assert not (tmp_path / "out").exists()


def test_missing_out_and_unknown_command_exit_1() -> None:
    code, _, stderr = pack(str(SAMPLE / "items.jsonl"), str(SAMPLE / "requests.jsonl"))
    assert code == EXIT_USAGE
    assert "--out" in stderr
    result = runner.invoke(app, ["unpack"])
    assert result.exit_code == EXIT_USAGE


def one_line_error(stderr: str) -> str:
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("error: ")
    return lines[0]


@pytest.mark.parametrize("command", ["pack", "locomo"])
def test_out_that_is_a_file_exits_2_naming_it(tmp_path: Path, command: str) -> None:
    data = tmp_path / "tiny.json"
    data.write_text("[]")
    args = {
        "pack": [str(SAMPLE / "items.jsonl"), str(SAMPLE / "requests.jsonl"), "--as-of", AS_OF],
        "locomo": [str(data)],
    }[command]
    taken = tmp_path / "taken"
    taken.write_text("keep me\n")
    for out, error in ((taken, "File exists"), (taken / "sub", "Not a directory")):
        result = runner.invoke(app, [command, *args, "--out", str(out), "--no-progress"])
        assert result.exit_code == EXIT_BAD_INPUT
        assert one_line_error(result.stderr) == (
            f"error: cannot write {out}: {error}; --out must be a directory "
            "(or a path where one can be made), not a file"
        )
        assert "Traceback" not in result.stdout
    assert taken.read_text() == "keep me\n"


@pytest.mark.parametrize(
    ("target", "error", "expected"),
    [
        # An error naming its path, while reading the items.
        (
            "cognoxium.items.io.read_items",
            OSError(errno.EIO, "Input/output error", "ITEMS"),
            "error: cannot read ITEMS: Input/output error",
        ),
        # An error naming no path, while writing: the output directory is named.
        (
            "cognoxium.app.batch.run_batch",
            OSError(errno.ENOSPC, "No space left on device"),
            "error: cannot write OUT: No space left on device",
        ),
        (
            "cognoxium.app.batch.run_batch",
            PermissionError(errno.EACCES, "Permission denied", "OUT/packs/part-00000.jsonl"),
            "error: cannot write OUT/packs/part-00000.jsonl: Permission denied",
        ),
    ],
)
def test_os_errors_exit_2_naming_the_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, target: str, error: OSError, expected: str
) -> None:
    items, out = SAMPLE / "items.jsonl", tmp_path / "out"
    if isinstance(error.filename, str):
        error.filename = error.filename.replace("ITEMS", str(items)).replace("OUT", str(out))

    def fail(*args: object, **kwargs: object) -> None:
        raise error

    monkeypatch.setattr(target, fail)
    code, stdout, stderr = pack(str(items), str(SAMPLE / "requests.jsonl"), "--out", str(out))
    assert code == EXIT_BAD_INPUT
    assert one_line_error(stderr) == expected.replace("ITEMS", str(items)).replace("OUT", str(out))
    assert "Traceback" not in stdout


def test_locomo_read_and_write_errors_exit_2_naming_the_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data, out = tmp_path / "tiny.json", tmp_path / "out"
    data.write_text("[]")

    def unreadable(path: Path) -> str:
        raise OSError(errno.EIO, "Input/output error", str(path))

    monkeypatch.setattr("cognoxium.app.locomo.file_sha256", unreadable)
    result = runner.invoke(app, ["locomo", str(data), "--out", str(out), "--no-progress"])
    assert result.exit_code == EXIT_BAD_INPUT
    assert one_line_error(result.stderr) == f"error: cannot read {data}: Input/output error"

    def full(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.undo()  # the input is readable again
    monkeypatch.setattr("cognoxium.app.locomo.run_batch", full)
    result = runner.invoke(app, ["locomo", str(data), "--out", str(out), "--no-progress"])
    assert result.exit_code == EXIT_BAD_INPUT
    assert one_line_error(result.stderr) == f"error: cannot write {out}: No space left on device"


def test_items_that_are_not_utf8_exit_2(tmp_path: Path) -> None:
    items = tmp_path / "items.jsonl"
    items.write_bytes(b'{"id": "a", "role": "user", "text": "caf\xe9"}\n')
    code, _, stderr = pack(str(items), str(SAMPLE / "requests.jsonl"), "--out", str(tmp_path / "o"))
    assert code == EXIT_BAD_INPUT
    assert one_line_error(stderr).startswith(f"error: {items}:1: not UTF-8 text")


def test_version() -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == EXIT_OK
    assert result.stdout == f"cognoxium {version('cognoxium-engine')}\n"


def test_python_dash_m_runs_the_command_line() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "cognoxium", "--version"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert (run.returncode, run.stdout) == (EXIT_OK, f"cognoxium {version('cognoxium-engine')}\n")


@pytest.mark.parametrize(
    ("budgets", "message"),
    [
        ("2048,,4096", "entry 2 of '2048,,4096' is empty"),
        ("512,", "entry 2 of '512,' is empty"),
        ("", "entry 1 of '' is empty"),
        ("1k", "budget '1k' (entry 1 of '1k') is not a whole number of tokens"),
        ("512,1.5", "budget '1.5' (entry 2 of '512,1.5') is not a whole number of tokens"),
        ("1_000", "budget '1_000' (entry 1 of '1_000') is not a whole number of tokens"),
        ("512,-5", "budget '-5' (entry 2 of '512,-5') is negative"),
        ("-5", "budget '-5' (entry 1 of '-5') is negative"),
        ("512,1024,512", "budget '512' (entry 3 of '512,1024,512') repeats entry 1"),
        ("512, 0512", "budget '0512' (entry 2 of '512, 0512') repeats entry 1"),
    ],
)
def test_bad_budgets_are_usage_errors_naming_the_entry(
    tmp_path: Path, budgets: str, message: str
) -> None:
    data = tmp_path / "tiny.json"
    data.write_text("[]")
    result = runner.invoke(
        app, ["locomo", str(data), "--out", str(tmp_path / "o"), f"--budgets={budgets}"]
    )
    assert result.exit_code == EXIT_USAGE
    # rich draws the message in a box, wrapped to the terminal width
    assert message in " ".join(result.stderr.replace("│", " ").split())
    assert not (tmp_path / "o").exists()


def test_good_budgets_allow_spaces_and_zero(tmp_path: Path) -> None:
    data = tmp_path / "tiny.json"
    data.write_text("[]")
    out = tmp_path / "o"
    result = runner.invoke(
        app, ["locomo", str(data), "--out", str(out), "--budgets", " 0, 64 ", "--no-progress"]
    )
    assert result.exit_code == EXIT_OK, result.stderr
    assert json.loads((out / "report.json").read_text())["settings"]["budgets"] == [0, 64]


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
    codes = "2 bad input, 3 infeasible budget (pack, locomo), 4 internal error, 130 SIGINT, 143"
    assert f"Exit codes: 0 ok, 1 usage error, {codes}" in top
    pack_help = text(["pack", "--help"])
    assert "--as-of" in pack_help
    assert "byte-identical" in pack_help
    assert "--budgets" in text(["locomo", "--help"])


# ---------------------------------------------------------------------------
# cognoxium inspect


@pytest.fixture(scope="module")
def sample_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The sample packed once per manifest form (rank bm25, fixed as-of)."""
    runs = {}
    for form in ("parquet", "jsonl"):
        out = tmp_path_factory.mktemp("sample") / form
        code, _, stderr = pack(
            str(SAMPLE / "items.jsonl"), str(SAMPLE / "requests.jsonl"), "--out", str(out),
            "--rank", "bm25", "--as-of", AS_OF, "--manifests", form, "-q",
        )  # fmt: skip
        assert code == EXIT_OK, stderr
        runs[form] = out
    return runs


@pytest.fixture(scope="module")
def sample_out(sample_runs: dict[str, Path]) -> Path:
    """The sample's output directory with --manifests jsonl (one part: MANIFESTS_JSONL)."""
    return sample_runs["jsonl"]


@pytest.mark.parametrize(
    ("form", "target"),
    [
        ("parquet", ""),
        ("parquet", "manifests"),
        ("parquet", "manifests/part-00000.parquet"),
        ("jsonl", ""),
        ("jsonl", "manifests/part-00000.jsonl"),
    ],
)
def test_inspect_gives_one_summary_for_every_form(
    sample_runs: dict[str, Path], form: str, target: str
) -> None:
    """A directory of either form, its manifests directory and a part of it: one summary."""
    items = ("--items", str(SAMPLE / "items.jsonl"))
    reference = runner.invoke(
        app, ["inspect", str(sample_runs["jsonl"] / MANIFESTS_JSONL), "--json", *items]
    )
    assert reference.exit_code == EXIT_OK, reference.stderr
    path = sample_runs[form] / target if target else sample_runs[form]
    result = runner.invoke(app, ["inspect", str(path), "--json", *items])
    assert result.exit_code == EXIT_OK, result.stderr
    expected = json.loads(reference.stdout)
    summary = json.loads(result.stdout)
    assert summary.pop("file") == str(path)
    expected.pop("file")
    assert summary == expected
    assert summary["manifests"] == 6


def test_inspect_prints_budget_use_reasons_and_tokens(sample_out: Path) -> None:
    result = runner.invoke(app, ["inspect", str(sample_out / MANIFESTS_JSONL)])
    assert result.exit_code == EXIT_OK, result.stderr
    text = " ".join(result.stdout.split())
    packs = records(sample_out)
    used = sum(p["used_tokens"] for p in packs)
    budget = sum(p["budget"] for p in packs)
    assert "Budget use over 6 manifests" in text
    assert f"{used} / {budget}" in text
    for title in ("Decisions and reasons", "Tokens by role", "Tokens by retention tier"):
        assert title in text
    assert "Tokens by source" not in text  # needs --items
    assert "expired" in text
    assert "not_packable" in text
    assert "Per manifest" in text
    labels = [json.loads(line)["label"] for line in (sample_out / MANIFESTS_JSONL).open()]
    assert all(label in text for label in labels)


def test_inspect_source_shares_are_of_the_included_tokens(tmp_path: Path) -> None:
    items = tmp_path / "items.jsonl"
    two = [{"uri": "kb://a", "kind": "kb"}, {"uri": "kb://b", "kind": "kb"}]
    lines = [
        {"id": "d1", "role": "document", "text": "Refunds within 30 days.", "sources": two},
        {"id": "d2", "role": "document", "text": "Shipping is free.", "sources": two[:1]},
    ]
    items.write_text("".join(json.dumps(line) + "\n" for line in lines))
    requests = tmp_path / "requests.jsonl"
    requests.write_text('{"id": "r1", "budget": 200}\n')
    out = tmp_path / "out"
    args = ["pack", str(items), str(requests), "--out", str(out), "--rank", "none", "-q"]
    assert runner.invoke(app, [*args, "--as-of", AS_OF]).exit_code == EXIT_OK
    (manifest,) = read_manifests(out)
    tokens = {e.id: e.tokens for e in manifest.entries}
    result = runner.invoke(app, ["inspect", str(out), "--items", str(items)])
    assert result.exit_code == EXIT_OK, result.stderr
    cells = [line.replace("│", " ").split() for line in result.stdout.splitlines()]
    rows = {cell[0]: cell for cell in cells if cell and cell[0].startswith("kb://")}
    assert rows["kb://a"][-1] == "100.0%"  # behind every included token, though d1 counts twice
    share_b = 100 * tokens["d1"] / (tokens["d1"] + tokens["d2"])
    assert rows["kb://b"][-1] == f"{share_b:.1f}%"


def test_inspect_limit_cuts_the_per_manifest_rows_and_says_so(sample_out: Path) -> None:
    result = runner.invoke(app, ["inspect", str(sample_out / MANIFESTS_JSONL), "--limit", "2"])
    assert result.exit_code == EXIT_OK, result.stderr
    text = " ".join(result.stdout.split())
    labels = [json.loads(line)["label"] for line in (sample_out / MANIFESTS_JSONL).open()]
    assert "Per manifest" in text
    assert [label in text for label in labels].count(True) >= 2
    assert labels[-1] not in text
    assert f"{len(labels) - 2} more manifests not shown" in text


def test_inspect_json_summary_adds_up(sample_out: Path) -> None:
    from cognoxium.packing.manifests import NO_SOURCE

    manifests = sample_out / MANIFESTS_JSONL
    result = runner.invoke(
        app, ["inspect", str(manifests), "--json", "--items", str(SAMPLE / "items.jsonl")]
    )
    assert result.exit_code == EXIT_OK, result.stderr
    assert len(result.stdout.splitlines()) == 1
    summary = json.loads(result.stdout)
    assert summary["command"] == "inspect"
    assert summary["file"] == str(manifests)
    lines = [json.loads(line) for line in manifests.read_text().splitlines()]
    packs = records(sample_out)
    assert summary["manifests"] == len(lines) == 6
    assert summary["budget"]["used_tokens"] == sum(p["used_tokens"] for p in packs)
    assert summary["budget"]["budget_tokens"] == sum(p["budget"] for p in packs)
    entries = [e for m in lines for e in m["entries"]]
    included_tokens = sum(e["tokens"] for e in entries if e["decision"] == "included")
    for key in ("by_role", "by_tier"):
        assert sum(g["included_tokens"] for g in summary[key].values()) == included_tokens
        assert sum(g["items"] for g in summary[key].values()) == len(entries)
    # Included tokens plus reply priming are the used tokens.
    overhead = summary["budget"]["pack_overhead_tokens"]
    assert included_tokens + overhead == summary["budget"]["used_tokens"]
    reasons: dict[str, int] = {}
    for e in entries:
        reasons[e["reason"]] = reasons.get(e["reason"], 0) + 1
    assert summary["reasons"] == dict(sorted(reasons.items()))
    assert summary["decisions"]["included"] == sum(p["ids"].__len__() for p in packs)
    # Every source named is a source of an item; the system policy has none.
    uris = {
        s["uri"]
        for line in (SAMPLE / "items.jsonl").read_text().splitlines()
        for s in json.loads(line).get("sources", [])
    }
    assert set(summary["by_source"]) <= uris | {NO_SOURCE}
    assert summary["by_source"][NO_SOURCE]["included"] >= 6
    assert [m["label"] for m in summary["per_manifest"]] == [p["request_id"] for p in packs]


def test_inspect_reads_one_manifest_as_json(sample_out: Path, tmp_path: Path) -> None:
    first = json.loads((sample_out / MANIFESTS_JSONL).read_text().splitlines()[0])
    single = tmp_path / "manifest.json"
    single.write_text(json.dumps(first, indent=2))
    result = runner.invoke(app, ["inspect", str(single), "--json"])
    assert result.exit_code == EXIT_OK, result.stderr
    summary = json.loads(result.stdout)
    assert summary["manifests"] == 1
    assert summary["per_manifest"][0]["label"] == first["label"]
    many = tmp_path / "manifests.json"
    many.write_text(json.dumps([first, first]))
    result = runner.invoke(app, ["inspect", str(many), "--json"])
    assert json.loads(result.stdout)["manifests"] == 2


def test_inspect_bad_manifests_exit_2_naming_file_line_and_field(
    sample_out: Path, tmp_path: Path
) -> None:
    lines = (sample_out / MANIFESTS_JSONL).read_text().splitlines()
    broken = json.loads(lines[1])
    broken["entries"][3]["reason"] = "lost"
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join([lines[0], json.dumps(broken)]) + "\n")
    result = runner.invoke(app, ["inspect", str(bad)])
    assert result.exit_code == EXIT_BAD_INPUT
    assert one_line_error(result.stderr).startswith(f"error: {bad}:2: field entries[3].reason: ")
    del broken["entries"][0]["tokens"]
    broken["entries"][3]["reason"] = "selected"
    bad.write_text("\n".join([lines[0], "", json.dumps(broken)]) + "\n")
    result = runner.invoke(app, ["inspect", str(bad)])
    assert result.exit_code == EXIT_BAD_INPUT
    assert one_line_error(result.stderr).startswith(f"error: {bad}:3: field entries[0].tokens: ")
    header = json.loads(lines[0])
    header["used_tokens"] = "many"
    bad.write_text(json.dumps(header) + "\n")
    result = runner.invoke(app, ["inspect", str(bad)])
    assert result.exit_code == EXIT_BAD_INPUT
    assert one_line_error(result.stderr).startswith(f"error: {bad}:1: field used_tokens: ")
    bad.write_text(lines[0] + "\n{not json\n")
    result = runner.invoke(app, ["inspect", str(bad)])
    assert result.exit_code == EXIT_BAD_INPUT
    assert one_line_error(result.stderr).startswith(f"error: {bad}:2: invalid JSON")
    bad.write_bytes(lines[0].encode() + b"\n\xff\n")
    result = runner.invoke(app, ["inspect", str(bad)])
    assert result.exit_code == EXIT_BAD_INPUT
    assert one_line_error(result.stderr).startswith(f"error: {bad}:2: not UTF-8 text")
    result = runner.invoke(app, ["inspect", str(tmp_path / "absent.jsonl")])
    assert result.exit_code == EXIT_BAD_INPUT


# ---------------------------------------------------------------------------
# --quiet, --json, progress bars and help on every command


def command_args(tmp_path: Path, command: str) -> list[str]:
    data = tmp_path / "tiny.json"
    data.write_text("[]")
    return {
        "pack": [
            "pack",
            str(SAMPLE / "items.jsonl"),
            str(SAMPLE / "requests.jsonl"),
            "--out",
            str(tmp_path / "out"),
            "--as-of",
            AS_OF,
        ],
        "locomo": ["locomo", str(data), "--out", str(tmp_path / "out")],
        "redact": ["redact", str(SAMPLE / "items.jsonl"), str(tmp_path / "redacted.jsonl")],
        "inspect": ["inspect", str(SAMPLE.parent / "sample" / "requests.jsonl")],
    }[command]


COMMANDS = ["pack", "locomo", "train-ranker", "redact", "inspect"]


def test_every_command_is_covered() -> None:
    from typer.main import get_command

    assert sorted(get_command(app).commands) == sorted(COMMANDS)  # type: ignore[attr-defined]


@pytest.mark.parametrize("command", ["pack", "locomo", "redact"])
def test_quiet_prints_nothing_and_json_prints_one_summary(tmp_path: Path, command: str) -> None:
    args = command_args(tmp_path, command)
    quiet = runner.invoke(app, [*args, "--quiet"])
    assert quiet.exit_code == EXIT_OK, quiet.stderr
    assert quiet.stdout == ""
    assert quiet.stderr == ""
    loud = runner.invoke(app, args)
    assert loud.exit_code == EXIT_OK, loud.stderr
    assert loud.stdout.strip()
    as_json = runner.invoke(app, [*args, "--json"])
    assert as_json.exit_code == EXIT_OK, as_json.stderr
    assert len(as_json.stdout.splitlines()) == 1
    summary = json.loads(as_json.stdout)
    assert summary["command"] == command
    assert all(Path(path).exists() for path in summary["files"].values())
    if command == "pack":
        assert summary["requests"] == 6
    if command == "redact":
        assert summary["items"] == len((SAMPLE / "items.jsonl").read_text().splitlines())
        assert summary["redacted_items"] <= summary["items"]


def test_inspect_quiet_only_checks(sample_out: Path) -> None:
    result = runner.invoke(app, ["inspect", str(sample_out / MANIFESTS_JSONL), "--quiet"])
    assert result.exit_code == EXIT_OK
    assert result.stdout == ""
    result = runner.invoke(app, ["inspect", str(SAMPLE / "requests.jsonl"), "--quiet"])
    assert result.exit_code == EXIT_BAD_INPUT
    assert "field entries: missing" in result.stderr


@pytest.mark.parametrize(
    ("flags", "shown"),
    [([], True), (["--quiet"], False), (["--json"], False), (["--no-progress"], False)],
)
@pytest.mark.parametrize("command", ["pack", "locomo"])
def test_progress_bar_is_off_with_quiet_or_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str, flags: list[str], shown: bool
) -> None:
    import cognoxium.app.batch
    import cognoxium.app.locomo

    seen: list[bool] = []
    target = cognoxium.app.batch.run_batch if command == "pack" else cognoxium.app.locomo.run_locomo

    def spy(*args: object, **kwargs: object) -> object:
        seen.append(bool(kwargs["progress"]))
        return target(*args, **kwargs)  # type: ignore[operator]

    module = cognoxium.app.batch if command == "pack" else cognoxium.app.locomo
    monkeypatch.setattr(module, target.__name__, spy)
    result = runner.invoke(app, [*command_args(tmp_path, command), *flags])
    assert result.exit_code == EXIT_OK, result.stderr
    assert seen == [shown]


@pytest.mark.parametrize(
    ("terminal", "enabled", "shown"),
    [("1", True, True), ("0", True, False), ("1", False, False)],
)
def test_progress_bar_only_on_a_terminal(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    terminal: str,
    enabled: bool,
    shown: bool,
) -> None:
    from cognoxium.app.batch import _progress

    monkeypatch.setenv("TTY_COMPATIBLE", terminal)  # rich's terminal detection
    with _progress(3, enabled=enabled) as advance:
        for _ in range(3):
            advance()
    captured = capsys.readouterr()
    assert captured.out == ""
    assert ("packing" in captured.err) is shown


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_help_has_examples_and_exit_codes(command: str) -> None:
    result = runner.invoke(app, [command, "--help"])
    assert result.exit_code == EXIT_OK
    text = " ".join(result.stdout.split())
    assert "Example" in text
    assert f"cognoxium {command} " in text
    # Only the commands that pack can exit with 3 (infeasible budget).
    if command in ("pack", "locomo"):
        codes = "Exit codes: 0 ok, 1 usage error, 2 bad input, 3 infeasible budget, 4 internal"
        assert codes in text
    else:
        codes = "Exit codes: 0 ok, 1 usage error, 2 bad input, 4 internal error, 130 SIGINT, 143"
        assert codes in text
        assert "infeasible" not in text
    assert "--quiet" in text
    assert "--json" in text


def _help_lines(args: list[str]) -> list[str]:
    result = runner.invoke(app, [*args, "--help"])
    assert result.exit_code == EXIT_OK, result.output
    return result.stdout.splitlines()


@pytest.mark.parametrize("command", [None, *COMMANDS])
def test_piped_help_keeps_examples_and_metavars_whole(
    command: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    import re

    from rich.cells import cell_len
    from typer import rich_utils

    from cognoxium.app.cli import PIPED_HELP_WIDTH

    args = [] if command is None else [command]
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.setattr(rich_utils, "MAX_WIDTH", 1000)  # as TERMINAL_WIDTH=1000: nothing wraps
    whole = "\n".join(_help_lines(args))
    monkeypatch.setattr(rich_utils, "MAX_WIDTH", None)  # no width setting: standard output decides
    lines = _help_lines(args)  # CliRunner's standard output is not a terminal
    assert rich_utils.MAX_WIDTH is None  # the run's width is not left behind
    assert max(cell_len(line) for line in lines) == PIPED_HELP_WIDTH
    examples = re.findall(r"^ +(cognoxium [^\n]*?) *$", whole, flags=re.MULTILINE)
    metavars = set(re.findall(r"<[\w .|-]+>", whole))
    assert examples
    assert metavars or command is None  # the top level has only flags, which take no value
    for piece in [*examples, *metavars]:
        assert any(piece in line for line in lines), piece


def test_help_at_a_terminal_or_a_set_width_is_left_to_rich_and_typer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from rich.cells import cell_len
    from typer import rich_utils

    monkeypatch.setattr(rich_utils, "MAX_WIDTH", 90)  # TERMINAL_WIDTH=90
    assert max(cell_len(line) for line in _help_lines(["pack"])) == 90
    monkeypatch.setattr(rich_utils, "MAX_WIDTH", None)
    monkeypatch.setenv("COLUMNS", "100")
    assert max(cell_len(line) for line in _help_lines(["pack"])) == 100


def test_redact_exit_codes(tmp_path: Path) -> None:
    bad = tmp_path / "items.jsonl"
    bad.write_text('{"id": "a", "role": "user", "text": "hi"}\n{"id": "b", "role": "bot"}\n')
    result = runner.invoke(app, ["redact", str(bad), str(tmp_path / "out.jsonl")])
    assert result.exit_code == EXIT_BAD_INPUT
    assert one_line_error(result.stderr).startswith(f"error: {bad}:2: field ")
    result = runner.invoke(app, ["redact", str(SAMPLE / "items.jsonl"), str(tmp_path / "o.csv")])
    assert result.exit_code == EXIT_USAGE
    result = runner.invoke(app, ["redact", str(tmp_path / "absent.jsonl"), str(tmp_path / "o")])
    assert result.exit_code == EXIT_BAD_INPUT


def test_a_store_redacted_by_the_command_line_packs_with_its_counts(tmp_path: Path) -> None:
    items, redacted = tmp_path / "items.jsonl", tmp_path / "redacted.jsonl"
    items.write_text('{"id": "t1", "role": "user", "text": "Mail ana@example.org"}\n')
    requests = tmp_path / "requests.jsonl"
    requests.write_text('{"id": "r1", "budget": 100}\n')
    assert runner.invoke(app, ["redact", str(items), str(redacted), "-q"]).exit_code == EXIT_OK
    out = tmp_path / "out"
    args = [str(redacted), str(requests), "--out", str(out), "--rank", "none", "-q"]
    assert runner.invoke(app, ["pack", *args, "--as-of", AS_OF]).exit_code == EXIT_OK
    (manifest,) = read_manifests(out)
    assert manifest.entries[0].redactions == '{"EMAIL":1}'
    assert manifest.totals.redactions == {"EMAIL": 1}
    summary = json.loads(runner.invoke(app, ["inspect", str(out), "--json"]).stdout)
    assert summary["redactions"] == {"EMAIL": 1}


def test_the_python_api_packs_what_the_command_line_packs(tmp_path: Path) -> None:
    """Each request of the sample, ranked and packed by hand, gives the CLI's manifest bytes."""
    from datetime import datetime

    from cognoxium import CognitionFrame

    out = tmp_path / "cli"
    code, _, stderr = pack(
        str(SAMPLE / "items.jsonl"), str(SAMPLE / "requests.jsonl"), "--out", str(out),
        "--as-of", AS_OF,
    )  # fmt: skip
    assert code == EXIT_OK, stderr
    written = [m.to_json() for m in read_manifests(out)]
    store = CognitionFrame.read_jsonl(SAMPLE / "items.jsonl")
    as_of = datetime.fromisoformat(AS_OF)
    requests = [json.loads(line) for line in (SAMPLE / "requests.jsonl").read_text().splitlines()]
    assert len(written) == len(requests)
    for request, line in zip(requests, written, strict=True):
        scope = store.filter(request["where"]) if request.get("where") else store
        if "query" not in request:  # not ranked, as the command line does
            ranked = scope
        else:
            ranked = scope.rank("learned", query=request["query"], lineage=store)
            top = ranked.explain().splitlines()[0]
            assert top.startswith("Rank learned query=")
            assert "lineage from the second input" in top
        when = datetime.fromisoformat(request["as_of"]) if "as_of" in request else as_of
        result = ranked.pack(request["budget"], profile="cl100k_base", as_of=when,
                             label=request["id"])  # fmt: skip
        assert result.manifest.to_json() == line, request["id"]


def test_manifests_option_names_the_files_written(tmp_path: Path) -> None:
    args = [str(SAMPLE / "items.jsonl"), str(SAMPLE / "requests.jsonl"), "--as-of", AS_OF]
    args += ["--rank", "bm25", "--json"]
    written = {}
    for form in ("parquet", "jsonl"):
        out = tmp_path / form
        code, stdout, stderr = pack(*args, "--out", str(out), "--manifests", form)
        assert code == EXIT_OK, stderr
        written[form] = json.loads(stdout)["files"]
        assert sorted(Path(p).name for p in written[form].values()) == sorted(
            p.name for p in out.iterdir()
        )
    assert {role: Path(p).name for role, p in written["parquet"].items()} == {
        "packs": "packs",
        "manifests": "manifests",
        "manifest_headers": "manifest_headers",
    }
    assert {role: Path(p).name for role, p in written["jsonl"].items()} == {
        "packs": "packs",
        "manifests": "manifests",
    }
    code, _, stderr = pack(*args, "--out", str(tmp_path / "x"), "--manifests", "csv")
    assert code == EXIT_USAGE
    assert "csv" in stderr
    assert not (tmp_path / "x").exists()


def test_inspect_of_a_directory_without_manifests_exits_2(tmp_path: Path) -> None:
    result = runner.invoke(app, ["inspect", str(tmp_path)])
    assert result.exit_code == EXIT_BAD_INPUT
    assert one_line_error(result.stderr).startswith(
        f"error: {tmp_path}: holds no manifests (manifests/part-<n>.parquet or .jsonl)"
    )


def test_pack_turns_and_start_on_user(tmp_path: Path) -> None:
    out = tmp_path / "turns"
    args = ("--out", str(out), "--as-of", AS_OF, "--rank", "bm25", "--manifests", "jsonl")
    args += ("--turns", "--start-on", "user")
    code, _, stderr = pack(str(SAMPLE / "items.jsonl"), str(SAMPLE / "requests.jsonl"), *args)
    assert code == EXIT_OK, stderr
    roles = {
        item["id"]: item["role"]
        for item in map(json.loads, (SAMPLE / "items.jsonl").read_text().splitlines())
    }
    packs = records(out)
    assert len(packs) == 6
    for line in packs:  # after the system block, every pack starts on a user message
        rest = [roles[i] for i in line["ids"] if roles[i] not in ("system", "developer")]
        assert not rest or rest[0] in ("user", "document", "memory"), line
    plain = tmp_path / "plain"
    args = ("--out", str(plain), "--as-of", AS_OF, "--rank", "bm25", "--manifests", "jsonl")
    assert pack(str(SAMPLE / "items.jsonl"), str(SAMPLE / "requests.jsonl"), *args)[0] == EXIT_OK
    settings = [
        [json.loads(line)["fingerprints"]["settings"] for line in path.read_text().splitlines()]
        for path in (out / MANIFESTS_JSONL, plain / MANIFESTS_JSONL)
    ]
    assert all(a != b for a, b in zip(*settings, strict=True))  # the options are fingerprinted


def test_pack_for_anthropic_starts_every_pack_on_a_user_message(tmp_path: Path) -> None:
    out = tmp_path / "anthropic"
    args = ("--out", str(out), "--as-of", AS_OF, "--rank", "bm25", "--manifests", "jsonl")
    args += ("--target", "anthropic", "--tool-errors", "error")
    code, _, stderr = pack(str(SAMPLE / "items.jsonl"), str(SAMPLE / "requests.jsonl"), *args)
    assert code == EXIT_OK, stderr
    roles = {
        item["id"]: item["role"]
        for item in map(json.loads, (SAMPLE / "items.jsonl").read_text().splitlines())
    }
    for line in records(out):
        rest = [roles[i] for i in line["ids"] if roles[i] not in ("system", "developer")]
        assert not rest or rest[0] in ("user", "document", "memory"), line
        assert line["body"]["messages"][0]["role"] == "user"  # an Anthropic Messages request
        assert set(line["body"]) <= {"system", "messages"}


@pytest.mark.parametrize("flag", ["--tool-errors", "--target"])
def test_pack_bad_tool_errors_or_target_is_a_usage_error(tmp_path: Path, flag: str) -> None:
    args = ("--out", str(tmp_path / "out"), "--as-of", AS_OF, flag, "ignore")
    code, _, stderr = pack(str(SAMPLE / "items.jsonl"), str(SAMPLE / "requests.jsonl"), *args)
    assert code == EXIT_USAGE
    assert flag in stderr


def test_pack_bad_start_on_is_a_usage_error(tmp_path: Path) -> None:
    args = ("--out", str(tmp_path / "out"), "--as-of", AS_OF, "--start-on", "human")
    code, _, stderr = pack(str(SAMPLE / "items.jsonl"), str(SAMPLE / "requests.jsonl"), *args)
    assert code == EXIT_USAGE
    assert "--start-on" in stderr


# ---------------------------------------------------------------------------
# --json on failure: one {"error": {...}} object on standard output


def json_error(result: object) -> dict[str, object]:
    stdout: str = result.stdout  # type: ignore[attr-defined]
    lines = stdout.splitlines()
    assert len(lines) == 1, stdout
    data = json.loads(lines[0])
    assert list(data) == ["error"]
    error: dict[str, object] = data["error"]
    assert sorted(error) == ["code", "field", "file", "line", "message", "params"]
    return error


def test_json_bad_request_names_code_file_line_and_field(tmp_path: Path) -> None:
    requests = tmp_path / "requests.jsonl"
    requests.write_text('{"id": "a", "budget": 64}\n{"id": "b", "budget": "lots"}\n')
    args = [str(SAMPLE / "items.jsonl"), str(requests), "--out", str(tmp_path / "out")]
    result = runner.invoke(app, ["pack", *args, "--as-of", AS_OF, "--json"])
    assert result.exit_code == EXIT_BAD_INPUT
    error = json_error(result)
    assert error["code"] == "request.invalid"
    assert (error["file"], error["line"], error["field"]) == (str(requests), 2, "budget")
    assert one_line_error(result.stderr) == f"error: {error['message']}"
    plain = runner.invoke(app, ["pack", *args, "--as-of", AS_OF])
    assert plain.exit_code == EXIT_BAD_INPUT
    assert plain.stdout == ""


def test_json_infeasible_budget_carries_budget_costs_and_request(tmp_path: Path) -> None:
    requests = tmp_path / "requests.jsonl"
    requests.write_text('{"id": "small", "budget": 64}\n{"id": "tiny", "budget": 8}\n')
    args = [str(SAMPLE / "items.jsonl"), str(requests), "--out", str(tmp_path / "out")]
    result = runner.invoke(app, ["pack", *args, "--as-of", AS_OF, "--json"])
    assert result.exit_code == EXIT_BUDGET
    error = json_error(result)
    assert error["code"] == "budget.required_overflow"
    params = error["params"]
    assert isinstance(params, dict)
    assert params["budget"] == 8
    assert params["request_id"] == "tiny"
    assert list(params["costs"]) == ["policy"]
    assert params["costs"]["policy"] > 8
    assert (error["file"], error["line"], error["field"]) == (None, None, None)


def test_json_usage_error_names_the_option(tmp_path: Path) -> None:
    args = [str(SAMPLE / "items.jsonl"), str(SAMPLE / "requests.jsonl"), "--out", str(tmp_path)]
    result = runner.invoke(app, ["pack", *args, "--profile", "o200k", "--json"])
    assert result.exit_code == EXIT_USAGE
    error = json_error(result)
    assert error["code"] == "usage.invalid"
    assert error["field"] == "--profile"
    assert "unknown token profile 'o200k'; close matches: o200k_base" in str(error["message"])


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_prints_one_json_error(tmp_path: Path, command: str) -> None:
    absent = str(tmp_path / "absent.json")
    args = {
        "pack": ["pack", absent, str(SAMPLE / "requests.jsonl"), "--out", str(tmp_path / "o")],
        "locomo": ["locomo", absent, "--out", str(tmp_path / "o")],
        "train-ranker": ["train-ranker", absent, "--out", str(tmp_path / "m.json")],
        "redact": ["redact", absent, str(tmp_path / "x.jsonl")],
        "inspect": ["inspect", absent],
    }[command]
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == EXIT_BAD_INPUT
    error = json_error(result)
    assert error["code"] == "file.unreadable"
    assert error["file"] == absent
    assert error["params"] == {"reason": "no such file"}


def _sample_pack_args(tmp_path: Path) -> list[str]:
    items, requests = str(SAMPLE / "items.jsonl"), str(SAMPLE / "requests.jsonl")
    return ["pack", items, requests, "--out", str(tmp_path / "o"), "--as-of", AS_OF]


def test_an_unexpected_exception_exits_4_with_one_json_error_and_its_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import polars as pl

    import cognoxium.app.cli as cli

    def broken(summary: dict[str, object], *, json_output: bool) -> None:
        raise pl.exceptions.ComputeError("a fault inside")

    monkeypatch.setattr(cli, "_report", broken)
    result = runner.invoke(app, [*_sample_pack_args(tmp_path), "--json"])
    assert result.exit_code == EXIT_INTERNAL
    error = json_error(result)
    assert error["code"] == "internal.error"
    assert error["params"] == {"exception": "polars.exceptions.ComputeError"}
    assert "a fault inside" in str(error["message"])
    assert "Traceback (most recent call last)" in result.stderr
    assert result.stderr.splitlines()[-1] == f"error: {error['message']}"
    plain = runner.invoke(app, _sample_pack_args(tmp_path))
    assert (plain.exit_code, plain.stdout) == (EXIT_INTERNAL, "")


def test_ctrl_c_exits_130_with_one_json_error_and_commits_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before, click turned KeyboardInterrupt into "Aborted!" and exit code 1 (a usage error).
    import signal

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr("cognoxium.app.batch.finish_parts", interrupted)
    handler = signal.getsignal(signal.SIGTERM)
    result = runner.invoke(app, [*_sample_pack_args(tmp_path), "--json"])
    assert result.exit_code == EXIT_INTERRUPTED == 130
    error = json_error(result)
    assert error["code"] == "command.interrupted"
    assert error["params"] == {"signal": "SIGINT"}
    assert result.stderr == f"error: {error['message']}\n"
    assert list(tmp_path.iterdir()) == []  # no output, no version directory, no lock file
    assert signal.getsignal(signal.SIGTERM) is handler  # SIGTERM raises only while a command runs


@pytest.mark.parametrize("signum", ["SIGINT", "SIGTERM"])
def test_a_signal_before_the_commit_stops_the_run_and_one_after_it_does_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, signum: str
) -> None:
    # A signal that came once --out held the new run (while the run before it was
    # removed, or the run's memory freed) exited 130 and said the command stopped
    # before it finished: a scheduler took a committed run for a failed one.
    import os
    import signal

    import cognoxium.app._outputs as outputs

    sent = signal.Signals[signum]
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    publish, retire = outputs._publish, outputs._retire

    def signalled(step: Any) -> Any:
        def step_then_signal(*args: Any) -> None:
            os.kill(os.getpid(), sent)
            step(*args)

        return step_then_signal

    monkeypatch.setattr(outputs, "_publish", signalled(publish))
    early = runner.invoke(app, [*_sample_pack_args(tmp_path), "--json"])
    assert early.exit_code == 128 + sent
    assert json_error(early)["params"] == {"signal": signum}
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setattr(outputs, "_publish", publish)
    monkeypatch.setattr(outputs, "_retire", signalled(retire))
    late = runner.invoke(app, [*_sample_pack_args(tmp_path), "--json"])
    assert late.exit_code == 0
    assert json.loads(late.stdout)["command"] == "pack"
    assert late.stderr == (
        f"note: {signum} came after the run was committed; the command finished it\n"
    )
    assert (tmp_path / "o").is_symlink()
    assert (tmp_path / "o" / "packs").is_dir()
    assert {s: signal.getsignal(s) for s in handlers} == handlers


def test_a_cognoxium_error_no_command_expects_is_bad_input(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import cognoxium.app.cli as cli
    from cognoxium.exceptions import PlanError

    def refused(summary: dict[str, object], *, json_output: bool) -> None:
        raise PlanError("a plan refused", params={"node": "x"})

    monkeypatch.setattr(cli, "_report", refused)
    result = runner.invoke(app, [*_sample_pack_args(tmp_path), "--json"])
    assert result.exit_code == EXIT_BAD_INPUT
    error = json_error(result)
    assert (error["code"], error["params"]) == ("plan.invalid", {"node": "x"})
    assert one_line_error(result.stderr) == "error: a plan refused"


def test_json_redact_usage_errors(tmp_path: Path) -> None:
    items = str(SAMPLE / "items.jsonl")
    result = runner.invoke(app, ["redact", items, str(tmp_path / "x.csv"), "--json"])
    assert result.exit_code == EXIT_USAGE
    error = json_error(result)
    assert (error["code"], error["field"]) == ("usage.invalid", "TARGET")
    assert error["message"] == (
        f"{tmp_path / 'x.csv'}: unsupported file type '.csv'; use one of .jsonl, .ndjson, .parquet"
    )
    assert error["params"] == {"suffix": ".csv", "accepted": [".jsonl", ".ndjson", ".parquet"]}
    assert not (tmp_path / "x.csv").exists()


@pytest.mark.parametrize("profile", ["gpt-4o-mini", "approximate", "huggingface:{tokenizer}"])
def test_profile_takes_model_names_approximate_and_huggingface(
    tmp_path: Path, profile: str
) -> None:
    from cognoxium.retrieval.embeddings import _MINILM_TOKENIZER

    name = profile.format(tokenizer=_MINILM_TOKENIZER.locate())
    requests = tmp_path / "requests.jsonl"
    lines = (SAMPLE / "requests.jsonl").read_text().splitlines()
    # approximate counts bytes: give every request eight times its budget.
    scaled = [{**r, "budget": r["budget"] * 8} for r in map(json.loads, lines)]
    requests.write_text("".join(json.dumps(r) + "\n" for r in scaled))
    out = tmp_path / "out"
    args = ["--out", str(out), "--as-of", AS_OF, "--rank", "bm25", "--profile", name, "--json"]
    code, stdout, stderr = pack(str(SAMPLE / "items.jsonl"), str(requests), *args)
    assert code == EXIT_OK, stderr
    assert json.loads(stdout)["requests"] == 6
    manifests = records(out, "manifest_headers")
    assert {m["profile"] for m in manifests} == {name}
    assert {m.get("estimated", False) for m in manifests} == {profile != "gpt-4o-mini"}


def _chat_files(tmp_path: Path, requests: list[dict[str, object]]) -> tuple[Path, Path]:
    """A short chat whose long first reply makes a hole, and the requests, as JSONL files."""
    rows = [
        {"id": "sys", "role": "system", "text": "Be brief.", "retention": "required"},
        {"id": "q1", "role": "user", "text": "Refunds?"},
        {"id": "a1", "role": "assistant", "text": "word " * 80},
        {"id": "q2", "role": "user", "text": "Shipping?"},
        {"id": "a2", "role": "assistant", "text": "Free."},
    ]
    when = {"created_at": "2025-01-01T00:00:00Z"}
    items = tmp_path / "items.jsonl"
    items.write_text("".join(json.dumps({**r, **when}) + "\n" for r in rows))
    lines = tmp_path / "requests.jsonl"
    lines.write_text("".join(json.dumps(r) + "\n" for r in requests))
    return items, lines


def test_pack_gaps_sets_the_requests_without_their_own(tmp_path: Path) -> None:
    items, requests = _chat_files(
        tmp_path, [{"id": "batch", "budget": 40}, {"id": "own", "budget": 40, "gaps": "stop"}]
    )
    out = tmp_path / "out"
    args = (
        "--out",
        str(out),
        "--as-of",
        AS_OF,
        "--rank",
        "bm25",
        "--manifests",
        "jsonl",
        "--gaps",
        "fill",
    )
    code, _, stderr = pack(str(items), str(requests), *args)
    assert code == EXIT_OK, stderr
    packs = {r["request_id"]: r["ids"] for r in records(out, "packs")}
    assert packs == {"batch": ["sys", "q1", "q2", "a2"], "own": ["sys", "q2", "a2"]}
    manifests = {m.label: m for m in read_manifests(out)}
    assert manifests["batch"].gaps == "fill"
    assert manifests["own"].gaps == "stop"
    assert [g.items for g in manifests["batch"].gap_records] == [1]
    assert manifests["own"].order == "recency"


def test_pack_gap_note_puts_a_counted_note_in_each_hole(tmp_path: Path) -> None:
    items, requests = _chat_files(tmp_path, [{"id": "noted", "budget": 60}])
    out = tmp_path / "out"
    args = ("--out", str(out), "--as-of", AS_OF, "--rank", "bm25", "--manifests", "jsonl")
    code, _, stderr = pack(
        str(items), str(requests), *args, "--gaps", "fill", "--gap-note", "({n} omitted)"
    )
    assert code == EXIT_OK, stderr
    (manifest,) = read_manifests(out)
    (gap,) = manifest.gap_records
    note = get_profile("cl100k_base").message_tokens({"role": "system", "content": "(1 omitted)"})
    assert [r["ids"] for r in records(out, "packs")] == [["sys", "q1", "q2", "a2"]]
    assert (gap.items, gap.note_at, gap.note_tokens) == (1, 2, note)  # after sys and q1
    assert manifest.pack_overhead_tokens == 3 + note
    (body,) = [r["body"] for r in records(out, "packs")]
    assert body["messages"][2] == {"role": "system", "content": "(1 omitted)"}  # sent
    ids_only = tmp_path / "ids"
    code, _, stderr = pack(
        str(items), str(requests), *args[2:], "--out", str(ids_only), "--no-bodies"
    )
    assert code == EXIT_OK, stderr
    assert [set(r) for r in records(ids_only, "packs")] == [
        {"budget", "ids", "request_id", "used_tokens"}
    ]


def test_pack_previous_continues_an_earlier_request_billed_by_cache_model(
    tmp_path: Path,
) -> None:
    continued = [{"id": "first", "budget": 60}, {"id": "next", "budget": 60, "previous": "first"}]
    items, requests = _chat_files(tmp_path, continued)
    out = tmp_path / "out"
    args = ("--out", str(out), "--as-of", AS_OF, "--rank", "none", "--manifests", "jsonl")
    code, _, stderr = pack(str(items), str(requests), *args, "--cache-model", "openai:gpt-5")
    assert code == EXIT_OK, stderr
    manifests = {m.label: m for m in read_manifests(out)}
    first, then = manifests["first"], manifests["next"]
    assert first.cache is None
    assert then.cache is not None
    assert then.cache.continues == first.digest
    sent_first = next(r["ids"] for r in records(out, "packs"))
    assert (then.cache.cache_model, then.cache.prefix_ids) == ("openai:gpt-5", sent_first)
    assert then.cache.billed_tokens == then.used_tokens  # under 1,024 tokens: nothing cached
    code, _, stderr = pack(str(items), str(requests), *args, "--cache-model", "openai:gpt-0")
    assert code == EXIT_USAGE
    assert "cache model" in stderr


def test_pack_names_the_requests_whose_where_matches_no_item(tmp_path: Path) -> None:
    # Before, a typo in a where's value gave an empty pack with nothing said.
    typo = "id = 'q9'"  # no such item
    requests = [{"id": "ok", "budget": 60}, {"id": "typo", "budget": 60, "where": typo}]
    items, lines = _chat_files(tmp_path, requests)
    args = ("--out", str(tmp_path / "out"), "--as-of", AS_OF, "--rank", "none")
    code, _, stderr = pack(str(items), str(lines), *args)
    assert code == EXIT_OK
    assert "warning: 1 request(s) packed empty, their where matching no item: 'typo'" in stderr
    code, stdout, stderr = pack(str(items), str(lines), *args, "--json")
    assert (code, json.loads(stdout)["unscoped"], stderr) == (EXIT_OK, 1, "")


def test_pack_names_the_requests_that_left_out_their_newest_user_message(tmp_path: Path) -> None:
    # Before, an exported chat whose newest message alone exceeded the budget was packed
    # as its system prompt alone, exit 0, with nothing said.
    rows = [
        {"id": "sys", "role": "system", "text": "Be brief.", "retention": "required"},
        {"id": "q1", "role": "user", "text": "Refunds?"},
        {"id": "a1", "role": "assistant", "text": "Within 30 days."},
        {"id": "q2", "role": "user", "text": "Here is my log: " + "error 42 " * 300},
    ]
    items = tmp_path / "items.jsonl"
    items.write_text(
        "".join(json.dumps({**r, "created_at": "2025-01-01T00:00:00Z"}) + "\n" for r in rows)
    )
    requests = [
        {"id": "short", "budget": 60},  # too small for the question, even cut to 64 tokens
        {"id": "fill", "budget": 60, "gaps": "fill"},  # sends the older question instead
        {"id": "whole", "budget": 2000},
        {"id": "ranked", "budget": 100, "query": "refunds"},  # a ranked pack is not a chat tail
        {"id": "cut", "budget": 100},  # the question the model answers next, cut to fit
    ]
    lines = tmp_path / "requests.jsonl"
    lines.write_text("".join(json.dumps(r) + "\n" for r in requests))
    args = ("--out", str(tmp_path / "out"), "--as-of", AS_OF, "--rank", "bm25")
    code, _, stderr = pack(str(items), str(lines), *args)
    assert code == EXIT_OK
    assert "warning: 2 request(s) left out their newest user message" in stderr
    assert stderr.rstrip().endswith("'short', 'fill'; raise the budget, or mark long messages "
                                    "truncatable (metadata.truncate)")  # fmt: skip
    ids = {r["request_id"]: r["ids"] for r in records(tmp_path / "out", "packs")}
    assert (ids["short"], ids["fill"], ids["whole"][-1]) == (["sys"], ["sys", "q1", "a1"], "q2")
    assert ids["cut"] == ["sys", "q1", "a1", "q2"]  # cut to its floor, the history beside it
    code, stdout, stderr = pack(str(items), str(lines), *args, "--json")
    assert (code, json.loads(stdout)["newest_user_left_out"], stderr) == (EXIT_OK, 2, "")


@pytest.mark.parametrize(
    ("cache_model", "target", "warned"),
    [
        ("anthropic", "openai", "use --target anthropic"),
        ("anthropic", "anthropic", None),
        ("openai:gpt-5", "anthropic", "use --target openai"),
        ("openai:gpt-5", "openai", None),
    ],
)
def test_pack_warns_of_a_cache_model_its_target_does_not_use(
    tmp_path: Path, cache_model: str, target: str, warned: str | None
) -> None:
    # Before, --cache-model anthropic with the default target billed cached tokens in the
    # manifests while the OpenAI bodies carried no cache_control mark, and nothing was said.
    items = tmp_path / "items.jsonl"
    items.write_text(json.dumps({"id": "a", "role": "user", "text": "hi", "created_at": AS_OF}))
    lines = tmp_path / "requests.jsonl"
    lines.write_text(json.dumps({"id": "r", "budget": 100}) + "\n")
    args = ("--out", str(tmp_path / "out"), "--as-of", AS_OF, "--rank", "none")
    options = ("--cache-model", cache_model, "--target", target)
    code, _, stderr = pack(str(items), str(lines), *args, *options)
    assert code == EXIT_OK
    if warned is None:
        assert "warning" not in stderr
    else:
        assert stderr.startswith(f"warning: --cache-model {cache_model}")
        assert f"not --target {target} ones" in stderr
        assert warned in stderr


_DEFAULT_RANK_STATEMENTS = (
    r"the default, `?([a-z][a-z-]*)`?,",
    r"by default with (?:the )?`?([a-z][a-z-]*)",
    r"the default `--rank ([a-z][a-z-]*)`",
    r"\b([a-z][a-z-]*) is the default of `cognoxium pack`",
)
"""How the README, the docs and ``--help`` name the default rank method."""


def test_readme_docs_and_help_state_the_code_default_rank() -> None:
    import inspect
    import re

    from cognoxium.app.batch import run_batch
    from cognoxium.app.cli import locomo_command, pack_command
    from cognoxium.app.locomo import run_locomo

    default = inspect.signature(run_batch).parameters["rank"].default
    for function in (pack_command, locomo_command, run_locomo):
        assert inspect.signature(function).parameters["rank"].default == default
    root = Path(__file__).resolve().parents[2]
    help_text = runner.invoke(app, ["pack", "--help"]).stdout
    sources = {
        "README.md": (root / "README.md").read_text(encoding="utf-8"),
        "docs/index.md": (root / "docs" / "index.md").read_text(encoding="utf-8"),
        "docs/how-to/batch.md": (root / "docs" / "how-to" / "batch.md").read_text("utf-8"),
        "docs/how-to/locomo.md": (root / "docs" / "how-to" / "locomo.md").read_text("utf-8"),
        "pack --help": help_text,
    }
    for name, text in sources.items():
        flat = " ".join(text.split())
        named = [m for p in _DEFAULT_RANK_STATEMENTS for m in re.findall(p, flat, flags=re.I)]
        assert named, f"{name} does not state the default rank"
        assert set(named) == {default}, (name, named)


@pytest.mark.parametrize(
    ("command", "usage"),
    [
        ("pack", "Usage: cognoxium pack [OPTIONS] ITEMS [REQUESTS]"),
        ("locomo", "Usage: cognoxium locomo [OPTIONS] PATH"),
        ("train-ranker", "Usage: cognoxium train-ranker [OPTIONS] PATH"),
        ("redact", "Usage: cognoxium redact [OPTIONS] SOURCE TARGET"),
        ("inspect", "Usage: cognoxium inspect [OPTIONS] MANIFESTS"),
    ],
)
def test_usage_names_arguments_and_flags_take_no_value(command: str, usage: str) -> None:
    result = runner.invoke(app, [command, "--help"])
    assert result.exit_code == EXIT_OK
    text = " ".join(result.stdout.split())
    assert usage in text
    assert "<bool>" not in text
    assert "{" not in text.split("Usage:")[1].split("[OPTIONS]")[1].split(" ")[1]


def test_the_top_level_help_shows_no_bool_value() -> None:
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == EXIT_OK
    assert "<bool>" not in result.stdout
    assert "--version" in result.stdout


def test_the_cli_choices_of_the_pack_options_are_the_options_values() -> None:
    # The command line keeps its own enums (--help loads no packing module): the same values.
    from cognoxium.app import cli
    from cognoxium.packing import options

    pairs = [
        (cli.Overflow, options.OVERFLOW_MODES),
        (cli.StartOn, options.START_ON),
        (cli.ToolErrors, options.TOOL_ERRORS),
        (cli.Target, options.TARGETS),
        (cli.Gaps, options.GAP_MODES),
    ]
    for enum, values in pairs:
        assert sorted(e.value for e in enum) == sorted(values), enum.__name__


def write_chats(path: Path, conversations: dict[str, list[dict[str, object]]]) -> Path:
    """A chat export: one {"conversation_id", "messages"} line per conversation."""
    lines = [json.dumps({"conversation_id": c, "messages": m}) for c, m in conversations.items()]
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


CHATS: dict[str, list[dict[str, object]]] = {
    "support-1": [
        {"role": "system", "content": "You are Acme support."},
        {"role": "user", "content": "Where is order 7? " * 20},
        {"role": "assistant", "content": "It ships today. " * 20},
        {"role": "user", "content": "And order 8?"},
    ],
    "it's-2": [  # an id a SQL string must quote
        {"role": "user", "content": "Run the tests."},
        {"role": "tool", "tool_call_id": "lost", "content": "3 passed"},  # no call: an orphan
        {"role": "assistant", "content": "They pass."},
    ],
}


def test_pack_conversations_packs_each_conversation_of_a_chat_export(tmp_path: Path) -> None:
    from datetime import datetime

    from cognoxium.app.batch import conversation_requests, run_batch
    from cognoxium.formats.openai import read_openai_conversations
    from cognoxium.packing.manifests import read_bodies
    from cognoxium.packing.options import PackOptions

    chats = write_chats(tmp_path / "chats.jsonl", CHATS)
    args = ("--out", str(tmp_path / "cli"), "--as-of", AS_OF, "--manifests", "jsonl")
    code, _, stderr = pack(str(chats), "--conversations", "--budget", "60", *args)
    assert code == EXIT_OK, stderr
    bodies = dict(read_bodies(tmp_path / "cli"))
    assert list(bodies) == ["support-1", "it's-2"]
    first, second = bodies.values()
    assert first is not None
    assert second is not None
    assert [m["content"] for m in first["messages"]] == ["You are Acme support.", "And order 8?"]
    assert [m["role"] for m in second["messages"]] == ["user", "assistant"]  # orphan left out
    manifests = records(tmp_path / "cli", "manifests")
    reasons = {e["id"]: e["reason"] for e in manifests[1]["entries"]}
    assert reasons["it's-2:1"] == "tool_result_orphan"
    # the same files as the Python calls the flag stands for
    store = read_openai_conversations(chats, tool_errors="keep")
    run_batch(
        store,
        conversation_requests(store, 60),
        out_dir=tmp_path / "python",
        options=PackOptions(as_of=datetime.fromisoformat(AS_OF)),
        manifests="jsonl",
    )
    names = layout(tmp_path / "python")
    assert names == layout(tmp_path / "cli")
    assert_same_outputs(tmp_path / "cli", tmp_path / "python", names)


def test_pack_conversations_with_tool_errors_error_refuses_a_broken_export(tmp_path: Path) -> None:
    chats = write_chats(tmp_path / "chats.jsonl", CHATS)
    args = ("--budget", "60", "--out", str(tmp_path / "out"), "--tool-errors", "error")
    code, _, stderr = pack(str(chats), "--conversations", *args)
    assert code == EXIT_BAD_INPUT
    assert f"{chats}:2" in stderr
    assert "tool" in stderr
    assert not (tmp_path / "out").exists()


def _now(call_id: str, arguments: str) -> dict[str, object]:
    return {"id": call_id, "type": "function", "function": {"name": "now", "arguments": arguments}}


TRUNCATED_CALL: dict[str, list[dict[str, object]]] = {
    "greet": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello."},
    ],
    "clock": [  # one call of two cut off mid-arguments: Anthropic takes no such tool_use
        {"role": "user", "content": "Time in Paris and Rome?"},
        {"role": "assistant", "content": None, "tool_calls": [
            _now("c1", '{"city": "Par'), _now("c2", '{"city": "Rome"}')]},
        {"role": "tool", "tool_call_id": "c1", "content": "12:00"},
        {"role": "tool", "tool_call_id": "c2", "content": "12:00"},
        {"role": "user", "content": "Thanks"},
    ],
    "weather": [  # blank arguments: a tool without parameters, the empty input
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": None, "tool_calls": [_now("w1", "")]},
        {"role": "tool", "tool_call_id": "w1", "content": "sunny"},
    ],
}  # fmt: skip


def test_pack_conversations_for_anthropic_leaves_out_a_call_it_cannot_send(
    tmp_path: Path,
) -> None:
    from cognoxium.packing.message_rules import validate_anthropic_messages

    chats = write_chats(tmp_path / "chats.jsonl", TRUNCATED_CALL)
    args = ("--budget", "200", "--as-of", AS_OF, "--manifests", "jsonl", "--target", "anthropic")
    code, _, stderr = pack(str(chats), "--conversations", "--out", str(tmp_path / "out"), *args)
    assert code == EXIT_OK, stderr
    lines = records(tmp_path / "out")
    assert [line["request_id"] for line in lines] == ["greet", "clock", "weather"]
    assert [line["ids"] for line in lines] == [
        ["greet:0", "greet:1", "greet:2"],
        ["clock:0", "clock:4"],  # the question and the thanks; the call and its results out
        ["weather:0", "weather:1", "weather:2"],
    ]
    for line in lines:
        validate_anthropic_messages(line["body"])
    assert lines[2]["body"]["messages"][1]["content"][0]["input"] == {}
    manifests = records(tmp_path / "out", "manifests")
    reasons = {e["id"]: e["reason"] for e in manifests[1]["entries"]}
    assert [reasons[f"clock:{k}"] for k in (1, 2, 3)] == ["tool_call_arguments_invalid"] * 3
    profile = get_profile("cl100k_base")
    sent = [{"role": "user", "content": "Time in Paris and Rome?"}, TRUNCATED_CALL["clock"][4]]
    assert lines[1]["used_tokens"] == profile.request_tokens(sent)
    # without the target the call is sent as it came, for Chat Completions
    code, _, stderr = pack(str(chats), "--conversations", "--out", str(tmp_path / "o"), *args[:6])
    assert code == EXIT_OK, stderr
    assert records(tmp_path / "o")[1]["ids"] == [f"clock:{k}" for k in range(5)]


def test_pack_conversations_for_anthropic_with_tool_errors_error_names_the_call(
    tmp_path: Path,
) -> None:
    chats = write_chats(tmp_path / "chats.jsonl", TRUNCATED_CALL)
    args = ("--budget", "200", "--target", "anthropic", "--tool-errors", "error")
    code, _, stderr = pack(str(chats), "--conversations", "--out", str(tmp_path / "out"), *args)
    assert code == EXIT_BAD_INPUT
    assert "request 'clock': message 1 of the pack (item 'clock:1', row 1)" in stderr
    assert "rule tool_call_arguments_invalid" in stderr
    assert "['c1']" in stderr
    assert not (tmp_path / "out").exists()


REUSED_CALL_IDS: dict[str, list[dict[str, object]]] = {
    "greet": TRUNCATED_CALL["greet"],
    "clock": [  # a local model server that numbers each turn's calls from call_0
        {"role": "user", "content": "Time?"},
        {"role": "assistant", "content": None, "tool_calls": [_now("call_0", "{}")]},
        {"role": "tool", "tool_call_id": "call_0", "content": "12:00"},
        {"role": "assistant", "content": None, "tool_calls": [_now("call_0", "{}")]},
        {"role": "tool", "tool_call_id": "call_0", "content": "12:01"},
        {"role": "assistant", "content": "It is 12:01."},
    ],
}  # fmt: skip


@pytest.mark.parametrize("target", ["openai", "anthropic"])
@pytest.mark.parametrize("tool_errors", ["repair", "error"])
def test_pack_conversations_takes_a_call_id_reused_by_a_later_turn(
    tmp_path: Path, target: str, tool_errors: str
) -> None:
    from cognoxium.packing.message_rules import (
        validate_anthropic_messages,
        validate_openai_messages,
    )

    chats = write_chats(tmp_path / "chats.jsonl", REUSED_CALL_IDS)
    args = ("--budget", "500", "--as-of", AS_OF, "--target", target, "--tool-errors", tool_errors)
    code, _, stderr = pack(str(chats), "--conversations", "--out", str(tmp_path / "out"), *args)
    assert code == EXIT_OK, stderr
    lines = records(tmp_path / "out")
    assert [line["ids"] for line in lines] == [
        ["greet:0", "greet:1", "greet:2"],
        [f"clock:{k}" for k in range(6)],
    ]
    body = lines[1]["body"]
    if target == "anthropic":
        validate_anthropic_messages(body)
        assert body["messages"][3]["content"][0]["id"] == "call_0-2"
    else:
        validate_openai_messages(body["messages"])
        assert body["messages"][4]["tool_call_id"] == "call_0-2"


def test_pack_conversations_names_the_line_of_a_bad_conversation(tmp_path: Path) -> None:
    chats = write_chats(tmp_path / "chats.jsonl", CHATS)
    with chats.open("a", encoding="utf-8") as out:
        out.write(json.dumps({"conversation_id": "c3", "messages": {"role": "user"}}) + "\n")
    code, _, stderr = pack(str(chats), "--conversations", "--budget", "60", "--out", "o")
    assert code == EXIT_BAD_INPUT
    assert f"{chats}:3" in stderr
    assert "messages" in stderr


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ((), "REQUESTS is needed, unless --conversations and --budget"),
        (("--budget", "60"), "--budget packs each conversation of a chat export: give it with"),
        (("REQUESTS", "--conversations", "--budget", "60"), "not both"),
        (("--conversations", "--budget", "60", "--engine", "ray"), "--engine ray packs"),
        (("PARQUET", "--budget", "60"), "--conversations reads a .jsonl file"),
    ],
)
def test_pack_without_requests_or_with_them_twice_is_a_usage_error(
    tmp_path: Path, extra: tuple[str, ...], named: str
) -> None:
    chats = write_chats(tmp_path / "chats.jsonl", CHATS)
    requests = tmp_path / "requests.jsonl"
    requests.write_text(json.dumps({"id": "r", "budget": 9}) + "\n")
    given = tuple(str(requests) if arg == "REQUESTS" else arg for arg in extra)
    source = chats
    if given[:1] == ("PARQUET",):  # a store of items given as a chat export
        source = tmp_path / "items.parquet"
        source.write_bytes(b"PAR1")
        given = ("--conversations", *given[1:])
    code, _, stderr = pack(str(source), *given, "--out", str(tmp_path / "out"))
    assert code == EXIT_USAGE
    assert named in " ".join(stderr.split())
    assert not (tmp_path / "out").exists()


def test_pack_conversations_packs_an_empty_conversation_empty_and_says_so(tmp_path: Path) -> None:
    # An empty conversation has no item: it was left out of the packs without a word.
    chats = write_chats(tmp_path / "chats.jsonl", {"a": CHATS["support-1"], "empty": [], "b": []})
    with chats.open("a", encoding="utf-8") as out:
        out.write("\n")  # a blank line is no conversation
    args = ("--out", str(tmp_path / "out"), "--as-of", AS_OF)
    code, _, stderr = pack(str(chats), "--conversations", "--budget", "60", *args)
    assert code == EXIT_OK
    lines = records(tmp_path / "out")
    assert [line["request_id"] for line in lines] == ["a", "empty", "b"]
    assert [line["body"] for line in lines[1:]] == [{"messages": []}] * 2
    assert stderr == "warning: 2 conversation(s) packed empty, holding no message: 'empty', 'b'\n"


def test_pack_conversations_names_the_budget_as_the_remedy_for_a_question_left_out(
    tmp_path: Path,
) -> None:
    # A chat export's messages cannot be marked truncatable: the warning said to mark them.
    long = [{"role": "user", "content": "x " * 400}]
    chats = write_chats(tmp_path / "chats.jsonl", {"long": long})
    args = ("--conversations", "--budget", "60", "--out", str(tmp_path / "out"))
    code, _, stderr = pack(str(chats), *args)
    assert code == EXIT_OK
    assert "1 request(s) left out their newest user message" in stderr
    assert stderr.rstrip().endswith("'long'; raise --budget")


@pytest.mark.parametrize("extra", [(), ("--reserve", "40"), ("--target", "anthropic")])
def test_pack_conversations_names_the_budget_a_long_system_prompt_needs(
    tmp_path: Path, extra: tuple[str, ...]
) -> None:
    # It said to lower their retention or mark them truncatable, which an export cannot.
    system = [{"role": "system", "content": "Follow the rules. " * 40}]
    chats = write_chats(tmp_path / "chats.jsonl", {"ok": CHATS["support-1"], "rules": system})
    args = ("--conversations", *extra, "--as-of", AS_OF, "--json")
    code, stdout, _ = pack(str(chats), *args, "--budget", "60", "--out", str(tmp_path / "a"))
    assert code == EXIT_BUDGET
    error = json.loads(stdout)["error"]
    needed = error["params"]["budget_needed"]
    assert error["params"]["request_id"] == "rules"
    assert error["message"].startswith("conversation 'rules': its system and developer messages")
    assert error["message"].endswith(f"; raise --budget to at least {needed}")
    assert "retention" not in error["message"]
    short, _, _ = pack(str(chats), *args, "--budget", str(needed - 1), "--out", str(tmp_path / "b"))
    assert short == EXIT_BUDGET
    fits, _, stderr = pack(str(chats), *args, "--budget", str(needed), "--out", str(tmp_path / "c"))
    assert fits == EXIT_OK, stderr


def test_pack_scopes_by_a_metadata_key_beside_one_whose_values_differ_in_type(
    tmp_path: Path,
) -> None:
    # The batch's split decoded the whole metadata: Polars' ComputeError came through, exit 1.
    items = tmp_path / "items.jsonl"
    rows = [
        {"id": "a", "role": "document", "text": "A", "metadata": {"source": "kb", "l": {"h": 1}}},
        {"id": "b", "role": "document", "text": "B", "metadata": {"source": "web", "l": "x"}},
        {"id": "c", "role": "document", "text": "C", "metadata": {"source": "kb", "vip": 1}},
        {"id": "d", "role": "document", "text": "D", "metadata": {"source": "kb", "vip": True}},
    ]
    items.write_text("".join(json.dumps(row) + "\n" for row in rows))
    wheres = ["metadata.source = 'kb'", "metadata.source IN ('web')", "metadata.vip = 1"]
    requests = tmp_path / "requests.jsonl"
    lines = [json.dumps({"id": f"r{k}", "budget": 100, "where": w}) for k, w in enumerate(wheres)]
    requests.write_text("\n".join(lines[:2]) + "\n")
    args = ("--rank", "none", "--as-of", AS_OF, "--json")
    code, _, stderr = pack(str(items), str(requests), "--out", str(tmp_path / "o"), *args)
    assert code == EXIT_OK, stderr
    assert [line["ids"] for line in records(tmp_path / "o")] == [["a", "c", "d"], ["b"]]
    requests.write_text(json.dumps({"id": "vip", "budget": 100, "where": wheres[2]}) + "\n")
    code, stdout, _ = pack(str(items), str(requests), "--out", str(tmp_path / "p"), *args)
    assert code == EXIT_BAD_INPUT
    assert (
        "metadata.vip holds values of different JSON types"
        in json.loads(stdout)["error"]["message"]
    )


def test_inspect_refuses_a_run_of_another_format_or_missing_a_part(
    sample_runs: dict[str, Path], tmp_path: Path
) -> None:
    import shutil

    run = tmp_path / "run"
    shutil.copytree(sample_runs["parquet"].resolve(), run)
    headers = run / "manifest_headers" / "part-00000.jsonl"
    text = headers.read_text()
    headers.write_text(text.replace("pack_manifest/1", "pack_manifest/9"))
    result = runner.invoke(app, ["inspect", str(run), "--json"])
    assert result.exit_code == EXIT_BAD_INPUT
    error = json.loads(result.stdout)["error"]
    assert (error["file"], error["line"], error["field"]) == (str(headers), 1, "format")
    assert error["params"]["format"] == "cognoxium.pack_manifest/9"
    headers.write_text(text)
    for table, suffix in (("manifests", "parquet"), ("manifest_headers", "jsonl")):
        shutil.copy(run / table / f"part-00000.{suffix}", run / table / f"part-00002.{suffix}")
    result = runner.invoke(app, ["inspect", str(run), "--json"])
    assert result.exit_code == EXIT_BAD_INPUT
    error = json.loads(result.stdout)["error"]
    assert error["file"] == str(run / "manifests" / "part-00001.parquet")


def test_inspect_limit_help_names_every_table_it_cuts() -> None:
    result = runner.invoke(app, ["inspect", "--help"], env={"COLUMNS": "200"})
    text = " ".join(result.stdout.split())
    assert "Rows shown in each of the tables by role, tier and source, and per manifest" in text


def test_an_order_warning_is_a_plain_line_naming_no_library_source(tmp_path: Path) -> None:
    # Python printed the warning after the source line that raised it, for the command a
    # line of typer's main.py; the command prints it as its other warnings, once.
    rows = [
        {"id": f"m{i}", "role": "user" if i % 2 else "assistant", "text": f"message {i}",
         "created_at": f"2025-01-01T00:{59 - i:02d}:00Z"}
        for i in range(8)
    ]  # fmt: skip
    items = tmp_path / "items.jsonl"
    items.write_text("".join(json.dumps(r) + "\n" for r in rows))
    requests = tmp_path / "requests.jsonl"
    requests.write_text('{"id": "a", "budget": 60}\n{"id": "b", "budget": 80}\n')
    args = ["pack", str(items), str(requests), "--out", str(tmp_path / "out"), "--rank", "none"]
    code = "from cognoxium.app.cli import main; import sys; sys.argv[0] = 'cognoxium'; main()"
    done = subprocess.run(
        [sys.executable, "-c", code, *args, "--as-of", AS_OF, "--no-progress"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == EXIT_OK, done.stderr
    warned = [line for line in done.stderr.splitlines() if "created_at falls" in line]
    assert len(warned) == 1
    assert warned[0].startswith("warning: the conversation items' created_at falls")
