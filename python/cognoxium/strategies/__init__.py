"""The context strategy registry: pluggable retrieval strategies over context items.

A :class:`ContextStrategy` retrieves context items for a :class:`ContextRequest`
from retrieval backends (:class:`Backends`: text BM25, vector embeddings, a
graph of lineage, turns, sessions and speakers, and temporal tiers) under a
token budget, returning :class:`ContextFragment` objects. The
:class:`ContextAssembler` polls the enabled strategies
(:class:`StrategySelector`), splits the budget among them
(:class:`BudgetAllocator`), runs them in parallel with timeouts and circuit
breakers (:class:`StrategyExecutor`) and falls back along
:data:`FALLBACK_ORDER` when nothing comes out. :func:`fragments_to_frame`
hands the result to the engine as a :class:`~cognoxium.frame.frame.CognitionFrame`.

Examples
--------
>>> from cognoxium import CognitionFrame
>>> from cognoxium.strategies import Backends, ContextAssembler, ContextRequest
>>> items = CognitionFrame([
...     {"id": "t1", "role": "user", "text": "I adopted a cat named Miso.",
...      "metadata": {"conversation": "c1", "session": 1}},
...     {"id": "t2", "role": "assistant", "text": "What a lovely name!",
...      "metadata": {"conversation": "c1", "session": 1}},
...     {"id": "t3", "role": "user", "text": "Stocks fell today."}])
>>> from cognoxium.retrieval.embeddings import EmbeddingCache
>>> backends = Backends.from_frame(
...     items, vector="local_hash", embedding_cache=EmbeddingCache(persist=False))
>>> result = ContextAssembler().assemble(ContextRequest(query="cat name"), backends, 300)
>>> result.to_frame().pack(300).manifest.totals.included > 0
True
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cognoxium._lazy import lazy_exports

if TYPE_CHECKING:
    from cognoxium.strategies.allocator import BudgetAllocator, split_budget
    from cognoxium.strategies.assembler import (
        AssemblyResult,
        ContextAssembler,
        fragments_to_frame,
        merge_fragments,
    )
    from cognoxium.strategies.backends import (
        DEFAULT_EMBEDDER,
        DEFAULT_HOT_SECONDS,
        DEFAULT_WARM_SECONDS,
        HITS_SCHEMA,
        TIERS,
        Backends,
        EdgeWeights,
        GraphBackend,
        ItemStore,
        TemporalBackend,
        TextBackend,
        VectorBackend,
    )
    from cognoxium.strategies.builtin import (
        BUILTIN_STRATEGIES,
        ArceStrategy,
        BreadthDepthNavigatorStrategy,
        PlanDecisionContextStrategy,
        SemanticEmbeddingStrategy,
        SimpleKeywordStrategy,
        TemporalArchaeologyStrategy,
        builtin_strategies,
        fit_budget,
    )
    from cognoxium.strategies.executor import CircuitBreaker, StrategyExecutor
    from cognoxium.strategies.protocol import (
        BACKEND_KINDS,
        RESOURCE_TYPES,
        ContextFragment,
        ContextRequest,
        ContextStrategy,
        ContextStrategyResult,
        StrategyCapabilities,
        sort_fragments,
    )
    from cognoxium.strategies.ranking import strategy_scores
    from cognoxium.strategies.registry import (
        DEFAULT_ENABLED,
        FALLBACK_ORDER,
        StrategyConfig,
        StrategyRegistry,
        fallback_chain,
        load_config,
        load_strategy,
    )
    from cognoxium.strategies.selector import Selection, StrategySelection, StrategySelector
    from cognoxium.strategies.settings import SETTING_KEYS, StrategySettings
else:
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "cognoxium.strategies.allocator": ["BudgetAllocator", "split_budget"],
            "cognoxium.strategies.assembler": [
                "AssemblyResult",
                "ContextAssembler",
                "fragments_to_frame",
                "merge_fragments",
            ],
            "cognoxium.strategies.backends": [
                "DEFAULT_EMBEDDER",
                "DEFAULT_HOT_SECONDS",
                "DEFAULT_WARM_SECONDS",
                "HITS_SCHEMA",
                "TIERS",
                "Backends",
                "EdgeWeights",
                "GraphBackend",
                "ItemStore",
                "TemporalBackend",
                "TextBackend",
                "VectorBackend",
            ],
            "cognoxium.strategies.builtin": [
                "BUILTIN_STRATEGIES",
                "ArceStrategy",
                "BreadthDepthNavigatorStrategy",
                "PlanDecisionContextStrategy",
                "SemanticEmbeddingStrategy",
                "SimpleKeywordStrategy",
                "TemporalArchaeologyStrategy",
                "builtin_strategies",
                "fit_budget",
            ],
            "cognoxium.strategies.executor": ["CircuitBreaker", "StrategyExecutor"],
            "cognoxium.strategies.protocol": [
                "BACKEND_KINDS",
                "RESOURCE_TYPES",
                "ContextFragment",
                "ContextRequest",
                "ContextStrategy",
                "ContextStrategyResult",
                "StrategyCapabilities",
                "sort_fragments",
            ],
            "cognoxium.strategies.ranking": ["strategy_scores"],
            "cognoxium.strategies.registry": [
                "DEFAULT_ENABLED",
                "FALLBACK_ORDER",
                "StrategyConfig",
                "StrategyRegistry",
                "fallback_chain",
                "load_config",
                "load_strategy",
            ],
            "cognoxium.strategies.selector": ["Selection", "StrategySelection", "StrategySelector"],
            "cognoxium.strategies.settings": ["SETTING_KEYS", "StrategySettings"],
        },
    )

__all__ = [
    "BACKEND_KINDS",
    "BUILTIN_STRATEGIES",
    "DEFAULT_EMBEDDER",
    "DEFAULT_ENABLED",
    "DEFAULT_HOT_SECONDS",
    "DEFAULT_WARM_SECONDS",
    "FALLBACK_ORDER",
    "HITS_SCHEMA",
    "RESOURCE_TYPES",
    "SETTING_KEYS",
    "TIERS",
    "ArceStrategy",
    "AssemblyResult",
    "Backends",
    "BreadthDepthNavigatorStrategy",
    "BudgetAllocator",
    "CircuitBreaker",
    "ContextAssembler",
    "ContextFragment",
    "ContextRequest",
    "ContextStrategy",
    "ContextStrategyResult",
    "EdgeWeights",
    "GraphBackend",
    "ItemStore",
    "PlanDecisionContextStrategy",
    "Selection",
    "SemanticEmbeddingStrategy",
    "SimpleKeywordStrategy",
    "StrategyCapabilities",
    "StrategyConfig",
    "StrategyExecutor",
    "StrategyRegistry",
    "StrategySelection",
    "StrategySelector",
    "StrategySettings",
    "TemporalArchaeologyStrategy",
    "TemporalBackend",
    "TextBackend",
    "VectorBackend",
    "builtin_strategies",
    "fallback_chain",
    "fit_budget",
    "fragments_to_frame",
    "load_config",
    "load_strategy",
    "merge_fragments",
    "sort_fragments",
    "split_budget",
    "strategy_scores",
]
