"""Per-question cost and cross-validated packing utility of rank("learned") on LoCoMo.

``--cost``: the per-question cost of ``learned`` against ``hybrid-lineage``.

For every LoCoMo question (one budget), ranks the question's scope and packs
it, exactly as ``cognoxium locomo`` does (:func:`cognoxium.app.batch.rank_request`
then ``pack``), once with each method. A first pass over all questions warms
every cache (embeddings, BM25 indexes, retrievers, feature extractors, token
counts) for both methods; the timed passes then alternate the methods per
question, so machine noise hits both alike. Reports the mean and median
milliseconds per question and the ratio learned / hybrid-lineage.

``--cv``: leave-one-conversation-out evidence recall at 1,024 and 2,048 tokens
(:func:`cognoxium.app.ranker.cross_validate`) of packing by probability
(``c = 0``) against the cost-aware utility ``log p - c·log cost`` for several
``c``, beside the ``hybrid-lineage`` fused score, over a greedy pack of each
question's turns.

Usage: ``python benchmarks/bench_learned.py (--cost | --cv) [--locomo PATH]
[--budget 1024] [--repeat 2] [--every 1] [--out FILE]``; the LoCoMo path defaults to
``$COGNOXIUM_LOCOMO``; results go to ``benchmarks/results/learned_cost.json``
and ``benchmarks/results/learned_cv.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np

from cognoxium.app.batch import rank_request
from cognoxium.app.locomo_dataset import load_locomo, locomo_requests
from cognoxium.app.ranker import cross_validate, locomo_questions
from cognoxium.frame.frame import CognitionFrame

METHODS = ("hybrid-lineage", "learned")


def measure(path: Path, budget: int, repeat: int, every: int = 1) -> dict[str, Any]:
    """Time rank + pack per question for each method (every ``every``-th question)."""
    store = CognitionFrame(load_locomo(path))
    requests = locomo_requests(path, [budget])[::every]
    scopes = {w: store.filter(w) for w in {r.where for r in requests if r.where is not None}}

    def one(method: str, index: int) -> float:
        request = requests[index]
        started = time.perf_counter()
        ranked = rank_request(scopes[request.where], request, method, store=store)  # type: ignore[arg-type]
        ranked.pack(request.budget, as_of=request.as_of, label=request.id)
        return (time.perf_counter() - started) * 1000.0

    for index in range(len(requests)):
        for method in METHODS:
            one(method, index)
    times: dict[str, list[float]] = {m: [] for m in METHODS}
    for _ in range(repeat):
        for index in range(len(requests)):
            for method in METHODS:
                times[method].append(one(method, index))
    summary = {
        m: {"mean_ms": float(np.mean(t)), "median_ms": float(np.median(t))}
        for m, t in times.items()
    }
    return {
        "questions": len(requests),
        "budget": budget,
        "repeat": repeat,
        "every": every,
        "methods": summary,
        "ratio_mean": summary["learned"]["mean_ms"] / summary["hybrid-lineage"]["mean_ms"],
        "ratio_median": summary["learned"]["median_ms"] / summary["hybrid-lineage"]["median_ms"],
        "extra_mean_ms": summary["learned"]["mean_ms"] - summary["hybrid-lineage"]["mean_ms"],
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
    }


COST_PENALTIES = (0.0, 0.25, 0.5, 1.0)
L2 = (1.0,)


def validate(path: Path) -> dict[str, Any]:
    """Leave-one-conversation-out recall for each L2 penalty and cost penalty."""
    questions = locomo_questions(path)
    return {
        "questions": len(questions),
        "l2": {
            f"{l2:g}": cross_validate(questions, l2=l2, cost_penalties=COST_PENALTIES) for l2 in L2
        },
    }


def main() -> None:
    """Run the benchmark and write its JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--cost", action="store_true")
    mode.add_argument("--cv", action="store_true")
    parser.add_argument("--locomo", default=os.environ.get("COGNOXIUM_LOCOMO"))
    parser.add_argument("--budget", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--every", type=int, default=1, help="time every k-th question")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    if not args.locomo:
        parser.error("give --locomo PATH or set COGNOXIUM_LOCOMO")
    if args.cost:
        result = measure(Path(args.locomo), args.budget, args.repeat, args.every)
        out = args.out or "benchmarks/results/learned_cost.json"
    else:
        result = validate(Path(args.locomo))
        out = args.out or "benchmarks/results/learned_cv.json"
    Path(out).write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    print(json.dumps(result, indent=2, sort_keys=True))


if __name__ == "__main__":
    main()
