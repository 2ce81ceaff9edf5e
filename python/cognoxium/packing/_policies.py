"""Policies at pack time: their verdicts, the errors they raise, and the outcomes recorded.

:func:`review_policies` runs every policy once over the whole frame (before
costing); the exclusion phase reads the most severe action per row, the
costing phase renders by it, :func:`check_outcomes` fails the pack on
``error`` outcomes and :func:`policy_outcomes` lists what goes to the manifest.
See :mod:`cognoxium.governance.policies` for the actions and their order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from cognoxium.exceptions import PackError, PolicyError
from cognoxium.governance.policies import ACTIONS, Policy
from cognoxium.packing._model import REASON_CODE, UNSET, PolicyOutcome, Reason

__all__ = ["PolicyReview", "check_outcomes", "policy_outcomes", "review_policies"]

_SEVERITY = {action: rank for rank, action in enumerate(ACTIONS)}
_RENDERING = ("render_as_user", "render_as_data")


@dataclass(frozen=True)
class PolicyReview:
    """What the policies of one pack decided about every row.

    Attributes
    ----------
    policies
        The policies, in the order given.
    verdicts
        One frame per policy, ``n`` rows in input order, String columns
        ``action``, ``rule`` and ``message``.
    verdict
        The most severe action per row over all policies, with its rule and
        message (``n`` rows; the first policy wins a tie), or ``None`` without
        policies.
    """

    policies: tuple[Policy, ...]
    verdicts: tuple[pl.DataFrame, ...]
    verdict: pl.DataFrame | None

    def column(self, name: str) -> pl.Series | None:
        """Column ``name`` (``action``, ``rule`` or ``message``) of the verdict, or ``None``."""
        return None if self.verdict is None else self.verdict.get_column(name)


def review_policies(df: pl.DataFrame, policy: Policy | Sequence[Policy] | None) -> PolicyReview:
    """Run every policy over ``df`` and combine their verdicts.

    Parameters
    ----------
    df
        The items, ``n`` rows.
    policy
        One policy, several, or ``None``.

    Returns
    -------
    PolicyReview
        Each policy's verdict and the most severe one per row.

    Raises
    ------
    PackError
        If an object is not a policy, or a policy returns the wrong number of
        rows, lacks a column or gives an unknown action.
    """
    policies = _as_policies(policy)
    verdicts = tuple(_check(df, p) for p in policies)
    return PolicyReview(policies=policies, verdicts=verdicts, verdict=_judge(verdicts))


def check_outcomes(
    df: pl.DataFrame, review: PolicyReview, reason: np.ndarray, tier: np.ndarray
) -> None:
    """Raise PolicyError for ``error`` outcomes and for required items a policy excludes.

    Parameters
    ----------
    df
        The items, ``n`` rows.
    review
        The policies' verdicts.
    reason
        ``(n,)`` reason codes of the exclusions so far; only rows still packable
        (no reason, or ``policy``) are judged.
    tier
        ``(n,)`` tier codes (0 = required).

    Raises
    ------
    PolicyError
        Naming up to ten of the offending items; ``outcomes`` holds them all.
    """
    packable = pl.Series((reason == UNSET) | (reason == REASON_CODE[Reason.POLICY]))
    required = pl.Series(tier == 0)
    errors: list[dict[str, Any]] = []
    for p, verdict in zip(review.policies, review.verdicts, strict=True):
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


def policy_outcomes(
    df: pl.DataFrame, review: PolicyReview, reason: np.ndarray, included: np.ndarray
) -> list[PolicyOutcome]:
    """Outcomes for the manifest: every exclusion, and the renderings of packed items.

    A rendering outcome of an item that is not packed changes nothing, so it
    is left out (a pack over many untrusted items records only those it holds).

    Parameters
    ----------
    df
        The items, ``n`` rows.
    review
        The policies' verdicts.
    reason
        ``(n,)`` final reason codes.
    included
        ``(n,)`` bool: the row is in the pack.

    Returns
    -------
    list of PolicyOutcome
        In input order, then by policy name.
    """
    if not review.policies:
        return []
    excluded = pl.Series(reason == REASON_CODE[Reason.POLICY])
    packed = pl.Series(included)
    found = pl.concat(
        [
            _judged(
                df,
                p,
                verdict,
                packed | (excluded & ~verdict.get_column("action").is_in(_RENDERING)),
            )
            for p, verdict in zip(review.policies, review.verdicts, strict=True)
        ]
    ).sort("position", "policy")
    rows = found.drop("position").iter_rows(named=True)
    return [PolicyOutcome.model_validate(row) for row in rows]


def _as_policies(policy: Policy | Sequence[Policy] | None) -> tuple[Policy, ...]:
    if policy is None:
        return ()
    policies = (policy,) if isinstance(policy, Policy) else tuple(policy)
    for p in policies:
        if not isinstance(p, Policy):
            raise PackError(f"not a policy (needs name, fingerprint and check): {p!r}")
    return policies


def _check(df: pl.DataFrame, policy: Policy) -> pl.DataFrame:
    """One policy's verdict frame, checked for shape and actions."""
    verdict = policy.check(df)
    if verdict.height != df.height or not {"action", "rule", "message"} <= set(verdict.columns):
        raise PackError(
            f"policy {policy.name!r} must return {df.height} rows with action, rule and message"
        )
    bad = verdict.filter(~pl.col("action").is_in(ACTIONS))
    if bad.height:
        raise PackError(
            f"policy {policy.name!r} gave unknown action {bad['action'][0]!r}; "
            f"use one of {list(ACTIONS)}"
        )
    return verdict.select("action", "rule", "message")


def _judge(verdicts: tuple[pl.DataFrame, ...]) -> pl.DataFrame | None:
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


def _judged(
    df: pl.DataFrame, policy: Policy, verdict: pl.DataFrame, keep: pl.Series
) -> pl.DataFrame:
    """One policy's non-``allow`` outcomes on the rows ``keep`` marks, with their positions."""
    return (
        verdict.with_columns(id=df.get_column("id"), position=pl.int_range(df.height), keep=keep)
        .filter(pl.col("keep") & (pl.col("action") != "allow"))
        .select(pl.lit(policy.name).alias("policy"), "rule", "id", "action", "message", "position")
    )
