"""Asserts that two packs or two manifests are equal, naming every difference.

Like :func:`polars.testing.assert_frame_equal`, each assert returns ``None``
when its inputs are equal and otherwise raises :class:`AssertionError` whose
message lists each difference: where it is (a field path such as
``used_tokens``, ``totals.by_reason.selected`` or
``entries[id='doc'].reason``), then the left and the right value.

Rows are matched by item id, never by position, so one item missing or
moved is reported once and does not shift every later row; a different order
shows as the ``ids`` (or ``entries.id``) difference and in the ``position`` of
the moved entries.

What the ignore options drop
----------------------------
``ignore_as_of``
    The manifest's ``as_of`` and its ``fingerprints['settings']`` (the
    settings fingerprint hashes ``as_of`` together with the budget and the
    profile, which stay compared on their own). Decisions that depend on the
    time (``expired``, ``not_yet_valid``) stay compared: packing the same
    items at two times that decide differently is a difference.
``ignore_timings``
    Wall-clock measurements: every key named ``timings`` or ending in
    ``_seconds`` or ``_ms``, at any depth of the manifest. Manifests of format
    ``cognoxium.pack_manifest/1`` made by :func:`~cognoxium.packing.packer.pack`
    record none, so the option matters for manifest data read from JSON
    (given as a mapping) that carries such keys.
``ignore_fields``
    Dotted paths without indices: ``"label"``, ``"fingerprints.input"``,
    ``"entries.tokens"``, ``"merges.resolved"``; for a pack also ``"messages"``,
    ``"frame.metadata"`` and the manifest's paths under ``"manifest."``.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl

from cognoxium.packing.packer import ContextPack, PackManifest

__all__ = ["assert_manifest_equal", "assert_pack_equal"]

_SHOWN = 20
"""At most this many differences are spelled out in one message."""

_TIMING_SUFFIXES = ("_seconds", "_ms")


class _Missing:
    """Stands for a key that one side lacks."""

    def __repr__(self) -> str:
        return "<missing>"


_MISSING = _Missing()


@dataclass(frozen=True)
class _Difference:
    path: str
    left: Any
    right: Any


@dataclass(frozen=True)
class _Ignore:
    """Dotted key paths to skip, and whether timing keys are dropped."""

    paths: frozenset[str]
    timings: bool

    def skips(self, keys: tuple[str, ...]) -> bool:
        if self.timings and keys and _is_timing(keys[-1]):
            return True
        return any(".".join(keys[:k]) in self.paths for k in range(1, len(keys) + 1))


def _is_timing(key: str) -> bool:
    return key == "timings" or key.endswith(_TIMING_SUFFIXES)


def _same(left: Any, right: Any) -> bool:
    """Equality in which NaN equals NaN and ``True`` is not ``1``, through lists and dicts."""
    if isinstance(left, bool) or isinstance(right, bool):
        return type(left) is type(right) and left == right
    if isinstance(left, float) and isinstance(right, float) and math.isnan(left):
        return math.isnan(right)
    if isinstance(left, list | tuple) and isinstance(right, list | tuple):
        return len(left) == len(right) and all(
            _same(a, b) for a, b in zip(left, right, strict=True)
        )
    if isinstance(left, Mapping) and isinstance(right, Mapping):
        return left.keys() == right.keys() and all(_same(left[k], right[k]) for k in left)
    return bool(left == right)


def _path(base: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{base}[{key}]"
    if key.isidentifier():
        return f"{base}.{key}" if base else key
    return f"{base}[{key!r}]"


def _walk(
    left: Any, right: Any, path: str, keys: tuple[str, ...], ignore: _Ignore
) -> Iterator[_Difference]:
    """Differences between two JSON-like values, field by field and element by element."""
    if isinstance(left, Mapping) and isinstance(right, Mapping):
        for key in [*left, *(k for k in right if k not in left)]:
            sub = (*keys, str(key))
            if ignore.skips(sub):
                continue
            at = _path(path, str(key))
            if key not in right:
                yield _Difference(at, left[key], _MISSING)
            elif key not in left:
                yield _Difference(at, _MISSING, right[key])
            else:
                yield from _walk(left[key], right[key], at, sub, ignore)
        return
    if (
        isinstance(left, list)
        and isinstance(right, list)
        and len(left) == len(right)
        and not _same(left, right)
    ):
        for index, (a, b) in enumerate(zip(left, right, strict=True)):
            yield from _walk(a, b, _path(path, index), keys, ignore)
        return
    if not _same(left, right):
        yield _Difference(path, left, right)


def _rows(
    left: Sequence[Mapping[str, Any]],
    right: Sequence[Mapping[str, Any]],
    name: str,
    keys: tuple[str, ...],
    ignore: _Ignore,
) -> Iterator[_Difference]:
    """Differences between two lists of rows keyed by ``id``: ids first, then fields per id."""
    left_ids = [row["id"] for row in left]
    right_ids = [row["id"] for row in right]
    if left_ids != right_ids:
        yield _Difference(f"{name} ids", left_ids, right_ids)
    by_id = {row["id"]: row for row in right}
    for row in left:
        other = by_id.get(row["id"])
        if other is not None:
            yield from _walk(row, other, f"{name}[id={row['id']!r}]", keys, ignore)


def _raise(kind: str, differences: list[_Difference]) -> None:
    if not differences:
        return
    n = len(differences)
    blocks = [f"{d.path}\n[left]:  {d.left!r}\n[right]: {d.right!r}" for d in differences[:_SHOWN]]
    if n > _SHOWN:
        blocks.append(f"... and {n - _SHOWN} more differences")
    plural = "difference" if n == 1 else "differences"
    message = f"{kind} are different ({n} {plural})\n\n" + "\n\n".join(blocks)
    raise AssertionError(message)


def _checked(manifest: object) -> PackManifest | Mapping[str, Any]:
    if isinstance(manifest, PackManifest | Mapping):
        return manifest
    raise AssertionError(
        f"expected a PackManifest or a mapping of manifest data, got {type(manifest).__name__}"
    )


def _header(manifest: PackManifest | Mapping[str, Any]) -> dict[str, Any]:
    """Everything but the entries, as JSON-ready data (the form ``to_dict`` gives)."""
    data = manifest.to_dict() if isinstance(manifest, PackManifest) else manifest
    return {key: value for key, value in data.items() if key != "entries"}


def _entries(manifest: PackManifest | Mapping[str, Any]) -> Any:
    """The entries as JSON-ready rows (``None`` when a mapping has none)."""
    if isinstance(manifest, PackManifest):
        return manifest.to_dict()["entries"]
    return manifest.get("entries")


def _manifest_differences(
    left: PackManifest | Mapping[str, Any],
    right: PackManifest | Mapping[str, Any],
    ignore: _Ignore,
    prefix: str,
) -> list[_Difference]:
    left, right = _checked(left), _checked(right)
    differences = list(
        _walk(_header(left), _header(right), prefix.rstrip("."), _keys(prefix), ignore)
    )
    entries_keys = (*_keys(prefix), "entries")
    if ignore.skips(entries_keys):
        return differences
    if (
        isinstance(left, PackManifest)
        and isinstance(right, PackManifest)
        and left.to_polars().equals(right.to_polars())
    ):
        return differences
    left_entries, right_entries = _entries(left), _entries(right)
    if left_entries is None and right_entries is None:
        return differences
    if left_entries is None or right_entries is None:
        differences.append(_Difference(f"{prefix}entries", left_entries, right_entries))
        return differences
    differences += _rows(left_entries, right_entries, f"{prefix}entries", entries_keys, ignore)
    return differences


def _keys(prefix: str) -> tuple[str, ...]:
    return tuple(part for part in prefix.split(".") if part)


def _ignore(
    ignore_as_of: bool, ignore_timings: bool, ignore_fields: Collection[str], prefix: str = ""
) -> _Ignore:
    if isinstance(ignore_fields, str):
        raise TypeError(f"ignore_fields takes a collection of dotted paths, got {ignore_fields!r}")
    paths = set(ignore_fields)
    if ignore_as_of:
        paths |= {f"{prefix}as_of", f"{prefix}fingerprints.settings"}
    return _Ignore(frozenset(paths), ignore_timings)


def assert_manifest_equal(
    left: PackManifest | Mapping[str, Any],
    right: PackManifest | Mapping[str, Any],
    *,
    ignore_as_of: bool = False,
    ignore_timings: bool = False,
    ignore_fields: Collection[str] = (),
) -> None:
    """Assert that two pack manifests are equal, naming each field that differs.

    Every field is compared: the header (format, label, budget, used,
    remaining and overhead tokens, ``as_of``, profile, fingerprints, totals,
    policies, policy outcomes, merges, merge rules, lineage) and, matched by
    item id, every field of every entry. Floats are compared exactly (NaN
    equals NaN): a manifest is a deterministic account, not a measurement.

    Parameters
    ----------
    left, right
        The manifests, as :class:`~cognoxium.packing.packer.PackManifest`
        objects or as the JSON-ready data of one (what
        ``PackManifest.to_dict()`` returns, or
        ``json.loads`` of a line of the JSONL manifests).
    ignore_as_of
        Skip ``as_of`` and ``fingerprints['settings']``, which hashes it: for
        packs made at different times, for example with ``as_of=None``.
    ignore_timings
        Skip wall-clock measurements: keys named ``timings`` or ending in
        ``_seconds`` or ``_ms``, at any depth.
    ignore_fields
        Further dotted paths to skip, without indices, for example
        ``{"label", "fingerprints.input", "entries.tokens"}``.

    Raises
    ------
    AssertionError
        If the manifests differ; the message gives, for each difference (the
        first 20 in full), its path (``entries[id='doc'].reason``), the left
        value and the right value. Also if an input is neither a manifest nor
        a mapping.
    TypeError
        If ``ignore_fields`` is a single string instead of a collection.

    See Also
    --------
    assert_pack_equal : The same for whole packs: frame, messages and manifest.

    Examples
    --------
    >>> from datetime import UTC, datetime
    >>> from cognoxium import CognitionFrame
    >>> cf = CognitionFrame([{"id": "q", "role": "user", "text": "Refund window?"},
    ...                      {"id": "doc", "role": "document", "text": "word " * 60}])
    >>> june, july = datetime(2030, 6, 1, tzinfo=UTC), datetime(2030, 7, 1, tzinfo=UTC)
    >>> assert_manifest_equal(cf.pack(100, as_of=june).manifest,
    ...                       cf.pack(100, as_of=july).manifest, ignore_as_of=True)
    >>> assert_manifest_equal(cf.pack(100, as_of=june).manifest,
    ...                       cf.pack(20, as_of=june).manifest,
    ...                       ignore_fields={"budget", "remaining_tokens",
    ...                                      "fingerprints", "totals"})
    Traceback (most recent call last):
    ...
    AssertionError: PackManifest are different (5 differences)
    <BLANKLINE>
    used_tokens
    [left]:  76
    [right]: 11
    <BLANKLINE>
    entries[id='doc'].decision
    [left]:  'included'
    [right]: 'excluded'
    <BLANKLINE>
    entries[id='doc'].reason
    [left]:  'selected'
    [right]: 'over_budget'
    <BLANKLINE>
    entries[id='doc'].tokens
    [left]:  65
    [right]: None
    <BLANKLINE>
    entries[id='doc'].pack_position
    [left]:  1
    [right]: None
    """
    ignore = _ignore(ignore_as_of, ignore_timings, ignore_fields)
    _raise("PackManifest", _manifest_differences(left, right, ignore, ""))


def _frame_differences(
    left: pl.DataFrame, right: pl.DataFrame, ignore: _Ignore
) -> list[_Difference]:
    ignore = _Ignore(ignore.paths, timings=False)
    keep = [c for c in left.columns if not ignore.skips(("frame", c))]
    keep_right = [c for c in right.columns if not ignore.skips(("frame", c))]
    differences = []
    if keep != keep_right:
        differences.append(_Difference("frame columns", keep, keep_right))
    common = [c for c in keep if c in set(keep_right)]
    for column in common:
        if left.schema[column] != right.schema[column]:
            differences.append(
                _Difference(f"frame[{column!r}] dtype", left.schema[column], right.schema[column])
            )
    same_types = [c for c in common if left.schema[c] == right.schema[c]]
    if left.select(same_types).equals(right.select(same_types)):
        return differences
    rows = left.select(["id", *(c for c in same_types if c != "id")])
    other = right.select(["id", *(c for c in same_types if c != "id")])
    differences += _rows(rows.to_dicts(), other.to_dicts(), "frame", ("frame",), ignore)
    return differences


def _message_differences(
    left: ContextPack, right: ContextPack, ignore: _Ignore
) -> Iterator[_Difference]:
    ignore = _Ignore(ignore.paths, timings=False)
    if ignore.skips(("messages",)):
        return
    if len(left.messages) != len(right.messages):
        yield _Difference("len(messages)", len(left.messages), len(right.messages))
    ids = left.ids
    for index, (a, b) in enumerate(zip(left.messages, right.messages, strict=False)):
        item = f" (id {ids[index]!r})" if index < len(ids) else ""
        yield from _walk(a, b, f"messages[{index}]{item}", ("messages",), ignore)


def assert_pack_equal(
    left: ContextPack,
    right: ContextPack,
    *,
    ignore_as_of: bool = False,
    ignore_timings: bool = False,
    ignore_fields: Collection[str] = (),
) -> None:
    """Assert that two packs are equal, naming each field, item and message that differs.

    Compared: ``budget``, ``used_tokens``, ``remaining_tokens``; the packed
    frame (column names and order, dtypes, then every value, rows matched by
    item id); the chat messages, one by one; and the manifest as
    :func:`assert_manifest_equal` compares it, its paths prefixed with
    ``manifest.``.

    Parameters
    ----------
    left, right
        The packs (:class:`~cognoxium.packing.packer.ContextPack`).
    ignore_as_of
        Skip the manifest's ``as_of`` and ``fingerprints['settings']``.
    ignore_timings
        Skip wall-clock measurements in the manifest: keys named ``timings``
        or ending in ``_seconds`` or ``_ms``, at any depth.
    ignore_fields
        Further dotted paths to skip, without indices: ``"messages"``,
        ``"frame.metadata"`` (one column of the frame), ``"manifest.label"``,
        ``"manifest.entries.tokens"``.

    Raises
    ------
    AssertionError
        If the packs differ; the message gives, for each difference (the
        first 20 in full), its path (``frame[id='q'].text``,
        ``messages[0] (id 'q').content``, ``manifest.used_tokens``), the left
        value and the right value. Also if an input is not a ``ContextPack``.
    TypeError
        If ``ignore_fields`` is a single string instead of a collection.

    See Also
    --------
    assert_manifest_equal : The manifest part alone.

    Examples
    --------
    >>> from datetime import UTC, datetime
    >>> from cognoxium import CognitionFrame
    >>> cf = CognitionFrame([{"id": "q", "role": "user", "text": "Mail ada@example.org"}])
    >>> when = datetime(2030, 1, 1, tzinfo=UTC)
    >>> assert_pack_equal(cf.pack(50, as_of=when), cf.pack(50, as_of=when))
    >>> assert_pack_equal(cf.pack(50, as_of=when), cf.redact().pack(50, as_of=when),
    ...                   ignore_fields={"frame", "manifest"})
    Traceback (most recent call last):
    ...
    AssertionError: ContextPack are different (1 difference)
    <BLANKLINE>
    messages[0] (id 'q').content
    [left]:  'Mail ada@example.org'
    [right]: 'Mail [EMAIL]'
    """
    for name, value in (("left", left), ("right", right)):
        if not isinstance(value, ContextPack):
            raise AssertionError(f"{name} is a {type(value).__name__}, expected a ContextPack")
    ignore = _ignore(ignore_as_of, ignore_timings, ignore_fields, prefix="manifest.")
    differences = [
        _Difference(name, getattr(left, name), getattr(right, name))
        for name in ("budget", "used_tokens", "remaining_tokens")
        if not ignore.skips((name,)) and getattr(left, name) != getattr(right, name)
    ]
    if not ignore.skips(("frame",)):
        differences += _frame_differences(left.frame, right.frame, ignore)
    differences += _message_differences(left, right, ignore)
    if not ignore.skips(("manifest",)):
        differences += _manifest_differences(left.manifest, right.manifest, ignore, "manifest.")
    _raise("ContextPack", differences)
