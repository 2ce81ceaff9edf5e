"""The strategy selector: ordering, missing backends, bad confidences."""

from __future__ import annotations

from cognoxium.strategies import (
    RESOURCE_TYPES,
    Backends,
    ContextRequest,
    StrategyCapabilities,
    StrategySelector,
)
from tests.strategies.helpers import FakeStrategy


def test_selector_orders_by_weight_then_quality_then_name(backends: Backends) -> None:
    high = StrategyCapabilities(uses_text=True, resource_types=RESOURCE_TYPES, quality_score=0.8)
    low = StrategyCapabilities(uses_text=True, resource_types=RESOURCE_TYPES, quality_score=0.4)
    strategies = [
        FakeStrategy("c-low", capabilities=low, confidence=1.0),  # 0.4
        FakeStrategy("b-high", capabilities=high, confidence=0.5),  # 0.4, higher quality
        FakeStrategy("a-high", capabilities=high, confidence=0.5),  # 0.4, same, name first
        FakeStrategy("d-best", capabilities=high, confidence=1.0),  # 0.8
    ]
    selection = StrategySelector(strategies).select(ContextRequest(query="x"), backends)
    assert selection.names == ("d-best", "a-high", "b-high", "c-low")
    assert [round(s.weight, 6) for s in selection.selected] == [0.8, 0.4, 0.4, 0.4]


def test_selector_skips_without_polling_when_backends_are_missing(backends: Backends) -> None:
    needs_vector = FakeStrategy(
        "needs-vector",
        capabilities=StrategyCapabilities(uses_vector=True, resource_types=RESOURCE_TYPES),
    )
    selection = StrategySelector([needs_vector]).select(
        ContextRequest(query="x"), backends.without("vector")
    )
    assert selection.selected == ()
    assert selection.skipped == (("needs-vector", "missing backends: vector"),)
    assert needs_vector.polls == 0


def test_selector_records_bad_confidences_and_errors(backends: Backends) -> None:
    strategies = [
        FakeStrategy("zero", confidence=0.0),
        FakeStrategy("big", confidence=1.5),
        FakeStrategy("nan", confidence=float("nan")),
        FakeStrategy("boom", error=None),
        FakeStrategy(
            "memory-only",
            capabilities=StrategyCapabilities(uses_text=True, resource_types=("memory",)),
        ),
    ]

    def explode(request: ContextRequest, backends: Backends) -> float:
        raise RuntimeError("index offline")

    strategies[3].can_handle = explode  # type: ignore[method-assign]
    request = ContextRequest(query="x", resource_types=("user",))
    reasons = dict(StrategySelector(strategies).select(request, backends).skipped)
    assert reasons == {
        "zero": "can_handle returned 0.0",
        "big": "can_handle returned 1.5, not in [0, 1]",
        "nan": "can_handle returned nan, not in [0, 1]",
        "boom": "can_handle raised RuntimeError: index offline",
        "memory-only": "retrieves none of the requested resource types",
    }
