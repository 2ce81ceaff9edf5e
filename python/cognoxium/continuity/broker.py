"""Strategy, its contracts and the EngineContext through which it reaches the system.

A :class:`Strategy` decides how the system is used: which notes to admit and
how to retrieve. Callers use its public methods, :meth:`Strategy.admit` and
:meth:`Strategy.retrieve`, which check the contracts around the subclass's
code (:meth:`Strategy._admit`, :meth:`Strategy._retrieve`).

=================  =============================================================
contract           fields
=================  =============================================================
``AdmitInput``     ``note``, ``vector``, ``context``
``AdmitOutput``    ``admit`` (default ``True``)
``RetrieveInput``  ``query``, ``query_vector`` (``None`` when the query has no
                   text), ``context``
``RetrieveOutput`` ``hits``, ``groups``, ``raw`` (each structure's output, by
                   name)
=================  =============================================================

Contracts may be extended by a subclass, never replaced. ``context`` holds
live objects (embedder, memory, structures): it is excluded from
``to_dict()``, ``to_json()`` and the JSON Schema, an input rebuilt with
``from_dict`` / ``from_json`` has ``context`` ``None``, and calling a strategy
with such an input raises :class:`~cognoxium.exceptions.ContractError`
("needs an EngineContext"). Set ``inp.context = EngineContext(...)`` before
passing it on.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from pydantic import Field, InstanceOf, SerializeAsAny, model_validator
from pydantic.json_schema import SkipJsonSchema

from cognoxium.continuity._contract import Contract, Vector
from cognoxium.continuity.memory import MemoryBackend
from cognoxium.continuity.notes import Group, Hit, Note, Query, hits_to_frame
from cognoxium.continuity.structures import Structure, StructureOutput
from cognoxium.exceptions import ContractError
from cognoxium.frame.frame import CognitionFrame
from cognoxium.items.model import Role
from cognoxium.retrieval.embeddings import Embedder

__all__ = [
    "AdmitInput",
    "AdmitOutput",
    "ContractError",
    "EngineContext",
    "RetrieveInput",
    "RetrieveOutput",
    "Strategy",
]


@dataclass(frozen=True, slots=True, eq=False)
class EngineContext:
    """How a strategy reaches the system: the embedder, the memory and the structures.

    Runtime-only: it holds live objects and is never serialised.

    Parameters
    ----------
    embedder
        An :class:`~cognoxium.retrieval.embeddings.Embedder`.
    memory
        The :class:`~cognoxium.continuity.memory.MemoryBackend`; strategies
        reach memory only through it.
    structures
        The :class:`~cognoxium.continuity.structures.Structure` objects, in
        order (stored as a tuple).

    Raises
    ------
    ContractError
        If a part is not of its type.

    Examples
    --------
    >>> from cognoxium.retrieval.embeddings import LocalHashEmbedder
    >>> from cognoxium.continuity.memory import InMemoryBackend
    >>> from cognoxium.continuity.structures import FlatStructure
    >>> ctx = EngineContext(LocalHashEmbedder(), InMemoryBackend(), [FlatStructure()])
    >>> ctx.structures
    (FlatStructure(),)
    """

    embedder: Embedder
    memory: MemoryBackend
    structures: Sequence[Structure]

    def __post_init__(self) -> None:
        if not isinstance(self.embedder, Embedder):
            raise ContractError(
                "EngineContext.embedder must follow the Embedder protocol (name, dim, "
                f"fingerprint, embed, vector), got {type(self.embedder).__name__}"
            )
        if not isinstance(self.memory, MemoryBackend):
            raise ContractError(
                f"EngineContext.memory must be a MemoryBackend, got {type(self.memory).__name__}"
            )
        if isinstance(self.structures, str | bytes) or not isinstance(self.structures, Sequence):
            raise ContractError(
                "EngineContext.structures must be a sequence of Structure, got "
                f"{type(self.structures).__name__}"
            )
        structures = tuple(self.structures)
        for index, structure in enumerate(structures):
            if not isinstance(structure, Structure):
                raise ContractError(
                    f"EngineContext.structures[{index}] must be a Structure, got "
                    f"{type(structure).__name__}"
                )
        object.__setattr__(self, "structures", structures)


def _context_field() -> Any:
    return Field(default=None, exclude=True, repr=False)


class AdmitInput(Contract):
    """The input of :meth:`Strategy.admit`.

    Parameters
    ----------
    note
        The note offered to memory.
    vector
        Its embedding, shape ``(dim,)``, ``float32``.
    context
        The :class:`EngineContext`; runtime-only (not serialised).
    """

    note: SerializeAsAny[Note]
    vector: Vector
    context: SkipJsonSchema[InstanceOf[EngineContext] | None] = _context_field()


class AdmitOutput(Contract):
    """The output of :meth:`Strategy.admit`.

    Parameters
    ----------
    admit
        Whether the note goes into memory (default ``True``).
    """

    admit: bool = True


class RetrieveInput(Contract):
    """The input of :meth:`Strategy.retrieve`.

    Parameters
    ----------
    query
        What to retrieve.
    query_vector
        The embedding of ``query.text``, shape ``(dim,)``; ``None`` when the
        query has no text (and then it must be ``None``).
    context
        The :class:`EngineContext`; runtime-only (not serialised).

    Raises
    ------
    ContractError
        If the query has no text but a query vector is given.
    """

    query: SerializeAsAny[Query]
    query_vector: Vector | None = None
    context: SkipJsonSchema[InstanceOf[EngineContext] | None] = _context_field()

    @model_validator(mode="after")
    def _vector_needs_text(self) -> RetrieveInput:
        if self.query_vector is not None and not self.query.has_text:
            raise ValueError("query_vector must be None when the query has no text")
        return self


class RetrieveOutput(Contract):
    """The output of :meth:`Strategy.retrieve`.

    Parameters
    ----------
    hits
        The retrieved notes, best first.
    groups
        Groups of related notes.
    raw
        Each structure's output by name (the default strategy names them
        ``"<index>:<ClassName>"``, for example ``"0:FlatStructure"``).
    """

    hits: list[SerializeAsAny[Hit]] = Field(default_factory=list)
    groups: list[SerializeAsAny[Group]] = Field(default_factory=list)
    raw: dict[str, SerializeAsAny[StructureOutput]] = Field(default_factory=dict)

    def to_frame(self, *, role: Role | str = Role.MEMORY) -> CognitionFrame:
        """The hits as a frame of context items, the score in ``rank``.

        See :func:`~cognoxium.continuity.notes.hits_to_frame`.
        """
        return hits_to_frame(self.hits, role=role)


_I = TypeVar("_I", bound=Contract)
_O = TypeVar("_O", bound=Contract)


class Strategy(ABC):
    """Decides how the system is used: what to admit and how to retrieve.

    Subclass it and implement :meth:`_retrieve`; override :meth:`_admit` to
    admit selectively (the default admits everything). Callers use
    :meth:`admit` and :meth:`retrieve`, which check the contracts: the input
    must be an instance of the declared input class (``admit_input``,
    ``retrieve_input``) carrying an :class:`EngineContext`, and the output an
    instance of the declared output class (``admit_output``,
    ``retrieve_output``) whose fields validate. Declare extended contract
    subclasses there to require them. ``kind`` is the name a
    ``cognoxium.toml`` file selects the strategy by.

    Examples
    --------
    >>> class NoMemory(Strategy):
    ...     def _retrieve(self, inp):
    ...         return RetrieveOutput()
    >>> NoMemory().retrieve(RetrieveInput(query=Query(text="hi")))
    Traceback (most recent call last):
    ...
    cognoxium.exceptions.ContractError: NoMemory.retrieve needs an EngineContext: ...
    """

    kind: ClassVar[str] = ""
    admit_input: ClassVar[type[AdmitInput]] = AdmitInput
    admit_output: ClassVar[type[AdmitOutput]] = AdmitOutput
    retrieve_input: ClassVar[type[RetrieveInput]] = RetrieveInput
    retrieve_output: ClassVar[type[RetrieveOutput]] = RetrieveOutput

    def admit(self, inp: AdmitInput) -> AdmitOutput:
        """Decide whether a note goes into memory; calls :meth:`_admit`.

        Parameters
        ----------
        inp
            An instance of ``admit_input`` with its ``context`` set.

        Returns
        -------
        AdmitOutput
            An instance of ``admit_output``.

        Raises
        ------
        ContractError
            If ``inp`` is of the wrong type or has no context, or
            :meth:`_admit` returns something that is not a valid
            ``admit_output``.
        """
        return self._checked("admit", inp, self.admit_input, self._admit, self.admit_output)

    def retrieve(self, inp: RetrieveInput) -> RetrieveOutput:
        """Retrieve for a query; calls :meth:`_retrieve`.

        Parameters
        ----------
        inp
            An instance of ``retrieve_input`` with its ``context`` set.

        Returns
        -------
        RetrieveOutput
            An instance of ``retrieve_output``.

        Raises
        ------
        ContractError
            If ``inp`` is of the wrong type or has no context, or
            :meth:`_retrieve` returns something that is not a valid
            ``retrieve_output``.
        """
        return self._checked(
            "retrieve", inp, self.retrieve_input, self._retrieve, self.retrieve_output
        )

    def _admit(self, inp: AdmitInput) -> AdmitOutput:
        """Admit every note; override to admit selectively."""
        return self.admit_output()

    @abstractmethod
    def _retrieve(self, inp: RetrieveInput) -> RetrieveOutput:
        """Retrieve for ``inp.query``; reach the system through ``self._context(inp)``."""

    def _context(self, inp: AdmitInput | RetrieveInput) -> EngineContext:
        """Return the input's :class:`EngineContext`.

        Raises
        ------
        ContractError
            If the input has none.
        """
        context = inp.context
        if not isinstance(context, EngineContext):
            raise ContractError(
                f"{type(self).__name__} needs an EngineContext: the {type(inp).__name__} has none"
            )
        return context

    def _checked(
        self,
        method: str,
        inp: _I,
        input_type: type[Contract],
        run: Callable[[_I], object],
        output_type: type[_O],
    ) -> _O:
        """Check ``inp`` against ``input_type``, call ``run`` on it, check what it returns.

        ``method`` is the public method's name; ``run`` is reported as
        ``_<method>``.

        Raises
        ------
        ContractError
            If ``inp`` is not an ``input_type`` or has no context, or the
            result is not a valid ``output_type``.
        """
        name = f"{type(self).__name__}.{method}"
        if not isinstance(inp, input_type):
            raise ContractError(f"{name} takes {input_type.__name__}, got {type(inp).__name__}")
        if not isinstance(getattr(inp, "context", None), EngineContext):
            raise ContractError(
                f"{name} needs an EngineContext: the {type(inp).__name__} has none (inputs "
                "rebuilt with from_dict/from_json never do); set inp.context = "
                "EngineContext(...) first"
            )
        out = run(inp)
        name = f"{type(self).__name__}._{method}"
        if not isinstance(out, output_type):
            raise ContractError(
                f"{name} returned {type(out).__name__}, expected {output_type.__name__}"
            )
        try:
            out.check()
        except ContractError as exc:
            raise ContractError(
                f"{name} returned an invalid {output_type.__name__}: {exc}"
            ) from None
        return out
