"""Redaction speed from the user's objects: ``CognitionFrame(records).redact()`` against row by row.

Builds ``--rows`` chat messages as the user holds them (dicts with ``id``,
``role`` and ``text``): the mixed lines of ``bench_redact.py`` (about 2% with
personal data or secrets, a quarter with look-alike numbers), of which a
further ``--corpus-share`` are replaced by sentences of the PII corpus
(:mod:`cognoxium.testing.pii_corpus`: national phone formats of 13 regions,
IDN e-mail domains, UATP cards, dashed IBANs, CIDR blocks, hard negatives).
Then, in one run (only ratios within a run mean anything on a shared machine):

- vectorised: ``CognitionFrame(records).redact().collect()``, that is the
  conversion of the records to Arrow columns, the plan, and ``redact_frame``;
- the baseline: :func:`cognoxium.governance.redaction.redact_text` on each
  record's text, the same recognisers and validators with Python's ``re``,
  row by row.

Both paths are warmed up alike first (imports, compiled patterns,
libphonenumber's metadata). The phone recogniser caches libphonenumber's
answer per distinct run; the cache is cleared before each timed run, so
neither path profits from the other. Both outputs are compared text by text and count by count.

Usage: ``python benchmarks/redact_speed.py [--rows 100000] [--out benchmarks/results/redact_speed.json]``
"""  # noqa: E501

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_redact import synthetic_lines
from cognoxium import CognitionFrame
from cognoxium.governance.redaction import RECOGNISERS, _phone_parts, redact_text
from cognoxium.testing.pii_corpus import generate


def mixed_records(rows: int, corpus_share: float, seed: int = 11) -> list[dict[str, str]]:
    """``rows`` chat records: synthetic lines, with a share replaced by PII corpus sentences."""
    lines: list[str] = []
    mb = 4.0
    while len(lines) < rows:
        lines = synthetic_lines(mb, seed=seed)
        mb *= 2
    lines = lines[:rows]
    corpus = [d.value for d in generate(seed=seed, per_type=60) if isinstance(d.value, str)]
    step = max(1, round(1 / corpus_share)) if corpus_share > 0 else 0
    if step:
        for k, i in enumerate(range(0, rows, step)):
            lines[i] = corpus[k % len(corpus)] + " " + lines[i][:80]
    return [{"id": f"m{i:07d}", "role": "user", "text": t} for i, t in enumerate(lines)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--corpus-share", type=float, default=0.02)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/redact_speed.json"))
    args = parser.parse_args()

    records = mixed_records(args.rows, args.corpus_share)
    mb = sum(len(r["text"].encode("utf-8")) for r in records) / 1e6
    print(f"{len(records):,} records, {mb:.1f} MB of text")

    # Warm up both paths alike (imports, regex compilation, libphonenumber's metadata for
    # every region): the first 1000 records and one sentence of each corpus value.
    corpus = mixed_records(1000, corpus_share=1.0, seed=3)
    warm = records[:1000] + [{**r, "id": f"w{i:07d}"} for i, r in enumerate(corpus)]
    CognitionFrame(warm).redact().collect()
    for r in warm:
        redact_text(r["text"])
    _phone_parts.cache_clear()
    start = time.perf_counter()
    out = CognitionFrame(records).redact().collect()
    frame_s = time.perf_counter() - start
    print(f"CognitionFrame(records).redact().collect(): {frame_s:.2f} s")

    _phone_parts.cache_clear()
    start = time.perf_counter()
    reference = [redact_text(r["text"]) for r in records]
    rows_s = time.perf_counter() - start
    print(f"row by row (Python re): {rows_s:.2f} s")

    texts = out.get_column("text").to_list()
    counts = [json.loads(c) for c in out.get_column("redactions").to_list()]
    same = all(t == r and c == rc for t, c, (r, rc) in zip(texts, counts, reference, strict=True))
    totals: dict[str, int] = {}
    for c in counts:
        for kind, k in c.items():
            totals[kind] = totals.get(kind, 0) + k
    result = {
        "rows": len(records),
        "mb": mb,
        "corpus_share": args.corpus_share,
        "changed_rows": sum(1 for c in counts if c),
        "redactions": dict(sorted(totals.items())),
        "recognisers": len(RECOGNISERS),
        "vectorised_s": frame_s,
        "row_by_row_s": rows_s,
        "speedup": rows_s / frame_s,
        "same_output": same,
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "polars": pl.__version__,
        },
    }
    print(json.dumps(result, indent=2))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    if not same:
        raise SystemExit("the vectorised path and the row-by-row reference disagree")


if __name__ == "__main__":
    main()
