"""The ContinuityEngine: ingests notes through the strategy and answers queries."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from cognoxium.continuity.broker import AdmitInput, EngineContext, RetrieveInput
from cognoxium.continuity.container import Container
from cognoxium.continuity.notes import Answer, Note, Query
from cognoxium.exceptions import ContractError

__all__ = ["ContinuityEngine"]


class ContinuityEngine:
    """Remembers notes and answers queries with the pieces of a :class:`Container`.

    Ingesting embeds a note, asks the strategy whether to admit it, and if
    so stores it in memory and offers it to every structure
    (:meth:`Structure.add <cognoxium.continuity.structures.Structure.add>`).
    Asking embeds the query text (if any) and lets the strategy retrieve.

    Parameters
    ----------
    container
        The pieces; default ``Container()`` (which reads ``cognoxium.toml``
        from the current directory if there is one).

    Examples
    --------
    >>> engine = ContinuityEngine(container=Container(search_cwd=False))
    >>> engine.ingest_many([
    ...     Note(id="n1", text="october product launch", timestamp=1.0),
    ...     Note(id="n2", text="october launch plan", timestamp=2.0),
    ...     Note(id="n3", text="apple pie recipe", timestamp=3.0),
    ... ])
    [True, True, True]
    >>> answer = engine.ask("october launch")
    >>> [(h.id, round(h.score, 3)) for h in answer.hits][:2]
    [('n1', 0.816), ('n2', 0.816)]
    >>> [h.id for h in engine.ask(Query(text="launch", time_range=(2.0, 3.0))).hits]
    ['n2']
    """

    __slots__ = ("_container", "_context")

    EMBED_BATCH = 1024
    """Notes embedded per ``Embedder.embed`` call in :meth:`ingest_many`."""

    def __init__(self, container: Container | None = None) -> None:
        if container is None:
            container = Container()
        elif not isinstance(container, Container):
            raise ContractError(
                f"ContinuityEngine takes a Container, got {type(container).__name__}"
            )
        self._container = container
        self._context = container.context()

    def __repr__(self) -> str:
        return f"ContinuityEngine(container={self._container!r})"

    @property
    def container(self) -> Container:
        """The container whose pieces the engine uses."""
        return self._container

    @property
    def context(self) -> EngineContext:
        """The :class:`~cognoxium.continuity.broker.EngineContext` given to the strategy."""
        return self._context

    def ingest(self, note: Note) -> bool:
        """Offer one note to memory; return whether the strategy admitted it.

        A note whose id is already stored replaces the stored one.

        Raises
        ------
        ContractError
            If ``note`` is not a :class:`Note`, or a contract around the
            strategy or the memory is broken.
        """
        return self.ingest_many([note])[0]

    def ingest_many(self, notes: Iterable[Note]) -> list[bool]:
        """Offer notes to memory in order; return, per note, whether it was admitted.

        Texts are embedded in batches of :attr:`EMBED_BATCH` notes
        (``Embedder.embed``, bounding the memory the vectors take); then each
        note of a batch is offered to the strategy in turn, so a later note
        with the same id replaces an earlier one.

        Raises
        ------
        ContractError
            If an element is not a :class:`Note` (naming its position; nothing
            is ingested), the embedder returns an array of the wrong shape, or
            a contract around the strategy or the memory is broken.
        """
        batch = list(notes)
        for position, note in enumerate(batch):
            if not isinstance(note, Note):
                raise ContractError(
                    f"ContinuityEngine.ingest_many: element {position} is a "
                    f"{type(note).__name__}, not a Note; nothing was ingested"
                )
        if not batch:
            return []
        context = self._context
        strategy = self._container.strategy
        admitted: list[bool] = []
        for start in range(0, len(batch), self.EMBED_BATCH):
            chunk = batch[start : start + self.EMBED_BATCH]
            vectors = np.asarray(context.embedder.embed([note.text for note in chunk]))
            if vectors.ndim != 2 or vectors.shape[0] != len(chunk):
                raise ContractError(
                    f"{type(context.embedder).__name__}.embed returned shape {vectors.shape} "
                    f"for {len(chunk)} texts; expected ({len(chunk)}, dim)"
                )
            for note, vector in zip(chunk, vectors, strict=True):
                decision = strategy.admit(AdmitInput(note=note, vector=vector, context=context))
                if decision.admit:
                    context.memory.put(note, vector)
                    for structure in context.structures:
                        structure.add(note, vector)
                admitted.append(decision.admit)
        return admitted

    def ask(self, query: Query | str) -> Answer:
        """Answer a query with the strategy.

        Parameters
        ----------
        query
            A :class:`Query`, or a text (``Query(text=...)`` with the default
            ``k``). A query without text has no query vector: structures then
            search near ``query.near`` or return nothing.

        Returns
        -------
        Answer
            The query, the hits (best first; see the strategy and the
            structures for scores and ties) and the groups.

        Raises
        ------
        ContractError
            If ``query`` is neither a Query nor a text, or a contract around
            the strategy is broken.
        UnknownNoteError
            If ``query.near`` names a note not in memory (flat structure).
        """
        if isinstance(query, str):
            query = Query(text=query)
        elif not isinstance(query, Query):
            raise ContractError(
                f"ContinuityEngine.ask takes a Query or a text, got {type(query).__name__}"
            )
        context = self._context
        vector = context.embedder.vector(query.text) if query.text and query.has_text else None
        out = self._container.strategy.retrieve(
            RetrieveInput(query=query, query_vector=vector, context=context)
        )
        return Answer(query=query, hits=out.hits, groups=out.groups)
