"""The default strategy: admit everything, ask every structure, keep the first hits."""

from __future__ import annotations

from typing import Any, ClassVar

from cognoxium.continuity.broker import RetrieveInput, RetrieveOutput, Strategy
from cognoxium.continuity.notes import Group, Hit
from cognoxium.continuity.structures import StructureOutput
from cognoxium.exceptions import ContractError

__all__ = ["DefaultStrategy"]


class DefaultStrategy(Strategy):
    """Kind ``default``; it has no tuning parameters.

    - admit: admits every note.
    - retrieve: calls each structure of the context in order. The input of
      each is the structure's own declared ``query_input``, filled from the
      query with those of these fields it declares: ``vector`` (the
      ``query_vector``), ``k``, ``time_range`` and ``anchor_id`` (the query's
      ``near``). Each structure's output is stored in ``raw`` under
      ``"<index>:<ClassName>"`` (for example ``"0:FlatStructure"``). ``hits``
      are the first non-empty hit list, in structure order; ``groups`` are
      collected from all structures, in structure order. An error from a
      structure propagates.

    Raises
    ------
    ContractError
        (from :meth:`retrieve`) If a structure returns something other than a
        :class:`~cognoxium.continuity.structures.StructureOutput`, or its
        ``query_input`` cannot be filled from the query.

    Examples
    --------
    >>> from cognoxium.retrieval.embeddings import LocalHashEmbedder
    >>> from cognoxium.continuity.broker import EngineContext
    >>> from cognoxium.continuity.memory import InMemoryBackend
    >>> from cognoxium.continuity.notes import Note, Query
    >>> from cognoxium.continuity.structures import FlatStructure
    >>> embedder, memory = LocalHashEmbedder(), InMemoryBackend()
    >>> memory.put(Note(id="n1", text="tea", timestamp=1), embedder.vector("tea"))
    >>> ctx = EngineContext(embedder, memory, [FlatStructure()])
    >>> out = DefaultStrategy().retrieve(
    ...     RetrieveInput(query=Query(text="tea"), query_vector=embedder.vector("tea"), context=ctx)
    ... )
    >>> [(h.id, round(h.score, 3)) for h in out.hits], list(out.raw)
    ([('n1', 1.0)], ['0:FlatStructure'])
    """

    kind: ClassVar[str] = "default"

    def __repr__(self) -> str:
        return "DefaultStrategy()"

    def _retrieve(self, inp: RetrieveInput) -> RetrieveOutput:
        context = self._context(inp)
        query = inp.query
        offered: dict[str, Any] = {
            "vector": inp.query_vector,
            "k": query.k,
            "time_range": query.time_range,
            "anchor_id": query.near,
        }
        hits: list[Hit] = []
        groups: list[Group] = []
        raw: dict[str, StructureOutput] = {}
        for index, structure in enumerate(context.structures):
            name = f"{index}:{type(structure).__name__}"
            declared = structure.query_input
            fields = {key: value for key, value in offered.items() if key in declared.model_fields}
            try:
                structure_query = declared(**fields)
            except ContractError as exc:
                raise ContractError(
                    f"structure {name}: its query_input cannot be filled from the query: {exc}"
                ) from None
            out = structure.search(structure_query, context.memory)
            if not isinstance(out, StructureOutput):
                raise ContractError(
                    f"structure {name} returned {type(out).__name__}, expected StructureOutput"
                )
            raw[name] = out
            if not hits and out.hits:
                hits = list(out.hits)
            groups.extend(out.groups)
        return self.retrieve_output(hits=hits, groups=groups, raw=raw)
