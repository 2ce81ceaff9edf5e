"""Canonical JSON for whole columns: many values encoded, many texts checked, at once.

:func:`~cognoxium.items.model.canonical_json` sets up an encoder on every
call, which costs more than encoding a small object. The functions here
encode and check a column of values with one encoder (CPython's C encoder,
built once), and recognise a column of texts that is already canonical by
parsing it as one JSON array, so a column costs one parse and one encode per
value instead of a Python call chain per value.
"""

from __future__ import annotations

import json
from json import encoder as json_encoder
from typing import Any

__all__ = ["canonical_json_list", "canonical_objects", "canonical_text_list"]

_CANONICAL = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)
"""Encodes as :func:`~cognoxium.items.model.canonical_json` does."""

_C_ENCODER = getattr(json_encoder, "c_make_encoder", None)
_ENCODE_ONE = (
    None
    if _C_ENCODER is None
    else _C_ENCODER(
        None,  # no circular-reference markers: a cycle raises RecursionError
        _CANONICAL.default,
        json_encoder.encode_basestring,
        None,
        ":",
        ",",
        True,  # sort_keys
        False,  # skipkeys
        False,  # allow_nan
    )
)
"""CPython's C encoder with the canonical settings, built once (``None`` elsewhere)."""


def canonical_json_list(values: list[Any]) -> list[str]:
    """Canonical JSON text of every value, in order (sorted keys, compact, UTF-8 text).

    Each text equals :func:`~cognoxium.items.model.canonical_json` of its
    value; values whose keys are not all text are the caller's to refuse
    first (the encoder turns number keys into text).

    Parameters
    ----------
    values
        JSON values, length ``n``.

    Returns
    -------
    list of str
        ``n`` texts.

    Raises
    ------
    ValueError
        At a NaN or infinity.
    TypeError
        At a value JSON cannot represent.
    RecursionError
        At a value nested deeper than Python can encode, or holding itself.

    Examples
    --------
    >>> canonical_json_list([{"b": 1, "a": "é"}, [], None])
    ['{"a":"é","b":1}', '[]', 'null']
    """
    if _ENCODE_ONE is None:  # pragma: no cover - CPython always has the C encoder
        return [_CANONICAL.encode(value) for value in values]
    encode, join = _ENCODE_ONE, "".join
    return [join(encode(value, 0)) for value in values]


def canonical_objects(key: str, values: list[str | None]) -> list[str]:
    r"""Canonical JSON of the object ``{key: value}`` for each text value, ``{}`` for ``None``.

    The text is escaped by the encoder's own string escaping, so each result
    equals :func:`~cognoxium.items.model.canonical_json` of its object.

    Parameters
    ----------
    key
        The one key.
    values
        ``n`` texts or ``None``.

    Returns
    -------
    list of str
        ``n`` texts.

    Examples
    --------
    >>> canonical_objects("message_id", ["m-1", None, 'a"b'])
    ['{"message_id":"m-1"}', '{}', '{"message_id":"a\\"b"}']
    """
    escape = json_encoder.encode_basestring
    head = "{" + escape(key) + ":"
    return ["{}" if value is None else head + escape(value) + "}" for value in values]


def canonical_text_list(texts: list[str]) -> list[bool] | None:
    """Which JSON texts are already canonical, found with one parse of them all.

    The texts are parsed as one JSON array and each element encoded again;
    a text is canonical when it equals its element's encoding. When the
    array does not parse into exactly ``n`` elements (a text that is not
    JSON on its own, NaN, nesting too deep), nothing is known and the caller
    checks text by text.

    Parameters
    ----------
    texts
        ``n`` texts.

    Returns
    -------
    list of bool or None
        ``n`` flags, true where the text is canonical JSON; ``None`` when the
        texts must be checked one by one.

    Examples
    --------
    >>> canonical_text_list(['{"a":1}', '{"b": 2}'])
    [True, False]
    >>> canonical_text_list(['1,2', '3']) is None
    True
    """
    if not texts:
        return []
    try:
        values = json.loads("[" + ",".join(texts) + "]")
        if len(values) != len(texts):
            return None
        encoded = canonical_json_list(values)
    except (ValueError, TypeError, RecursionError):
        return None
    # A flagged text equals the encoding of some value, so it is canonical JSON on
    # its own, even where pieces that are not JSON alone paired up in the array.
    return list(map(str.__eq__, encoded, texts))
