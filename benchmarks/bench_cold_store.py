"""The default rank over a store no run has embedded: ``cognoxium pack`` cold, against floors.

A store of ``bench_pack.synthetic_items`` chat items, hive-partitioned by
conversation (``bench_ray.make_store``, as ``bench_scale``), with two
requests per conversation, each scoped to it, a three-word query, budget
1,024 tokens (``bench_ray.make_requests``, the scopes in turn), packed with no ``--rank``: the
default, ``learned``, whose features read every scope item's MiniLM vector.
Every scope is requested, so a run embeds every item of the store.

Timed, each round with a new, empty embedding cache (``COGNOXIUM_CACHE_DIR``),
each run a whole new process (interpreter start, imports, reading, ranking,
packing, writing), default workers (one per CPU):

cold
    ``cognoxium pack STORE REQUESTS --out DIR --as-of ... --quiet``, the cache empty;
warm
    the same command again, over the cache the cold run filled;
bm25
    the command with ``--rank bm25`` (no model), what packing costs without
    embeddings;
embed floor
    :func:`embed_floor` in a process of its own: Polars reads the store's
    texts and one ``MiniLMEmbedder`` (threads: every CPU) embeds each item's
    text once, in one call: the least work a rank that reads every item's
    vector needs, with nothing else done.

Reported: the median seconds, CPU seconds and peak memory of each run, and
the ratios cold / embed floor, cold / warm and warm / bm25 (each round's,
then the median), with the texts the cold run embedded (rows written to the
cache) against the store's items. ``--before FILE`` adds the figures of an
earlier run of this benchmark (a JSON it wrote, on other code) to the table.

Usage: ``python benchmarks/bench_cold_store.py [--items 20000] [--scopes 20]
[--rounds 3] [--before FILE] [--out FILE]``; results go to
``benchmarks/results/cold_store.json`` and ``cold_store.md``.
``python benchmarks/bench_cold_store.py --floor STORE`` runs the floor alone.
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

import polars as pl

from bench_first_run import cached_rows
from bench_ray import make_requests, make_store
from processes import measured
from reports import run_figures, write_report

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
AS_OF = "2026-01-01T00:00:00Z"
RUNS = ("cold", "warm", "bm25", "embed floor")


def embed_floor(store: Path) -> int:
    """Embed every item text of ``store`` once with MiniLM; the number of texts."""
    from cognoxium.retrieval.embeddings import MiniLMEmbedder

    texts = pl.scan_parquet(store / "**" / "*.parquet").select("text").collect()
    return len(MiniLMEmbedder().embed(texts.get_column("text").to_list()))


def build(work: Path, items: int, scopes: int) -> tuple[Path, Path]:
    """The store and the requests (two per scope) in ``work``."""
    store, requests = work / "store", work / "requests.jsonl"
    make_store(store, items, scopes)
    picked = make_requests(2 * scopes, scopes, in_turn=True)
    lines = [json.dumps(r.to_record()) for r in picked]
    requests.write_text("\n".join(lines) + "\n")
    return store, requests


def commands(store: Path, requests: Path, out: Path) -> dict[str, list[str]]:
    """Each timed run's command line."""
    exe = Path(sys.executable).with_name("cognoxium")
    pack = [str(exe), "pack", str(store), str(requests), "--out", str(out)]
    pack += ["--as-of", AS_OF, "--quiet"]
    floor = [sys.executable, str(Path(__file__).resolve()), "--floor", str(store)]
    return {"cold": pack, "warm": pack, "bm25": [*pack, "--rank", "bm25"], "embed floor": floor}


def measure(work: Path, items: int, scopes: int, rounds: int) -> dict[str, Any]:
    """``rounds`` rounds of the four runs, each round over a new cache."""
    store, requests = build(work, items, scopes)
    lines = commands(store, requests, work / "out")
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in RUNS}
    embedded = []
    for k in range(rounds):
        env = {**os.environ, "COGNOXIUM_CACHE_DIR": str(work / f"cache-{k}")}
        for name in RUNS:
            run = measured(lines[name], env=env, cwd=HERE)
            runs[name].append({"wall_s": run.wall_s, "cpu_s": run.cpu_s, "peak_mb": run.peak_mb})
            if name == "cold":
                embedded.append(cached_rows(work / f"cache-{k}")[0])
        print(
            f"round {k + 1}: " + ", ".join(f"{n} {r[-1]['wall_s']:.1f} s" for n, r in runs.items()),
            flush=True,
        )

    def ratio(top: str, bottom: str) -> dict[str, Any]:
        each = [a["wall_s"] / b["wall_s"] for a, b in zip(runs[top], runs[bottom], strict=True)]
        return {"median": round(statistics.median(each), 3), "rounds": [round(r, 3) for r in each]}

    return {
        "items": items,
        "scopes": scopes,
        "requests": 2 * scopes,
        "rounds": rounds,
        "python": platform.python_version(),
        "cores": os.cpu_count(),
        "runs": run_figures(runs),
        "cold_over_floor": ratio("cold", "embed floor"),
        "cold_over_warm": ratio("cold", "warm"),
        "warm_over_bm25": ratio("warm", "bm25"),
        "texts_embedded": embedded[0],
    }


def markdown(result: dict[str, Any], before: dict[str, Any] | None) -> str:
    """The runs' table (with an earlier run's beside, when given) and the ratios."""
    columns = [("now", result)] + ([("before", before)] if before is not None else [])
    head = " | ".join(f"{label} s | {label} CPU s | {label} peak MiB" for label, _ in columns)
    rows = [
        f"| {name} | "
        + " | ".join(
            f"{r['runs'][name]['median_s']:.1f} | {r['runs'][name]['cpu_median_s']:.1f} | "
            f"{r['runs'][name]['peak_mb']:.0f}"
            for _, r in columns
        )
        + " |"
        for name in RUNS
    ]
    ratios = "\n".join(
        f"- {label}: cold / embed floor **{r['cold_over_floor']['median']:.2f}x**, cold / warm "
        f"{r['cold_over_warm']['median']:.2f}x, warm / bm25 {r['warm_over_bm25']['median']:.2f}x; "
        f"the cold run embedded {r['texts_embedded']:,} texts for {r['items']:,} items."
        for label, r in columns
    )
    return (
        f"## The default rank over a store no run has embedded ({result['items']:,} items, "
        f"{result['scopes']:,} scopes, {result['requests']:,} requests)\n\n"
        "Each run a whole process; cold: an empty embedding cache; warm: the same command "
        "again; bm25: `--rank bm25`; embed floor: MiniLM embedding each item's text once "
        f"(see `benchmarks/bench_cold_store.py`). Medians of {result['rounds']} rounds, "
        f"{result['cores']} CPUs, default workers.\n\n"
        f"| run | {head} |\n|---|{'---|---|---|' * len(columns)}\n" + "\n".join(rows) + "\n\n"
        f"{ratios}\n"
    )


def saved_markdown(result: dict[str, Any]) -> str:
    """:func:`markdown` of a result :func:`main` wrote (an earlier run's figures in ``before``)."""
    return markdown(result, result.get("before"))


def main(argv: Sequence[str] | None = None) -> dict[str, Any] | None:
    """Parse the arguments; run the floor alone, or :func:`measure` and write the report."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--floor", type=Path, metavar="STORE")
    parser.add_argument("--items", type=int, default=20_000)
    parser.add_argument("--scopes", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--before", type=Path)
    parser.add_argument("--out", type=Path, default=RESULTS / "cold_store.json")
    args = parser.parse_args(argv)
    if args.floor is not None:
        embed_floor(args.floor)
        return None
    if args.rounds < 1 or args.scopes < 1 or args.items < args.scopes:
        parser.error("need --rounds >= 1 and --items >= --scopes >= 1")
    before = json.loads(args.before.read_text("utf-8")) if args.before else None
    with tempfile.TemporaryDirectory() as work:
        result = measure(Path(work), args.items, args.scopes, args.rounds)
    if before is not None:
        result["before"] = {k: v for k, v in before.items() if k != "before"}
    write_report(args.out, result, markdown(result, before), echo=True)
    return result


if __name__ == "__main__":
    main()
