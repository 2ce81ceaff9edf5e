"""Embedding benchmark: throughput of the embedders and the effect of the embedding cache.

Measures, in one run (ratios within the run, since the machine is noisy):

- throughput in texts/s (wall clock and CPU time) of ``minilm`` (all-MiniLM-L6-v2,
  int8 ONNX) and ``local_hash`` over synthetic LoCoMo-like conversation turns;
- ``embed_frame`` through an :class:`~cognoxium.retrieval.embeddings.EmbeddingCache`: cold
  (empty cache directory: embed and write), warm disk (a new cache object over
  the same directory: read the shards) and in memory (the same object again),
  with the speed-ups of warm disk and memory over cold. ``local_hash`` is cached
  in memory only; it is measured here with disk caching forced on, to show why;
- ``CognitionFrame.rank("embedding")`` with a warm cache, for scale.

Usage: ``python benchmarks/bench_embed.py [--items N] [--out benchmarks/results/embed.json]``
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from cognoxium.frame.frame import CognitionFrame
from cognoxium.items.validation import conform
from cognoxium.retrieval.embeddings import (
    Embedder,
    EmbeddingCache,
    LocalHashEmbedder,
    embed_frame,
    get_embedder,
)

_NAMES = ("Caroline", "Melanie", "Jon", "Gina", "John", "Maria", "Joanna", "Nate")
_OPENERS = (
    "Hey {b}!",
    "Thanks, {b}.",
    "Oh wow,",
    "That's great to hear.",
    "I know, right?",
    "Guess what,",
    "Sounds fun!",
    "",
)
_EVENTS = (
    "I went to the LGBTQ support group yesterday and it was so powerful",
    "we took the kids camping at the lake last weekend",
    "I painted a sunrise over the ocean for my art class",
    "my new job at the dance studio starts next Monday",
    "I have been researching adoption agencies since last summer",
    "we ran a charity race for mental health on Saturday",
    "I finally finished reading the book you recommended",
    "the pottery workshop was messy but really relaxing",
    "I'm thinking of moving back to Sweden next year",
    "my dog Oscar learned a new trick this morning",
    "the concert on 7 May 2023 was amazing",
    "I started volunteering at the shelter twice a week",
)
_CLOSERS = (
    "How about you?",
    "What have you been up to?",
    "It meant a lot to me.",
    "I'll send you a photo later.",
    "Can't wait to tell you more!",
    "",
)


def locomo_like_texts(n: int, seed: int = 11) -> list[str]:
    """``n`` short conversation turns in the style of LoCoMo (10-40 words each)."""
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, 1 << 30, size=(n, 5))
    texts = []
    for i in range(n):
        a, b, c, d, e = (int(x) for x in picks[i])
        other = _NAMES[b % len(_NAMES)]
        opener = _OPENERS[a % len(_OPENERS)].format(b=other)
        event = _EVENTS[c % len(_EVENTS)]
        detail = f"({d % 97} days ago, with {_NAMES[e % len(_NAMES)]})" if d % 3 == 0 else ""
        closer = _CLOSERS[e % len(_CLOSERS)]
        texts.append(" ".join(p for p in (opener, event, detail, closer) if p) + f" #{i}")
    return texts


def timed(fn: Callable[[], Any]) -> tuple[float, float, Any]:
    """Wall seconds, CPU seconds of this process, and the result of ``fn()``."""
    cpu0, wall0 = time.process_time(), time.perf_counter()
    out = fn()
    return time.perf_counter() - wall0, time.process_time() - cpu0, out


def throughput(name: str, texts: list[str], repeats: int) -> dict[str, Any]:
    embedder = get_embedder(name)
    embedder.embed(texts[:64])  # load the model, warm the session
    best_wall, best_cpu = float("inf"), float("inf")
    for _ in range(repeats):
        wall, cpu, out = timed(lambda: embedder.embed(texts))
        best_wall, best_cpu = min(best_wall, wall), min(best_cpu, cpu)
    assert out.shape == (len(texts), embedder.dim)
    return {
        "texts": len(texts),
        "dim": embedder.dim,
        "repeats": repeats,
        "best_wall_s": round(best_wall, 4),
        "best_cpu_s": round(best_cpu, 4),
        "texts_per_s_wall": round(len(texts) / best_wall, 1),
        "texts_per_s_cpu": round(len(texts) / best_cpu, 1),
    }


class LocalHashOnDisk(LocalHashEmbedder):
    """``local_hash`` with disk caching forced on (it is memory-only by default)."""

    disk_cache = True


def cache_effect(embedder: Embedder, df: pl.DataFrame, directory: Path) -> dict[str, Any]:
    embedder.embed(["warm up"])
    cold_cache = EmbeddingCache(directory)
    cold, _, first = timed(lambda: embed_frame(df, embedder, cold_cache))
    cold_info = cold_cache.info()._asdict()
    cold_cache.reset_info()
    memory, _, third = timed(lambda: embed_frame(df, embedder, cold_cache))
    assert cold_cache.info().memory_hits == df.height
    warm_cache = EmbeddingCache(directory)
    disk, _, second = timed(lambda: embed_frame(df, embedder, warm_cache))
    assert np.array_equal(first, second)
    assert np.array_equal(first, third)
    assert cold_info["computed"] == df["content_hash"].n_unique()
    assert warm_cache.info().disk_hits == df.height
    shard_bytes = sum(p.stat().st_size for p in directory.rglob("shard-*.parquet"))
    return {
        "rows": df.height,
        "cold_s": round(cold, 4),
        "warm_disk_s": round(disk, 4),
        "memory_s": round(memory, 4),
        "warm_disk_speedup_over_cold": round(cold / disk, 1),
        "memory_speedup_over_cold": round(cold / memory, 1),
        "memory_speedup_over_warm_disk": round(disk / memory, 1),
        "shard_bytes": shard_bytes,
        "cold_info": cold_info,
        "warm_disk_info": warm_cache.info()._asdict(),
        "memory_info": cold_cache.info()._asdict(),
    }


def rank_warm(df: pl.DataFrame, root: Path) -> dict[str, Any]:
    os.environ["COGNOXIUM_CACHE_DIR"] = str(root / "minilm")  # filled by cache_effect
    cf = CognitionFrame(df)
    query = "Did Caroline go to the support group?"
    out: dict[str, Any] = {"rows": df.height}
    for method in ("embedding", "hybrid"):
        ranked = cf.rank(method, query=query, model="minilm").sort("rank", descending=True)
        ranked.collect()  # fills the cache
        wall, _, top = timed(lambda r=ranked: r.head(5).collect())
        assert top.height == min(5, df.height)
        out[f"{method}_warm_s"] = round(wall, 4)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=5000)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/embed.json"))
    args = parser.parse_args()

    texts = locomo_like_texts(args.items)
    df = conform(
        pl.DataFrame(
            {
                "id": [f"t{i:05d}" for i in range(len(texts))],
                "role": ["user" if i % 2 == 0 else "assistant" for i in range(len(texts))],
                "text": texts,
            }
        )
    )
    load_start = os.getloadavg()
    report: dict[str, Any] = {
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "onnxruntime": version("onnxruntime"),
            "tokenizers": version("tokenizers"),
            "polars": version("polars"),
            "load_average_at_start": [round(x, 2) for x in load_start],
        },
        "texts": {
            "count": len(texts),
            "mean_words": round(float(np.mean([len(t.split()) for t in texts])), 1),
            "example": texts[0],
        },
    }
    report["throughput"] = {
        "local_hash": throughput("local_hash", texts, repeats=3),
        "minilm": throughput("minilm", texts, repeats=1),
    }
    lh = report["throughput"]["local_hash"]["texts_per_s_wall"]
    mm = report["throughput"]["minilm"]["texts_per_s_wall"]
    report["throughput"]["local_hash_over_minilm"] = round(lh / mm, 1)
    with tempfile.TemporaryDirectory(prefix="cognoxium-embed-bench-") as tmp:
        root = Path(tmp)
        report["cache"] = {
            "minilm": cache_effect(get_embedder("minilm"), df, root / "minilm"),
            "local_hash_forced_on_disk": cache_effect(LocalHashOnDisk(), df, root / "lh"),
        }
        report["rank_frame"] = rank_warm(df, root)
    report["machine"]["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    print(json.dumps(report, indent=2, ensure_ascii=False))


if __name__ == "__main__":
    main()
