"""Packing benchmark: a million chat-like items under 8,192 tokens.

Measures, in one run (ratios against baselines in the same run, since the
machine is noisy):

- first pack (empty token cache) against raw ``tiktoken``
  ``encode_ordinary_batch`` of every text, ranked by recency and by priority,
  with the selection checked equal to a reference packer that counts everything;
- a repeat pack (warm token cache);
- p50/p95 latency of single packs over 10,000-item frames;
- peak memory of loading and packing, against the Arrow table's size
  (measured in a child process);
- LoCoMo packs/s, when ``COGNOXIUM_LOCOMO`` points at the data.

Usage: ``python benchmarks/bench_pack.py [--items N] [--out benchmarks/results/pack.json]``
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import polars as pl

from cognoxium.items.convert import to_arrow
from cognoxium.items.io import write_parquet
from cognoxium.items.validation import conform
from cognoxium.packing.options import PackOptions
from cognoxium.packing.packer import CHAT_ROLES, pack
from cognoxium.tokens.profiles import clear_cache, get_profile

BUDGET = 8192
AS_OF = datetime(2030, 1, 1, tzinfo=UTC)
T0 = datetime(2024, 1, 1, tzinfo=UTC)
_WORDS = (
    "the a to and of I you it is that in for on we this with can my your be have not "
    "order refund shipping account password reset invoice billing plan upgrade cancel "
    "thanks please help issue error again tomorrow yesterday today week month price "
    "support agent ticket status delivered delayed package tracking number address "
    "email phone call back update version install configure server database query "
    "timeout retry failed success works broken fixed, sure. great! why? how? when? "
    "2024 15 30 $49.99 #4521 v2.3 API JSON HTTP 404 500 OK :) ..."
).split()


def synthetic_items(n: int, seed: int = 7) -> pl.DataFrame:
    """``n`` chat-like items: alternating user/assistant turns, lognormal lengths (~40 tokens)."""
    rng = np.random.default_rng(seed)
    lengths = np.clip(rng.lognormal(mean=3.2, sigma=0.7, size=n).astype(np.int64), 1, 600)
    words = np.array(_WORDS, dtype=object)[rng.integers(0, len(_WORDS), size=int(lengths.sum()))]
    bounds = np.concatenate([[0], np.cumsum(lengths)])
    texts = [" ".join(words[bounds[i] : bounds[i + 1]]) for i in range(n)]
    return conform(
        pl.DataFrame(
            {
                "id": [f"m{i:07d}" for i in range(n)],
                "role": np.where(np.arange(n) % 2 == 0, "user", "assistant"),
                "text": texts,
                "priority": rng.integers(0, 10, size=n),
                "created_at": pl.datetime_range(
                    T0,
                    T0 + timedelta(seconds=n - 1),
                    "1s",
                    time_unit="us",
                    time_zone="UTC",
                    eager=True,
                ),
            }
        )
    )


def reference_selection(df: pl.DataFrame, counts: np.ndarray, budget: int) -> list[str]:
    """Count-everything packer (no groups, no required items): the design's order, greedy skip."""
    prof = get_profile("cl100k_base")
    framing = {role: prof.framing(chat) for role, chat in CHAT_ROLES.items()}
    frame = (
        df.select("id", "rank", "priority", pl.col("role").cast(pl.String))
        .with_columns(
            cost=pl.Series(counts) + pl.col("role").replace_strict(framing, return_dtype=pl.Int64),
            row=pl.int_range(pl.len()),
        )
        .sort(
            ["rank", "priority", "cost", "id"],
            descending=[True, True, False, False],
            nulls_last=True,
        )
    )
    remaining = budget - prof.tokens_per_pack
    chosen = []
    for row, cost in frame.select("row", "cost").iter_rows():
        if cost <= remaining:
            chosen.append(row)
            remaining -= cost
    ids = df.get_column("id")
    return [ids[r] for r in sorted(chosen)]


def timed(fn):  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def measure_memory(parquet: Path) -> dict[str, float]:
    """Peak resident memory of loading the Parquet store, then of packing it, in a fresh process.

    The kernel's high-water mark (VmHWM) is reset before each phase
    (``/proc/self/clear_refs``), so each peak is that phase's own.
    """
    code = f"""
import json
from datetime import UTC, datetime
import polars as pl
from cognoxium.items.io import read_parquet
from cognoxium.packing.packer import pack
from cognoxium.tokens.profiles import get_profile
from cognoxium.packing.options import PackOptions

def status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise KeyError(field)

def reset_peak():
    with open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")

get_profile("cl100k_base").count(["warm up"])
reset_peak()
start = status("VmRSS")
df = read_parquet({str(parquet)!r}).with_columns(
    pl.col("created_at").dt.epoch("s").cast(pl.Float64).alias("rank"))
loaded, load_peak = status("VmRSS"), status("VmHWM")
reset_peak()
pack(df, {BUDGET}, PackOptions(as_of=datetime(2030, 1, 1, tzinfo=UTC)))
pack_peak = status("VmHWM")
print(json.dumps({{"rss_start_mb": start, "rss_loaded_mb": loaded, "load_peak_mb": load_peak,
                  "pack_peak_mb": pack_peak}}))
"""
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def locomo_packs_per_s(path: str) -> dict[str, float] | None:
    from cognoxium.app.locomo import run_locomo

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "locomo"  # a link to its version directory, both inside tmp
        report = run_locomo(path, out, budgets=[2048], rank="bm25", profile="cl100k_base")
    return {"packs_per_s": report["budgets"]["2048"]["packs_per_s"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=1_000_000)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/pack.json"))
    args = parser.parse_args()
    prof = get_profile("cl100k_base")
    prof.count(["warm up"])
    results: dict[str, object] = {"items": args.items, "budget": BUDGET, "profile": prof.name}

    build_s, df = timed(lambda: synthetic_items(args.items))
    arrow_bytes = to_arrow(df).nbytes
    texts = df.get_column("text").to_list()
    tok_s, encoded = timed(lambda: prof.encoding.encode_ordinary_batch(texts))
    counts = np.fromiter((len(e) for e in encoded), dtype=np.int64, count=len(encoded))
    del encoded
    results |= {
        "build_s": build_s,
        "arrow_mb": arrow_bytes / 2**20,
        "tokenize_all_s": tok_s,
        "mean_tokens": float(counts.mean()),
    }

    by_recency = df.with_columns(pl.col("created_at").dt.epoch("s").cast(pl.Float64).alias("rank"))
    by_priority = df  # rank null: priority desc, then tokens asc, then id
    for name, frame in (("recency", by_recency), ("priority", by_priority)):
        clear_cache()
        first_s, first = timed(lambda f=frame: pack(f, BUDGET, PackOptions(as_of=AS_OF)))
        repeat_s, repeat = timed(lambda f=frame: pack(f, BUDGET, PackOptions(as_of=AS_OF)))
        expected = reference_selection(frame, counts, BUDGET)
        results[name] = {
            "first_pack_s": first_s,
            "first_pack_over_tokenize_all": first_s / tok_s,
            "repeat_pack_s": repeat_s,
            "counted_items": first.manifest.totals.counted,
            "included_items": len(first),
            "used_tokens": first.used_tokens,
            "same_selection_as_reference": first.ids == expected,
            "repeat_same_manifest": first.manifest.fingerprints == repeat.manifest.fingerprints
            and first.manifest.to_polars().equals(repeat.manifest.to_polars())
            and first.used_tokens == repeat.used_tokens,
        }
        print(name, json.dumps(results[name]), flush=True)

    latencies = []
    small = by_recency.head(10_000)
    for i in range(60):
        clear_cache()
        frame = by_recency.slice(i * 10_000 % max(1, args.items - 10_000), 10_000)
        seconds, _ = timed(lambda f=frame: pack(f, BUDGET, PackOptions(as_of=AS_OF)))
        latencies.append(seconds * 1000)
    warm = [
        timed(lambda: pack(small, BUDGET, PackOptions(as_of=AS_OF)))[0] * 1000 for _ in range(60)
    ]
    results["single_pack_10k_ms"] = {
        "cold_p50": float(np.percentile(latencies, 50)),
        "cold_p95": float(np.percentile(latencies, 95)),
        "warm_p50": float(np.percentile(warm, 50)),
        "warm_p95": float(np.percentile(warm, 95)),
    }

    with tempfile.TemporaryDirectory() as tmp:
        parquet = Path(tmp) / "items.parquet"
        write_parquet(df, parquet)
        memory = measure_memory(parquet)
    arrow_mb = arrow_bytes / 2**20
    results["memory"] = memory | {
        "load_growth_over_arrow": (memory["load_peak_mb"] - memory["rss_start_mb"]) / arrow_mb,
        "pack_growth_mb": memory["pack_peak_mb"] - memory["rss_loaded_mb"],
        "pack_growth_over_arrow": (memory["pack_peak_mb"] - memory["rss_loaded_mb"]) / arrow_mb,
        "peak_over_arrow": (
            max(memory["load_peak_mb"], memory["pack_peak_mb"]) - memory["rss_start_mb"]
        )
        / arrow_mb,
    }

    locomo = os.environ.get("COGNOXIUM_LOCOMO")
    if locomo and Path(locomo).exists():
        results["locomo"] = locomo_packs_per_s(locomo)
    results["python_max_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    print(json.dumps(results, indent=2, sort_keys=True))


if __name__ == "__main__":
    main()
