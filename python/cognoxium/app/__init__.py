"""The applications on top of the engine.

Batch packing (:func:`run_batch`, tasks of scopes packed with
:func:`pack_scope`, each writing its part of the files; on Ray Data,
:func:`run_batch_ray`, the same tasks), the LoCoMo dataset as items and
requests (:func:`read_locomo`), the LoCoMo evaluation (:func:`run_locomo`)
and the command line (:mod:`cognoxium.app.cli`).
"""

from typing import TYPE_CHECKING

from cognoxium._lazy import lazy_exports

if TYPE_CHECKING:
    from cognoxium.app.batch import (
        NO_RANK,
        BatchSettings,
        BatchStats,
        PreparedScope,
        RankMethod,
        Request,
        ScopeResult,
        batch_rank_methods,
        check_rank_method,
        conversation_requests,
        pack_scope,
        prepare_requests,
        rank_request,
        read_requests,
        request_body,
        run_batch,
    )
    from cognoxium.app.distributed import (
        ENGINES,
        Engine,
        read_scope,
        run_batch_ray,
        scope_values,
    )
    from cognoxium.app.locomo import TUNING_CONVERSATIONS, evaluate, run_locomo
    from cognoxium.app.locomo_dataset import (
        ANSWERABLE_CATEGORIES,
        CATEGORY_NAMES,
        DEFAULT_BUDGETS,
        LocomoData,
        load_locomo,
        locomo_requests,
        normalize_evidence,
        parse_session_time,
        read_locomo,
    )
else:
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "cognoxium.app.batch": [
                "NO_RANK",
                "BatchSettings",
                "BatchStats",
                "PreparedScope",
                "RankMethod",
                "Request",
                "ScopeResult",
                "batch_rank_methods",
                "check_rank_method",
                "conversation_requests",
                "pack_scope",
                "prepare_requests",
                "rank_request",
                "read_requests",
                "request_body",
                "run_batch",
            ],
            "cognoxium.app.distributed": [
                "ENGINES",
                "Engine",
                "read_scope",
                "run_batch_ray",
                "scope_values",
            ],
            "cognoxium.app.locomo": ["TUNING_CONVERSATIONS", "evaluate", "run_locomo"],
            "cognoxium.app.locomo_dataset": [
                "ANSWERABLE_CATEGORIES",
                "CATEGORY_NAMES",
                "DEFAULT_BUDGETS",
                "LocomoData",
                "load_locomo",
                "locomo_requests",
                "normalize_evidence",
                "parse_session_time",
                "read_locomo",
            ],
        },
    )

__all__ = [
    "ANSWERABLE_CATEGORIES",
    "CATEGORY_NAMES",
    "DEFAULT_BUDGETS",
    "ENGINES",
    "NO_RANK",
    "TUNING_CONVERSATIONS",
    "BatchSettings",
    "BatchStats",
    "Engine",
    "LocomoData",
    "PreparedScope",
    "RankMethod",
    "Request",
    "ScopeResult",
    "batch_rank_methods",
    "check_rank_method",
    "conversation_requests",
    "evaluate",
    "load_locomo",
    "locomo_requests",
    "normalize_evidence",
    "pack_scope",
    "parse_session_time",
    "prepare_requests",
    "rank_request",
    "read_locomo",
    "read_requests",
    "read_scope",
    "request_body",
    "run_batch",
    "run_batch_ray",
    "run_locomo",
    "scope_values",
]
