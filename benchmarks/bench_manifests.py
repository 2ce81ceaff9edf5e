"""Columnar manifests: bytes of the two forms, and the memory of ``cognoxium inspect``.

1. One LoCoMo run (rank BM25, one budget, no compared methods) is packed
   twice, with ``--manifests parquet`` and ``--manifests jsonl``; the bytes
   of the Parquet form's parts (and of its headers' parts) are compared
   with those of the JSONL form's parts (the rows of the table below name
   each form by the one file it was written as before the output came in
   parts). Both forms are read back and compared.
2. A JSONL manifests file of about ``--size-gb`` GB is generated from that
   run's JSONL manifests (their lines repeated, each copy relabelled), and
   ``cognoxium inspect FILE --json`` runs on it in a child process; its peak
   resident memory comes from ``/usr/bin/time -f %M`` (Linux). The same is
   measured for the run's own files (both forms), and, for contrast, for the
   eager path (``summarize_manifests(read_manifests(DIR))``, every manifest
   held as an object) on the run's JSONL manifests.

Results go to ``benchmarks/results/manifests.json`` and ``manifests.md``.
Timings are wall-clock seconds on a shared machine.

Usage: ``python benchmarks/bench_manifests.py [--locomo PATH] [--budget 1024]
[--size-gb 1.0] [--work DIR]``; the LoCoMo file defaults to
``$COGNOXIUM_LOCOMO``, else ``../shared/data/locomo/locomo7.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from cognoxium.app.locomo import run_locomo
from cognoxium.packing.manifests import MANIFEST_HEADERS, MANIFESTS, part_files, read_manifests

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
DEFAULT_LOCOMO = REPO.parent / "shared" / "data" / "locomo" / "locomo7.json"
COGNOXIUM = Path(sys.executable).with_name("cognoxium")
EAGER = (
    "import sys; from cognoxium.packing.manifests import read_manifests, summarize_manifests; "
    "summarize_manifests(read_manifests(sys.argv[1]))"
)


def peak(command: list[str]) -> dict[str, Any]:
    """Run ``command``; its wall time (s), peak resident memory (MB) and exit code."""
    with tempfile.NamedTemporaryFile("r", suffix=".rss") as rss:
        started = time.perf_counter()
        done = subprocess.run(
            ["/usr/bin/time", "-f", "%M", "-o", rss.name, *command],
            capture_output=True,
            text=True,
            check=False,
        )
        seconds = time.perf_counter() - started
        kilobytes = int(rss.read().strip().splitlines()[-1])
    if done.returncode != 0:
        raise SystemExit(f"{command} failed ({done.returncode}): {done.stderr}")
    return {"seconds": round(seconds, 2), "peak_rss_mb": round(kilobytes / 1024, 1)}


def pack_both(locomo: Path, budget: int, work: Path) -> dict[str, Any]:
    """One LoCoMo run per manifest form; the bytes of each form's files."""
    out: dict[str, Any] = {}
    for form in ("parquet", "jsonl"):
        started = time.perf_counter()
        report = run_locomo(locomo, work / form, [budget], rank="bm25", manifests=form)
        out[form] = {
            "seconds": round(time.perf_counter() - started, 2),
            "packs": report["batch"]["requests"],
        }
    jsonl = table_bytes(work / "jsonl", MANIFESTS, ".jsonl")
    parquet = table_bytes(work / "parquet", MANIFESTS, ".parquet")
    headers = table_bytes(work / "parquet", MANIFEST_HEADERS, ".jsonl")
    same = read_manifests(work / "parquet") == read_manifests(work / "jsonl")
    return {
        "runs": out,
        "bytes": {"manifests.jsonl": jsonl, "manifests.parquet": parquet, "headers": headers},
        "parquet_over_jsonl": parquet / jsonl,
        "parquet_and_headers_over_jsonl": (parquet + headers) / jsonl,
        "forms_read_back_equal": same,
    }


def table_bytes(folder: Path, table: str, suffix: str) -> int:
    """The bytes of a table's parts."""
    return sum(part.stat().st_size for part in part_files(folder / table, suffix))


def generate(source: Path, target: Path, size: int) -> dict[str, int]:
    """Repeat the lines of the JSONL manifests of ``source`` into ``target`` up to ``size`` bytes.

    Each copy's labels get a ``copy<k>:`` prefix (the top-level ``"label"``
    key is the only one in a LoCoMo manifest), so every manifest is distinct.
    """
    parts = part_files(source / MANIFESTS, ".jsonl")
    lines = [line for part in parts for line in part.read_text(encoding="utf-8").splitlines()]
    written = manifests = copy = 0
    with target.open("w", encoding="utf-8") as handle:
        while written < size:
            for line in lines:
                text = line.replace('"label":"', f'"label":"copy{copy}:', 1) + "\n"
                handle.write(text)
                written += len(text.encode("utf-8"))
                manifests += 1
            copy += 1
    return {"bytes": target.stat().st_size, "manifests": manifests, "copies": copy}


def inspect(path: Path) -> dict[str, Any]:
    return peak([str(COGNOXIUM), "inspect", str(path), "--json"])


def markdown(results: dict[str, Any]) -> str:
    size = results["size"]
    mb = 1024 * 1024
    rows = [
        f"| `cognoxium inspect` {name} | {r['input_mb']:.0f} MB | {r['seconds']:.1f} | "
        f"{r['peak_rss_mb']:.0f} |"
        for name, r in results["inspect"].items()
    ]
    return "\n".join(
        [
            "# Columnar manifests",
            "",
            f"LoCoMo ({results['locomo']}), rank BM25, budget {results['budget']}, "
            f"{size['runs']['parquet']['packs']} packs; `python benchmarks/bench_manifests.py`.",
            "",
            "| file | bytes | share of manifests.jsonl |",
            "|---|---|---|",
            f"| manifests.jsonl | {size['bytes']['manifests.jsonl']:,} | 1 |",
            f"| manifests.parquet | {size['bytes']['manifests.parquet']:,} | "
            f"{size['parquet_over_jsonl']:.4f} (1/{1 / size['parquet_over_jsonl']:.0f}) |",
            f"| manifests.parquet + manifest_headers.jsonl | "
            f"{size['bytes']['manifests.parquet'] + size['bytes']['headers']:,} | "
            f"{size['parquet_and_headers_over_jsonl']:.4f} |",
            "",
            f"Both forms read back equal: {size['forms_read_back_equal']}. Generated JSONL: "
            f"{results['generated']['bytes'] / mb:,.0f} MB, "
            f"{results['generated']['manifests']:,} manifests.",
            "",
            "| command | input | seconds | peak RSS (MB) |",
            "|---|---|---|---|",
            *rows,
            "",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--locomo", type=Path, default=Path(os.environ.get("COGNOXIUM_LOCOMO", DEFAULT_LOCOMO))
    )
    parser.add_argument("--budget", type=int, default=1024)
    parser.add_argument("--size-gb", type=float, default=1.0)
    parser.add_argument("--work", type=Path, default=None, help="Kept when given.")
    args = parser.parse_args()
    if not args.locomo.exists():
        parser.error(f"no LoCoMo file at {args.locomo}; give --locomo PATH")
    work = args.work or Path(tempfile.mkdtemp(prefix="bench-manifests-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        size = pack_both(args.locomo, args.budget, work)
        big = work / "big" / "manifests.jsonl"
        big.parent.mkdir(exist_ok=True)
        generated = generate(work / "jsonl", big, int(args.size_gb * 1024**3))
        targets = {
            "of the generated manifests.jsonl": big,
            "of the run's JSONL manifests": work / "jsonl",
            "of the run's Parquet directory": work / "parquet",
        }
        measured = {}
        for name, path in targets.items():
            files = [path] if path.is_file() else list(path.glob("manifest*/part-*"))
            measured[name] = {
                "input_mb": sum(f.stat().st_size for f in files) / 1024**2,
                **inspect(path),
            }
        eager = peak([sys.executable, "-c", EAGER, str(work / "jsonl")])
        measured["(eager read_manifests + summarize) of the run's JSONL manifests"] = {
            "input_mb": size["bytes"]["manifests.jsonl"] / 1024**2,
            **eager,
        }
        results = {
            "locomo": args.locomo.name,
            "budget": args.budget,
            "size": size,
            "generated": generated,
            "inspect": measured,
        }
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "manifests.json").write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    (RESULTS / "manifests.md").write_text(markdown(results))
    print(markdown(results))


if __name__ == "__main__":
    main()
