"""Recall and precision of the built-in recognisers on the seeded PII corpus, as Markdown tables.

Generates the corpus of :mod:`cognoxium.testing.pii_corpus` (the generator
``tests/governance/test_pii_corpus.py`` asserts on), scores
:func:`cognoxium.governance.redaction.find_spans` span by span, per type, per
phone region and per written form (a JSON string value under a key that
gives its context, ``{"ssn": "078051123"}``, through
:func:`~cognoxium.governance.redaction.redact_json`), measures how much of
each kind of hard negative :func:`~cognoxium.governance.redaction.redact_text`
keeps, and writes the tables with the run's settings to
``benchmarks/results/pii.md``.

Usage: ``python benchmarks/pii_corpus.py [--seed 12] [--per-type 100] [--out benchmarks/results/pii.md]``
"""  # noqa: E501

from __future__ import annotations

import argparse
import re
import time
from pathlib import Path

from cognoxium.governance.redaction import PHONE_REGIONS, find_spans, redact_json, redact_text
from cognoxium.testing.pii_corpus import format_table, generate, score, score_near_misses


def spans(text: str) -> list[tuple[int, int, str]]:
    """The spans ``find_spans`` finds in a text."""
    return [(s.start, s.end, s.type) for s in find_spans(text)]


def member_spans(key: str, text: str) -> list[tuple[int, int, str]]:
    """The spans of a JSON string value under ``key``: all of it when ``redact_json`` takes it whole."""  # noqa: E501
    out = redact_json({key: text})[0][key]
    if re.fullmatch(r"\[[A-Z_]+\]", out):
        return [(0, len(text), out[1:-1])]
    return spans(text)


def near_miss_table(rows: list[dict[str, object]]) -> str:
    """The rows of ``score_near_misses`` as a Markdown table."""
    lines = ["| near miss | texts | kept whole | characters kept |", "|---|---:|---:|---:|"]
    for r in rows:
        share = float(r["share_kept"])  # type: ignore[arg-type]
        lines.append(f"| {r['kind']} | {r['texts']} | {r['kept']} | {share:.3f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=12)
    parser.add_argument("--per-type", type=int, default=100)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/pii.md"))
    args = parser.parse_args()

    docs = generate(seed=args.seed, per_type=args.per_type)
    start = time.perf_counter()
    rows = score(docs, spans, member_spans)
    seconds = time.perf_counter() - start
    kept = near_miss_table(score_near_misses(docs, lambda text: redact_text(text)[0]))
    fields = sum(len(d.fields) for d in docs)
    table = format_table(rows)
    text = (
        "# PII recall and precision\n\n"
        f"Corpus: `generate(seed={args.seed}, per_type={args.per_type})` from "
        "`cognoxium.testing.pii_corpus`: "
        f"{len(docs)} documents ({sum(d.kind == 'json' for d in docs)} JSON), {fields} strings, "
        f"phone regions {', '.join(PHONE_REGIONS)} and international. "
        "Span level: a found span is correct when a planted span has the same start, end and "
        "type; the phone-region and variant rows count the spans found in strings that hold "
        f"a value of that region or variant. Scored with `find_spans` in {seconds:.1f} s.\n\n"
        f"Command: `python benchmarks/pii_corpus.py --seed {args.seed} "
        f"--per-type {args.per_type}`\n\n" + table + "\n## Near misses kept\n\n"
        "Each hard negative through `redact_text`: texts returned whole, and the share of "
        "their characters kept in place.\n\n" + kept
    )
    print(table)
    print(kept)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)


if __name__ == "__main__":
    main()
