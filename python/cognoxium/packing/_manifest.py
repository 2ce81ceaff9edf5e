"""Phase 5 of :func:`~cognoxium.packing.packer.pack`: the manifest that explains every decision.

The manifest lists every input item with its decision, reason, tokens, tier,
rank and priority, plus totals, merges, redactions, policy outcomes, lineage
and the fingerprints (settings, token profile, plugins, input). The same
ordered input, settings, token profile and plugins give a byte-identical
:meth:`~cognoxium.packing._model.PackManifest.to_json`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa

from cognoxium._columns import (
    CHAT_ROLES,
    MERGE_CONFLICTS,
    MERGE_DROPPED,
    MERGE_RULES,
    MERGED_IDS,
    REDACTIONS,
    UNREDACTED,
)
from cognoxium.governance.lineage import lineage_edges
from cognoxium.items.model import canonical_json
from cognoxium.packing._checks import Request
from cognoxium.packing._exclusions import quarantine_expr
from cognoxium.packing._model import (
    ENTRY_SCHEMA,
    REASON_CODE,
    REASONS,
    TIERS,
    Decision,
    ManifestTotals,
    MergeRecord,
    PackManifest,
    Reason,
    TruncationRecord,
)
from cognoxium.packing._policies import PolicyReview, policy_outcomes
from cognoxium.packing._selection import Decisions

__all__ = ["build_manifest", "input_fingerprint", "manifest_entries"]

_FINGERPRINT_COLUMNS = (
    "id",
    "content_hash",
    "role",
    "retention",
    "priority",
    "rank",
    "trust",
    "sensitivity",
    "created_at",
    "valid_from",
    "expires_at",
    "group_id",
)


def build_manifest(
    df: pl.DataFrame,
    request: Request,
    review: PolicyReview,
    decisions: Decisions,
    label: str | None,
    packed: pl.DataFrame | None = None,
    truncations: Sequence[TruncationRecord] = (),
) -> PackManifest:
    """The manifest of one pack.

    Parameters
    ----------
    df
        The items, ``n`` rows in input order.
    request
        The checked budget (tokens), token profile and ``as_of``.
    review
        The policies and their verdicts.
    decisions
        Every row's decision.
    label
        Free text recorded in the manifest.
    packed
        The packed rows as sent (cut items with their kept text, new content
        hash and ``truncate`` lineage edge); ``df[decisions.selected]`` when
        ``None``.
    truncations
        The items cut to fit, in input order; their entries carry the new
        content hash.

    Returns
    -------
    PackManifest
        With one entry per row; ``used_tokens``, ``reserve_tokens`` and
        ``remaining_tokens`` (``budget - reserve - used``) in tokens.
    """
    entries = _with_cut_hashes(manifest_entries(df, review, decisions), truncations)
    used = decisions.used_tokens
    manifest = PackManifest(
        label=label,
        budget=request.budget,
        used_tokens=used,
        remaining_tokens=request.item_budget - used,
        pack_overhead_tokens=decisions.pack_overhead,
        as_of=request.as_of,
        profile=request.profile.name,
        fingerprints=_fingerprints(df, request, review),
        totals=_totals(entries, decisions),
        policies=[{"name": p.name, "fingerprint": p.fingerprint} for p in review.policies],
        policy_outcomes=policy_outcomes(df, review, decisions.reason, decisions.included),
        merges=_merges(df),
        lineage=lineage_edges(df[decisions.selected] if packed is None else packed).to_dicts(),
        merge_rules=MERGE_RULES if MERGED_IDS in df.columns else {},
        unredacted=_unredacted_totals(df),
        reserve_tokens=request.reserve,
        overflow=request.overflow,
        truncations=list(truncations),
        estimated=request.profile.estimated,
    )
    manifest._entries = entries
    return manifest


def _with_cut_hashes(
    entries: pl.DataFrame, truncations: Sequence[TruncationRecord]
) -> pl.DataFrame:
    """``entries`` whose cut items carry the content hash of the text they sent, and say so.

    A cut item's ``detail`` is ``truncated: kept K of N tokens (side S)``.
    """
    if not truncations:
        return entries
    new_hash = {t.id: t.content_hash for t in truncations}
    detail = {
        t.id: f"truncated: kept {t.kept_tokens} of {t.original_tokens} tokens (side {t.side})"
        for t in truncations
    }
    return entries.with_columns(
        pl.col("id").replace_strict(new_hash, default=pl.col("content_hash")).alias("content_hash"),
        pl.col("id").replace_strict(detail, default=pl.col("detail")).alias("detail"),
    )


def _unredacted_totals(df: pl.DataFrame) -> dict[str, int]:
    """Per field outside the payload, the items that went through redact with it unredacted.

    From the ``unredacted`` column that redact writes; empty when no redact
    ran or when every field that held data was redacted.
    """
    if UNREDACTED not in df.columns:
        return {}
    fields = (
        df.select(pl.col(UNREDACTED).drop_nulls().str.json_decode(pl.List(pl.String)))
        .to_series()
        .explode()
        .drop_nulls()
        .value_counts(sort=False)
    )
    return dict(sorted((str(k), int(v)) for k, v in fields.iter_rows()))


def manifest_entries(df: pl.DataFrame, review: PolicyReview, decisions: Decisions) -> pl.DataFrame:
    """The manifest's entries: one row per input item, in input order, of :data:`ENTRY_SCHEMA`.

    Parameters
    ----------
    df
        The items, ``n`` rows.
    review
        The policies' verdicts (the message of a ``policy`` exclusion is its detail).
    decisions
        Every row's decision.

    Returns
    -------
    polars.DataFrame
        ``n`` rows; ``tokens`` (in tokens) and ``pack_position`` null where unset.
    """
    n = df.height
    quarantine = quarantine_expr(df)
    message = review.column("message")
    reasons = pl.Series("reason", [r.value for r in REASONS], ENTRY_SCHEMA["reason"])
    decided = pl.Series([Decision.EXCLUDED.value, Decision.INCLUDED.value])
    detail = pl.coalesce(
        quarantine,
        pl.when(pl.lit(decisions.reason) == REASON_CODE[Reason.POLICY]).then(
            pl.lit(message) if message is not None else pl.lit(None, pl.String)
        ),
    )
    provenance = pl.when(quarantine.is_not_null()).then(
        pl.col("sources").list.eval(pl.element().struct.field("uri"))
    )
    return (
        pl.DataFrame(
            {
                "position": np.arange(n, dtype=np.int64),
                "id": df.get_column("id"),
                "content_hash": df.get_column("content_hash"),
                "role": df.get_column("role"),
                "group_id": df.get_column("group_id"),
                "tier": df.get_column("retention"),
                "rank": df.get_column("rank").fill_nan(None),
                "priority": df.get_column("priority"),
                "decision": decided.gather(decisions.included.astype(np.int64)),
                "reason": reasons.gather(decisions.reason),
                "detail": df.select(detail.alias("detail")).to_series(),
                "provenance": df.select(provenance.alias("provenance")).to_series(),
                "redactions": df.get_column(REDACTIONS).replace("{}", None)
                if REDACTIONS in df.columns
                else pl.Series(REDACTIONS, [None] * n, pl.String),
                "tokens": decisions.tokens,
                "pack_position": decisions.pack_position,
            }
        )
        .with_columns(
            pl.when(pl.col("tokens") >= 0).then(pl.col("tokens")).alias("tokens"),
            pl.when(pl.col("pack_position") >= 0)
            .then(pl.col("pack_position"))
            .alias("pack_position"),
        )
        .cast(dict(ENTRY_SCHEMA.items()))
    )


def input_fingerprint(df: pl.DataFrame) -> str:
    """sha256 over the ordered rows' identity, content hash and packing-relevant fields.

    Column by column: a null mask, then numbers and times as little-endian
    int64/float64 bytes, enumerations as their codes in the schema's fixed
    value order, and strings as their UTF-8 byte lengths followed by their
    bytes, joined in chunks (so no second copy of a large frame is made).

    Parameters
    ----------
    df
        The items, ``n`` rows in input order.

    Returns
    -------
    str
        64 lowercase hex digits.
    """
    exprs: list[pl.Expr] = []
    strings: list[str] = []
    schema = df.schema
    for name in _FINGERPRINT_COLUMNS:
        col = pl.col(name)
        dtype = schema[name]
        exprs.append(col.is_null().alias(f"{name}:null"))
        if dtype == pl.String:
            strings.append(name)
            exprs.append(col.fill_null("").str.len_bytes().alias(f"{name}:len"))
        elif isinstance(dtype, pl.Enum):
            exprs.append(col.to_physical().cast(pl.Int64).fill_null(-1).alias(name))
        elif isinstance(dtype, pl.Datetime):
            exprs.append(col.dt.epoch("us").fill_null(0).alias(name))
        else:
            exprs.append(col.fill_null(0).alias(name))
    parts = df.select(exprs)
    digest = hashlib.sha256(f"rows={df.height}".encode())
    for name in parts.columns:
        values = parts.get_column(name).to_numpy()
        digest.update(f"\x1d{name}\x1e".encode())
        digest.update(values.astype("<f8" if values.dtype.kind == "f" else "<i8").tobytes())
    for name in strings:
        digest.update(f"\x1d{name}:bytes\x1e".encode())
        digest.update(_utf8_bytes(df.get_column(name)))
    return digest.hexdigest()


def _utf8_bytes(column: pl.Series) -> memoryview:
    """The UTF-8 bytes of a String column's values, one after the other (null as empty).

    Read from the Arrow data buffer, without a Python string per value or a
    second copy of the text.
    """
    array = column.fill_null("").to_arrow()
    if isinstance(array, pa.ChunkedArray):  # pragma: no cover - Series.to_arrow rechunks
        array = array.combine_chunks()
    array = array.cast(pa.large_string())
    data = array.buffers()[2]
    if not len(array) or data is None:
        return memoryview(b"")
    offsets = np.frombuffer(array.buffers()[1], dtype="<i8")
    first, last = offsets[array.offset], offsets[array.offset + len(array)]
    return memoryview(data)[first:last]


def _fingerprints(df: pl.DataFrame, request: Request, review: PolicyReview) -> dict[str, str]:
    """sha256 hex of the settings, the token profile, the input and the plugins."""
    settings = {
        "as_of": request.as_of.isoformat(),
        "budget": request.budget,
        "profile": request.profile.name,
        "tiers": list(TIERS),
        "chat_roles": CHAT_ROLES,
    }
    # Only when set, so the settings of packs without them hash as before.
    if request.reserve:
        settings["reserve"] = request.reserve
    if request.overflow != "error":
        settings["overflow"] = request.overflow
    if request.turns:
        settings["turns"] = True
    if request.start_on is not None:
        settings["start_on"] = request.start_on
    plugins = canonical_json([p.fingerprint for p in review.policies])
    return {
        "settings": hashlib.sha256(canonical_json(settings).encode()).hexdigest(),
        "profile": request.profile.fingerprint,
        "input": input_fingerprint(df),
        "plugins": hashlib.sha256(plugins.encode()).hexdigest(),
    }


def _totals(entries: pl.DataFrame, decisions: Decisions) -> ManifestTotals:
    """Counts over the entries: items, included, counted, by reason, redactions by type."""
    n = entries.height
    included = len(decisions.selected)
    counted = int((decisions.tokens >= 0).sum())
    by_reason = np.bincount(decisions.reason, minlength=len(REASONS))
    return ManifestTotals(
        items=n,
        included=included,
        excluded=n - included,
        counted=counted,
        not_counted=n - counted,
        by_reason={r.value: int(c) for r, c in sorted(zip(REASONS, by_reason, strict=True)) if c},
        redactions=_redaction_totals(entries),
    )


def _redaction_totals(entries: pl.DataFrame) -> dict[str, int]:
    """Redactions by type over all entries (the items that had any)."""
    totals: dict[str, int] = {}
    for text in entries.get_column("redactions").drop_nulls().to_list():
        for kind, count in json.loads(text).items():
            totals[kind] = totals.get(kind, 0) + int(count)
    return dict(sorted(totals.items()))


def _merges(df: pl.DataFrame) -> list[MergeRecord]:
    """The merges a dedupe recorded in ``merged_ids``/``merge_conflicts``, in input order."""
    if MERGED_IDS not in df.columns:
        return []
    dropped = MERGE_DROPPED in df.columns
    record = pl.col(MERGED_IDS).list.len() > 0
    if dropped:
        record |= pl.col(MERGE_DROPPED).list.len() > 0
    merged = df.filter(record)
    if merged.height == 0:
        return []
    fields = [f for f in MERGE_RULES if f in merged.columns]
    resolved = merged.select(
        "id",
        MERGED_IDS,
        pl.col(MERGE_DROPPED) if dropped else pl.lit([], pl.List(pl.Null)).alias(MERGE_DROPPED),
        pl.col(MERGE_CONFLICTS) if MERGE_CONFLICTS in merged.columns else pl.lit(None, pl.String),
        *[
            pl.col(f).cast(pl.String) if f in ("trust", "sensitivity", "retention") else pl.col(f)
            for f in fields
        ],
    )
    records = []
    for row in resolved.iter_rows(named=True):
        values = {f: row[f] for f in fields}
        conflicts = row.get(MERGE_CONFLICTS)
        records.append(
            MergeRecord(
                kept=row["id"],
                merged=row[MERGED_IDS],
                resolved=json.loads(canonical_json(_jsonable(values))),
                metadata_conflicts=None if conflicts is None else json.loads(conflicts),
                dropped={d["id"]: d["reason"] for d in row[MERGE_DROPPED] or []},
            )
        )
    return records


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat().replace("+00:00", "Z")
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    return value
