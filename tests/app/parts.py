"""Reading a batch's output tables in tests: the parts of a table, in number order."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cognoxium.packing.manifests import part_files

SUFFIX = {"packs": ".jsonl", "manifest_headers": ".jsonl"}


def joined(folder: Path, table: str, suffix: str | None = None) -> bytes:
    """The bytes of a table's parts, concatenated in number order."""
    ending = suffix if suffix is not None else SUFFIX.get(table, ".jsonl")
    return b"".join(part.read_bytes() for part in part_files(folder / table, ending))


def records(folder: Path, table: str = "packs") -> list[dict[str, Any]]:
    """The JSON lines of a table (``packs``, ``manifest_headers`` or JSONL ``manifests``)."""
    return [json.loads(line) for line in joined(folder, table).decode("utf-8").splitlines()]


def layout(folder: Path) -> list[str]:
    """Every file under ``folder``, as paths relative to it, sorted."""
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


def same_files(first: Path, second: Path) -> dict[str, bool]:
    """Per file of ``first``'s layout, whether ``second`` holds the same bytes (and layout)."""
    names = layout(first)
    if layout(second) != names:
        return {"layout": False}
    return {name: (first / name).read_bytes() == (second / name).read_bytes() for name in names}


def same_tables(first: Path, second: Path) -> bool:
    """Whether two outputs hold the same tables, however they are cut into parts.

    The text tables' parts concatenate to the same bytes; the Parquet entries
    read as one table are equal.
    """
    from cognoxium.packing.manifests import scan_manifests

    if (first / "manifest_headers").is_dir() != (second / "manifest_headers").is_dir():
        return False
    text = ["packs", "manifest_headers"]
    if not (first / "manifest_headers").is_dir():
        text = ["packs", "manifests"]
    if any(joined(first, table) != joined(second, table) for table in text):
        return False
    return scan_manifests(first).collect().equals(scan_manifests(second).collect())
