"""Batch packing on Ray Data gives the local run's files, byte for byte."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from cognoxium.app import distributed
from cognoxium.app._scopes import batch_units
from cognoxium.app.batch import BatchStats, Request, read_requests, run_batch
from cognoxium.app.cli import app
from cognoxium.app.distributed import read_scope, run_batch_ray, scope_values
from cognoxium.exceptions import DependencyError, RecordError, SchemaError
from cognoxium.frame.frame import CognitionFrame
from cognoxium.items.io import read_items
from cognoxium.items.records import records_to_frame
from cognoxium.items.store import partition_key, read_store, write_partitioned
from cognoxium.packing.options import PackOptions
from tests.app.parts import layout, records
from tests.app.stores import WORDS, chats_ending_long_and_short, synthetic
from tests.data import LOCOMO, needs_locomo
from tests.pins import assert_same_outputs

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "examples" / "sample"
AS_OF = datetime(2025, 6, 1, tzinfo=UTC)


def requests_for(conversations: int, count: int) -> list[Request]:
    """Requests over the conversations, interleaved, with varied budgets and clauses."""
    out = []
    for k in range(count):
        conv = f"c{(k * 7) % conversations:02d}"
        where = f"metadata.conversation = '{conv}'"
        if k % 5 == 4:
            where += " AND role <> 'tool'"
        out.append(Request(id=f"r{k}", budget=30 + 17 * (k % 9), query=WORDS[k % 8], where=where))
    return out


def assert_same_files(left: Path, right: Path) -> None:
    """The same parts of every table, byte for byte; else what differs first."""
    names = layout(left.resolve())
    assert names
    assert layout(right.resolve()) == names
    assert_same_outputs(right.resolve(), left.resolve(), names)


def ray_as_local(
    store: Path,
    requests: Sequence[Request],
    out: Path,
    *,
    items: pl.DataFrame | None = None,
    ray_workers: int | None = None,
    **settings: Any,
) -> tuple[BatchStats, BatchStats]:
    """Run a batch locally and on Ray into ``out/local`` and ``out/ray``: the same files.

    The local run packs ``items`` (default: the store read whole); both runs
    take ``settings`` (default: the bm25 rank, as of AS_OF); Ray runs with
    ``ray_workers`` workers (default: its own).
    """
    settings = {"rank": "bm25", "options": PackOptions(as_of=AS_OF), **settings}
    local = run_batch(
        read_store(store) if items is None else items, requests, out_dir=out / "local", **settings
    )
    if ray_workers is not None:
        settings["workers"] = ray_workers
    remote = run_batch_ray(store, requests, out_dir=out / "ray", **settings)
    assert_same_files(out / "local", out / "ray")
    assert remote.newest_user_left_out == local.newest_user_left_out
    return local, remote


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("store") / "items"
    write_partitioned(synthetic(6, 40), root, key="conversation")
    return root


@pytest.mark.parametrize(
    ("where", "values"),
    [
        ("metadata.conversation = 'c1'", {"c1"}),
        ("'c1' = metadata.conversation", {"c1"}),
        ("metadata.conversation = 'c1' AND role <> 'tool'", {"c1"}),
        ("(metadata.conversation IN ('c1', 'c2')) AND metadata.conversation <> 'c2'", {"c1", "c2"}),
        ("metadata.conversation = 'c1' OR metadata.conversation = 'c3'", {"c1", "c3"}),
        ("metadata.conversation IN ('c1', 'c2') AND metadata.conversation = 'c2'", {"c2"}),
        ("metadata.conversation = 'c1' OR role = 'user'", None),
        ("NOT metadata.conversation = 'c1'", None),
        ("metadata.conversation = 7", None),
        ("metadata.topic = 'c1'", None),
        ("conversation = 'c1'", None),
        ("metadata.conversation = ", None),
        (None, None),
    ],
)
def test_scope_values_are_the_partitions_a_clause_allows(
    where: str | None, values: set[str] | None
) -> None:
    found = scope_values(where, "conversation")
    assert (None if found is None else set(found)) == values


def test_read_scope_reads_only_the_partitions_of_its_clause(store: Path) -> None:
    part, scope = read_scope(store, "metadata.conversation = 'c02' AND role = 'user'")
    local = read_store(store)
    assert set(part.to_polars()["id"].str.slice(0, 3).unique()) == {"c2-"}
    expected = local.filter(pl.col("id").str.starts_with("c2-") & (pl.col("role") == "user"))
    assert scope.to_polars()["id"].to_list() == expected["id"].to_list()


def test_read_store_gives_back_the_items_by_partition(store: Path) -> None:
    items = synthetic(6, 40)
    back = read_store(store)
    assert back.columns == items.columns
    assert back["id"].to_list() == items["id"].to_list()  # partitions sorted = written order
    assert back.equals(items)


def interleaved() -> pl.DataFrame:
    """Items whose partitions by ``metadata.key`` alternate and sort against the item order."""
    return records_to_frame(
        [
            {
                "id": f"i{i}",
                "role": "system" if i == 0 else ("user", "assistant")[i % 2],
                "text": f"turn {i}",
                "created_at": f"2025-01-01T00:00:{59 - i:02d}Z",
                "metadata": {"key": ("z", "m", "a")[i % 3]},
            }
            for i in range(12)
        ]
    )


@pytest.fixture(scope="module")
def interleaved_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("interleaved") / "items"
    write_partitioned(interleaved(), root, key="key")
    return root


def test_every_reader_of_a_partitioned_store_gives_the_written_order(
    interleaved_store: Path,
) -> None:
    ids = interleaved()["id"].to_list()
    assert read_store(interleaved_store)["id"].to_list() == ids
    part, scope = read_scope(interleaved_store, "metadata.key IN ('z', 'a') AND role <> 'user'")
    assert part.to_polars()["id"].to_list() == [i for k, i in enumerate(ids) if k % 3 != 1]
    assert scope.to_polars()["id"].to_list() == ["i0", "i3", "i5", "i9", "i11"]
    scan = CognitionFrame.scan_parquet(interleaved_store)
    assert scan.to_polars()["id"].to_list() == ids
    assert scan.filter("metadata.key = 'a'").to_polars()["id"].to_list() == [
        "i2",
        "i5",
        "i8",
        "i11",
    ]
    assert scan.head(4).to_polars()["id"].to_list() == ids[:4]
    assert "__cognoxium_position" not in scan.to_polars().columns


def test_a_file_of_a_partitioned_store_reads_as_items_in_written_order(
    interleaved_store: Path, tmp_path: Path
) -> None:
    part = interleaved_store / "key=m" / "part-0.parquet"
    assert read_items(part)["id"].to_list() == ["i1", "i4", "i7", "i10"]
    shuffled = tmp_path / "shuffled.parquet"
    pl.read_parquet(part).reverse().write_parquet(shuffled)
    back = read_items(shuffled)
    assert back["id"].to_list() == ["i1", "i4", "i7", "i10"]
    assert back.columns == interleaved().columns


def test_a_bad_row_of_a_partitioned_store_is_named_at_its_file_and_row(tmp_path: Path) -> None:
    write_partitioned(interleaved(), tmp_path / "store", key="key")
    part = tmp_path / "store" / "key=m" / "part-0.parquet"
    table = pq.read_table(part)
    roles = table.column("role").to_pylist()
    roles[2] = "narrator"  # item i7, third in its file, eighth in the store: no such role
    index = table.schema.get_field_index("role")
    column = pa.array(roles, table.schema.field("role").type)
    pq.write_table(table.set_column(index, "role", column), part)
    with pytest.raises(RecordError) as caught:
        CognitionFrame.scan_parquet(tmp_path / "store").to_polars()
    assert (caught.value.source, caught.value.row, caught.value.field) == (str(part), 2, "role")


def sample_store(root: Path) -> Path:
    write_partitioned(read_items(SAMPLE / "items.jsonl"), root, key="topic")
    return root


def test_the_sample_partitioned_by_topic_packs_as_its_jsonl(tmp_path: Path) -> None:
    store = sample_store(tmp_path / "store")
    runner = CliRunner()
    common = ["--rank", "bm25", "--as-of", "2026-01-01T00:00:00Z", "--quiet"]
    for name, items in (("from-jsonl", SAMPLE / "items.jsonl"), ("from-store", store)):
        out = str(tmp_path / name)
        args = ["pack", str(items), str(SAMPLE / "requests.jsonl"), "--out", out, *common]
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
    assert_same_files(tmp_path / "from-jsonl", tmp_path / "from-store")
    packs = records(tmp_path / "from-store")
    refund = next(pack for pack in packs if pack["request_id"] == "billing-refund")
    assert refund["ids"][0] == "policy"


def test_a_scan_of_the_sample_store_packs_as_the_jsonl(tmp_path: Path) -> None:
    where = "metadata.topic IN ('billing','policy')"
    store = sample_store(tmp_path / "store")
    as_of = datetime(2026, 1, 1, tzinfo=UTC)
    scanned = CognitionFrame.scan_parquet(store).filter(where).pack(256, as_of=as_of)
    local = CognitionFrame(read_items(SAMPLE / "items.jsonl")).filter(where).pack(256, as_of=as_of)
    assert [m["role"] for m in scanned.messages][:3] == ["system", "developer", "user"]
    assert scanned.messages == local.messages
    assert scanned.to_anthropic() == local.to_anthropic()
    assert scanned.manifest.to_json() == local.manifest.to_json()


def test_partition_key_refuses_a_directory_that_is_not_a_store(tmp_path: Path) -> None:
    (tmp_path / "conversation=c1").mkdir()
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(SchemaError, match=r"notes\.txt"):
        partition_key(tmp_path)


def test_write_partitioned_refuses_items_without_the_key(tmp_path: Path) -> None:
    items = records_to_frame([{"id": "a", "role": "user", "text": "hi", "metadata": {}}])
    with pytest.raises(SchemaError, match="item 'a'"):
        write_partitioned(items, tmp_path / "s", key="conversation")


HIVE_HOSTILE = ("YWJj==", "a=b", "x/y", "..", ".", "", "sp ace", "50%", "é", "a?b*[c]", "c:d#e")


def test_write_partitioned_values_read_back_whatever_their_characters(tmp_path: Path) -> None:
    items = records_to_frame(
        [
            {"id": f"i{n}", "role": "user", "text": "hi", "metadata": {"thread": value}}
            for n, value in enumerate(HIVE_HOSTILE)
        ]
    )
    root = tmp_path / "s"
    write_partitioned(items, root, key="thread")
    assert partition_key(root) == "thread"
    assert len(list(root.iterdir())) == len(HIVE_HOSTILE)
    back = read_store(root)
    assert back.sort("id").equals(items.sort("id"))
    scanned = CognitionFrame.scan_parquet(root).collect()
    assert dict(zip(scanned["id"], scanned["thread"], strict=True)) == {
        f"i{n}": value for n, value in enumerate(HIVE_HOSTILE)
    }
    part, scope = read_scope(root, "metadata.thread = 'YWJj=='")
    assert part.to_polars()["id"].to_list() == ["i0"]
    assert scope.to_polars()["id"].to_list() == ["i0"]


def test_cli_packs_a_store_whose_partition_values_hold_hive_characters(tmp_path: Path) -> None:
    items = synthetic(3, 12).with_columns(
        metadata=pl.col("metadata").str.replace('"conversation":"c01"', '"conversation":"YWJj=="')
    )
    root = tmp_path / "store"
    write_partitioned(items, root, key="conversation")
    requests = tmp_path / "requests.jsonl"
    where = "metadata.conversation = 'YWJj=='"
    requests.write_text(json.dumps({"id": "r1", "budget": 4000, "where": where}) + "\n")
    out = tmp_path / "out"
    args = ["pack", str(root), str(requests), "--out", str(out), "--as-of", "2025-06-01T00:00:00Z"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    (pack,) = records(out)
    assert sorted(pack["ids"]) == sorted(f"c1-{i}" for i in range(12))


@pytest.mark.parametrize("key", ["a=b", "a/b", "a.b", "", "1st"])
def test_write_partitioned_refuses_a_key_that_is_not_a_plain_name(tmp_path: Path, key: str) -> None:
    items = records_to_frame([{"id": "a", "role": "user", "text": "hi", "metadata": {key: "v"}}])
    with pytest.raises(SchemaError, match="not a plain name"):
        write_partitioned(items, tmp_path / "s", key=key)
    assert not (tmp_path / "s").exists()


def test_ray_packs_a_ten_thousand_scope_store_in_tasks_of_many_scopes(
    ray_local: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scopes = 10_000
    items = records_to_frame(
        [
            {
                "id": f"s{c}-{i}",
                "role": ("user", "assistant")[i],
                "text": f"{WORDS[(c + i) % 8]} note {c}",
                "created_at": f"2025-01-01T00:00:0{i}Z",
                "metadata": {"conversation": f"s{c:05d}"},
            }
            for c in range(scopes)
            for i in range(2)
        ]
    )
    root = tmp_path / "store"
    write_partitioned(items, root, key="conversation")
    requests = [  # a thousand scopes, from all over the store, in no order
        Request(
            id=f"r{c}",
            budget=12,
            query=WORDS[c % 8],
            where=f"metadata.conversation = 's{(c * 7919) % scopes:05d}'",
        )
        for c in range(0, scopes, 10)
    ]
    tasks: list[int] = []
    cut = distributed._ray_tasks

    def counted(units: Any, store: Path) -> Any:
        made = cut(units, store)
        tasks.append(len(made))
        return made

    monkeypatch.setattr(distributed, "_ray_tasks", counted)
    monkeypatch.setattr("cognoxium.app._workers.TASK_ITEMS", 100)  # 50 scopes of 2 items
    # Each engine's task k writes part k: the same parts, byte for byte.
    local, remote = ray_as_local(root, requests, tmp_path, ray_workers=2)
    assert tasks == [20]  # 20 tasks of 50 scopes, not 1,000
    assert remote.requests == local.requests == len(requests) == 1000
    assert len(layout((tmp_path / "ray").resolve())) == 3 * 20


@pytest.mark.parametrize("form", ["parquet", "jsonl"])
def test_ray_gives_the_local_files(
    ray_local: Any, store: Path, tmp_path: Path, form: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("cognoxium.app._workers.TASK_ITEMS", 80)  # two conversations a task
    requests = requests_for(6, 40)
    local, remote = ray_as_local(store, requests, tmp_path, ray_workers=2, manifests=form)
    assert len(list((tmp_path / "ray" / "packs").iterdir())) == 6  # 12 scopes of 40 items
    assert remote.requests == local.requests == 40
    lines = records(tmp_path / "ray")
    by_scope = [r.id for u in batch_units(requests) for r in u.requests]  # scopes interleave
    assert by_scope != [r.id for r in requests]
    assert [line["request_id"] for line in lines] == by_scope
    assert sum(bool(line["ids"]) for line in lines) == 40


def test_ray_on_a_single_parquet_file_with_batch_options(ray_local: Any, tmp_path: Path) -> None:
    from cognoxium.items.io import write_parquet

    path = tmp_path / "items.parquet"
    write_parquet(synthetic(3, 30), path)
    requests = requests_for(3, 12)
    options = PackOptions(as_of=AS_OF, reserve=5, turns=True)
    ray_as_local(path, requests, tmp_path, rank="recency", options=options)


def test_requests_without_a_scope_are_an_error_listing_them(
    ray_local: Any, store: Path, tmp_path: Path
) -> None:
    requests = [
        *requests_for(6, 3),
        Request(id="lost", budget=50, where="metadata.conversation = 'nowhere'"),
        Request(id="none", budget=50, where="metadata.conversation = 'c01' AND priority > 9"),
    ]
    with pytest.raises(RecordError, match=r"2 request\(s\).*'lost', 'none'") as caught:
        run_batch_ray(
            store, requests, out_dir=tmp_path / "out", rank="bm25", options=PackOptions(as_of=AS_OF)
        )
    assert caught.value.params["request_ids"] == ["lost", "none"]
    assert not (tmp_path / "out").exists()


def test_items_that_are_not_parquet_are_refused_before_ray_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    items = tmp_path / "items.jsonl"
    items.write_text('{"id": "a", "role": "user", "text": "hi"}\n', encoding="utf-8")
    started: list[str] = []
    monkeypatch.setattr(distributed, "_cluster", lambda *a, **k: started.append("ray"))
    with pytest.raises(SchemaError, match=r"items\.jsonl: the Ray engine reads a Parquet file"):
        run_batch_ray(items, requests_for(1, 1), out_dir=tmp_path / "out", rank="bm25")
    assert started == []
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "where",
    [
        # The items decide, so the units find these: a metadata key no item has (its
        # scope reads no item), and a function of a metadata value of the wrong type.
        "metadata.conversation = 'c01' AND metadata.colour = 'red'",
        "metadata.conversation = 'c01' AND abs(metadata.conversation) > 1",
    ],
)
def test_a_failing_scope_raises_the_local_error(
    ray_local: Any, store: Path, tmp_path: Path, where: str
) -> None:
    bad = Request(id="bad", budget=50, where=where)
    with pytest.raises(RecordError) as local:
        run_batch(
            read_store(store),
            [bad],
            out_dir=tmp_path / "l",
            rank="bm25",
            options=PackOptions(as_of=AS_OF),
        )
    with pytest.raises(RecordError) as remote:
        run_batch_ray(
            store, [bad], out_dir=tmp_path / "r", rank="bm25", options=PackOptions(as_of=AS_OF)
        )
    assert str(remote.value) == str(local.value)
    assert "invalid where clause" in str(remote.value)
    assert remote.value.field == "where"
    assert not (tmp_path / "r").exists()


class _RayStartedError(Exception):
    """Raised in place of starting Ray: the checks before it passed."""


@pytest.fixture
def no_ray(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record, and stop at, the start of Ray (no Ray runs)."""
    started: list[str] = []

    def cluster(*args: Any, **kwargs: Any) -> None:
        started.append("ray")
        raise _RayStartedError

    monkeypatch.setattr(distributed, "_cluster", cluster)
    return started


@pytest.mark.parametrize(
    "where",
    [
        "colour = 'red'",  # unknown column
        "metadata.conversation = 'c01' AND colour = 'red'",
        "priority = 'high'",  # a type error
        "metadata.conversation = 'c01' AND priority > 'a'",
        "(metadata.conversation = 'c01') AND (created_at > '2024-01-01')",
        "priority",  # not boolean
        "lower(priority) = 'x' OR role = 'user'",
        "role = 'admin'",  # not a role
        "id = (SELECT 1)",  # outside the grammar
        "metadata.conversation = ",  # does not parse
    ],
)
def test_a_where_that_fails_over_any_store_is_refused_before_ray_starts(
    no_ray: list[str], store: Path, tmp_path: Path, where: str
) -> None:
    requests = [*requests_for(6, 2), Request(id="bad", budget=50, where=where)]
    with pytest.raises(RecordError) as local:
        run_batch(
            read_store(store),
            requests,
            out_dir=tmp_path / "l",
            rank="bm25",
            options=PackOptions(as_of=AS_OF),
        )
    with pytest.raises(RecordError) as remote:
        run_batch_ray(
            store, requests, out_dir=tmp_path / "r", rank="bm25", options=PackOptions(as_of=AS_OF)
        )
    assert str(remote.value) == str(local.value)
    assert (remote.value.field, remote.value.params) == (local.value.field, local.value.params)
    assert "'bad'" in str(remote.value)
    assert no_ray == []
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize(
    "where",
    [
        "metadata.conversation = 'c01'",
        "lower(metadata.conversation) = 'c01'",  # needs the values' type: the items decide
        "length(metadata.conversation) = 3 AND role <> 'tool'",
        "metadata.conversation LIKE 'c0%'",
        "abs(metadata.turn) > 2",
        "metadata.colour = 'red'",  # a key no item has: the items decide
    ],
)
def test_a_where_the_items_decide_goes_to_ray(
    no_ray: list[str], store: Path, tmp_path: Path, where: str
) -> None:
    request = Request(id="r", budget=50, where=where)
    with pytest.raises(_RayStartedError):
        run_batch_ray(
            store, [request], out_dir=tmp_path / "r", rank="bm25", options=PackOptions(as_of=AS_OF)
        )
    assert no_ray == ["ray"]


def test_clauses_that_only_fix_one_key_are_checked_once_before_ray_starts(
    no_ray: list[str], store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checked: list[str | None] = []
    real = distributed.scope_rows

    def counting(frame: CognitionFrame, request: Request) -> pl.DataFrame:
        checked.append(request.where)
        return real(frame, request)

    monkeypatch.setattr(distributed, "scope_rows", counting)
    wheres = [
        *(f"metadata.conversation = 'c{c:02d}'" for c in range(6)),
        "metadata.conversation IN ('c01', 'c02')",
        "metadata.conversation = 'c01' AND role <> 'tool'",
        "metadata.turn = 'x'",
        "metadata.turn = 'y'",
    ]
    requests = [Request(id=f"r{k}", budget=50, where=w) for k, w in enumerate(wheres)]
    with pytest.raises(_RayStartedError):
        run_batch_ray(
            store, requests, out_dir=tmp_path / "r", rank="bm25", options=PackOptions(as_of=AS_OF)
        )
    # One check per key of the clauses that only fix a key; the others each.
    assert checked == [wheres[0], wheres[7], wheres[8]]


def test_an_unknown_profile_is_refused_before_ray_starts(
    no_ray: list[str], store: Path, tmp_path: Path
) -> None:
    from cognoxium.exceptions import ProfileError

    with pytest.raises(ProfileError) as local:
        run_batch(
            read_store(store),
            requests_for(6, 1),
            out_dir=tmp_path / "l",
            options=PackOptions(profile="nope"),
        )
    with pytest.raises(ProfileError) as remote:
        run_batch_ray(
            store, requests_for(6, 1), out_dir=tmp_path / "r", options=PackOptions(profile="nope")
        )
    assert str(remote.value) == str(local.value)
    assert no_ray == []


def _kill_first_unit(killed: list[int], stop: threading.Event) -> None:
    """SIGKILL the first Ray worker process seen packing a unit."""
    import psutil

    while not stop.is_set() and not killed:
        for proc in psutil.process_iter(["pid", "cmdline"]):
            title = " ".join(proc.info["cmdline"] or [])
            if title.startswith("ray::MapBatches(_pack_units)"):
                os.kill(proc.info["pid"], signal.SIGKILL)
                killed.append(proc.info["pid"])
                return
        time.sleep(0.01)


def test_a_killed_worker_is_retried_and_the_output_is_complete(
    ray_local: Any, tmp_path: Path
) -> None:
    root = tmp_path / "store"
    write_partitioned(synthetic(8, 300), root, key="conversation")
    requests = requests_for(8, 64)
    run_batch(
        read_store(root),
        requests,
        out_dir=tmp_path / "local",
        rank="bm25",
        options=PackOptions(as_of=AS_OF),
    )
    killed: list[int] = []
    stop = threading.Event()
    killer = threading.Thread(target=_kill_first_unit, args=(killed, stop))
    killer.start()
    try:
        run_batch_ray(
            root, requests, out_dir=tmp_path / "ray", rank="bm25", options=PackOptions(as_of=AS_OF)
        )
    finally:
        stop.set()
        killer.join()
    assert killed, "no worker was packing a unit"
    assert_same_files(tmp_path / "local", tmp_path / "ray")
    ids = [line["request_id"] for line in records(tmp_path / "ray")]
    assert ids == [r.id for u in batch_units(requests) for r in u.requests]  # none missing or twice
    assert not list((tmp_path / "ray").resolve().rglob(".*"))  # no temporary file left


def test_a_task_run_again_rewrites_its_parts_and_counts_once(store: Path, tmp_path: Path) -> None:
    # What Ray does with a task whose worker died: the same task runs again, into
    # the same version directory. Its parts are replaced, never doubled; a dead
    # attempt's temporary files are swept; the driver keeps one row per task.
    import pickle

    from cognoxium.app._workers import finish_parts

    requests = requests_for(6, 12)
    units = batch_units(requests)
    (task,) = distributed._ray_tasks(units, store)
    settings = distributed._Settings(PackOptions(as_of=AS_OF), "bm25", None, "parquet")
    batch = pa.table({"task": [task.index], "payload": [pickle.dumps(task)]})
    folder = tmp_path / "version"
    rows = [distributed._pack_units(batch, store=str(store), settings=settings, folder=str(folder))]
    first = {name: (folder / name).read_bytes() for name in layout(folder)}
    assert sorted(first) == [
        "manifest_headers/part-00000.jsonl",
        "manifests/part-00000.parquet",
        "packs/part-00000.jsonl",
    ]
    dead = folder / "manifests" / ".part-00000.parquet.0123456789abcdef.tmp"
    dead.write_bytes(b"half a part")  # an attempt killed while it wrote
    rows.append(
        distributed._pack_units(batch, store=str(store), settings=settings, folder=str(folder))
    )
    finish_parts(folder, "parquet", 1)
    assert {name: (folder / name).read_bytes() for name in layout(folder)} == first
    collected = distributed._collect(iter(rows), [task], units, requests, str(store), settings)
    assert len(collected.in_order()) == len(requests)  # one row used: each request once


def test_without_ray_the_engine_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, store: Path, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(DependencyError, match=r"cognoxium-engine\[ray\]") as caught:
        run_batch_ray(store, requests_for(6, 2), out_dir=tmp_path / "out")
    assert caught.value.code == "dependency.missing"
    assert not (tmp_path / "out").exists()


def test_cli_ray_engine_writes_the_local_files(ray_local: Any, store: Path, tmp_path: Path) -> None:
    requests = requests_for(6, 10)
    path = tmp_path / "requests.parquet"
    records = [{k: v for k, v in r.to_record().items() if v} for r in requests]
    pl.DataFrame(records).write_parquet(path)
    assert [r.model_dump() for r in read_requests(path)] == [r.model_dump() for r in requests]
    runner = CliRunner()
    common = ["--rank", "bm25", "--as-of", "2025-06-01T00:00:00Z", "--json"]
    for engine in ("local", "ray"):
        result = runner.invoke(
            app,
            [
                "pack",
                str(store),
                str(path),
                "--out",
                str(tmp_path / engine),
                "--engine",
                engine,
                *common,
            ],
        )
        assert result.exit_code == 0, result.output
        assert json.loads(result.output)["requests"] == 10
    assert_same_files(tmp_path / "local", tmp_path / "ray")


@needs_locomo
def test_ray_gives_the_local_files_on_locomo(ray_local: Any, tmp_path: Path) -> None:
    from cognoxium.app.locomo_dataset import load_locomo, locomo_requests

    data = json.loads(LOCOMO.read_text(encoding="utf-8"))[:2]
    source = tmp_path / "locomo.json"
    source.write_text(json.dumps(data))
    items = load_locomo(source)
    root = tmp_path / "store"
    write_partitioned(items, root, key="conversation")
    requests = [r for r in locomo_requests(data, [1024]) if int(r.id.split(":q")[1][:-6]) < 25]
    assert len({r.where for r in requests}) == 2
    ray_as_local(root, requests, tmp_path, options=None)
    assert len(records(tmp_path / "ray")) == len(requests)


def test_ray_packs_the_sample_store_as_the_local_jsonl_run(ray_local: Any, tmp_path: Path) -> None:
    store = sample_store(tmp_path / "store")
    requests = read_requests(SAMPLE / "requests.jsonl")
    options = PackOptions(as_of=datetime(2026, 1, 1, tzinfo=UTC))
    items = read_items(SAMPLE / "items.jsonl")
    ray_as_local(store, requests, tmp_path, items=items, ray_workers=2, options=options)


def test_ray_lists_the_requests_that_left_out_their_newest_user_message(
    ray_local: Any, tmp_path: Path
) -> None:
    items, requests = chats_ending_long_and_short()
    write_partitioned(items, tmp_path / "store", key="conversation")
    local, remote = ray_as_local(tmp_path / "store", requests, tmp_path, items=items)
    assert remote.newest_user_left_out == local.newest_user_left_out == ("long@60",)


def test_a_bad_request_row_of_a_parquet_file_names_its_row(tmp_path: Path) -> None:
    """Rows of a requests Parquet file are numbered from 0, as those of an items file."""
    path = tmp_path / "requests.parquet"
    pl.DataFrame({"id": ["a", "b"], "budget": [10, -1]}).write_parquet(path)
    with pytest.raises(RecordError, match=r"requests.parquet: row 1: field budget") as caught:
        read_requests(path)
    assert (caught.value.line, caught.value.row) == (None, 1)
    assert caught.value.params["row"] == 1
    pl.DataFrame({"id": ["a", "b", "a"], "budget": [10, 20, 30]}).write_parquet(path)
    with pytest.raises(RecordError, match=r"row 2: field id: duplicate .* \(first on row 0\)"):
        read_requests(path)
    pl.DataFrame({"id": ["a", "b"], "budget": [10, 20], "previous": [None, "c"]}).write_parquet(
        path
    )
    with pytest.raises(RecordError, match=r"requests.parquet: row 1: field previous") as caught:
        run_batch(read_items(SAMPLE / "items.jsonl"), read_requests(path), out_dir=tmp_path / "o")
    assert caught.value.row == 1
    items = pl.DataFrame({"id": ["x", None], "role": ["user", "user"], "text": ["a", "b"]})
    items.write_parquet(tmp_path / "items.parquet")
    with pytest.raises(RecordError, match=r"items.parquet: row 1: field id"):
        read_items(tmp_path / "items.parquet")
    (tmp_path / "broken.parquet").write_text("not parquet")
    with pytest.raises(RecordError, match="not a readable Parquet file"):
        read_requests(tmp_path / "broken.parquet")
    latin1 = pa.array([b"refund", b"caf\xe9"], type=pa.binary()).view(pa.string())
    pq.write_table(pa.table({"id": ["a", "b"], "budget": [10, 20], "query": latin1}), path)
    with pytest.raises(RecordError, match="row 1: field query: not UTF-8 text") as caught:
        read_requests(path)
    assert caught.value.source == str(path)


def test_workers_share_the_embedding_cache_directory(
    ray_local: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COGNOXIUM_CACHE_DIR", str(tmp_path / "local-cache"))
    root = tmp_path / "store"
    write_partitioned(synthetic(3, 20), root, key="conversation")
    requests = requests_for(3, 6)
    shared = tmp_path / "shared-cache"
    local = run_batch(
        read_store(root),
        requests,
        out_dir=tmp_path / "local",
        rank="hybrid",
        options=PackOptions(as_of=AS_OF),
    )
    remote = run_batch_ray(
        root,
        requests,
        out_dir=tmp_path / "ray",
        rank="hybrid",
        cache_dir=shared,
        options=PackOptions(as_of=AS_OF),
    )
    assert remote.requests == local.requests
    assert_same_files(tmp_path / "local", tmp_path / "ray")
    shards = sorted(shared.rglob("shard-*.parquet"))
    assert shards, "the workers wrote no embedding to the shared cache"
    hashes = pl.concat([pl.read_parquet(s, columns=["content_hash"]) for s in shards])
    assert set(hashes["content_hash"]) == set(read_store(root)["content_hash"])
    assert not list(shared.rglob(".tmp-*"))  # every shard was renamed into place


@pytest.mark.parametrize("form", ["parquet", "jsonl"])
def test_ray_writes_runs_of_one_scope_as_the_local_run(
    ray_local: Any, tmp_path: Path, form: str
) -> None:
    # Runs of consecutive same-scope requests, scopes revisited after others, and
    # enough entries (400 requests of 400 items) for two Parquet row groups.
    root = tmp_path / "store"
    write_partitioned(synthetic(4, 400), root, key="conversation")
    lengths = (1, 3, 7, 2, 12, 5)
    requests: list[Request] = []
    while len(requests) < 400:
        k = len(requests)
        run = lengths[k % len(lengths)]
        conv = f"c{(k // 3) % 4:02d}"
        requests += [
            Request(
                id=f"q{k + j}",
                budget=40 + 23 * ((k + j) % 11),
                query=WORDS[(k + j) % 8],
                where=f"metadata.conversation = '{conv}'",
            )
            for j in range(min(run, 400 - k))
        ]
    ray_as_local(root, requests, tmp_path, ray_workers=2, manifests=form)
    ids = [line["request_id"] for line in records(tmp_path / "ray")]
    assert ids == [r.id for u in batch_units(requests) for r in u.requests]
    if form == "parquet":
        import pyarrow.parquet as pq

        meta = pq.ParquetFile(tmp_path / "ray" / "manifests" / "part-00000.parquet").metadata
        assert meta.num_row_groups == 2
        assert meta.num_rows == 400 * 400


# ---------------------------------------------------------------------------
# --quiet: Ray's own output


def test_quiet_ray_prints_nothing_from_start_up_to_shutdown(store: Path, tmp_path: Path) -> None:
    """``pack --engine ray --quiet`` in a fresh process: its own local Ray, no output at all."""
    pytest.importorskip("ray.data", reason="needs the ray extra")
    requests = tmp_path / "requests.jsonl"
    requests.write_text(
        "".join(json.dumps(r.to_record()) + "\n" for r in requests_for(6, 4)), encoding="utf-8"
    )
    out = tmp_path / "out"
    command = [sys.executable, "-m", "cognoxium.app.cli", "pack", str(store), str(requests)]
    options = ["--out", str(out), "--engine", "ray", "--workers", "1", "--rank", "bm25"]
    done = subprocess.run(
        [*command, *options, "--as-of", "2025-06-01T00:00:00Z", "--quiet"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert done.stdout == ""
    assert len(records(out)) == 4


def test_quiet_drops_ray_records_below_error_and_restores_the_levels() -> None:
    ray_logger, data_logger = logging.getLogger("ray"), logging.getLogger("ray.data")
    before = (ray_logger.level, data_logger.level)
    with distributed._ray_logs(True):
        for logger in (ray_logger, logging.getLogger("ray.data._internal.execution")):
            assert not logger.isEnabledFor(logging.WARNING)
            assert logger.isEnabledFor(logging.ERROR)
    assert (ray_logger.level, data_logger.level) == before
    with distributed._ray_logs(False):
        assert (ray_logger.level, data_logger.level) == before


@pytest.mark.parametrize(
    ("flags", "quiet"), [([], False), (["--quiet"], True), (["--json"], True), (["-q"], True)]
)
def test_the_cli_makes_ray_quiet_with_quiet_or_json(
    monkeypatch: pytest.MonkeyPatch, store: Path, tmp_path: Path, flags: list[str], quiet: bool
) -> None:
    seen: dict[str, Any] = {}

    def fake(items: Path, requests: list[Request], **kwargs: Any) -> BatchStats:
        seen.update(kwargs)
        return BatchStats(requests=len(requests), seconds=1.0, packs_per_s=1.0, p50_ms=0, p95_ms=0)

    monkeypatch.setattr(distributed, "run_batch_ray", fake)
    requests = tmp_path / "requests.jsonl"
    requests.write_text(json.dumps(requests_for(6, 1)[0].to_record()) + "\n", encoding="utf-8")
    args = ["pack", str(store), str(requests), "--out", str(tmp_path / "o"), "--engine", "ray"]
    result = CliRunner().invoke(app, [*args, *flags])
    assert result.exit_code == 0, result.output
    assert seen["quiet"] is quiet
    assert seen["progress"] is (not quiet)
