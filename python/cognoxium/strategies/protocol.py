"""The context strategy contract: protocol, capabilities, request, fragment and result.

A context strategy retrieves context items for a :class:`ContextRequest` from
the retrieval backends (:mod:`cognoxium.strategies.backends`) under a token
budget and returns :class:`ContextFragment` objects. The executor wraps each
run in a :class:`ContextStrategyResult`.

Fragments are always ordered by ``(relevance_score DESC, node ASC)``
(:func:`sort_fragments`), so equal inputs give equal output.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from cognoxium.exceptions import StrategyError
from cognoxium.items.model import Role
from cognoxium.tokens.profiles import TokenProfile

if TYPE_CHECKING:
    from cognoxium.strategies.backends import Backends

__all__ = [
    "BACKEND_KINDS",
    "RESOURCE_TYPES",
    "ContextFragment",
    "ContextRequest",
    "ContextStrategy",
    "ContextStrategyResult",
    "StrategyCapabilities",
    "sort_fragments",
]

RESOURCE_TYPES: tuple[str, ...] = tuple(role.value for role in Role)
"""Every resource type: the item roles (``system`` ... ``memory``).

The resource type of a context item is its ``role``. A strategy declares the
types it retrieves in :attr:`StrategyCapabilities.resource_types`; a request
may ask for a subset in :attr:`ContextRequest.resource_types`.
"""

BACKEND_KINDS: tuple[str, ...] = ("text", "vector", "graph", "temporal")
"""The retrieval backends a strategy can require, in the order of :class:`Backends`."""


def _check_unit(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise StrategyError(f"{what} must be a number in [0, 1], got {value!r}")
    number = float(value)
    if not math.isfinite(number) or not 0.0 <= number <= 1.0:
        raise StrategyError(f"{what} must be in [0, 1], got {value!r}")
    return number


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class StrategyCapabilities:
    """What a strategy needs and offers.

    Parameters
    ----------
    uses_text
        Requires the text backend (BM25).
    uses_vector
        Requires the vector backend (embeddings).
    uses_graph
        Requires the graph backend (lineage, turn adjacency, speaker, session).
    uses_temporal
        Requires the temporal backend (hot, warm and cold tiers).
    resource_types
        The resource types (item roles, :data:`RESOURCE_TYPES`) the strategy
        retrieves. Every registered strategy must declare them: a registry
        holding a strategy with an empty tuple (the default) or with unknown
        types fails :meth:`StrategyRegistry.validate
        <cognoxium.strategies.registry.StrategyRegistry.validate>` (rule 3).
        Construction and :meth:`~StrategyRegistry.register
        <cognoxium.strategies.registry.StrategyRegistry.register>` accept an
        empty tuple, and :meth:`handles` then treats it as all types.
    quality_score
        Intrinsic quality in ``[0, 1]``; the budget allocator weighs a
        strategy by ``confidence × quality_score``.
    supports_depth_breadth
        Traverses outward from focus nodes by ``ContextRequest.breadth`` hops.
    supports_plan_hierarchy
        Walks the parent and ancestor plan hierarchy.
    supports_temporal
        Answers temporal archaeology queries (cold-tier history).

    Raises
    ------
    StrategyError
        If ``quality_score`` is outside ``[0, 1]`` or ``resource_types`` is
        not a tuple of strings.

    Examples
    --------
    >>> caps = StrategyCapabilities(uses_text=True, quality_score=0.3)
    >>> caps.backends, caps.resource_types, caps.supports_temporal
    (('text',), (), False)
    """

    uses_text: bool = False
    uses_vector: bool = False
    uses_graph: bool = False
    uses_temporal: bool = False
    resource_types: tuple[str, ...] = ()
    quality_score: float = 0.5
    supports_depth_breadth: bool = False
    supports_plan_hierarchy: bool = False
    supports_temporal: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "quality_score", _check_unit(self.quality_score, "quality_score"))
        types = self.resource_types
        if not isinstance(types, tuple) or not all(isinstance(t, str) and t for t in types):
            raise StrategyError(
                f"resource_types must be a tuple of non-empty strings, got {types!r}"
            )

    @property
    def backends(self) -> tuple[str, ...]:
        """The backends this strategy requires, in :data:`BACKEND_KINDS` order."""
        flags = (self.uses_text, self.uses_vector, self.uses_graph, self.uses_temporal)
        return tuple(kind for kind, used in zip(BACKEND_KINDS, flags, strict=True) if used)

    def handles(self, resource_types: Iterable[str]) -> tuple[str, ...]:
        """The requested resource types this strategy retrieves.

        An empty request means all types; empty :attr:`resource_types` also
        match all types here, although such a strategy fails registry
        validation (rule 3).

        Parameters
        ----------
        resource_types
            The requested resource types (``ContextRequest.resource_types``).

        Returns
        -------
        tuple of str
            The types both sides allow, in :data:`RESOURCE_TYPES` order; empty
            when they share none.

        Examples
        --------
        >>> StrategyCapabilities(resource_types=("memory", "user")).handles(["user", "tool"])
        ('user',)
        >>> len(StrategyCapabilities().handles([]))
        7
        """
        ours = set(self.resource_types) or set(RESOURCE_TYPES)
        wanted = set(resource_types) or set(RESOURCE_TYPES)
        return tuple(t for t in RESOURCE_TYPES if t in ours and t in wanted)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ContextRequest:
    """What context to assemble.

    Parameters
    ----------
    query
        The question or task, in natural language.
    keywords
        Search terms for keyword retrieval; when empty, the query is searched.
    focus_nodes
        Item ids to start graph traversal from (the current turn, the current
        plan node, ...).
    breadth
        Graph hops to expand outward from the focus nodes, at least 0.
    resource_types
        Resource types (item roles) wanted; empty means all.
    as_of
        The UTC time ages are measured from (temporal tiers); ``None`` takes
        the temporal backend's reference time.
    profile
        The token profile that counts fragment tokens: a name for
        :func:`cognoxium.tokens.profiles.get_profile` or a :class:`TokenProfile`.

    Raises
    ------
    StrategyError
        On a negative breadth, an unknown resource type or a naive ``as_of``.

    Examples
    --------
    >>> request = ContextRequest(query="Where did Ann move?", focus_nodes=("t1",), breadth=2)
    >>> request.search_text, request.breadth
    ('Where did Ann move?', 2)
    """

    query: str
    keywords: tuple[str, ...] = ()
    focus_nodes: tuple[str, ...] = ()
    breadth: int = 1
    resource_types: tuple[str, ...] = ()
    as_of: datetime | None = None
    profile: str | TokenProfile = "cl100k_base"

    def __post_init__(self) -> None:
        if not isinstance(self.query, str):
            raise StrategyError(f"ContextRequest.query must be a string, got {self.query!r}")
        for field in ("keywords", "focus_nodes", "resource_types"):
            value = getattr(self, field)
            if isinstance(value, str) or not all(isinstance(v, str) for v in value):
                raise StrategyError(
                    f"ContextRequest.{field} must be a tuple of strings, got {value!r}"
                )
            object.__setattr__(self, field, tuple(value))
        if isinstance(self.breadth, bool) or not isinstance(self.breadth, int) or self.breadth < 0:
            raise StrategyError(
                f"ContextRequest.breadth must be a non-negative int (hops), got {self.breadth!r}"
            )
        unknown = sorted(set(self.resource_types) - set(RESOURCE_TYPES))
        if unknown:
            raise StrategyError(
                f"ContextRequest.resource_types has unknown types {unknown}; "
                f"known: {list(RESOURCE_TYPES)}"
            )
        if self.as_of is not None and (self.as_of.tzinfo is None or self.as_of.utcoffset() is None):
            raise StrategyError(
                f"ContextRequest.as_of must be timezone-aware (UTC), got {self.as_of!r}"
            )

    @property
    def search_text(self) -> str:
        """The text keyword search runs: the keywords joined by spaces, else the query."""
        return " ".join(self.keywords) if self.keywords else self.query


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ContextFragment:
    """One retrieved context item.

    Parameters
    ----------
    node
        The item's id.
    text
        The text packing renders for the item (see
        :func:`cognoxium.retrieval.ranking.packed_text_expr`).
    relevance_score
        Relevance in ``[0, 1]`` for the built-in strategies (scores are
        normalised by the best hit of their backend); higher is better.
    tokens
        The item's cost under the request's token profile, in tokens: content
        plus the chat framing of its rendered role, as
        :func:`cognoxium.packing.packer.pack` counts it.
    strategy
        The name of the strategy that produced it.
    backend
        The backend that found it: ``"text"``, ``"vector"``, ``"graph"`` or
        ``"temporal"``.

    Raises
    ------
    StrategyError
        On an empty node, a non-finite relevance or negative tokens.
    """

    node: str
    text: str
    relevance_score: float
    tokens: int
    strategy: str
    backend: str

    def __post_init__(self) -> None:
        if not isinstance(self.node, str) or not self.node:
            raise StrategyError(f"ContextFragment.node must be a non-empty id, got {self.node!r}")
        score = self.relevance_score
        if (
            isinstance(score, bool)
            or not isinstance(score, int | float)
            or not math.isfinite(score)
        ):
            raise StrategyError(
                f"ContextFragment {self.node!r}: relevance_score must be a finite number, "
                f"got {score!r}"
            )
        object.__setattr__(self, "relevance_score", float(score))
        if isinstance(self.tokens, bool) or not isinstance(self.tokens, int) or self.tokens < 0:
            raise StrategyError(
                f"ContextFragment {self.node!r}: tokens must be a non-negative int, "
                f"got {self.tokens!r}"
            )


def sort_fragments(fragments: Iterable[ContextFragment]) -> tuple[ContextFragment, ...]:
    """Order fragments by ``(relevance_score DESC, node ASC)``.

    Examples
    --------
    >>> f = [ContextFragment(node=n, text="", relevance_score=s, tokens=1,
    ...                      strategy="x", backend="text")
    ...      for n, s in (("b", 0.5), ("c", 0.9), ("a", 0.5))]
    >>> [x.node for x in sort_fragments(f)]
    ['c', 'a', 'b']
    """
    return tuple(sorted(fragments, key=lambda f: (-f.relevance_score, f.node)))


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ContextStrategyResult:
    """The output of one strategy execution.

    Parameters
    ----------
    strategy_name
        The name of the producing strategy.
    fragments
        The fragments, ordered by ``(relevance_score DESC, node ASC)``, after
        the fragment limit and the budget.
    total_fragments
        The number of fragments the strategy returned, before limits.
    tokens_used
        The sum of the fragments' tokens, in tokens.
    execution_time_ms
        Wall-clock time of the execution, in milliseconds (0 when skipped).
    errors
        What went wrong, one message each (exceptions, timeouts, an open
        circuit breaker, a trimmed over-budget answer); empty on success.
    stats
        Strategy-specific statistics (budget, candidates per backend, ...).
    """

    strategy_name: str
    fragments: tuple[ContextFragment, ...] = ()
    total_fragments: int = 0
    tokens_used: int = 0
    execution_time_ms: float = 0.0
    errors: tuple[str, ...] = ()
    stats: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when the execution recorded no error."""
        return not self.errors


@runtime_checkable
class ContextStrategy(Protocol):
    """What every context strategy implements.

    A strategy is registered in a
    :class:`~cognoxium.strategies.registry.StrategyRegistry` under its
    ``name``, polled by the
    :class:`~cognoxium.strategies.selector.StrategySelector`, given a token
    budget by the :class:`~cognoxium.strategies.allocator.BudgetAllocator` and
    run by the :class:`~cognoxium.strategies.executor.StrategyExecutor`.
    ``assemble`` may run in a worker thread, so it must not mutate shared
    state without a lock.
    """

    @property
    def name(self) -> str:
        """Unique strategy name, lowercase words joined by hyphens."""
        ...

    @property
    def capabilities(self) -> StrategyCapabilities:
        """Backend requirements and quality score."""
        ...

    def can_handle(self, request: ContextRequest, backends: Backends) -> float:
        """Return the confidence, in ``[0, 1]``, that this strategy serves ``request``.

        Parameters
        ----------
        request
            The request to be served.
        backends
            The backends available to the strategy; the selector calls this
            only when every backend of :attr:`capabilities` is present.

        Returns
        -------
        float
            A finite confidence in ``[0, 1]``; ``0`` declines the request.
            The selector skips (with a reason) a strategy that returns a
            value outside ``[0, 1]``, a non-number or a bool, or that raises.
        """
        ...

    def assemble(
        self,
        request: ContextRequest,
        backends: Backends,
        budget: int,
        plan_context: Mapping[str, Any] | None,
    ) -> list[ContextFragment]:
        """Retrieve fragments whose tokens sum to at most ``budget`` tokens.

        Parameters
        ----------
        request
            The request to serve.
        backends
            The backends to read (text, vector, graph, temporal).
        budget
            The token budget, in tokens (a non-negative int, counted with the
            request's token profile), that the returned fragments' tokens
            must not exceed.
        plan_context
            Planning context shared by every strategy of one assembly, or
            ``None``; strategies read the keys they know and ignore the
            rest (``plan-decision-context`` reads ``"plan_id"``, an item id
            or a list of ids to start the plan hierarchy walk from).

        Returns
        -------
        list of ContextFragment
            The retrieved fragments, any order. The executor deduplicates
            them by node, orders them by ``(relevance_score DESC, node
            ASC)``, limits them to ``max_fragments`` and trims an answer
            over ``budget``, reporting the trimming as an error.

        Raises
        ------
        Exception
            Any exception is caught by the executor, reported in the
            result's ``errors`` and counted as a circuit breaker failure.
        """
        ...

    def explain(self) -> str:
        """A human-readable description of what the strategy does."""
        ...
