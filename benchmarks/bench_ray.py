"""Batch packing on Ray Data against the local engine, and an estimate for larger clusters.

A synthetic store of ``--items`` chat-like items (``bench_pack.synthetic_items``)
in ``--scopes`` conversations of equal size, written as a hive-partitioned
Parquet store (``conversation=<id>/part-0.parquet``) in a temporary
directory, and ``--requests`` requests, each scoped to one conversation
(``where = "metadata.conversation = '<id>'"``, conversations drawn at random,
seeded), with a query of three words, ranked by ``--rank`` (bm25 or recency)
under a budget of 1,024 tokens.

Timed, each the user's whole call (reading, packing, writing and committing
the files):

local
    ``read_store`` + :func:`cognoxium.app.batch.run_batch`.
ray-1, ray-2
    :func:`cognoxium.app.distributed.run_batch_ray` with 1 and 2 workers on a
    local Ray started once beforehand and warmed by a first call of 4 requests
    (both reported apart).

Every Ray run's parts are compared byte for byte with the local run's.

The estimate for larger runs (10M items, 1M requests in 100,000 scopes, on
8, 32 and 128 workers) uses costs measured in the same process. A task's
(on a worker): reading one scope's part of the store (``read_part``) and
packing one request (``pack_scope``, writing its pack line and manifest rows
into the task's part files). The driver's: the lazy count of the store's
items by the scopes' key that cuts the tasks (per partition file), its
input work per request (reading the requests file, grouping by scope,
pickling the tasks' requests), checking each scope's ``where`` before Ray
starts (per scope), and collecting a task's row (latencies and failures),
measured for tasks of 10 and of 10,000 requests to show that it does not
grow with the requests: no result comes back to the driver. Ray's overhead per task is
measured on a Ray Data map that does nothing, one task at a time. A run of
``R`` requests in ``U`` scopes, ``F`` partition files, cut into ``T`` tasks
of about 20,000 items on ``W`` workers, then takes about::

    (F * count + R * input + U * check)
        + max((U * (read + R/U * pack) + T * overhead) / W,  T * collect)

plus Ray's start-up: the driver counts, reads and checks before the tasks
start, and collects their rows while they run. The table names the larger
of the workers' time and the driver's.

Usage: ``python benchmarks/bench_ray.py [--small] [--items 1000000] [--scopes 1000]
[--requests 20000] [--rank bm25] [--out benchmarks/results/ray.json]``
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import shutil
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa

from bench_pack import synthetic_items
from cognoxium.app import distributed
from cognoxium.app._scopes import ScopeIndex, batch_units
from cognoxium.app._workers import TASK_ITEMS, open_part
from cognoxium.app.batch import (
    BatchSettings,
    PreparedScope,
    Request,
    pack_scope,
    prepare_requests,
    read_requests,
    run_batch,
)
from cognoxium.app.distributed import read_part, run_batch_ray
from cognoxium.items.store import read_store, write_partitioned
from cognoxium.packing.options import PackOptions
from cognoxium.tokens.profiles import clear_cache

RESULTS = Path(__file__).resolve().parent / "results"
AS_OF = datetime(2026, 1, 1, tzinfo=UTC)
BUDGET = 1024
TARGET = {"items": 10_000_000, "requests": 1_000_000, "scopes": 100_000}
WORKERS = (8, 32, 128)
QUERY_WORDS = ("refund", "invoice", "crash", "login", "billing", "shipping", "password", "upgrade")


def make_store(root: Path, items: int, scopes: int) -> None:
    df = synthetic_items(items)
    width = len(str(scopes - 1))
    df = df.with_columns(
        metadata=pl.format(
            '{{"conversation":"s{}"}}',
            (pl.int_range(pl.len()) * scopes // items).cast(pl.String).str.zfill(width),
        )
    )
    write_partitioned(df, root, key="conversation")


def make_requests(
    count: int, scopes: int, seed: int = 11, *, in_turn: bool = False
) -> list[Request]:
    """``count`` requests, each over one of ``scopes`` conversations, drawn at random or in turn."""
    rng = np.random.default_rng(seed)
    width = len(str(scopes - 1))
    picks = np.arange(count) % scopes if in_turn else rng.integers(0, scopes, size=count)
    words = rng.integers(0, len(QUERY_WORDS), size=(count, 3))
    return [
        Request(
            id=f"q{k:07d}",
            budget=BUDGET,
            query=" ".join(QUERY_WORDS[w] for w in words[k]),
            where=f"metadata.conversation = 's{int(picks[k]):0{width}d}'",
        )
        for k in range(count)
    ]


def unit_costs(store: Path, requests: list[Request], rank: str, sample: int) -> dict[str, float]:
    """Seconds of a task's work, per scope read and per request packed and written.

    A task reads its scope's part of the store (``read_part``), splits it
    (``ScopeIndex``), packs the requests and writes them into its part files
    (what a Ray task does, here in this process).
    """
    by_scope: dict[str | None, list[Request]] = {}
    for request in requests:
        by_scope.setdefault(request.where, []).append(request)
    chosen = list(by_scope.items())[:sample]
    settings = BatchSettings(PackOptions(as_of=AS_OF), rank)
    read_s = pack_s = 0.0
    packed = entries = 0
    with tempfile.TemporaryDirectory() as tmp, open_part(tmp, "parquet", 0) as (packs, writer):
        for where, group in chosen:
            unit = batch_units(group)[0]
            t0 = time.perf_counter()
            part = read_part(store, [where])
            rows = ScopeIndex(part, [unit]).rows(unit)
            t1 = time.perf_counter()
            prepared = PreparedScope(part, rows, settings)
            result = pack_scope(part, group, settings, prepared=prepared)
            result.write(packs, writer)
            t2 = time.perf_counter()
            read_s += t1 - t0
            pack_s += t2 - t1
            packed += len(group)
            entries += result.entries.height
    return {
        "read_s_per_scope": read_s / len(chosen),
        "pack_s_per_request": pack_s / packed,
        "sampled_scopes": len(chosen),
        "sampled_requests": packed,
        "sampled_entries": entries,
    }


def driver_costs(store: Path, requests: list[Request], items: int, scopes: int) -> dict[str, float]:
    """Seconds of the driver's work: per item counted, per request read, per task collected.

    ``count_s_per_file``: the lazy count of the store's items by the scopes'
    key that cuts the tasks (``_ray_tasks``), over the whole store, per
    partition file (a file per scope here; the count reads each file's
    metadata column, and at 100 items a file the opening dominates).
    ``input_s_per_request``: reading the requests file, checking them,
    grouping them by scope and pickling the tasks (every request goes to a
    worker once). ``check_s_per_scope``: checking each distinct ``where``
    against the item schema before Ray starts. ``collect_s_per_task_of_<n>``:
    taking the rows of tasks of ``n`` requests (each task's latencies come as
    one buffer) and the
    latencies in order at the end; ``collect_s_per_request_of_<n>`` is that
    over the ``n`` requests.
    """
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "requests.jsonl"
        path.write_text("".join(json.dumps(r.to_record()) + "\n" for r in requests))
        t0 = time.perf_counter()
        prepared = prepare_requests(read_requests(path), rank="bm25")
        units = batch_units(prepared)
        t1 = time.perf_counter()
        tasks = distributed._ray_tasks(units, store)
        t2 = time.perf_counter()
        payloads = [pickle.dumps(task) for task in tasks]
        t3 = time.perf_counter()
        distributed._check_wheres(prepared)
        t4 = time.perf_counter()
    assert sum(len(p) for p in payloads) > 0
    out: dict[str, float] = {
        "count_s": t2 - t1,
        "count_s_per_item": (t2 - t1) / items,
        "count_s_per_file": (t2 - t1) / scopes,
        "input_s_per_request": ((t1 - t0) + (t3 - t2)) / len(requests),
        "check_s_per_scope": (t4 - t3) / len(units),
        "tasks": len(tasks),
    }
    count = 200
    for size in (10, 10_000):
        latencies = np.random.default_rng(1).random(size).tobytes()
        batches = [
            pa.Table.from_pylist(
                [{"task": k, "failed": [], "messages": [], "empty": [], "latencies_ms": latencies}],
                schema=distributed._STATS,
            )
            for k in range(count)
        ]
        t5 = time.perf_counter()
        collected = distributed._Collected(count)
        for batch in batches:
            collected.add(batch)
        assert collected.in_order().size == count * size
        per_task = (time.perf_counter() - t5) / count
        out[f"collect_s_per_task_of_{size}"] = per_task
        out[f"collect_s_per_request_of_{size}"] = per_task / size
    return out


def best_of(repeats: int, call: Any) -> tuple[float, Any]:
    """The least wall time of ``repeats`` calls, and the last call's result."""
    best, result = float("inf"), None
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = call()
        best = min(best, time.perf_counter() - t0)
    return best, result


def task_overhead(ray: Any, tasks: int) -> float:
    """Seconds per Ray Data task of a map that does nothing, one task at a time."""
    ds = ray.data.from_items([{"x": i} for i in range(tasks)], override_num_blocks=tasks)
    mapped = ds.map_batches(
        lambda batch: batch, batch_size=1, compute=ray.data.TaskPoolStrategy(size=1), num_cpus=1
    )
    t0 = time.perf_counter()
    rows = sum(len(b["x"]) for b in mapped.iter_batches(batch_size=None, batch_format="numpy"))
    assert rows == tasks
    return (time.perf_counter() - t0) / tasks


def same_parts(first: Path, second: Path) -> dict[str, bool]:
    """Per part file of ``first``, whether ``second`` holds it with the same bytes."""
    one, two = first.resolve(), second.resolve()
    names = sorted(p.relative_to(one).as_posix() for p in one.rglob("*") if p.is_file())
    return {
        n: (two / n).is_file() and (one / n).read_bytes() == (two / n).read_bytes() for n in names
    }


def timed_runs(
    store: Path, requests: list[Request], rank: str, workdir: Path, repeats: int
) -> dict[str, dict[str, Any]]:
    import ray

    def local() -> Any:
        clear_cache()  # every call starts without cached token counts, as a new process does
        out = workdir / "local"
        return run_batch(
            read_store(store), requests, out_dir=out, rank=rank, options=PackOptions(as_of=AS_OF)
        )

    seconds, _ = best_of(repeats, local)
    runs: dict[str, dict[str, Any]] = {
        "local": {"seconds": seconds, "packs_per_s": len(requests) / seconds}
    }
    t0 = time.perf_counter()
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        _node_ip_address="127.0.0.1",
        _temp_dir=tempfile.mkdtemp(prefix="ray-"),
    )
    runs["ray_startup"] = {"seconds": time.perf_counter() - t0}
    try:
        # The first call on a fresh Ray also starts and warms its worker processes
        # (imports, tokenizer); it is reported apart, and the timed runs find them warm.
        t0 = time.perf_counter()
        run_batch_ray(
            store,
            requests[:4],
            out_dir=workdir / "warm",
            rank=rank,
            options=PackOptions(as_of=AS_OF),
        )
        runs["ray_warm_up"] = {"seconds": time.perf_counter() - t0}
        runs["ray_task"] = {"seconds": task_overhead(ray, 200)}
        for workers in (1, 2):
            name = f"ray-{workers}"
            seconds, _ = best_of(
                repeats,
                lambda w=workers, n=name: run_batch_ray(
                    store,
                    requests,
                    out_dir=workdir / n,
                    rank=rank,
                    workers=w,
                    options=PackOptions(as_of=AS_OF),
                ),
            )
            same = same_parts(workdir / "local", workdir / name)
            runs[name] = {
                "seconds": seconds,
                "packs_per_s": len(requests) / seconds,
                "identical_to_local": all(same.values()) and bool(same),
                "parts": len(same),
            }
            print(f"{name}: {seconds:.1f} s, {len(same)} parts identical: {all(same.values())}")
    finally:
        ray.shutdown()
    return runs


def estimate(
    task: dict[str, float], driver: dict[str, float], runs: dict[str, Any]
) -> dict[str, Any]:
    """The time of the target run per cluster size, from the measured unit costs.

    The target's scopes are all requested (1M draws over 100,000 scopes), so
    its tasks are its items over :data:`TASK_ITEMS`; its store has a file
    per scope, so the driver's count costs its measured time per file.
    Workers: every scope read once and every request packed, plus Ray's
    overhead per task, shared by ``W``. Driver: counting the store, reading
    the requests and checking the scopes' clauses before the tasks start,
    then collecting a task's row while they run (the cost measured for tasks
    of 10,000 requests); no result comes back, so nothing per manifest entry.
    """
    overhead = runs["ray_task"]["seconds"]
    tasks = TARGET["items"] // TASK_ITEMS
    per_scope_requests = TARGET["requests"] / TARGET["scopes"]
    scope_s = task["read_s_per_scope"] + per_scope_requests * task["pack_s_per_request"]
    terms = {
        "count": TARGET["scopes"] * driver["count_s_per_file"],
        "input": TARGET["requests"] * driver["input_s_per_request"],
        "check": TARGET["scopes"] * driver["check_s_per_scope"],
        "collect": tasks * driver["collect_s_per_task_of_10000"],
    }
    driver_s = sum(terms.values())
    rows = []
    for workers in WORKERS:
        compute = (TARGET["scopes"] * scope_s + tasks * overhead) / workers
        before = driver_s - terms["collect"]  # counting, reading and checking: serial
        wall = runs["ray_startup"]["seconds"] + before + max(compute, terms["collect"])
        rows.append(
            {
                "workers": workers,
                "tasks": tasks,
                "compute_s": compute,
                "driver_s": driver_s,
                "wall_s": wall,
                "packs_per_s": TARGET["requests"] / wall,
                "bound": "workers" if compute >= driver_s else "driver",
            }
        )
    return {
        "overhead_s_per_task": overhead,
        "scope_s": scope_s,
        "tasks": tasks,
        "driver_terms_s": terms,
        "target": TARGET,
        "rows": rows,
    }


def command(setup: dict[str, Any]) -> str:
    """The command line that gives ``setup``."""
    if setup["small"]:
        return "python benchmarks/bench_ray.py --small"
    args = [
        f"--{name} {setup[name]}"
        for name, default in (("items", 1_000_000), ("scopes", 1_000), ("requests", 20_000))
        if setup[name] != default
    ]
    if setup["rank"] != "bm25":
        args.append(f"--rank {setup['rank']}")
    return " ".join(["python benchmarks/bench_ray.py", *args])


def markdown(result: dict[str, Any]) -> str:
    runs, setup, est = result["runs"], result["setup"], result["estimate"]
    costs, driver = result["costs"], result["driver"]
    terms = est["driver_terms_s"]
    lines = [
        "## Batch packing on Ray Data\n",
        f"{setup['items']:,} items in {setup['scopes']:,} conversations (hive-partitioned "
        f"Parquet), {setup['requests']:,} requests, rank {setup['rank']}, budget {BUDGET} "
        f"tokens; {setup['cpus']} cores shared with other work. Whole calls, wall-clock. "
        f"`{command(setup)}`\n",
        "| engine | seconds | packs/s | parts identical to local |",
        "|---|---:|---:|---|",
    ]
    for name in ("local", "ray-1", "ray-2"):
        run = runs[name]
        same = "-"
        if name != "local":
            same = f"{'yes' if run['identical_to_local'] else 'NO'} ({run['parts']} files)"
        lines.append(f"| {name} | {run['seconds']:.1f} | {run['packs_per_s']:.1f} | {same} |")
    lines += [
        "",
        f"Ray 2 workers / 1 worker: **{result['ratio_2_to_1']:.2f}x**; Ray 2 workers / local: "
        f"{result['ratio_2_to_local']:.2f}x (one run each, on cores shared with other work). "
        f"Not in the rows above: Ray's start-up {runs['ray_startup']['seconds']:.1f} s, and "
        f"the first call on it (4 requests, starting and warming its workers) "
        f"{runs['ray_warm_up']['seconds']:.1f} s.\n",
        f"Measured per unit, on a worker (sample of {costs['sampled_scopes']} scopes, "
        f"{costs['sampled_requests']} requests): reading a scope "
        f"{costs['read_s_per_scope'] * 1000:.1f} ms, packing a request and writing it into "
        f"the task's parts {costs['pack_s_per_request'] * 1000:.2f} ms; Ray's overhead per "
        f"task (a map that does nothing, one task at a time) "
        f"{est['overhead_s_per_task'] * 1000:.1f} ms.\n",
        "On the driver, no result comes back: a task writes its own parts and sends one row "
        "(its latencies as one buffer). Collecting a task's row takes "
        f"{driver['collect_s_per_task_of_10'] * 1e6:.0f} µs for a task of 10 requests and "
        f"{driver['collect_s_per_task_of_10000'] * 1e6:.0f} µs for one of 10,000 "
        f"({driver['collect_s_per_request_of_10000'] * 1e9:.1f} ns per request: a copy of "
        "its latency). What the driver still does before the tasks run: count the store's "
        f"items by the scopes' key to cut the tasks, {driver['count_s']:.2f} s here "
        f"({driver['count_s_per_file'] * 1000:.2f} ms per partition file, "
        f"{driver['count_s_per_item'] * 1e9:.0f} ns per item); check each scope's `where`, "
        f"{driver['check_s_per_scope'] * 1e6:.0f} µs per scope; read, group and send the "
        f"requests, {driver['input_s_per_request'] * 1e6:.1f} µs per request.\n",
        f"Estimate for {TARGET['items']:,} items, {TARGET['requests']:,} requests in "
        f"{TARGET['scopes']:,} scopes ({TARGET['items'] // TARGET['scopes']:,} items each; "
        f"{est['scope_s']:.3f} s a scope on a worker; {est['tasks']:,} tasks of "
        f"{TASK_ITEMS:,} items). The driver's time is counting {terms['count']:.0f} s + "
        f"checking the scopes {terms['check']:.0f} s + reading and sending the requests "
        f"{terms['input']:.0f} s + collecting the tasks {terms['collect']:.1f} s:\n",
        "| workers | workers' time (s) | driver's time (s) | wall (s) | packs/s | bound by |",
        "|---:|---:|---:|---:|---:|---|",
    ]
    for row in est["rows"]:
        lines.append(
            f"| {row['workers']} | {row['compute_s']:.0f} | {row['driver_s']:.0f} | "
            f"{row['wall_s']:.0f} | {row['packs_per_s']:.0f} | {row['bound']} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", action="store_true", help="20k items, 100 scopes, 1k requests.")
    parser.add_argument("--items", type=int, default=1_000_000)
    parser.add_argument("--scopes", type=int, default=1_000)
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--rank", choices=("bm25", "recency"), default="bm25")
    parser.add_argument("--sample", type=int, default=20, help="Scopes sampled for unit costs.")
    parser.add_argument(
        "--repeats", type=int, default=1, help="Calls per engine; the least counts."
    )
    parser.add_argument("--out", type=Path, default=RESULTS / "ray.json")
    args = parser.parse_args(argv)
    if args.small:
        args.items, args.scopes, args.requests = 20_000, 100, 1_000
    workdir = Path(tempfile.mkdtemp(prefix="bench-ray-"))
    try:
        t0 = time.perf_counter()
        make_store(workdir / "store", args.items, args.scopes)
        requests = make_requests(args.requests, args.scopes)
        print(f"store written in {time.perf_counter() - t0:.1f} s", flush=True)
        costs = unit_costs(workdir / "store", requests, args.rank, args.sample)
        driver = driver_costs(workdir / "store", requests, args.items, args.scopes)
        runs = timed_runs(workdir / "store", requests, args.rank, workdir, args.repeats)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    units = len({r.where for r in requests})
    result = {
        "setup": {
            "items": args.items,
            "scopes": args.scopes,
            "units": units,
            "requests": args.requests,
            "rank": args.rank,
            "small": args.small,
            "cpus": os.cpu_count(),
        },
        "costs": costs,
        "driver": driver,
        "runs": runs,
        "ratio_2_to_1": runs["ray-1"]["seconds"] / runs["ray-2"]["seconds"],
        "ratio_2_to_local": runs["local"]["seconds"] / runs["ray-2"]["seconds"],
        "estimate": estimate(costs, driver, runs),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    args.out.with_suffix(".md").write_text(markdown(result))
    print(markdown(result), flush=True)
    return result


if __name__ == "__main__":
    main()
