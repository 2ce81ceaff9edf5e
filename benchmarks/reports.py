"""Writing a benchmark's results: the figures as JSON, their table as Markdown, side by side."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["write_report"]


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
