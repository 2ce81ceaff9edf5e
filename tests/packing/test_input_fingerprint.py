"""The input fingerprint reads text from Arrow buffers and hashes the bytes it always hashed."""

from __future__ import annotations

import hashlib
import math
import struct
from datetime import UTC, datetime

import numpy as np
import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from cognoxium.items.validation import conform
from cognoxium.packing._manifest import InputHasher, input_fingerprint
from cognoxium.packing.options import PackOptions
from cognoxium.packing.packer import pack
from cognoxium.testing.strategies import frames_strategy


def joined_strings_fingerprint(df: pl.DataFrame) -> str:
    """The fingerprint as first defined: strings joined from Python values, chunk by chunk."""
    digest = hashlib.sha256(f"rows={df.height}".encode())
    strings = []
    exprs = []
    for name in (
        "id", "content_hash", "role", "retention", "priority", "trust",
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
        width = {"f": "<f8", "b": "u1"}.get(values.dtype.kind, "<i8")
        digest.update(values.astype(width).tobytes())
    for name in strings:
        digest.update(f"\x1d{name}:bytes\x1e".encode())
        column = df.get_column(name)
        for start in range(0, len(column), 3):
            chunk = column.slice(start, 3).fill_null("").to_list()
            digest.update("".join(chunk).encode("utf-8"))
    rank = df.get_column("rank")  # last
    digest.update(b"\x1drank:null\x1e" + rank.is_null().to_numpy().astype("u1").tobytes())
    values = rank.fill_null(0).to_numpy()
    values = np.where(np.isnan(values), np.nan, values)  # one NaN, whatever its bits
    digest.update(b"\x1drank\x1e" + values.astype("<f8").tobytes())
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
def test_one_hasher_gives_each_rank_its_own_fingerprint(
    df: pl.DataFrame, data: st.DataObject
) -> None:
    n = df.height
    values = st.one_of(st.none(), st.floats(allow_nan=True), st.integers(-5, 5).map(float))
    ranks = [
        pl.Series("rank", data.draw(st.lists(values, min_size=n, max_size=n)), pl.Float64)
        for _ in range(3)
    ]
    hasher = InputHasher(df)
    expected = [joined_strings_fingerprint(df.with_columns(rank)) for rank in ranks]
    assert [hasher.digest(ranks[i]) for i in (2, 0, 1, 0)] == [expected[i] for i in (2, 0, 1, 0)]


def test_the_fingerprint_covers_every_row_of_the_rank() -> None:
    df = conform(pl.DataFrame({"id": ["a", "b"], "role": ["user"] * 2, "text": ["x", "y"]}))
    hasher = InputHasher(df)
    ranks = ([1.0, 2.0], [2.0, 1.0], [1.0, None], [None, 1.0], [1.0, 0.0])
    digests = {hasher.digest(pl.Series("rank", r, pl.Float64)) for r in ranks}
    assert len(digests) == len(ranks)
    assert hasher.digest(df.get_column("rank")) == input_fingerprint(df)


def test_every_nan_rank_hashes_alike() -> None:
    # float("nan"), inf * 0 (the processor's default NaN, sign bit set) and a NaN with a
    # payload differ only in bits no rank comparison reads: each is unranked and recorded
    # as null, so the fingerprint, and with it the manifest, must be the same.
    df = conform(pl.DataFrame({"id": ["a", "b"], "role": ["user"] * 2, "text": ["x", "y"]}))
    nans = [
        float("nan"),
        float("inf") * 0,
        struct.unpack("<d", b"\x01" + b"\x00" * 5 + b"\xf8\x7f")[0],
    ]
    assert all(math.isnan(nan) for nan in nans)
    assert len({struct.pack("<d", nan) for nan in nans}) == len(nans)
    digests = {input_fingerprint(df.with_columns(pl.Series("rank", [1.0, nan]))) for nan in nans}
    assert len(digests) == 1
    when = datetime(2024, 6, 1, tzinfo=UTC)
    manifests = {
        pack(
            df.with_columns(pl.Series("rank", [1.0, nan])), 50, PackOptions(as_of=when)
        ).manifest.to_json()
        for nan in nans
    }
    assert len(manifests) == 1
    # NaN is still told from a null, and from any number.
    others = ([1.0, None], [1.0, 0.0], [float("nan"), 1.0])
    assert digests.isdisjoint(
        input_fingerprint(df.with_columns(pl.Series("rank", r, pl.Float64))) for r in others
    )
