"""Packing a frame under a token budget, with a manifest that explains every decision.

The algorithm follows the design ("pack(budget)"):

1. Items that are not valid at ``as_of``, quarantined items (a non-null
   ``quarantine_reason``, see :meth:`CognitionFrame.quarantine
   <cognoxium.frame.frame.CognitionFrame.quarantine>`) and non-packable (Binary)
   items are excluded, each with its reason; a group with such a member is excluded
   whole. An item is valid when ``max(created_at, valid_from) <= as_of <
   expires_at``: packing as of a past time never sees items made after it.
2. Each item costs the tokens of its rendered content under the token
   profile, plus the per-message framing of the chat format.
3. Required items go in first; if they alone exceed the budget,
   :class:`~cognoxium.exceptions.BudgetError` names them and nothing is packed.
4. Preferred items are considered before optional ones; within a tier the
   order is rank desc, priority desc, token cost asc, id asc; an item that
   does not fit is skipped (``over_budget``) and the next one is tried.
5. The pack keeps the input (conversational) order of the selected items.

Items of one ``group_id`` form one unit: packed or dropped together. A unit's
tier is its strongest member retention, its rank and priority the members'
highest, its cost their sum, its id the smallest member id.

Only what can matter is tokenized: candidates are costed in selection order,
in batches, and a unit whose proven lower bound (see
:meth:`cognoxium.tokens.profiles.TokenProfile.lower_bound`) exceeds the remaining budget
is skipped without counting. Such items are reported with ``tokens`` null.
"""

from __future__ import annotations

import hashlib
import heapq
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
from pydantic import BaseModel, ConfigDict, PrivateAttr

from cognoxium._columns import (
    CHAT_ROLES,
    MERGE_CONFLICTS,
    MERGE_RULES,
    MERGED_IDS,
    QUARANTINE_COLUMN,
    REDACTIONS,
)
from cognoxium.exceptions import BudgetError, PackError, PolicyError, SchemaError
from cognoxium.governance.lineage import lineage_edges
from cognoxium.governance.policies import ACTIONS, Policy, data_block_expr
from cognoxium.items.model import ContextItem, canonical_json
from cognoxium.items.schema import COLUMNS, POLARS_SCHEMA, frame_to_items, packed_text_expr
from cognoxium.tokens.profiles import TokenProfile, get_profile

__all__ = [
    "CHAT_ROLES",
    "ContextPack",
    "Decision",
    "ManifestEntry",
    "ManifestTotals",
    "MergeRecord",
    "PackManifest",
    "PolicyOutcome",
    "Reason",
    "pack",
]

MANIFEST_FORMAT = "cognoxium.pack_manifest/1"

_TIERS: dict[str, int] = {"required": 0, "preferred": 1, "optional": 2}


class Decision(StrEnum):
    """Whether an item went into the pack."""

    INCLUDED = "included"
    EXCLUDED = "excluded"


class Reason(StrEnum):
    """Why an item was included or excluded."""

    REQUIRED = "required"
    SELECTED = "selected"
    EXPIRED = "expired"
    NOT_YET_VALID = "not_yet_valid"
    QUARANTINED = "quarantined"
    POLICY = "policy"
    NOT_PACKABLE = "not_packable"
    GROUP_INCOMPLETE = "group_incomplete"
    OVER_BUDGET = "over_budget"
    GROUP_OVER_BUDGET = "group_over_budget"


class ManifestEntry(BaseModel):
    """One input item's line in a manifest.

    ``tokens`` is the item's cost (content plus framing) in tokens, or
    ``None`` when it was never counted because it provably could not matter.
    ``detail`` says more about the reason (the quarantine reason), or ``None``;
    ``provenance`` lists a quarantined item's source URIs (``None`` otherwise);
    ``redactions`` is the canonical JSON ``{TYPE: count}`` of the item's
    redactions (``None`` when it had none) and never a redacted value.
    ``position`` is the item's 0-based input index and ``pack_position`` its
    index in the pack, or ``None``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    position: int
    id: str
    content_hash: str
    role: str
    group_id: str | None
    tier: str
    rank: float | None
    priority: int
    decision: Decision
    reason: Reason
    detail: str | None
    provenance: list[str] | None
    redactions: str | None
    tokens: int | None
    pack_position: int | None


class PolicyOutcome(BaseModel):
    """What one policy decided about one item (every action but ``allow``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    policy: str
    rule: str | None
    id: str
    action: str
    message: str | None


class MergeRecord(BaseModel):
    """One merge of duplicates: the kept item, the ids folded into it, and how fields resolved.

    ``resolved`` holds the kept item's value of every merge-governed field
    (see ``merge_rules`` in the manifest); ``metadata_conflicts`` maps each
    metadata key on which the copies differ to ``{id: value}``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    kept: str
    merged: list[str]
    resolved: dict[str, Any]
    metadata_conflicts: dict[str, dict[str, Any]] | None


class ManifestTotals(BaseModel):
    """Counts over a manifest's entries."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    items: int
    included: int
    excluded: int
    counted: int
    not_counted: int
    by_reason: dict[str, int]
    redactions: dict[str, int] = {}


class PackManifest(BaseModel):
    """The machine-readable account of one pack.

    Every input item has one entry. ``used_tokens`` equals the sum of the
    included entries' ``tokens`` plus ``pack_overhead_tokens`` (the reply
    priming of the chat format, paid once when the pack is not empty).
    The canonical JSON (:meth:`to_json`) is byte-identical for the same
    ordered input, settings and token profile. ``lineage`` holds the lineage
    edges of the included items (see :mod:`cognoxium.governance.lineage`), ``merges``
    the merges a dedupe made, ``policy_outcomes`` what policies decided.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    format: str = MANIFEST_FORMAT
    label: str | None
    budget: int
    used_tokens: int
    remaining_tokens: int
    pack_overhead_tokens: int
    as_of: datetime
    profile: str
    fingerprints: dict[str, str]
    totals: ManifestTotals
    policies: list[dict[str, str]] = []
    policy_outcomes: list[PolicyOutcome] = []
    merges: list[MergeRecord] = []
    merge_rules: dict[str, str] = {}
    lineage: list[dict[str, str | None]] = []
    _entries: pl.DataFrame = PrivateAttr()

    @property
    def entries(self) -> list[ManifestEntry]:
        """The entries, in input order, as validated models."""
        return [ManifestEntry.model_validate(row) for row in self._entries.iter_rows(named=True)]

    def to_polars(self) -> pl.DataFrame:
        """The entries as a Polars frame, one row per input item, in input order."""
        return self._entries

    def to_arrow(self) -> pa.Table:
        """The entries as an Arrow table, one row per input item, in input order.

        The schema metadata key ``cognoxium.manifest`` holds everything but the
        entries (budget, used tokens, totals, fingerprints, ...) as canonical
        JSON, so the table alone describes the pack.
        """
        header = canonical_json(self.model_dump(mode="json"))
        return self._entries.to_arrow().replace_schema_metadata({"cognoxium.manifest": header})

    def to_dict(self) -> dict[str, Any]:
        """The manifest as plain JSON-ready data, entries included."""
        data = self.model_dump(mode="json")
        data["entries"] = self._entries.with_columns(pl.col("rank").fill_nan(None)).to_dicts()
        return data

    def to_json(self) -> str:
        """Canonical JSON: sorted keys, compact separators, UTF-8 text."""
        return canonical_json(self.to_dict())

    @classmethod
    def from_json(cls, text: str) -> PackManifest:
        """Parse and validate a manifest written by :meth:`to_json`."""
        data = json.loads(text)
        entries = [ManifestEntry.model_validate(e) for e in data.pop("entries")]
        manifest = cls.model_validate(data)
        manifest._entries = _entries_frame([e.model_dump(mode="json") for e in entries])
        return manifest


ENTRY_SCHEMA = pl.Schema(
    {
        "position": pl.Int64(),
        "id": pl.String(),
        "content_hash": pl.String(),
        "role": POLARS_SCHEMA["role"],
        "group_id": pl.String(),
        "tier": POLARS_SCHEMA["retention"],
        "rank": pl.Float64(),
        "priority": pl.Int64(),
        "decision": pl.Enum([d.value for d in Decision]),
        "reason": pl.Enum([r.value for r in Reason]),
        "detail": pl.String(),
        "provenance": pl.List(pl.String()),
        "redactions": pl.String(),
        "tokens": pl.Int64(),
        "pack_position": pl.Int64(),
    }
)
"""Columns of :meth:`PackManifest.to_polars`; enumerations as ``pl.Enum``."""


def _entries_frame(rows: list[dict[str, Any]]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=ENTRY_SCHEMA)


@dataclass(frozen=True)
class ContextPack:
    """The items selected for one model call, in input order.

    Attributes
    ----------
    frame
        The selected rows (all input columns), in input order.
    messages
        OpenAI chat messages ``{"role", "content"}``, one per selected item.
    used_tokens
        Tokens used, framing and reply priming included.
    remaining_tokens
        ``budget - used_tokens``.
    budget
        The token budget.
    manifest
        The account of every input item.
    """

    frame: pl.DataFrame
    messages: list[dict[str, str]]
    used_tokens: int
    remaining_tokens: int
    budget: int
    manifest: PackManifest
    _items: list[ContextItem] | None = field(default=None, repr=False, compare=False)

    @property
    def ids(self) -> list[str]:
        """Ids of the selected items, in pack order."""
        return self.frame.get_column("id").to_list()

    @property
    def items(self) -> list[ContextItem]:
        """The selected items as validated :class:`~cognoxium.items.model.ContextItem` objects."""
        return frame_to_items(self.frame)

    def __len__(self) -> int:
        return self.frame.height


# ---------------------------------------------------------------------------
# the algorithm

_REASONS: tuple[Reason, ...] = tuple(Reason)
_SMALL_BLOCK = 4096  # blocks up to this many units are ordered in Python
_EAGER_BOUNDS = 50_000  # frames up to this many rows get every lower bound at once
_CODE = {reason: code for code, reason in enumerate(_REASONS)}
_NONE = -1


class _Units:
    """Packing units (an ungrouped row, or all rows of one group) and their lazily known costs.

    ``bound`` holds each unit's proven lower bound on its cost and ``cost`` its
    exact cost, both in tokens, or -1 while not yet computed. Both are filled
    in batches, only for the units that the selection reaches.
    """

    def __init__(
        self,
        profile: TokenProfile,
        content: pl.Series,
        hashes: pl.Series,
        framing: np.ndarray,
        unit_of_row: np.ndarray | None,
        n_units: int,
    ) -> None:
        self.profile = profile
        self.content = content
        self.hashes = hashes
        self.framing = framing
        self.grouped = unit_of_row is not None
        if unit_of_row is not None:
            self.sorted_rows = np.argsort(unit_of_row, kind="stable")
            self.offsets = np.searchsorted(unit_of_row[self.sorted_rows], np.arange(n_units + 1))
        self.row_tokens = np.full(len(content), _NONE, dtype=np.int64)
        self.cost = np.full(n_units, _NONE, dtype=np.int64)
        self.bound = np.full(n_units, _NONE, dtype=np.int64)
        self.batch = 256

    def rows_of(self, units: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The member rows of ``units`` (unit by unit) and where each unit's run starts."""
        if not self.grouped:
            return units, np.arange(len(units))
        lengths = self.offsets[units + 1] - self.offsets[units]
        starts = np.cumsum(lengths) - lengths
        within = np.arange(int(lengths.sum())) - np.repeat(starts, lengths)
        return self.sorted_rows[np.repeat(self.offsets[units], lengths) + within], starts

    def _per_unit(self, values: np.ndarray, starts: np.ndarray) -> np.ndarray:
        return values if not self.grouped else np.add.reduceat(values, starts)

    def ensure_bounds(self, units: np.ndarray) -> None:
        units = units[self.bound[units] == _NONE]
        if len(units) == 0:
            return
        rows, starts = self.rows_of(units)
        texts = self.content.gather(rows).to_frame("text")
        bound = texts.select(self.profile.lower_bound(pl.col("text"))).to_series().to_numpy()
        self.bound[units] = self._per_unit(bound.astype(np.int64) + self.framing[rows], starts)

    def count(self, units: np.ndarray) -> None:
        units = units[self.cost[units] == _NONE]
        if len(units) == 0:
            return
        rows, starts = self.rows_of(units)
        counts = self.profile.count_cached(
            self.hashes.gather(rows).to_list(), self.content.gather(rows).to_list()
        )
        self.row_tokens[rows] = counts + self.framing[rows]
        self.cost[units] = self._per_unit(self.row_tokens[rows], starts)

    def prefetch(self, order: np.ndarray, pos: int, remaining: int) -> None:
        """Count the next batch of uncounted units, from ``pos`` on, that may still fit."""
        picked: list[np.ndarray] = []
        need = self.batch
        stop = len(order)
        while pos < stop and need > 0:
            span = order[pos : pos + 4 * self.batch]
            self.ensure_bounds(span)
            take = span[(self.bound[span] <= remaining) & (self.cost[span] == _NONE)][:need]
            picked.append(take)
            need -= len(take)
            pos += len(span)
        self.count(np.concatenate(picked))
        self.batch = min(self.batch * 2, 8192)


def _as_utc(value: datetime | None) -> datetime:
    if value is None:
        return datetime.now(UTC)
    if value.tzinfo is None:
        raise PackError("as_of must be timezone-aware (UTC)")
    return value.astimezone(UTC)


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


def _input_fingerprint(df: pl.DataFrame) -> str:
    """sha256 over the ordered rows' identity, content hash and packing-relevant fields.

    Column by column: a null mask, then numbers and times as little-endian
    int64/float64 bytes, enumerations as their codes in the schema's fixed
    value order, and strings as their UTF-8 byte lengths followed by their
    bytes, joined in chunks (so no second copy of a large frame is made).
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
    step = 65536
    for name in strings:
        digest.update(f"\x1d{name}:bytes\x1e".encode())
        column = df.get_column(name)
        for start in range(0, len(column), step):
            chunk = column.slice(start, step).fill_null("").to_list()
            digest.update("".join(chunk).encode("utf-8"))
    return digest.hexdigest()


def _blocks(keys: pl.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Start and end (exclusive) of each position's run of equal sort keys."""
    m = keys.height
    if m == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty
    change = np.zeros(m, dtype=bool)
    change[0] = True
    for name in keys.columns:
        values = keys.get_column(name).to_numpy()
        change[1:] |= values[1:] != values[:-1]
    heads = np.flatnonzero(change)
    lengths = np.diff(np.append(heads, m))
    return np.repeat(heads, lengths), np.repeat(np.append(heads[1:], m), lengths)


def _select(
    units: _Units,
    order: np.ndarray,
    block_start: np.ndarray,
    block_end: np.ndarray,
    cheap: np.ndarray,
    unit_ids: pl.Series,
    remaining: int,
) -> list[int]:
    """Greedy skip-and-continue over ``order`` (units sorted by tier, rank desc, priority desc).

    Within a block of equal keys the design's order is cost asc, id asc; see
    :func:`_select_block`. ``cheap`` is a lower bound of each unit's cost that
    is known for every unit (framing plus the byte bound); its suffix minimum
    ends the scan as soon as nothing left can fit.
    """
    chosen: list[int] = []
    m = len(order)
    if m == 0:
        return chosen
    suffix_min = np.minimum.accumulate(cheap[order][::-1])[::-1]
    window = 512
    pos = 0
    while pos < m and suffix_min[pos] <= remaining:
        span = order[pos : pos + window]
        units.ensure_bounds(span)
        hits = np.flatnonzero(units.bound[span] <= remaining)
        if len(hits) == 0:
            pos += len(span)
            window = min(window * 2, 65536)
            continue
        pos += int(hits[0])
        if block_end[pos] - block_start[pos] > 1:
            remaining = _select_block(
                units, order[pos : block_end[pos]], unit_ids, remaining, chosen
            )
            pos = int(block_end[pos])
            continue
        u = order[pos]
        if units.cost[u] == _NONE:
            units.prefetch(order, pos, remaining)
        if units.cost[u] <= remaining:
            chosen.append(int(u))
            remaining -= int(units.cost[u])
        pos += 1
    return chosen


def _select_block(
    units: _Units, block: np.ndarray, unit_ids: pl.Series, remaining: int, chosen: list[int]
) -> int:
    """Select within a block of equal (tier, rank, priority), in cost asc, id asc order.

    Units are visited by (lower bound, id); a min-heap of counted units
    releases one only when no uncounted unit of the block can precede it: the
    next uncounted unit's (lower bound, id) is past the released (cost, id).
    Returns the remaining budget.
    """
    units.ensure_bounds(block)
    block = block[units.bound[block] <= remaining]
    if len(block) == 0:
        return remaining
    if len(block) <= _SMALL_BLOCK:
        # Few units: Python's sort beats building a frame. Ids compare as
        # strings, whose code-point order is the UTF-8 byte order Polars sorts by.
        keyed = sorted(
            zip(
                units.bound[block].tolist(),
                unit_ids.gather(block).to_list(),
                block.tolist(),
                strict=True,
            )
        )
        seq_bound = [k[0] for k in keyed]
        seq_id: Any = [k[1] for k in keyed]
        seq: Any = [k[2] for k in keyed]
    else:
        frame = (
            pl.DataFrame({"unit": block, "bound": units.bound[block], "id": unit_ids.gather(block)})
            .with_columns(pl.col("id").rank("ordinal").alias("id_rank"))
            .sort(["bound", "id"])
        )
        seq = frame.get_column("unit").to_numpy()
        seq_bound = frame.get_column("bound").to_list()
        seq_id = frame.get_column("id_rank").to_list()
    k = len(seq)
    heap: list[tuple[int, Any, int]] = []
    i = 0
    while True:
        if i < k and seq_bound[i] > remaining:
            i = k  # sorted by bound: nothing further in the block can fit
        if heap and (i == k or (heap[0][0], heap[0][1]) < (seq_bound[i], seq_id[i])):
            cost, _, u = heapq.heappop(heap)
            if cost <= remaining:
                chosen.append(u)
                remaining -= cost
            continue
        if i == k:
            break
        if units.cost[seq[i]] == _NONE:
            stop = min(k, i + units.batch)
            batch = np.asarray(seq[i:stop], dtype=np.int64)
            units.count(batch[np.asarray(seq_bound[i:stop]) <= remaining])
            units.batch = min(units.batch * 2, 8192)
        heapq.heappush(heap, (int(units.cost[seq[i]]), seq_id[i], int(seq[i])))
        i += 1
    return remaining


_SEVERITY = {action: rank for rank, action in enumerate(ACTIONS)}


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
    merged = df.filter(pl.col(MERGED_IDS).list.len() > 0)
    if merged.height == 0:
        return []
    fields = [f for f in MERGE_RULES if f in merged.columns]
    resolved = merged.select(
        "id",
        MERGED_IDS,
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


def _as_policies(policy: Policy | Sequence[Policy] | None) -> list[Policy]:
    if policy is None:
        return []
    policies = [policy] if isinstance(policy, Policy) else list(policy)
    for p in policies:
        if not isinstance(p, Policy):
            raise PackError(f"not a policy (needs name, fingerprint and check): {p!r}")
    return policies


def _check_all(df: pl.DataFrame, policies: list[Policy]) -> list[pl.DataFrame]:
    """Each policy's verdict frame, checked for shape and actions."""
    verdicts = []
    for p in policies:
        verdict = p.check(df)
        if verdict.height != df.height or not {"action", "rule", "message"} <= set(verdict.columns):
            raise PackError(
                f"policy {p.name!r} must return {df.height} rows with action, rule and message"
            )
        bad = verdict.filter(~pl.col("action").is_in(ACTIONS))
        if bad.height:
            raise PackError(
                f"policy {p.name!r} gave unknown action {bad['action'][0]!r}; "
                f"use one of {list(ACTIONS)}"
            )
        verdicts.append(verdict.select("action", "rule", "message"))
    return verdicts


def _judge(verdicts: list[pl.DataFrame]) -> pl.DataFrame | None:
    """The most severe action per row over all policies, with its rule and message."""
    if not verdicts:
        return None
    table = pl.concat(
        [
            verdict.select(
                pl.col("action").replace_strict(_SEVERITY, return_dtype=pl.Int8).alias(f"s{index}"),
                pl.col("action").alias(f"a{index}"),
                pl.col("rule").cast(pl.String).alias(f"r{index}"),
                pl.col("message").cast(pl.String).alias(f"m{index}"),
            )
            for index, verdict in enumerate(verdicts)
        ],
        how="horizontal",
    )
    worst = pl.max_horizontal([pl.col(f"s{i}") for i in range(len(verdicts))])
    pick = [pl.col(f"s{i}") == worst for i in range(len(verdicts))]

    def first(prefix: str) -> pl.Expr:
        expr = pl.lit(None, pl.String)
        for i in reversed(range(len(verdicts))):
            expr = pl.when(pick[i]).then(pl.col(f"{prefix}{i}")).otherwise(expr)
        return expr

    return table.with_columns(
        first("a").alias("action"), first("r").alias("rule"), first("m").alias("message")
    )


_RENDERING = ("render_as_user", "render_as_data")


def _judged(
    df: pl.DataFrame, policy: Policy, verdict: pl.DataFrame, keep: pl.Series
) -> pl.DataFrame:
    """One policy's non-``allow`` outcomes on the rows ``keep`` marks, with their positions."""
    return (
        verdict.with_columns(id=df.get_column("id"), position=pl.int_range(df.height), keep=keep)
        .filter(pl.col("keep") & (pl.col("action") != "allow"))
        .select(pl.lit(policy.name).alias("policy"), "rule", "id", "action", "message", "position")
    )


def _check_outcomes(
    df: pl.DataFrame,
    policies: list[Policy],
    verdicts: list[pl.DataFrame],
    reason: np.ndarray,
    tier: np.ndarray,
) -> None:
    """Raise PolicyError for ``error`` outcomes and for required items a policy excludes."""
    packable = pl.Series((reason == _NONE) | (reason == _CODE[Reason.POLICY]))
    required = pl.Series(tier == 0)
    errors: list[dict[str, Any]] = []
    for p, verdict in zip(policies, verdicts, strict=True):
        action = verdict.get_column("action")
        keep = packable & ((action == "error") | ((action == "exclude") & required))
        errors.extend(_judged(df, p, verdict, keep).drop("position").to_dicts())
    if errors:
        listed = "; ".join(
            f"{e['id']}: {e['message'] or e['rule']} ({e['policy']})" for e in errors[:10]
        )
        raise PolicyError(
            f"{len(errors)} item(s) break a policy that forbids packing them: {listed}",
            outcomes=errors,
        )


def _outcomes(
    df: pl.DataFrame,
    policies: list[Policy],
    verdicts: list[pl.DataFrame],
    reason: np.ndarray,
    included: np.ndarray,
) -> list[PolicyOutcome]:
    """Outcomes for the manifest: every exclusion, and the renderings of packed items.

    A rendering outcome of an item that is not packed changes nothing, so it
    is left out (a pack over many untrusted items records only those it holds).
    """
    if not policies:
        return []
    excluded = pl.Series(reason == _CODE[Reason.POLICY])
    packed = pl.Series(included)
    found = pl.concat(
        [
            _judged(
                df,
                p,
                verdict,
                packed | (excluded & ~verdict.get_column("action").is_in(_RENDERING)),
            )
            for p, verdict in zip(policies, verdicts, strict=True)
        ]
    ).sort("position", "policy")
    rows = found.drop("position").iter_rows(named=True)
    return [PolicyOutcome.model_validate(row) for row in rows]


def pack(
    df: pl.DataFrame,
    budget: int,
    *,
    profile: str | TokenProfile = "cl100k_base",
    as_of: datetime | None = None,
    label: str | None = None,
    policy: Policy | Sequence[Policy] | None = None,
) -> ContextPack:
    """Select items of ``df`` under a token budget and explain every decision.

    Parameters
    ----------
    df
        Items in the canonical schema (extra columns are carried along), in
        input (conversational) order.
    budget
        The token budget, in tokens (>= 0).
    profile
        A :class:`~cognoxium.tokens.profiles.TokenProfile` or the name of a built-in one.
    as_of
        UTC time at which validity is evaluated (items created or valid from
        after it, or expired by it, are excluded); defaults to now, which is
        not reproducible: give it for byte-identical manifests.
    label
        Free text recorded in the manifest (a request id, for example).
    policy
        One or more :class:`~cognoxium.governance.policies.Policy` objects checked over
        the candidates before costing: they may exclude items (reason
        ``policy``), render them as ``user`` messages or as delimited data
        (costed as rendered), or fail the pack. Their outcomes and
        fingerprints go to the manifest.

    Returns
    -------
    ContextPack
        The selected items in input order, their chat messages, token use and
        the :class:`PackManifest`.

    Raises
    ------
    BudgetError
        If the required items alone exceed the budget; it names their ids and
        costs, and nothing is packed.
    PackError
        If ``budget`` is negative, ``as_of`` is naive, two rows share an id, a
        required item is quarantined, or a required item is in a group that
        cannot be packed.
    SchemaError
        If ``df`` lacks an item column.
    PolicyError
        If a policy's action for a packable item is ``error`` (strict mode
        makes every outcome one), or it excludes a required item.

    Examples
    --------
    >>> from cognoxium.items.schema import conform
    >>> df = conform(pl.DataFrame({
    ...     "id": ["sys", "q", "doc"], "role": ["system", "user", "document"],
    ...     "text": ["Be brief.", "What is the refund window?", "word " * 500],
    ...     "retention": ["required", "required", "optional"],
    ...     "created_at": ["2024-01-01T00:00:00Z"] * 3}))
    >>> p = pack(df, 100, as_of=datetime(2024, 6, 1, tzinfo=UTC))
    >>> p.ids, p.used_tokens, p.manifest.totals.by_reason
    (['sys', 'q'], 20, {'over_budget': 1, 'required': 2})
    """
    if isinstance(budget, bool) or not isinstance(budget, int | np.integer) or budget < 0:
        raise PackError(f"budget must be a non-negative whole number of tokens, got {budget!r}")
    budget = int(budget)
    prof = profile if isinstance(profile, TokenProfile) else get_profile(profile)
    when = _as_utc(as_of)
    n = df.height
    missing = [name for name in COLUMNS if name not in df.columns]
    if missing:
        raise SchemaError(
            f"pack needs the item columns; missing {missing} (select them back, or use "
            "with_columns instead of select)"
        )
    schema = df.schema
    wrong = {
        n: f"{schema[n]} (expected {POLARS_SCHEMA[n]})"
        for n in COLUMNS
        if schema[n] != POLARS_SCHEMA[n]
    }
    if wrong:
        raise SchemaError(f"item columns of the wrong type: {wrong}; cast them back")
    repeated = df.get_column("id").filter(df.get_column("id").is_duplicated()).unique()
    if repeated.len():
        raise PackError(
            f"duplicate ids {sorted(repeated.to_list())[:5]}: each item in a pack needs its own "
            "id (dedupe the frame, or give the copies distinct ids)"
        )

    role = pl.col("role").cast(pl.String)
    kind = pl.col("payload_kind").cast(pl.String)
    width = prof.longest_token_bytes
    quarantine = (
        pl.col(QUARANTINE_COLUMN) if QUARANTINE_COLUMN in df.columns else pl.lit(None, pl.String)
    )
    all_text = bool((df.get_column("payload_kind") == "text").all())
    content = pl.col("text").fill_null("") if all_text else packed_text_expr()
    policies = _as_policies(policy)
    verdicts = _check_all(df, policies)
    verdict = _judge(verdicts)
    chat_role = role.replace_strict(CHAT_ROLES, return_dtype=pl.String)
    key = pl.col("content_hash")
    if verdict is not None:
        action = pl.lit(verdict.get_column("action"))
        as_data = action == "render_as_data"
        chat_role = (
            pl.when(action.is_in(["render_as_user", "render_as_data"]))
            .then(pl.lit("user"))
            .otherwise(chat_role)
        )
        content = pl.when(as_data).then(data_block_expr(content)).otherwise(content)
        # The cache key of a rendered text is the text itself.
        key = pl.when(as_data).then(pl.concat_str([pl.lit("data:"), content])).otherwise(key)
    framing_by_chat = {chat: prof.framing(chat) for chat in set(CHAT_ROLES.values())}
    cols = df.select(
        content.alias("content"),
        chat_role.alias("chat_role"),
        key.alias("key"),
        chat_role.replace_strict(framing_by_chat, return_dtype=pl.Int64).alias("framing"),
        pl.col("retention")
        .cast(pl.String)
        .replace_strict(_TIERS, return_dtype=pl.Int64)
        .alias("tier"),
        pl.when(kind == "binary")
        .then(_CODE[Reason.NOT_PACKABLE])
        .when(quarantine.is_not_null())
        .then(_CODE[Reason.QUARANTINED])
        .when(pl.lit(verdict.get_column("action") if verdict is not None else None) == "exclude")
        .then(_CODE[Reason.POLICY])
        .when(pl.col("expires_at") <= when)
        .then(_CODE[Reason.EXPIRED])
        .when((pl.col("valid_from") > when) | (pl.col("created_at") > when))
        .then(_CODE[Reason.NOT_YET_VALID])
        .otherwise(_NONE)
        .alias("excluded"),
        (pl.col("group_id").is_not_null() & (pl.len().over("group_id") > 1)).alias("grouped"),
    ).with_columns(
        # A bound known for every row at no real cost: framing + ceil(bytes / longest token).
        (
            pl.col("framing")
            + (pl.col("content").str.len_bytes().cast(pl.Int64) + width - 1) // width
        ).alias("cheap"),
        pl.col("excluded").cast(pl.Int64),
    )
    reason = cols.get_column("excluded").to_numpy().copy()
    tier = cols.get_column("tier").to_numpy()
    held = (reason == _CODE[Reason.QUARANTINED]) & (tier == 0)
    if held.any():
        ids = sorted(df.get_column("id").filter(pl.Series(held)).to_list())
        raise PackError(
            f"required items {ids} are quarantined: a quarantined item never enters a pack; "
            "lower their retention or lift the quarantine"
        )
    if policies:
        _check_outcomes(df, policies, verdicts, reason, tier)
    framing = cols.get_column("framing").to_numpy()
    eligible = reason == _NONE
    rank = df.get_column("rank").fill_nan(None).fill_null(float("-inf"))
    keys = pl.DataFrame(
        {
            "tier": tier,
            "rank": rank,
            "priority": df.get_column("priority"),
            "cheap": cols.get_column("cheap"),
            "id": df.get_column("id"),
        }
    )

    grouped = bool(cols.get_column("grouped").any())
    if grouped:
        # Units: a row, or all rows of one group (numbered by their first row).
        first = (
            df.select("group_id")
            .with_row_index("row")
            .select(
                pl.when(pl.col("group_id").is_null())
                .then(pl.col("row"))
                .otherwise(pl.col("row").min().over("group_id"))
            )
            .to_series()
            .to_numpy()
        )
        _, unit_of_row = np.unique(first, return_inverse=True)
        n_units = int(unit_of_row.max()) + 1
        # A group with an excluded member is excluded whole.
        broken = np.isin(unit_of_row, np.unique(unit_of_row[~eligible])) & eligible
        lost = broken & (tier == 0)
        if lost.any():
            ids = sorted(df.get_column("id").filter(pl.Series(lost)).to_list())
            raise PackError(
                f"required items {ids} are in groups with a member that cannot be packed "
                "(expired, not yet valid or binary); fix the group or its retention"
            )
        reason[broken] = _CODE[Reason.GROUP_INCOMPLETE]
        eligible &= ~broken
        unit_keys = (
            keys.with_columns(unit=unit_of_row, eligible=eligible)
            .filter("eligible")
            .group_by("unit")
            .agg(
                pl.col("tier").min(),
                pl.col("rank").max(),
                pl.col("priority").max(),
                pl.col("cheap").sum(),
                pl.col("id").min(),
            )
            .sort("unit")
        )
        unit_index = unit_keys.get_column("unit").to_numpy()
    else:
        unit_of_row = None
        n_units = n
        unit_keys = keys if eligible.all() else keys.filter(pl.Series(eligible))
        unit_index = np.flatnonzero(eligible)
    sort_keys = ["tier", "rank", "priority"]
    ordering = (
        unit_keys.select(
            pl.arg_sort_by(sort_keys, descending=[False, True, True], maintain_order=True)
        )
        .to_series()
        .to_numpy()
    )
    sorted_keys = unit_keys.select(sort_keys)[ordering]
    order = unit_index[ordering]
    cheap = np.zeros(n_units, dtype=np.int64)
    cheap[unit_index] = unit_keys.get_column("cheap").to_numpy()
    unit_ids = pl.Series("id", [None] * n_units, pl.String) if grouped else df.get_column("id")
    if grouped:
        unit_ids = unit_ids.scatter(unit_index, unit_keys.get_column("id"))

    units = _Units(
        prof,
        cols.get_column("content"),
        cols.get_column("key"),
        framing,
        unit_of_row,
        n_units,
    )
    if n <= _EAGER_BOUNDS:
        units.ensure_bounds(unit_index)
    overhead = prof.tokens_per_pack

    # Required units go in first, whole.
    n_req = int((sorted_keys.get_column("tier") == 0).sum())
    required = order[:n_req]
    units.count(required)
    required_cost = int(units.cost[required].sum())
    if n_req and required_cost + overhead > budget:
        rows, _ = units.rows_of(required)
        detail = dict(
            sorted(
                zip(
                    df.get_column("id").gather(rows).to_list(),
                    units.row_tokens[rows].tolist(),
                    strict=True,
                )
            )
        )
        raise BudgetError(
            f"required items need {required_cost + overhead} tokens "
            f"({required_cost} for the items, {overhead} of reply priming) but the budget is "
            f"{budget}: {detail}; raise the budget or lower their retention",
            costs=detail,
            budget=budget,
        )
    block_start, block_end = _blocks(sorted_keys.slice(n_req))
    chosen = _select(
        units,
        order[n_req:],
        block_start,
        block_end,
        cheap,
        unit_ids,
        budget - overhead - required_cost,
    )
    included = np.zeros(n_units, dtype=bool)
    included[required] = True
    included[np.asarray(chosen, dtype=np.int64)] = True

    # Per-row decisions.
    if unit_of_row is None:
        row_included = included & eligible
        in_group = np.zeros(n, dtype=bool)
    else:
        row_included = included[unit_of_row] & eligible
        in_group = cols.get_column("grouped").to_numpy()
    over = eligible & ~row_included
    reason[over & in_group] = _CODE[Reason.GROUP_OVER_BUDGET]
    reason[over & ~in_group] = _CODE[Reason.OVER_BUDGET]
    reason[row_included & (tier == 0)] = _CODE[Reason.REQUIRED]
    reason[row_included & (tier != 0)] = _CODE[Reason.SELECTED]
    row_tokens = units.row_tokens
    pack_overhead = overhead if row_included.any() else 0
    used = int(row_tokens[row_included].sum()) + pack_overhead

    selected = np.flatnonzero(row_included)
    pack_position = np.full(n, _NONE, dtype=np.int64)
    pack_position[selected] = np.arange(len(selected))
    reasons = pl.Series("reason", [r.value for r in _REASONS], ENTRY_SCHEMA["reason"])
    entries = (
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
                "decision": pl.Series([Decision.EXCLUDED.value, Decision.INCLUDED.value]).gather(
                    row_included.astype(np.int64)
                ),
                "reason": reasons.gather(reason),
                "detail": df.select(
                    pl.coalesce(
                        quarantine,
                        pl.when(pl.lit(reason) == _CODE[Reason.POLICY]).then(
                            pl.lit(verdict.get_column("message"))
                            if verdict is not None
                            else pl.lit(None, pl.String)
                        ),
                    ).alias("detail")
                ).to_series(),
                "provenance": df.select(
                    pl.when(quarantine.is_not_null())
                    .then(pl.col("sources").list.eval(pl.element().struct.field("uri")))
                    .alias("provenance")
                ).to_series(),
                "redactions": df.get_column(REDACTIONS).replace("{}", None)
                if REDACTIONS in df.columns
                else pl.Series(REDACTIONS, [None] * n, pl.String),
                "tokens": row_tokens,
                "pack_position": pack_position,
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

    counted = int((row_tokens >= 0).sum())
    by_reason = np.bincount(reason, minlength=len(_REASONS))
    totals = ManifestTotals(
        items=n,
        included=len(selected),
        excluded=n - len(selected),
        counted=counted,
        not_counted=n - counted,
        by_reason={r.value: int(c) for r, c in sorted(zip(_REASONS, by_reason, strict=True)) if c},
        redactions=_redaction_totals(entries),
    )
    settings = {
        "as_of": when.isoformat(),
        "budget": budget,
        "profile": prof.name,
        "tiers": list(_TIERS),
        "chat_roles": CHAT_ROLES,
    }
    manifest = PackManifest(
        label=label,
        budget=budget,
        used_tokens=used,
        remaining_tokens=budget - used,
        pack_overhead_tokens=pack_overhead,
        as_of=when,
        profile=prof.name,
        fingerprints={
            "settings": hashlib.sha256(canonical_json(settings).encode()).hexdigest(),
            "profile": prof.fingerprint,
            "input": _input_fingerprint(df),
            "plugins": hashlib.sha256(
                canonical_json([p.fingerprint for p in policies]).encode()
            ).hexdigest(),
        },
        totals=totals,
        policies=[{"name": p.name, "fingerprint": p.fingerprint} for p in policies],
        policy_outcomes=_outcomes(df, policies, verdicts, reason, row_included),
        merges=_merges(df),
        lineage=lineage_edges(df[selected]).to_dicts(),
        merge_rules=MERGE_RULES if MERGED_IDS in df.columns else {},
    )
    manifest._entries = entries

    chat_roles = cols.get_column("chat_role").gather(selected)
    contents = cols.get_column("content").gather(selected)
    messages = [
        {"role": r, "content": c}
        for r, c in zip(chat_roles.to_list(), contents.to_list(), strict=True)
    ]
    return ContextPack(
        frame=df[selected],
        messages=messages,
        used_tokens=used,
        remaining_tokens=budget - used,
        budget=budget,
        manifest=manifest,
    )
