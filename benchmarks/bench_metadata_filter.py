"""One scope of a Parquet store by a SQL ``metadata.<key>`` predicate: the user's whole call.

Builds, in a temporary directory, one Parquet file of items (written by
``cognoxium.items.write_parquet``) in two shapes, each at ``--sizes``
(default 100,000 and 1,000,000 items, ten times apart):

chats
    short chat turns, 500 per conversation, metadata ``{"conversation": id}``;
documents
    longer documents, 200 per tenant, metadata of six keys, one nested
    (``{"tenant", "topic", "lang", "year", "acl": {"group", "level"}, "page"}``).

For each, timed alternately for ``--repeats`` rounds (best of each), one
scope packed under 1,024 tokens:

sql
    ``CognitionFrame.scan_parquet(path).filter("metadata.<key> = '<id>'").pack(...)``,
    the form the docs show;
expression
    the same with the Polars expression
    ``pl.col("metadata").str.json_path_match("$.<key>") == id``;
floor
    ``pl.scan_parquet(path).filter(<that expression>).collect()``: reading
    the scope's rows with Polars, the least any pack of them needs.

Reported: seconds and the ratios sql / floor and sql / expression, per
shape and size. Timings are wall-clock seconds on a shared machine:
compare the ratios within one run.

Usage: ``python benchmarks/bench_metadata_filter.py [--sizes 100000,1000000]
[--repeats 3] [--out benchmarks/results/metadata_filter.json]``
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import polars as pl

from cognoxium import CognitionFrame
from cognoxium.items.io import write_parquet
from cognoxium.items.records import records_to_frame

RESULTS = Path(__file__).resolve().parent / "results"
AS_OF = datetime(2026, 1, 1, tzinfo=UTC)
WORDS = "refund order delivery screen battery router password invoice travel login".split()


def chats(n: int) -> tuple[pl.DataFrame, str, str]:
    """``n`` chat turns, 500 per conversation; the key and the scope to pack."""
    rows = [
        {
            "id": f"t{i}",
            "role": ("user", "assistant")[i % 2],
            "text": f"turn {i}: " + " ".join(WORDS[(i + k) % 10] for k in range(12)),
            "created_at": "2025-06-01T00:00:00Z",
            "metadata": {"conversation": f"c{i // 500:05d}"},
        }
        for i in range(n)
    ]
    return records_to_frame(rows), "conversation", f"c{n // 1000:05d}"


def documents(n: int) -> tuple[pl.DataFrame, str, str]:
    """``n`` documents, 200 per tenant, six metadata keys; the key and the scope to pack."""
    rows = [
        {
            "id": f"d{i}",
            "role": "document",
            "text": " ".join(WORDS[(i * 7 + k) % 10] for k in range(120)),
            "metadata": {
                "tenant": f"t{i // 200:05d}",
                "topic": WORDS[i % 10],
                "lang": ("en", "fr", "de")[i % 3],
                "year": 2020 + i % 6,
                "acl": {"group": f"g{i % 17}", "level": i % 4},
                "page": i % 50,
            },
        }
        for i in range(n)
    ]
    return records_to_frame(rows), "tenant", f"t{n // 400:05d}"


def timed(call: Callable[[], object], times: list[float]) -> None:
    """Append the seconds of one call to ``times``."""
    started = time.perf_counter()
    call()
    times.append(time.perf_counter() - started)


def measure(path: Path, key: str, scope: str, repeats: int) -> dict[str, Any]:
    """Best seconds of the three calls over one file, run in turns."""
    matched = pl.col("metadata").str.json_path_match(f"$.{key}") == scope
    calls: dict[str, Callable[[], object]] = {
        "sql": lambda: (
            CognitionFrame.scan_parquet(path)
            .filter(f"metadata.{key} = '{scope}'")
            .pack(1024, as_of=AS_OF)
        ),
        "expression": lambda: (
            CognitionFrame.scan_parquet(path).filter(matched).pack(1024, as_of=AS_OF)
        ),
        "floor": lambda: pl.scan_parquet(path).filter(matched).collect(),
    }
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(repeats):
        for name, call in calls.items():
            timed(call, times[name])
    seconds = {name: min(values) for name, values in times.items()}
    return {
        "seconds": seconds,
        "sql_over_floor": seconds["sql"] / seconds["floor"],
        "sql_over_expression": seconds["sql"] / seconds["expression"],
    }


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run every shape at every size and write the results."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100000,1000000")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS / "metadata_filter.json")
    args = parser.parse_args(argv)
    sizes = [int(size) for size in args.sizes.split(",")]
    shapes = {"chats": chats, "documents": documents}
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as work:
        for shape, make in shapes.items():
            for size in sizes:
                frame, key, scope = make(size)
                path = Path(work) / f"{shape}-{size}.parquet"
                write_parquet(frame, path)
                del frame
                result = measure(path, key, scope, args.repeats)
                rows.append({"shape": shape, "items": size, **result})
                print(json.dumps(rows[-1]), flush=True)
    report = {
        "command": "python benchmarks/bench_metadata_filter.py " + " ".join(argv or sys.argv[1:]),
        "machine": f"{platform.machine()} {platform.python_version()}",
        "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    lines = [
        "# One scope of a Parquet store by a SQL `metadata.<key>` predicate",
        "",
        f"Command: `{report['command'].strip()}` (best of {args.repeats}, one pack of "
        "1,024 tokens).",
        "",
        "| shape | items | sql s | expression s | floor s | sql / floor | sql / expression |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        s = row["seconds"]
        lines.append(
            f"| {row['shape']} | {row['items']:,} | {s['sql']:.2f} | {s['expression']:.2f} "
            f"| {s['floor']:.2f} | {row['sql_over_floor']:.1f}x "
            f"| {row['sql_over_expression']:.2f}x |"
        )
    lines += ["", f"On {report['machine']}."]
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return report


if __name__ == "__main__":
    main()
