"""Packing a frame under a token budget, with a manifest that explains every decision.

The algorithm follows the design ("pack(budget)"):

1. Expired, not-yet-valid and non-packable (Binary) items are excluded, each
   with its reason; a group with such a member is excluded whole.
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
:meth:`cognoxium.tokens.TokenProfile.lower_bound`) exceeds the remaining budget
is skipped without counting. Such items are reported with ``tokens`` null.
"""

from __future__ import annotations

import hashlib
import heapq
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

import numpy as np
import polars as pl
from pydantic import BaseModel, ConfigDict, PrivateAttr

from cognoxium.exceptions import BudgetError, PackError
from cognoxium.items import ContextItem, canonical_json
from cognoxium.ranking import packed_text_expr
from cognoxium.schema import frame_to_items
from cognoxium.tokens import TokenProfile, get_profile

__all__ = [
    "CHAT_ROLES",
    "ContextPack",
    "Decision",
    "ManifestEntry",
    "ManifestTotals",
    "PackManifest",
    "Reason",
    "pack",
]

MANIFEST_FORMAT = "cognoxium.pack_manifest/1"

CHAT_ROLES: dict[str, str] = {
    "system": "system",
    "developer": "developer",
    "user": "user",
    "assistant": "assistant",
    "tool": "tool",
    "document": "user",
    "memory": "user",
}
"""The OpenAI chat role each item role is rendered as (documents and memories as user)."""

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
    NOT_PACKABLE = "not_packable"
    GROUP_INCOMPLETE = "group_incomplete"
    OVER_BUDGET = "over_budget"
    GROUP_OVER_BUDGET = "group_over_budget"


class ManifestEntry(BaseModel):
    """One input item's line in a manifest.

    ``tokens`` is the item's cost (content plus framing) in tokens, or
    ``None`` when it was never counted because it provably could not matter.
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
    tokens: int | None
    pack_position: int | None


class ManifestTotals(BaseModel):
    """Counts over a manifest's entries."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    items: int
    included: int
    excluded: int
    counted: int
    not_counted: int
    by_reason: dict[str, int]


class PackManifest(BaseModel):
    """The machine-readable account of one pack.

    Every input item has one entry. ``used_tokens`` equals the sum of the
    included entries' ``tokens`` plus ``pack_overhead_tokens`` (the reply
    priming of the chat format, paid once when the pack is not empty).
    The canonical JSON (:meth:`to_json`) is byte-identical for the same
    ordered input, settings and token profile.
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
    _entries: pl.DataFrame = PrivateAttr()

    @property
    def entries(self) -> list[ManifestEntry]:
        """The entries, in input order, as validated models."""
        return [ManifestEntry.model_validate(row) for row in self._entries.iter_rows(named=True)]

    def to_polars(self) -> pl.DataFrame:
        """The entries as a Polars frame, one row per input item, in input order."""
        return self._entries

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


_ENTRY_SCHEMA = pl.Schema(
    {
        "position": pl.Int64,
        "id": pl.String,
        "content_hash": pl.String,
        "role": pl.String,
        "group_id": pl.String,
        "tier": pl.String,
        "rank": pl.Float64,
        "priority": pl.Int64,
        "decision": pl.String,
        "reason": pl.String,
        "tokens": pl.Int64,
        "pack_position": pl.Int64,
    }
)


def _entries_frame(rows: list[dict[str, Any]]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=_ENTRY_SCHEMA)


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
        """The selected items as validated :class:`~cognoxium.items.ContextItem` objects."""
        return frame_to_items(self.frame)

    def __len__(self) -> int:
        return self.frame.height


# ---------------------------------------------------------------------------
# the algorithm


class _Costs:
    """Exact unit costs, counted lazily in batches."""

    def __init__(
        self,
        profile: TokenProfile,
        hashes: np.ndarray,
        texts: np.ndarray,
        framing: np.ndarray,
        members: list[np.ndarray] | None,
        n_units: int,
    ) -> None:
        self.profile = profile
        self.hashes = hashes
        self.texts = texts
        self.framing = framing
        self.members = members
        self.row_tokens = np.full(len(texts), -1, dtype=np.int64)
        self.unit_cost = np.full(n_units, -1, dtype=np.int64)

    def rows_of(self, units: np.ndarray) -> np.ndarray:
        if self.members is None:
            return units
        if len(units) == 0:
            return units
        return np.concatenate([self.members[u] for u in units])

    def count(self, units: np.ndarray) -> None:
        units = units[self.unit_cost[units] < 0]
        if len(units) == 0:
            return
        rows = self.rows_of(units)
        counts = self.profile.count_cached(self.hashes[rows].tolist(), self.texts[rows].tolist())
        self.row_tokens[rows] = np.asarray(counts, dtype=np.int64) + self.framing[rows]
        if self.members is None:
            self.unit_cost[units] = self.row_tokens[units]
        else:
            for u in units:
                self.unit_cost[u] = int(self.row_tokens[self.members[u]].sum())


def _as_utc(value: datetime | None) -> datetime:
    if value is None:
        return datetime.now(UTC)
    if value.tzinfo is None:
        raise PackError("as_of must be timezone-aware (UTC)")
    return value.astimezone(UTC)


def _input_fingerprint(df: pl.DataFrame) -> str:
    columns = [
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
    ]
    lines = df.select(
        pl.concat_str(
            [pl.col(c).cast(pl.String).fill_null("\x00") for c in columns], separator="\x1f"
        ).alias("line")
    ).get_column("line")
    digest = hashlib.sha256()
    step = 65536
    for start in range(0, len(lines), step):
        digest.update("\x1e".join(lines.slice(start, step).to_list()).encode("utf-8"))
        digest.update(b"\x1d")
    return digest.hexdigest()


def pack(
    df: pl.DataFrame,
    budget: int,
    *,
    profile: str | TokenProfile = "cl100k_base",
    as_of: datetime | None = None,
    label: str | None = None,
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
        A :class:`~cognoxium.tokens.TokenProfile` or the name of a built-in one.
    as_of
        UTC time at which validity is evaluated; defaults to now, which is
        not reproducible: give it for byte-identical manifests.
    label
        Free text recorded in the manifest (a request id, for example).

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
        If ``budget`` is negative, ``as_of`` is naive, or a required item is in
        a group that cannot be packed.

    Examples
    --------
    >>> from cognoxium.schema import conform
    >>> df = conform(pl.DataFrame({
    ...     "id": ["sys", "q", "doc"], "role": ["system", "user", "document"],
    ...     "text": ["Be brief.", "What is the refund window?", "word " * 500],
    ...     "retention": ["required", "required", "optional"],
    ...     "created_at": ["2024-01-01T00:00:00Z"] * 3}))
    >>> p = pack(df, 100, as_of=datetime(2024, 6, 1, tzinfo=UTC))
    >>> p.ids, p.used_tokens, p.manifest.totals.by_reason
    (['sys', 'q'], 22, {'over_budget': 1, 'required': 2})
    """
    if isinstance(budget, bool) or not isinstance(budget, int | np.integer) or budget < 0:
        raise PackError(f"budget must be a non-negative whole number of tokens, got {budget!r}")
    budget = int(budget)
    prof = profile if isinstance(profile, TokenProfile) else get_profile(profile)
    when = _as_utc(as_of)
    n = df.height

    framing_of = {role: prof.framing(chat) for role, chat in CHAT_ROLES.items()}
    role = pl.col("role").cast(pl.String)
    kind = pl.col("payload_kind").cast(pl.String)
    cols = df.select(
        packed_text_expr().alias("content"),
        role.replace_strict(CHAT_ROLES, return_dtype=pl.String).alias("chat_role"),
        role.replace_strict(framing_of, return_dtype=pl.Int64).alias("framing"),
        pl.col("retention")
        .cast(pl.String)
        .replace_strict(_TIERS, return_dtype=pl.Int64)
        .alias("tier"),
        pl.when(kind == "binary")
        .then(pl.lit(Reason.NOT_PACKABLE.value))
        .when(pl.col("expires_at") <= when)
        .then(pl.lit(Reason.EXPIRED.value))
        .when(pl.col("valid_from") > when)
        .then(pl.lit(Reason.NOT_YET_VALID.value))
        .otherwise(None)
        .alias("excluded"),
        (pl.col("group_id").is_not_null() & (pl.len().over("group_id") > 1)).alias("grouped"),
    ).with_columns(
        (prof.lower_bound(pl.col("content")).cast(pl.Int64) + pl.col("framing")).alias("lb")
    )

    reason = cols.get_column("excluded").to_numpy().astype(object)
    tier = cols.get_column("tier").to_numpy()
    ids = df.get_column("id").to_numpy().astype(object)
    grouped = cols.get_column("grouped").to_numpy()

    # Units: a row, or all rows of one group. unit_of_row maps rows to units.
    if grouped.any():
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
    else:
        unit_of_row = np.arange(n)
    n_units = int(unit_of_row.max()) + 1 if n else 0
    members: list[np.ndarray] | None = None
    if grouped.any():
        order_rows = np.argsort(unit_of_row, kind="stable")
        bounds = np.searchsorted(unit_of_row[order_rows], np.arange(n_units + 1))
        members = [order_rows[bounds[u] : bounds[u + 1]] for u in range(n_units)]
        # A group with an excluded member is excluded whole.
        bad_units = np.unique(unit_of_row[reason != None])  # noqa: E711
        bad_rows = np.isin(unit_of_row, bad_units) & (reason == None)  # noqa: E711
        required_lost = bad_rows & (tier == 0)
        if required_lost.any():
            lost = sorted(ids[required_lost].tolist())
            raise PackError(
                f"required items {lost} are in groups with a member that cannot be "
                "packed (expired, not yet valid or binary); fix the group or its "
                "retention"
            )
        reason[bad_rows] = Reason.GROUP_INCOMPLETE.value

    eligible_row = reason == None  # noqa: E711
    units = (
        pl.DataFrame(
            {
                "unit": unit_of_row,
                "tier": tier,
                "rank": df.get_column("rank").fill_null(float("-inf")).to_numpy(),
                "priority": df.get_column("priority").to_numpy(),
                "lb": cols.get_column("lb").to_numpy(),
                "id": df.get_column("id"),
                "eligible": eligible_row,
            }
        )
        .filter("eligible")
        .group_by("unit", maintain_order=True)
        .agg(
            pl.col("tier").min(),
            pl.col("rank").max(),
            pl.col("priority").max(),
            pl.col("lb").sum(),
            pl.col("id").min(),
        )
        .sort(
            ["tier", "rank", "priority", "lb", "id"], descending=[False, True, True, False, False]
        )
    )

    order = units.get_column("unit").to_numpy()
    unit_tier = np.full(n_units, 3, dtype=np.int64)
    unit_tier[order] = units.get_column("tier").to_numpy()
    unit_lb = np.zeros(n_units, dtype=np.int64)
    unit_lb[order] = units.get_column("lb").to_numpy()
    unit_id = np.empty(n_units, dtype=object)
    unit_id[order] = units.get_column("id").to_numpy()

    hashes = df.get_column("content_hash").to_numpy().astype(object)
    texts = cols.get_column("content").fill_null("").to_numpy().astype(object)
    costs = _Costs(prof, hashes, texts, cols.get_column("framing").to_numpy(), members, n_units)
    overhead = prof.tokens_per_pack

    # Required units go in first.
    n_req = int((units.get_column("tier") == 0).sum())
    required = order[:n_req]
    costs.count(required)
    required_cost = int(costs.unit_cost[required].sum())
    if n_req and required_cost + overhead > budget:
        req_rows = costs.rows_of(required)
        detail = {
            str(ids[r]): int(costs.row_tokens[r]) for r in sorted(req_rows, key=lambda r: ids[r])
        }
        raise BudgetError(
            f"required items need {required_cost + overhead} tokens "
            f"({required_cost} for the items, {overhead} of reply priming) but the budget is "
            f"{budget}: {detail}; raise the budget or lower their retention",
            costs=detail,
            budget=budget,
        )
    included = np.zeros(n_units, dtype=bool)
    included[required] = True
    remaining = budget - overhead - required_cost

    seg = order[n_req:]
    included_units = _select(seg, unit_tier, units.slice(n_req), unit_lb, unit_id, costs, remaining)
    included[included_units] = True

    # Per-row decisions.
    row_included = included[unit_of_row] & eligible_row
    row_tokens = costs.row_tokens
    used_items = int(row_tokens[row_included].sum())
    pack_overhead = overhead if row_included.any() else 0
    used = used_items + pack_overhead
    over = eligible_row & ~row_included
    if members is not None:
        sizes = np.array([len(m) for m in members])[unit_of_row]
        reason[over & (sizes > 1)] = Reason.GROUP_OVER_BUDGET.value
        reason[over & (sizes <= 1)] = Reason.OVER_BUDGET.value
    else:
        reason[over] = Reason.OVER_BUDGET.value
    reason[row_included & (tier == 0)] = Reason.REQUIRED.value
    reason[row_included & (tier != 0)] = Reason.SELECTED.value

    selected_rows = np.flatnonzero(row_included)
    pack_position = np.full(n, -1, dtype=np.int64)
    pack_position[selected_rows] = np.arange(len(selected_rows))
    entries = (
        pl.DataFrame(
            {
                "position": np.arange(n, dtype=np.int64),
                "id": df.get_column("id"),
                "content_hash": df.get_column("content_hash"),
                "role": df.get_column("role").cast(pl.String),
                "group_id": df.get_column("group_id"),
                "tier": df.get_column("retention").cast(pl.String),
                "rank": df.get_column("rank"),
                "priority": df.get_column("priority"),
                "decision": np.where(
                    row_included, Decision.INCLUDED.value, Decision.EXCLUDED.value
                ),
                "reason": reason.astype(str),
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
        .cast(dict(_ENTRY_SCHEMA.items()))
    )

    by_reason = entries.get_column("reason").value_counts(sort=False)
    counted = int((row_tokens >= 0).sum())
    totals = ManifestTotals(
        items=n,
        included=len(selected_rows),
        excluded=n - len(selected_rows),
        counted=counted,
        not_counted=n - counted,
        by_reason={str(r): int(c) for r, c in sorted(by_reason.iter_rows())},
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
        },
        totals=totals,
    )
    manifest._entries = entries

    chosen = cols.select("chat_role", "content")[selected_rows]
    messages = [{"role": r, "content": c} for r, c in chosen.iter_rows()]
    return ContextPack(
        frame=df[selected_rows],
        messages=messages,
        used_tokens=used,
        remaining_tokens=budget - used,
        budget=budget,
        manifest=manifest,
    )


def _select(
    seg: np.ndarray,
    unit_tier: np.ndarray,
    keys: pl.DataFrame,
    unit_lb: np.ndarray,
    unit_id: np.ndarray,
    costs: _Costs,
    remaining: int,
) -> list[int]:
    """Greedy skip-and-continue selection over units sorted by (tier, rank, priority, lb, id).

    Within a block of equal (tier, rank, priority) the exact order is cost asc,
    id asc; a heap releases a counted unit only once no uncounted unit of the
    block can precede it (its lower bound and id are past the unit's).
    """
    m = len(seg)
    chosen: list[int] = []
    if m == 0:
        return chosen
    seg_lb = unit_lb[seg]
    suffix_min = np.minimum.accumulate(seg_lb[::-1])[::-1]
    tier = keys.get_column("tier").to_numpy()
    rank = keys.get_column("rank").to_numpy()
    prio = keys.get_column("priority").to_numpy()
    change = np.ones(m, dtype=bool)
    change[1:] = (tier[1:] != tier[:-1]) | (rank[1:] != rank[:-1]) | (prio[1:] != prio[:-1])
    starts = np.flatnonzero(change)
    block_end = np.empty(m, dtype=np.int64)
    ends = np.append(starts[1:], m)
    block_end[starts] = ends
    batch = 256

    def prefetch(pos: int) -> None:
        nonlocal batch
        picked: list[np.ndarray] = []
        need = batch
        j = pos
        while j < m and need > 0:
            window = seg[j : j + 4 * batch]
            ok = (seg_lb[j : j + 4 * batch] <= remaining) & (costs.unit_cost[window] < 0)
            take = window[ok][:need]
            picked.append(take)
            need -= len(take)
            j += 4 * batch
        costs.count(np.concatenate(picked))
        batch = min(batch * 2, 8192)

    pos = 0
    while pos < m:
        if suffix_min[pos] > remaining:
            break
        end = int(block_end[pos])
        if end - pos == 1:
            u = seg[pos]
            if seg_lb[pos] <= remaining:
                if costs.unit_cost[u] < 0:
                    prefetch(pos)
                if costs.unit_cost[u] <= remaining:
                    chosen.append(int(u))
                    remaining -= int(costs.unit_cost[u])
            pos += 1
            continue
        heap: list[tuple[int, str, int]] = []
        i = pos
        while True:
            if i < end and seg_lb[i] > remaining:
                i = end  # sorted by lower bound: nothing further in the block can fit
            if heap and (i == end or (heap[0][0], heap[0][1]) < (int(seg_lb[i]), unit_id[seg[i]])):
                cost, _, u = heapq.heappop(heap)
                if cost <= remaining:
                    chosen.append(u)
                    remaining -= cost
                continue
            if i == end:
                break
            u = seg[i]
            if costs.unit_cost[u] < 0:
                prefetch(i)
            heapq.heappush(heap, (int(costs.unit_cost[u]), unit_id[u], int(u)))
            i += 1
        pos = end
    return chosen
