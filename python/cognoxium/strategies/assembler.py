"""Assemble context for a request: select, allocate, execute, fall back, and hand a frame on.

:class:`ContextAssembler` runs the whole registry pipeline::

    ContextRequest
      -> StrategySelector   (can_handle polling over the enabled strategies)
      -> BudgetAllocator    (confidence × quality, integer shares of the budget)
      -> StrategyExecutor   (parallel, timeout, circuit breaker)
      -> fallback path      (when nothing came out: arce, breadth-depth-navigator,
                             semantic-embedding, simple-keyword, as backends allow)
      -> ContextFragment[]  -> CognitionFrame (rank = relevance, strategy column)

The frame (:func:`fragments_to_frame`) holds the original items, so dedupe,
redact, quarantine and pack apply as to any other frame.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import polars as pl

from cognoxium.exceptions import StrategyError
from cognoxium.frame.frame import CognitionFrame
from cognoxium.items.schema import COLUMNS
from cognoxium.strategies.allocator import BudgetAllocator
from cognoxium.strategies.backends import Backends, ItemStore
from cognoxium.strategies.executor import StrategyExecutor
from cognoxium.strategies.protocol import (
    ContextFragment,
    ContextRequest,
    ContextStrategyResult,
    sort_fragments,
)
from cognoxium.strategies.registry import (
    FALLBACK_ORDER,
    StrategyConfig,
    StrategyRegistry,
    fallback_chain,
)
from cognoxium.strategies.selector import StrategySelector

__all__ = ["AssemblyResult", "ContextAssembler", "fragments_to_frame", "merge_fragments"]


def merge_fragments(fragments: Iterable[ContextFragment]) -> tuple[ContextFragment, ...]:
    """One fragment per node, the most relevant (ties: strategy name ascending), ordered.

    Returns
    -------
    tuple of ContextFragment
        Ordered by ``(relevance_score DESC, node ASC)``.
    """
    best: dict[str, ContextFragment] = {}
    for fragment in sorted(fragments, key=lambda f: (-f.relevance_score, f.node, f.strategy)):
        best.setdefault(fragment.node, fragment)
    return sort_fragments(best.values())


@dataclasses.dataclass(frozen=True, slots=True)
class AssemblyResult:
    """What :meth:`ContextAssembler.assemble` produced.

    Parameters
    ----------
    budget
        The token budget, in tokens.
    fragments
        Every fragment, one per item (the most relevant), ordered by
        ``(relevance_score DESC, node ASC)``; their tokens sum to at most
        ``budget``.
    results
        One :class:`ContextStrategyResult` per strategy run or skipped, the
        selected strategies first, then the fallback attempts.
    allocations
        Tokens given to each selected strategy.
    skipped
        ``(name, reason)`` of the enabled strategies the selector did not choose.
    fallback
        The fallback strategy that produced the fragments, or ``None``.
    store
        The items the fragments come from.
    """

    budget: int
    fragments: tuple[ContextFragment, ...]
    results: tuple[ContextStrategyResult, ...]
    allocations: Mapping[str, int]
    skipped: tuple[tuple[str, str], ...]
    fallback: str | None
    store: ItemStore = dataclasses.field(repr=False, compare=False)

    @property
    def tokens_used(self) -> int:
        """The fragments' tokens, in tokens."""
        return sum(f.tokens for f in self.fragments)

    @property
    def errors(self) -> tuple[str, ...]:
        """Every error of every result, in result order."""
        return tuple(e for r in self.results for e in r.errors)

    def to_frame(self) -> CognitionFrame:
        """The fragments' items as a frame (see :func:`fragments_to_frame`)."""
        return fragments_to_frame(self.store, self.fragments)


def fragments_to_frame(
    items: ItemStore | CognitionFrame | pl.DataFrame,
    fragments: Iterable[ContextFragment] | ContextStrategyResult | AssemblyResult,
) -> CognitionFrame:
    """Turn fragments back into a frame of the original items, ready to pack.

    Parameters
    ----------
    items
        The items the fragments were retrieved from.
    fragments
        Fragments, or a result holding them. A node found by several
        strategies is kept once, with its best relevance.

    Returns
    -------
    CognitionFrame
        The fragments' items in their original (input) order, every item
        column as it was except ``rank``, which holds the relevance score,
        plus a ``strategy`` column (String) naming the strategy that found the
        item.

    Raises
    ------
    StrategyError
        If a fragment names an item not in ``items``.

    Examples
    --------
    >>> from cognoxium.strategies.builtin import SimpleKeywordStrategy
    >>> items = CognitionFrame([
    ...     {"id": "a", "role": "user", "text": "my cat is called Miso"},
    ...     {"id": "b", "role": "user", "text": "the cat sleeps; the cat eats"},
    ...     {"id": "c", "role": "user", "text": "stocks fell"}])
    >>> backends = Backends.from_frame(items, vector=False)
    >>> found = SimpleKeywordStrategy().assemble(
    ...     ContextRequest(query="cat"), backends, 100, None)
    >>> frame = fragments_to_frame(items, found)
    >>> frame.select("id", "rank", "strategy").to_polars().rows()
    [('a', 0.68..., 'simple-keyword'), ('b', 1.0, 'simple-keyword')]
    >>> frame.pack(100).manifest.totals.included
    2
    """
    if isinstance(fragments, AssemblyResult | ContextStrategyResult):
        fragments = fragments.fragments
    merged = merge_fragments(fragments)
    if isinstance(items, ItemStore):
        df = items.items
    elif isinstance(items, CognitionFrame):
        df = items.collect()
    else:
        df = items
    annotations = pl.DataFrame(
        {
            "id": [f.node for f in merged],
            "__relevance": [f.relevance_score for f in merged],
            "strategy": [f.strategy for f in merged],
        },
        schema={"id": pl.String, "__relevance": pl.Float64, "strategy": pl.String},
    )
    absent = annotations.join(df.select("id"), on="id", how="anti")
    if absent.height:
        raise StrategyError(
            f"fragments name items that are not in the frame: {sorted(absent['id'].to_list())}"
        )
    selected = (
        df.select(COLUMNS)
        .join(annotations, on="id", how="inner", maintain_order="left")
        .with_columns(pl.col("__relevance").alias("rank"))
    )
    frame = CognitionFrame.from_polars(selected.select(COLUMNS))
    return frame.join(annotations.select("id", "strategy"), on="id", how="left")


class ContextAssembler:
    """Select, allocate, execute and fall back: context for a request, always.

    Parameters
    ----------
    registry
        The strategies; default: the built-ins plus the configuration's custom
        ones (:meth:`StrategyRegistry.from_config`).
    config
        The configuration (:class:`StrategyConfig`); default: the defaults.
    executor
        The executor; default: one built from ``config``'s settings. Its
        circuit breakers persist across :meth:`assemble` calls.
    fallback
        The fallback order (:data:`~cognoxium.strategies.registry.FALLBACK_ORDER`).

    Raises
    ------
    StrategyError
        If the registry fails validation for the configuration's active
        strategies.

    Examples
    --------
    >>> items = CognitionFrame([
    ...     {"id": "a", "role": "user", "text": "my cat is called Miso"},
    ...     {"id": "b", "role": "user", "text": "stocks fell"}])
    >>> from cognoxium.retrieval.embeddings import EmbeddingCache
    >>> backends = Backends.from_frame(
    ...     items, vector="local_hash", embedding_cache=EmbeddingCache(persist=False))
    >>> result = ContextAssembler().assemble(ContextRequest(query="cat name"), backends, 200)
    >>> [f.node for f in result.fragments], result.fallback
    (['a'], None)
    """

    def __init__(
        self,
        registry: StrategyRegistry | None = None,
        config: StrategyConfig | None = None,
        *,
        executor: StrategyExecutor | None = None,
        fallback: Sequence[str] = FALLBACK_ORDER,
    ) -> None:
        self.config = config or StrategyConfig()
        self.registry = registry or StrategyRegistry.from_config(self.config)
        self.registry.validate(self.config.active())
        self.executor = executor or StrategyExecutor(
            defaults=self.config.defaults, settings=self.config.overrides
        )
        self.allocator = BudgetAllocator()
        self.fallback = tuple(fallback)

    def assemble(
        self,
        request: ContextRequest,
        backends: Backends,
        budget: int,
        plan_context: Mapping[str, Any] | None = None,
    ) -> AssemblyResult:
        """Assemble context for ``request`` within ``budget`` tokens.

        1. Poll the active strategies (:class:`StrategySelector`).
        2. Split the budget among the selected ones whose circuit is closed
           (:class:`BudgetAllocator`); those with an open circuit get 0 and are
           reported as skipped by the executor.
        3. Run them (:class:`StrategyExecutor`).
        4. If no fragment came out, walk the fallback path: each strategy of
           :func:`fallback_chain` not yet run in this call, with a closed
           circuit, gets the whole budget, until one returns fragments.

        Parameters
        ----------
        request
            The request.
        backends
            The backends.
        budget
            The token budget, in tokens.
        plan_context
            Passed to every strategy (``plan_id`` for plan-decision-context).

        Returns
        -------
        AssemblyResult

        Raises
        ------
        StrategyError
            On a negative budget.
        """
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < 0:
            raise StrategyError(f"budget must be a non-negative int (tokens), got {budget!r}")
        strategies = [self.registry.get(name) for name in self.config.active()]
        selection = StrategySelector(strategies).select(request, backends)
        runnable = [s for s in selection.selected if self.executor.breaker(s.strategy.name).allow()]
        allocations = self.allocator.allocate(budget, runnable)
        plan = [(s.strategy, allocations.get(s.strategy.name, 0)) for s in selection.selected]
        results = list(self.executor.execute(request, backends, plan, plan_context))
        fallback: str | None = None
        if not any(r.fragments for r in results):
            tried = {r.strategy_name for r in results}
            for strategy in fallback_chain(self.registry, backends, order=self.fallback):
                if strategy.name in tried or not self.executor.breaker(strategy.name).allow():
                    continue
                tried.add(strategy.name)
                (result,) = self.executor.execute(
                    request, backends, [(strategy, budget)], plan_context
                )
                results.append(
                    dataclasses.replace(result, stats={**result.stats, "fallback": True})
                )
                if result.fragments:
                    fallback = strategy.name
                    break
        fragments = merge_fragments(f for r in results for f in r.fragments)
        return AssemblyResult(
            budget=budget,
            fragments=fragments,
            results=tuple(results),
            allocations=allocations,
            skipped=selection.skipped,
            fallback=fallback,
            store=backends.store,
        )
