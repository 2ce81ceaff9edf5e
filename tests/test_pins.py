"""The byte-pin comparisons name the first differing request, item and field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.pins import ManifestDigests, assert_same_outputs, manifest_lines

SAMPLE_MANIFESTS = Path(__file__).parent / "app" / "data" / "sample_manifests.jsonl"
LINES = SAMPLE_MANIFESTS.read_text(encoding="utf-8").splitlines()
PACKS, MANIFESTS = "packs/part-00000.jsonl", "manifests/part-00000.jsonl"


def _changed(index: int, entry: int, field: str, value: object) -> list[str]:
    manifest = json.loads(LINES[index])
    manifest["entries"][entry][field] = value
    return [*LINES[:index], json.dumps(manifest, separators=(",", ":")), *LINES[index + 1 :]]


def _outputs(lines: list[str]) -> dict[str, bytes]:
    packs = [{"request_id": json.loads(line)["label"], "ids": []} for line in lines]
    return {
        PACKS: "".join(json.dumps(p) + "\n" for p in packs).encode(),
        MANIFESTS: "".join(line + "\n" for line in lines).encode(),
    }


def test_equal_outputs_pass_and_their_manifests_read_back() -> None:
    assert_same_outputs(_outputs(LINES), _outputs(LINES), [PACKS, MANIFESTS])
    assert manifest_lines(_outputs(LINES)) == LINES


def test_differing_manifests_name_the_first_request_item_and_field() -> None:
    changed = _changed(4, 2, "priority", 99)
    label = json.loads(LINES[4])["label"]
    item = json.loads(LINES[4])["entries"][2]["id"]
    with pytest.raises(AssertionError) as info:
        assert_same_outputs(_outputs(changed), _outputs(LINES), [MANIFESTS])
    message = str(info.value)
    assert message.startswith(f"{MANIFESTS}: request {label!r} (line 5) is the first")
    assert f"entries[id={item!r}].priority\n[left]:  99" in message


def test_differing_packs_name_the_first_request_and_its_fields() -> None:
    left, right = _outputs(LINES), _outputs(LINES)
    records = right[PACKS].decode().splitlines()
    first = json.loads(records[1])
    records[1] = json.dumps({**first, "ids": ["x"]})
    right[PACKS] = "".join(r + "\n" for r in records).encode()
    with pytest.raises(AssertionError, match=r"request '.+' \(line 2\) differs first: \{'ids'"):
        assert_same_outputs(left, right, [PACKS])


def test_digests_name_the_first_request_its_changed_items_and_the_fields(tmp_path: Path) -> None:
    pinned = ManifestDigests.from_json(ManifestDigests.of(LINES).to_json())
    pinned.assert_match(LINES, what="sample", update=tmp_path / "new.json")
    assert not (tmp_path / "new.json").exists()
    changed = _changed(3, 1, "tokens", 12345)
    manifest = json.loads(LINES[3])
    with pytest.raises(AssertionError) as info:
        pinned.assert_match(changed, what="sample", update=tmp_path / "new.json")
    assert str(info.value).splitlines()[:4] == [
        f"sample: {len(LINES)} manifests, {len(LINES)} pinned",
        f"first differing request: request {manifest['label']!r} (line 4)",
        f"its items whose entries differ (in any request): [{manifest['entries'][1]['id']!r}]",
        "fields that differ (in any request): ['entries.tokens']",
    ]
    assert ManifestDigests.from_json((tmp_path / "new.json").read_text()) == ManifestDigests.of(
        changed
    )
