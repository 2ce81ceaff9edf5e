"""Notes, queries and what retrieval returns: hits, groups and answers.

A :class:`Note` is one remembered text with a time; a :class:`Query` asks for
the notes that fit a text, a time range or an anchor note; a :class:`Hit` is
one retrieved note with its score; a :class:`Group` names related notes; an
:class:`Answer` is what :meth:`ContinuityEngine.ask
<cognoxium.continuity.engine.ContinuityEngine.ask>` returns. Hits convert to a
:class:`~cognoxium.frame.frame.CognitionFrame` (:func:`hits_to_frame`) so they flow
into dedupe, redact and pack.

Times are seconds since the Unix epoch, UTC (an aware ``datetime`` is accepted
and converted).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Annotated, Any

import polars as pl
from pydantic import AfterValidator, ConfigDict, Field, SerializeAsAny, model_validator

from cognoxium.continuity._contract import Contract, Seconds
from cognoxium.frame.frame import CognitionFrame
from cognoxium.items.model import Role, canonical_json

__all__ = ["Answer", "Group", "Hit", "Note", "Query", "hits_to_frame"]

_VALUE = ConfigDict(frozen=True)


def _canonical_object(value: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(canonical_json(value))
    return result


_Metadata = Annotated[dict[str, Any], AfterValidator(_canonical_object)]
"""A free-form JSON object, kept canonical (sorted keys)."""


class Note(Contract):
    """One remembered text.

    Parameters
    ----------
    id
        Stable identity, unique within a memory; ingesting a note with a
        known id replaces the earlier one.
    text
        The content.
    timestamp
        When it happened: seconds since the Unix epoch, UTC (an aware
        ``datetime`` is converted).
    metadata
        A free-form JSON object, kept canonical (sorted keys).

    Raises
    ------
    ContractError
        On an empty id, a naive datetime, a time outside the years 1 to 9999,
        or metadata that is not a JSON object.

    Examples
    --------
    >>> from datetime import UTC, datetime
    >>> Note(id="n1", text="hi", timestamp=datetime(1970, 1, 1, 0, 1, tzinfo=UTC)).timestamp
    60.0
    >>> Note(id="n1", text="hi", timestamp=0, metadata={"b": 1, "a": 2}).to_json()
    '{"id":"n1","metadata":{"a":2,"b":1},"text":"hi","timestamp":0.0}'
    """

    model_config = _VALUE

    id: str = Field(min_length=1)
    text: str
    timestamp: Seconds
    metadata: _Metadata = Field(default_factory=dict)


class Query(Contract):
    """What to retrieve.

    Parameters
    ----------
    text
        The question or cue; ``None`` (or blank) for a query without text,
        which then has no query vector.
    k
        At most this many hits, at least 1.
    near
        The id of an anchor note: structures search near it (see
        :class:`~cognoxium.continuity.structures.FlatStructure`), and it is
        not a hit itself.
    time_range
        ``(start, end)``, both inclusive, in seconds since the Unix epoch
        (UTC); only notes whose timestamp lies inside are hits.

    Raises
    ------
    ContractError
        If ``k < 1``, ``near`` is empty, or ``start > end``.

    Examples
    --------
    >>> Query(text="october launch", k=2).has_text
    True
    >>> Query(near="n1", time_range=(0, 10)).to_json()
    '{"k":10,"near":"n1","text":null,"time_range":[0.0,10.0]}'
    """

    model_config = _VALUE

    text: str | None = None
    k: int = Field(default=10, ge=1)
    near: str | None = Field(default=None, min_length=1)
    time_range: tuple[Seconds, Seconds] | None = None

    @model_validator(mode="after")
    def _ordered_range(self) -> Query:
        if self.time_range is not None and self.time_range[0] > self.time_range[1]:
            start, end = self.time_range
            raise ValueError(f"time_range start {start} is after its end {end}")
        return self

    @property
    def has_text(self) -> bool:
        """Whether the query has text to embed (not ``None``, not blank)."""
        return self.text is not None and bool(self.text.strip())


class Hit(Contract):
    """One retrieved note and its score.

    Parameters
    ----------
    id, text, timestamp, metadata
        The note's fields (``timestamp`` in seconds since the Unix epoch, UTC).
    score
        Relevance, higher first; for
        :class:`~cognoxium.continuity.structures.FlatStructure` the cosine
        similarity to the reference vector, in ``[-1, 1]``.
    """

    model_config = _VALUE

    id: str = Field(min_length=1)
    score: float = Field(allow_inf_nan=False)
    text: str
    timestamp: Seconds
    metadata: _Metadata = Field(default_factory=dict)

    @classmethod
    def of(cls, note: Note, score: float) -> Hit:
        """Build a hit from a note and its score.

        Parameters
        ----------
        note
            The note hit; its id, text, timestamp and metadata are copied.
        score
            The relevance score, finite, higher first.

        Returns
        -------
        Hit
            The hit.

        Raises
        ------
        ContractError
            If ``score`` is not a finite number.

        Examples
        --------
        >>> Hit.of(Note(id="n1", text="hi", timestamp=1), 0.5).score
        0.5
        """
        return cls(
            id=note.id,
            score=score,
            text=note.text,
            timestamp=note.timestamp,
            metadata=note.metadata,
        )


class Group(Contract):
    """Notes a structure found to belong together (a thread, a cluster, an episode).

    Parameters
    ----------
    label
        What ties them together, as the structure names it.
    ids
        The note ids, in the structure's order.
    score
        The structure's relevance for the group, or ``None``.
    """

    model_config = _VALUE

    label: str
    ids: tuple[str, ...]
    score: float | None = Field(default=None, allow_inf_nan=False)


def hits_to_frame(hits: Sequence[Hit], *, role: Role | str = Role.MEMORY) -> CognitionFrame:
    """Turn hits into a frame of context items, in hit order.

    Each hit becomes one text item: ``id``, ``text`` and ``metadata`` from the
    hit, ``role`` as given, ``rank`` the hit's score and ``created_at`` its
    timestamp (UTC, microseconds); the other columns take the item defaults
    (untrusted, internal, optional, priority 0).

    Parameters
    ----------
    hits
        The hits, with distinct ids.
    role
        The role of every item (default ``memory``).

    Returns
    -------
    CognitionFrame
        ``len(hits)`` rows of the canonical item schema.

    Raises
    ------
    RecordError
        If two hits share an id or ``role`` is not a role.

    Examples
    --------
    >>> frame = hits_to_frame([Hit(id="n1", score=0.5, text="hi", timestamp=60)])
    >>> frame.select("id", "role", "rank").to_polars().rows()
    [('n1', 'memory', 0.5)]
    >>> frame.to_polars()["created_at"].dt.to_string("%Y-%m-%dT%H:%M:%S%z").to_list()
    ['1970-01-01T00:01:00+0000']
    """
    role_value = role.value if isinstance(role, Role) else str(role)
    micros = pl.Series([h.timestamp for h in hits], dtype=pl.Float64) * 1_000_000
    df = pl.DataFrame(
        {
            "id": pl.Series([h.id for h in hits], dtype=pl.String),
            "role": pl.Series([role_value] * len(hits), dtype=pl.String),
            "text": pl.Series([h.text for h in hits], dtype=pl.String),
            "rank": pl.Series([h.score for h in hits], dtype=pl.Float64),
            "created_at": pl.from_epoch(
                micros.round().cast(pl.Int64), time_unit="us"
            ).dt.replace_time_zone("UTC"),
            "metadata": pl.Series([canonical_json(h.metadata) for h in hits], dtype=pl.String),
        }
    )
    return CognitionFrame.from_polars(df)


class Answer(Contract):
    """The answer to a query.

    :meth:`ContinuityEngine.ask <cognoxium.continuity.engine.ContinuityEngine.ask>`
    returns it. It holds the query as asked, the hits (best first) and the groups. Turn
    the hits into context items with :meth:`to_frame`.

    Parameters
    ----------
    query
        The query as asked (a text becomes ``Query(text=...)``).
    hits
        The strategy's hits, best first (for the default strategy: the first
        structure's non-empty hit list; ties in score are ordered by id).
    groups
        The groups every structure returned, in structure order.
    """

    query: SerializeAsAny[Query]
    hits: list[SerializeAsAny[Hit]] = Field(default_factory=list)
    groups: list[SerializeAsAny[Group]] = Field(default_factory=list)

    def to_frame(self, *, role: Role | str = Role.MEMORY) -> CognitionFrame:
        """The hits as a frame of context items (see :func:`hits_to_frame`)."""
        return hits_to_frame(self.hits, role=role)
