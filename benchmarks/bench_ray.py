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

Every Ray run's files are compared byte for byte with the local run's.

The estimate for larger runs (10M items, 1M requests in 100,000 scopes, on
8, 32 and 128 workers) uses costs measured in the same process on a sample
of scopes: reading one scope's part of the store (``read_part``), packing
one request (``pack_scope``, with rendering its result and encoding its rows
as a task sends them), and the driver's serial work (decoding the rows and
appending the rendered result, per manifest entry); Ray's overhead per task
is measured on a Ray Data map that does nothing, one task at a time. A run
of ``R`` requests in ``U`` scopes of ``n`` items, cut into ``T`` tasks on
``W`` workers, then takes about::

    max((U * (read + R/U * pack) + T * overhead) / W,  R * n * driver_per_entry)

(workers and the driver overlap), plus Ray's start-up; the table names the
term that bounds it.

Usage: ``python benchmarks/bench_ray.py [--small] [--items 1000000] [--scopes 1000]
[--requests 20000] [--rank bm25] [--out benchmarks/results/ray.json]``
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from bench_pack import synthetic_items
from cognoxium.app._scopes import ScopeIndex, batch_units
from cognoxium.app.batch import (
    BatchSettings,
    PreparedScope,
    RenderedResult,
    Request,
    pack_scope,
    run_batch,
)
from cognoxium.app.distributed import TASKS_PER_SLOT, read_part, run_batch_ray
from cognoxium.items.store import read_store, write_partitioned
from cognoxium.packing.manifests import ManifestWriter, RenderedManifests
from cognoxium.packing.options import PackOptions
from cognoxium.tokens.profiles import clear_cache

RESULTS = Path(__file__).resolve().parent / "results"
AS_OF = datetime(2026, 1, 1, tzinfo=UTC)
BUDGET = 1024
FILES = ("packs.jsonl", "manifests.parquet", "manifest_headers.jsonl")
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


def make_requests(count: int, scopes: int, seed: int = 11) -> list[Request]:
    rng = np.random.default_rng(seed)
    width = len(str(scopes - 1))
    picks = rng.integers(0, scopes, size=count)
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


def _ipc(frame: pl.DataFrame) -> bytes:
    buffer = io.BytesIO()
    frame.write_ipc(buffer, compression="uncompressed")
    return buffer.getvalue()


def unit_costs(store: Path, requests: list[Request], rank: str, sample: int) -> dict[str, float]:
    """Seconds of a task's work and of the driver's, per scope, request and manifest entry.

    A task reads its scope's part of the store (``read_part``), splits it
    (``ScopeIndex``), packs the requests and renders them for the files (the
    manifest rows encoded as Arrow IPC, as a task sends them); the driver
    decodes the rows and appends the rendered result
    (:meth:`~cognoxium.app.batch.RenderedResult.write`), work that grows with
    the manifest entries it appends (requests x scope items), not with a
    pass per request.
    """
    by_scope: dict[str | None, list[Request]] = {}
    for request in requests:
        by_scope.setdefault(request.where, []).append(request)
    chosen = list(by_scope.items())[:sample]
    settings = BatchSettings(PackOptions(as_of=AS_OF), rank)
    read_s = pack_s = write_s = 0.0
    packed = entries = 0
    with tempfile.TemporaryDirectory() as tmp:
        packs = (Path(tmp) / "packs.jsonl").open("w", encoding="utf-8")
        with packs, ManifestWriter(tmp, "parquet") as writer:
            for where, group in chosen:
                unit = batch_units(group)[0]
                t0 = time.perf_counter()
                part = read_part(store, [where])
                rows = ScopeIndex(part, [unit]).rows(unit)
                t1 = time.perf_counter()
                prepared = PreparedScope(part, rows, settings)
                rendered = pack_scope(part, group, settings, prepared=prepared).render("parquet")
                assert rendered.manifests.entries is not None
                sent = _ipc(rendered.manifests.entries)
                t2 = time.perf_counter()
                manifests = RenderedManifests(
                    "parquet",
                    rendered.manifests.lines,
                    pl.read_ipc(io.BytesIO(sent)),
                    rendered.manifests.sizes,
                )
                RenderedResult(rendered.packs, manifests, rendered.latencies_ms).write(
                    packs, writer
                )
                t3 = time.perf_counter()
                read_s += t1 - t0
                pack_s += t2 - t1
                write_s += t3 - t2
                packed += len(group)
                entries += sum(rendered.manifests.sizes)
    return {
        "read_s_per_scope": read_s / len(chosen),
        "pack_s_per_request": pack_s / packed,
        "driver_s_per_request": write_s / packed,
        "driver_s_per_entry": write_s / entries,
        "sampled_scopes": len(chosen),
        "sampled_requests": packed,
        "sampled_entries": entries,
    }


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
            same = {
                f: (workdir / "local" / f).read_bytes() == (workdir / name / f).read_bytes()
                for f in FILES
            }
            runs[name] = {
                "seconds": seconds,
                "packs_per_s": len(requests) / seconds,
                "identical_to_local": all(same.values()),
                "identical_files": same,
            }
            print(f"{name}: {seconds:.1f} s, identical to local: {same}", flush=True)
    finally:
        ray.shutdown()
    return runs


def estimate(costs: dict[str, float], runs: dict[str, Any]) -> dict[str, Any]:
    """The time of the target run per cluster size, from the measured unit costs.

    Ray's overhead per task is measured on a map that does nothing; a task
    takes about ``TASKS_PER_SLOT`` tasks' share of the scopes, so the overhead
    is paid per task, not per scope. The driver's work is its cost per
    manifest entry times the entries (requests x items per scope).
    """
    overhead = runs["ray_task"]["seconds"]
    per_scope_requests = TARGET["requests"] / TARGET["scopes"]
    scope_items = TARGET["items"] / TARGET["scopes"]
    scope_s = costs["read_s_per_scope"] + per_scope_requests * costs["pack_s_per_request"]
    rows = []
    for workers in WORKERS:
        tasks = min(TARGET["scopes"], workers * TASKS_PER_SLOT)
        compute = (TARGET["scopes"] * scope_s + tasks * overhead) / workers
        driver = TARGET["requests"] * scope_items * costs["driver_s_per_entry"]
        wall = max(compute, driver) + runs["ray_startup"]["seconds"]
        rows.append(
            {
                "workers": workers,
                "tasks": tasks,
                "compute_s": compute,
                "driver_s": driver,
                "wall_s": wall,
                "packs_per_s": TARGET["requests"] / wall,
                "bound": "workers" if compute >= driver else "driver",
            }
        )
    return {"overhead_s_per_task": overhead, "scope_s": scope_s, "target": TARGET, "rows": rows}


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
    runs, setup, est, costs = result["runs"], result["setup"], result["estimate"], result["costs"]
    lines = [
        "## Batch packing on Ray Data\n",
        f"{setup['items']:,} items in {setup['scopes']:,} conversations (hive-partitioned "
        f"Parquet), {setup['requests']:,} requests, rank {setup['rank']}, budget {BUDGET} "
        f"tokens; {setup['cpus']} cores shared with other work. Whole calls, wall-clock. "
        f"`{command(setup)}`\n",
        "| engine | seconds | packs/s | files identical to local |",
        "|---|---:|---:|---|",
    ]
    for name in ("local", "ray-1", "ray-2"):
        run = runs[name]
        same = "-" if name == "local" else ("yes" if run["identical_to_local"] else "NO")
        lines.append(f"| {name} | {run['seconds']:.1f} | {run['packs_per_s']:.1f} | {same} |")
    lines += [
        "",
        f"Ray 2 workers / 1 worker: **{result['ratio_2_to_1']:.2f}x**; Ray 2 workers / local: "
        f"{result['ratio_2_to_local']:.2f}x. Not in the rows above: Ray's start-up "
        f"{runs['ray_startup']['seconds']:.1f} s, and the first call on it (4 requests, "
        f"starting and warming its workers) {runs['ray_warm_up']['seconds']:.1f} s.\n",
        f"Measured per unit (sample of {costs['sampled_scopes']} scopes, "
        f"{costs['sampled_requests']} requests): reading a scope "
        f"{costs['read_s_per_scope'] * 1000:.1f} ms, packing a request "
        f"{costs['pack_s_per_request'] * 1000:.2f} ms (rendering its lines and rows "
        f"included), driver appending a request's rendered result "
        f"{costs['driver_s_per_request'] * 1000:.3f} ms "
        f"({costs['driver_s_per_entry'] * 1e6:.2f} µs per manifest entry); Ray's overhead "
        f"per task "
        f"(a map that does nothing, one task at a time) "
        f"{est['overhead_s_per_task'] * 1000:.1f} ms.\n",
        f"Estimate for {TARGET['items']:,} items, {TARGET['requests']:,} requests in "
        f"{TARGET['scopes']:,} scopes ({TARGET['items'] // TARGET['scopes']:,} items each, "
        f"the measured costs per scope and request: {est['scope_s']:.3f} s a scope; about "
        f"{TASKS_PER_SLOT} tasks per worker):\n",
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
        "runs": runs,
        "ratio_2_to_1": runs["ray-1"]["seconds"] / runs["ray-2"]["seconds"],
        "ratio_2_to_local": runs["local"]["seconds"] / runs["ray-2"]["seconds"],
        "estimate": estimate(costs, runs),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    args.out.with_suffix(".md").write_text(markdown(result))
    print(markdown(result), flush=True)
    return result


if __name__ == "__main__":
    main()
