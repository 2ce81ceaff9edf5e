"""Continuity: remembered notes, retrieved by a strategy, as context items.

A :class:`ContinuityEngine` ingests :class:`Note` objects and answers
:class:`Query` objects with the pieces of a :class:`Container`: an
:class:`~cognoxium.retrieval.embeddings.Embedder`, a :class:`MemoryBackend`, a list of
:class:`Structure` objects and a :class:`Strategy`, which reaches the others
through an :class:`EngineContext`. The strategy's contracts
(:class:`AdmitInput`, :class:`AdmitOutput`, :class:`RetrieveInput`,
:class:`RetrieveOutput`) are checked around its code and serialise to dicts,
JSON and JSON Schema without the runtime-only context. Hits become a
:class:`~cognoxium.frame.frame.CognitionFrame` (:meth:`RetrieveOutput.to_frame`,
:meth:`Answer.to_frame`) that flows into dedupe, redact and pack.

Examples
--------
The defaults are the ``in_memory`` memory, the ``local_hash`` embedder, one
``flat`` structure and the ``default`` strategy. Ties in score are ordered by
id:

>>> c = Container(search_cwd=False)
>>> ContinuityEngine(container=c).ingest_many([
...     Note(id="n1", text="october product launch", timestamp=1.0),
...     Note(id="n2", text="october launch plan", timestamp=2.0),
...     Note(id="n3", text="apple pie recipe", timestamp=3.0),
... ])
[True, True, True]
>>> embedder, memory = c.get(Embedder), c.get(MemoryBackend)
>>> structures = c.get_all(Structure)
>>> ctx = EngineContext(embedder=embedder, memory=memory, structures=structures)
>>> q = Query(text="october launch", k=2)
>>> out = c.get(Strategy).retrieve(
...     RetrieveInput(query=q, query_vector=embedder.vector(q.text), context=ctx)
... )
>>> [(h.id, round(h.score, 3)) for h in out.hits]
[('n1', 0.816), ('n2', 0.816)]
>>> list(out.raw)
['0:FlatStructure']
>>> out.to_frame().pack(100).manifest.to_polars()["decision"].to_list()
['included', 'included']
"""

from typing import TYPE_CHECKING

from cognoxium._lazy import lazy_exports

if TYPE_CHECKING:
    from cognoxium.continuity._contract import Contract
    from cognoxium.continuity.broker import (
        AdmitInput,
        AdmitOutput,
        EngineContext,
        RetrieveInput,
        RetrieveOutput,
        Strategy,
    )
    from cognoxium.continuity.container import CONFIG_FILE, Container
    from cognoxium.continuity.engine import ContinuityEngine
    from cognoxium.continuity.memory import InMemoryBackend, MemoryArrays, MemoryBackend
    from cognoxium.continuity.notes import Answer, Group, Hit, Note, Query, hits_to_frame
    from cognoxium.continuity.strategy import DefaultStrategy
    from cognoxium.continuity.structures import (
        FlatQuery,
        FlatStructure,
        Structure,
        StructureOutput,
        StructureQuery,
    )
    from cognoxium.exceptions import ConfigError, ContractError, UnknownNoteError
    from cognoxium.retrieval.embeddings import Embedder
else:
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "cognoxium.continuity._contract": ["Contract"],
            "cognoxium.continuity.broker": [
                "AdmitInput",
                "AdmitOutput",
                "EngineContext",
                "RetrieveInput",
                "RetrieveOutput",
                "Strategy",
            ],
            "cognoxium.continuity.container": ["CONFIG_FILE", "Container"],
            "cognoxium.continuity.engine": ["ContinuityEngine"],
            "cognoxium.continuity.memory": ["InMemoryBackend", "MemoryArrays", "MemoryBackend"],
            "cognoxium.continuity.notes": [
                "Answer",
                "Group",
                "Hit",
                "Note",
                "Query",
                "hits_to_frame",
            ],
            "cognoxium.continuity.strategy": ["DefaultStrategy"],
            "cognoxium.continuity.structures": [
                "FlatQuery",
                "FlatStructure",
                "Structure",
                "StructureOutput",
                "StructureQuery",
            ],
            "cognoxium.exceptions": ["ConfigError", "ContractError", "UnknownNoteError"],
            "cognoxium.retrieval.embeddings": ["Embedder"],
        },
    )

__all__ = [
    "CONFIG_FILE",
    "AdmitInput",
    "AdmitOutput",
    "Answer",
    "ConfigError",
    "Container",
    "ContinuityEngine",
    "Contract",
    "ContractError",
    "DefaultStrategy",
    "Embedder",
    "EngineContext",
    "FlatQuery",
    "FlatStructure",
    "Group",
    "Hit",
    "InMemoryBackend",
    "MemoryArrays",
    "MemoryBackend",
    "Note",
    "Query",
    "RetrieveInput",
    "RetrieveOutput",
    "Strategy",
    "Structure",
    "StructureOutput",
    "StructureQuery",
    "UnknownNoteError",
    "hits_to_frame",
]
