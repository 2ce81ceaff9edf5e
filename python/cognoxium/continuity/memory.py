"""Memory backends: where admitted notes and their vectors live.

Strategies and structures reach memory only through the
:class:`~cognoxium.continuity.broker.EngineContext`'s :class:`MemoryBackend`.
The backend hands out its contents as columns (:class:`MemoryArrays`) so that
structures search with numpy, not Python loops over notes.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from cognoxium.continuity._contract import to_vector
from cognoxium.continuity.notes import Note
from cognoxium.exceptions import ContractError, UnknownNoteError

__all__ = ["InMemoryBackend", "MemoryArrays", "MemoryBackend"]


@dataclass(frozen=True, slots=True, eq=False)
class MemoryArrays:
    """The contents of a memory as columns, row ``i`` being the ``i``-th stored note.

    Rows are in first-insertion order. The arrays are read-only views, valid
    until the memory next changes.

    Attributes
    ----------
    ids
        Note ids, shape ``(n,)``, numpy unicode.
    timestamps
        Seconds since the Unix epoch (UTC), shape ``(n,)``, ``float64``.
    vectors
        Shape ``(n, dim)``, ``float32`` (``dim`` is 0 while the memory is empty).
    norms
        L2 norm of each vector, shape ``(n,)``, ``float32``.
    id_rank
        Position of each row in ascending id order (code-point order),
        shape ``(n,)``, ``int64``: the deterministic tie-break.
    """

    ids: npt.NDArray[np.str_]
    timestamps: npt.NDArray[np.float64]
    vectors: npt.NDArray[np.float32]
    norms: npt.NDArray[np.float32]
    id_rank: npt.NDArray[np.int64]


class MemoryBackend(ABC):
    """Stores admitted notes and their vectors.

    Subclasses implement :meth:`put`, :meth:`get`, :meth:`vector`,
    :meth:`arrays` and :meth:`__len__`, and set ``kind``, the name a
    ``cognoxium.toml`` file selects them by.
    """

    kind: ClassVar[str] = ""

    @abstractmethod
    def put(self, note: Note, vector: Any) -> None:
        """Store a note and its vector; a note with a stored id replaces it in place.

        Parameters
        ----------
        note
            The note to store.
        vector
            Its embedding: a finite one-dimensional array-like of numbers
            whose length is the memory's dimension (the first stored vector
            fixes it).

        Returns
        -------
        None

        Raises
        ------
        ContractError
            If ``note`` is not a :class:`Note`, or ``vector`` is not a finite
            one-dimensional vector of the memory's dimension.
        """

    @abstractmethod
    def get(self, note_id: str) -> Note:
        """Return the stored note with this id.

        Raises
        ------
        UnknownNoteError
            If no note has this id.
        """

    @abstractmethod
    def vector(self, note_id: str) -> npt.NDArray[np.float32]:
        """Return the stored vector of a note, shape ``(dim,)``, ``float32``.

        Raises
        ------
        UnknownNoteError
            If no note has this id.
        """

    @abstractmethod
    def arrays(self) -> MemoryArrays:
        """Return the stored notes as columns (see :class:`MemoryArrays`)."""

    @abstractmethod
    def __len__(self) -> int:
        """The number of stored notes."""

    def __contains__(self, note_id: object) -> bool:
        """Whether a note with this id is stored."""
        if not isinstance(note_id, str):
            return False
        try:
            self.get(note_id)
        except UnknownNoteError:
            return False
        return True


class InMemoryBackend(MemoryBackend):
    """A memory held in process: notes in a list, vectors in one growing ``float32`` matrix.

    Kind ``in_memory``. Appending is amortised ``O(dim)`` (the matrix doubles
    its capacity when full); :meth:`arrays` returns views, building the id
    columns once per change. Nothing is persisted.

    Examples
    --------
    >>> memory = InMemoryBackend()
    >>> memory.put(Note(id="b", text="x", timestamp=2), [1.0, 0.0])
    >>> memory.put(Note(id="a", text="y", timestamp=1), [0.0, 2.0])
    >>> arrays = memory.arrays()
    >>> arrays.ids.tolist(), arrays.norms.tolist(), arrays.id_rank.tolist()
    (['b', 'a'], [1.0, 2.0], [1, 0])
    >>> memory.put(Note(id="b", text="z", timestamp=3), [0.0, 1.0])
    >>> len(memory), memory.get("b").text
    (2, 'z')
    """

    kind: ClassVar[str] = "in_memory"

    def __init__(self) -> None:
        self._notes: list[Note] = []
        self._index: dict[str, int] = {}
        self._matrix: npt.NDArray[np.float32] = np.zeros((0, 0), dtype=np.float32)
        self._times: npt.NDArray[np.float64] = np.zeros(0, dtype=np.float64)
        self._dim: int | None = None
        self._cache: MemoryArrays | None = None

    def __repr__(self) -> str:
        return f"InMemoryBackend(notes={len(self._notes)}, dim={self._dim})"

    @property
    def dim(self) -> int | None:
        """The vector dimension, fixed by the first stored vector (``None`` while empty)."""
        return self._dim

    def put(self, note: Note, vector: Any) -> None:
        """Store a note and its vector (see :meth:`MemoryBackend.put`)."""
        if not isinstance(note, Note):
            raise ContractError(f"InMemoryBackend.put takes a Note, got {type(note).__name__}")
        try:
            row = to_vector(vector, copy=False)
        except ValueError as exc:
            raise ContractError(f"InMemoryBackend.put: note {note.id!r}: {exc}") from None
        if self._dim is None:
            self._dim = row.shape[0]
            self._matrix = np.zeros((16, self._dim), dtype=np.float32)
            self._times = np.zeros(16, dtype=np.float64)
        elif row.shape[0] != self._dim:
            raise ContractError(
                f"InMemoryBackend.put: note {note.id!r} has a vector of dimension "
                f"{row.shape[0]}, the memory holds dimension {self._dim}"
            )
        position = self._index.get(note.id)
        if position is None:
            position = len(self._notes)
            if position == self._matrix.shape[0]:
                self._grow()
            self._index[note.id] = position
            self._notes.append(note)
        else:
            self._notes[position] = note
        self._matrix[position] = row
        self._times[position] = note.timestamp
        self._cache = None

    def _grow(self) -> None:
        capacity = 2 * self._matrix.shape[0]
        matrix = np.zeros((capacity, self._matrix.shape[1]), dtype=np.float32)
        matrix[: self._matrix.shape[0]] = self._matrix
        times = np.zeros(capacity, dtype=np.float64)
        times[: self._times.shape[0]] = self._times
        self._matrix, self._times = matrix, times

    def _position(self, note_id: str) -> int:
        position = self._index.get(note_id)
        if position is None:
            raise UnknownNoteError(f"no note with id {note_id!r} in memory ({len(self)} notes)")
        return position

    def get(self, note_id: str) -> Note:
        """Return a stored note (see :meth:`MemoryBackend.get`)."""
        return self._notes[self._position(note_id)]

    def vector(self, note_id: str) -> npt.NDArray[np.float32]:
        """Return a stored vector, as a read-only copy (see :meth:`MemoryBackend.vector`)."""
        row: npt.NDArray[np.float32] = self._matrix[self._position(note_id)].copy()
        row.flags.writeable = False
        return row

    def arrays(self) -> MemoryArrays:
        """Return the stored notes as columns (see :class:`MemoryArrays`)."""
        if self._cache is None:
            n = len(self._notes)
            ids = np.array([note.id for note in self._notes], dtype=np.str_)
            vectors = self._matrix[:n]
            vectors.flags.writeable = False
            times = self._times[:n]
            times.flags.writeable = False
            id_rank = np.empty(n, dtype=np.int64)
            id_rank[np.argsort(ids, kind="stable")] = np.arange(n, dtype=np.int64)
            norms = np.linalg.norm(vectors, axis=1).astype(np.float32)
            for column in (ids, norms, id_rank):
                column.flags.writeable = False
            self._cache = MemoryArrays(
                ids=ids, timestamps=times, vectors=vectors, norms=norms, id_rank=id_rank
            )
        return self._cache

    def __len__(self) -> int:
        return len(self._notes)
