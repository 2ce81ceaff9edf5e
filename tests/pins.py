"""Byte comparisons of batch outputs that, when they fail, name what differs.

A byte pin (two runs write the same bytes, or a run writes the bytes of a
fixture or of a sha256) says only "bytes changed" when it fails. These asserts
compare the bytes first and, only when they differ, read the manifests (and
packs) back and name the first request that differs, with the item and field
(:func:`cognoxium.testing.assert_manifest_equal`).

For outputs too large to keep as a fixture (LoCoMo's manifests),
:class:`ManifestDigests` keeps a short digest per request, per item and per
field: a run that differs from them is reported with its first differing
request, the items and the fields whose values differ.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cognoxium.packing.manifests import read_manifests
from cognoxium.testing import assert_manifest_equal

__all__ = [
    "ManifestDigests",
    "assert_manifest_lines_equal",
    "assert_same_outputs",
    "manifest_lines",
]

MANIFEST_TABLES = frozenset({"manifests", "manifest_headers"})
"""The tables that hold manifests, in either form (JSONL, or Parquet with its headers)."""

Outputs = Path | Mapping[str, bytes]
"""An output directory, or the bytes of its files by path relative to it."""


def table(name: str) -> str:
    """The table a file of an output directory belongs to (``packs/part-00000.jsonl``: packs)."""
    return name.split("/", 1)[0]


def manifest_lines(outputs: Outputs) -> list[str]:
    """The manifests of an output directory (either form) as the lines of manifests.jsonl."""
    if isinstance(outputs, Path):
        return [m.to_json() for m in read_manifests(outputs)]
    with tempfile.TemporaryDirectory(prefix="cognoxium-outputs-") as temporary:
        directory = Path(temporary)
        for name, data in outputs.items():
            if table(name) in MANIFEST_TABLES:
                (directory / name).parent.mkdir(parents=True, exist_ok=True)
                (directory / name).write_bytes(data)
        return [m.to_json() for m in read_manifests(directory)]


def _label(line: str, index: int) -> str:
    return f"request {json.loads(line).get('label')!r} (line {index + 1})"


def assert_manifest_lines_equal(
    actual: Sequence[str], expected: Sequence[str], *, what: str = "manifests"
) -> None:
    """Assert equal manifests, line by line; else name the first differing request, item, field.

    Raises
    ------
    AssertionError
        Naming the first request whose manifest differs and, from
        :func:`~cognoxium.testing.assert_manifest_equal`, each field and item
        id that differs in it; or the requests that one side lacks.
    """
    if list(actual) == list(expected):
        return
    for index, (left, right) in enumerate(zip(actual, expected, strict=False)):
        if left == right:
            continue
        where = _label(left, index)
        try:
            assert_manifest_equal(json.loads(left), json.loads(right))
        except AssertionError as error:
            raise AssertionError(f"{what}: {where} is the first that differs\n{error}") from None
        raise AssertionError(f"{what}: {where} differs in its bytes only:\n{left}\n{right}")
    n = min(len(actual), len(expected))
    extra = [_label(line, n + k) for k, line in enumerate(actual[n:])]
    missing = [_label(line, n + k) for k, line in enumerate(expected[n:])]
    raise AssertionError(f"{what}: {len(actual)} manifests, expected {len(expected)}; "
                         f"extra {extra[:5]}, missing {missing[:5]}")  # fmt: skip


def _packs_difference(actual: bytes, expected: bytes) -> str:
    """The first request of a part of the packs whose record differs, and its differing fields."""
    left = [json.loads(line) for line in actual.decode("utf-8").splitlines()]
    right = [json.loads(line) for line in expected.decode("utf-8").splitlines()]
    for index, (a, b) in enumerate(zip(left, right, strict=False)):
        if a != b:
            fields = {k: (a.get(k), b.get(k)) for k in sorted(a.keys() | b.keys())
                      if a.get(k) != b.get(k)}  # fmt: skip
            return f"request {a.get('request_id')!r} (line {index + 1}) differs first: {fields}"
    return f"{len(left)} records, expected {len(right)}"


def _read(outputs: Outputs, name: str) -> bytes:
    return (outputs / name).read_bytes() if isinstance(outputs, Path) else outputs[name]


def assert_same_outputs(actual: Outputs, expected: Outputs, names: Sequence[str]) -> None:
    """Assert byte-identical output files; else name the file and what differs in it.

    For a part of the manifests, the first differing request, item and field
    (of all the parts read back); for a part of the packs, the first differing
    request and its fields.

    Raises
    ------
    AssertionError
        At the first file (in ``names`` order) whose bytes differ.
    """
    for name in names:
        left, right = _read(actual, name), _read(expected, name)
        if left == right:
            continue
        if table(name) in MANIFEST_TABLES:  # the manifests of either form, read back whole
            assert_manifest_lines_equal(manifest_lines(actual), manifest_lines(expected), what=name)
            raise AssertionError(f"{name}: the bytes differ, the manifests read back are equal")
        if table(name) == "packs":
            raise AssertionError(f"{name}: {_packs_difference(left, right)}")
        raise AssertionError(f"{name}: the bytes differ")


def _digest(data: str) -> str:
    """A 6-hex-digit digest: enough to tell which of a few thousand values changed."""
    return hashlib.sha256(data.encode("utf-8")).hexdigest()[:6]


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True)
class ManifestDigests:
    """Short digests of many manifests: per request, per item (over requests), per field.

    Kept where the manifests themselves are too large to keep (LoCoMo's take
    550 MB per ranking): a run whose bytes differ from the pin is reported
    with its first differing request, the items of that request whose entries
    differ in some request, and the fields whose values differ.

    Attributes
    ----------
    requests
        One digest per manifest line, in order.
    item_ids
        The digest of the item ids, in the order they first appear.
    items
        Per item, in that order, the digest of its entries in every manifest.
    fields
        Per field (``label``, ``used_tokens``, ..., ``entries.decision``), the
        digest of its values in every manifest, in order.
    """

    requests: list[str]
    item_ids: str
    items: list[str]
    fields: dict[str, str]
    ids: list[str] = field(default_factory=list, compare=False)
    """The item ids of the manifests digested (not kept in the JSON form)."""

    @classmethod
    def of(cls, lines: Sequence[str]) -> ManifestDigests:
        """The digests of manifests given as the lines of manifests.jsonl."""
        ids, items, fields = cls._parts(lines)
        return cls(
            requests=[_digest(line) for line in lines],
            item_ids=_digest("\n".join(ids)),
            items=[_digest("\n".join(items[i])) for i in ids],
            fields={k: _digest("\n".join(v)) for k, v in sorted(fields.items())},
            ids=ids,
        )

    @staticmethod
    def _parts(
        lines: Sequence[str],
    ) -> tuple[list[str], dict[str, list[str]], dict[str, list[str]]]:
        items: dict[str, list[str]] = {}
        fields: dict[str, list[str]] = {}
        for line in lines:
            manifest = json.loads(line)
            entries = manifest.pop("entries")
            for key, value in manifest.items():
                fields.setdefault(key, []).append(_json(value))
            for entry in entries:
                items.setdefault(entry["id"], []).append(_json(entry))
            for key in entries[0] if entries else ():
                fields.setdefault(f"entries.{key}", []).append(_json([e[key] for e in entries]))
        return list(items), items, fields

    def to_json(self) -> str:
        """The digests as JSON: the requests' and items' digests as space-separated text."""
        data = {
            "requests": " ".join(self.requests),
            "item_ids": self.item_ids,
            "items": " ".join(self.items),
            "fields": self.fields,
        }
        return json.dumps(data, indent=1, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> ManifestDigests:
        data = json.loads(text)
        return cls(
            requests=data["requests"].split(),
            item_ids=data["item_ids"],
            items=data["items"].split(),
            fields=data["fields"],
        )

    def assert_match(self, lines: Sequence[str], *, what: str, update: Path) -> None:
        """Assert that ``lines`` have these digests; else name the request, items and fields.

        Parameters
        ----------
        lines
            The manifests, as the lines of manifests.jsonl.
        what
            What they are, for the message.
        update
            Where the digests of ``lines`` are written when they differ: the
            file to keep in place of the pinned one when the change is meant.

        Raises
        ------
        AssertionError
            Naming the first request whose manifest differs, the items of
            that request whose entries differ (in any request) and the fields
            whose values differ.
        """
        found = ManifestDigests.of(lines)
        if found == self:
            return
        update.write_text(found.to_json(), encoding="utf-8")
        parts = [f"{what}: {len(lines)} manifests, {len(self.requests)} pinned"]
        for index, (left, right) in enumerate(zip(found.requests, self.requests, strict=False)):
            if left != right:
                parts.append(f"first differing request: {_label(lines[index], index)}")
                entries = json.loads(lines[index])["entries"]
                if found.item_ids == self.item_ids:
                    differ = {i for i, a, b in zip(found.ids, found.items, self.items, strict=True)
                              if a != b}  # fmt: skip
                    changed = [e["id"] for e in entries if e["id"] in differ]
                    parts.append(f"its items whose entries differ (in any request): {changed[:10]}")
                else:
                    parts.append("the item ids differ: items were added, removed or reordered")
                break
        fields = sorted(
            k for k in found.fields.keys() | self.fields.keys()
            if found.fields.get(k) != self.fields.get(k)
        )  # fmt: skip
        parts.append(f"fields that differ (in any request): {fields}")
        parts.append(f"the digests of this run are in {update}")
        raise AssertionError("\n".join(parts))
