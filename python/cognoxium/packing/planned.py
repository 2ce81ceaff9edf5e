"""Packing the rows a plan gives: :func:`pack_plan`, what :meth:`CognitionFrame.pack` runs.

Two rules decide how a plan is packed:

- A plan whose rows are an in-memory table's, as they are or ranked (only
  rank nodes over a whole :class:`~cognoxium.engine.plan.Source` scan),
  packs with :func:`~cognoxium.packing.packer.pack_reusing`: the table never
  changes and a rank only scores its rows, so what packing finds from the
  rows alone is kept with the table, and each rank's pack takes its rank.
- Any other plan runs, its rows are checked when a step may have made them
  invalid, and they are packed by :func:`~cognoxium.packing.packer.pack`;
  a dedupe step without its own ``as_of`` judges expiry at the pack's time
  first, so copies expired by then are dropped before merging, as the pack
  would exclude them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime

import polars as pl

from cognoxium.engine.execute import checked_rows, lowered
from cognoxium.engine.plan import Dedupe, Node, Scan, Source, rewrite
from cognoxium.engine.ranks import Rank
from cognoxium.governance.policies import Policy
from cognoxium.packing.options import PackOptions
from cognoxium.packing.packer import ContextPack, pack, pack_reusing

__all__ = ["pack_plan"]


def pack_plan(
    plan: Node,
    budget: int,
    options: PackOptions,
    *,
    label: str | None = None,
    policy: Policy | Sequence[Policy] | None = None,
    previous: ContextPack | None = None,
) -> ContextPack:
    """Run ``plan`` and pack its rows under ``budget`` tokens with ``options``.

    Parameters
    ----------
    plan
        A plan whose output holds every item column.
    budget, options, label, policy, previous
        As for :func:`~cognoxium.packing.packer.pack`.

    Returns
    -------
    ContextPack
        What :func:`~cognoxium.packing.packer.pack` gives over the plan's rows.

    Raises
    ------
    RecordError
        If a step computed item values and a row is not a valid item (see
        :func:`~cognoxium.engine.execute.checked_rows`).
    BudgetError, PackError, PolicyError, SchemaError
        As :func:`~cognoxium.packing.packer.pack`.
    """
    scan = _ranked_scan(plan)
    if scan is not None and isinstance(scan.source, Source) and policy is None:
        rank = None if scan is plan else lowered(plan).select("rank").collect().to_series()
        table = scan.source

        def whole() -> pl.DataFrame:
            return lowered(scan).collect()

        return pack_reusing(
            table.cache, whole, budget, options, label=label, rank=rank, previous=previous
        )
    timed = options.at_time()
    judged = rewrite(plan, lambda node: _judge_expiry(node, timed.as_of))
    if judged is not plan:
        options = timed
    rows = checked_rows(judged, finite_rank=False)
    if previous is not None:
        return pack(rows, budget, options, label=label, policy=policy, previous=previous)
    return pack(rows, budget, options, label=label, policy=policy)


def _ranked_scan(plan: Node) -> Scan | None:
    """The whole scan whose rows ``plan`` gives, as they are but for their rank, else None.

    Rank nodes keep the rows, their order and every column but ``rank``; a
    scan narrowed to some columns gives other rows than its source's.
    """
    while isinstance(plan, Rank):
        plan = plan.input
    return plan if isinstance(plan, Scan) and plan.columns is None else None


def _judge_expiry(node: Node, as_of: datetime | None) -> Node:
    """A dedupe that judges no expiry, made to judge it at ``as_of``; other nodes as they are."""
    if isinstance(node, Dedupe) and node.as_of is None:
        return replace(node, as_of=as_of)
    return node
