r"""Reading pack manifests back, and summarising many of them.

``cognoxium pack`` and ``cognoxium locomo`` write ``manifests.jsonl``: one
canonical manifest (:meth:`PackManifest.to_json
<cognoxium.packing.packer.PackManifest.to_json>`) per line. :func:`read_manifests`
reads such a file, or a single manifest saved as JSON, and
:func:`summarize_manifests` counts what ``cognoxium inspect`` shows: budget
use, decisions, reasons, and the tokens spent per role, tier and source.

Examples
--------
>>> import tempfile, pathlib
>>> from datetime import UTC, datetime
>>> from cognoxium import CognitionFrame
>>> cf = CognitionFrame([{"id": "a", "role": "user", "text": "hi"},
...                      {"id": "b", "role": "document", "text": "word " * 90}])
>>> path = pathlib.Path(tempfile.mkdtemp()) / "manifests.jsonl"
>>> lines = [cf.pack(b, as_of=datetime(2030, 1, 1, tzinfo=UTC), label=f"r{b}").manifest.to_json()
...          for b in (40, 200)]
>>> _ = path.write_text("\n".join(lines) + "\n")
>>> summary = summarize_manifests(read_manifests(path))
>>> summary["budget"]["used_tokens"], summary["budget"]["budget_tokens"]
(111, 240)
>>> summary["reasons"]
{'over_budget': 1, 'selected': 3}
>>> summary["by_role"]["document"]
{'included': 1, 'included_tokens': 95, 'items': 2}
"""

from __future__ import annotations

import json
import os
import types
import typing
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import polars as pl
from pydantic import ValidationError

from cognoxium.exceptions import RecordError
from cognoxium.packing.packer import ENTRY_SCHEMA, ManifestEntry, PackManifest

__all__ = ["NO_SOURCE", "read_manifests", "summarize_manifests"]

NO_SOURCE = "(none)"
"""The ``by_source`` key of items that have no source."""

_FIELDS = frozenset(ManifestEntry.model_fields)
_STRINGS = {
    name: (pl.String() if isinstance(dtype, pl.Enum) else dtype)
    for name, dtype in ENTRY_SCHEMA.items()
}


def _nullable(annotation: Any) -> bool:
    origin = typing.get_origin(annotation)
    return (origin is types.UnionType or origin is typing.Union) and type(None) in typing.get_args(
        annotation
    )


_NOT_NULL = tuple(
    name for name, info in ManifestEntry.model_fields.items() if not _nullable(info.annotation)
)


def _bad_entry(entries: list[Any], source: str, line: int | None, start: int = 0) -> RecordError:
    """Find the first invalid entry from ``start`` on with pydantic, to name it and its field."""
    for index, entry in enumerate(entries[start:], start=start):
        try:
            ManifestEntry.model_validate(entry)
        except ValidationError as exc:
            first = exc.errors()[0]
            field = ".".join(str(p) for p in first["loc"])
            return RecordError(
                first["msg"], source=source, line=line, field=f"entries[{index}].{field}"
            )
    return RecordError("invalid entries", source=source, line=line, field="entries")


def _entries(entries: Any, source: str, line: int | None) -> pl.DataFrame:
    """Entries as a frame of the manifest entry schema, checked column-wise."""
    if not isinstance(entries, list):
        raise RecordError(
            f"must be a list of entries, got {type(entries).__name__}",
            source=source,
            line=line,
            field="entries",
        )
    if any(not isinstance(e, dict) or e.keys() != _FIELDS for e in entries):
        raise _bad_entry(entries, source, line)
    try:
        raw = pl.DataFrame(entries, schema=_STRINGS)
    except (pl.exceptions.PolarsError, TypeError, ValueError):
        raise _bad_entry(entries, source, line) from None
    bad = pl.lit(False)
    for name in _NOT_NULL:
        bad = bad | pl.col(name).is_null()
    for name, dtype in ENTRY_SCHEMA.items():
        if isinstance(dtype, pl.Enum):
            bad = bad | ~pl.col(name).is_in(dtype.categories.to_list()).fill_null(True)
    flagged = raw.select(bad.arg_max().alias("at"), bad.any().alias("any")).row(0)
    if flagged[1]:
        raise _bad_entry(entries, source, line, flagged[0])
    return raw.cast(dict(ENTRY_SCHEMA.items()))


def _manifest(data: Any, source: str, line: int | None) -> PackManifest:
    if not isinstance(data, dict):
        raise RecordError(
            f"a manifest must be a JSON object, got {type(data).__name__}", source=source, line=line
        )
    header = dict(data)
    if "entries" not in header:
        raise RecordError("missing", source=source, line=line, field="entries")
    entries = _entries(header.pop("entries"), source, line)
    try:
        manifest = PackManifest.model_validate(header)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or None
        raise RecordError(first["msg"], source=source, line=line, field=field) from None
    manifest._entries = entries
    return manifest


def _lines(text: str) -> Iterator[tuple[int, str]]:
    # Split on newlines only: JSON text may hold U+2028 and other line breaks.
    for number, line in enumerate(text.split("\n"), start=1):
        if line.strip():
            yield number, line


def read_manifests(path: str | os.PathLike[str]) -> list[PackManifest]:
    r"""Read pack manifests: a JSONL file (one per line) or one manifest as JSON.

    A file whose whole text is one JSON object is read as one manifest; a
    JSON list as a list of manifests; anything else as JSONL (blank lines
    skipped). Reading is all or nothing.

    Parameters
    ----------
    path
        The file, UTF-8, as written by ``cognoxium pack`` or ``cognoxium
        locomo`` (``manifests.jsonl``) or by
        :meth:`PackManifest.to_json <cognoxium.packing.packer.PackManifest.to_json>`.

    Returns
    -------
    list of PackManifest
        In file order.

    Raises
    ------
    RecordError
        At the first bad manifest: not UTF-8, invalid JSON, not an object,
        or a missing, unknown or invalid field. The error names the file,
        the 1-based line (for JSONL; the 0-based row for a JSON list) and
        the field, for example ``entries[3].reason``.
    OSError
        If the file cannot be read.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "manifests.jsonl"
    >>> _ = path.write_text('{"budget": 10}\n')
    >>> read_manifests(path)
    Traceback (most recent call last):
    ...
    cognoxium.exceptions.RecordError: ...manifests.jsonl:1: field entries: missing
    """
    source = str(path)
    raw = Path(path).read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad_line = raw[: exc.start].count(b"\n") + 1
        raise RecordError(f"not UTF-8 text ({exc.reason})", source=source, line=bad_line) from None
    try:
        whole = json.loads(text)
    except json.JSONDecodeError:
        whole = None
    if isinstance(whole, dict):
        # One manifest: on one line (a JSONL file of one line), or pretty-printed.
        lines = list(_lines(text))
        return [_manifest(whole, source, lines[0][0] if len(lines) == 1 else None)]
    if isinstance(whole, list):
        manifests = []
        for row, data in enumerate(whole):
            try:
                manifests.append(_manifest(data, source, None))
            except RecordError as exc:
                raise RecordError(exc.message, source=source, row=row, field=exc.field) from None
        return manifests
    manifests = []
    for number, content in _lines(text):
        try:
            data = json.loads(content)
        except json.JSONDecodeError as exc:
            raise RecordError(
                f"invalid JSON: {exc.msg} at column {exc.colno}", source=source, line=number
            ) from None
        manifests.append(_manifest(data, source, number))
    return manifests


def _groups(entries: pl.DataFrame, key: str) -> dict[str, dict[str, int]]:
    """Items, included items and included tokens per value of ``key``, sorted by value."""
    included = pl.col("decision") == "included"
    rows = (
        entries.group_by(pl.col(key).cast(pl.String).fill_null(NO_SOURCE))
        .agg(
            pl.len().alias("items"),
            included.sum().alias("included"),
            pl.col("tokens").filter(included).sum().alias("included_tokens"),
        )
        .sort(key)
        .iter_rows(named=True)
    )
    return {
        row[key]: {
            "included": int(row["included"]),
            "included_tokens": int(row["included_tokens"]),
            "items": int(row["items"]),
        }
        for row in rows
    }


def summarize_manifests(
    manifests: Sequence[PackManifest], *, items: pl.DataFrame | None = None
) -> dict[str, Any]:
    """Count budget use, decisions, reasons and tokens over many manifests.

    Parameters
    ----------
    manifests
        The manifests, for example from :func:`read_manifests`.
    items
        The items the manifests were packed from (a frame with ``id`` and
        ``sources``, as :func:`cognoxium.items.io.read_items` reads them), to
        count tokens per source; without them ``by_source`` is ``None``
        (manifest entries do not carry sources).

    Returns
    -------
    dict
        JSON-ready, deterministic for the same input:

        ``manifests``
            Number of manifests.
        ``profiles``
            The token profiles named, sorted.
        ``budget``
            ``budget_tokens``, ``used_tokens``, ``remaining_tokens`` and
            ``pack_overhead_tokens`` (sums over manifests, in tokens),
            ``utilization`` (used over budget tokens; ``None`` for a zero
            total) and ``used_fraction`` ``{"min", "mean", "max"}`` of the
            manifests' used/budget (manifests with a zero budget left out;
            ``None`` when none is left).
        ``items``
            ``entries``, ``included``, ``excluded``, ``counted`` (entries
            whose tokens were counted) and ``not_counted``.
        ``decisions``, ``reasons``
            Entry counts per decision and per reason, sorted by name.
        ``by_role``, ``by_tier``, ``by_source``
            Per item role, retention tier and source uri (an item with
            several sources counts under each; :data:`NO_SOURCE` for none):
            ``{"items", "included", "included_tokens"}``.
        ``redactions``, ``policy_outcomes``
            Redactions per type and policy outcomes per action, summed.
        ``merges``
            Number of duplicate merges recorded.
        ``per_manifest``
            One ``{"label", "budget", "used_tokens", "remaining_tokens",
            "included", "excluded"}`` per manifest, in order.

    Raises
    ------
    RecordError
        If ``items`` lacks the ``id`` or ``sources`` column.
    """
    frames = [m.to_polars() for m in manifests]
    entries = pl.concat(frames, how="vertical") if frames else pl.DataFrame(schema=ENTRY_SCHEMA)
    counts = entries.select(
        pl.len().alias("entries"),
        (pl.col("decision") == "included").sum().alias("included"),
        (pl.col("decision") == "excluded").sum().alias("excluded"),
        pl.col("tokens").is_not_null().sum().alias("counted"),
        pl.col("tokens").is_null().sum().alias("not_counted"),
    ).row(0, named=True)
    by_source = None if items is None else _by_source(entries, items)
    redactions: dict[str, int] = {}
    outcomes: dict[str, int] = {}
    for manifest in manifests:
        for kind, n in manifest.totals.redactions.items():
            redactions[kind] = redactions.get(kind, 0) + n
        for outcome in manifest.policy_outcomes:
            outcomes[outcome.action] = outcomes.get(outcome.action, 0) + 1
    return {
        "manifests": len(manifests),
        "profiles": sorted({m.profile for m in manifests}),
        "budget": _budget(manifests),
        "items": {key: int(value) for key, value in counts.items()},
        "decisions": _value_counts(entries, "decision"),
        "reasons": _value_counts(entries, "reason"),
        "by_role": _groups(entries, "role"),
        "by_tier": _groups(entries, "tier"),
        "by_source": by_source,
        "redactions": dict(sorted(redactions.items())),
        "policy_outcomes": dict(sorted(outcomes.items())),
        "merges": sum(len(m.merges) for m in manifests),
        "per_manifest": [
            {
                "label": m.label,
                "budget": m.budget,
                "used_tokens": m.used_tokens,
                "remaining_tokens": m.remaining_tokens,
                "included": m.totals.included,
                "excluded": m.totals.excluded,
            }
            for m in manifests
        ],
    }


def _budget(manifests: Sequence[PackManifest]) -> dict[str, Any]:
    """Budget, used, remaining and overhead tokens summed, utilization and used fractions."""
    budgets = [m.budget for m in manifests]
    used = [m.used_tokens for m in manifests]
    fractions = [u / b for u, b in zip(used, budgets, strict=True) if b > 0]
    total_budget, total_used = sum(budgets), sum(used)
    return {
        "budget_tokens": total_budget,
        "used_tokens": total_used,
        "remaining_tokens": sum(m.remaining_tokens for m in manifests),
        "pack_overhead_tokens": sum(m.pack_overhead_tokens for m in manifests),
        "utilization": total_used / total_budget if total_budget else None,
        "used_fraction": {
            "min": min(fractions),
            "mean": sum(fractions) / len(fractions),
            "max": max(fractions),
        }
        if fractions
        else None,
    }


def _by_source(entries: pl.DataFrame, items: pl.DataFrame) -> dict[str, dict[str, int]]:
    """:func:`_groups` per source uri of the items (``id`` and ``sources`` columns)."""
    missing = [c for c in ("id", "sources") if c not in items.columns]
    if missing:
        raise RecordError(f"the items lack the columns {missing}", field=missing[0])
    uris = items.select(
        "id", pl.col("sources").list.eval(pl.element().struct.field("uri")).alias("source")
    ).explode("source")
    return _groups(entries.join(uris, on="id", how="left"), "source")


def _value_counts(entries: pl.DataFrame, column: str) -> dict[str, int]:
    """Entries per value of ``column``, sorted by value."""
    counts = entries.get_column(column).cast(pl.String).value_counts().iter_rows()
    return {str(k): int(v) for k, v in sorted(counts)}
