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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Any, Literal

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
from cognoxium.governance.lineage import redactions_from_lineage
from cognoxium.items.model import canonical_json
from cognoxium.packing._checks import PackCall
from cognoxium.packing._exclusions import quarantine_expr
from cognoxium.packing._model import (
    ENTRY_SCHEMA,
    REASON_CODE,
    REASONS,
    TIERS,
    Decision,
    GapRecord,
    ManifestTotals,
    MergeRecord,
    PackManifest,
    Reason,
    TruncationRecord,
)
from cognoxium.packing._policies import PolicyReview, policy_outcomes
from cognoxium.packing._selection import Decisions

__all__ = [
    "InputHasher",
    "ManifestBasis",
    "basis_row",
    "input_fingerprint",
    "manifest_basis",
    "manifest_entries",
    "manifest_header",
]

_FINGERPRINT_COLUMNS = (
    "id",
    "content_hash",
    "role",
    "retention",
    "priority",
    "trust",
    "sensitivity",
    "created_at",
    "valid_from",
    "expires_at",
    "group_id",
)
"""The columns of the input fingerprint, in order; the ``rank`` column comes after them."""


@dataclass(frozen=True)
class ManifestBasis:
    """What every manifest of packs over one frame shares, computed once for the frame.

    The packs of a batch over one scope differ in their rank column and
    their decisions only; everything here holds for all of them.

    Attributes
    ----------
    df
        The items, ``n`` rows in input order.
    review
        The policies' verdicts over ``df``.
    columns
        ``n`` rows: the entry columns that do not depend on a pack
        (``position``, ``id``, ``content_hash``, ``role``, ``group_id``,
        ``tier``, ``priority``, ``provenance``, ``redactions``) and the
        ``quarantine`` reason.
    hasher
        The input fingerprint of ``df`` up to its rank column.
    merges, merge_rules, unredacted, redactions
        The manifest's merges, merge rules, unredacted totals and redaction
        totals (over all entries).
    linked
        ``df`` has lineage (a ``lineage`` edge or a ``parents`` id); when
        false every pack's lineage is empty.
    plugins
        The plugins fingerprint: sha256 hex of the policies' fingerprints.
    """

    df: pl.DataFrame
    review: PolicyReview
    columns: pl.DataFrame
    hasher: InputHasher
    merges: list[MergeRecord]
    merge_rules: dict[str, str]
    unredacted: dict[str, int]
    redactions: dict[str, int]
    linked: bool
    plugins: str

    @property
    def height(self) -> int:
        """``n``, the rows of every manifest."""
        return self.df.height


def manifest_basis(df: pl.DataFrame, review: PolicyReview) -> ManifestBasis:
    """The parts of the manifests of packs over ``df`` that every pack shares.

    Parameters
    ----------
    df
        The items, ``n`` rows in input order.
    review
        The policies' verdicts over ``df``.

    Returns
    -------
    ManifestBasis
        Computed in one pass over the frame.
    """
    n = df.height
    quarantine = quarantine_expr(df)
    provenance = pl.when(quarantine.is_not_null()).then(
        pl.col("sources").list.eval(pl.element().struct.field("uri"))
    )
    redactions = pl.col(REDACTIONS).replace("{}", None)
    if REDACTIONS not in df.columns:  # items read back from a file: their lineage has them
        redactions = pl.lit(redactions_from_lineage(df)).replace("{}", None)
    columns = df.select(
        pl.int_range(n, dtype=pl.Int64).alias("position"),
        "id",
        "content_hash",
        "role",
        "group_id",
        pl.col("retention").alias("tier"),
        "priority",
        quarantine.alias("quarantine"),
        provenance.alias("provenance"),
        redactions.alias("redactions"),
    )
    linked = bool(
        df.select(
            (pl.col("lineage").list.len().fill_null(0) > 0).any()
            | (pl.col("parents").list.len().fill_null(0) > 0).any()
        ).item()
    )
    return ManifestBasis(
        df=df,
        review=review,
        columns=columns,
        hasher=InputHasher(df),
        merges=_merges(df),
        merge_rules=MERGE_RULES if MERGED_IDS in df.columns else {},
        unredacted=_unredacted_totals(df),
        redactions=_redaction_totals(columns.get_column("redactions")),
        linked=linked,
        plugins=hashlib.sha256(
            canonical_json([p.fingerprint for p in review.policies]).encode()
        ).hexdigest(),
    )


def manifest_header(
    basis: ManifestBasis,
    call: PackCall,
    decisions: Decisions,
    label: str | None,
    rank: pl.Series,
    lineage: list[dict[str, str | None]],
    truncations: Sequence[TruncationRecord] = (),
    *,
    order: Literal["rank", "recency"] = "rank",
    gap_records: Sequence[GapRecord] = (),
) -> PackManifest:
    """The manifest of one pack without its entries (see :func:`build_manifest`).

    Its ``_header()`` is what a batch writes per request; the entries of
    many packs are built at once by :func:`manifest_entries`. ``order`` is
    the selection order (``rank`` or ``recency``) and ``gap_records`` the
    holes in the packed conversation.
    """
    used = decisions.used_tokens
    return PackManifest(
        label=label,
        budget=call.budget,
        used_tokens=used,
        remaining_tokens=call.item_budget - used,
        pack_overhead_tokens=decisions.pack_overhead,
        as_of=call.as_of,
        profile=call.profile.name,
        fingerprints=_fingerprints(basis, call, rank),
        totals=_totals(basis, decisions),
        policies=[{"name": p.name, "fingerprint": p.fingerprint} for p in basis.review.policies],
        policy_outcomes=policy_outcomes(
            basis.df, basis.review, decisions.reason, decisions.included
        ),
        merges=basis.merges,
        lineage=lineage,
        merge_rules=basis.merge_rules,
        unredacted=basis.unredacted,
        reserve_tokens=call.options.reserve,
        overflow=call.options.overflow,
        truncations=list(truncations),
        estimated=call.profile.estimated or call.options.target == "anthropic",
        order=order,
        gaps=call.options.gaps,
        gap_records=list(gap_records),
        target=call.options.target,
    )


def basis_row(basis: ManifestBasis, item_id: str) -> int:
    """The row of the item ``item_id`` (ids are unique in a packed frame)."""
    found = basis.columns.get_column("id").index_of(item_id)
    if found is None:
        raise KeyError(item_id)
    return int(found)


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


def manifest_entries(
    basis: ManifestBasis,
    copies: int,
    rank: pl.Series,
    reason: np.ndarray,
    included: np.ndarray,
    tokens: np.ndarray,
    pack_position: np.ndarray,
    cuts: Mapping[int, TruncationRecord] | None = None,
) -> pl.DataFrame:
    """The entries of ``copies`` manifests over the same ``n`` items, one after another.

    Every argument array holds the ``copies`` packs' values one after
    another, ``(copies * n,)``: pack ``k``'s row ``i`` is at ``k * n + i``.

    Parameters
    ----------
    basis
        What the manifests share.
    copies
        How many packs.
    rank
        Float64: each row's rank.
    reason
        int64 reason codes.
    included
        bool: the row is in its pack.
    tokens, pack_position
        int64, ``UNSET`` where unset (written as null).
    cuts
        The cut rows, by their index in the arrays: their entries carry the
        content hash of the text they sent, and the ``detail``
        ``truncated: kept K of N tokens (side S)``.

    Returns
    -------
    polars.DataFrame
        ``copies * n`` rows of :data:`ENTRY_SCHEMA`.
    """
    base = basis.columns if copies == 1 else pl.concat([basis.columns] * copies, rechunk=False)
    reasons = pl.Series("reason", [r.value for r in REASONS], ENTRY_SCHEMA["reason"])
    decided = pl.Series([Decision.EXCLUDED.value, Decision.INCLUDED.value])
    detail = _details(basis, base.get_column("quarantine"), reason, copies)
    content_hash = base.get_column("content_hash")
    if cuts:
        content_hash, detail = _with_cuts(content_hash, detail, cuts)
    return (
        base.select(
            "position",
            "id",
            "role",
            "group_id",
            "tier",
            "priority",
            "provenance",
            "redactions",
        )
        .with_columns(
            content_hash.alias("content_hash"),
            rank.fill_nan(None).alias("rank"),
            decided.gather(included.astype(np.int64)).alias("decision"),
            reasons.gather(reason).alias("reason"),
            detail.alias("detail"),
            pl.Series("tokens", tokens),
            pl.Series("pack_position", pack_position),
        )
        .select(
            *[name for name in ENTRY_SCHEMA.names() if name not in ("tokens", "pack_position")],
            pl.when(pl.col("tokens") >= 0).then(pl.col("tokens")).alias("tokens"),
            pl.when(pl.col("pack_position") >= 0)
            .then(pl.col("pack_position"))
            .alias("pack_position"),
        )
        .cast(dict(ENTRY_SCHEMA.items()))
    )


def _details(
    basis: ManifestBasis, quarantine: pl.Series, reason: np.ndarray, copies: int
) -> pl.Series:
    """Each entry's detail: its quarantine's, else its review message when a policy left it out."""
    message = basis.review.column("message")
    if message is None:
        return quarantine
    messages = pl.concat([message] * copies) if copies > 1 else message
    policy = pl.lit(reason) == REASON_CODE[Reason.POLICY]
    return pl.select(
        pl.coalesce(pl.lit(quarantine), pl.when(policy).then(pl.lit(messages)))
    ).to_series()


def _with_cuts(
    content_hash: pl.Series, detail: pl.Series, cuts: Mapping[int, TruncationRecord]
) -> tuple[pl.Series, pl.Series]:
    """The cut rows' content hash of the text they sent and their ``truncated`` detail."""
    at = list(cuts)
    sent = content_hash.scatter(at, [t.content_hash for t in cuts.values()])
    notes = [
        f"truncated: kept {t.kept_tokens} of {t.original_tokens} tokens (side {t.side})"
        for t in cuts.values()
    ]
    return sent, detail.scatter(at, notes)


def input_fingerprint(df: pl.DataFrame) -> str:
    """sha256 over the ordered rows' identity, content hash and packing-relevant fields.

    Column by column: a null mask (one byte per row, 1 for null), then
    numbers and times as little-endian int64/float64 bytes, enumerations as
    their codes in the schema's fixed value order, and strings as their UTF-8
    byte lengths followed by their bytes; the ``rank`` column (null mask,
    then values, every NaN as the one ``numpy.nan``) comes last (see
    :class:`InputHasher`).

    Parameters
    ----------
    df
        The items, ``n`` rows in input order.

    Returns
    -------
    str
        64 lowercase hex digits.
    """
    return InputHasher(df).digest(df.get_column("rank"))


class InputHasher:
    """The input fingerprint of a frame, hashed once up to its ``rank`` column.

    The fingerprint hashes the ``rank`` column last, so the packs of a batch
    over one scope, which differ only in their rank, share the hash of every
    other column: :meth:`digest` hashes only the rank onto a copy of it.

    Parameters
    ----------
    df
        The items, ``n`` rows in input order.
    """

    def __init__(self, df: pl.DataFrame) -> None:
        schema = df.schema
        exprs, strings = _fingerprint_exprs(tuple(schema[n] for n in _FINGERPRINT_COLUMNS))
        parts = df.select(*exprs, *(pl.col(name).fill_null("").alias(name) for name in strings))
        self.base = hashlib.sha256(f"rows={df.height}".encode())
        """The digest of every column but ``rank``."""
        for expr in exprs:
            name = expr.meta.output_name()
            self.base.update(_column_bytes(name, parts.get_column(name).to_numpy()))
        for name in strings:
            text = _utf8_bytes(parts.get_column(name))
            self.base.update(f"\x1d{name}:bytes\x1e".encode() + text)
        self.no_nulls = _column_bytes("rank:null", np.zeros(df.height, dtype=bool))
        """The rank's null mask when it has no null."""

    def digest(self, rank: pl.Series) -> str:
        """The input fingerprint of the frame with ``rank`` (``(n,)`` Float64) as its rank.

        A NaN rank is hashed as the one NaN ``numpy.nan``, whatever its sign
        and payload bits (a rank computed as ``inf * 0`` has the sign bit
        set): every NaN is unranked and recorded as null alike.

        Returns
        -------
        str
            64 lowercase hex digits.
        """
        digest = self.base.copy()
        if rank.null_count():
            digest.update(_column_bytes("rank:null", rank.is_null().to_numpy()))
            rank = rank.fill_null(0)
        else:
            digest.update(self.no_nulls)
        values = rank.to_numpy()
        nan = np.isnan(values)
        if nan.any():  # every NaN alike: its sign and payload bits are no part of the rank
            values = np.where(nan, np.nan, values)
        digest.update(_column_bytes("rank", values))
        return digest.hexdigest()


@lru_cache(maxsize=64)
def _fingerprint_exprs(dtypes: tuple[pl.DataType, ...]) -> tuple[list[pl.Expr], list[str]]:
    """The per-row parts hashed for :data:`_FINGERPRINT_COLUMNS` of ``dtypes``; the text ones.

    For each column, its null mask, then its values as integers (an Enum's
    codes, a time's microseconds, a text's UTF-8 length; a null as -1 for
    an Enum, else 0); a text column's bytes are hashed after all of them.
    """
    exprs: list[pl.Expr] = []
    strings: list[str] = []
    for name, dtype in zip(_FINGERPRINT_COLUMNS, dtypes, strict=True):
        col = pl.col(name)
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
    return exprs, strings


def _column_bytes(name: str, values: np.ndarray) -> bytes:
    """A column's part of the input fingerprint: its name, then its values.

    Values as little-endian float64 or int64, a null mask (boolean) as one
    byte per row.
    """
    kind = values.dtype.kind
    data = values.astype("<f8" if kind == "f" else "u1" if kind == "b" else "<i8").tobytes()
    return f"\x1d{name}\x1e".encode() + data


def _utf8_bytes(column: pl.Series) -> memoryview:
    """The UTF-8 bytes of a String column's values, one after the other (without a null).

    Read from the Arrow data buffer, without a Python string per value or a
    second copy of the text.
    """
    array = column.to_arrow()
    if isinstance(array, pa.ChunkedArray):  # pragma: no cover - Series.to_arrow rechunks
        array = array.combine_chunks()
    array = array.cast(pa.large_string())
    data = array.buffers()[2]
    if not len(array) or data is None:
        return memoryview(b"")
    offsets = np.frombuffer(array.buffers()[1], dtype="<i8")
    first, last = offsets[array.offset], offsets[array.offset + len(array)]
    return memoryview(data)[first:last]


def _fingerprints(basis: ManifestBasis, call: PackCall, rank: pl.Series) -> dict[str, str]:
    """sha256 hex of the settings, the token profile, the input and the plugins."""
    return {
        "settings": _settings_fingerprint(
            call.as_of.isoformat(),
            call.budget,
            call.profile.name,
            call.options.reserve,
            call.options.overflow,
            call.options.turns,
            call.options.start_on,
            call.options.tool_errors,
            call.options.target,
            call.options.gaps,
            call.options.gap_note,
        ),
        "profile": call.profile.fingerprint,
        "input": basis.hasher.digest(rank),
        "plugins": basis.plugins,
    }


@lru_cache(maxsize=1024)
def _settings_fingerprint(
    as_of: str,
    budget: int,
    profile: str,
    reserve: int,
    overflow: str,
    turns: bool,
    start_on: str | None,
    tool_errors: str = "repair",
    target: str = "openai",
    gaps: str = "stop",
    gap_note: str | None = None,
) -> str:
    """sha256 hex of a pack's settings (a pure function of its arguments, so remembered)."""
    settings: dict[str, Any] = {
        "as_of": as_of,
        "budget": budget,
        "profile": profile,
        "tiers": list(TIERS),
        "chat_roles": CHAT_ROLES,
    }
    # Only when set, so the settings of packs without them hash as before.
    if reserve:
        settings["reserve"] = reserve
    if overflow != "error":
        settings["overflow"] = overflow
    if turns:
        settings["turns"] = True
    if start_on is not None:
        settings["start_on"] = start_on
    if tool_errors != "repair":
        settings["tool_errors"] = tool_errors
    if target != "openai":
        settings["target"] = target
    if gaps != "stop":
        settings["gaps"] = gaps
    if gap_note is not None:
        settings["gap_note"] = gap_note
    return hashlib.sha256(canonical_json(settings).encode()).hexdigest()


def _totals(basis: ManifestBasis, decisions: Decisions) -> ManifestTotals:
    """Counts over the entries: items, included, counted, by reason, redactions by type."""
    n = basis.height
    included = len(decisions.selected)
    counted = int((decisions.tokens >= 0).sum())
    by_reason = np.bincount(decisions.reason, minlength=len(REASONS)).tolist()
    return ManifestTotals(
        items=n,
        included=included,
        excluded=n - included,
        counted=counted,
        not_counted=n - counted,
        by_reason={name: by_reason[code] for name, code in _BY_NAME if by_reason[code]},
        redactions=basis.redactions,
    )


_BY_NAME = sorted((reason.value, code) for code, reason in enumerate(REASONS))
"""Each reason's name and code, in name order (the order of ``totals.by_reason``)."""


def _redaction_totals(redactions: pl.Series) -> dict[str, int]:
    """Redactions by type over all entries (the items that had any)."""
    totals: dict[str, int] = {}
    for text in redactions.drop_nulls().to_list():
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
