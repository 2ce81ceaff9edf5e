"""Phase 2 of :func:`~cognoxium.packing.packer.pack`: which items can never enter the pack, and why.

Per row, the first that applies: not packable (Binary, unless its
``metadata.media_type`` declares an image: see :mod:`cognoxium.items.images`), quarantined, excluded
by a policy, expired, not yet valid. An item is valid when
``max(created_at, valid_from) <= as_of < expires_at``. Then a group with an
excluded member is excluded whole (``group_incomplete``); so is a whole turn
when turns are units (see :mod:`~cognoxium.packing._units`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

import numpy as np
import polars as pl

from cognoxium._columns import QUARANTINE_COLUMN
from cognoxium.exceptions import PackError
from cognoxium.items.images import image_media_type_expr
from cognoxium.items.schema import mapped_expr, timestamp_literal
from cognoxium.packing._model import REASON_CODE, TIERS, UNSET, Reason
from cognoxium.packing._policies import PolicyReview, check_outcomes
from cognoxium.packing._units import Units

__all__ = ["Exclusions", "exclude_incomplete_groups", "find_exclusions", "quarantine_expr"]


@dataclass(frozen=True)
class Exclusions:
    """The rows excluded before costing, with their reasons.

    Attributes
    ----------
    reason
        ``(n,)`` int64 reason codes (see :data:`~cognoxium.packing._model.REASONS`);
        :data:`~cognoxium.packing._model.UNSET` for a candidate.
    eligible
        ``(n,)`` bool: ``reason == UNSET``, the candidates.
    tier
        ``(n,)`` int64 tier codes (0 required, 1 preferred, 2 optional).
    grouped
        ``(n,)`` bool: the row belongs to a group of more than one row (after
        :func:`exclude_incomplete_groups`: to a unit of more than one row, a
        group or a turn).
    pinned
        ``(n,)`` bool: rows a continuing pack takes first, in tier 0, though
        their own retention is not required (see :mod:`cognoxium.packing.cache`);
        ``None``: none is.
    sent_first
        ``(n,)`` bool: rows the pack sends before the others, each part in
        input order (a continuing pack's history, see
        :mod:`cognoxium.packing.cache`); ``None``: the pack keeps the input order.
    """

    reason: np.ndarray
    eligible: np.ndarray
    tier: np.ndarray
    grouped: np.ndarray
    pinned: np.ndarray | None = None
    sent_first: np.ndarray | None = None

    @property
    def required(self) -> np.ndarray:
        """``(n,)`` bool: the row is required by its own retention (tier 0 and not pinned)."""
        required: np.ndarray = self.tier == 0
        return required if self.pinned is None else required & ~self.pinned


def quarantine_expr(df: pl.DataFrame) -> pl.Expr:
    """The quarantine reason column of ``df`` (String), or a null literal when it has none."""
    if QUARANTINE_COLUMN in df.columns:
        return pl.col(QUARANTINE_COLUMN)
    return pl.lit(None, pl.String)


def find_exclusions(df: pl.DataFrame, as_of: datetime, review: PolicyReview) -> Exclusions:
    """Exclude the rows that are not packable, quarantined, excluded by policy or not valid.

    Parameters
    ----------
    df
        The items, ``n`` rows.
    as_of
        UTC time at which validity is evaluated.
    review
        The policies' verdicts (action ``exclude`` excludes with reason ``policy``).

    Returns
    -------
    Exclusions
        Reasons per row; groups are not yet considered (see
        :func:`exclude_incomplete_groups`).

    Raises
    ------
    PackError
        If a required item is quarantined.
    PolicyError
        If a policy's action for a packable item is ``error``, or it excludes a
        required item.
    """
    unpackable = pl.col("payload_kind") == "binary"
    if bool((df.get_column("payload_kind") == "binary").any()):
        unpackable = unpackable & ~image_media_type_expr()
    when = timestamp_literal(as_of)
    cols = df.select(
        mapped_expr("retention", df.schema["retention"], TIERS, pl.Int64).alias("tier"),
        pl.when(unpackable)
        .then(REASON_CODE[Reason.NOT_PACKABLE])
        .when(quarantine_expr(df).is_not_null())
        .then(REASON_CODE[Reason.QUARANTINED])
        .when(pl.lit(review.column("action")) == "exclude")
        .then(REASON_CODE[Reason.POLICY])
        .when(pl.col("expires_at") <= when)
        .then(REASON_CODE[Reason.EXPIRED])
        .when((pl.col("valid_from") > when) | (pl.col("created_at") > when))
        .then(REASON_CODE[Reason.NOT_YET_VALID])
        .otherwise(UNSET)
        .cast(pl.Int64)
        .alias("reason"),
        (pl.col("group_id").is_not_null() & (pl.len().over("group_id") > 1)).alias("grouped"),
    )
    reason = cols.get_column("reason").to_numpy()
    tier = cols.get_column("tier").to_numpy()
    held = (reason == REASON_CODE[Reason.QUARANTINED]) & (tier == 0)
    if held.any():
        found = df.filter(pl.Series(held)).select("id", quarantine_expr(df).alias("why"))
        reasons = dict(sorted(found.iter_rows()))
        raise PackError(
            f"required items are quarantined: {reasons}; a quarantined item never enters a "
            "pack: lower their retention or lift the quarantine (the default detector, "
            "quarantine() with no predicate, reads untrusted items only: mark an item the "
            "application wrote, such as its system prompt, trust='trusted')"
        )
    if review.policies:
        check_outcomes(df, review, reason, tier)
    return Exclusions(
        reason=reason,
        eligible=reason == UNSET,
        tier=tier,
        grouped=cols.get_column("grouped").to_numpy(),
    )


def exclude_incomplete_groups(df: pl.DataFrame, rows: Exclusions, units: Units) -> Exclusions:
    """Exclude every member of a unit (a group or a turn) that has an excluded member.

    Parameters
    ----------
    df
        The items, ``n`` rows (only ``id`` is read, to word an error).
    rows
        The row exclusions of :func:`find_exclusions`.
    units
        The packing units.

    Returns
    -------
    Exclusions
        ``rows`` with the remaining members of broken units excluded as
        ``group_incomplete`` and ``grouped`` marking every row of a unit of
        more than one row (``rows`` itself when every unit is one row).

    Raises
    ------
    PackError
        If a required item is in a group or turn that cannot be packed.
    """
    if units.unit_of_row is None:
        return rows
    unit_of_row = units.unit_of_row
    broken = np.isin(unit_of_row, np.unique(unit_of_row[~rows.eligible])) & rows.eligible
    lost = broken & (rows.tier == 0)
    if lost.any():
        ids = sorted(df.get_column("id").filter(pl.Series(lost)).to_list())
        raise PackError(
            f"required items {ids} are in groups (or turns) with a member that cannot be "
            "packed (expired, not yet valid, quarantined, excluded by a policy, or binary but "
            "not an image); fix the group or its retention"
        )
    reason = np.where(broken, REASON_CODE[Reason.GROUP_INCOMPLETE], rows.reason)
    multi = units.multi_row()
    grouped = rows.grouped if multi is None else multi
    return replace(rows, reason=reason, eligible=rows.eligible & ~broken, grouped=grouped)
