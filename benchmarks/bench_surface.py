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
floor``, and writes them as JSON to ``--out`` when given.

Usage: ``python benchmarks/bench_surface.py [--n 100000] [--repeat 5] [--out FILE]``
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import polars as pl
from polars.testing import assert_frame_equal

from bench_items_io import best_of, chat_records
from cognoxium import CognitionFrame

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


def main(n: int, repeat: int) -> dict[str, Any]:
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


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    result = main(args.n, args.repeat)
    print(json.dumps(result, indent=2))
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
