"""An enumerated column mapped by its codes equals the same column mapped by its text."""

from __future__ import annotations

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cognoxium._columns import CHAT_ROLES
from cognoxium.items.schema import POLARS_SCHEMA, mapped_expr

ROLE = POLARS_SCHEMA["role"]


@settings(max_examples=100, deadline=None)  # no per-example time limit on a loaded machine
@given(roles=st.lists(st.none() | st.sampled_from(list(CHAT_ROLES)), max_size=12))
def test_an_enumeration_maps_by_its_codes_as_text_maps_by_value(roles: list[str | None]) -> None:
    df = pl.DataFrame({"role": roles}, schema={"role": ROLE})
    by_code = df.select(mapped_expr("role", ROLE, CHAT_ROLES, pl.String)).to_series()
    by_text = df.select(mapped_expr("role", pl.String(), CHAT_ROLES, pl.String)).to_series()
    assert (
        by_code.to_list()
        == by_text.to_list()
        == [None if r is None else CHAT_ROLES[r] for r in roles]
    )


def test_a_value_outside_the_mapping_is_refused_whatever_the_column_type() -> None:
    df = pl.DataFrame({"role": ["user", "tool"]}, schema={"role": ROLE})
    partial = {"user": 1}
    for dtype in (ROLE, pl.String()):
        with pytest.raises(pl.exceptions.InvalidOperationError):
            df.select(mapped_expr("role", dtype, partial, pl.Int64))
