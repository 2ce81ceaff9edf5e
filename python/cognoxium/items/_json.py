"""Canonical JSON for whole columns: many values encoded, many texts checked, at once.

:func:`~cognoxium.items.model.canonical_json` sets up an encoder on every
call, which costs more than encoding a small object. The functions here
encode and check a column of values with one encoder (CPython's C encoder,
built once), and recognise a column of texts that is already canonical by
parsing it as one JSON array, so a column costs one parse and one encode per
value instead of a Python call chain per value. A column of objects without
floats (text keys; values, at every depth, that are text, integers, booleans,
null, objects or arrays) is encoded by orjson, whose bytes equal the canonical
form for exactly those values.
"""

from __future__ import annotations

import json
from itertools import chain
from json import encoder as json_encoder
from typing import Any

import orjson
import polars as pl

__all__ = [
    "canonical_json_list",
    "canonical_object_column",
    "canonical_objects",
    "canonical_text_list",
]

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


_EXACT_VALUES = frozenset({str, int, bool, type(None), dict, list})
"""The exact value types whose orjson bytes equal the canonical JSON text."""

_ORJSON_DEPTH = 254
"""The deepest nesting :func:`canonical_object_column` checks: orjson encodes no deeper."""

_ORJSON_CANONICAL = orjson.OPT_SORT_KEYS | orjson.OPT_PASSTHROUGH_SUBCLASS
"""orjson's options for the canonical form: keys sorted by code point; a subclass of
``str``, ``int``, ``dict`` or ``list`` is refused rather than encoded as its base."""

_ROW_BREAK = orjson.Fragment(b"\n")
"""A raw line break between two encoded rows: compact JSON never holds one."""


def canonical_object_column(values: list[Any], name: str) -> pl.Series | None:
    r"""Canonical JSON text of a column of objects without floats, or ``None`` if it is not one.

    Each value must be a ``dict`` (exactly) whose keys are ``str`` and
    whose values, at every depth, are ``str``, ``int``, ``bool``, ``None``,
    ``dict`` or ``list`` (exact types, no subclass). For those values
    orjson's output (keys sorted by code point, compact, UTF-8, the same
    string escapes) equals :func:`~cognoxium.items.model.canonical_json`
    byte for byte, as the hypothesis tests of
    ``tests/items/test_columnar_records.py`` check; a float is written in
    another form (``1e+16`` against orjson's ``1e16``). orjson refuses a
    key that is not exactly ``str``, an integer beyond 64 bits, text with
    a lone surrogate and nesting deeper than it recurses; such a column,
    and any other, gives ``None``, for the caller to encode with
    :func:`canonical_json_list`, which words its errors.

    The types are checked one depth at a time, over all the values of that
    depth at once. The column is encoded in one call, the rows separated by
    a raw line break (which compact JSON never holds, text escapes it), and
    split apart by Polars: no Python call per row.

    Parameters
    ----------
    values
        ``n`` values.
    name
        The name of the column returned.

    Returns
    -------
    polars.Series or None
        ``n`` texts (String), or ``None`` when the values are not all such
        objects that orjson encodes.

    Examples
    --------
    >>> canonical_object_column([{"b": 1, "a": "é"}, {"c": {"z": [1, None], "y": True}}],
    ...                         "metadata").to_list()
    ['{"a":"é","b":1}', '{"c":{"y":true,"z":[1,null]}}']
    >>> canonical_object_column([{"a": [1.5]}], "metadata") is None
    True
    """
    if not _exact_objects(values):
        return None
    if not values:
        return pl.Series(name, [], pl.String)
    rows = [_ROW_BREAK] * (2 * len(values) - 1)
    rows[::2] = values
    try:
        encoded = orjson.dumps(rows, option=_ORJSON_CANONICAL)
    except orjson.JSONEncodeError:
        return None  # a key that is not text, a big integer, a lone surrogate, deep nesting
    whole = pl.Series(name, [encoded[1:-1]], pl.Binary).cast(pl.String)
    return whole.str.split(",\n,").explode().alias(name)


def _exact_objects(values: list[Any]) -> bool:
    """Whether every value is a dict whose values at every depth have :data:`_EXACT_VALUES` types.

    One depth at a time: the values of all the dicts and lists of a depth
    are gathered, their types checked at once, and the dicts and lists
    among them make the next depth. Past :data:`_ORJSON_DEPTH` depths
    (more than orjson encodes, or a value holding itself), ``False``.
    """
    dicts: list[Any] = values
    lists: list[Any] = []
    for _ in range(_ORJSON_DEPTH):
        try:
            # dict.values refuses a value that is not a dict; orjson refuses a subclass.
            inner = [*chain.from_iterable(map(dict.values, dicts)), *chain.from_iterable(lists)]
        except TypeError:
            return False
        found = set(map(type, inner))
        if not found <= _EXACT_VALUES:
            return False
        if dict not in found and list not in found:
            return True
        dicts = [value for value in inner if type(value) is dict] if dict in found else []
        lists = [value for value in inner if type(value) is list] if list in found else []
    return False


def canonical_objects(key: str, values: pl.Series) -> pl.Series:
    r"""Canonical JSON of the object ``{key: value}`` for each text value, ``{}`` for null.

    Built as column operations: a value without a character that JSON
    escapes (``"``, ``\``, U+0000-U+001F) is written between quotes as
    it is; only the others are escaped, one by one, by the encoder's own
    string escaping. Each result equals
    :func:`~cognoxium.items.model.canonical_json` of its object.

    Parameters
    ----------
    key
        The one key.
    values
        ``(n,)`` String: the texts, null for none.

    Returns
    -------
    polars.Series
        ``(n,)`` String, named as ``values``.

    Examples
    --------
    >>> canonical_objects("message_id", pl.Series(["m-1", None, 'a"b'])).to_list()
    ['{"message_id":"m-1"}', '{}', '{"message_id":"a\\"b"}']
    """
    escape = json_encoder.encode_basestring
    head = "{" + escape(key) + ":"
    escaped = values.str.contains(r'[\x00-\x1f"\\]').fill_null(False)
    value = pl.col(values.name)
    quoted = pl.concat_str([pl.lit(head + '"'), value, pl.lit('"}')])
    objects = pl.when(value.is_null()).then(pl.lit("{}")).otherwise(quoted).alias(values.name)
    texts = values.to_frame().select(objects).to_series()
    rows = escaped.arg_true()
    if not len(rows):
        return texts
    return texts.scatter(rows, [head + escape(v) + "}" for v in values.gather(rows)])


def canonical_text_list(texts: list[str]) -> list[bool] | None:
    """Which JSON texts are already canonical, found with one parse of them all.

    The texts are parsed as one JSON array (by orjson, or by :mod:`json`
    where orjson refuses it) and each element encoded again (objects without
    floats by :func:`canonical_object_column`); a text is canonical when it equals
    its element's encoding. When the array does not parse into exactly
    ``n`` elements (a text that is not JSON on its own, nesting too deep),
    nothing is known and the caller checks text by text.

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
    array = "[" + ",".join(texts) + "]"
    try:
        # orjson reads a subset of what json reads; a value it reads differently
        # (an integer beyond 64 bits, as a float) encodes to other text, so its
        # text is not flagged and is checked one by one.
        values = orjson.loads(array)
    except orjson.JSONDecodeError:
        try:
            values = json.loads(array)
        except (ValueError, RecursionError):
            return None
    if len(values) != len(texts):
        return None
    # A flagged text equals the encoding of some value, so it is canonical JSON on
    # its own, even where pieces that are not JSON alone paired up in the array.
    exact = canonical_object_column(values, "json")
    if exact is not None:
        return exact.eq(pl.Series(texts, dtype=pl.String)).to_list()
    try:
        encoded = canonical_json_list(values)
    except (ValueError, TypeError, RecursionError):
        return None
    return list(map(str.__eq__, encoded, texts))
