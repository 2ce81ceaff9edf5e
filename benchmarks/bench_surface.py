"""Polars-native surface benchmark: the user's whole call against Polars itself.

Builds a frame of ``--n`` chat-like records (``bench_items_io.chat_records``)
and times, best of ``--repeat`` runs (the machine is noisy), each query
written once and run three ways on the same rows:

- ``cognoxium``: the user's whole call on a CognitionFrame (building the
  plan, checking every step, optimizing, lowering and collecting);
- ``polars``: the same chain on a Polars LazyFrame of the frame's rows,
  built and collected (the peer);
- ``floor``: the Polars query built once, only ``collect()`` timed.

Then the repr of a pack of all the items under 8,192 tokens, first call
(computes the manifest digest) and second call (cached), and its length.

Prints seconds and the ratios ``cognoxium / polars`` and ``cognoxium /
floor``, and writes them as JSON to ``--out`` (default
``benchmarks/results/surface.json``); ``run_all.py`` runs it as the
``surface`` suite and writes ``surface.md`` with :func:`markdown`.

Usage: ``python benchmarks/bench_surface.py [--n 100000] [--repeat 5] [--out FILE]``
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import polars as pl
from polars.testing import assert_frame_equal

from bench_items_io import best_of, chat_records
from cognoxium import CognitionFrame

RESULTS = Path(__file__).resolve().parent / "results"

QUERIES: dict[str, Callable[[Any], Any]] = {
    "filter constraint + top_k": lambda f: f.filter(role="user").top_k(20, by="priority"),
    "drop + rename + tail": lambda f: f.drop("binary", "json").rename({"role": "r"}).tail(100),
    "slice + filter": lambda f: f.slice(-5000, 1000).filter(pl.col("priority") > 4),
    "select list + bottom_k": lambda f: f.select(["id", "priority", "created_at"]).bottom_k(
        10, by=["priority", "created_at"]
    ),
}


def _timed(call: Callable[[], object]) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def measure(n: int, repeat: int) -> dict[str, Any]:
    """Time every query three ways and the pack repr; return the figures."""
    frame = CognitionFrame(chat_records(n))
    lazy = frame.collect().lazy()
    out: dict[str, Any] = {"n": n, "repeat": repeat, "python": platform.python_version()}
    for name, query in QUERIES.items():
        assert_frame_equal(query(frame).collect(), query(lazy).collect())
        built = query(lazy)
        ours = best_of(repeat, lambda q=query: q(frame).collect())  # type: ignore[misc]
        peer = best_of(repeat, lambda q=query: q(lazy).collect())  # type: ignore[misc]
        floor = best_of(repeat, built.collect)
        out[name] = {
            "cognoxium_s": round(ours, 5),
            "polars_s": round(peer, 5),
            "floor_s": round(floor, 5),
            "vs_polars": round(ours / peer, 2),
            "vs_floor": round(ours / floor, 2),
        }
    pack = frame.pack(8192, as_of=datetime(2030, 1, 1, tzinfo=UTC))
    first = _timed(lambda: repr(pack))
    out["repr(pack)"] = {
        "first_s": round(first, 4),
        "second_s": round(_timed(lambda: repr(pack)), 6),
        "chars": len(repr(pack)),
    }
    return out


def markdown(result: dict[str, Any]) -> str:
    """A Markdown section: each query's seconds and ratios, and the pack repr's cost."""
    rows = [
        f"| {name} | {q['cognoxium_s']:.5f} | {q['polars_s']:.5f} | {q['floor_s']:.5f} "
        f"| {q['vs_polars']:.2f}x | {q['vs_floor']:.2f}x |"
        for name, q in result.items()
        if name in QUERIES
    ]
    shown = result["repr(pack)"]
    return (
        f"## Frame surface against Polars: {result['n']:,} items (best of {result['repeat']})\n\n"
        "The user's whole call on a `CognitionFrame` (plan, checks, optimizer, lowering, "
        "collect) against the same chain on a Polars `LazyFrame` (peer) and the prebuilt "
        "Polars query's `collect()` alone (floor).\n\n"
        "| query | cognoxium s | polars s | floor s | vs polars | vs floor |\n"
        "|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n\n"
        f"`repr(pack)` of a pack of every item under 8,192 tokens: {shown['first_s']:.4f} s "
        f"first (manifest digest), {shown['second_s']:.6f} s cached, {shown['chars']} "
        "characters.\n"
    )


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Parse the arguments, run :func:`measure`, print and write the JSON result."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", type=Path, default=RESULTS / "surface.json")
    args = parser.parse_args(argv)
    if args.n < 1 or args.repeat < 1:
        parser.error("need --n >= 1 and --repeat >= 1")
    result = measure(args.n, args.repeat)
    print(json.dumps(result, indent=2), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return result


if __name__ == "__main__":
    main()
