"""The applications on top of the engine.

Batch packing (:func:`run_batch`, tasks of scopes packed with
:func:`pack_scope`, each writing its part of the files; on Ray Data,
:func:`run_batch_ray`, the same tasks), the LoCoMo evaluation adapter
(:func:`run_locomo`) and the command line (:mod:`cognoxium.app.cli`).
"""

from typing import TYPE_CHECKING

from cognoxium._lazy import lazy_exports

if TYPE_CHECKING:
    from cognoxium.app.batch import (
        RANK_METHODS,
        BatchSettings,
        BatchStats,
        PreparedScope,
        RankMethod,
        Request,
        ScopeResult,
        pack_scope,
        prepare_requests,
        rank_request,
        read_requests,
        run_batch,
    )
    from cognoxium.app.distributed import (
        ENGINES,
        Engine,
        partition_key,
        read_scope,
        read_store,
        run_batch_ray,
        scope_values,
        write_partitioned,
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
else:
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "cognoxium.app.batch": [
                "RANK_METHODS",
                "BatchSettings",
                "BatchStats",
                "PreparedScope",
                "RankMethod",
                "Request",
                "ScopeResult",
                "pack_scope",
                "prepare_requests",
                "rank_request",
                "read_requests",
                "run_batch",
            ],
            "cognoxium.app.distributed": [
                "ENGINES",
                "Engine",
                "partition_key",
                "read_scope",
                "read_store",
                "run_batch_ray",
                "scope_values",
                "write_partitioned",
            ],
            "cognoxium.app.locomo": [
                "ANSWERABLE_CATEGORIES",
                "CATEGORY_NAMES",
                "DEFAULT_BUDGETS",
                "TUNING_CONVERSATIONS",
                "evaluate",
                "load_locomo",
                "locomo_requests",
                "normalize_evidence",
                "parse_session_time",
                "run_locomo",
            ],
        },
    )

__all__ = [
    "ANSWERABLE_CATEGORIES",
    "CATEGORY_NAMES",
    "DEFAULT_BUDGETS",
    "ENGINES",
    "RANK_METHODS",
    "TUNING_CONVERSATIONS",
    "BatchSettings",
    "BatchStats",
    "Engine",
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
    "partition_key",
    "prepare_requests",
    "rank_request",
    "read_requests",
    "read_scope",
    "read_store",
    "run_batch",
    "run_batch_ray",
    "run_locomo",
    "scope_values",
    "write_partitioned",
]
