"""Continuity benchmark: ingesting notes and answering queries with the default pieces.

Measures, per memory size (``local_hash`` embedder, ``in_memory`` memory, one
``flat`` structure, ``default`` strategy):

- ingest: ``ContinuityEngine.ingest_many`` in notes/s; the time of embedding
  the same texts in the same batches alone; and the rest per note, which is
  admitting and storing (the per-note strategy contract check and the memory
  append);
- ask: median latency of ``ContinuityEngine.ask`` (embed the query, exact cosine
  search over every note, top-k with the id tie-break) over distinct queries;
- to_frame + pack: median latency of turning an answer into a frame and
  packing it under 512 tokens.

Timings are wall-clock seconds on a shared, noisy machine: compare ratios
within one run, not figures across runs.

Usage: ``python benchmarks/bench_continuity.py [--sizes 1000,10000,50000] [--out PATH]``
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cognoxium.continuity import Container, ContinuityEngine, Note, Query

_WORDS = (
    "launch plan october product meeting budget design review customer support "
    "refund shipping order invoice travel paris hotel flight dinner birthday "
    "garden painting concert guitar lesson school project deadline report "
    "doctor appointment gym running marathon recipe apple pie coffee book"
).split()


def synthetic_notes(n: int, seed: int = 0) -> list[Note]:
    """``n`` notes of 6 to 20 words drawn from a small vocabulary, one per minute."""
    rng = random.Random(seed)
    return [
        Note(
            id=f"n{i:07d}",
            text=" ".join(rng.choices(_WORDS, k=rng.randint(6, 20))),
            timestamp=60.0 * i,
        )
        for i in range(n)
    ]


def measure(n: int, queries: int = 50) -> dict[str, Any]:
    """Time ingest, ask and to_frame + pack for a memory of ``n`` notes."""
    notes = synthetic_notes(n)
    engine = ContinuityEngine(container=Container(search_cwd=False))
    embedder = engine.context.embedder

    batch = ContinuityEngine.EMBED_BATCH
    start = time.perf_counter()
    for first in range(0, n, batch):
        embedder.embed([note.text for note in notes[first : first + batch]])
    embed_s = time.perf_counter() - start

    start = time.perf_counter()
    engine.ingest_many(notes)
    ingest_s = time.perf_counter() - start

    rng = random.Random(1)
    texts = [" ".join(rng.choices(_WORDS, k=3)) for _ in range(queries)]
    engine.ask(texts[0])  # builds the memory's id columns once
    ask_times, pack_times = [], []
    as_of = datetime(2026, 1, 1, tzinfo=UTC)
    for text in texts:
        start = time.perf_counter()
        answer = engine.ask(Query(text=text, k=20))
        ask_times.append(time.perf_counter() - start)
        start = time.perf_counter()
        answer.to_frame().pack(512, as_of=as_of)
        pack_times.append(time.perf_counter() - start)
    return {
        "notes": n,
        "ingest_s": round(ingest_s, 4),
        "ingest_notes_per_s": round(n / ingest_s),
        "embed_s": round(embed_s, 4),
        "admit_and_store_us_per_note": round(1e6 * max(ingest_s - embed_s, 0.0) / n, 1),
        "ask_median_ms": round(1000 * statistics.median(ask_times), 3),
        "to_frame_pack_median_ms": round(1000 * statistics.median(pack_times), 3),
    }


def main() -> None:
    """Run the benchmark and write JSON results."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,50000")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/continuity.json"))
    args = parser.parse_args()
    rows = [measure(int(size)) for size in args.sizes.split(",")]
    result = {"machine": platform.platform(), "python": platform.python_version(), "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    for row in rows:
        print(json.dumps(row))


if __name__ == "__main__":
    main()
