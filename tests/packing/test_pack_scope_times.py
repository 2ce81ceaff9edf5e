"""A kept pack scope packs right at every ``as_of``, at and around each validity change.

:class:`~cognoxium.packing.packer.PackScope` keeps the exclusions of a span
of ``as_of`` times between two validity changes (a ``created_at``,
``valid_from`` or ``expires_at`` of some row); every pack must still be the
one :func:`~cognoxium.packing.packer.pack` gives at its own ``as_of``.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import polars as pl
import pytest

from cognoxium.exceptions import PackError
from cognoxium.frame.frame import CognitionFrame
from cognoxium.items.validation import conform
from cognoxium.packing.options import PackOptions
from cognoxium.packing.packer import PackScope, pack
from cognoxium.testing import assert_pack_equal

T0 = datetime(2024, 1, 1, tzinfo=UTC)
TICK = timedelta(microseconds=1)


def _rows() -> pl.DataFrame:
    def at(days: float | None) -> str | None:
        return None if days is None else (T0 + timedelta(days=days)).isoformat()

    created = [0, 1, 2, 3, 4, 5, 6, 7]
    valid_from = [None, 3, None, 10, None, None, 2.5, None]
    expires = [None, None, 8, None, 12, 6, None, 20]
    return conform(
        pl.DataFrame(
            {
                "id": [f"m{i}" for i in range(8)],
                "role": ["system"] + ["user", "assistant"] * 3 + ["user"],
                "text": [f"message {i} " + "word " * (3 * i) for i in range(8)],
                "retention": ["required"] + ["optional"] * 7,
                "created_at": [at(d) for d in created],
                "valid_from": [at(d) for d in valid_from],
                "expires_at": [at(d) for d in expires],
                "group_id": [None, None, None, "g", "g", None, None, None],
            }
        )
    )


def _times() -> list[datetime]:
    """Every validity change, a microsecond before and after it, and times in between."""
    changes = sorted({0, 1, 2, 2.5, 3, 4, 5, 6, 7, 8, 10, 12, 20})
    out = [T0 - timedelta(days=1)]
    for days in changes:
        at = T0 + timedelta(days=days)
        out += [at - TICK, at, at + TICK, at + timedelta(hours=7)]
    return out


@pytest.mark.parametrize("turns", [False, True])
def test_a_kept_scope_packs_what_pack_gives_at_every_time(turns: bool) -> None:
    df = _rows()
    frame = CognitionFrame(df)
    times = _times()
    for when in times + times[::-1]:  # back again: spans kept and spans forgotten
        assert_pack_equal(
            frame.pack(200, as_of=when, turns=turns),
            pack(df, 200, PackOptions(as_of=when, turns=turns)),
        )


def test_a_scope_packs_what_pack_gives_with_ranks_at_every_time() -> None:
    df = _rows()
    scope = PackScope(df)
    rank = pl.Series([float(i % 3) for i in range(df.height)])
    for when in _times():
        got = scope.pack(30, PackOptions(as_of=when), rank=rank)
        want = pack(df.with_columns(rank=rank), 30, PackOptions(as_of=when))
        assert_pack_equal(got, want)
        assert got.manifest.to_json() == want.manifest.to_json()


def test_a_required_item_in_a_group_not_yet_valid_raises_in_its_span_only() -> None:
    df = _rows().with_columns(
        pl.when(pl.col("id") == "m4")
        .then(pl.lit("required"))
        .otherwise(pl.col("retention").cast(pl.String))
        .cast(pl.Enum(["required", "preferred", "optional"]))
        .alias("retention")
    )
    frame = CognitionFrame(df)
    valid = T0 + timedelta(days=10)  # m4's group holds m3, valid from day 10
    assert "m4" in frame.pack(500, as_of=valid).ids
    for when in (valid - TICK, valid - timedelta(hours=1)):
        with pytest.raises(PackError, match="m4") as kept_error:
            frame.pack(500, as_of=when)
        with pytest.raises(PackError, match="m4") as plain_error:
            pack(df, 500, PackOptions(as_of=when))
        assert str(kept_error.value) == str(plain_error.value)
    assert frame.pack(500, as_of=valid + TICK).ids == ["m0", "m1", "m3", "m4", "m6", "m7"]
