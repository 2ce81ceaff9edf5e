"""Reading a manifest back: its format, header and entries, and their agreement.

Every reader of a stored manifest (:meth:`PackManifest.from_json
<cognoxium.packing._model.PackManifest.from_json>`, and
:mod:`cognoxium.packing.manifests` for JSON, JSONL and Parquet) checks a
manifest here, so a manifest is refused for the same faults whatever its form:

- its ``format`` is missing or another than :data:`MANIFEST_FORMAT`
  (:func:`header_model`);
- a header field is missing, unknown or invalid (:func:`header_model`), or
  an entry is (:func:`entries_frame_of`);
- its entries disagree with its header's ``totals`` (items, included,
  excluded, counted, not counted, by reason), or an entry's ``decision``
  is not that of its ``reason`` (:func:`check_entries`, over the
  :class:`Tally` of its entries from :func:`tally_groups`).

Every error is a :class:`~cognoxium.exceptions.RecordError` that names the
file, the 1-based line (or, given by the caller, the 0-based row) and the field.
"""

from __future__ import annotations

import json
import types
import typing
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import polars as pl
from pydantic import ValidationError

from cognoxium.exceptions import RecordError
from cognoxium.packing._model import (
    ENTRY_SCHEMA,
    MANIFEST_FORMAT,
    Decision,
    ManifestEntry,
    ManifestTotals,
    PackManifest,
    Reason,
)

__all__ = [
    "INCLUDED_REASONS",
    "Tally",
    "check_entries",
    "entries_frame_of",
    "header_model",
    "invalid_json",
    "parse_manifest",
    "split_manifest",
    "tallies",
    "tally_groups",
]

INCLUDED_REASONS = frozenset({Reason.REQUIRED.value, Reason.SELECTED.value})
"""The reasons of included entries; every other reason is that of an excluded entry."""

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


NOT_NULL = tuple(
    name for name, info in ManifestEntry.model_fields.items() if not _nullable(info.annotation)
)
"""The entry columns that never hold null."""


def invalid_json(exc: json.JSONDecodeError, source: str | None, line: int | None) -> RecordError:
    """The error of a line (or text) that is not JSON, at its column."""
    where = f"column {exc.colno}" if line is not None else f"line {exc.lineno} column {exc.colno}"
    return RecordError(f"invalid JSON at {where}: {exc.msg}", source=source, line=line)


def _validation_error(exc: ValidationError, source: str | None, line: int | None) -> RecordError:
    first = exc.errors()[0]
    name = ".".join(str(p) for p in first["loc"]) or None
    return RecordError(first["msg"], source=source, line=line, field=name)


def header_model(header: dict[str, Any], source: str | None, line: int | None) -> PackManifest:
    """A manifest's header (without its entries) as a validated model, its format first.

    Raises
    ------
    RecordError
        If ``format`` is missing or not :data:`MANIFEST_FORMAT` (params
        ``format``, the one found, and ``expected``), or another field is
        missing, unknown or invalid.
    """
    found = header.get("format")
    if found != MANIFEST_FORMAT:
        what = "missing" if found is None else f"manifest format {found!r}"
        raise RecordError(
            f"{what}: this version of Cognoxium reads {MANIFEST_FORMAT!r}",
            source=source,
            line=line,
            field="format",
            params={"format": found, "expected": MANIFEST_FORMAT},
        )
    try:
        return PackManifest.model_validate(header)
    except ValidationError as exc:
        raise _validation_error(exc, source, line) from None


def _bad_entry(
    entries: list[Any], source: str | None, line: int | None, start: int = 0
) -> RecordError:
    """Find the first invalid entry from ``start`` on with pydantic, to name it and its field."""
    for index, entry in enumerate(entries[start:], start=start):
        try:
            ManifestEntry.model_validate(entry)
        except ValidationError as exc:
            first = exc.errors()[0]
            name = ".".join(str(p) for p in first["loc"])
            return RecordError(
                first["msg"], source=source, line=line, field=f"entries[{index}].{name}"
            )
    return RecordError("invalid entries", source=source, line=line, field="entries")


def _entry_list(entries: Any, source: str | None, line: int | None) -> list[dict[str, Any]]:
    """Check the shape of a manifest's entries: a list of objects with the entry fields."""
    if not isinstance(entries, list):
        raise RecordError(
            f"must be a list of entries, got {type(entries).__name__}",
            source=source,
            line=line,
            field="entries",
        )
    if any(not isinstance(e, dict) or e.keys() != _FIELDS for e in entries):
        raise _bad_entry(entries, source, line)
    return entries


def entries_frame_of(
    entries: list[dict[str, Any]], source: str | None, line: int | None
) -> pl.DataFrame:
    """Entries of the checked shape as a frame of the entry schema, checked column-wise."""
    try:
        raw = pl.DataFrame(entries, schema=_STRINGS)
    except (pl.exceptions.PolarsError, TypeError, ValueError):
        raise _bad_entry(entries, source, line) from None
    bad = pl.lit(False)
    for name in NOT_NULL:
        bad = bad | pl.col(name).is_null()
    for name, dtype in ENTRY_SCHEMA.items():
        if isinstance(dtype, pl.Enum):
            bad = bad | ~pl.col(name).is_in(dtype.categories.to_list()).fill_null(True)
    flagged = raw.select(bad.arg_max().alias("at"), bad.any().alias("any")).row(0)
    if flagged[1]:
        raise _bad_entry(entries, source, line, flagged[0])
    return raw.cast(dict(ENTRY_SCHEMA.items()))


def split_manifest(
    data: Any, source: str | None, line: int | None
) -> tuple[PackManifest, list[dict[str, Any]]]:
    """A manifest's validated header, and its entries of the checked shape."""
    if not isinstance(data, dict):
        raise RecordError(
            f"a manifest must be a JSON object, got {type(data).__name__}", source=source, line=line
        )
    header = dict(data)
    if "entries" not in header:
        raise RecordError("missing", source=source, line=line, field="entries")
    entries = _entry_list(header.pop("entries"), source, line)
    return header_model(header, source, line), entries


def parse_manifest(data: Any, source: str | None, line: int | None) -> PackManifest:
    """A whole manifest (a decoded JSON value) validated, its entries checked against its header."""
    manifest, entries = split_manifest(data, source, line)
    frame = entries_frame_of(entries, source, line)
    found = tallies(tally_groups(frame.lazy(), ()).collect(), ())
    check_entries(manifest.totals, found.get((), Tally()), source, line, subject="the manifest")
    manifest._entries = frame
    return manifest


@dataclass(slots=True)
class Tally:
    """What a manifest's entries count, to compare with its header's ``totals``.

    ``mismatched`` is the first ``(decision, reason)`` met whose decision is
    not that of the reason, or ``None``.
    """

    items: int = 0
    included: int = 0
    counted: int = 0
    by_reason: dict[str, int] = field(default_factory=dict)
    mismatched: tuple[str, str] | None = None


def tally_groups(entries: pl.LazyFrame, keys: Sequence[str]) -> pl.LazyFrame:
    """Entries per ``keys`` (a manifest's), decision, reason and counted tokens.

    A few rows per manifest, whatever its number of entries; read by :func:`tallies`.
    """
    return entries.group_by(
        *keys,
        pl.col("decision").cast(pl.String),
        pl.col("reason").cast(pl.String),
        pl.col("tokens").is_not_null().alias("counted"),
    ).agg(pl.len().alias("entries"))


def tallies(groups: pl.DataFrame, keys: Sequence[str]) -> dict[tuple[Any, ...], Tally]:
    """The :class:`Tally` of each manifest of :func:`tally_groups`, by its ``keys``' values."""
    found: dict[tuple[Any, ...], Tally] = {}
    width = len(keys)
    for row in groups.select(*keys, "decision", "reason", "counted", "entries").iter_rows():
        decision, reason, counted, n = row[width:]
        tally = found.setdefault(row[:width], Tally())
        tally.items += n
        tally.included += n if decision == Decision.INCLUDED.value else 0
        tally.counted += n if counted else 0
        tally.by_reason[reason] = tally.by_reason.get(reason, 0) + n
        if tally.mismatched is None and (decision == Decision.INCLUDED.value) != (
            reason in INCLUDED_REASONS
        ):
            tally.mismatched = (decision, reason)
    return found


_COUNTED = {
    "items": "entries",
    "included": "included entries",
    "excluded": "excluded entries",
    "counted": "entries whose tokens were counted",
    "not_counted": "entries whose tokens were not counted",
}


def check_entries(
    totals: ManifestTotals,
    tally: Tally,
    source: str | None,
    line: int | None,
    *,
    subject: str,
    where: str = "",
) -> None:
    """The entries' :class:`Tally` matches the header's ``totals``; each decision its reason.

    Parameters
    ----------
    totals
        The header's totals.
    tally
        What the manifest's entries count.
    source, line
        The file and 1-based line of the header.
    subject
        What the message names: ``the manifest`` or ``request 'r1'``.
    where
        Where the entries are, if not with the header (`` in part-00001.parquet``).

    Raises
    ------
    RecordError
        Naming ``source``, ``line`` and the field (``totals.items``, ...,
        ``entries.decision``), with params ``found`` and ``recorded`` for a count.
    """
    if tally.mismatched is not None:
        decision, reason = tally.mismatched
        expected = "included" if reason in INCLUDED_REASONS else "excluded"
        raise RecordError(
            f"{subject} has an entry{where} with decision {decision!r} and reason {reason!r}, "
            f"a reason of {expected} entries",
            source=source,
            line=line,
            field="entries.decision",
            params={"decision": decision, "reason": reason},
        )
    counts = {
        "items": tally.items,
        "included": tally.included,
        "excluded": tally.items - tally.included,
        "counted": tally.counted,
        "not_counted": tally.items - tally.counted,
    }
    for name, found in counts.items():
        recorded = getattr(totals, name)
        if found != recorded:
            raise RecordError(
                f"{subject} has {found} {_COUNTED[name]}{where}, its header counts {recorded}",
                source=source,
                line=line,
                field=f"totals.{name}",
                params={"found": found, "recorded": recorded},
            )
    by_reason = dict(sorted(tally.by_reason.items()))
    if by_reason != dict(sorted(totals.by_reason.items())):
        raise RecordError(
            f"{subject} has entries by reason {by_reason}{where}, "
            f"its header counts {totals.by_reason}",
            source=source,
            line=line,
            field="totals.by_reason",
            params={"found": by_reason, "recorded": totals.by_reason},
        )
