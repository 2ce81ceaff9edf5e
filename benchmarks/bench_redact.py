"""Redaction benchmark: ``redact_frame`` against the same recognisers run row by row.

Builds ``--mb`` megabytes (UTF-8) of synthetic chat and document lines, about
2% of which carry personal data or secrets (every type of
:data:`cognoxium.governance.redaction.RECOGNISERS`) while many more carry numbers that
look like them (order numbers, dates, versions, prices, Luhn-failing card-like
numbers, times). Then, in one run (the machine is noisy, so only ratios within
a run are meaningful):

- ``redact_frame`` over the frame (vectorised candidates and validation,
  Python only on the rows with a validated candidate);
- the baseline: :func:`cognoxium.governance.redaction.redact_text` on every row, that is
  the same patterns and validators with Python's ``re``, row by row;

checks that both give the same texts and the same counts, and writes
throughput in MB/s and the speed-up to ``benchmarks/results/redact.json``.

Usage: ``python benchmarks/bench_redact.py [--mb 100] [--out benchmarks/results/redact.json]``
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import numpy as np
import polars as pl

from cognoxium.governance.redaction import RECOGNISERS, TYPES, redact_frame, redact_text
from cognoxium.items.schema import conform
from cognoxium.testing.pii_corpus import luhn_complete

_WORDS = (
    "the a to and of I you it is that in for on we this with can my your be have not "
    "order refund shipping account reset invoice billing plan upgrade cancel thanks please "
    "help issue error again tomorrow yesterday today week month price support agent ticket "
    "status delivered delayed package tracking number address email phone call back update "
    "version install configure server database query timeout retry failed success works "
    "broken fixed, sure. great! why? how? when? API JSON HTTP OK :) ... token tokens "
    "password secret key café naïve über déjà"
).split()

# Numbers that look like personal data and are not: they reach the candidate
# stage (or nearly) and must be rejected by a pattern or a validator.
_NEAR = (
    "#{d5}",
    "order {d8}",
    "ORD-2024-{d6}",
    "{d4}-{m}-{m}",
    "{m}/{m}/{d4}",
    "v{d1}.{d2}.{d1}",
    "{d1}.{d2}.{d3}",
    "at {m}:{m}:{m}",
    "${d3}.{d2}",
    "4111 1111 1111 111{bad}",
    "{d16}",
    "999.{d1}.{d1}.{d1}",
    "000-{d2}-{d4}",
    "ext {d4}",
    "555-{d4}",
    "+{d1}{d1} {d2}",
)

_PII = (
    "{user}@example.org",
    "+44 20 7946 {d4}",
    "+1 (415) 555-{d4}",
    "+49-30-{d6}",
    "0044 20 7946 {d4}",
    "{card}",
    "{card_spaced}",
    "DE89 3704 0044 0532 0130 00",
    "GB82WEST12345698765432",
    "10.{o}.{o}.{o}",
    "2001:db8::{h}",
    "AKIA{aws}",
    "ghp_{gh}",
    "api_key={tok}",
    "password: {tok}",
    "{area}-{d2b}-{d4b}",
)


def _fill(template: str, rng: np.random.Generator) -> str:
    def digits(n: int) -> str:
        return "".join(map(str, rng.integers(0, 10, n)))

    alnum = np.array(list("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"))
    card = luhn_complete("4" + digits(14))
    values = {
        "d1": str(rng.integers(1, 10)),
        "d2": digits(2),
        "d3": digits(3),
        "d4": digits(4),
        "d5": digits(5),
        "d6": digits(6),
        "d8": digits(8),
        "d16": luhn_complete("9" + digits(14)),  # IIN 9: not a card scheme
        "m": f"{rng.integers(1, 13):02d}",
        "bad": str((int(luhn_complete("411111111111111")[-1]) + 1) % 10),
        "user": "".join(rng.choice(alnum[26:52], 6)),
        "card": card,
        "card_spaced": " ".join(card[i : i + 4] for i in range(0, 16, 4)),
        "o": str(rng.integers(0, 256)),
        "h": f"{rng.integers(1, 65536):x}",
        "aws": "".join(rng.choice(alnum[:26], 16)),
        "gh": "".join(rng.choice(alnum, 36)),
        "tok": "".join(rng.choice(alnum, 12)) + "9aZ",
        "area": f"{rng.integers(1, 666):03d}",
        "d2b": f"{rng.integers(1, 100):02d}",
        "d4b": f"{rng.integers(1, 10000):04d}",
    }
    return template.format(**values)


def synthetic_lines(mb: float, seed: int = 11, pii_rate: float = 0.02) -> list[str]:
    """Build lines of 5-60 words until ``mb`` MB of UTF-8.

    A share ``pii_rate`` of the lines carries one value of personal data, and
    a quarter carries a look-alike number.
    """
    rng = np.random.default_rng(seed)
    target = int(mb * 1_000_000)
    words = np.array(_WORDS, dtype=object)
    lines: list[str] = []
    size = 0
    block = 20_000
    while size < target:
        lengths = rng.integers(5, 60, block)
        pool = words[rng.integers(0, len(words), int(lengths.sum()))]
        bounds = np.concatenate([[0], np.cumsum(lengths)])
        kinds = rng.random(block)
        for i in range(block):
            parts = list(pool[bounds[i] : bounds[i + 1]])
            if kinds[i] < pii_rate:
                template = _PII[rng.integers(0, len(_PII))]
                parts.insert(int(rng.integers(0, len(parts))), _fill(template, rng))
            elif kinds[i] < pii_rate + 0.25:
                template = _NEAR[rng.integers(0, len(_NEAR))]
                parts.insert(int(rng.integers(0, len(parts))), _fill(template, rng))
            line = " ".join(parts)
            lines.append(line)
            size += len(line.encode("utf-8"))
            if size >= target:
                break
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, default=100.0, help="MB of text (default 100)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/redact.json"))
    args = parser.parse_args()

    t0 = time.perf_counter()
    lines = synthetic_lines(args.mb)
    n = len(lines)
    df = conform(
        pl.DataFrame(
            {
                "id": [f"m{i:08d}" for i in range(n)],
                "role": ["user"] * n,
                "text": lines,
                "created_at": ["2024-01-01T00:00:00Z"] * n,
            }
        )
    )
    mb = float(df.get_column("text").str.len_bytes().sum()) / 1e6
    build_s = time.perf_counter() - t0
    print(f"{n:,} lines, {mb:.1f} MB built in {build_s:.1f} s")

    redact_frame(df.head(1000))  # warm up: regex compilation, thread pool
    start = time.perf_counter()
    out = redact_frame(df)
    frame_s = time.perf_counter() - start
    print(f"redact_frame: {frame_s:.2f} s, {mb / frame_s:.1f} MB/s")

    start = time.perf_counter()
    reference = [redact_text(line) for line in lines]
    rows_s = time.perf_counter() - start
    print(f"row by row (Python re): {rows_s:.2f} s, {mb / rows_s:.1f} MB/s")

    texts = out.get_column("text").to_list()
    counts = [json.loads(c) for c in out.get_column("redactions").to_list()]
    same = all(t == r and c == rc for t, c, (r, rc) in zip(texts, counts, reference, strict=True))
    changed = sum(1 for c in counts if c)
    totals: dict[str, int] = {}
    for c in counts:
        for kind, k in c.items():
            totals[kind] = totals.get(kind, 0) + k
    result = {
        "mb": mb,
        "lines": n,
        "changed_lines": changed,
        "redactions": dict(sorted(totals.items())),
        "recognisers": len(RECOGNISERS),
        "types": list(TYPES),
        "redact_frame_s": frame_s,
        "redact_frame_mb_per_s": mb / frame_s,
        "row_by_row_s": rows_s,
        "row_by_row_mb_per_s": mb / rows_s,
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
        raise SystemExit("redact_frame and the row-by-row reference disagree")


if __name__ == "__main__":
    main()
