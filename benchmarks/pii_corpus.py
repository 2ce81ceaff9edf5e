"""Recall and precision of the built-in recognisers on the seeded PII corpus, as a Markdown table.

Generates the corpus of :mod:`cognoxium.testing.pii_corpus` (the generator
``tests/governance/test_pii_corpus.py`` asserts on), scores
:func:`cognoxium.governance.redaction.find_spans` span by span, per type and
per phone region, and writes the table with the run's settings to
``benchmarks/results/pii.md``.

Usage: ``python benchmarks/pii_corpus.py [--seed 12] [--per-type 100] [--out benchmarks/results/pii.md]``
"""  # noqa: E501

from __future__ import annotations

import argparse
import time
from pathlib import Path

from cognoxium.governance.redaction import PHONE_REGIONS, find_spans
from cognoxium.testing.pii_corpus import format_table, generate, score


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=12)
    parser.add_argument("--per-type", type=int, default=100)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/pii.md"))
    args = parser.parse_args()

    docs = generate(seed=args.seed, per_type=args.per_type)
    start = time.perf_counter()
    rows = score(docs, lambda text: [(s.start, s.end, s.type) for s in find_spans(text)])
    seconds = time.perf_counter() - start
    fields = sum(len(d.fields) for d in docs)
    table = format_table(rows)
    text = (
        "# PII recall and precision\n\n"
        f"Corpus: `generate(seed={args.seed}, per_type={args.per_type})` from "
        "`cognoxium.testing.pii_corpus`: "
        f"{len(docs)} documents ({sum(d.kind == 'json' for d in docs)} JSON), {fields} strings, "
        f"phone regions {', '.join(PHONE_REGIONS)} and international. "
        "Span level: a found span is correct when a planted span has the same start, end and "
        "type; the phone-region rows count the spans found in strings that hold a phone of "
        f"that region. Scored with `find_spans` in {seconds:.1f} s.\n\n"
        f"Command: `python benchmarks/pii_corpus.py --seed {args.seed} "
        f"--per-type {args.per_type}`\n\n" + table
    )
    print(table)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)


if __name__ == "__main__":
    main()
