"""Rank methods: each one plan node, declared once in the rank registry.

A rank method is one :func:`register_rank` call. It gives the method's plan
node (a :class:`Rank` subclass whose dataclass fields are the method's
arguments and defaults), how a caller's arguments are converted before the
node is built (a timedelta to seconds, a path to text, a default constant),
its lowering handler, optionally a batched lowering that scores many nodes
over the same rows at once, and what a batch request gives it (see
:class:`RankContext`). Everything that offers rank methods reads the
registry: :meth:`CognitionFrame.rank <cognoxium.frame.CognitionFrame.rank>`
(through :func:`rank_node`), the batch (:func:`cognoxium.app.batch.run_batch`,
which scores a scope's queries with :func:`collect_ranks`) and the command
line's ``--rank`` and ``--compare``.

A method added by an application or a test is declared the same way::

    @dataclass(frozen=True, slots=True, kw_only=True)
    class RankLength(Rank):
        '''The length of the ``text`` column in characters; 0.0 for no text.'''

        method: ClassVar[str] = "length"
        columns: ClassVar[tuple[str, ...]] = ("text",)

    def lower_length(node: RankLength, lf: pl.LazyFrame) -> pl.LazyFrame:
        length = pl.col("text").str.len_chars().fill_null(0).cast(pl.Float64)
        return lf.with_columns(length.alias("rank"))

    register_rank(RankLength, lower=lower_length)

after which ``frame.rank("length")``, ``run_batch(..., rank="length")`` and
``cognoxium pack --rank length`` (in a process that registered it) rank by it.
"""

from __future__ import annotations

import difflib
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import MISSING, dataclass, fields
from datetime import datetime
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar, Final, Literal, TypeAlias, get_args

import numpy as np
import numpy.typing as npt
import polars as pl
from typing_extensions import override

from cognoxium.engine.lowering import HANDLERS, Handler, lower, lower_node
from cognoxium.engine.optimizer import optimize
from cognoxium.engine.plan import TEXT_COLUMNS, Node, Scan, Source, check_time
from cognoxium.exceptions import PlanError

if TYPE_CHECKING:
    from cognoxium.retrieval.scope import RetrievalSettings
    from cognoxium.tokens.profiles import TokenProfile

__all__ = [
    "BATCH_SOURCES",
    "BatchSource",
    "Convert",
    "ManyHandler",
    "Rank",
    "RankBM25",
    "RankContext",
    "RankEmbedding",
    "RankEntry",
    "RankHybrid",
    "RankHybridLineage",
    "RankLearned",
    "RankPriority",
    "RankRecency",
    "RankStrategies",
    "collect_ranks",
    "rank_batches",
    "rank_columns",
    "rank_entry",
    "rank_methods",
    "rank_node",
    "register_rank",
    "unregister_rank",
]

# ---------------------------------------------------------------------------
# the nodes


@dataclass(frozen=True, slots=True, kw_only=True)
class Rank(Node):
    """Base of the rank nodes: write a ``rank`` column (float64, higher is better).

    Every row is scored; rows, their order and the other columns are kept.
    Each method is its own node type with its own arguments, named by the
    class attribute ``method`` (see :func:`rank_methods`), and lowered by its
    own handler. Scores depend on every row reaching the node (BM25's IDF,
    fused ranks), so no optimizer rule moves a filter, limit or projection
    across a rank. Ties are left as ties; a null input gives a null rank.
    """

    method: ClassVar[str] = ""
    columns: ClassVar[tuple[str, ...]] = ()
    input: Node

    def _check(self) -> None:
        self._require(self.columns, f"rank({self.method!r})")

    @override
    def _resolve_schema(self) -> pl.Schema:
        # Known without lowering: a method's handler may load its scorer
        # (strategies: the strategy registry and its backends) on first use.
        out = pl.Schema(self.input.schema, check_dtypes=False)  # its types are checked
        out["rank"] = pl.Float64()
        return out

    def arguments(self) -> dict[str, object]:
        """The method's arguments as shown by ``explain()``, in field order, set ones only."""
        out: dict[str, object] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in ("input", "schema", *self.child_fields) or value is None:
                continue
            out[f.name] = value
        return out

    @override
    def label(self) -> str:
        parts = [self.method]
        for name, value in self.arguments().items():
            if isinstance(value, datetime):
                value = value.isoformat()
            elif isinstance(value, float):
                value = f"{value:g}"
            elif isinstance(value, str) and name == "query":
                value = repr(value)
            parts.append(f"{name}={value}")
        return "Rank " + " ".join(parts)


def _check_query(node: Rank, query: str | None) -> None:
    if query is not None and not isinstance(query, str):
        raise PlanError(
            f"rank({node.method!r}) takes the query as a string, got {type(query).__name__} "
            f"{query!r}"
        )
    if query is None or not query.strip():
        raise PlanError(f"rank({node.method!r}) needs a non-empty query")


def _check_fraction(name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
        raise PlanError(f"{name} must be in [0, 1], got {value!r}")


def _check_rrf_k(value: float) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not 0 <= value < float("inf")
    ):
        raise PlanError(f"rrf_k must be a finite number >= 0, got {value!r}")


def _check_model(node: Rank, model: str) -> None:
    if not isinstance(model, str) or not model:
        raise PlanError(f"rank({node.method!r}) needs an embedding model name, got {model!r}")


def _check_fused(node: Rank, query: str, model: str, rrf_k: float, neighbours: float) -> None:
    _check_query(node, query)
    _check_model(node, model)
    _check_rrf_k(rrf_k)
    _check_fraction("neighbours", neighbours)
    Rank._check(node)


@dataclass(frozen=True, slots=True, kw_only=True)
class RankBM25(Rank):
    """Okapi BM25 of each row's packed text against ``query``, over exactly the rows here.

    0.0 where no query term occurs.
    """

    method: ClassVar[str] = "bm25"
    columns: ClassVar[tuple[str, ...]] = TEXT_COLUMNS
    query: str

    @override
    def _check(self) -> None:
        _check_query(self, self.query)
        Rank._check(self)


@dataclass(frozen=True, slots=True, kw_only=True)
class RankEmbedding(Rank):
    """Cosine similarity of each row's packed text with ``query`` under the embedder ``model``.

    0.0 for empty text; rounded to 6 decimals.
    """

    method: ClassVar[str] = "embedding"
    columns: ClassVar[tuple[str, ...]] = TEXT_COLUMNS
    query: str
    model: str = "minilm"

    @override
    def _check(self) -> None:
        _check_query(self, self.query)
        _check_model(self, self.model)
        Rank._check(self)


@dataclass(frozen=True, slots=True, kw_only=True)
class RankHybrid(Rank):
    """Reciprocal rank fusion (constant ``rrf_k``) of the BM25 and embedding orders.

    Each order breaks score ties by id; then neighbour expansion with weight
    ``neighbours`` (0 = off): ``max(s_i, λ·s_{i-1}, λ·s_{i+1})`` in row order.
    """

    method: ClassVar[str] = "hybrid"
    columns: ClassVar[tuple[str, ...]] = (*TEXT_COLUMNS, "id")
    query: str
    rrf_k: float
    model: str = "minilm"
    neighbours: float = 0.0

    @override
    def _check(self) -> None:
        _check_fused(self, self.query, self.model, self.rrf_k, self.neighbours)


def _check_lineage(node: Rank, lineage: Node) -> None:
    """Raise PlanError unless the lineage items hold the columns a lineage rank reads."""
    missing = [c for c in ("id", "parents", *TEXT_COLUMNS) if c not in lineage.schema]
    if missing:
        raise PlanError(f"rank({node.method!r}): the lineage items lack columns {missing}")


@dataclass(frozen=True, slots=True, kw_only=True)
class RankHybridLineage(Rank):
    """Reciprocal rank fusion of BM25, embedding, neighbour-window and lineage orders.

    The window list scores each row with the row before it (in row order);
    the lineage list gives each row the best cosine of the rows of
    ``lineage`` outside the input derived from it (whose ``parents`` hold its
    id); rows without derived rows are absent from that list. Constant
    ``rrf_k``, ties by id, then neighbour expansion as for :class:`RankHybrid`.
    """

    method: ClassVar[str] = "hybrid-lineage"
    columns: ClassVar[tuple[str, ...]] = (*TEXT_COLUMNS, "id")
    child_fields: ClassVar[tuple[str, ...]] = ("input", "lineage")
    lineage: Node
    query: str
    rrf_k: float
    model: str = "minilm"
    neighbours: float = 0.0

    @override
    def _check(self) -> None:
        _check_fused(self, self.query, self.model, self.rrf_k, self.neighbours)
        _check_lineage(self, self.lineage)

    @override
    def label(self) -> str:
        return Rank.label(self) + "; lineage from the second input"


@dataclass(frozen=True, slots=True, kw_only=True)
class RankLearned(Rank):
    """A learned ranker's utility ``log p - c·log_cost`` of each row as evidence for ``query``.

    ``p`` is the logistic model's probability over the ranking features of
    :mod:`cognoxium.retrieval.features` (the ``hybrid-lineage`` lists, BM25
    of windows and of derived rows, cosines, speaker, time and cost
    features), computed over exactly the rows here, with derived rows looked
    up in ``lineage``; ``model`` is the model file (``None``: the shipped
    one). Rounded to 9 decimals; ties are left as ties.
    """

    method: ClassVar[str] = "learned"
    columns: ClassVar[tuple[str, ...]] = (*TEXT_COLUMNS, "id", "role", "metadata")
    child_fields: ClassVar[tuple[str, ...]] = ("input", "lineage")
    lineage: Node
    query: str
    model: str | None = None

    @override
    def _check(self) -> None:
        _check_query(self, self.query)
        if self.model is not None and (not isinstance(self.model, str) or not self.model):
            raise PlanError(f"rank('learned'): model must be a file path, got {self.model!r}")
        Rank._check(self)
        _check_lineage(self, self.lineage)

    @override
    def label(self) -> str:
        return Rank.label(self) + "; lineage from the second input"


@dataclass(frozen=True, slots=True, kw_only=True)
class RankRecency(Rank):
    """Exponential decay ``exp(-ln 2 · age / half_life)`` of ``created_at``.

    Age in seconds before ``reference`` (default: the latest ``created_at``
    of the rows here); without ``half_life``, the Unix time in seconds.
    """

    method: ClassVar[str] = "recency"
    columns: ClassVar[tuple[str, ...]] = ("created_at",)
    half_life: float | None = None
    reference: datetime | None = None

    @override
    def _check(self) -> None:
        if self.half_life is not None and (
            isinstance(self.half_life, bool)
            or not isinstance(self.half_life, int | float)
            or not math.isfinite(self.half_life)
            or self.half_life <= 0
        ):
            raise PlanError(f"half_life must be positive seconds, got {self.half_life!r}")
        object.__setattr__(self, "reference", check_time("reference", self.reference))
        Rank._check(self)


@dataclass(frozen=True, slots=True, kw_only=True)
class RankPriority(Rank):
    """The ``priority`` as a float."""

    method: ClassVar[str] = "priority"
    columns: ClassVar[tuple[str, ...]] = ("priority",)


@dataclass(frozen=True, slots=True, kw_only=True)
class RankStrategies(Rank):
    """The context strategy registry's assembly of the rows for ``query`` under ``budget``.

    Rows the assembly selects score their fragment's relevance; the others
    -1.0. ``as_of`` (timezone-aware, converted to UTC) is the assembly's
    evaluation time. The scorer lives in :mod:`cognoxium.strategies.ranking`,
    loaded the first time such a node is lowered.
    """

    method: ClassVar[str] = "strategies"
    columns: ClassVar[tuple[str, ...]] = (*TEXT_COLUMNS, "id")
    query: str
    budget: int
    as_of: datetime | None = None
    profile: str | TokenProfile = "cl100k_base"
    model: str = "minilm"

    @override
    def _check(self) -> None:
        _check_query(self, self.query)
        _check_model(self, self.model)
        if isinstance(self.budget, bool) or not isinstance(self.budget, int) or self.budget < 0:
            raise PlanError(f"rank('strategies') needs a budget >= 0 tokens, got {self.budget!r}")
        named = isinstance(self.profile, str) and bool(self.profile)
        if not named and not hasattr(self.profile, "fingerprint"):
            raise PlanError(
                f"rank('strategies') needs a token profile or its name, got {self.profile!r}"
            )
        object.__setattr__(self, "as_of", check_time("as_of", self.as_of))
        Rank._check(self)

    @override
    def arguments(self) -> dict[str, object]:
        out = Rank.arguments(self)
        out["profile"] = getattr(self.profile, "name", self.profile)
        return out


# ---------------------------------------------------------------------------
# the registry

Convert: TypeAlias = Callable[[Any, str], Any]
"""``convert(value, method) -> value``: one argument as the node takes it.

Called for its field whether or not the caller gave it (``value`` is then
``None``), so it may supply a default; returning ``None`` leaves the field to
the node's own default. Raises :class:`~cognoxium.exceptions.PlanError` on a
bad value.
"""

ManyHandler: TypeAlias = Callable[..., pl.LazyFrame]
"""``lower_many(nodes, *inputs) -> LazyFrame``: ``k`` nodes of one method over the same inputs.

The result has ``k`` float64 columns, the ``i``-th the ``rank`` column
``nodes[i]`` alone would write, and one row per input row (see
:func:`rank_columns`).
"""

BatchSource = Literal[
    "query", "budget", "as_of", "profile", "model", "rrf_k", "neighbours", "ranker", "lineage"
]
"""What a batch request gives a rank argument (see :class:`RankContext`)."""

BATCH_SOURCES: Final[tuple[str, ...]] = get_args(BatchSource)
"""The values of :data:`BatchSource`."""

_PER_REQUEST: Final = ("query", "budget", "as_of")
"""The sources that differ between the requests of one batch: a scope's rank key."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RankContext:
    """What a batch request gives the rank of its scope.

    Attributes
    ----------
    query
        The request's query; ``None`` when it has none or a blank one.
    budget
        The request's item budget (its budget minus its reserve), in tokens.
    as_of
        The request's evaluation time (UTC).
    profile
        The batch's token profile, or its name.
    retrieval
        The batch's retrieval settings: ``model`` (the embedder), ``rrf_k``
        (``None``: the method's own constant), ``neighbours`` and ``ranker``
        (the learned ranker's model file).
    lineage
        Where derived items are looked up: the store (a frame).
    """

    query: str | None
    budget: int
    as_of: datetime | None
    profile: str | TokenProfile
    retrieval: RetrievalSettings
    lineage: object

    def value(self, source: str) -> Any:
        """The value of ``source`` (one of :data:`BATCH_SOURCES`) for this request."""
        if source in ("model", "rrf_k", "neighbours", "ranker"):
            return getattr(self.retrieval, source)
        return getattr(self, source)


@dataclass(frozen=True, slots=True, kw_only=True)
class RankEntry:
    """One rank method of the registry, as :func:`register_rank` declared it.

    Attributes
    ----------
    node
        The plan node type; its ``method`` names the method, its dataclass
        fields are the method's arguments and defaults.
    lower
        The lowering handler: ``lower(node, *inputs) -> LazyFrame`` with the
        ``rank`` column added (see :func:`rank_batches`).
    convert
        The converter of each argument that needs one (see :data:`Convert`).
    batch
        The node field each value of a batch request goes to: field name to
        :data:`BatchSource`. A method that takes ``query`` from the request
        does not rank a request without one.
    lower_many
        The batched lowering (see :data:`ManyHandler`), or ``None``.
    """

    node: type[Rank]
    lower: Handler
    convert: Mapping[str, Convert]
    batch: Mapping[str, str]
    lower_many: ManyHandler | None = None

    @property
    def method(self) -> str:
        """The method's name."""
        return self.node.method

    @property
    def reads_lineage(self) -> bool:
        """Whether a batch gives the method the store, to look derived items up in."""
        return "lineage" in self.batch.values()

    def batch_arguments(self, context: RankContext) -> dict[str, Any] | None:
        """The method's arguments for a batch request, ``None`` when the request is not ranked.

        Examples
        --------
        >>> from cognoxium.retrieval.scope import RetrievalSettings
        >>> context = RankContext(query="refund", budget=100, as_of=None,
        ...                       profile="cl100k_base", retrieval=RetrievalSettings(),
        ...                       lineage=None)
        >>> rank_entry("embedding").batch_arguments(context)
        {'query': 'refund', 'model': 'minilm'}
        >>> rank_entry("bm25").batch_key(context), rank_entry("recency").batch_key(context)
        (('refund',), ())
        """
        if "query" in self.batch.values() and context.query is None:
            return None
        return {name: context.value(source) for name, source in self.batch.items()}

    def batch_key(self, context: RankContext) -> tuple[Any, ...] | None:
        """The key of a request's rank among its scope's ranks; ``None`` when not ranked.

        Two requests of one batch over one scope with equal keys have equal
        ranks: the key holds what the method takes from the request (its
        query, item budget and time), in field order.
        """
        if "query" in self.batch.values() and context.query is None:
            return None
        return tuple(context.value(s) for s in self.batch.values() if s in _PER_REQUEST)


_REGISTRY: dict[str, RankEntry] = {}


def _init_fields(node: type[Rank]) -> list[str]:
    return [f.name for f in fields(node) if f.init and f.name != "input"]


def register_rank(
    node: type[Rank],
    *,
    lower: Handler,
    convert: Mapping[str, Convert] | None = None,
    batch: Mapping[str, str] | None = None,
    lower_many: ManyHandler | None = None,
) -> RankEntry:
    """Declare a rank method: its node, argument conversion, lowering and batch behaviour.

    Parameters
    ----------
    node
        A :class:`Rank` subclass (a frozen, slotted, keyword-only dataclass)
        with a class attribute ``method``, the method's name, and its
        arguments as fields.
    lower
        Its lowering handler (``handler(node, *inputs) -> LazyFrame``, one
        input per child): the input with a float64 ``rank`` column.
    convert
        Converters of the arguments a caller may give in another form, by
        field (see :data:`Convert`).
    batch
        What a batch request gives the method, by field (see
        :class:`RankContext`); default nothing: every request is ranked alike.
    lower_many
        A batched lowering scoring many nodes over the same rows at once (see
        :data:`ManyHandler`); default: each node is lowered alone.

    Returns
    -------
    RankEntry
        The registered entry.

    Raises
    ------
    PlanError
        If ``node`` is not a :class:`Rank` subclass naming its method, the
        method is already registered, or ``convert`` or ``batch`` name a
        field the node does not have or ``batch`` a source not in
        :data:`BATCH_SOURCES`.

    Notes
    -----
    A batch packed in worker processes (``run_batch(workers=N)`` starts
    them with ``spawn``) finds a method there only when registering it is
    part of importing a module they import (the main script is one): call
    ``register_rank`` at a module's import, or pack with ``workers=1``.
    """
    if not (isinstance(node, type) and issubclass(node, Rank)):
        raise PlanError(f"register_rank needs a Rank subclass, got {node!r}")
    method = node.method
    if not isinstance(method, str) or not method or method == "none":
        raise PlanError(f"{node.__name__}.method must name the method, got {method!r}")
    if method in _REGISTRY:
        raise PlanError(f"rank method {method!r} is already registered")
    names = _init_fields(node)
    convert = dict(convert or {})
    batch = dict(batch or {})
    unknown = [name for name in (*convert, *batch) if name not in names]
    if unknown:
        raise PlanError(f"rank({method!r}) has no argument {unknown}; its arguments are {names}")
    sources = [source for source in batch.values() if source not in BATCH_SOURCES]
    if sources:
        raise PlanError(f"unknown batch sources {sources}; use any of {list(BATCH_SOURCES)}")
    entry = RankEntry(
        node=node,
        lower=lower,
        convert=MappingProxyType(convert),
        batch=MappingProxyType(batch),
        lower_many=lower_many,
    )
    _REGISTRY[method] = entry
    HANDLERS[node] = lower
    return entry


def unregister_rank(method: str) -> RankEntry:
    """Remove a rank method from the registry (and its node's handler); return its entry.

    Raises
    ------
    PlanError
        If ``method`` is not registered.
    """
    entry = rank_entry(method)
    del _REGISTRY[method]
    HANDLERS.pop(entry.node, None)
    return entry


def rank_methods() -> tuple[str, ...]:
    """The registered rank methods, in the order they were registered.

    Examples
    --------
    >>> rank_methods()[:3]
    ('bm25', 'embedding', 'hybrid')
    """
    return tuple(_REGISTRY)


def rank_entry(method: str) -> RankEntry:
    """The registry's entry of ``method``.

    Raises
    ------
    PlanError
        If no method of that name is registered; the message lists the
        methods and the closest one.
    """
    entry = _REGISTRY.get(method) if isinstance(method, str) else None
    if entry is None:
        methods = list(_REGISTRY)
        close = difflib.get_close_matches(str(method), methods, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise PlanError(f"unknown rank method {method!r}; use one of {methods}{hint}")
    return entry


_REQUIRED_TEXT: Final = {
    "query": "a non-empty query",
    "budget": "a budget (tokens)",
    "lineage": "lineage (the frame holding the derived items)",
    "rrf_k": "rrf_k (the reciprocal rank fusion constant)",
}


def rank_node(method: str, *, input: Node, **arguments: Any) -> Rank:
    """Build the rank node of ``method`` over ``input`` with its keyword ``arguments``.

    Arguments set to ``None`` count as not given; the others are converted as
    the method's entry says, then checked by the node. A second input the
    method reads (``lineage``) that is not given is ``input`` itself.

    Raises
    ------
    PlanError
        On an unknown method, an argument the method does not take, a
        missing query or budget, or a bad value.

    Examples
    --------
    >>> scan = Scan(source=Source(pl.DataFrame({"priority": [1, 2]})))
    >>> rank_node("priority", input=scan).label()
    'Rank priority'
    >>> rank_node("priority", input=scan, query="x")
    Traceback (most recent call last):
    ...
    cognoxium.exceptions.PlanError: rank('priority') takes no query; it takes no arguments
    """
    entry = rank_entry(method)
    node_type = entry.node
    given = {name: value for name, value in arguments.items() if value is not None}
    accepted = _init_fields(node_type)
    extra = [name for name in given if name not in accepted]
    if extra:
        takes = ", ".join(a for a in accepted if a not in node_type.child_fields) or "no arguments"
        raise PlanError(f"rank({method!r}) takes no {', '.join(extra)}; it takes {takes}")
    for name, convert in entry.convert.items():
        value = convert(given.get(name), method)
        if value is None:
            given.pop(name, None)
        else:
            given[name] = value
    for name in node_type.child_fields[1:]:
        if name not in given:
            given[name] = input  # the frame itself: its own rows are the ones looked up
        elif not isinstance(given[name], Node):
            raise PlanError(f"rank({method!r}): {name} must be a frame, got {given[name]!r}")
    required = [
        f.name
        for f in fields(node_type)
        if f.init and f.name != "input" and f.default is MISSING and f.default_factory is MISSING
    ]
    missing = [_REQUIRED_TEXT.get(name, name) for name in required if name not in given]
    if missing:
        raise PlanError(f"rank({method!r}) needs {' and '.join(missing)}")
    return node_type(input=input, **given)


def collect_ranks(nodes: Sequence[Rank]) -> list[pl.Series]:
    """The ``rank`` column of each node, for nodes of one method over the same input.

    The input is optimized and lowered once; the method's batched lowering,
    when it has one, scores every node in one pass (BM25 tokenizes all the
    queries in one call; the learned rank embeds them, and their forms
    without the speakers' names, in one run of the model), else each node
    is lowered alone. Each column equals what the node alone gives.

    Parameters
    ----------
    nodes
        ``k`` rank nodes of one type whose children are equal.

    Returns
    -------
    list of polars.Series
        ``k`` float64 columns named ``rank``, one value per input row.

    Raises
    ------
    PlanError
        If the nodes differ in method or input.

    Examples
    --------
    >>> scan = Scan(source=Source(pl.DataFrame({
    ...     "payload_kind": ["text"] * 2, "text": ["a cat sat", "a dog ran"],
    ...     "json": [None, None], "ref_uri": [None, None], "ref_title": [None, None],
    ...     "content_hash": ["h1", "h2"]})))
    >>> cat, dog = (rank_node("bm25", input=scan, query=q) for q in ("cat", "dog"))
    >>> [int(column.arg_max()) for column in collect_ranks([cat, dog])]
    [0, 1]
    """
    if not nodes:
        return []
    first = nodes[0]
    if any(type(n) is not type(first) or n.children != first.children for n in nodes[1:]):
        raise PlanError("collect_ranks needs rank nodes of one method over the same input")
    entry = rank_entry(first.method)
    inputs = [lower(optimize(child)) for child in first.children]
    if entry.lower_many is None:
        return [lower_node(n, inputs).select("rank").collect().to_series() for n in nodes]
    scored = entry.lower_many(list(nodes), *inputs).collect()
    return [scored.to_series(i).alias("rank") for i in range(len(nodes))]


# ---------------------------------------------------------------------------
# lowering helpers


def rank_batches(
    lf: pl.LazyFrame, scores: Callable[[pl.DataFrame], npt.NDArray[np.float64]]
) -> pl.LazyFrame:
    """Write ``scores(rows)`` as the ``rank`` column, computed over all rows in one call.

    BM25's IDF and fused ranks depend on every row reaching the rank, so no
    filter, projection or slice may pass it (embedding scores alone are per
    row, but share this one batched call).

    Parameters
    ----------
    lf
        The rows to rank.
    scores
        Maps the collected rows to ``(n,)`` scores, higher is better.

    Returns
    -------
    polars.LazyFrame
        ``lf`` with the float64 ``rank`` column.
    """

    def score(df: pl.DataFrame) -> pl.DataFrame:
        return df.with_columns(pl.Series("rank", scores(df), dtype=pl.Float64))

    schema = pl.Schema(lf.collect_schema())
    schema["rank"] = pl.Float64()
    return lf.map_batches(
        score,
        schema=schema,
        predicate_pushdown=False,
        projection_pushdown=False,
        slice_pushdown=False,
        streamable=False,
    )


def rank_columns(
    lf: pl.LazyFrame,
    scores: Callable[[pl.DataFrame], Sequence[npt.NDArray[np.float64]]],
    count: int,
) -> pl.LazyFrame:
    """``count`` rank columns of the rows, ``scores(rows)``, computed over all rows in one call.

    What a batched lowering (:data:`ManyHandler`) returns; the rows pass
    whole, as in :func:`rank_batches`.

    Parameters
    ----------
    lf
        The rows to rank.
    scores
        Maps the collected rows to ``count`` arrays of ``(n,)`` scores.
    count
        The number of columns.

    Returns
    -------
    polars.LazyFrame
        ``count`` float64 columns ``rank_0``, ``rank_1``, ... and nothing else.
    """
    names = [f"rank_{i}" for i in range(count)]

    def score(df: pl.DataFrame) -> pl.DataFrame:
        columns = scores(df)
        return pl.DataFrame(
            [pl.Series(name, s, dtype=pl.Float64) for name, s in zip(names, columns, strict=True)]
        )

    return lf.map_batches(
        score,
        schema=pl.Schema(dict.fromkeys(names, pl.Float64())),
        predicate_pushdown=False,
        projection_pushdown=False,
        slice_pushdown=False,
        streamable=False,
    )


_BM25_CORPUS = "bm25_corpus"
"""Key of a table's BM25 corpus (packed texts and index cache key) in its source's cache."""


def _table_cache(node: Rank) -> dict[str, Any] | None:
    """The cache of the in-memory table a rank scores as stored, else None.

    A rank directly over a whole :class:`Source` scores the table's rows,
    which never change, so what they alone decide may be kept with the table.
    """
    scan = node.input
    if isinstance(scan, Scan) and isinstance(scan.source, Source) and scan.columns is None:
        return scan.source.cache
    return None


def _bm25_corpus(
    kept: dict[str, Any] | None, df: pl.DataFrame
) -> tuple[pl.Series, tuple[str | int, ...]]:
    """The texts ranking reads of the rows and their BM25 corpus key, kept with their table.

    The texts are read as every rank reads them: each item's first
    :data:`~cognoxium.retrieval.embeddings.MAX_READ_CHARS` characters (see
    :func:`~cognoxium.retrieval.scope.read_texts`).
    """
    from cognoxium.retrieval.ranking import corpus_key
    from cognoxium.retrieval.scope import read_texts

    found: tuple[pl.Series, tuple[str | int, ...]] | None = (
        None if kept is None else kept.get(_BM25_CORPUS)
    )
    if found is None:
        found = read_texts(df, corpus_key(df.get_column("content_hash")))
        if kept is not None:
            kept[_BM25_CORPUS] = found
    return found


# ---------------------------------------------------------------------------
# the built-in methods


def _lower_bm25(node: RankBM25, lf: pl.LazyFrame) -> pl.LazyFrame:
    from cognoxium.retrieval.ranking import bm25_scores

    kept = _table_cache(node)

    def scores(df: pl.DataFrame) -> npt.NDArray[np.float64]:
        texts, key = _bm25_corpus(kept, df)
        return bm25_scores(texts, node.query, cache_key=key)

    return rank_batches(lf, scores)


def _lower_bm25_many(nodes: Sequence[RankBM25], lf: pl.LazyFrame) -> pl.LazyFrame:
    from cognoxium.retrieval.ranking import bm25_scores_many

    kept = _table_cache(nodes[0])
    queries = [node.query for node in nodes]

    def scores(df: pl.DataFrame) -> list[npt.NDArray[np.float64]]:
        texts, key = _bm25_corpus(kept, df)
        return bm25_scores_many(texts, queries, cache_key=key)

    return rank_columns(lf, scores, len(nodes))


def _lower_embedding(node: RankEmbedding, lf: pl.LazyFrame) -> pl.LazyFrame:
    from cognoxium.retrieval.embeddings import embedding_scores

    return rank_batches(lf, lambda df: embedding_scores(df, node.query, node.model))


def _settings(node: RankHybrid | RankHybridLineage) -> RetrievalSettings:
    from cognoxium.retrieval.scope import RetrievalSettings

    return RetrievalSettings(model=node.model, rrf_k=node.rrf_k, neighbours=node.neighbours)


def _lower_hybrid(node: RankHybrid, lf: pl.LazyFrame) -> pl.LazyFrame:
    from cognoxium.retrieval.scope import scope_retriever

    def scores(df: pl.DataFrame) -> npt.NDArray[np.float64]:
        return scope_retriever(df, "hybrid", _settings(node)).scores(node.query)

    return rank_batches(lf, scores)


def _lower_hybrid_lineage(
    node: RankHybridLineage, lf: pl.LazyFrame, lineage: pl.LazyFrame
) -> pl.LazyFrame:
    from cognoxium.retrieval.scope import scope_retriever

    def scores(df: pl.DataFrame) -> npt.NDArray[np.float64]:
        # The lineage plan identifies its rows (a scan's source is equal only
        # to itself), so a batch over one store collects and links it once.
        retriever = scope_retriever(
            df, "hybrid-lineage", _settings(node), lineage=lineage.collect, lineage_key=node.lineage
        )
        return retriever.scores(node.query)

    return rank_batches(lf, scores)


def _lower_learned(node: RankLearned, lf: pl.LazyFrame, lineage: pl.LazyFrame) -> pl.LazyFrame:
    return rank_batches(lf, lambda df: _learned_scores([node], df, lineage)[0])


def _lower_learned_many(
    nodes: Sequence[RankLearned], lf: pl.LazyFrame, lineage: pl.LazyFrame
) -> pl.LazyFrame:
    return rank_columns(lf, lambda df: _learned_scores(nodes, df, lineage), len(nodes))


def _learned_scores(
    nodes: Sequence[RankLearned], df: pl.DataFrame, lineage: pl.LazyFrame
) -> list[npt.NDArray[np.float64]]:
    """Each node's learned scores of the rows ``df``; the queries of a model embedded at once."""
    from cognoxium.retrieval.features import feature_extractor
    from cognoxium.retrieval.learned import learned_scores, load_model
    from cognoxium.retrieval.scope import RetrievalSettings

    models = {path: load_model(path) for path in dict.fromkeys(node.model for node in nodes)}
    extractors = {}
    for path, model in models.items():
        settings = RetrievalSettings(model=model.embedding_model)
        extractor = feature_extractor(
            df, settings, lineage=lineage.collect, lineage_key=nodes[0].lineage
        )
        extractor.embed_queries(node.query for node in nodes if node.model == path)
        extractors[path] = extractor
    return [learned_scores(extractors[n.model], n.query, models[n.model]) for n in nodes]


def _lower_recency(node: RankRecency, lf: pl.LazyFrame) -> pl.LazyFrame:
    from cognoxium.retrieval.ranking import recency_expr

    return lf.with_columns(recency_expr(half_life=node.half_life, reference=node.reference))


def _lower_priority(node: RankPriority, lf: pl.LazyFrame) -> pl.LazyFrame:
    return lf.with_columns(pl.col("priority").cast(pl.Float64).alias("rank"))


def _lower_strategies(node: RankStrategies, lf: pl.LazyFrame) -> pl.LazyFrame:
    # The strategy registry and its backends (BM25, embeddings, graph,
    # temporal tiers) load only for a plan that ranks by them.
    from cognoxium.strategies.ranking import strategy_scores

    return rank_batches(lf, lambda rows: strategy_scores(node, rows))


def _seconds(value: Any, method: str) -> float | None:
    """A half-life in seconds, from seconds or a timedelta."""
    from cognoxium.retrieval.ranking import half_life_seconds

    return half_life_seconds(value)


def _embedder(value: Any, method: str) -> str:
    """An embedder's name (default ``minilm``), checked against the embedders there are."""
    from cognoxium.retrieval.embeddings import EMBEDDER_NAMES

    model = "minilm" if value is None else value
    if model not in EMBEDDER_NAMES:
        raise PlanError(
            f"rank({method!r}): unknown model {model!r}; use one of {list(EMBEDDER_NAMES)}"
        )
    return str(model)


def _model_file(value: Any, method: str) -> Any:
    """A model file's path as text."""
    return os.fspath(value) if isinstance(value, os.PathLike) else value


def _fusion_k(value: Any, method: str) -> Any:
    """The reciprocal rank fusion constant; default the method's own (:data:`RRF_K`)."""
    from cognoxium.retrieval.scope import RRF_K

    return RRF_K[method] if value is None else value


_FUSED: Final[dict[str, str]] = {
    "query": "query",
    "model": "model",
    "rrf_k": "rrf_k",
    "neighbours": "neighbours",
}

register_rank(RankBM25, lower=_lower_bm25, batch={"query": "query"}, lower_many=_lower_bm25_many)
register_rank(
    RankEmbedding,
    lower=_lower_embedding,
    convert={"model": _embedder},
    batch={"query": "query", "model": "model"},
)
register_rank(
    RankHybrid,
    lower=_lower_hybrid,
    convert={"model": _embedder, "rrf_k": _fusion_k},
    batch=_FUSED,
)
register_rank(
    RankHybridLineage,
    lower=_lower_hybrid_lineage,
    convert={"model": _embedder, "rrf_k": _fusion_k},
    batch={**_FUSED, "lineage": "lineage"},
)
register_rank(
    RankLearned,
    lower=_lower_learned,
    convert={"model": _model_file},
    batch={"query": "query", "model": "ranker", "lineage": "lineage"},
    lower_many=_lower_learned_many,
)
register_rank(RankRecency, lower=_lower_recency, convert={"half_life": _seconds})
register_rank(RankPriority, lower=_lower_priority)
register_rank(
    RankStrategies,
    lower=_lower_strategies,
    convert={"model": _embedder},
    batch={
        "query": "query",
        "budget": "budget",
        "as_of": "as_of",
        "profile": "profile",
        "model": "model",
    },
)
