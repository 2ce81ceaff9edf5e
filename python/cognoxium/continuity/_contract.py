"""The base of every continuity contract: validation, serialisation and JSON Schema.

A contract is a pydantic model whose validation errors surface as
:class:`~cognoxium.exceptions.ContractError`. It serialises to a JSON-safe
dict and to canonical JSON (sorted keys, compact), and describes itself with a
JSON Schema. A field named ``context`` holds live runtime objects: it is
excluded from the dict, the JSON and the schema, so a contract rebuilt from
either has ``context`` set to ``None``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from datetime import datetime
from typing import Annotated, Any, Self

import numpy as np
import numpy.typing as npt
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    PlainSerializer,
    PlainValidator,
    ValidationError,
    WithJsonSchema,
)

from cognoxium.exceptions import ContractError
from cognoxium.items.model import canonical_json

__all__ = [
    "CONTEXT_FIELD",
    "Contract",
    "Seconds",
    "Vector",
    "check_seconds",
    "to_seconds",
    "to_vector",
]

CONTEXT_FIELD = "context"
"""The name of the runtime-only field that serialisation and the schema leave out."""

# Years 1 to 9999 in seconds since the Unix epoch: the span a UTC datetime can hold.
_MIN_SECONDS = -62_135_596_800.0
_MAX_SECONDS = 253_402_300_799.0


def _error(cls: type, exc: ValidationError) -> ContractError:
    parts = []
    for err in exc.errors(include_url=False):
        loc = ".".join(str(p) for p in err["loc"]) or "(input)"
        parts.append(f"{loc}: {err['msg']}")
    return ContractError(f"{cls.__name__}: " + "; ".join(parts))


def _summaries(node: Any) -> Any:
    """Cut every ``description`` of a JSON Schema to its first paragraph, on one line."""
    if isinstance(node, dict):
        return {
            key: " ".join(value.split("\n\n")[0].split())
            if key == "description" and isinstance(value, str)
            else _summaries(value)
            for key, value in node.items()
        }
    if isinstance(node, list):
        return [_summaries(value) for value in node]
    return node


def to_vector(value: Any, *, copy: bool = True) -> npt.NDArray[np.float32]:
    """Validate a vector: one-dimensional, finite, stored as a read-only ``float32`` copy.

    ``float32`` is the dtype of the :class:`~cognoxium.retrieval.embeddings.Embedder`
    protocol; a ``float32`` vector survives a round trip through JSON exactly.

    Parameters
    ----------
    value
        A numpy array or a sequence of numbers, shape ``(dim,)``.
    copy
        Return a read-only copy (the default). With ``False``, a ``float32``
        array is returned as it is, flags untouched, for a caller that copies
        it anyway.

    Returns
    -------
    numpy.ndarray
        ``float32``, shape ``(dim,)``, not writeable (with ``copy``).

    Raises
    ------
    ValueError
        If ``value`` is not a one-dimensional array of finite numbers (inside
        a contract this surfaces as :class:`~cognoxium.exceptions.ContractError`).

    Examples
    --------
    >>> to_vector([1, 0.5]).dtype, to_vector([1, 0.5]).flags.writeable
    (dtype('float32'), False)
    """
    if isinstance(value, str | bytes | Mapping):
        raise ValueError(f"a vector must be a sequence of numbers, got {type(value).__name__}")
    try:
        array = np.array(value, dtype=np.float32, copy=True if copy else None)
    except (TypeError, ValueError, OverflowError):
        raise ValueError("a vector must be a sequence of numbers") from None
    if array.ndim != 1:
        raise ValueError(f"a vector must be one-dimensional, got shape {array.shape}")
    if not np.isfinite(array).all():
        raise ValueError("a vector must hold finite float32 numbers (no NaN or infinity)")
    if copy:
        array.flags.writeable = False
    return array


def _vector_list(array: npt.NDArray[np.float32]) -> list[float]:
    values: list[float] = array.tolist()
    return values


Vector = Annotated[
    npt.NDArray[np.float32],
    PlainValidator(to_vector),
    PlainSerializer(_vector_list, return_type=list[float]),
    WithJsonSchema({"type": "array", "items": {"type": "number"}}),
]
"""A one-dimensional ``float32`` vector; a list of numbers in JSON."""


def to_seconds(value: Any) -> Any:
    """Turn a timezone-aware datetime into seconds since the Unix epoch (UTC).

    Numbers pass through unchanged (pydantic checks them next, and
    :func:`check_seconds` after that); a naive datetime or a bool is rejected.

    Raises
    ------
    ValueError
        On a naive datetime or a bool.

    Examples
    --------
    >>> from datetime import UTC, datetime
    >>> to_seconds(datetime(1970, 1, 1, 0, 0, 2, tzinfo=UTC))
    2.0
    """
    if isinstance(value, bool):
        raise ValueError("a time must be seconds since the Unix epoch, not a bool")
    if isinstance(value, datetime):
        if value.utcoffset() is None:
            raise ValueError("a datetime must be timezone-aware")
        return value.timestamp()
    return value


def check_seconds(value: float) -> float:
    """Check that a time is finite and within the years 1 to 9999 (seconds, UTC).

    Raises
    ------
    ValueError
        On NaN, infinity or an out-of-range time.

    Examples
    --------
    >>> check_seconds(1.5)
    1.5
    """
    if not math.isfinite(value) or not _MIN_SECONDS <= value <= _MAX_SECONDS:
        raise ValueError(
            "a time must be finite seconds since the Unix epoch within the years 1 to 9999, "
            f"got {value!r}"
        )
    return value


Seconds = Annotated[float, BeforeValidator(to_seconds), AfterValidator(check_seconds)]
"""Seconds since the Unix epoch, UTC; an aware datetime is accepted and converted."""


class Contract(BaseModel):
    """Base class of the continuity contracts.

    A contract is a pydantic model with three extra promises:

    - every validation failure (at construction, on assignment, or in
      :meth:`from_dict` / :meth:`from_json`) raises
      :class:`~cognoxium.exceptions.ContractError` naming the contract, the
      field and what was wrong;
    - :meth:`to_dict`, :meth:`to_json` and :meth:`json_schema` leave out the
      runtime-only ``context`` field, and the classmethods :meth:`from_dict`
      / :meth:`from_json` rebuild the contract with ``context`` ``None``;
    - two contracts are equal when they are of the same class and their
      :meth:`to_dict` forms are equal (``context`` is not compared).

    Extend a contract by subclassing it and adding fields; never replace it.
    Unknown fields are rejected (``extra="forbid"``) unless a contract says
    otherwise.

    Examples
    --------
    >>> class Ping(Contract):
    ...     n: int = 0
    >>> Ping(n=2).to_json()
    '{"n":2}'
    >>> Ping.from_json('{"n": 2}') == Ping(n=2)
    True
    >>> Ping(n="two")
    Traceback (most recent call last):
    ...
    cognoxium.exceptions.ContractError: Ping: n: Input should be a valid integer, ...
    """

    model_config = ConfigDict(
        arbitrary_types_allowed=True, validate_assignment=True, extra="forbid"
    )

    def __init__(self, /, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise _error(type(self), exc) from None

    def __setattr__(self, name: str, value: Any) -> None:
        try:
            super().__setattr__(name, value)
        except ValidationError as exc:
            raise _error(type(self), exc) from None

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self) or not isinstance(other, Contract):
            return NotImplemented
        return self.to_dict() == other.to_dict()

    __hash__ = None  # type: ignore[assignment]

    def to_dict(self) -> dict[str, Any]:
        """Return the contract as a JSON-safe dict, without ``context``.

        Vectors become lists of numbers; nested contracts declared with
        ``SerializeAsAny`` (all of this package's) are dumped with the fields
        of their own, possibly extended, class.
        """
        data: dict[str, Any] = self.model_dump(mode="json", exclude={CONTEXT_FIELD})
        return data

    def to_json(self) -> str:
        """Return the contract as canonical JSON (sorted keys, compact), without ``context``."""
        return canonical_json(self.to_dict())

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        """Rebuild a contract from :meth:`to_dict` output; ``context`` is ``None``.

        Raises
        ------
        ContractError
            If ``data`` is not a mapping, holds a ``context`` key (it is
            runtime-only), or does not validate.
        """
        if not isinstance(data, Mapping):
            raise ContractError(
                f"{cls.__name__}.from_dict takes a mapping, got {type(data).__name__}"
            )
        if CONTEXT_FIELD in data:
            raise ContractError(
                f"{cls.__name__}.from_dict: {CONTEXT_FIELD!r} is runtime-only and cannot be "
                "deserialised; set it on the rebuilt contract instead"
            )
        try:
            return cls.model_validate(dict(data))
        except ValidationError as exc:
            raise _error(cls, exc) from None

    @classmethod
    def from_json(cls, text: str | bytes) -> Self:
        """Rebuild a contract from :meth:`to_json` output; ``context`` is ``None``.

        Raises
        ------
        ContractError
            If ``text`` is not JSON or does not validate (see :meth:`from_dict`).
        """
        try:
            data = json.loads(text)
        except (TypeError, ValueError) as exc:
            raise ContractError(f"{cls.__name__}.from_json: not valid JSON ({exc})") from None
        return cls.from_dict(data)

    @classmethod
    def json_schema(cls) -> dict[str, Any]:
        """Return the JSON Schema (draft 2020-12) of what :meth:`from_dict` accepts.

        The ``context`` field is not in it. Descriptions are the first
        paragraph of each class's docstring.
        """
        schema: dict[str, Any] = _summaries(cls.model_json_schema(mode="validation"))
        return schema

    def check(self) -> None:
        """Validate the current field values again (lists may have been mutated in place).

        Fields are validated on construction and on assignment, so only a
        contract holding a list, dict or set can have become invalid; any
        other contract passes at once.

        Raises
        ------
        ContractError
            If a field no longer validates.
        """
        values = {name: getattr(self, name) for name in type(self).model_fields}
        values.update(self.__pydantic_extra__ or {})
        if not any(isinstance(value, list | dict | set) for value in values.values()):
            return
        try:
            type(self).model_validate(values)
        except ValidationError as exc:
            raise _error(type(self), exc) from None
