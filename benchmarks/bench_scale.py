"""Batch packing whose cost follows the work: ``cognoxium pack`` against a floor packer.

Stores of ``bench_pack.synthetic_items`` chat items, hive-partitioned by
conversation (``bench_ray.make_store``: ``conversation=<id>/part-0.parquet``),
with requests each scoped to one conversation (``where =
"metadata.conversation = '<id>'"``, drawn at random, seeded, so the scopes
interleave), a three-word query, rank ``bm25``, budget 1,024 tokens
(``bench_ray.make_requests``). Each row of the table is one store:

============================ ======== ======== ========
row                          items    scopes   requests
============================ ======== ======== ========
20k                          20,000   20       40
100k                         100,000  100      200
1M                           1,000,000 1,000   2,000
1M, 10,000 scopes            1,000,000 10,000  2,000
============================ ======== ======== ========

(``--quick``: the first two rows only; ``--rows`` picks rows by name.)

Timed, each as a whole new process (interpreter start, imports, reading,
packing, writing), the runs of one row taking turns in every round:

cognoxium
    ``cognoxium pack STORE REQUESTS --out DIR --rank bm25 --as-of ... --quiet``,
    with ``--workers 1`` and with the default (one worker per CPU).
floor
    :func:`floor_main` in a process of its own: Polars reads the store once
    and splits it by conversation (``partition_by``); per scope, a bm25s +
    PyStemmer index and tiktoken (cl100k_base) counts built once; per
    request, the BM25 order and a greedy fill under the budget (the OpenAI
    Cookbook's chat costing, as ``bench_batch.floor_pack``); it writes
    ``packs.jsonl`` and one Parquet row per (request, item) decision.

Reported per row: the median seconds of each run over ``--repeats`` rounds,
its CPU seconds and peak resident memory (of its largest process, in MiB),
the ratios cognoxium / floor (each round's ratio, then the median), the
seconds per request, ``--workers 1`` / default, and whether the files of
``--workers 1`` and of the default are the same, byte for byte. The cost per
request at 1M items is compared with the one at 100k (the same scope size,
1,000 items). ``cognoxium pack`` writes its tables in parts, one per task of
scopes; "the same files" compares every part. Results go to ``benchmarks/results/scale.json`` and
``scale.md``.

Usage: ``python benchmarks/bench_scale.py [--quick] [--rows 100k,1M] [--repeats 3]
[--work DIR]``; ``--work`` keeps the stores between runs (they are built
once per directory). ``python benchmarks/bench_scale.py --floor STORE
REQUESTS OUT`` runs the floor alone.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import Stemmer

from bench_batch import FloorScope, cl100k_base, floor_request, floor_scope
from bench_ray import BUDGET, make_requests, make_store
from processes import Measured, measured

RESULTS = Path(__file__).resolve().parent / "results"
HERE = Path(__file__).resolve().parent
AS_OF = "2026-01-01T00:00:00Z"
ROWS: dict[str, tuple[int, int, int]] = {
    "20k": (20_000, 20, 40),
    "100k": (100_000, 100, 200),
    "1M": (1_000_000, 1_000, 2_000),
    "1M-10k-scopes": (1_000_000, 10_000, 2_000),
    "5M": (5_000_000, 5_000, 10_000),
}
DEFAULT_ROWS = ("20k", "100k", "1M", "1M-10k-scopes")
"""The rows run unless ``--rows`` names others (5M takes about 15 minutes a round)."""


# -- the floor ------------------------------------------------------------------


def floor_main(store: Path, requests_path: Path, out: Path) -> None:
    """Pack every request with the least work the job needs, and write the files."""
    encoding = cl100k_base()
    stemmer = Stemmer.Stemmer("english")
    requests = [json.loads(line) for line in requests_path.read_text().splitlines()]
    items = pl.read_parquet(
        store / "**" / "*.parquet",
        hive_partitioning=True,
        hive_schema={"conversation": pl.String()},
        columns=["id", "role", "text", "conversation"],
    )
    scopes = items.partition_by("conversation", as_dict=True, include_key=False)
    role_cost: dict[str, int] = {}
    built: dict[str, FloorScope] = {}
    out.mkdir(parents=True, exist_ok=True)
    decisions: list[pl.DataFrame] = []
    with (out / "packs.jsonl").open("w", encoding="utf-8") as packs:
        for request in requests:
            conversation = request["where"].split("'")[1]
            if conversation not in built:
                scope = scopes[(conversation,)]
                built[conversation] = floor_scope(scope, encoding, stemmer, role_cost)
            scope_built = built[conversation]
            chosen, _, scores = floor_request(scope_built, request["query"], BUDGET, stemmer)
            ids = scope_built.ids
            packs.write(
                json.dumps({"request_id": request["id"], "ids": [ids[i] for i in chosen]}) + "\n"
            )
            included = np.zeros(len(ids), dtype=bool)
            included[chosen] = True
            decisions.append(
                pl.DataFrame(
                    {
                        "request_id": [request["id"]] * len(ids),
                        "id": ids,
                        "included": included,
                        "tokens": scope_built.costs,
                        "rank": scores,
                    }
                )
            )
    pl.concat(decisions).write_parquet(out / "decisions.parquet")


# -- the runs -------------------------------------------------------------------


def build(work: Path, name: str) -> tuple[Path, Path]:
    """The store and requests of a row, built once in ``work``."""
    items, scopes, count = ROWS[name]
    root = work / name
    store, requests = root / "store", root / "requests.jsonl"
    if not requests.is_file():
        root.mkdir(parents=True, exist_ok=True)
        make_store(store, items, scopes)
        lines = [json.dumps(r.to_record()) for r in make_requests(count, scopes)]
        requests.write_text("\n".join(lines) + "\n")
    return store, requests


def _cognoxium(store: Path, requests: Path, out: Path, workers: int | None) -> list[str]:
    exe = Path(sys.executable).with_name("cognoxium")
    command = [str(exe), "pack", str(store), str(requests), "--out", str(out)]
    command += ["--rank", "bm25", "--as-of", AS_OF, "--quiet"]
    return command + (["--workers", str(workers)] if workers is not None else [])


def timed(command: list[str]) -> Measured:
    """Wall and CPU seconds and peak memory of one whole process; raises if it fails."""
    return measured(command, cwd=HERE)


def same_parts(first: Path, second: Path) -> bool:
    """Whether two outputs hold the same part files, byte for byte."""
    one, two = first.resolve(), second.resolve()
    names = sorted(p.relative_to(one).as_posix() for p in one.rglob("*") if p.is_file())
    others = sorted(p.relative_to(two).as_posix() for p in two.rglob("*") if p.is_file())
    return (
        bool(names)
        and names == others
        and all((one / n).read_bytes() == (two / n).read_bytes() for n in names)
    )


def run_row(name: str, work: Path, repeats: int) -> dict[str, Any]:
    store, requests = build(work, name)
    out = work / name / "out"
    commands = {
        "floor": [sys.executable, str(Path(__file__)), "--floor", str(store), str(requests)],
        "workers_1": _cognoxium(store, requests, out / "w1", 1),
        "default": _cognoxium(store, requests, out / "default", None),
    }
    commands["floor"].append(str(out / "floor"))
    seconds: dict[str, list[float]] = {key: [] for key in commands}
    cpu: dict[str, list[float]] = {key: [] for key in commands}
    peak: dict[str, list[float]] = {key: [] for key in commands}
    for _ in range(repeats):
        for key, command in commands.items():
            run = timed(command)
            seconds[key].append(run.wall_s)
            cpu[key].append(run.cpu_s)
            peak[key].append(run.peak_mb)
    same = same_parts(out / "w1", out / "default")
    count = ROWS[name][2]
    median = {key: statistics.median(values) for key, values in seconds.items()}
    return {
        "items": ROWS[name][0],
        "scopes": ROWS[name][1],
        "requests": count,
        "seconds": seconds,
        "median_s": median,
        "cpu_s": cpu,
        "peak_mb": peak,
        "median_peak_mb": {key: statistics.median(values) for key, values in peak.items()},
        "ratio_default_to_floor": statistics.median(
            d / f for d, f in zip(seconds["default"], seconds["floor"], strict=True)
        ),
        "ratio_workers_1_to_floor": statistics.median(
            d / f for d, f in zip(seconds["workers_1"], seconds["floor"], strict=True)
        ),
        "speedup_default_over_workers_1": statistics.median(
            w / d for w, d in zip(seconds["workers_1"], seconds["default"], strict=True)
        ),
        "s_per_request": {key: value / count for key, value in median.items()},
        "same_files_workers_1_and_default": same,
    }


def markdown(result: dict[str, Any]) -> str:
    lines = [
        "# Batch packing at scale: `cognoxium pack` against a floor packer",
        "",
        f"bm25, budget {BUDGET:,}, stores hive-partitioned by conversation; each figure the "
        f"median of {result['repeats']} rounds of whole processes, the runs taking turns "
        f"({result['machine']['cpus']} CPUs; default workers = {result['default_workers']}).",
        "",
        "| items | scopes | requests | floor s | cognoxium s (default) | ratio | "
        "--workers 1 s | ratio | workers speed-up | same files | peak MiB (default) | "
        "peak MiB (--workers 1) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in result["rows"].values():
        m = row["median_s"]
        peaks = row.get("median_peak_mb", {})  # none in the runs before it was measured
        peak = {k: f"{v:,.0f}" for k, v in peaks.items()}
        lines.append(
            f"| {row['items']:,} | {row['scopes']:,} | {row['requests']:,} | {m['floor']:.2f} | "
            f"{m['default']:.2f} | {row['ratio_default_to_floor']:.2f}x | {m['workers_1']:.2f} | "
            f"{row['ratio_workers_1_to_floor']:.2f}x | "
            f"{row['speedup_default_over_workers_1']:.2f}x | "
            f"{'yes' if row['same_files_workers_1_and_default'] else 'NO'} | "
            f"{peak.get('default', '-')} | {peak.get('workers_1', '-')} |"
        )
    flat = result.get("per_request_1M_over_100k")
    if flat is not None:
        lines += [
            "",
            f"Seconds per request at 1M items over those at 100k (1,000 items per scope): "
            f"{flat['default']:.2f} (default workers), {flat['workers_1']:.2f} (--workers 1).",
        ]
    rows = ",".join(result["rows"])
    command = f"python benchmarks/bench_scale.py --rows {rows} --repeats {result['repeats']}"
    lines += ["", f"Command: `{command}` (see its docstring).", ""]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--floor", nargs=3, type=Path, metavar=("STORE", "REQUESTS", "OUT"))
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rows", default=",".join(DEFAULT_ROWS))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--work", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=RESULTS / "scale.json")
    args = parser.parse_args(argv)
    if args.floor is not None:
        floor_main(*args.floor)
        return {}
    names = ["20k", "100k"] if args.quick else args.rows.split(",")
    unknown = [n for n in names if n not in ROWS]
    if unknown or args.repeats < 1:
        parser.error(f"unknown rows {unknown}; use {list(ROWS)}; --repeats >= 1")
    work = args.work or Path(tempfile.mkdtemp(prefix="bench-scale-"))
    from cognoxium.app._workers import default_workers

    result: dict[str, Any] = {"repeats": args.repeats, "default_workers": default_workers()}
    result["rows"] = {}
    for name in names:
        result["rows"][name] = run_row(name, work, args.repeats)
        row = result["rows"][name]
        print(
            name,
            json.dumps(row["median_s"]),
            "peak MiB",
            json.dumps(row["median_peak_mb"]),
            flush=True,
        )
    rows = result["rows"]
    if "1M" in rows and "100k" in rows:
        result["per_request_1M_over_100k"] = {
            key: rows["1M"]["s_per_request"][key] / rows["100k"]["s_per_request"][key]
            for key in ("default", "workers_1", "floor")
        }
    result["machine"] = {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "polars": pl.__version__,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    args.out.with_suffix(".md").write_text(markdown(result))
    return result


if __name__ == "__main__":
    main()
