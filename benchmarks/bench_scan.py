"""Lazy Parquet scans: a filtered count against Polars' own scan, and what one scope's pack reads.

Builds a synthetic hive-partitioned store in a temporary directory: ``--items``
chat-like items over ``--scopes`` scopes, one file per scope
(``scope=<id>/part.parquet``, written by ``cognoxium.items.write_parquet``);
the same items in one file (``items.parquet``); and the same items as the
partitioned store ``cognoxium.items.store.write_partitioned`` writes
(``scope=<id>/part-0.parquet`` with each item's store position, which a scan
gives the items back in). Then, in one run:

count
    For each of the three sources and each filter, the user's whole call
    ``CognitionFrame.scan_parquet(source).filter(f).count()`` against Polars'
    ``pl.scan_parquet(source).filter(f).select(pl.len()).collect()``, timed
    alternately for ``--repeats`` rounds; best (minimum) and median of each,
    and the ratio of the bests (Cognoxium over Polars). Both answers must agree.
scope pack
    ``CognitionFrame.scan_parquet(store).filter(pl.col("scope") == s).pack(...)``
    for one scope: the files and rows the scan read
    (``CognitionFrame.read_statistics``), against the files and rows stored,
    and its time against Polars reading that scope's rows.
sink
    ``CognitionFrame.scan_parquet(store).filter(priority < 8)`` (80% of the
    rows, every column, so every row read is conformed) written with
    ``sink_parquet`` against the same rows collected into memory and written
    with ``write_parquet``, each in a child process: seconds and peak RSS (MB).

Timings are wall-clock seconds on a shared, noisy machine: compare the
ratios within one run.

Usage: ``python benchmarks/bench_scan.py [--items 1000000] [--scopes 1000] [--repeats 5]
[--out benchmarks/results/scan.json]``
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import polars as pl

from cognoxium import CognitionFrame
from cognoxium.items.hashing import content_hash_expr
from cognoxium.items.io import write_parquet
from cognoxium.items.records import records_to_frame

RESULTS = Path(__file__).resolve().parent / "results"
AS_OF = datetime(2025, 1, 1, tzinfo=UTC)
BUDGET = 4096
ROLES = ("user", "assistant", "user", "tool")


def build_store(root: Path, items: int, scopes: int) -> float:
    """Write ``items`` items over ``scopes`` scope partitions under ``root``; seconds taken."""
    start = time.perf_counter()
    per = items // scopes
    template = records_to_frame(
        [
            {
                "id": f"{i}",
                "role": ROLES[i % len(ROLES)],
                "text": f"turn {i}: the order ships in {i % 7} days, refund window {i % 30} days",
                "priority": i % 10,
                "created_at": f"2024-05-{1 + i % 28:02d}T{i % 24:02d}:{i % 60:02d}:00Z",
                "metadata": {"topic": ("refund", "shipping", "billing")[i % 3]},
            }
            for i in range(per)
        ]
    )
    for s in range(scopes):
        scope = f"s{s:04d}"
        part = template.with_columns(
            id=pl.lit(f"{scope}-") + pl.col("id"),
            text=pl.col("text") + pl.lit(f" ({scope})"),
            metadata=pl.col("metadata").str.replace("}", f',"scope":"{scope}"}}', literal=True),
        ).with_columns(content_hash_expr())
        write_parquet(part, root / f"scope={scope}" / "part.parquet")
    return time.perf_counter() - start


COPIES_CHILD = """
import sys
from cognoxium import CognitionFrame
from cognoxium.items.io import write_parquet
from cognoxium.items.store import write_partitioned
store, single, partitioned = sys.argv[1:4]
items = CognitionFrame.scan_parquet(store).drop("scope").collect()
write_parquet(items, single)
write_partitioned(items, partitioned, key="scope")
"""


def build_copies(store: Path, single: Path, partitioned: Path) -> float:
    """Write the store's items as one file and as a ``write_partitioned`` store; seconds taken.

    In a child process: a process started later (the sink's) inherits its
    parent's peak RSS across ``exec``, so this process never holds every item.
    """
    start = time.perf_counter()
    command = [sys.executable, "-c", COPIES_CHILD, str(store), str(single), str(partitioned)]
    subprocess.run(command, check=True)
    return time.perf_counter() - start


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def compare(ours: Callable[[], Any], peer: Callable[[], Any], repeats: int) -> dict[str, Any]:
    """Alternate the two calls ``repeats`` times (after one warm-up each); best and median."""
    assert ours() == peer(), "Cognoxium and Polars disagree"
    times: dict[str, list[float]] = {"cognoxium": [], "polars": []}
    answer = None
    for _ in range(repeats):
        t, answer = timed(ours)
        times["cognoxium"].append(t)
        t, _ = timed(peer)
        times["polars"].append(t)
    best = {k: min(v) for k, v in times.items()}
    return {
        "answer": answer,
        "cognoxium_best_s": best["cognoxium"],
        "cognoxium_median_s": statistics.median(times["cognoxium"]),
        "polars_best_s": best["polars"],
        "polars_median_s": statistics.median(times["polars"]),
        "ratio_best": best["cognoxium"] / best["polars"],
    }


FILTERS: dict[str, pl.Expr] = {
    "priority > 5": pl.col("priority") > 5,
    "role == 'user'": pl.col("role") == "user",
    "priority > 5 and topic refund": (pl.col("priority") > 5)
    & pl.col("metadata").str.contains("refund", literal=True),
}


def count_mode(sources: dict[str, Path], repeats: int) -> list[dict[str, Any]]:
    """Each filter's count on each source (label: path), against Polars' own scan."""
    rows = []
    for source, path in sources.items():
        hive = True if path.is_dir() else None
        for label, predicate in FILTERS.items():

            def ours(p: pl.Expr = predicate, at: Path = path) -> int:
                return CognitionFrame.scan_parquet(at).filter(p).count()

            def peer(p: pl.Expr = predicate, at: Path = path, h: bool | None = hive) -> int:
                lf = pl.scan_parquet(at, hive_partitioning=h)
                return int(lf.filter(p).select(pl.len()).collect().item())

            row = {"source": source, "filter": label, **compare(ours, peer, repeats)}
            print("count", json.dumps(row), flush=True)
            rows.append(row)
    return rows


SOURCES = {
    "one file": "one Parquet file",
    "hive store": "hive store, a file per scope",
    "partitioned store": "`write_partitioned` store (store order by position)",
}


def scope_mode(store: Path, items: int, scopes: int, repeats: int) -> dict[str, Any]:
    scope = f"s{scopes // 2:04d}"
    cf = CognitionFrame.scan_parquet(store).filter(pl.col("scope") == scope)

    def ours() -> int:
        return len(cf.pack(BUDGET, as_of=AS_OF).ids)

    def peer() -> int:
        lf = pl.scan_parquet(store, hive_partitioning=True).filter(pl.col("scope") == scope)
        return lf.collect().height

    ours_s, peer_s = [], []
    included = ours()
    for _ in range(repeats):
        ours_s.append(timed(ours)[0])
        peer_s.append(timed(peer)[0])
    (read,) = cf.read_statistics()
    stored_files = sum(1 for _ in store.glob("scope=*/*.parquet"))
    result = {
        "scope": scope,
        "budget": BUDGET,
        "included_items": included,
        "files_read": len(read.files),
        "files_stored": stored_files,
        "rows_read": read.rows,
        "rows_stored": items,
        "columns_read": len(read.columns),
        "pack_best_s": min(ours_s),
        "polars_scope_read_best_s": min(peer_s),
    }
    print("scope", json.dumps(result), flush=True)
    return result


SINK_CHILD = """
import json, resource, sys, time
import polars as pl
from cognoxium import CognitionFrame
from cognoxium.items import write_parquet
store, mode, out = sys.argv[1:4]
# The hive partition column is no item column: a file of items leaves it out.
cf = CognitionFrame.scan_parquet(store).filter(pl.col("priority") < 8).drop("scope")
start = time.perf_counter()
if mode == "sink":
    cf.sink_parquet(out)
else:
    write_parquet(cf.collect(), out)
seconds = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"seconds": seconds, "peak_rss_mb": peak}))
"""


def sink_mode(store: Path, out: Path) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for mode in ("sink", "collect"):
        done = subprocess.run(
            [sys.executable, "-c", SINK_CHILD, str(store), mode, str(out)],
            check=True,
            capture_output=True,
            text=True,
        )
        result[mode] = json.loads(done.stdout.strip().splitlines()[-1])
    result["rows"] = pl.scan_parquet(out).select(pl.len()).collect().item()
    print("sink", json.dumps(result), flush=True)
    return result


def markdown(result: dict[str, Any]) -> str:
    """A Markdown section with both modes' figures."""
    rows = [
        f"| {SOURCES.get(r.get('source', 'hive store'), r.get('source'))} | `{r['filter']}` "
        f"| {r['answer']:,} | {r['cognoxium_best_s']:.4f} / {r['cognoxium_median_s']:.4f} "
        f"| {r['polars_best_s']:.4f} / {r['polars_median_s']:.4f} | {r['ratio_best']:.2f}x |"
        for r in result["count"]
    ]
    s = result["scope"]
    return (
        f"## Lazy scans: {result['items']:,} items in {result['scopes']:,} hive partitions "
        f"({result['repeats']} rounds)\n\n"
        "`CognitionFrame.scan_parquet(source).filter(f).count()` against Polars' "
        "`pl.scan_parquet(source).filter(f).select(pl.len())`, each timed as the whole call, "
        "on the same items in one file, in a hive store of a file per scope, and in the "
        "store `write_partitioned` writes. A count reads only its filter's columns.\n\n"
        "| source | filter | rows | Cognoxium s (best / median) | Polars s (best / median) "
        "| ratio of bests |\n|---|---|---|---|---|---|\n"
        + "\n".join(rows)
        + f"\n\nPack of scope `{s['scope']}` under {s['budget']} tokens "
        f"({s['included_items']} items included): the scan read **{s['files_read']} of "
        f"{s['files_stored']:,} files** and **{s['rows_read']:,} of {s['rows_stored']:,} rows** "
        f"({s['columns_read']} columns), shown by `CognitionFrame.read_statistics()`; the "
        f"whole pack took {s['pack_best_s']:.3f} s (best), Polars' read of that scope's rows "
        f"{s['polars_scope_read_best_s']:.3f} s.\n" + sink_markdown(result.get("sink"))
    )


def sink_markdown(sink: dict[str, Any] | None) -> str:
    if sink is None:
        return ""
    return (
        f"\n`sink_parquet` of {sink['rows']:,} rows (every column, each row conformed as read): "
        f"{sink['sink']['seconds']:.2f} s, peak RSS {sink['sink']['peak_rss_mb']:.0f} MB; "
        f"collecting them and writing with `write_parquet`: {sink['collect']['seconds']:.2f} s, "
        "peak RSS "
        f"{sink['collect']['peak_rss_mb']:.0f} MB (child processes).\n"
    )


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=1_000_000)
    parser.add_argument("--scopes", type=int, default=1_000)
    parser.add_argument("--repeats", type=int, default=5, help="timed rounds (best of N)")
    parser.add_argument("--out", type=Path, default=RESULTS / "scan.json")
    args = parser.parse_args(argv)
    if args.items < args.scopes or args.scopes < 1 or args.repeats < 1:
        parser.error("need --items >= --scopes >= 1 and --repeats >= 1")
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "store"
        build_s = build_store(store, args.items, args.scopes)
        single, partitioned = Path(tmp) / "items.parquet", Path(tmp) / "partitioned"
        build_s += build_copies(store, single, partitioned)
        print(f"built {args.items:,} items in {build_s:.1f} s", flush=True)
        sources = {"one file": single, "hive store": store, "partitioned store": partitioned}
        result: dict[str, Any] = {
            "items": args.items - args.items % args.scopes,
            "scopes": args.scopes,
            "repeats": args.repeats,
            "build_s": build_s,
            "count": count_mode(sources, args.repeats),
        }
        result["scope"] = scope_mode(store, result["items"], args.scopes, args.repeats)
        result["sink"] = sink_mode(store, Path(tmp) / "sink.parquet")
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
