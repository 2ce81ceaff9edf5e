"""The six built-in strategies: their table rows, what each retrieves, budgets and costs."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cognoxium import CognitionFrame
from cognoxium.strategies import (
    RESOURCE_TYPES,
    ArceStrategy,
    Backends,
    BreadthDepthNavigatorStrategy,
    ContextRequest,
    ContextStrategy,
    PlanDecisionContextStrategy,
    SemanticEmbeddingStrategy,
    SimpleKeywordStrategy,
    TemporalArchaeologyStrategy,
    builtin_strategies,
    fragments_to_frame,
    split_budget,
)
from tests.strategies.helpers import AS_OF, T0, embedding_cache, node_ids


@pytest.mark.parametrize(
    ("cls", "name", "quality", "backends", "flags"),
    [
        (SimpleKeywordStrategy, "simple-keyword", 0.3, ("text",), ()),
        (SemanticEmbeddingStrategy, "semantic-embedding", 0.6, ("vector",), ()),
        (
            BreadthDepthNavigatorStrategy,
            "breadth-depth-navigator",
            0.85,
            ("graph",),
            ("supports_depth_breadth",),
        ),
        (ArceStrategy, "arce", 0.95, ("text", "vector", "graph"), ("supports_depth_breadth",)),
        (
            TemporalArchaeologyStrategy,
            "temporal-archaeology",
            0.5,
            ("graph", "temporal"),
            ("supports_temporal",),
        ),
        (
            PlanDecisionContextStrategy,
            "plan-decision-context",
            0.7,
            ("temporal",),
            ("supports_plan_hierarchy",),
        ),
    ],
)
def test_builtin_strategy_row(
    cls: type, name: str, quality: float, backends: tuple[str, ...], flags: tuple[str, ...]
) -> None:
    strategy = cls()
    assert isinstance(strategy, ContextStrategy)
    assert strategy.name == name
    assert strategy.capabilities.quality_score == quality
    assert strategy.capabilities.backends == backends
    assert strategy.capabilities.resource_types == RESOURCE_TYPES
    for flag in ("supports_depth_breadth", "supports_plan_hierarchy", "supports_temporal"):
        assert getattr(strategy.capabilities, flag) is (flag in flags)
    assert strategy.explain().startswith(f"{name}: ")


def test_six_builtins_in_table_order() -> None:
    assert [s.name for s in builtin_strategies()] == [
        "simple-keyword", "semantic-embedding", "breadth-depth-navigator", "arce",
        "temporal-archaeology", "plan-decision-context",
    ]  # fmt: skip


def test_simple_keyword(backends: Backends) -> None:
    strategy = SimpleKeywordStrategy()
    request = ContextRequest(query="ignored", keywords=("Toronto",))
    assert strategy.can_handle(request, backends) == 1.0
    found = strategy.assemble(request, backends, 500, None)
    assert set(node_ids(found)) == {"c1:D2:6", "c1:D2:7"}
    assert all(f.backend == "text" and f.strategy == "simple-keyword" for f in found)
    assert max(f.relevance_score for f in found) == 1.0
    assert strategy.can_handle(ContextRequest(query="zebra"), backends) == 0.0
    assert strategy.can_handle(request, backends.without("text")) == 0.0


def test_resource_types_filter_results(backends: Backends) -> None:
    request = ContextRequest(query="Decision", resource_types=("memory",))
    found = SimpleKeywordStrategy().assemble(request, backends, 1000, None)
    assert found
    assert all(n.startswith("d-") for n in node_ids(found))
    request = ContextRequest(query="Biscuit", resource_types=("assistant",))
    assert node_ids(SimpleKeywordStrategy().assemble(request, backends, 1000, None)) == ["c1:D1:1"]


def test_breadth_depth_navigator_expands_by_breadth(backends: Backends) -> None:
    strategy = BreadthDepthNavigatorStrategy()
    focus = ContextRequest(query="", focus_nodes=("c1:D1:0",), breadth=0)
    assert strategy.can_handle(focus, backends) == 1.0
    assert node_ids(strategy.assemble(focus, backends, 1000, None)) == ["c1:D1:0"]
    one_hop = dataclasses.replace(focus, breadth=1)
    found = strategy.assemble(one_hop, backends, 1000, None)
    assert found[0].node == "c1:D1:0"
    assert found[0].relevance_score == 1.0
    assert found[1].node == "c1:D1:1"  # the adjacent turn scores highest
    assert {"c1:D1:2", "c1:D1:3", "c1:D2:4"} <= set(node_ids(found))  # session, speaker
    assert "goal" not in node_ids(found)
    assert all(f.backend == "graph" for f in found)


def test_breadth_depth_navigator_seeds_from_search_without_focus(backends: Backends) -> None:
    strategy = BreadthDepthNavigatorStrategy(seed_count=1)
    request = ContextRequest(query="Lisbon", breadth=1)
    assert strategy.can_handle(request, backends) == 0.7
    found = strategy.assemble(request, backends, 1000, None)
    assert found[0].node == "c1:D1:3"
    assert "c1:D1:2" in node_ids(found)
    no_search = backends.without("text", "vector")
    assert strategy.can_handle(request, no_search) == 0.0
    assert strategy.assemble(request, no_search, 1000, None) == []


def test_arce_splits_merges_and_deduplicates(backends: Backends) -> None:
    strategy = ArceStrategy()
    request = ContextRequest(query="Biscuit the puppy", breadth=1)
    assert strategy.can_handle(request, backends) == 1.0
    assert strategy.can_handle(request, backends.without("graph")) == 0.0
    budget = 120
    found = strategy.assemble(request, backends, budget, None)
    shares = split_budget(budget, ArceStrategy.SHARES)
    by_backend: dict[str, int] = {}
    for fragment in found:
        by_backend[fragment.backend] = by_backend.get(fragment.backend, 0) + fragment.tokens
    assert by_backend["text"] <= shares["text"]
    assert set(by_backend) == {"text", "vector", "graph"}
    assert sum(f.tokens for f in found) <= budget
    assert len(set(node_ids(found))) == len(found)
    assert found[0].node == "c1:D1:0"


def test_temporal_archaeology_starts_from_the_cold_tier(backends: Backends) -> None:
    strategy = TemporalArchaeologyStrategy(seed_count=1)
    as_of = AS_OF + timedelta(days=2)  # session 1 and the plans are now 31 days old: cold
    request = ContextRequest(query="marathon", breadth=1, as_of=as_of)
    assert strategy.can_handle(request, backends) == 1.0
    found = strategy.assemble(request, backends, 1000, None)
    assert found[0].node == "c1:D1:3"
    assert found[0].backend == "temporal"
    assert {f.backend for f in found[1:]} == {"graph"}
    assert "c1:D2:5" in node_ids(found)  # same speaker, warm tier, reached by traversal
    assert strategy.can_handle(ContextRequest(query="x", as_of=T0), backends) == 0.0


def test_plan_decision_context_walks_the_plan_hierarchy(backends: Backends) -> None:
    strategy = PlanDecisionContextStrategy()
    request = ContextRequest(query="", focus_nodes=("step",))
    assert strategy.can_handle(request, backends) == 1.0
    found = strategy.assemble(request, backends, 1000, None)
    # d-plan hangs off the parent plan (depth 1), d-goal off the goal (depth 2);
    # d-hot is hot, d-other is outside the hierarchy.
    assert node_ids(found) == ["d-plan", "d-goal"]
    assert [f.relevance_score for f in found] == [1.0, pytest.approx(2 / 3)]
    assert {f.backend for f in found} == {"temporal"}
    by_plan_id = strategy.assemble(ContextRequest(query=""), backends, 1000, {"plan_id": "goal"})
    assert node_ids(by_plan_id) == ["d-goal"]
    recency = strategy.assemble(ContextRequest(query=""), backends.without("text"), 1000, None)
    assert set(node_ids(recency)) == {"d-plan", "d-goal", "d-other"}
    assert strategy.can_handle(ContextRequest(query=""), backends) == 0.5


BUDGET_STRATEGIES = list(builtin_strategies())


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    budget=st.integers(min_value=0, max_value=400),
    index=st.integers(min_value=0, max_value=len(BUDGET_STRATEGIES) - 1),
    breadth=st.integers(min_value=0, max_value=3),
)
def test_every_builtin_respects_its_budget(
    backends: Backends, budget: int, index: int, breadth: int
) -> None:
    strategy = BUDGET_STRATEGIES[index]
    request = ContextRequest(
        query="Biscuit marathon decision plan", focus_nodes=("c1:D1:0", "step"), breadth=breadth,
        as_of=AS_OF + timedelta(days=2),
    )  # fmt: skip
    found = strategy.assemble(request, backends, budget, None)
    assert sum(f.tokens for f in found) <= budget
    assert len({f.node for f in found}) == len(found)
    again = strategy.assemble(request, backends, budget, None)
    assert again == found  # deterministic


def test_fragment_tokens_match_pack_costs(backends: Backends, items: CognitionFrame) -> None:
    found = SimpleKeywordStrategy().assemble(
        ContextRequest(query="Biscuit"), backends, 10_000, None
    )
    manifest = fragments_to_frame(items, found).pack(10_000, as_of=AS_OF).manifest
    tokens = {e.id: e.tokens for e in manifest.entries}
    assert {f.node: f.tokens for f in found} == tokens


def test_semantic_embedding_uses_the_real_model_by_default() -> None:
    frame = CognitionFrame(
        [
            {"id": "pet", "role": "user", "text": "We brought home a little puppy on Sunday."},
            {"id": "car", "role": "user", "text": "The mechanic replaced the brake pads."},
            {"id": "food", "role": "user", "text": "I baked sourdough bread this morning."},
        ]
    )
    backends = Backends.from_frame(frame, embedding_cache=embedding_cache())
    assert backends.vector is not None
    assert backends.vector.embedder.name == "minilm"
    request = ContextRequest(query="Does she have a dog?")
    assert backends.text is not None
    assert backends.text.search(request.query).height == 0
    strategy = SemanticEmbeddingStrategy()
    assert 0.0 < strategy.can_handle(request, backends) <= 1.0
    found = strategy.assemble(request, backends, 1000, None)
    assert found[0].node == "pet"
    assert found[0].relevance_score == 1.0
    assert all(f.backend == "vector" for f in found)
