"""Context items: one typed unit of model input and its payloads.

A :class:`ContextItem` carries content (a payload) together with everything a
packing decision needs: identity, role, provenance, trust, sensitivity,
retention, priority, time bounds and lineage.
"""

from __future__ import annotations

import base64
import hashlib
import json
import uuid
from collections.abc import Iterable
from datetime import UTC, datetime
from enum import StrEnum
from functools import cached_property
from typing import Annotated, Any, Literal

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    computed_field,
    field_serializer,
    field_validator,
    model_validator,
)

from cognoxium.items._checks import (
    FINE_TIME_MESSAGE,
    MAX_ID_LENGTH,
    MAX_INT,
    MAX_JSON_DEPTH,
    MIN_INT,
    ItemId,
    UnicodeStr,
    finer_than_microseconds,
    json_problem,
    naive_time_problem,
    raising,
    to_utc,
)
from cognoxium.items._json import canonical_json_list, canonical_objects

__all__ = [
    "MAX_ID_LENGTH",
    "MAX_JSON_DEPTH",
    "TRUNCATE_KEY",
    "UNDATED",
    "Binary",
    "ContextItem",
    "Json",
    "LineageEdge",
    "Payload",
    "Reference",
    "Retention",
    "Role",
    "Sensitivity",
    "Source",
    "Text",
    "Truncation",
    "Trust",
    "canonical_json",
    "canonical_json_list",
    "canonical_objects",
    "content_hash",
    "content_hashes",
]


class Role(StrEnum):
    """Who speaks, or what the item is."""

    SYSTEM = "system"
    DEVELOPER = "developer"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"
    DOCUMENT = "document"
    MEMORY = "memory"


class Trust(StrEnum):
    """Whether the application asserts the content is trusted (default untrusted)."""

    TRUSTED = "trusted"
    UNTRUSTED = "untrusted"


class Sensitivity(StrEnum):
    """How sensitive the content is, ordered ``public < internal < confidential < restricted``."""

    PUBLIC = "public"
    INTERNAL = "internal"
    CONFIDENTIAL = "confidential"
    RESTRICTED = "restricted"


class Retention(StrEnum):
    """Packing contract: ``required`` goes first, ``preferred`` before ``optional``.

    A ``required`` item is never dropped for the budget: a pack that cannot
    hold its required items raises ``BudgetError`` (or, with
    ``overflow="truncate"``, cuts the truncatable ones). Time validity and
    policies still apply: a required item expired or not yet valid at the
    pack's ``as_of`` is left out with that reason, and one a policy excludes
    or that is quarantined makes the pack fail.
    """

    REQUIRED = "required"
    PREFERRED = "preferred"
    OPTIONAL = "optional"


def canonical_json(value: Any) -> str:
    """Serialise ``value`` as canonical JSON: sorted keys, compact separators, UTF-8 text.

    Parameters
    ----------
    value
        Any JSON-serialisable value (no NaN or infinity).

    Returns
    -------
    str
        The canonical text.

    Raises
    ------
    ValueError
        If ``value`` holds NaN, infinity or something JSON cannot represent,
        or is nested too deeply for Python to encode.

    Examples
    --------
    >>> canonical_json({"b": 1, "a": [True, None, "é"]})
    '{"a":[true,null,"é"],"b":1}'
    """
    try:
        return json.dumps(
            value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        )
    except TypeError as exc:
        raise ValueError(f"not JSON-serialisable: {exc}") from None
    except RecursionError:
        raise ValueError("nested too deeply to encode as JSON") from None


def content_hash(kind: str, canonical: bytes) -> str:
    """Return the sha256 hex digest of a payload kind and its canonical bytes.

    The digest covers ``kind``, one NUL byte, then ``canonical``, so two
    payloads of different kinds never share a hash.

    Examples
    --------
    >>> content_hash("text", b"hello") == hashlib.sha256(b"text" + bytes(1) + b"hello").hexdigest()
    True
    >>> content_hash("text", b"hello")[:16]
    '306f89347195cc05'
    """
    return hashlib.sha256(kind.encode("ascii") + b"\x00" + canonical).hexdigest()


def content_hashes(kind: str, canonical: Iterable[bytes]) -> list[str]:
    """Return :func:`content_hash` of each of many payloads of one kind, in order.

    The hash state after ``kind`` and its NUL byte is computed once and copied
    for each payload, so a column of texts costs one digest per row.

    Examples
    --------
    >>> content_hashes("text", [b"hello", b""]) == [
    ...     content_hash("text", b"hello"), content_hash("text", b"")]
    True
    """
    prefix = hashlib.sha256(kind.encode("ascii") + b"\x00")
    out = []
    for data in canonical:
        digest = prefix.copy()
        digest.update(data)
        out.append(digest.hexdigest())
    return out


_json_value = raising(json_problem)
"""Check a JSON value: nested at most MAX_JSON_DEPTH deep, finite, valid Unicode."""

# defer_build: a model builds its validator and serializer on first use, not on import.
_FROZEN = ConfigDict(frozen=True, extra="forbid", defer_build=True)


class Text(BaseModel):
    """Plain text content."""

    model_config = _FROZEN
    kind: Literal["text"] = "text"
    text: UnicodeStr

    def canonical_bytes(self) -> bytes:
        """UTF-8 bytes of the text."""
        return self.text.encode("utf-8")


class Json(BaseModel):
    """A JSON value, kept in canonical form (sorted keys, compact, UTF-8)."""

    model_config = _FROZEN
    kind: Literal["json"] = "json"
    value: Any

    @field_validator("value")
    @classmethod
    def _serialisable(cls, value: Any) -> Any:
        return _json_value(value)

    @property
    def canonical(self) -> str:
        """The canonical JSON text of the value."""
        return canonical_json(self.value)

    def canonical_bytes(self) -> bytes:
        """UTF-8 bytes of the canonical JSON text."""
        return self.canonical.encode("utf-8")


class Binary(BaseModel):
    """Opaque bytes: stored and round-tripped, never packed. Base64 in JSON."""

    model_config = _FROZEN
    kind: Literal["binary"] = "binary"
    data: bytes

    @field_validator("data", mode="before")
    @classmethod
    def _decode(cls, value: Any) -> Any:
        if isinstance(value, str):
            try:
                return base64.b64decode(value, validate=True)
            except ValueError:
                raise ValueError("binary data must be bytes or base64 text") from None
        return value

    @field_serializer("data", when_used="json")
    def _encode(self, data: bytes) -> str:
        return base64.b64encode(data).decode("ascii")

    def canonical_bytes(self) -> bytes:
        """The bytes themselves."""
        return self.data


class Reference(BaseModel):
    """A pointer to content held elsewhere; packed as the pointer, not the content."""

    model_config = _FROZEN
    kind: Literal["reference"] = "reference"
    uri: UnicodeStr = Field(min_length=1)
    title: UnicodeStr | None = None
    digest: UnicodeStr | None = None

    def canonical_bytes(self) -> bytes:
        """UTF-8 bytes of the canonical JSON of uri, title and digest."""
        return canonical_json({"digest": self.digest, "title": self.title, "uri": self.uri}).encode(
            "utf-8"
        )


Payload = Annotated[Text | Json | Binary | Reference, Field(discriminator="kind")]
"""A context item's content: one of :class:`Text`, :class:`Json`, :class:`Binary`,
:class:`Reference`, told apart by ``kind``."""


class Source(BaseModel):
    """Where content came from (provenance)."""

    model_config = _FROZEN
    uri: UnicodeStr
    kind: UnicodeStr | None = None
    title: UnicodeStr | None = None
    retrieved_at: AwareDatetime | None = None

    @field_validator("retrieved_at", mode="before")
    @classmethod
    def _time_form(cls, value: Any) -> Any:
        if isinstance(value, str) and finer_than_microseconds(value):
            raise ValueError(FINE_TIME_MESSAGE)
        return raising(naive_time_problem)(value)

    @field_validator("retrieved_at")
    @classmethod
    def _utc(cls, value: datetime | None) -> datetime | None:
        return None if value is None else to_utc(value)


class LineageEdge(BaseModel):
    """One step of an item's derivation: what it was made from, and how.

    Parameters
    ----------
    parent_id, parent_hash
        The input item's id and content hash (the hash pins the exact
        content, so an item redacted in place points at its own earlier
        version).
    operation
        How the item was made from the input: ``redact``, ``merge``,
        ``summarise``, ``replace``, ...
    detail
        Free text about the step (for example redaction counts as canonical
        JSON), or ``None``.
    """

    model_config = _FROZEN
    parent_id: ItemId
    parent_hash: UnicodeStr = Field(min_length=1)
    operation: UnicodeStr = Field(min_length=1)
    detail: UnicodeStr | None = None


UNDATED = datetime(1970, 1, 1, tzinfo=UTC)
"""The ``created_at`` of an item that gives none: the Unix epoch, 1970-01-01T00:00:00Z (UTC).

A fixed instant, so an undated item is valid at any ``as_of`` from 1970 on
(packing leaves out an item created after ``as_of``) and reads the same on
every run, as the messages of the chat importers do
(:data:`cognoxium.formats.openai.CHAT_EPOCH` is this instant). Give
``created_at`` where recency matters: an undated item is the oldest of all.
"""

TRUNCATE_KEY = "truncate"
"""The metadata key that marks an item truncatable (see :class:`Truncation`)."""


class Truncation(BaseModel):
    r"""How a pack may cut an item that does not fit whole: ``metadata["truncate"]``.

    An item whose metadata holds ``{"truncate": {"side": ..., "min_tokens": ...}}``
    may be cut at token boundaries to fit a pack (see
    :func:`cognoxium.tokens.truncation.cut_tokens`); only Text payloads can be.
    Both fields may be left out.

    Parameters
    ----------
    side
        The side kept: ``"head"`` (default) keeps the first tokens and drops
        the end; ``"tail"`` keeps the last tokens and drops the beginning (as
        LangChain's ``trim_messages`` strategies ``"first"`` and ``"last"``
        keep the first or last partial content).
    min_tokens
        The fewest tokens of the text worth sending, in tokens (>= 1,
        default 1): a cut that would keep fewer is refused and the item is
        excluded whole.
    note
        ``None`` (the default): the cut text is sent as it is. Otherwise a
        line sent with a cut text, after it (side ``"head"``) or before it
        (side ``"tail"``), with ``{n}`` replaced by the number of tokens
        cut, as ``"[{n} tokens cut]"``: the model then reads that the text
        goes on. It is counted in the item's cost; ``min_tokens`` counts the
        text kept, without it.

    Examples
    --------
    >>> Truncation.model_validate({"side": "tail", "min_tokens": 32})
    Truncation(side='tail', min_tokens=32, note=None)
    >>> Truncation.model_validate({})
    Truncation(side='head', min_tokens=1, note=None)
    >>> Truncation(note="[{n} tokens cut]").noted("Line 1\nLi", 120)
    'Line 1\nLi\n[120 tokens cut]'
    """

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    side: Literal["head", "tail"] = "head"
    min_tokens: Annotated[int, Field(strict=True, ge=1, le=MAX_INT)] = 1
    note: Annotated[str, Field(strict=True, min_length=1, max_length=1024)] | None = None

    @field_validator("note")
    @classmethod
    def _one_field(cls, note: str | None) -> str | None:
        if note is None:
            return None
        if not note.strip():
            raise ValueError("a note must not be blank")
        try:
            note.format(n=1)
        except (KeyError, IndexError, ValueError, AttributeError) as error:
            raise ValueError(
                f"a note's only field is {{n}} (the tokens cut), as '[{{n}} tokens cut]'; "
                f"{type(error).__name__}: {error}"
            ) from None
        return note

    def noted(self, kept: str, cut: int) -> str:
        """``kept``, the text a cut kept, with the note of the ``cut`` tokens on its side."""
        if self.note is None:
            return kept
        line = self.note.format(n=cut)
        return f"{kept}\n{line}" if self.side == "head" else f"{line}\n{kept}"


_NULL_IS_DEFAULT = frozenset(
    {"sources", "trust", "sensitivity", "retention", "priority", "created_at"}
    | {"parents", "lineage", "metadata"}
)
"""The fields whose default is not ``None``: given as ``None``, each takes its default."""


def _iso(value: datetime) -> str:
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _new_id() -> str:
    return str(uuid.uuid4())


class ContextItem(BaseModel):
    """One typed unit of model input.

    Parameters
    ----------
    id
        Stable identity: non-blank text of at most :data:`~cognoxium.items.MAX_ID_LENGTH`
        (1024) characters, without control characters. Defaults to a random
        UUID4, which is *not* reproducible: give explicit ids for
        deterministic manifests.
    role
        Who speaks or what the item is (:class:`Role`).
    payload
        The content. A JSON record may give ``text`` instead, as shorthand
        for a :class:`Text` payload.
    sources
        Provenance records.
    trust
        ``untrusted`` unless the application asserts ``trusted``.
    sensitivity
        ``public < internal < confidential < restricted``; default ``internal``.
    retention
        ``required`` (never dropped for the budget; see :class:`Retention`),
        ``preferred`` or ``optional`` (default).
    priority
        Higher packs first among equally ranked items. An integer in the
        int64 range; ``true``, ``2.0`` and ``"5"`` are refused (as a
        request's ``budget`` refuses them).
    rank
        Relevance score written by ranking (higher first), a finite number
        (NaN, infinity and booleans are refused); ``None`` if unranked.
    created_at
        UTC creation time. Defaults to :data:`UNDATED`, the Unix epoch
        (1970-01-01T00:00:00Z): an undated item is valid at any ``as_of``
        from 1970 on and the same on every run.
    valid_from, expires_at
        UTC validity bounds; an item is packable when
        ``valid_from <= as_of < expires_at``. ``expires_at`` must not be
        before ``created_at``. Times are ISO 8601 text with a UTC offset or
        timezone-aware datetimes; numbers are refused.
    parents
        Ids of the items this one was derived from (lineage), each an id as
        ``id`` is.
    lineage
        The content-changing steps behind this item (:class:`LineageEdge`),
        oldest first: each names an input by id and content hash.
    group_id
        Items sharing a group id are packed or dropped together; an id as
        ``id`` is.
    metadata
        Free-form JSON object, kept canonical, nested at most
        :data:`~cognoxium.items.MAX_JSON_DEPTH` (64) levels of arrays and objects deep; NaN
        and infinity are refused. A JSON payload's value has the same limits.
        The key ``truncate`` marks the item truncatable: a
        :class:`Truncation` (Text payloads only).

    Notes
    -----
    A field with a default other than ``None`` (``sources``, ``trust``,
    ``sensitivity``, ``retention``, ``priority``, ``created_at``,
    ``parents``, ``lineage``, ``metadata``) given as ``None`` (JSON
    ``null``) takes its default, exactly as when it is left out; the same
    holds for a null in a column of a table.

    Raises
    ------
    pydantic.ValidationError
        On an unknown field, a wrong type, a time without a UTC offset, a payload
        that does not match its kind, an invalid id, text holding a lone
        surrogate (anywhere: text, ids, sources, metadata, JSON payloads),
        ``expires_at`` before ``created_at``, or a malformed
        ``metadata["truncate"]`` (or one on a payload that is not text).

    Examples
    --------
    >>> item = ContextItem(id="t1", role="user", text="hello",
    ...                    created_at="2024-05-01T12:00:00Z")
    >>> item.payload.kind, item.retention.value, item.content_hash[:12]
    ('text', 'optional', '306f89347195')
    """

    model_config = _FROZEN

    id: ItemId = Field(default_factory=_new_id)
    role: Role
    payload: Payload
    sources: tuple[Source, ...] = ()
    trust: Trust = Trust.UNTRUSTED
    sensitivity: Sensitivity = Sensitivity.INTERNAL
    retention: Retention = Retention.OPTIONAL
    priority: Annotated[int, Field(strict=True, ge=MIN_INT, le=MAX_INT)] = 0
    rank: Annotated[float, Field(strict=True, allow_inf_nan=False)] | None = None
    created_at: AwareDatetime = UNDATED
    valid_from: AwareDatetime | None = None
    expires_at: AwareDatetime | None = None
    parents: tuple[ItemId, ...] = ()
    lineage: tuple[LineageEdge, ...] = ()
    group_id: ItemId | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="wrap")
    @classmethod
    def _record_form(cls, data: Any, handler: Any) -> Any:
        """Accept ``text`` as shorthand for a Text payload and check a given content_hash."""
        expected = None
        if isinstance(data, dict):
            # A null field with a default means that default, as the field left out.
            data = {k: v for k, v in data.items() if v is not None or k not in _NULL_IS_DEFAULT}
            if "text" in data:
                if "payload" in data:
                    raise ValueError("give either 'text' or 'payload', not both")
                data["payload"] = {"kind": "text", "text": data.pop("text")}
            expected = data.pop("content_hash", None)
        item = handler(data)
        if expected is not None and expected != item.content_hash:
            raise ValueError(
                f"content_hash {expected!r} does not match the payload "
                f"(computed {item.content_hash!r})"
            )
        return item

    @field_validator("created_at", "valid_from", "expires_at", mode="before")
    @classmethod
    def _time_form(cls, value: Any) -> Any:
        if isinstance(value, str) and finer_than_microseconds(value):
            raise ValueError(FINE_TIME_MESSAGE)
        if value is None or isinstance(value, str | datetime):
            return raising(naive_time_problem)(value)
        raise ValueError("must be an ISO 8601 time with a UTC offset, such as 2024-01-01T00:00:00Z")

    @field_validator("created_at", "valid_from", "expires_at")
    @classmethod
    def _utc(cls, value: datetime | None) -> datetime | None:
        return None if value is None else to_utc(value)

    @field_validator("metadata")
    @classmethod
    def _canonical_metadata(cls, value: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = json.loads(canonical_json(_json_value(value)))
        return result

    @field_validator("expires_at")
    @classmethod
    def _expiry_after_creation(
        cls, value: datetime | None, info: ValidationInfo
    ) -> datetime | None:
        created = info.data.get("created_at")
        if value is not None and created is not None and value < created:
            raise ValueError(
                f"must not be before created_at ({_iso(value)} is before {_iso(created)})"
            )
        return value

    @model_validator(mode="after")
    def _truncation_mark(self) -> ContextItem:
        """Check ``metadata["truncate"]``: a :class:`Truncation`, on a Text payload only."""
        if TRUNCATE_KEY in self.metadata:
            Truncation.model_validate(self.metadata[TRUNCATE_KEY])
            if self.payload.kind != "text":
                raise ValueError(
                    f"metadata.{TRUNCATE_KEY}: only a text payload can be truncated, "
                    f"not {self.payload.kind}"
                )
        return self

    @computed_field  # type: ignore[prop-decorator]
    @cached_property
    def content_hash(self) -> str:
        """sha256 hex of the payload kind and its canonical bytes."""
        return content_hash(self.payload.kind, self.payload.canonical_bytes())
