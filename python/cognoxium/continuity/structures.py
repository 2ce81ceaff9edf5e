"""Structures: the indexes a strategy searches to answer a query.

A :class:`Structure` declares the contract of its input (``query_input``, a
:class:`StructureQuery` subclass) and returns a :class:`StructureOutput`
(hits and groups). It searches the memory it is given; structures that keep
their own index update it in :meth:`Structure.add` when a note is admitted.

:class:`FlatStructure` (kind ``flat``) is exact cosine search over every
stored note.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

import numpy as np
import numpy.typing as npt
from pydantic import ConfigDict, Field, SerializeAsAny, model_validator

from cognoxium.continuity._contract import Contract, Seconds, Vector
from cognoxium.continuity.memory import MemoryBackend
from cognoxium.continuity.notes import Group, Hit, Note
from cognoxium.exceptions import ContractError

__all__ = [
    "SCORE_DECIMALS",
    "FlatQuery",
    "FlatStructure",
    "Structure",
    "StructureOutput",
    "StructureQuery",
]

SCORE_DECIMALS = 6
"""Decimal places :class:`FlatStructure` rounds its cosine scores to."""


class StructureQuery(Contract):
    """Base of every structure's input contract; it has no fields of its own.

    A structure sets ``query_input`` to a subclass declaring the fields it
    reads. The default strategy fills those of ``vector``, ``k``,
    ``time_range`` and ``anchor_id`` the subclass declares (see
    :class:`~cognoxium.continuity.strategy.DefaultStrategy`).
    """


class StructureOutput(Contract):
    """What a structure returns: hits (best first) and groups.

    Unlike other contracts it keeps unknown fields (``extra="allow"``), so a
    subclass's extra fields survive a round trip through
    :class:`~cognoxium.continuity.broker.RetrieveOutput` ``raw``.

    Raises
    ------
    ContractError
        If two hits share an id.
    """

    model_config = ConfigDict(extra="allow")

    hits: list[SerializeAsAny[Hit]] = Field(default_factory=list)
    groups: list[SerializeAsAny[Group]] = Field(default_factory=list)

    @model_validator(mode="after")
    def _distinct_hits(self) -> StructureOutput:
        ids = [hit.id for hit in self.hits]
        if len(set(ids)) != len(ids):
            repeated = sorted({i for i in ids if ids.count(i) > 1})
            raise ValueError(f"hit ids must be distinct; repeated: {repeated}")
        return self


class Structure(ABC):
    """An index over admitted notes that answers a :class:`StructureQuery`.

    Subclasses set ``kind`` (the name a ``cognoxium.toml`` file selects them
    by), ``query_input`` (their input contract) and implement :meth:`search`.
    """

    kind: ClassVar[str] = ""
    query_input: ClassVar[type[StructureQuery]] = StructureQuery

    def add(self, note: Note, vector: npt.NDArray[np.float32]) -> None:  # noqa: B027
        """Index a note the strategy admitted (already stored in memory).

        The default does nothing: structures that search the memory directly
        need no index of their own.

        Parameters
        ----------
        note
            The admitted note, already stored with
            :meth:`MemoryBackend.put <cognoxium.continuity.memory.MemoryBackend.put>`.
        vector
            The note's embedding, shape ``(dim,)``, ``float32``; the same
            vector the memory stored.

        Returns
        -------
        None
        """

    @abstractmethod
    def search(self, query: StructureQuery, memory: MemoryBackend) -> StructureOutput:
        """Answer ``query`` (an instance of ``query_input``) over ``memory``.

        Parameters
        ----------
        query
            An instance of this structure's ``query_input``, its fields
            filled by the strategy.
        memory
            The memory holding every admitted note and its vector.

        Returns
        -------
        StructureOutput
            The hits, best first, with distinct ids, and any groups.

        Raises
        ------
        ContractError
            If ``query`` is not an instance of ``query_input``.
        """


class FlatQuery(StructureQuery):
    """The input of :class:`FlatStructure`.

    Parameters
    ----------
    vector
        The query vector, shape ``(dim,)``, or ``None``.
    k
        At most this many hits, at least 1.
    time_range
        ``(start, end)``, both inclusive, seconds since the Unix epoch (UTC),
        or ``None`` for all time.
    anchor_id
        A stored note to search near, or ``None``.
    """

    vector: Vector | None = None
    k: int = Field(default=10, ge=1)
    time_range: tuple[Seconds, Seconds] | None = None
    anchor_id: str | None = Field(default=None, min_length=1)


class FlatStructure(Structure):
    """Exact cosine search over every stored note (kind ``flat``).

    The reference vector is the query's ``vector``; without one, the anchor
    note's stored vector; without either there is nothing to compare with
    and there are no hits. Each note scores the cosine similarity of its
    vector with the reference (0 where either vector is zero), computed in
    ``float32`` over the whole memory at once and rounded to
    :data:`SCORE_DECIMALS` decimal places, so float32 rounding noise (about
    1e-7) does not decide between mathematically equal scores (such as those
    of ``(-1, 2, 2)`` and ``(0, 0, 1)`` against ``(1, 1, 1)``).

    A note is a candidate when its score is positive (a note sharing nothing
    with the reference is no evidence), its timestamp lies in ``time_range``
    (inclusive) and it is not the anchor. The ``k`` best candidates are
    returned ordered by score descending, then by id ascending (code-point
    order), so ties are deterministic: a note outside the top ``k`` never
    displaces a tied note with a smaller id. No groups.

    Raises
    ------
    ContractError
        If the query is not a :class:`FlatQuery`, or its vector's dimension
        differs from the memory's.
    UnknownNoteError
        If ``anchor_id`` is not in memory.

    Examples
    --------
    >>> from cognoxium.continuity.memory import InMemoryBackend
    >>> memory = InMemoryBackend()
    >>> memory.put(Note(id="b", text="", timestamp=1), [1.0, 0.0])
    >>> memory.put(Note(id="a", text="", timestamp=2), [2.0, 0.0])
    >>> memory.put(Note(id="c", text="", timestamp=3), [1.0, 1.0])
    >>> out = FlatStructure().search(FlatQuery(vector=[1.0, 0.0], k=2), memory)
    >>> [(h.id, h.score) for h in out.hits]
    [('a', 1.0), ('b', 1.0)]
    >>> [h.id for h in FlatStructure().search(FlatQuery(anchor_id="c", k=5), memory).hits]
    ['a', 'b']
    """

    kind: ClassVar[str] = "flat"
    query_input: ClassVar[type[StructureQuery]] = FlatQuery

    def __repr__(self) -> str:
        return "FlatStructure()"

    def search(self, query: StructureQuery, memory: MemoryBackend) -> StructureOutput:
        """Return the ``k`` notes most similar to the reference vector (see the class)."""
        if not isinstance(query, FlatQuery):
            raise ContractError(
                f"FlatStructure.search takes a FlatQuery, got {type(query).__name__}"
            )
        if not isinstance(memory, MemoryBackend):
            raise ContractError(
                f"FlatStructure.search takes a MemoryBackend, got {type(memory).__name__}"
            )
        reference = query.vector
        if reference is None and query.anchor_id is not None:
            reference = memory.vector(query.anchor_id)
        elif query.anchor_id is not None:
            memory.vector(query.anchor_id)  # an unknown anchor is an error either way
        arrays = memory.arrays()
        if reference is None or arrays.ids.shape[0] == 0:
            return StructureOutput()
        if reference.shape[0] != arrays.vectors.shape[1]:
            raise ContractError(
                f"FlatStructure: the query vector has dimension {reference.shape[0]}, "
                f"the memory holds dimension {arrays.vectors.shape[1]}"
            )
        cosine = _cosine(arrays.vectors, arrays.norms, reference).astype(np.float64)
        scores: npt.NDArray[np.float64] = np.asarray(
            np.round(cosine, SCORE_DECIMALS), dtype=np.float64
        )
        keep = scores > 0
        if query.time_range is not None:
            start, end = query.time_range
            keep &= (arrays.timestamps >= start) & (arrays.timestamps <= end)
        if query.anchor_id is not None:
            keep &= arrays.ids != query.anchor_id
        rows = _top_k(scores, arrays.id_rank, np.flatnonzero(keep), query.k)
        return StructureOutput(
            hits=[Hit.of(memory.get(str(arrays.ids[i])), float(scores[i])) for i in rows]
        )


def _cosine(
    vectors: npt.NDArray[np.float32],
    norms: npt.NDArray[np.float32],
    reference: npt.NDArray[np.float32],
) -> npt.NDArray[np.float32]:
    """Cosine similarity of each row with ``reference``; 0 where a norm is 0. Shape ``(n,)``."""
    dots = vectors @ reference
    denominator = norms * np.float32(np.linalg.norm(reference))
    out = np.zeros_like(dots)
    np.divide(dots, denominator, out=out, where=denominator > 0)
    result: npt.NDArray[np.float32] = np.clip(out, -1.0, 1.0)
    return result


def _top_k(
    scores: npt.NDArray[np.float64],
    id_rank: npt.NDArray[np.int64],
    candidates: npt.NDArray[np.intp],
    k: int,
) -> npt.NDArray[np.intp]:
    """Rows of the ``k`` best candidates, ordered by score desc, then id asc.

    Partitions first, then keeps every candidate tied with the ``k``-th
    score, so the id tie-break sees all ties.
    """
    if candidates.shape[0] > k:
        candidate_scores = scores[candidates]
        kth = np.partition(candidate_scores, candidates.shape[0] - k)[candidates.shape[0] - k]
        candidates = candidates[candidate_scores >= kth]
    order = np.lexsort((id_rank[candidates], -scores[candidates]))
    chosen: npt.NDArray[np.intp] = candidates[order[:k]]
    return chosen
