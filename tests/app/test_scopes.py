"""A batch's scopes from one split of the store, and its scopes packed in worker processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from cognoxium.app import _workers
from cognoxium.app._scopes import ScopeIndex, batch_units
from cognoxium.app.batch import Request, run_batch, scope_rows
from cognoxium.exceptions import BudgetError, PlanError, RecordError
from cognoxium.frame.frame import CognitionFrame
from cognoxium.items.records import records_to_frame
from cognoxium.packing.options import PackOptions
from cognoxium.retrieval.scope import derived_items
from tests.app.parts import layout, records, same_tables

AS_OF = datetime(2025, 6, 1, tzinfo=UTC)
WORDS = ("refund", "invoice", "crash", "login", "billing", "shipping", "password", "upgrade")


def _items() -> pl.DataFrame:
    """Three conversations, a numeric key, a key some items lack, and derived items."""
    records: list[dict[str, Any]] = []
    for c in range(3):
        for i in range(12):
            metadata: dict[str, Any] = {"conversation": f"c{c}", "n": i % 4}
            if i % 3:
                metadata["topic"] = ("billing", "bugs")[i % 2]
            records.append(
                {
                    "id": f"c{c}-{i}",
                    "role": ("user", "assistant", "tool")[i % 3],
                    "text": f"{WORDS[(c + i) % 8]} {WORDS[i % 8]} note {i}",
                    "created_at": f"2025-01-{1 + i:02d}T00:00:00Z",
                    "metadata": metadata,
                }
            )
    records.append(  # derived from items of two conversations, stored in a third
        {
            "id": "memo",
            "role": "memory",
            "text": "the refund of c0 and c1",
            "created_at": "2025-02-01T00:00:00Z",
            "parents": ["c0-1", "c1-2"],
            "metadata": {"conversation": "c2", "n": 0},
        }
    )
    return records_to_frame(records)


WHERES = [
    "metadata.conversation = 'c1'",
    "'c2' = metadata.conversation",
    "metadata.conversation = 'c0' AND role <> 'tool'",
    "metadata.conversation IN ('c2', 'c0') AND metadata.topic = 'billing'",
    "metadata.conversation = 'c1' OR metadata.conversation = 'c2'",
    "metadata.conversation = 'c9'",
    "metadata.conversation = 'c1' OR role = 'memory'",
    "metadata.topic = 'bugs'",
    "metadata.n = 2",
    "role = 'user'",
]


@pytest.mark.parametrize("interleaved", [False, True])
def test_every_scope_is_the_whole_store_filtered_by_its_clause(interleaved: bool) -> None:
    items = _items()
    if interleaved:  # the items of a conversation are no longer contiguous
        items = items.sort(pl.col("id").str.extract(r"-(\d+)$").cast(pl.Int64), "id")
    store = CognitionFrame(items)
    requests = [Request(id=f"r{k}", budget=50, where=w) for k, w in enumerate([*WHERES, None])]
    units = batch_units(requests)
    index = ScopeIndex(store, units)
    assert index.key == "conversation"  # fixed by five clauses; 'topic' by none alone
    for unit, request in zip(units, requests, strict=True):
        expected = scope_rows(store, request)
        assert index.rows(unit).equals(expected), request.where
    assert index.rows(units[5]).height == 0  # a value no item has
    expected = [f"c{c}-{i}" for c in (0, 2) for i in (2, 4, 8, 10)]
    if interleaved:
        expected.sort(key=lambda i: (int(i.split("-")[1]), i))
    assert index.rows(units[3])["id"].to_list() == expected  # store order


def test_a_key_of_numbers_is_not_a_split_key() -> None:
    store = CognitionFrame(_items())
    requests = [Request(id="a", budget=9, where="metadata.n = 2"), Request(id="b", budget=9)]
    index = ScopeIndex(store, batch_units(requests))
    assert index.key is None
    assert index.rows(batch_units(requests)[0]).equals(scope_rows(store, requests[0]))


@pytest.mark.parametrize(
    ("where", "message"),
    [
        ("metadata.conversaton = 'c1'", "no item has the metadata key 'conversaton'"),
        ("colour = 'red'", "unknown column 'colour'"),
        ("priority = 'high'", "priority"),
    ],
)
def test_an_invalid_clause_is_refused_before_anything_is_packed(where: str, message: str) -> None:
    store = CognitionFrame(_items())
    requests = [
        Request(id="ok", budget=9, where="metadata.conversation = 'c1'"),
        Request(id="bad", budget=9, where=where),
    ]
    with pytest.raises(RecordError, match=message) as caught:
        ScopeIndex(store, batch_units(requests))
    with pytest.raises(RecordError) as alone:
        scope_rows(store, requests[1])
    assert str(caught.value) == str(alone.value)
    assert caught.value.field == "where"
    assert caught.value.params["request_id"] == "bad"


def test_derived_items_come_from_the_parent_links_of_the_whole_store() -> None:
    items = _items()
    index = ScopeIndex(CognitionFrame(items), [])
    for conversation, expected in (("c0", ["memo"]), ("c1", ["memo"]), ("c2", [])):
        scope = items.filter(pl.col("id").str.starts_with(conversation))
        derived = index.derived(scope)
        assert derived.equals(derived_items(items, scope.get_column("id"))[0])
        assert derived.get_column("id").to_list() == expected


def _requests(count: int) -> list[Request]:
    return [
        Request(
            id=f"q{k}",
            budget=40 + 9 * (k % 5),
            query=WORDS[k % 8],
            where=f"metadata.conversation = 'c{(k * 2) % 3}'",
        )
        for k in range(count)
    ]


@pytest.fixture(scope="module")
def one_process(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The files of the batch packed in this process, per rank method."""
    out = {}
    for method in ("bm25", "learned"):
        folder = tmp_path_factory.mktemp(method) / "out"
        run_batch(
            _items(),
            _requests(12),
            out_dir=folder,
            rank=method,
            workers=1,
            options=PackOptions(as_of=AS_OF),
        )
        out[method] = folder
    return out


@pytest.mark.parametrize("method", ["bm25", "learned"])
def test_worker_processes_write_the_files_of_one_process(
    method: str, one_process: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_workers, "TASK_ITEMS", 10)  # a task per scope: three tasks
    units = batch_units(_requests(12))
    ranges = _workers.task_ranges(_workers.unit_weights(units, CognitionFrame(_items())))
    assert [list(r) for r in ranges] == [[0], [1], [2]]
    stats = run_batch(
        _items(),
        _requests(12),
        out_dir=tmp_path / "out",
        rank=method,
        workers=2,
        options=PackOptions(as_of=AS_OF),
    )
    assert stats.requests == 12
    assert len(layout(tmp_path / "out")) == 9  # three parts of each table
    # The one task of one process, and three in two workers: the same tables.
    assert same_tables(tmp_path / "out", one_process[method])
    ids = [line["request_id"] for line in records(tmp_path / "out")]
    assert ids == [r.id for u in batch_units(_requests(12)) for r in u.requests]
    assert ids != [r.id for r in _requests(12)]  # the scopes interleave in the input


def test_an_error_in_a_worker_is_raised_whole_and_nothing_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_workers, "TASK_ITEMS", 10)
    items = _items().with_columns(
        retention=pl.when(pl.col("id") == "c2-3")
        .then(pl.lit("required"))
        .otherwise(pl.col("retention"))
        .cast(_items().schema["retention"])
    )
    requests = _requests(6)
    errors = []
    for workers in (1, 2):
        with pytest.raises(BudgetError) as caught:
            run_batch(
                items,
                [*requests, Request(id="tiny", budget=3, where="metadata.conversation = 'c2'")],
                out_dir=tmp_path / f"out{workers}",
                rank="bm25",
                workers=workers,
                options=PackOptions(as_of=AS_OF),
            )
        errors.append(caught.value)
        assert not (tmp_path / f"out{workers}").exists()
    assert errors[0].to_dict() == errors[1].to_dict()
    assert errors[1].params["request_id"] == "tiny"


@pytest.mark.parametrize("workers", [0, -1, True, 1.5])
def test_workers_is_a_whole_number_of_processes(workers: Any, tmp_path: Path) -> None:
    with pytest.raises(PlanError, match="workers"):
        run_batch(_items(), _requests(2), out_dir=tmp_path / "out", rank="bm25", workers=workers)


def test_a_lazy_store_reads_each_scope_on_its_own_with_the_same_files(
    one_process: dict[str, Path], tmp_path: Path
) -> None:
    CognitionFrame(_items()).sink_parquet(tmp_path / "items.parquet")
    lazy = CognitionFrame.scan_parquet(tmp_path / "items.parquet")
    units = batch_units(_requests(12))
    index = ScopeIndex(lazy, units)
    assert index.lazy
    assert index.key is None  # no split: each scope's clause is pushed into the scan
    for unit in units:
        alone = scope_rows(CognitionFrame(_items()), unit.requests[0])
        assert index.rows(unit).equals(alone)
    for method in ("bm25", "learned"):
        out = tmp_path / method
        run_batch(
            lazy,
            _requests(12),
            out_dir=out,
            rank=method,
            workers=1,
            options=PackOptions(as_of=AS_OF),
        )
        assert layout(out) == layout(one_process[method])
        for name in layout(out):
            assert (out / name).read_bytes() == (one_process[method] / name).read_bytes(), method


_ORPHAN = """
import multiprocessing, os, signal, sys, time
from concurrent.futures import ProcessPoolExecutor
from cognoxium.app._workers import watch_parent

if __name__ == "__main__":
    context = multiprocessing.get_context("spawn")
    pool = ProcessPoolExecutor(
        1, mp_context=context, initializer=watch_parent, initargs=(os.getpid(), 0.05)
    )
    print(pool.submit(os.getpid).result(), flush=True)
    pool.submit(time.sleep, 120)  # the worker is busy packing
    time.sleep(0.5)
    os.kill(os.getpid(), signal.SIGKILL)  # killed with no chance to stop its pool
"""


def test_a_worker_ends_soon_after_the_batch_process_is_killed(tmp_path: Path) -> None:
    # Before, the workers of a killed `cognoxium pack` kept packing, holding their memory
    # and the pipes of whoever ran it, until their task ended.
    script = tmp_path / "orphan.py"
    script.write_text(_ORPHAN)
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    worker = int(done.stdout.split()[0])
    deadline = time.monotonic() + 20
    while Path(f"/proc/{worker}").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not Path(f"/proc/{worker}").exists()


_ENDED = """
import multiprocessing, os, sys, time
from concurrent.futures import ProcessPoolExecutor
from cognoxium.app._workers import end_workers, start_worker
from cognoxium.retrieval.ranking import _tokenize

if __name__ == "__main__":
    context = multiprocessing.get_context("spawn")
    pool = ProcessPoolExecutor(
        1, mp_context=context, initializer=start_worker, initargs=(os.getpid(), 1.0)
    )
    pool.submit(_tokenize, ["refund policy"], ids=False).result()  # bm25s runs tqdm
    pool.submit(time.sleep, 120)  # the worker is busy packing
    time.sleep(0.5)
    end_workers(pool)  # as an interrupted batch does
"""


def test_a_worker_ended_at_once_leaves_no_semaphore_to_report(tmp_path: Path) -> None:
    # A worker ended by SIGTERM never released the lock tqdm made (a named semaphore):
    # every Ctrl-C of `cognoxium pack --workers 2` printed the resource tracker's
    # "There appear to be 2 leaked semaphore objects" after its one error line.
    script = tmp_path / "ended.py"
    script.write_text(_ENDED)
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, check=False
    )
    assert (done.returncode, done.stderr) == (0, "")


def test_the_batch_pool_watches_its_parent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[dict[str, object]] = []
    real = _workers.ProcessPoolExecutor

    def recorded(*args: object, **kwargs: object) -> object:
        made.append(kwargs)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(_workers, "ProcessPoolExecutor", recorded)
    monkeypatch.setattr(_workers, "TASK_ITEMS", 10)
    run_batch(
        _items(), _requests(12), out_dir=tmp_path / "out", rank="bm25", workers=2,
        options=PackOptions(as_of=AS_OF),
    )  # fmt: skip
    (kwargs,) = made
    assert kwargs["initializer"] is _workers.start_worker
    assert kwargs["initargs"] == (os.getpid(), _workers.PARENT_POLL_SECONDS)


def test_a_task_sent_to_a_worker_carries_its_own_rows_only(tmp_path: Path) -> None:
    import json
    import pickle

    from cognoxium.items.io import read_items

    path = tmp_path / "items.jsonl"
    with path.open("w") as out:
        for n in range(20_000):
            record = {
                "id": f"c{n // 40}:{n % 40}",
                "role": "user",
                "text": f"message {n}",
                "sources": [{"uri": f"chats.jsonl:{n // 40 + 1}", "kind": "openai_messages"}],
                "parents": [f"c{n // 40}:0"] if n % 40 else [],
                "metadata": {"conversation": f"c{n // 40}"},
            }
            out.write(json.dumps(record) + "\n")
    store = read_items(path)  # one buffer per nested column, for all 20,000 rows
    scope = store.filter(pl.col("metadata") == '{"conversation":"c7"}')
    task = _workers.Task(0, (), (scope,), (scope.head(3),))
    sent = task.compacted()
    assert sent.rows[0].equals(scope)
    assert sent.rows[0].schema == scope.schema
    assert sent.lineage[0] is not None
    assert sent.lineage[0].equals(scope.head(3))
    assert len(pickle.dumps(sent)) * 20 < len(pickle.dumps(task))


_SLOW_PACK = """
import os, sys, time
from pathlib import Path
from cognoxium.app import _workers
from cognoxium.app.cli import main

# Run in the command's process and, as the spawned workers' __mp_main__, in each worker.
_workers.TASK_ITEMS = 1  # a task per scope: the sample makes several
_pack = _workers.pack_task


def slow_pack(task, *args):
    (Path(os.environ["STARTED"]) / str(os.getpid())).touch()  # packing has begun here
    time.sleep(600)  # a task that packs for many minutes
    return _pack(task, *args)


_workers.pack_task = slow_pack

if __name__ == "__main__":
    sys.argv = ["cognoxium", *sys.argv[1:]]
    main()
"""


@pytest.mark.parametrize(
    ("stop", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"]
)
def test_a_signal_to_the_batch_process_alone_stops_its_workers_and_commits_nothing(
    tmp_path: Path, stop: signal.Signals, code: int
) -> None:
    # Before, SIGINT sent to `cognoxium pack` alone (kill -INT, timeout -s INT, a
    # supervisor; not a terminal's Ctrl-C, which every worker gets too) left the
    # command waiting for its workers' running tasks, minutes each; SIGTERM left the
    # run's directory, its lock file and "leaked semaphore" warnings behind.
    from typer.testing import CliRunner

    from cognoxium.app.cli import app
    from tests.app.test_outputs import SAMPLE, beside, committed, pack_args

    out = tmp_path / "out"
    requests = SAMPLE / "requests.jsonl"
    assert CliRunner().invoke(app, pack_args(requests, out)).exit_code == 0
    before = committed(out)
    files = {path: path.read_bytes() for path in out.rglob("*") if path.is_file()}
    script = tmp_path / "slow_pack.py"
    script.write_text(_SLOW_PACK)
    started = tmp_path / "started"
    started.mkdir()
    proc = subprocess.Popen(
        [sys.executable, str(script), *pack_args(requests, out), "--workers", "2"],
        env={**os.environ, "STARTED": str(started)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while len(list(started.iterdir())) < 2 and proc.poll() is None:
            assert time.monotonic() < deadline, "the workers never started packing"
            time.sleep(0.1)
        workers = [int(path.name) for path in started.iterdir()]
        assert len(workers) == 2, proc.communicate()
        proc.send_signal(stop)  # the command's process only, not its workers
        _, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()  # its workers follow within a second (watch_parent)
            proc.communicate()
    assert proc.returncode == code, stderr
    assert f"interrupted by {stop.name}" in stderr
    assert "Traceback" not in stderr
    assert "leaked semaphore" not in stderr
    for worker in workers:  # ended and reaped before the command exited
        assert not Path(f"/proc/{worker}").exists(), worker
    assert committed(out) == before  # the previous run's files, no leftover, no lock file
    assert beside(out) == before
    assert {path: path.read_bytes() for path in out.rglob("*") if path.is_file()} == files
