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
from datetime import UTC, datetime
from enum import StrEnum
from functools import cached_property
from typing import Annotated, Any, Literal

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    computed_field,
    field_serializer,
    field_validator,
    model_validator,
)

__all__ = [
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
    "Trust",
    "canonical_json",
    "content_hash",
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
    """Packing contract: ``required`` is never dropped, ``preferred`` goes before ``optional``."""

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
        If ``value`` holds NaN, infinity or something JSON cannot represent.

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


_FROZEN = ConfigDict(frozen=True, extra="forbid")


class Text(BaseModel):
    """Plain text content."""

    model_config = _FROZEN
    kind: Literal["text"] = "text"
    text: str

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
        canonical_json(value)
        return value

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
    uri: str = Field(min_length=1)
    title: str | None = None
    digest: str | None = None

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
    uri: str
    kind: str | None = None
    title: str | None = None
    retrieved_at: AwareDatetime | None = None

    @field_validator("retrieved_at")
    @classmethod
    def _utc(cls, value: datetime | None) -> datetime | None:
        return None if value is None else value.astimezone(UTC)


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
    parent_id: str = Field(min_length=1)
    parent_hash: str = Field(min_length=1)
    operation: str = Field(min_length=1)
    detail: str | None = None


def _new_id() -> str:
    return str(uuid.uuid4())


def _now() -> datetime:
    return datetime.now(UTC)


class ContextItem(BaseModel):
    """One typed unit of model input.

    Parameters
    ----------
    id
        Stable identity. Defaults to a random UUID4, which is *not*
        reproducible: give explicit ids for deterministic manifests.
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
        ``required`` (never dropped), ``preferred`` or ``optional`` (default).
    priority
        Higher packs first among equally ranked items.
    rank
        Relevance score written by ranking (higher first); ``None`` if unranked.
    created_at
        UTC creation time. Defaults to the current time (not reproducible).
    valid_from, expires_at
        UTC validity bounds; an item is packable when
        ``valid_from <= as_of < expires_at``.
    parents
        Ids of the items this one was derived from (lineage).
    lineage
        The content-changing steps behind this item (:class:`LineageEdge`),
        oldest first: each names an input by id and content hash.
    group_id
        Items sharing a group id are packed or dropped together.
    metadata
        Free-form JSON object, kept canonical.

    Raises
    ------
    pydantic.ValidationError
        On an unknown field, a wrong type, a naive timestamp or a payload
        that does not match its kind.

    Examples
    --------
    >>> item = ContextItem(id="t1", role="user", text="hello",
    ...                    created_at="2024-05-01T12:00:00Z")
    >>> item.payload.kind, item.retention.value, item.content_hash[:12]
    ('text', 'optional', '306f89347195')
    """

    model_config = _FROZEN

    id: str = Field(default_factory=_new_id, min_length=1)
    role: Role
    payload: Payload
    sources: tuple[Source, ...] = ()
    trust: Trust = Trust.UNTRUSTED
    sensitivity: Sensitivity = Sensitivity.INTERNAL
    retention: Retention = Retention.OPTIONAL
    priority: int = 0
    rank: float | None = None
    created_at: AwareDatetime = Field(default_factory=_now)
    valid_from: AwareDatetime | None = None
    expires_at: AwareDatetime | None = None
    parents: tuple[str, ...] = ()
    lineage: tuple[LineageEdge, ...] = ()
    group_id: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="wrap")
    @classmethod
    def _record_form(cls, data: Any, handler: Any) -> Any:
        """Accept ``text`` as shorthand for a Text payload and check a given content_hash."""
        expected = None
        if isinstance(data, dict):
            data = dict(data)
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

    @field_validator("created_at", "valid_from", "expires_at")
    @classmethod
    def _utc(cls, value: datetime | None) -> datetime | None:
        return None if value is None else value.astimezone(UTC)

    @field_validator("metadata")
    @classmethod
    def _canonical_metadata(cls, value: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = json.loads(canonical_json(value))
        return result

    @computed_field  # type: ignore[prop-decorator]
    @cached_property
    def content_hash(self) -> str:
        """sha256 hex of the payload kind and its canonical bytes."""
        return content_hash(self.payload.kind, self.payload.canonical_bytes())
