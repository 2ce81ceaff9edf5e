"""Context strategy benchmark on LoCoMo: evidence recall and latency per strategy and budget.

For each conversation, the backends are built over its dialog turns (the scope
of :func:`cognoxium.app.locomo_dataset.locomo_requests`): BM25 index, MiniLM embeddings
(through an embedding cache in a fresh temporary directory, so the first build
is cold; a second build is timed warm), the graph and the temporal tiers. Then,
for the first ``--questions`` questions of each conversation and each budget,
context is assembled by

- ``registry``: :class:`~cognoxium.strategies.ContextAssembler` with the
  default enabled list (simple-keyword, semantic-embedding,
  breadth-depth-navigator; budget split by confidence × quality);
- each of ``simple-keyword``, ``semantic-embedding``, ``breadth-depth-navigator``
  and ``arce`` alone, with the whole budget.

Evidence recall is the share of a question's evidence turns among the
fragments (questions without evidence are skipped); latency is the median
wall-clock time of one assembly. Timings are wall-clock seconds on a shared,
noisy machine: compare ratios within one run, not figures across runs.

Usage: ``python benchmarks/bench_strategies.py [--locomo PATH] [--questions 40]
[--budgets 512,1024,2048] [--out PATH]`` (the path defaults to
``$COGNOXIUM_LOCOMO``, else ``../shared/data/locomo/locomo7.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import polars as pl

from cognoxium.app.locomo_dataset import load_locomo, locomo_requests
from cognoxium.retrieval.embeddings import EmbeddingCache
from cognoxium.strategies import (
    ArceStrategy,
    Backends,
    BreadthDepthNavigatorStrategy,
    ContextAssembler,
    ContextRequest,
    SemanticEmbeddingStrategy,
    SimpleKeywordStrategy,
    StrategyExecutor,
)

SINGLE = (
    SimpleKeywordStrategy(),
    SemanticEmbeddingStrategy(),
    BreadthDepthNavigatorStrategy(),
    ArceStrategy(),
)


def _timed(call: Any, *args: Any, **kwargs: Any) -> tuple[Any, float]:
    start = time.perf_counter()
    value = call(*args, **kwargs)
    return value, time.perf_counter() - start


def run(path: Path, questions: int, budgets: list[int]) -> dict[str, Any]:
    items = load_locomo(path)
    requests = [r for r in locomo_requests(path, budgets[:1]) if r.evidence]
    by_conversation: dict[str, list[Any]] = {}
    for request in requests:
        conversation = request.id.split(":")[0]
        by_conversation.setdefault(conversation, []).append(request)
    assembler = ContextAssembler()
    executor = StrategyExecutor()
    recall: dict[str, dict[int, list[float]]] = {}
    latency: dict[str, list[float]] = {}
    builds: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as directory:
        for conversation, asked in sorted(by_conversation.items()):
            turns = items.filter(
                (pl.col("metadata").str.json_path_match("$.conversation") == conversation)
                & (pl.col("metadata").str.json_path_match("$.kind") == "turn")
            )
            build = Backends.from_frame
            backends, cold = _timed(build, turns, embedding_cache=EmbeddingCache(directory))
            _, warm = _timed(build, turns, embedding_cache=EmbeddingCache(directory))
            builds.append(
                {
                    "conversation": conversation,
                    "turns": turns.height,
                    "cold_s": cold,
                    "warm_s": warm,
                }
            )
            as_of = turns.get_column("created_at").max()
            for question in asked[:questions]:
                evidence = set(question.evidence)
                request = ContextRequest(query=question.query, as_of=as_of)
                for budget in budgets:
                    result, seconds = _timed(assembler.assemble, request, backends, budget)
                    found = {f.node for f in result.fragments}
                    recall.setdefault("registry", {}).setdefault(budget, []).append(
                        len(evidence & found) / len(evidence)
                    )
                    latency.setdefault("registry", []).append(seconds)
                    for strategy in SINGLE:
                        (single,), seconds = _timed(
                            executor.execute, request, backends, [(strategy, budget)]
                        )
                        found = {f.node for f in single.fragments}
                        recall.setdefault(strategy.name, {}).setdefault(budget, []).append(
                            len(evidence & found) / len(evidence)
                        )
                        latency.setdefault(strategy.name, []).append(seconds)
    return {
        "machine": {"python": sys.version.split()[0], "platform": platform.platform()},
        "questions": sum(len(v[:questions]) for v in by_conversation.values()),
        "budgets": budgets,
        "builds": builds,
        "recall": {
            name: {str(b): round(statistics.fmean(v), 4) for b, v in per.items()}
            for name, per in recall.items()
        },
        "median_latency_ms": {
            name: round(statistics.median(v) * 1000, 2) for name, v in latency.items()
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = os.environ.get("COGNOXIUM_LOCOMO", "../shared/data/locomo/locomo7.json")
    parser.add_argument("--locomo", type=Path, default=Path(default))
    parser.add_argument("--questions", type=int, default=40)
    parser.add_argument("--budgets", default="512,1024,2048")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/strategies.json"))
    args = parser.parse_args()
    if not args.locomo.exists():
        raise SystemExit(f"LoCoMo file not found: {args.locomo} (set --locomo or COGNOXIUM_LOCOMO)")
    report = run(args.locomo, args.questions, [int(b) for b in args.budgets.split(",")])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
