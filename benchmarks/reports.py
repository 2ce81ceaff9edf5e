"""Writing a benchmark's results: the figures as JSON, their table as Markdown, side by side."""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["megabyte_args", "run_figures", "write_report"]


def write_report(out: Path, result: dict[str, Any], text: str, *, echo: bool = False) -> None:
    """Write ``result`` to ``out`` (JSON) and ``text`` next to it (``out`` with ``.md``).

    With ``echo``, the figures (but their ``runs``) and the text are printed first.
    """
    if echo:
        print(json.dumps({k: v for k, v in result.items() if k != "runs"}, indent=2), flush=True)
        print(text, flush=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    out.with_suffix(".md").write_text(text, encoding="utf-8")


def megabyte_args(argv: Sequence[str] | None, doc: str | None, out: Path) -> argparse.Namespace:
    """The arguments of a benchmark of one huge input: ``--mb``, ``--repeats`` and ``--out``.

    Exits with a usage error unless ``--repeats`` is at least 1 and ``--mb`` positive.
    """
    parser = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    parser.add_argument("--mb", type=float, default=50.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=out)
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.mb <= 0:
        parser.error("need --repeats >= 1 and --mb > 0")
    return args


def run_figures(runs: dict[str, list[dict[str, float]]]) -> dict[str, dict[str, Any]]:
    """Each run's median seconds and CPU seconds, its peak MB, and its rounds (``runs``)."""
    return {
        name: {
            "median_s": round(statistics.median(r["wall_s"] for r in rows), 3),
            "cpu_median_s": round(statistics.median(r["cpu_s"] for r in rows), 3),
            "peak_mb": round(max(r["peak_mb"] for r in rows), 1),
            "runs": rows,
        }
        for name, rows in runs.items()
    }
