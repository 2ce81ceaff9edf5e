"""The input fingerprint reads text from Arrow buffers and hashes the bytes it always hashed."""

from __future__ import annotations

import hashlib
import multiprocessing
from datetime import UTC, datetime
from typing import Any

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cognoxium.items.schema import conform
from cognoxium.packing._manifest import InputHasher, input_fingerprint
from cognoxium.packing.packer import PackScope
from cognoxium.testing.strategies import frames_strategy


def joined_strings_fingerprint(df: pl.DataFrame) -> str:
    """The fingerprint as first defined: strings joined from Python values, chunk by chunk."""
    digest = hashlib.sha256(f"rows={df.height}".encode())
    strings = []
    exprs = []
    for name in (
        "id", "content_hash", "role", "retention", "priority", "rank", "trust",
        "sensitivity", "created_at", "valid_from", "expires_at", "group_id",
    ):  # fmt: skip
        if name not in df.columns:
            continue
        col, dtype = pl.col(name), df.schema[name]
        exprs.append(col.is_null().alias(f"{name}:null"))
        if dtype == pl.String:
            strings.append(name)
            exprs.append(col.fill_null("").str.len_bytes().alias(f"{name}:len"))
        elif isinstance(dtype, pl.Enum):
            exprs.append(col.to_physical().cast(pl.Int64).fill_null(-1).alias(name))
        elif isinstance(dtype, pl.Datetime):
            exprs.append(col.dt.epoch("us").fill_null(0).alias(name))
        else:
            exprs.append(col.fill_null(0).alias(name))
    parts = df.select(exprs)
    for name in parts.columns:
        values = parts.get_column(name).to_numpy()
        digest.update(f"\x1d{name}\x1e".encode())
        digest.update(values.astype("<f8" if values.dtype.kind == "f" else "<i8").tobytes())
    for name in strings:
        digest.update(f"\x1d{name}:bytes\x1e".encode())
        column = df.get_column(name)
        for start in range(0, len(column), 3):
            chunk = column.slice(start, 3).fill_null("").to_list()
            digest.update("".join(chunk).encode("utf-8"))
    return digest.hexdigest()


@settings(max_examples=40, deadline=None)
@given(df=frames_strategy(max_size=10), cut=st.integers(0, 10), group=st.sampled_from(
    [None, "", "grüppe", "日本🙂"]
))  # fmt: skip
def test_the_fingerprint_is_the_one_of_joined_python_strings(
    df: pl.DataFrame, cut: int, group: str | None
) -> None:
    df = df.with_columns(pl.lit(group, pl.String).alias("group_id"))
    for frame in (df, df.slice(cut), pl.concat([df.slice(cut), df.head(cut)], rechunk=False)):
        assert input_fingerprint(frame) == joined_strings_fingerprint(frame)


@settings(max_examples=25, deadline=None)
@given(df=frames_strategy(min_size=1, max_size=10), data=st.data())
def test_fingerprints_hashed_ahead_are_the_ones_hashed_in_place(
    df: pl.DataFrame, data: st.DataObject
) -> None:
    n = df.height
    values = st.one_of(st.none(), st.floats(allow_nan=True), st.integers(-5, 5).map(float))
    ranks = [
        pl.Series("rank", data.draw(st.lists(values, min_size=n, max_size=n)), pl.Float64)
        for _ in range(3)
    ]
    hasher = InputHasher(df)
    hasher.ahead([*ranks, ranks[0]])  # a rank given twice is hashed once
    expected = [joined_strings_fingerprint(df.with_columns(rank)) for rank in ranks]
    # Taken in another order, and again once taken: each is the rank's own fingerprint.
    assert [hasher.digest(ranks[i]) for i in (2, 0, 1, 0)] == [expected[i] for i in (2, 0, 1, 0)]
    # An equal Series that is another object is hashed in place, to the same value.
    assert hasher.digest(ranks[1].clone()) == expected[1]


def test_a_pack_scope_takes_the_fingerprints_hashed_ahead_and_its_manifests_do_not_change(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    df = conform(
        pl.DataFrame(
            {
                "id": ["a", "b", "c"],
                "role": ["user"] * 3,
                "text": ["refund policy", "shipping times", "word " * 40],
                "created_at": ["2024-01-01T00:00:00Z"] * 3,
            }
        )
    )
    when = datetime(2024, 6, 1, tzinfo=UTC)
    ranks = [pl.Series("rank", r, pl.Float64) for r in ([1.0, 2.0, 3.0], [3.0, None, 1.0])]
    alone = PackScope(df)
    expected = [alone.pack(50, as_of=when, rank=rank).manifest.to_json() for rank in ranks]
    ahead = PackScope(df)
    ahead.fingerprint_ahead(ranks)

    def hashed_again(self: InputHasher, rank: pl.Series) -> str:
        raise AssertionError("the fingerprint was hashed again")

    monkeypatch.setattr(InputHasher, "_digest", hashed_again)
    assert [ahead.pack(50, as_of=when, rank=rank).manifest.to_json() for rank in ranks] == expected
    with pytest.raises(AssertionError, match="hashed again"):  # taken once, not kept
        ahead.pack(50, as_of=when, rank=ranks[0])


def _hash_ahead_in_child(hasher: InputHasher, rank: pl.Series, out: Any) -> None:
    hasher.ahead([rank])
    out.put(hasher.digest(rank))


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="needs fork")
def test_a_forked_process_hashes_ahead_on_its_own_thread() -> None:
    # The parent's worker thread does not exist in a forked child: the child must
    # start its own, not wait forever for work queued to a thread that is gone.
    df = conform(pl.DataFrame({"id": ["a", "b"], "role": ["user"] * 2, "text": ["x", "y"]}))
    first, second = (pl.Series("rank", r, pl.Float64) for r in ([2.0, 1.0], [1.0, 2.0]))
    hasher = InputHasher(df)  # built here: Polars' own threads do not survive a fork either
    hasher.ahead([first])
    assert hasher.digest(first) == joined_strings_fingerprint(df.with_columns(first))
    context = multiprocessing.get_context("fork")
    out = context.Queue()
    child = context.Process(target=_hash_ahead_in_child, args=(hasher, second, out))
    child.start()
    try:
        assert out.get(timeout=60) == joined_strings_fingerprint(df.with_columns(second))
    finally:
        child.join(timeout=60)
        if child.is_alive():
            child.kill()
    assert child.exitcode == 0
