"""Lineage edges: from parents and from content-changing steps; traversal; persistence."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import polars as pl

from cognoxium import CognitionFrame
from cognoxium.items.io import read_jsonl, read_parquet, write_jsonl, write_parquet

AS_OF = datetime(2030, 1, 1, tzinfo=UTC)
T0 = "2024-01-01T00:00:00Z"


def frame() -> CognitionFrame:
    return CognitionFrame(
        [
            {"id": "t1", "role": "user", "text": "I moved to Lyon in May.", "created_at": T0},
            {
                "id": "t2",
                "role": "user",
                "text": "I moved to Lyon in May.",
                "rank": 2.0,
                "created_at": T0,
            },
            {
                "id": "m1",
                "role": "memory",
                "text": "Lives in Lyon since May.",
                "parents": ["t1"],
                "created_at": T0,
            },
            {
                "id": "s1",
                "role": "memory",
                "text": "Summary: moved to Lyon.",
                "parents": ["m1", "gone"],
                "created_at": T0,
            },
        ]
    )


def test_edges_from_parents_and_merges() -> None:
    edges = frame().dedupe().lineage()
    rows = edges.select("child_id", "parent_id", "operation").rows()
    assert rows == [
        ("t2", "t1", "merge"),
        ("m1", "t1", "derive"),
        ("s1", "m1", "derive"),
        ("s1", "gone", "derive"),
    ]
    hashes = dict(frame().collect().select("id", "content_hash").rows())
    merge = edges.row(0, named=True)
    assert merge["parent_hash"] == hashes["t1"] == merge["child_hash"]
    assert edges.filter(pl.col("parent_id") == "gone")["parent_hash"].to_list() == [None]


def test_ancestors_and_descendants() -> None:
    cf = frame()
    up = cf.ancestors("s1")
    assert sorted(up.select("parent_id", "depth").rows()) == [("gone", 1), ("m1", 1), ("t1", 2)]
    down = cf.descendants("t1")
    assert sorted(down.select("child_id", "depth").rows()) == [("m1", 1), ("s1", 2)]
    assert cf.ancestors("t1").height == 0


def test_lineage_survives_parquet_and_jsonl(tmp_path: Path) -> None:
    merged = frame().dedupe().collect().drop("merged_ids", "merge_conflicts")
    write_parquet(merged, tmp_path / "items.parquet")
    write_jsonl(merged, tmp_path / "items.jsonl")
    expected = CognitionFrame(merged).lineage()
    for df in (read_parquet(tmp_path / "items.parquet"), read_jsonl(tmp_path / "items.jsonl")):
        assert CognitionFrame(df).lineage().equals(expected)


def test_manifest_links_included_items_to_their_lineage() -> None:
    result = frame().dedupe().pack(1000, as_of=AS_OF)
    linked = {(e["child_id"], e["parent_id"], e["operation"]) for e in result.manifest.lineage}
    assert linked == {
        ("t2", "t1", "merge"),
        ("m1", "t1", "derive"),
        ("s1", "m1", "derive"),
        ("s1", "gone", "derive"),
    }
    small = frame().dedupe().filter(pl.col("id") == "m1").pack(1000, as_of=AS_OF)
    assert [e["child_id"] for e in small.manifest.lineage] == ["m1"]


MAIL = "Write to ana@example.org, please. " + "More words follow here. " * 40
TRUNCATABLE = {"truncate": {"side": "head", "min_tokens": 5}}


def copies() -> CognitionFrame:
    return CognitionFrame(
        [
            {"id": "t1", "role": "document", "text": MAIL, "metadata": TRUNCATABLE},
            {"id": "t2", "role": "document", "text": MAIL, "metadata": TRUNCATABLE},
        ]
    )


def nodes(edges: pl.DataFrame, side: str) -> list[tuple[str, str]]:
    return edges.select(f"{side}_id", f"{side}_hash").rows()


def assert_steps_chain(edges: pl.DataFrame, finals: dict[str, str]) -> None:
    """Every step's child is a step's parent or an item's final node: one path per item."""
    parents = set(nodes(edges, "parent"))
    for child in nodes(edges, "child"):
        assert child in parents or finals.get(child[0]) == child[1], child


def test_each_step_links_to_the_state_it_made_redact_then_truncate() -> None:
    frame = CognitionFrame([{"id": "d", "role": "document", "text": MAIL, "metadata": TRUNCATABLE}])
    original = frame.collect()["content_hash"][0]
    redacted = frame.redact().collect()["content_hash"][0]
    pack = frame.redact().pack(40, as_of=AS_OF)
    edges = pl.DataFrame(pack.manifest.lineage)
    cut = pack.manifest.entries[0].content_hash
    assert edges.select("operation", "parent_hash", "child_hash").rows() == [
        ("redact", original, redacted),
        ("truncate", redacted, cut),
    ]
    assert len({original, redacted, cut}) == 3


def test_a_folded_copys_steps_stay_its_own_and_the_merge_links_the_states() -> None:
    edges = copies().redact().dedupe().lineage()
    original = copies().collect()["content_hash"][0]
    redacted = copies().redact().collect()["content_hash"][0]
    assert edges.select(
        "operation", "parent_id", "parent_hash", "child_id", "child_hash"
    ).rows() == [
        ("redact", "t1", original, "t1", redacted),
        ("redact", "t2", original, "t2", redacted),
        ("merge", "t2", redacted, "t1", redacted),
    ]


def test_a_merge_before_a_redaction_links_to_the_kept_copy_as_it_was() -> None:
    edges = copies().dedupe().redact().lineage()
    original = copies().collect()["content_hash"][0]
    redacted = copies().redact().collect()["content_hash"][0]
    assert edges.select(
        "operation", "parent_id", "parent_hash", "child_id", "child_hash"
    ).rows() == [
        ("merge", "t2", original, "t1", original),
        ("redact", "t1", original, "t1", redacted),
    ]


def test_steps_chain_through_a_store_round_trip_and_a_pack(tmp_path: Path) -> None:
    write_jsonl(copies().redact().collect(), tmp_path / "redacted.jsonl")
    stored = CognitionFrame.read_jsonl(tmp_path / "redacted.jsonl")
    pack = stored.dedupe().redact(types=["PHONE"]).pack(60, as_of=AS_OF)
    edges = pl.DataFrame(pack.manifest.lineage)
    assert sorted(edges["operation"]) == ["merge", "redact", "redact", "truncate"]
    finals = {entry.id: entry.content_hash for entry in pack.manifest.entries}
    assert_steps_chain(edges, finals)
    merged = copies().redact().dedupe()
    assert_steps_chain(merged.lineage(), dict(merged.collect().select("id", "content_hash").rows()))


def test_a_file_of_redacted_items_packs_with_the_counts_its_lineage_holds(tmp_path: Path) -> None:
    items = [
        {"id": "a", "role": "user", "text": "Mail ana@example.org or bo@example.org."},
        {"id": "b", "role": "user", "text": "Call +1 415 555 0100 now."},
        {"id": "c", "role": "user", "text": "Nothing to hide."},
    ]
    frame = CognitionFrame(items)
    in_memory = frame.redact(types=["EMAIL"]).redact().pack(1000, as_of=AS_OF).manifest
    write_jsonl(frame.redact(types=["EMAIL"]).collect(), tmp_path / "red.jsonl")
    stored = CognitionFrame.read_jsonl(tmp_path / "red.jsonl")
    as_read = stored.pack(1000, as_of=AS_OF).manifest
    again = stored.redact().pack(1000, as_of=AS_OF).manifest

    def counts(manifest: object) -> dict[str, object]:
        return {e.id: e.redactions for e in manifest.entries}  # type: ignore[attr-defined]

    assert counts(as_read) == {"a": '{"EMAIL":2}', "b": None, "c": None}
    both = {"a": '{"EMAIL":2}', "b": '{"PHONE":1}', "c": None}
    assert counts(again) == counts(in_memory) == both
    assert again.totals.redactions == in_memory.totals.redactions == {"EMAIL": 2, "PHONE": 1}
