"""Item input benchmark: ``records_to_frame`` and ``read_jsonl`` on chat-like records.

Builds ``--n`` chat-like JSON records (alternating user/assistant turns with
lognormal lengths, ISO 8601 ``created_at``, a priority, a provenance source
and a small metadata object, as :func:`cognoxium.items.item_to_record`
writes them), then times, best of ``--repeat`` runs (the machine is noisy):

- :func:`cognoxium.items.records_to_frame` over the list of records;
- :func:`cognoxium.items.read_jsonl` over the same records written as a
  JSONL file (one record per line).

Prints seconds per call and records per second, and writes them as JSON to
``--out`` when given.

Usage: ``python benchmarks/bench_items_io.py [--n 100000] [--repeat 3] [--out FILE]``
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from cognoxium.items.io import read_jsonl
from cognoxium.items.records import records_to_frame

T0 = datetime(2024, 1, 1, tzinfo=UTC)
_WORDS = (
    "the a to and of I you it is that in for on we this with can my your be have not "
    "order refund shipping account reset invoice billing plan upgrade cancel thanks please "
    "help issue error again tomorrow yesterday today week month price support agent ticket "
    "café naïve über déjà"
).split()


def chat_records(n: int, seed: int = 7) -> list[dict[str, Any]]:
    """``n`` chat-like JSON records: alternating user/assistant turns, ~25 words each."""
    rng = np.random.default_rng(seed)
    lengths = np.clip(rng.lognormal(mean=3.2, sigma=0.7, size=n).astype(np.int64), 1, 600)
    words = np.array(_WORDS, dtype=object)[rng.integers(0, len(_WORDS), size=int(lengths.sum()))]
    bounds = np.concatenate([[0], np.cumsum(lengths)])
    priorities = rng.integers(0, 10, size=n)
    return [
        {
            "id": f"c{i // 50:05d}:{i % 50}",
            "role": "user" if i % 2 == 0 else "assistant",
            "text": " ".join(words[bounds[i] : bounds[i + 1]]),
            "created_at": (T0 + timedelta(seconds=i)).isoformat().replace("+00:00", "Z"),
            "priority": int(priorities[i]),
            "sources": [{"uri": f"chat://c{i // 50:05d}", "kind": "chat_log"}],
            "metadata": {"conversation": f"c{i // 50:05d}", "turn": i % 50},
        }
        for i in range(n)
    ]


def best_of(repeat: int, call: Callable[[], object]) -> float:
    """The fastest of ``repeat`` wall-clock timings of ``call()``, in seconds."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return min(times)


def main(n: int, repeat: int) -> dict[str, Any]:
    """Time both inputs on ``n`` records; return the figures."""
    records = chat_records(n)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "items.jsonl"
        with path.open("w", encoding="utf-8") as handle:
            for record in records:
                handle.write(json.dumps(record, ensure_ascii=False) + "\n")
        assert records_to_frame(records).equals(read_jsonl(path))
        records_s = best_of(repeat, lambda: records_to_frame(records))
        jsonl_s = best_of(repeat, lambda: read_jsonl(path))
    return {
        "n": n,
        "repeat": repeat,
        "python": platform.python_version(),
        "records_to_frame_s": round(records_s, 3),
        "records_to_frame_per_s": round(n / records_s),
        "read_jsonl_s": round(jsonl_s, 3),
        "read_jsonl_per_s": round(n / jsonl_s),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    result = main(args.n, args.repeat)
    print(json.dumps(result, indent=2))
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
