"""Redaction speed: the vectorised path against the same recognisers run row by row.

The baseline is :func:`cognoxium.governance.redaction.redact_text` on each text:
the same patterns and validators with Python's ``re``, row by row. Two modes:

records
    ``--rows`` chat messages as the user holds them (dicts with ``id``,
    ``role`` and ``text``) through the user's whole call,
    ``CognitionFrame(records).redact().collect()``: the conversion of the
    records to Arrow columns, the plan, and ``redact_frame``. The texts are
    the synthetic lines below, a ``--corpus-share`` of them replaced by
    sentences of the PII corpus (:mod:`cognoxium.testing.pii_corpus`:
    national phone formats of 13 regions, IDN e-mail domains, UATP cards,
    dashed IBANs, CIDR blocks, hard negatives).
lines
    ``--mb`` megabytes (UTF-8) of lines, already a frame of the item schema,
    into ``redact_frame``.

The synthetic lines are chat and document lines of 5-60 words, about 2% of
which carry personal data or secrets (every type of
:data:`cognoxium.governance.redaction.RECOGNISERS`) while a quarter carry numbers
that look like them (order numbers, dates, versions, prices, Luhn-failing
card-like numbers, times).

In each mode both paths are warmed up alike (imports, compiled patterns,
libphonenumber's metadata), then ``--repeats`` rounds time the vectorised
path and the baseline one after the other; the phone recogniser's answers per
run and the regions it learnt are forgotten before every timed run, so
neither path profits from the other. Every round compares the two outputs
text by text and count by count. The machine is shared and noisy, so only
figures of one run mean anything: each mode reports the minimum and the
median of its rounds and the speed-up of each (baseline over vectorised).
Both modes go to one file, ``benchmarks/results/redact.json``.

Usage: ``python benchmarks/bench_redact.py [--rows 100000] [--mb 100] [--modes records,lines]
[--repeats 3] [--out benchmarks/results/redact.json]``
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from cognoxium import CognitionFrame
from cognoxium.governance.redaction import RECOGNISERS, TYPES, redact_frame, redact_text
from cognoxium.governance.redaction._phone import _clear_phone_caches
from cognoxium.items.validation import conform
from cognoxium.testing.pii_corpus import generate, luhn_complete

RESULT = Path(__file__).resolve().parent / "results" / "redact.json"

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


Output = tuple[list[str], list[dict[str, int]]]


def frame_output(out: pl.DataFrame) -> Output:
    """The texts and counts of a redacted frame."""
    counts = [json.loads(c) for c in out.get_column("redactions").to_list()]
    return out.get_column("text").to_list(), counts


def pairs_output(pairs: list[tuple[str, dict[str, int]]]) -> Output:
    """The texts and counts of :func:`redact_text` on each text."""
    return [t for t, _ in pairs], [c for _, c in pairs]


def timed(run: Callable[[], Any]) -> tuple[float, float, Any]:
    """Wall-clock and CPU seconds of ``run()`` (CPU: every thread of the process), and its result.

    The phone recogniser's caches are forgotten first.
    """
    _clear_phone_caches()
    cpu, start = time.process_time(), time.perf_counter()
    out = run()
    return time.perf_counter() - start, time.process_time() - cpu, out


def rounds(
    repeats: int,
    vectorised: Callable[[], pl.DataFrame],
    texts: Sequence[str],
) -> dict[str, Any]:
    """Time both paths ``repeats`` times, one after the other, and compare their outputs.

    The timed baseline is ``[redact_text(t) for t in texts]``; outputs are
    brought to one form after the clocks stop.
    """
    times: dict[str, list[float]] = {}
    same = True
    output: Output = ([], [])
    for k in range(repeats):
        frame_s, frame_cpu, frame = timed(vectorised)
        rows_s, rows_cpu, pairs = timed(lambda: [redact_text(t) for t in texts])
        for name, value in (
            ("vectorised", frame_s),
            ("vectorised_cpu", frame_cpu),
            ("row_by_row", rows_s),
            ("row_by_row_cpu", rows_cpu),
        ):
            times.setdefault(name, []).append(value)
        print(f"  round {k + 1}: vectorised {frame_s:.2f} s, row by row {rows_s:.2f} s", flush=True)
        output = frame_output(frame)
        same = same and output == pairs_output(pairs)
    summary: dict[str, Any] = {"same_output": same, "repeats": repeats}
    for name, values in times.items():
        summary[f"{name}_s"] = values
        summary[f"{name}_min_s"] = min(values)
        summary[f"{name}_median_s"] = statistics.median(values)
    for stat in ("min", "median"):
        summary[f"speedup_{stat}"] = (
            summary[f"row_by_row_{stat}_s"] / summary[f"vectorised_{stat}_s"]
        )
        summary[f"speedup_cpu_{stat}"] = (
            summary[f"row_by_row_cpu_{stat}_s"] / summary[f"vectorised_cpu_{stat}_s"]
        )
    totals: dict[str, int] = {}
    for counts in output[1]:
        for kind, n in counts.items():
            totals[kind] = totals.get(kind, 0) + n
    summary["changed"] = sum(1 for counts in output[1] if counts)
    summary["redactions"] = dict(sorted(totals.items()))
    return summary


def records_mode(rows: int, corpus_share: float, repeats: int) -> dict[str, Any]:
    """The user's whole call on ``rows`` chat records against :func:`redact_text` on each."""
    records = mixed_records(rows, corpus_share)
    mb = sum(len(r["text"].encode("utf-8")) for r in records) / 1e6
    print(f"records: {len(records):,} records, {mb:.1f} MB of text", flush=True)
    # Warm up both paths alike: the first 1000 records and one sentence of each corpus value.
    corpus = mixed_records(1000, corpus_share=1.0, seed=3)
    warm = records[:1000] + [{**r, "id": f"w{i:07d}"} for i, r in enumerate(corpus)]
    CognitionFrame(warm).redact().collect()
    for r in warm:
        redact_text(r["text"])
    texts = [r["text"] for r in records]
    result = rounds(repeats, lambda: CognitionFrame(records).redact().collect(), texts)
    return {"rows": len(records), "mb": mb, "corpus_share": corpus_share, **result}


def lines_mode(mb: float, repeats: int) -> dict[str, Any]:
    """``redact_frame`` over ``mb`` MB of lines in the item schema against each line alone."""
    lines = synthetic_lines(mb)
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
    size = float(df.get_column("text").str.len_bytes().sum()) / 1e6
    print(f"lines: {n:,} lines, {size:.1f} MB", flush=True)
    redact_frame(df.head(1000))  # warm up: regex compilation, thread pool
    for line in lines[:1000]:
        redact_text(line)
    result = rounds(repeats, lambda: redact_frame(df), lines)
    result["vectorised_mb_per_s"] = size / result["vectorised_median_s"]
    result["row_by_row_mb_per_s"] = size / result["row_by_row_median_s"]
    return {"lines": n, "mb": size, **result}


def markdown(result: dict[str, Any]) -> str:
    """A Markdown section with both modes' figures."""
    rows = []
    for mode, label in (("records", "records, whole call"), ("lines", "lines, redact_frame")):
        r = result.get(mode)
        if r is None:
            continue
        size = f"{r.get('rows', r.get('lines')):,} ({r['mb']:.1f} MB)"
        rows.append(
            f"| {label} | {size} | {r['vectorised_min_s']:.2f} / {r['vectorised_median_s']:.2f} "
            f"| {r['row_by_row_min_s']:.2f} / {r['row_by_row_median_s']:.2f} "
            f"| {r['speedup_min']:.1f}x / {r['speedup_median']:.1f}x "
            f"| {r['speedup_cpu_min']:.1f}x / {r['speedup_cpu_median']:.1f}x "
            f"| {r['same_output']} |"
        )
    return (
        f"## Redaction: vectorised against row by row ({result['recognisers']} recognisers, "
        f"{result['repeats']} rounds)\n\n"
        "| mode | texts | vectorised s (min / median) | row by row s (min / median) "
        "| speed-up (min / median) | CPU-time speed-up (min / median) | same output |\n"
        "|---|---|---|---|---|---|---|\n"
        + "\n".join(rows)
        + "\n\nThe records mode times the user's whole call, "
        "`CognitionFrame(records).redact().collect()`, conversion from their dicts included; "
        "the row-by-row baseline is `redact_text` on each text (Python `re`, same recognisers "
        "and validators). A speed-up divides the baseline's minimum (median) by the vectorised "
        "path's; CPU time counts every thread of the process, the steadier figure on a shared "
        "machine.\n"
    )


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100_000, help="records (default 100000)")
    parser.add_argument("--corpus-share", type=float, default=0.02)
    parser.add_argument("--mb", type=float, default=100.0, help="MB of lines (default 100)")
    parser.add_argument("--modes", default="records,lines", help="records, lines or both")
    parser.add_argument("--repeats", type=int, default=3, help="timed rounds per mode")
    parser.add_argument("--out", type=Path, default=RESULT)
    args = parser.parse_args(argv)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = sorted(set(modes) - {"records", "lines"})
    if unknown or not modes or args.repeats < 1:
        parser.error(f"--modes takes records and/or lines (got {args.modes}); --repeats >= 1")

    result: dict[str, Any] = {"recognisers": len(RECOGNISERS), "types": list(TYPES)}
    result["repeats"] = args.repeats
    if "records" in modes:
        result["records"] = records_mode(args.rows, args.corpus_share, args.repeats)
    if "lines" in modes:
        result["lines"] = lines_mode(args.mb, args.repeats)
    result["machine"] = {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "polars": pl.__version__,
    }
    print(json.dumps(result, indent=2))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    if not all(result[m]["same_output"] for m in modes):
        raise SystemExit("the vectorised path and the row-by-row reference disagree")
    return result


if __name__ == "__main__":
    main()
