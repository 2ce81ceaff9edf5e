"""The applications on top of the engine.

Batch packing (:func:`run_batch`, a loop over the scopes of
:func:`pack_scope`), the LoCoMo evaluation adapter
(:func:`run_locomo`) and the command line (:mod:`cognoxium.app.cli`).
"""

from cognoxium.app.batch import (
    RANK_METHODS,
    BatchSettings,
    BatchStats,
    PreparedScope,
    RankMethod,
    Request,
    ScopeResult,
    pack_scope,
    rank_request,
    read_requests,
    run_batch,
)
from cognoxium.app.locomo import (
    ANSWERABLE_CATEGORIES,
    CATEGORY_NAMES,
    DEFAULT_BUDGETS,
    TUNING_CONVERSATIONS,
    evaluate,
    load_locomo,
    locomo_requests,
    normalize_evidence,
    parse_session_time,
    run_locomo,
)

__all__ = [
    "ANSWERABLE_CATEGORIES",
    "CATEGORY_NAMES",
    "DEFAULT_BUDGETS",
    "RANK_METHODS",
    "TUNING_CONVERSATIONS",
    "BatchSettings",
    "BatchStats",
    "PreparedScope",
    "RankMethod",
    "Request",
    "ScopeResult",
    "evaluate",
    "load_locomo",
    "locomo_requests",
    "normalize_evidence",
    "pack_scope",
    "parse_session_time",
    "rank_request",
    "read_requests",
    "run_batch",
    "run_locomo",
]
