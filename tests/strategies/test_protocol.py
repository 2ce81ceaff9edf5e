"""Strategy protocol types: capabilities, requests, fragments, results, the error type."""

from __future__ import annotations

import dataclasses
from datetime import datetime

import pytest

from cognoxium.exceptions import CognoxiumError, StrategyError
from cognoxium.strategies import (
    ContextRequest,
    ContextStrategyResult,
    StrategyCapabilities,
)
from tests.strategies.helpers import make_fragment


@pytest.mark.parametrize(
    ("field", "default"),
    [
        ("uses_text", False),
        ("uses_vector", False),
        ("uses_graph", False),
        ("uses_temporal", False),
        ("resource_types", ()),
        ("quality_score", 0.5),
        ("supports_depth_breadth", False),
        ("supports_plan_hierarchy", False),
        ("supports_temporal", False),
    ],
)
def test_capability_default(field: str, default: object) -> None:
    assert getattr(StrategyCapabilities(), field) == default
    assert type(getattr(StrategyCapabilities(), field)) is type(default)


def test_capabilities_have_exactly_the_spec_fields() -> None:
    assert [f.name for f in dataclasses.fields(StrategyCapabilities)] == [
        "uses_text", "uses_vector", "uses_graph", "uses_temporal", "resource_types",
        "quality_score", "supports_depth_breadth", "supports_plan_hierarchy",
        "supports_temporal",
    ]  # fmt: skip


@pytest.mark.parametrize("quality", [-0.1, 1.5, float("nan"), "high"])
def test_capabilities_reject_a_quality_outside_unit_interval(quality: object) -> None:
    with pytest.raises(StrategyError, match="quality_score"):
        StrategyCapabilities(quality_score=quality)  # type: ignore[arg-type]


def test_result_has_exactly_the_spec_fields() -> None:
    fields = {f.name: f.type for f in dataclasses.fields(ContextStrategyResult)}
    assert list(fields) == [
        "strategy_name", "fragments", "total_fragments", "tokens_used", "execution_time_ms",
        "errors", "stats",
    ]  # fmt: skip
    result = ContextStrategyResult(strategy_name="x")
    assert (result.fragments, result.total_fragments, result.tokens_used) == ((), 0, 0)
    assert (result.execution_time_ms, result.errors, result.stats) == (0.0, (), {})


def test_strategy_error_is_a_cognoxium_value_error() -> None:
    assert issubclass(StrategyError, CognoxiumError)
    assert issubclass(StrategyError, ValueError)


def test_request_validation() -> None:
    with pytest.raises(StrategyError, match="breadth"):
        ContextRequest(query="x", breadth=-1)
    with pytest.raises(StrategyError, match="unknown types"):
        ContextRequest(query="x", resource_types=("email",))
    with pytest.raises(StrategyError, match="timezone-aware"):
        ContextRequest(query="x", as_of=datetime(2024, 1, 1))
    with pytest.raises(StrategyError, match="relevance_score"):
        make_fragment("a", float("inf"))
