"""Run every benchmark suite and write ``benchmarks/results/*.json``, ``*.md`` and ``*.png``.

Suites:

scaling
    Packing 1k, 10k, 100k and 1M chat-like items (``bench_pack.synthetic_items``)
    under 8,192 tokens, ranked by recency: first pack (empty token-count cache),
    repeat pack, and the peak memory of loading and of packing (a child
    process per size, ``bench_pack.measure_memory``). ``--quick`` stops at 100k.
peers
    Keeping the newest chat messages plus the system message under a budget:
    Cognoxium against LangChain ``trim_messages``, LlamaIndex
    ``ChatMemoryBuffer`` and plain Python loops (``bench_peers``); and the
    whole call against ``trim_messages`` again on a history of short common
    words, whose costs its bytes bound says little about.
embed
    Embedding throughput (all-MiniLM-L6-v2 and the hashed bag of words) and
    the embedding cache's effect, cold against warm disk against memory
    (``bench_embed``).
near_duplicates
    Near-duplicate dedupe (MinHash/LSH, Jaccard >= 0.8) against exact dedupe
    on the same 110k items.
redact
    Redaction, vectorised against the same recognisers run row by row with
    Python ``re`` (``bench_redact``): 100k chat records through the user's
    whole call ``CognitionFrame(records).redact().collect()``, and 100 MB of
    lines into ``redact_frame``; three rounds each, min and median.
    ``--quick``: 20k records, 10 MB, one round.
ingest
    Records, OpenAI and LangChain messages, JSONL and Parquet into a frame at
    10k and 100k records, against pyarrow/Polars floors and the published
    cognoxium 0.1.1 in its own virtual environment (``bench_ingest``, with
    ``--peer``). ``--quick``: 10k only, three rounds.
scan
    Lazy Parquet scans over a 1M-item store of 1,000 hive partitions
    (``bench_scan``): ``CognitionFrame.scan_parquet(source).filter(f).count()``
    against Polars' own scan (ratio of bests, same run) on the items in one
    file, in the hive store and in a ``write_partitioned`` store, and the
    files and rows one scope's pack reads. ``--quick``: 100k items, 100
    partitions.
surface
    The frame's surface against Polars (``bench_surface``): four query
    chains on 100k chat records, the user's whole call on a
    ``CognitionFrame`` against the same chain on a Polars ``LazyFrame``
    (peer) and the prebuilt query's ``collect()`` (floor), best of five;
    and the cost of ``repr(pack)``. ``--quick``: 10k records, best of three.
ray
    Batch packing on Ray Data against the local engine (``bench_ray``): 1M
    items in 1,000 hive-partitioned conversations, 20,000 requests, ranked
    by BM25; the local engine, Ray with 1 and 2 workers, byte-identical
    files checked, and an estimate for 10M items and 1M requests on 8, 32
    and 128 workers. ``--quick``: ``bench_ray --small``.
scale
    Batch packing at scale (``bench_scale``): ``cognoxium pack`` as a whole
    process against a floor packer (Polars, bm25s, tiktoken) on stores of
    20k, 100k and 1M items (1,000 and 10,000 scopes), ``--workers 1``
    against the default, byte-identical files checked. ``--quick``: 20k
    and 100k, one round.
locomo
    Evidence recall per ranker and budget, from the ``report.json`` that
    ``cognoxium locomo`` writes; needs the LoCoMo file (``--locomo PATH`` or
    ``COGNOXIUM_LOCOMO``) and is skipped, with a message, without it.
batch
    Batch packing (``bench_batch``): the LoCoMo BM25 batch at one budget,
    Parquet manifests written, against a floor packer (bm25s + numpy +
    tiktoken, no manifests) in the same run; the default (learned) rank over
    four budgets with a warm embedding cache; one ``pack()`` of 10k items,
    p50/p95. Needs the LoCoMo file, as ``locomo`` does. ``--quick``: one round.
import
    Start-up (``bench_import``): ``import cognoxium`` against ``import polars,
    pyarrow, numpy, pydantic, sqlglot`` (floor) and ``cognoxium --help``, each
    in a fresh process, alternating, 15 rounds, median and min.
    ``--quick``: 5 rounds.
cold_store
    The default rank over a store of 20,000 chat items no run has embedded
    (``bench_cold_store``): the cold ``cognoxium pack`` against MiniLM
    embedding each item once, the warm run and ``--rank bm25``, 3 rounds.
    ``--quick``: 5,000 items, 1 round.
first_run
    The sample's ``cognoxium pack`` as a whole process (``bench_first_run``):
    cold (a new, empty embedding cache) against warm (the same command
    again) and ``--rank bm25``, 5 rounds, each round's cold / warm.
    ``--quick``: 2 rounds.
big_item
    One 50 MB document among the sample's items under the default rank
    (``bench_big_item``): ``cognoxium pack`` whole, against the same with the
    document cut to what ranking reads, the rank alone and ``read_items``
    alone; seconds and peak memory. ``--quick``: 10 MB, one round.
cache
    Prompt cache replay (``bench_cache``): every LoCoMo conversation as a
    live chat, packed at each user turn by ``trim_messages``, a recency pack
    and packs that continue the previous one, billed under OpenAI's and
    Anthropic's caching rules. Needs the LoCoMo file, as ``locomo`` does.
    ``--quick``: two conversations.

Timings are wall-clock seconds on a shared, noisy machine: compare ratios
within one run, not figures across runs.

Usage: ``python benchmarks/run_all.py [--quick] [--locomo PATH] [--only SUITE,...]``
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import matplotlib as mpl

mpl.use("Agg")
import matplotlib.pyplot as plt
import polars as pl

import bench_batch
import bench_big_item
import bench_cache
import bench_cold_store
import bench_first_run
import bench_import
import bench_ingest
import bench_peers
import bench_ray
import bench_redact
import bench_scale
import bench_scan
import bench_surface
from bench_pack import AS_OF, BUDGET, measure_memory, synthetic_items, timed
from cognoxium.app.batch import batch_rank_methods
from cognoxium.items.convert import to_arrow
from cognoxium.items.io import write_parquet
from cognoxium.packing.options import PackOptions
from cognoxium.packing.packer import pack
from cognoxium.tokens.profiles import clear_cache, get_profile

RESULTS = Path(__file__).resolve().parent / "results"
SUITES = (
    "scaling",
    "peers",
    "embed",
    "near_duplicates",
    "redact",
    "ingest",
    "scan",
    "surface",
    "batch",
    "ray",
    "scale",
    "locomo",
    "import",
    "first_run",
    "cold_store",
    "big_item",
    "cache",
)
LOCOMO_BUDGETS = (512, 1024, 2048, 4096)


def write_json(name: str, data: Any) -> Path:
    path = RESULTS / name
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    return path


def fmt(value: float | None, spec: str = ".3f") -> str:
    return "-" if value is None else format(value, spec)


def markdown_table(headers: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# scaling


def run_scaling(sizes: list[int]) -> dict[str, Any]:
    profile = get_profile("cl100k_base")
    profile.count(["warm up"])
    rows = []
    for n in sizes:
        build_s, df = timed(lambda n=n: synthetic_items(n))
        frame = df.with_columns(pl.col("created_at").dt.epoch("s").cast(pl.Float64).alias("rank"))
        clear_cache()
        first_s, first = timed(lambda f=frame: pack(f, BUDGET, PackOptions(as_of=AS_OF)))
        repeat_s, repeat = timed(lambda f=frame: pack(f, BUDGET, PackOptions(as_of=AS_OF)))
        assert first.ids == repeat.ids
        arrow_mb = to_arrow(df).nbytes / 2**20
        with tempfile.TemporaryDirectory() as tmp:
            parquet = Path(tmp) / "items.parquet"
            write_parquet(df, parquet)
            memory = measure_memory(parquet)
        row = {
            "items": n,
            "build_s": build_s,
            "first_pack_s": first_s,
            "repeat_pack_s": repeat_s,
            "counted_items": first.manifest.totals.counted,
            "included_items": len(first),
            "used_tokens": first.used_tokens,
            "arrow_mb": arrow_mb,
            "load_peak_mb": memory["load_peak_mb"],
            "pack_peak_mb": memory["pack_peak_mb"],
            "peak_rss_mb": max(memory["load_peak_mb"], memory["pack_peak_mb"]),
            "peak_growth_mb": max(memory["load_peak_mb"], memory["pack_peak_mb"])
            - memory["rss_start_mb"],
        }
        rows.append(row)
        print("scaling", json.dumps(row), flush=True)
        del df, frame, first, repeat
    result = {"budget": BUDGET, "profile": profile.name, "rank": "recency", "sizes": rows}
    write_json("scaling.json", result)
    plot_scaling(result)
    return result


def plot_scaling(result: dict[str, Any]) -> None:
    rows = result["sizes"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    items = [r["items"] for r in rows]
    left.loglog(items, [r["first_pack_s"] for r in rows], "o-", label="first pack (cold cache)")
    left.loglog(items, [r["repeat_pack_s"] for r in rows], "s-", label="repeat pack (warm)")
    left.set_xlabel("items")
    left.set_ylabel("seconds")
    left.set_title(f"pack under {BUDGET} tokens")
    left.grid(True, which="both", alpha=0.3)
    left.legend()
    right.loglog(items, [r["peak_growth_mb"] for r in rows], "o-", label="peak RSS growth")
    right.loglog(items, [r["arrow_mb"] for r in rows], "s--", label="Arrow table size")
    right.set_xlabel("items")
    right.set_ylabel("MB")
    right.set_title("peak memory (load + pack, child process)")
    right.grid(True, which="both", alpha=0.3)
    right.legend()
    fig.tight_layout()
    fig.savefig(RESULTS / "scaling.png", dpi=120)
    plt.close(fig)


def scaling_markdown(result: dict[str, Any]) -> str:
    rows = [
        [
            f"{r['items']:,}",
            fmt(r["first_pack_s"]),
            fmt(r["repeat_pack_s"]),
            f"{r['counted_items']:,}",
            fmt(r["arrow_mb"], ".1f"),
            fmt(r["peak_growth_mb"], ".1f"),
        ]
        for r in result["sizes"]
    ]
    headers = [
        "items",
        "first pack (s)",
        "repeat pack (s)",
        "tokenized items",
        "Arrow (MB)",
        "peak RSS growth (MB)",
    ]
    return (
        f"## Scaling: pack under {result['budget']} tokens, ranked by recency\n\n"
        + markdown_table(headers, rows)
        + "\n\n![scaling](scaling.png)\n"
    )


# ---------------------------------------------------------------------------
# peers

METHOD_LABELS = {
    "cognoxium": "Cognoxium (cold cache)",
    "cognoxium_whole_call": "Cognoxium whole call (from LangChain messages)",
    "langchain_trim_messages": "LangChain trim_messages",
    "llamaindex_chat_memory_buffer": "LlamaIndex ChatMemoryBuffer",
    "python_loop_stop": "Python loop (stop)",
    "python_loop_skip": "Python loop (skip)",
}


def run_peers(sizes: list[int], repeats: int, limit_s: float) -> dict[str, Any]:
    result = bench_peers.main(
        [
            "--sizes",
            ",".join(map(str, sizes)),
            "--repeats",
            str(repeats),
            "--llamaindex-limit-s",
            str(limit_s),
            "--out",
            str(RESULTS / "peers.json"),
        ]
    )
    plot_peers(result)
    return result


def plot_peers(result: dict[str, Any]) -> None:
    fig, ax = plt.subplots(figsize=(10, 4.8))
    width = 0.8 / len(METHOD_LABELS)
    for k, (method, label) in enumerate(METHOD_LABELS.items()):
        color = f"C{k}"
        for j, entry in enumerate(result["sizes"]):
            m = entry["methods"].get(method)
            x = j + k * width
            if m is None:
                continue  # a method that this run did not measure
            if m["seconds"] is not None:
                ax.bar(x, m["seconds"], width, color=color, label=label if j == 0 else None)
                continue
            # Stopped at the time limit: a hatched bar up to the limit.
            limit = m["timed_out_after_s"]
            ax.bar(
                x,
                limit,
                width,
                color="none",
                edgecolor=color,
                hatch="//",
                label=label if j == 0 else None,
            )
            ax.text(
                x,
                limit / 3,
                f"stopped at {limit:.0f} s",
                rotation=90,
                ha="center",
                va="center",
                fontsize=7,
            )
    ax.set_yscale("log")
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(result["sizes"]))])
    ax.set_xticklabels([f"{e['messages']:,} messages" for e in result["sizes"]])
    ax.set_ylabel("seconds (log)")
    ax.set_title(f"newest messages + system message under {result['budget']} tokens")
    ax.legend(fontsize=8)
    ax.grid(True, axis="y", which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(RESULTS / "peers.png", dpi=120)
    plt.close(fig)


def whole_call_line(entry: dict[str, Any]) -> str:
    """The user's whole call (conversion included) against trim_messages, if measured."""
    whole = entry.get("whole_call")
    if whole is None:
        return ""
    return (
        "\n\nWhole call from LangChain messages (`from_langchain_messages` + rank + pack) "
        f"against `trim_messages`: {whole['langchain_over_cognoxium_median']:.1f}x faster "
        f"(median), {whole['langchain_over_cognoxium_min']:.1f}x (min)."
    )


def short_words_line(entry: dict[str, Any]) -> str:
    """The whole call against trim_messages on short common words, if measured."""
    short = entry.get("short_words")
    if short is None:
        return ""
    agree = ", ".join(f"{k} = {v}" for k, v in short["agreement"].items())
    return (
        "\n\nShort common words (the same call on a history of one-token words, "
        f"{short['budget_left_tokens']} tokens left): whole call "
        f"{fmt(short['cognoxium_whole_call_seconds'])} s, `trim_messages` "
        f"{fmt(short['langchain_trim_messages_seconds'])} s: "
        f"{short['langchain_over_cognoxium_median']:.1f}x faster (median), "
        f"{short['langchain_over_cognoxium_min']:.1f}x (min); {short['selected']} messages "
        f"kept ({short['langchain_selected']} by `trim_messages`); {agree}."
    )


def peers_markdown(result: dict[str, Any]) -> str:
    parts = [f"## Peers: newest messages + system message under {result['budget']} tokens\n"]
    for entry in result["sizes"]:
        rows = []
        for method, label in METHOD_LABELS.items():
            m = entry["methods"].get(method)
            if m is None:
                continue  # a method that this run did not measure
            seconds = (
                fmt(m["seconds"])
                if m["seconds"] is not None
                else f"> {m['timed_out_after_s']:.0f} (stopped)"
            )
            rows.append(
                [
                    label,
                    seconds,
                    "-" if m["over_cognoxium"] is None else f"{m['over_cognoxium']:.2g}x",
                    "-" if m["selected"] is None else str(m["selected"]),
                    fmt(m["build_s"], ".2f"),
                ]
            )
        cog = entry["methods"]["cognoxium"]
        parts.append(
            f"### {entry['messages']:,} messages\n\n"
            + markdown_table(
                ["method", "seconds", "vs Cognoxium", "messages kept", "input build (s)"], rows
            )
            + whole_call_line(entry)
            + short_words_line(entry)
            + f"\n\nCognoxium warm (repeat) pack: {fmt(cog['warm_seconds'])} s; it tokenized "
            f"{cog['counted_items']:,} of {entry['messages']:,} messages.\n\n"
            + "Agreement: "
            + ", ".join(f"{k} = {v}" for k, v in entry["agreement"].items())
            + "\n"
        )
    parts.append(
        "Notes:\n\n"
        + "\n".join(f"- {key}: {text}" for key, text in bench_peers.NOTES.items())
        + "\n\n![peers](peers.png)\n"
    )
    return "\n".join(parts)


# ---------------------------------------------------------------------------
# LoCoMo


def run_locomo(path: Path, rankers: list[str]) -> dict[str, Any]:
    reports: dict[str, Any] = {}
    for ranker in rankers:
        work = Path(tempfile.mkdtemp(prefix=f"locomo-{ranker}-"))
        out = work / "out"  # a link to its version directory, both inside work
        try:
            command = [
                sys.executable,
                "-m",
                "cognoxium.app.cli",
                "locomo",
                str(path),
                "--out",
                str(out),
                "--rank",
                ranker,
                "--budgets",
                ",".join(map(str, LOCOMO_BUDGETS)),
                "--compare",
                "",
                "--quiet",
            ]
            start = time.perf_counter()
            subprocess.run(command, check=True)
            seconds = time.perf_counter() - start
            report = json.loads((out / "report.json").read_text())
        finally:
            shutil.rmtree(work, ignore_errors=True)
        reports[ranker] = {"wall_s": seconds, "report": report}
        print("locomo", ranker, f"{seconds:.1f} s", flush=True)
    rows = [
        {
            "ranker": ranker,
            "budget": int(budget),
            "recall_answerable": figures["recall_answerable"],
            "recall_all": figures["recall_all"],
            "hit_rate_answerable": figures["hit_rate_answerable"],
            "mean_used_tokens": figures.get("mean_used_tokens"),
            "packs_per_s": figures.get("packs_per_s"),
            "questions": figures["questions"],
            "per_category": {c: v["recall"] for c, v in figures["per_category"].items()},
            "split_recall": {
                name: split["budgets"][budget]["recall_answerable"]
                for name, split in entry["report"]["splits"].items()
            },
        }
        for ranker, entry in reports.items()
        for budget, figures in sorted(entry["report"]["budgets"].items(), key=lambda kv: int(kv[0]))
    ]
    any_report = next(iter(reports.values()))["report"]
    result = {
        "source": any_report["source"],
        "import": any_report["import"],
        "rankers": rankers,
        "budgets": list(LOCOMO_BUDGETS),
        "rows": rows,
        "wall_s": {r: e["wall_s"] for r, e in reports.items()},
    }
    write_json("locomo.json", result)
    (RESULTS / "locomo.md").write_text(locomo_markdown(result))
    plot_locomo(result)
    return result


def plot_locomo(result: dict[str, Any]) -> None:
    rows, rankers = result["rows"], result["rankers"]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for ranker in rankers:
        mine = [r for r in rows if r["ranker"] == ranker]
        ax.plot(
            [r["budget"] for r in mine], [r["recall_answerable"] for r in mine], "o-", label=ranker
        )
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(LOCOMO_BUDGETS))
    ax.set_xticklabels([str(b) for b in LOCOMO_BUDGETS])
    ax.set_xlabel("token budget")
    ax.set_ylabel("evidence recall (categories 1-4)")
    ax.set_ylim(0, 1)
    ax.set_title("LoCoMo: evidence turns in the pack")
    ax.grid(True, alpha=0.3)
    ax.legend(title="ranker")
    fig.tight_layout()
    fig.savefig(RESULTS / "locomo.png", dpi=120)
    plt.close(fig)


def locomo_markdown(result: dict[str, Any]) -> str:
    rows = [
        [
            r["ranker"],
            str(r["budget"]),
            fmt(r["recall_answerable"]),
            fmt(r["split_recall"]["tuning"]),
            fmt(r["split_recall"]["held_out"]),
            fmt(r["recall_all"]),
            fmt(r["hit_rate_answerable"]),
            fmt(r["mean_used_tokens"], ".0f"),
            fmt(r["packs_per_s"], ".1f"),
        ]
        for r in result["rows"]
    ]
    headers = [
        "ranker",
        "budget",
        "recall 1-4",
        "tuning (conv-26, conv-30)",
        "held out (other 5)",
        "recall all",
        "all evidence found 1-4",
        "mean tokens",
        "packs/s",
    ]
    return (
        f"## LoCoMo evidence recall ({result['source']['file']}, "
        f"{result['import'].get('questions', '?')} questions)\n\n"
        + markdown_table(headers, rows)
        + "\n\nrecall = mean share of a question's evidence turns that are in its pack "
        "(categories 1-4 are answerable; 5 adversarial); each question's scope is the turns "
        "of its conversation.\n\n![locomo](locomo.png)\n\n"
        "The learned ranker's rows use the shipped model, fitted on these conversations: "
        "training figures. Leave-one-conversation-out figures, per conversation and category, "
        "and its per-question cost: [learned.md](learned.md).\n"
    )


# ---------------------------------------------------------------------------
# Embeddings and near-duplicates

EMBED = RESULTS / "embed.json"


def embed_markdown(result: dict[str, Any]) -> str:
    through = result["throughput"]
    cache = result["cache"]["minilm"]
    rows = [
        [name, str(t["texts"]), fmt(t["texts_per_s_wall"], ".1f"), fmt(t["texts_per_s_cpu"], ".1f")]
        for name, t in through.items()
        if isinstance(t, dict)
    ]
    cache_rows = [
        ["cold (embed and write)", fmt(cache["cold_s"], ".3f"), "1"],
        ["warm disk", fmt(cache["warm_disk_s"], ".3f"), fmt(cache["warm_disk_speedup_over_cold"])],
        ["in memory", fmt(cache["memory_s"], ".3f"), fmt(cache["memory_speedup_over_cold"])],
    ]
    return (
        f"## Embeddings ({result['texts']['count']} short texts, "
        f"{result['texts']['mean_words']} words on average)\n\n"
        + markdown_table(["embedder", "texts", "texts/s (wall)", "texts/s (CPU)"], rows)
        + "\n\nThe embedding cache, all-MiniLM-L6-v2 (same texts, same run):\n\n"
        + markdown_table(["cache state", "seconds", "speed-up over cold"], cache_rows)
        + "\n"
    )


def run_near_duplicates(n: int) -> dict[str, Any]:
    """Near-duplicate dedupe (MinHash/LSH) against exact dedupe on the same frame."""
    import random

    from cognoxium.frame.frame import CognitionFrame

    rng = random.Random(5)
    letters = "abcdefghij"
    words = ["".join(rng.choice(letters) for _ in range(rng.randint(2, 8))) for _ in range(5000)]
    texts = [" ".join(rng.choice(words) for _ in range(rng.randint(10, 60))) for _ in range(n)]
    copies = n // 10
    texts += [t + "!" for t in texts[:copies]]  # near copies
    rows = [{"id": f"i{i}", "role": "document", "text": t} for i, t in enumerate(texts)]
    frame = CognitionFrame(CognitionFrame(rows).collect())
    megabytes = sum(len(t.encode()) for t in texts) / 1e6
    exact_s, exact_rows = timed(lambda: frame.dedupe().collect().height)
    near_s, near_rows = timed(lambda: frame.dedupe(threshold=0.8).collect().height)
    result = {
        "items": len(texts),
        "megabytes": round(megabytes, 2),
        "near_copies": copies,
        "exact_s": exact_s,
        "exact_rows": exact_rows,
        "near_s": near_s,
        "near_rows": near_rows,
        "near_mb_per_s": megabytes / near_s,
        "near_over_exact": near_s / exact_s,
    }
    write_json("near_duplicates.json", result)
    print("near_duplicates", result, flush=True)
    return result


def near_duplicates_markdown(result: dict[str, Any]) -> str:
    rows = [
        ["exact (content hash)", fmt(result["exact_s"], ".3f"), str(result["exact_rows"])],
        ["near (Jaccard >= 0.8)", fmt(result["near_s"], ".3f"), str(result["near_rows"])],
    ]
    return (
        f"## Near-duplicate dedupe ({result['items']} items, {result['megabytes']} MB, "
        f"{result['near_copies']} near copies)\n\n"
        + markdown_table(["dedupe", "seconds", "rows kept"], rows)
        + f"\n\nnear: {fmt(result['near_mb_per_s'], '.1f')} MB/s, "
        f"{fmt(result['near_over_exact'], '.1f')}x the time of exact dedupe.\n"
    )


# ---------------------------------------------------------------------------


def write_summary(extra: str = "") -> None:
    """``summary.md``: every suite's table, from the latest run of each suite."""
    sections = [
        "# Benchmark results\n",
        f"Python {platform.python_version()}, {os.cpu_count()} cores. Each section comes from "
        "the latest run of its suite (`python benchmarks/run_all.py`); timings are wall-clock "
        "seconds on a shared machine, so compare ratios within one run.\n",
    ]
    sections += [
        (RESULTS / f"{suite}.md").read_text()
        for suite in SUITES
        if (RESULTS / f"{suite}.md").exists()
    ]
    if extra:
        sections.append(extra)
    (RESULTS / "summary.md").write_text("\n".join(sections))
    print(f"wrote {RESULTS / 'summary.md'}", flush=True)


def replot() -> None:
    """Redraw every plot and table whose JSON result exists."""
    makers = {
        "scaling": (plot_scaling, scaling_markdown),
        "peers": (plot_peers, peers_markdown),
        "locomo": (plot_locomo, locomo_markdown),
        "redact": (None, bench_redact.markdown),
        "ingest": (None, bench_ingest.markdown),
        "scan": (None, bench_scan.markdown),
        "surface": (None, bench_surface.markdown),
        "batch": (None, bench_batch.markdown),
        "ray": (None, bench_ray.markdown),
        "scale": (None, bench_scale.markdown),
        "import": (None, bench_import.markdown),
        "first_run": (None, bench_first_run.markdown),
        "cold_store": (None, bench_cold_store.saved_markdown),
        "big_item": (None, bench_big_item.markdown),
    }
    for suite, (plot, markdown) in makers.items():
        path = RESULTS / f"{suite}.json"
        if path.exists():
            result = json.loads(path.read_text())
            if plot is not None:
                plot(result)
            (RESULTS / f"{suite}.md").write_text(markdown(result))
            print(f"redrew {suite}", flush=True)
    write_summary()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="Smaller sizes, one repeat.")
    parser.add_argument(
        "--locomo",
        type=Path,
        default=os.environ.get("COGNOXIUM_LOCOMO"),
        help="The LoCoMo JSON file (default: $COGNOXIUM_LOCOMO).",
    )
    parser.add_argument("--only", default=",".join(SUITES), help="Comma-separated suites.")
    parser.add_argument(
        "--replot",
        action="store_true",
        help="Only redraw the plots and tables from the JSON results already written.",
    )
    args = parser.parse_args()
    if args.replot:
        replot()
        return
    chosen = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = sorted(set(chosen) - set(SUITES))
    if unknown:
        parser.error(f"unknown suites {unknown}; choose from {list(SUITES)}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    skipped = ""
    if "scaling" in chosen:
        sizes = [1_000, 10_000, 100_000] if args.quick else [1_000, 10_000, 100_000, 1_000_000]
        (RESULTS / "scaling.md").write_text(scaling_markdown(run_scaling(sizes)))
    if "peers" in chosen:
        result = run_peers([1_000, 10_000, 100_000], repeats=1 if args.quick else 3, limit_s=120.0)
        (RESULTS / "peers.md").write_text(peers_markdown(result))
    if "embed" in chosen:
        items = 1_000 if args.quick else 5_000
        script = Path(__file__).resolve().parent / "bench_embed.py"
        subprocess.run([sys.executable, str(script), "--items", str(items)], check=True)
        (RESULTS / "embed.md").write_text(embed_markdown(json.loads(EMBED.read_text())))
    if "near_duplicates" in chosen:
        result = run_near_duplicates(20_000 if args.quick else 100_000)
        (RESULTS / "near_duplicates.md").write_text(near_duplicates_markdown(result))
    if "redact" in chosen:
        size = ["--rows", "20000", "--mb", "10", "--repeats", "1"] if args.quick else []
        result = bench_redact.main([*size, "--out", str(RESULTS / "redact.json")])
        (RESULTS / "redact.md").write_text(bench_redact.markdown(result))
    if "ingest" in chosen:
        sizes = ["--sizes", "10000", "--repeats", "3"] if args.quick else []
        result = bench_ingest.main([*sizes, "--peer", "--out", str(RESULTS / "ingest.json")])
        (RESULTS / "ingest.md").write_text(bench_ingest.markdown(result))
    if "scan" in chosen:
        size = ["--items", "100000", "--scopes", "100", "--repeats", "3"] if args.quick else []
        result = bench_scan.main([*size, "--out", str(RESULTS / "scan.json")])
        (RESULTS / "scan.md").write_text(bench_scan.markdown(result))
    if "surface" in chosen:
        surface_size = ["--n", "10000", "--repeat", "3"] if args.quick else []
        result = bench_surface.main([*surface_size, "--out", str(RESULTS / "surface.json")])
        (RESULTS / "surface.md").write_text(bench_surface.markdown(result))
    if "import" in chosen:
        rounds = ["--rounds", "5"] if args.quick else []
        result = bench_import.main([*rounds, "--out", str(RESULTS / "import.json")])
        (RESULTS / "import.md").write_text(bench_import.markdown(result))
    if "first_run" in chosen:
        bench_first_run.main(["--rounds", "2"] if args.quick else [])
    if "cold_store" in chosen:
        size = ["--items", "5000", "--scopes", "5", "--rounds", "1"]
        bench_cold_store.main(size if args.quick else [])
    if "big_item" in chosen:
        bench_big_item.main(["--mb", "10", "--repeats", "1"] if args.quick else [])
    if "ray" in chosen:
        bench_ray.main(["--small"] if args.quick else [])
    if "scale" in chosen:
        bench_scale.main(["--quick", "--repeats", "1"] if args.quick else [])
    if "locomo" in chosen:
        if args.locomo is None or not Path(args.locomo).exists():
            message = (
                "LoCoMo skipped: give the LoCoMo JSON file with --locomo PATH or "
                f"COGNOXIUM_LOCOMO (got {args.locomo})."
            )
            print(message, flush=True)
            skipped = f"## LoCoMo\n\n{message}\n"
        else:
            rankers = (
                ["learned", "hybrid-lineage", "bm25"] if args.quick else list(batch_rank_methods())
            )
            run_locomo(Path(args.locomo), rankers)
    if "batch" in chosen:
        if args.locomo is None or not Path(args.locomo).exists():
            message = (
                "Batch skipped: give the LoCoMo JSON file with --locomo PATH or "
                f"COGNOXIUM_LOCOMO (got {args.locomo})."
            )
            print(message, flush=True)
            skipped += f"## Batch packing\n\n{message}\n"
        else:
            rounds = ["--repeats", "1", "--single-repeats", "30"] if args.quick else []
            bench_batch.main(["--locomo", str(args.locomo), *rounds])
    if "cache" in chosen:
        if args.locomo is None or not Path(args.locomo).exists():
            message = (
                "Prompt cache replay skipped: give the LoCoMo JSON file with --locomo PATH or "
                f"COGNOXIUM_LOCOMO (got {args.locomo})."
            )
            print(message, flush=True)
            skipped += f"## Prompt cache replay\n\n{message}\n"
        else:
            quick = ["--conversations", "2"] if args.quick else []
            bench_cache.main([str(args.locomo), *quick, "--out", str(RESULTS)])
    write_summary(skipped)


if __name__ == "__main__":
    main()
