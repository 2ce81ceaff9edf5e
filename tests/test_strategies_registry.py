"""The context strategy registry: protocol, built-ins, backends, selector, allocator,
executor (timeouts, circuit breaker), TOML configuration, validation, fallback path,
and the hand-over of fragments to the engine."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime, timedelta
from fractions import Fraction
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cognoxium import CognitionFrame
from cognoxium.app.locomo import load_locomo
from cognoxium.exceptions import CognoxiumError, ConfigError, StrategyError
from cognoxium.retrieval.embeddings import EmbeddingCache
from cognoxium.strategies import (
    BACKEND_KINDS,
    DEFAULT_ENABLED,
    DEFAULT_HOT_SECONDS,
    DEFAULT_WARM_SECONDS,
    FALLBACK_ORDER,
    RESOURCE_TYPES,
    SETTING_KEYS,
    ArceStrategy,
    Backends,
    BreadthDepthNavigatorStrategy,
    BudgetAllocator,
    CircuitBreaker,
    ContextAssembler,
    ContextFragment,
    ContextRequest,
    ContextStrategy,
    ContextStrategyResult,
    EdgeWeights,
    GraphBackend,
    ItemStore,
    PlanDecisionContextStrategy,
    SemanticEmbeddingStrategy,
    SimpleKeywordStrategy,
    StrategyCapabilities,
    StrategyConfig,
    StrategyExecutor,
    StrategyRegistry,
    StrategySelection,
    StrategySelector,
    StrategySettings,
    TemporalArchaeologyStrategy,
    TemporalBackend,
    builtin_strategies,
    fallback_chain,
    fragments_to_frame,
    load_config,
    load_strategy,
    split_budget,
)

T0 = datetime(2024, 6, 1, tzinfo=UTC)
AS_OF = datetime(2024, 6, 30, tzinfo=UTC)


def _cache() -> EmbeddingCache:
    return EmbeddingCache(persist=False)


def _conversation_records() -> list[dict[str, Any]]:
    """Two sessions of one conversation, with speakers; plus a plan hierarchy with decisions."""
    turns = [
        (1, "Ann", "I adopted a puppy named Biscuit last week."),
        (1, "Bo", "Congratulations! What breed is Biscuit?"),
        (1, "Ann", "A golden retriever, very playful."),
        (1, "Bo", "I am training for the Lisbon marathon."),
        (2, "Ann", "Biscuit chewed my running shoes yesterday."),
        (2, "Bo", "The marathon is in October, I run every morning."),
        (2, "Ann", "My sister moved to Toronto for a new job."),
        (2, "Bo", "Toronto winters are cold, she will need a warm coat."),
    ]
    records: list[dict[str, Any]] = []
    for position, (session, speaker, text) in enumerate(turns):
        start = T0 if session == 1 else T0 + timedelta(days=20)
        records.append(
            {
                "id": f"c1:D{session}:{position}",
                "role": "user" if speaker == "Ann" else "assistant",
                "text": f"{speaker}: {text}",
                "created_at": (start + timedelta(minutes=position)).isoformat(),
                "metadata": {
                    "conversation": "c1",
                    "session": session,
                    "speaker": speaker,
                    "kind": "turn",
                },
            }
        )
    old = T0.isoformat()
    records += [
        {"id": "goal", "role": "memory", "text": "Goal: launch the product in Q3.",
         "created_at": old, "metadata": {"kind": "plan"}},
        {"id": "plan", "role": "memory", "text": "Plan: beta in July, launch in September.",
         "created_at": old, "metadata": {"kind": "plan", "parent_id": "goal"}},
        {"id": "step", "role": "memory", "text": "Step: recruit fifty beta testers.",
         "created_at": old, "parents": ["plan"], "metadata": {"kind": "plan"}},
        {"id": "d-goal", "role": "memory", "text": "Decision: target enterprise users first.",
         "created_at": old, "metadata": {"kind": "decision", "parent_id": "goal"}},
        {"id": "d-plan", "role": "memory", "text": "Decision: skip the public alpha.",
         "created_at": old, "metadata": {"kind": "decision", "parent_ids": ["plan"]}},
        {"id": "d-hot", "role": "memory", "text": "Decision: hire a tester today.",
         "created_at": AS_OF.isoformat(), "metadata": {"kind": "decision", "parent_id": "plan"}},
        {"id": "d-other", "role": "memory", "text": "Decision: repaint the office.",
         "created_at": old, "metadata": {"kind": "decision"}},
    ]  # fmt: skip
    return records


@pytest.fixture(scope="module")
def items() -> CognitionFrame:
    return CognitionFrame(_conversation_records())


@pytest.fixture(scope="module")
def backends(items: CognitionFrame) -> Backends:
    return Backends.from_frame(items, vector="local_hash", embedding_cache=_cache(), as_of=AS_OF)


def _fragment(node: str, score: float, tokens: int = 5, strategy: str = "x") -> ContextFragment:
    return ContextFragment(
        node=node, text=node, relevance_score=score, tokens=tokens, strategy=strategy,
        backend="text",
    )  # fmt: skip


class FakeStrategy:
    """A configurable strategy for selector, executor and registry tests."""

    def __init__(
        self,
        name: str = "fake",
        *,
        capabilities: StrategyCapabilities | None = None,
        confidence: float = 1.0,
        fragments: list[ContextFragment] | None = None,
        error: Exception | None = None,
        barrier: threading.Barrier | None = None,
        release: threading.Event | None = None,
    ) -> None:
        self._name = name
        self._capabilities = capabilities or StrategyCapabilities(
            uses_text=True, resource_types=RESOURCE_TYPES, quality_score=0.5
        )
        self.confidence = confidence
        self.fragments = fragments or []
        self.error = error
        self.barrier = barrier
        self.release = release
        self.polls = 0
        self.calls = 0

    @property
    def name(self) -> str:
        return self._name

    @property
    def capabilities(self) -> StrategyCapabilities:
        return self._capabilities

    def can_handle(self, request: ContextRequest, backends: Backends) -> float:
        self.polls += 1
        return self.confidence

    def assemble(
        self,
        request: ContextRequest,
        backends: Backends,
        budget: int,
        plan_context: Mapping[str, Any] | None,
    ) -> list[ContextFragment]:
        self.calls += 1
        if self.barrier is not None:
            self.barrier.wait()
        if self.release is not None:
            self.release.wait()
        if self.error is not None:
            raise self.error
        return list(self.fragments)

    def explain(self) -> str:
        return f"{self._name}: a test strategy"


@pytest.fixture
def release() -> Iterator[threading.Event]:
    """An event hung strategies wait on; set at teardown so their threads end."""
    event = threading.Event()
    yield event
    event.set()


# ---------------------------------------------------------------------------
# the documented tables of the registry


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


def test_default_enabled_list() -> None:
    assert DEFAULT_ENABLED == ("simple-keyword", "semantic-embedding", "breadth-depth-navigator")
    assert StrategyConfig().enabled == DEFAULT_ENABLED
    assert StrategyConfig.from_toml("").active() == DEFAULT_ENABLED


@pytest.mark.parametrize(
    ("key", "default"),
    [
        ("timeout_seconds", 30),
        ("max_fragments", 100),
        ("max_workers", 4),
        ("circuit_breaker_threshold", 3),
        ("enabled", True),
    ],
)
def test_setting_default(key: str, default: object) -> None:
    assert getattr(StrategySettings(), key) == default
    assert getattr(StrategyConfig().settings_for("anything"), key) == default


def test_setting_keys_are_the_spec_keys() -> None:
    assert SETTING_KEYS == (
        "timeout_seconds", "max_fragments", "max_workers", "circuit_breaker_threshold", "enabled",
    )  # fmt: skip


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("timeout_seconds", 0),
        ("timeout_seconds", -1.0),
        ("max_fragments", 0),
        ("max_workers", 0),
        ("circuit_breaker_threshold", 0),
        ("enabled", "yes"),
    ],
)
def test_settings_reject_invalid_values(key: str, value: object) -> None:
    with pytest.raises(StrategyError, match=key if key != "enabled" else "true or false"):
        StrategySettings(**{key: value})


def test_result_has_exactly_the_spec_fields() -> None:
    fields = {f.name: f.type for f in dataclasses.fields(ContextStrategyResult)}
    assert list(fields) == [
        "strategy_name", "fragments", "total_fragments", "tokens_used", "execution_time_ms",
        "errors", "stats",
    ]  # fmt: skip
    result = ContextStrategyResult(strategy_name="x")
    assert (result.fragments, result.total_fragments, result.tokens_used) == ((), 0, 0)
    assert (result.execution_time_ms, result.errors, result.stats) == (0.0, (), {})


def test_fallback_order() -> None:
    assert FALLBACK_ORDER == (
        "arce", "breadth-depth-navigator", "semantic-embedding", "simple-keyword",
    )  # fmt: skip


def test_strategy_error_is_a_cognoxium_value_error() -> None:
    assert issubclass(StrategyError, CognoxiumError)
    assert issubclass(StrategyError, ValueError)


# ---------------------------------------------------------------------------
# registry validation


def test_validation_rule_1_enabled_strategy_must_be_registered() -> None:
    registry = StrategyRegistry.builtin()
    registry.validate(DEFAULT_ENABLED)
    with pytest.raises(StrategyError, match=r"rule 1: enabled strategy 'ghost' is not registered"):
        registry.validate([*DEFAULT_ENABLED, "ghost"])


def test_validation_rule_2_strategy_must_declare_a_backend() -> None:
    registry = StrategyRegistry.builtin()
    registry.register(
        FakeStrategy("no-backend", capabilities=StrategyCapabilities(resource_types=("user",)))
    )
    assert registry.problems(DEFAULT_ENABLED) == [
        "rule 2: strategy 'no-backend' declares no backend capability "
        "(set uses_text, uses_vector, uses_graph or uses_temporal)"
    ]
    with pytest.raises(StrategyError, match="rule 2: strategy 'no-backend'"):
        registry.validate(DEFAULT_ENABLED)


def test_validation_rule_3_strategy_must_declare_resource_types() -> None:
    registry = StrategyRegistry.builtin()
    registry.register(FakeStrategy("no-types", capabilities=StrategyCapabilities(uses_text=True)))
    registry.register(
        FakeStrategy(
            "bad-types",
            capabilities=StrategyCapabilities(uses_text=True, resource_types=("email",)),
        )
    )
    problems = registry.problems(DEFAULT_ENABLED)
    assert len(problems) == 2
    assert problems[0].startswith("rule 3: strategy 'no-types' declares no resource types")
    assert problems[1].startswith("rule 3: strategy 'bad-types' declares unknown resource types")
    with pytest.raises(StrategyError, match="rule 3"):
        registry.validate(DEFAULT_ENABLED)


def test_empty_resource_types_match_all_but_fail_validation() -> None:
    capabilities = StrategyCapabilities(uses_text=True)
    assert capabilities.resource_types == ()
    assert capabilities.handles([]) == RESOURCE_TYPES
    assert capabilities.handles(["tool", "user"]) == ("user", "tool")
    registry = StrategyRegistry([FakeStrategy("undeclared", capabilities=capabilities)])
    assert "undeclared" in registry  # registration accepts it ...
    with pytest.raises(StrategyError, match="rule 3: strategy 'undeclared' declares no resource"):
        registry.validate(["undeclared"])  # ... validation does not
    declared = dataclasses.replace(capabilities, resource_types=RESOURCE_TYPES)
    StrategyRegistry([FakeStrategy("declared", capabilities=declared)]).validate(["declared"])


def test_validation_lists_every_violation() -> None:
    registry = StrategyRegistry([FakeStrategy("bare", capabilities=StrategyCapabilities())])
    with pytest.raises(StrategyError) as info:
        registry.validate(["bare", "ghost"])
    message = str(info.value).removeprefix("invalid strategy registry: ")
    assert [p.split(":")[0] for p in message.split("; ")] == ["rule 1", "rule 2", "rule 3"]


def test_assembler_validates_its_registry() -> None:
    config = StrategyConfig(enabled=("simple-keyword", "ghost"))
    with pytest.raises(StrategyError, match="rule 1"):
        ContextAssembler(config=config)


def test_register_rejects_duplicates_and_non_strategies() -> None:
    registry = StrategyRegistry.builtin()
    with pytest.raises(StrategyError, match="already registered"):
        registry.register(SimpleKeywordStrategy())
    replacement = SimpleKeywordStrategy()
    assert registry.register(replacement, replace=True) is replacement
    assert registry.get("simple-keyword") is replacement
    with pytest.raises(StrategyError, match="does not implement ContextStrategy"):
        registry.register(object())  # type: ignore[arg-type]
    assert registry.unregister("arce").name == "arce"
    assert "arce" not in registry
    with pytest.raises(StrategyError, match="no strategy named 'arce'"):
        registry.get("arce")


# ---------------------------------------------------------------------------
# configuration


CUSTOM_MODULE = """
from cognoxium.strategies import StrategyCapabilities, RESOURCE_TYPES


class EchoStrategy:
    name = "echo"
    capabilities = StrategyCapabilities(uses_text=True, resource_types=RESOURCE_TYPES)

    def can_handle(self, request, backends):
        return 1.0

    def assemble(self, request, backends, budget, plan_context):
        return []

    def explain(self):
        return "echo: returns nothing"
"""


@pytest.fixture
def custom_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    package = tmp_path / "cfg_strategies_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "echo.py").write_text(CUSTOM_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    return "cfg_strategies_pkg.echo"


def test_toml_configuration(tmp_path: Path, custom_module: str) -> None:
    path = tmp_path / "config.toml"
    path.write_text(
        textwrap.dedent(
            f"""
            [context.strategies]
            enabled = ["simple-keyword", "echo", "arce"]
            timeout_seconds = 5
            max_workers = 2

            [context.strategies.custom]
            "echo" = "{custom_module}:EchoStrategy"

            [context.strategies.settings.arce]
            enabled = false
            max_fragments = 7

            [context.strategies.settings.echo]
            circuit_breaker_threshold = 1
            """
        )
    )
    config = load_config(path)
    assert config.enabled == ("simple-keyword", "echo", "arce")
    assert config.active() == ("simple-keyword", "echo")
    assert config.custom == {"echo": f"{custom_module}:EchoStrategy"}
    assert config.defaults == StrategySettings(timeout_seconds=5, max_workers=2)
    assert config.settings_for("arce") == StrategySettings(
        timeout_seconds=5, max_workers=2, max_fragments=7, enabled=False
    )
    assert config.settings_for("echo").circuit_breaker_threshold == 1
    registry = StrategyRegistry.from_config(config)
    assert registry.names[-1] == "echo"
    assembler = ContextAssembler(registry, config)
    assert assembler.executor.max_workers == 2
    assert assembler.executor.breaker("echo").threshold == 1


def test_per_project_override_replaces_the_enabled_list(tmp_path: Path) -> None:
    global_file = tmp_path / "config.toml"
    global_file.write_text(
        '[context.strategies]\nenabled = ["arce", "simple-keyword"]\ntimeout_seconds = 9\n'
    )
    project = tmp_path / "project.toml"
    project.write_text('[context.strategies]\nenabled = ["simple-keyword", "semantic-embedding"]\n')
    config = load_config(global_file, project=project)
    assert config.enabled == ("simple-keyword", "semantic-embedding")
    assert config.defaults.timeout_seconds == 9
    assert load_config(project=project).enabled == ("simple-keyword", "semantic-embedding")
    assert StrategyConfig().with_enabled(["arce"]).enabled == ("arce",)
    project.write_text('[context.strategies]\nenabled = ["arce"]\ntimeout_seconds = 1\n')
    with pytest.raises(ConfigError, match=r"overrides only context\.strategies\.enabled"):
        load_config(global_file, project=project)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[context.strategies]\nenable = []\n", "unknown keys \\['enable'\\]"),
        ('[context.strategies]\nenabled = "arce"\n', "must be a list of strategy names"),
        ('[context.strategies]\nenabled = ["arce", "arce"]\n', "listed more than once"),
        (
            "[context.strategies]\ntimeout_seconds = 0\n",
            "timeout_seconds must be a positive number",
        ),
        ("[context.strategies.settings.arce]\nmax_workers = 2\n", "executor-wide"),
        ("[context.strategies.settings.arce]\nretries = 2\n", "unknown keys \\['retries'\\]"),
        ('[context.strategies.custom]\nx = "no_colon"\n', 'expected "module:Class"'),
        ("[context.strategies\n", "invalid TOML"),
    ],
)
def test_invalid_configuration_names_the_key(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        StrategyConfig.from_toml(text, source="conf.toml")
    assert str(info.value).startswith("conf.toml")


def test_missing_configuration_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="configuration file not found"):
        load_config(tmp_path / "absent.toml")


def test_load_strategy_errors(custom_module: str) -> None:
    assert load_strategy(f"{custom_module}:EchoStrategy").name == "echo"
    with pytest.raises(StrategyError, match="cannot import"):
        load_strategy("no_such_module_xyz:Thing")
    with pytest.raises(StrategyError, match="'Missing' not found"):
        load_strategy(f"{custom_module}:Missing")
    with pytest.raises(StrategyError, match="configured as 'other'"):
        load_strategy(f"{custom_module}:EchoStrategy", name="other")
    with pytest.raises(StrategyError, match="does not implement ContextStrategy"):
        load_strategy("json:JSONDecoder")


# ---------------------------------------------------------------------------
# allocator


@given(
    budget=st.integers(min_value=0, max_value=100_000),
    weights=st.lists(
        st.one_of(
            st.just(0.0),
            st.floats(min_value=0.0, max_value=1.0, allow_nan=False, allow_infinity=False),
        ),
        min_size=1,
        max_size=8,
    ),
)
def test_allocation_sums_exactly_to_the_budget(budget: int, weights: list[float]) -> None:
    named = {f"s{i}": w for i, w in enumerate(weights)}
    shares = split_budget(budget, named)
    assert list(shares) == list(named)
    assert sum(shares.values()) == budget
    assert all(isinstance(v, int) and v >= 0 for v in shares.values())
    # Quota property of the largest remainder method: each share is its exact
    # quota rounded down or up.
    exact = {n: Fraction(w) for n, w in named.items()}
    total = sum(exact.values()) or None
    for name, share in shares.items():
        quota = budget * exact[name] / total if total else Fraction(budget, len(named))
        assert quota - 1 < share < quota + 1
    # Deterministic, and independent of the order the names are given in.
    assert split_budget(budget, dict(reversed(list(named.items())))) == shares
    assert split_budget(budget, named) == shares


def test_allocation_is_proportional_to_confidence_times_quality() -> None:
    picks = [
        StrategySelection(ArceStrategy(), 1.0),  # 0.95
        StrategySelection(BreadthDepthNavigatorStrategy(), 0.5),  # 0.425
        StrategySelection(SimpleKeywordStrategy(), 0.5),  # 0.15
    ]
    shares = BudgetAllocator().allocate(1525, picks)
    assert shares == {"arce": 950, "breadth-depth-navigator": 425, "simple-keyword": 150}


def test_allocation_remainder_goes_to_largest_fraction_then_name() -> None:
    assert split_budget(2, {"b": 1.0, "a": 1.0, "c": 1.0}) == {"b": 1, "a": 1, "c": 0}
    assert split_budget(7, {"x": 3.0, "y": 1.0}) == {"x": 5, "y": 2}


def test_allocation_rejects_bad_input() -> None:
    with pytest.raises(StrategyError, match="non-negative int"):
        split_budget(-1, {"a": 1.0})
    with pytest.raises(StrategyError, match="weight of 'a'"):
        split_budget(10, {"a": float("inf")})
    with pytest.raises(StrategyError, match="selected twice"):
        BudgetAllocator().allocate(
            10, [StrategySelection(ArceStrategy(), 1.0), StrategySelection(ArceStrategy(), 1.0)]
        )


# ---------------------------------------------------------------------------
# selector


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


# ---------------------------------------------------------------------------
# executor


REQUEST = ContextRequest(query="anything")


def test_fragments_are_ordered_by_relevance_desc_then_node(backends: Backends) -> None:
    fragments = [_fragment("b", 0.5), _fragment("c", 0.9), _fragment("a", 0.5), _fragment("d", 1)]
    (result,) = StrategyExecutor().execute(
        REQUEST, backends, [(FakeStrategy(fragments=fragments), 100)]
    )
    assert [f.node for f in result.fragments] == ["d", "c", "a", "b"]
    assert result.errors == ()
    assert result.tokens_used == 20
    assert result.execution_time_ms >= 0


def test_max_fragments_limits_and_total_counts_before_limits(backends: Backends) -> None:
    fragments = [_fragment(f"n{i:02d}", 1 - i / 100, tokens=1) for i in range(30)]
    executor = StrategyExecutor(settings={"fake": StrategySettings(max_fragments=4)})
    (result,) = executor.execute(REQUEST, backends, [(FakeStrategy(fragments=fragments), 100)])
    assert [f.node for f in result.fragments] == ["n00", "n01", "n02", "n03"]
    assert result.total_fragments == 30
    assert result.tokens_used == 4


def test_an_answer_over_budget_is_trimmed_with_an_error(backends: Backends) -> None:
    fragments = [_fragment("a", 0.9, tokens=8), _fragment("b", 0.8, tokens=8),
                 _fragment("c", 0.7, tokens=2)]  # fmt: skip
    (result,) = StrategyExecutor().execute(
        REQUEST, backends, [(FakeStrategy(fragments=fragments), 10)]
    )
    assert [f.node for f in result.fragments] == ["a", "c"]
    assert result.tokens_used == 10
    assert result.errors == (
        "over budget: 'fake' returned 18 tokens for a budget of 10; trimmed to 10",
    )


def test_an_exception_is_recorded_and_counts_as_a_failure(backends: Backends) -> None:
    strategy = FakeStrategy(error=KeyError("missing index"))
    executor = StrategyExecutor()
    (result,) = executor.execute(REQUEST, backends, [(strategy, 10)])
    assert result.fragments == ()
    assert result.errors == ("error: 'fake' raised KeyError: 'missing index'",)
    assert executor.breaker("fake").failures == 1


def test_a_malformed_answer_is_an_error(backends: Backends) -> None:
    strategy = FakeStrategy()
    strategy.assemble = lambda *args: {"a": 1}  # type: ignore[method-assign,assignment]
    (result,) = StrategyExecutor().execute(REQUEST, backends, [(strategy, 10)])
    assert result.errors == ("error: 'fake' returned dict, not a list of ContextFragment",)


def test_strategies_run_in_parallel(backends: Backends) -> None:
    # Both calls must be inside assemble at once to pass the barrier.
    barrier = threading.Barrier(2, timeout=5)
    pair = [
        (FakeStrategy("one", barrier=barrier, fragments=[_fragment("a", 1.0)]), 10),
        (FakeStrategy("two", barrier=barrier, fragments=[_fragment("b", 1.0)]), 10),
    ]
    results = StrategyExecutor().execute(REQUEST, backends, pair)
    assert [r.errors for r in results] == [(), ()]
    assert [r.strategy_name for r in results] == ["one", "two"]


def test_max_workers_bounds_concurrency(backends: Backends) -> None:
    barrier = threading.Barrier(2, timeout=0.3)
    pair = [(FakeStrategy("one", barrier=barrier), 10), (FakeStrategy("two", barrier=barrier), 10)]
    executor = StrategyExecutor(defaults=StrategySettings(max_workers=1))
    results = executor.execute(REQUEST, backends, pair)
    assert all("BrokenBarrierError" in r.errors[0] for r in results)


def test_a_hung_strategy_times_out(backends: Backends, release: threading.Event) -> None:
    hung = FakeStrategy("hung", release=release)
    quick = FakeStrategy("quick", fragments=[_fragment("a", 1.0)])
    executor = StrategyExecutor(defaults=StrategySettings(timeout_seconds=0.2))
    hung_result, quick_result = executor.execute(REQUEST, backends, [(hung, 10), (quick, 10)])
    assert hung_result.errors == (
        "timeout: 'hung' did not finish within 0.2 s; its call was abandoned",
    )
    assert hung_result.fragments == ()
    assert hung_result.stats["timed_out"] is True
    assert [f.node for f in quick_result.fragments] == ["a"]


def test_circuit_breaker_opens_after_threshold_and_skips(
    backends: Backends, release: threading.Event
) -> None:
    hung = FakeStrategy("hung", release=release)
    executor = StrategyExecutor(
        defaults=StrategySettings(timeout_seconds=0.2, circuit_breaker_threshold=2)
    )
    for _ in range(2):
        (result,) = executor.execute(REQUEST, backends, [(hung, 10)])
        assert result.errors[0].startswith("timeout:")
    assert hung.calls == 2
    assert executor.breaker("hung").state == "open"
    (result,) = executor.execute(REQUEST, backends, [(hung, 10)])
    assert hung.calls == 2
    assert result.errors == (
        "circuit open: 'hung' skipped without running after 2 consecutive failures (threshold 2)",
    )
    assert result.stats["skipped"] is True
    executor.reset("hung")
    assert executor.breaker("hung").state == "closed"


def test_circuit_breaker_half_open_trial() -> None:
    now = [0.0]
    breaker = CircuitBreaker(2, recovery_seconds=10.0, clock=lambda: now[0])
    breaker.record_failure()
    breaker.record_success()
    breaker.record_failure()
    assert breaker.state == "closed"  # failures must be consecutive
    breaker.record_failure()
    assert (breaker.state, breaker.allow()) == ("open", False)
    now[0] = 10.0
    assert (breaker.state, breaker.allow()) == ("half_open", True)
    breaker.record_failure()  # the trial failed: open again
    assert breaker.state == "open"
    now[0] = 25.0
    breaker.record_success()
    assert (breaker.state, breaker.failures) == ("closed", 0)


def test_circuit_breaker_half_open_lets_one_trial_through() -> None:
    now = [0.0]
    breaker = CircuitBreaker(1, recovery_seconds=5.0, clock=lambda: now[0])
    breaker.record_failure()
    now[0] = 5.0
    assert breaker.allow() is True  # the trial
    assert [breaker.allow() for _ in range(3)] == [False, False, False]
    assert breaker.state == "half_open"
    breaker.record_failure()  # the trial failed: open again, no call passes
    assert (breaker.state, breaker.allow()) == ("open", False)
    now[0] = 10.0
    assert (breaker.allow(), breaker.allow()) == (True, False)
    breaker.record_success()  # the trial succeeded: every call passes
    assert (breaker.state, breaker.allow(), breaker.allow()) == ("closed", True, True)


def test_circuit_breaker_half_open_trial_is_exclusive_across_threads() -> None:
    now = [0.0]
    breaker = CircuitBreaker(1, recovery_seconds=1.0, clock=lambda: now[0])
    breaker.record_failure()
    now[0] = 1.0
    barrier = threading.Barrier(8)
    allowed: list[bool] = []

    def caller() -> None:
        barrier.wait()
        allowed.append(breaker.allow())

    threads = [threading.Thread(target=caller) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(allowed) == [False] * 7 + [True]


def test_a_hung_strategy_does_not_block_interpreter_exit() -> None:
    script = textwrap.dedent(
        """
        import threading
        from cognoxium import CognitionFrame
        from cognoxium.strategies import (Backends, ContextRequest, StrategyExecutor,
                                          StrategySettings, StrategyCapabilities, RESOURCE_TYPES)

        class Hung:
            name = "hung"
            capabilities = StrategyCapabilities(uses_text=True, resource_types=RESOURCE_TYPES)
            def can_handle(self, request, backends): return 1.0
            def assemble(self, request, backends, budget, plan_context):
                threading.Event().wait()
            def explain(self): return "hung"

        backends = Backends.from_frame(
            CognitionFrame([{"id": "a", "role": "user", "text": "hi"}]), vector=False)
        executor = StrategyExecutor(defaults=StrategySettings(timeout_seconds=0.1))
        (result,) = executor.execute(ContextRequest(query="hi"), backends, [(Hung(), 10)])
        print(result.errors[0])
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.startswith("timeout: 'hung' did not finish within 0.1 s")


# ---------------------------------------------------------------------------
# the hang case end to end: timeout, breaker, fallback, errors


def test_hung_strategy_times_out_breaker_opens_and_fallback_still_gives_context(
    items: CognitionFrame, release: threading.Event
) -> None:
    hung = FakeStrategy(
        "hung",
        capabilities=StrategyCapabilities(
            uses_text=True, resource_types=RESOURCE_TYPES, quality_score=0.9
        ),
        release=release,
    )
    registry = StrategyRegistry.builtin()
    registry.register(hung)
    config = StrategyConfig(
        enabled=("hung",),
        overrides={"hung": StrategySettings(timeout_seconds=0.2, circuit_breaker_threshold=2)},
    )
    assembler = ContextAssembler(registry, config)
    text_only = Backends.from_frame(items, vector=False, graph=False, temporal=False)
    request = ContextRequest(query="Where did the sister move?")

    for attempt in (1, 2):
        result = assembler.assemble(request, text_only, 200)
        assert hung.calls == attempt
        assert result.fallback == "simple-keyword"
        assert result.fragments
        assert result.fragments[0].node == "c1:D2:6"
        assert result.errors == (
            "timeout: 'hung' did not finish within 0.2 s; its call was abandoned",
        )
        assert [r.strategy_name for r in result.results] == ["hung", "simple-keyword"]
        assert result.results[1].stats["fallback"] is True

    assert assembler.executor.breaker("hung").state == "open"
    result = assembler.assemble(request, text_only, 200)
    assert hung.calls == 2  # skipped without running
    assert result.fallback == "simple-keyword"
    assert result.tokens_used <= 200
    assert result.fragments[0].node == "c1:D2:6"
    assert result.errors == (
        "circuit open: 'hung' skipped without running after 2 consecutive failures (threshold 2)",
    )
    assert result.to_frame().pack(200, as_of=AS_OF).manifest.totals.included > 0


@pytest.mark.parametrize(
    ("missing", "expected"),
    [
        ((), "arce"),
        (("text",), "breadth-depth-navigator"),
        (("graph",), "semantic-embedding"),
        (("graph", "vector"), "simple-keyword"),
        (("text", "vector"), "breadth-depth-navigator"),
    ],
)
def test_fallback_degrades_along_the_spec_order(
    backends: Backends, missing: tuple[str, ...], expected: str
) -> None:
    reduced = backends.without(*missing)
    chain = [s.name for s in fallback_chain(StrategyRegistry.builtin(), reduced)]
    assert chain[0] == expected
    assert chain == [n for n in FALLBACK_ORDER if n in chain]
    # A registry whose only enabled strategy cannot run still produces context.
    config = StrategyConfig(enabled=("plan-decision-context",))
    request = ContextRequest(query="Biscuit puppy", focus_nodes=("c1:D1:0",))
    result = ContextAssembler(config=config).assemble(request, reduced.without("temporal"), 300)
    assert result.fallback == expected
    assert result.fragments
    assert result.skipped == (("plan-decision-context", "missing backends: temporal"),)


def test_no_fallback_when_the_selected_strategies_produce_context(backends: Backends) -> None:
    result = ContextAssembler().assemble(ContextRequest(query="marathon"), backends, 300)
    assert result.fallback is None
    assert set(result.allocations) == set(DEFAULT_ENABLED)
    assert sum(result.allocations.values()) == 300
    assert result.tokens_used <= 300
    assert len({f.node for f in result.fragments}) == len(result.fragments)


# ---------------------------------------------------------------------------
# backends


def test_item_store_reads_metadata_and_hierarchy(backends: Backends) -> None:
    store = backends.store
    row = store.table.filter(pl.col("id") == "c1:D2:5").row(0, named=True)
    assert (row["conversation"], row["session"], row["speaker"], row["kind"]) == (
        "c1", "2", "Bo", "turn",
    )  # fmt: skip
    assert sorted(store.hierarchy.rows()) == [
        ("d-goal", "goal"), ("d-hot", "plan"), ("d-plan", "plan"), ("plan", "goal"),
        ("step", "plan"),
    ]  # fmt: skip
    assert store.ancestors(["step", "absent"]).rows() == [("step", 0), ("plan", 1), ("goal", 2)]
    assert store.ancestors(["step"], max_depth=1).rows() == [("step", 0), ("plan", 1)]


def test_item_store_rejects_bad_frames() -> None:
    with pytest.raises(StrategyError, match="missing"):
        ItemStore(pl.DataFrame({"id": ["a"]}))


def test_item_store_skips_binary_items() -> None:
    frame = CognitionFrame.from_records(
        [
            {"id": "t", "role": "user", "text": "hello"},
            {"id": "b", "role": "tool", "payload": {"kind": "binary", "data": "aGk="}},
        ]
    )
    store = ItemStore(frame)
    assert store.table.get_column("id").to_list() == ["t"]
    assert store.items.height == 2


def test_text_backend_ranks_by_bm25(backends: Backends) -> None:
    assert backends.text is not None
    hits = backends.text.search("marathon October")
    assert hits.get_column("id").to_list()[:2] == ["c1:D2:5", "c1:D1:3"]
    assert hits.schema == pl.Schema({"id": pl.String, "score": pl.Float64})
    assert backends.text.search("the and of").height == 0


def test_vector_backend_exact_cosine(backends: Backends) -> None:
    assert backends.vector is not None
    matrix = backends.vector.matrix
    assert matrix.shape == (len(backends.store), backends.vector.embedder.dim)
    sims = backends.vector.similarities("puppy Biscuit")
    expected = matrix @ backends.vector.embedder.vector("puppy Biscuit")
    assert sims.tolist() == pytest.approx(expected.tolist())
    assert backends.vector.similarity_search("puppy Biscuit", k=1).item(0, "id") == "c1:D1:0"


@pytest.mark.parametrize(
    ("weights", "hops", "expected"),
    [
        # adjacency only: the neighbouring turns of the same session
        (EdgeWeights(lineage=0, adjacent=1.0, session=0, speaker=0), 1,
         {"c1:D1:0", "c1:D1:1", "c1:D1:2"}),
        (EdgeWeights(lineage=0, adjacent=1.0, session=0, speaker=0), 2,
         {"c1:D1:0", "c1:D1:1", "c1:D1:2", "c1:D1:3"}),
        (EdgeWeights(lineage=0, adjacent=1.0, session=0, speaker=0), 3,
         {"c1:D1:0", "c1:D1:1", "c1:D1:2", "c1:D1:3"}),  # sessions are not adjacent
        # same session: every item of session 1
        (EdgeWeights(lineage=0, adjacent=0, session=1.0, speaker=0), 1,
         {"c1:D1:0", "c1:D1:1", "c1:D1:2", "c1:D1:3"}),
        # same speaker (Bo) across both sessions
        (EdgeWeights(lineage=0, adjacent=0, session=0, speaker=1.0), 1,
         {"c1:D1:1", "c1:D1:3", "c1:D2:5", "c1:D2:7"}),
    ],
)  # fmt: skip
def test_graph_edge_kinds(
    backends: Backends, weights: EdgeWeights, hops: int, expected: set[str]
) -> None:
    graph = GraphBackend(backends.store, weights)
    assert set(graph.traverse(["c1:D1:1"], hops=hops).get_column("id")) == expected


def test_graph_lineage_edges_and_scores(backends: Backends) -> None:
    graph = GraphBackend(backends.store, EdgeWeights(lineage=0.5, adjacent=0, session=0, speaker=0))
    reached = graph.traverse(["step"], hops=2)
    assert reached.rows() == [
        ("step", 1.0, 0), ("plan", 0.5, 1), ("d-hot", 0.25, 2), ("d-plan", 0.25, 2),
        ("goal", 0.25, 2),
    ]  # fmt: skip
    assert graph.traverse(["step"], hops=0).rows() == [("step", 1.0, 0)]
    with pytest.raises(StrategyError, match="hops"):
        graph.traverse(["step"], hops=-1)


def test_temporal_tiers_in_seconds(backends: Backends) -> None:
    assert backends.temporal is not None
    tiers = dict(backends.temporal.tiers().select("id", "tier").iter_rows())
    assert tiers["d-hot"] == "hot"  # age 0 s
    assert tiers["c1:D2:4"] == "warm"  # 9 days
    assert tiers["goal"] == "warm"  # 29 days, under the 30-day threshold
    assert DEFAULT_HOT_SECONDS == 86_400
    assert DEFAULT_WARM_SECONDS == 30 * 86_400
    strict = TemporalBackend(backends.store, as_of=AS_OF, hot_seconds=3600, warm_seconds=3600)
    assert set(strict.tiers().get_column("tier")) == {"hot", "cold"}
    early = backends.temporal.tiers(as_of=T0 + timedelta(minutes=1, seconds=30))
    assert set(early.get_column("id")) == {"c1:D1:0", "c1:D1:1", "goal", "plan", "step",
                                           "d-goal", "d-plan", "d-other"}  # fmt: skip
    with pytest.raises(StrategyError, match="hot_seconds"):
        TemporalBackend(backends.store, hot_seconds=10, warm_seconds=5)
    with pytest.raises(StrategyError, match="unknown temporal tiers"):
        backends.temporal.query_by_tier(["lukewarm"])


def test_temporal_reference_defaults_to_latest_item(items: CognitionFrame) -> None:
    store = ItemStore(items)
    assert TemporalBackend(store).reference() == AS_OF


def test_request_validation() -> None:
    with pytest.raises(StrategyError, match="breadth"):
        ContextRequest(query="x", breadth=-1)
    with pytest.raises(StrategyError, match="unknown types"):
        ContextRequest(query="x", resource_types=("email",))
    with pytest.raises(StrategyError, match="timezone-aware"):
        ContextRequest(query="x", as_of=datetime(2024, 1, 1))
    with pytest.raises(StrategyError, match="relevance_score"):
        _fragment("a", float("inf"))


# ---------------------------------------------------------------------------
# built-in strategies


def _nodes(fragments: list[ContextFragment]) -> list[str]:
    return [f.node for f in fragments]


def test_simple_keyword(backends: Backends) -> None:
    strategy = SimpleKeywordStrategy()
    request = ContextRequest(query="ignored", keywords=("Toronto",))
    assert strategy.can_handle(request, backends) == 1.0
    found = strategy.assemble(request, backends, 500, None)
    assert set(_nodes(found)) == {"c1:D2:6", "c1:D2:7"}
    assert all(f.backend == "text" and f.strategy == "simple-keyword" for f in found)
    assert max(f.relevance_score for f in found) == 1.0
    assert strategy.can_handle(ContextRequest(query="zebra"), backends) == 0.0
    assert strategy.can_handle(request, backends.without("text")) == 0.0


def test_resource_types_filter_results(backends: Backends) -> None:
    request = ContextRequest(query="Decision", resource_types=("memory",))
    found = SimpleKeywordStrategy().assemble(request, backends, 1000, None)
    assert found
    assert all(n.startswith("d-") for n in _nodes(found))
    request = ContextRequest(query="Biscuit", resource_types=("assistant",))
    assert _nodes(SimpleKeywordStrategy().assemble(request, backends, 1000, None)) == ["c1:D1:1"]


def test_breadth_depth_navigator_expands_by_breadth(backends: Backends) -> None:
    strategy = BreadthDepthNavigatorStrategy()
    focus = ContextRequest(query="", focus_nodes=("c1:D1:0",), breadth=0)
    assert strategy.can_handle(focus, backends) == 1.0
    assert _nodes(strategy.assemble(focus, backends, 1000, None)) == ["c1:D1:0"]
    one_hop = dataclasses.replace(focus, breadth=1)
    found = strategy.assemble(one_hop, backends, 1000, None)
    assert found[0].node == "c1:D1:0"
    assert found[0].relevance_score == 1.0
    assert found[1].node == "c1:D1:1"  # the adjacent turn scores highest
    assert {"c1:D1:2", "c1:D1:3", "c1:D2:4"} <= set(_nodes(found))  # session, speaker
    assert "goal" not in _nodes(found)
    assert all(f.backend == "graph" for f in found)


def test_breadth_depth_navigator_seeds_from_search_without_focus(backends: Backends) -> None:
    strategy = BreadthDepthNavigatorStrategy(seed_count=1)
    request = ContextRequest(query="Lisbon", breadth=1)
    assert strategy.can_handle(request, backends) == 0.7
    found = strategy.assemble(request, backends, 1000, None)
    assert found[0].node == "c1:D1:3"
    assert "c1:D1:2" in _nodes(found)
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
    assert len(set(_nodes(found))) == len(found)
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
    assert "c1:D2:5" in _nodes(found)  # same speaker, warm tier, reached by traversal
    assert strategy.can_handle(ContextRequest(query="x", as_of=T0), backends) == 0.0


def test_plan_decision_context_walks_the_plan_hierarchy(backends: Backends) -> None:
    strategy = PlanDecisionContextStrategy()
    request = ContextRequest(query="", focus_nodes=("step",))
    assert strategy.can_handle(request, backends) == 1.0
    found = strategy.assemble(request, backends, 1000, None)
    # d-plan hangs off the parent plan (depth 1), d-goal off the goal (depth 2);
    # d-hot is hot, d-other is outside the hierarchy.
    assert _nodes(found) == ["d-plan", "d-goal"]
    assert [f.relevance_score for f in found] == [1.0, pytest.approx(2 / 3)]
    assert {f.backend for f in found} == {"temporal"}
    by_plan_id = strategy.assemble(ContextRequest(query=""), backends, 1000, {"plan_id": "goal"})
    assert _nodes(by_plan_id) == ["d-goal"]
    recency = strategy.assemble(ContextRequest(query=""), backends.without("text"), 1000, None)
    assert set(_nodes(recency)) == {"d-plan", "d-goal", "d-other"}
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
    backends = Backends.from_frame(frame, embedding_cache=_cache())
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


# ---------------------------------------------------------------------------
# into the engine


def test_fragments_flow_into_dedupe_redact_and_pack(items: CognitionFrame) -> None:
    extra = CognitionFrame(
        [
            *_conversation_records(),
            {"id": "copy", "role": "user", "created_at": T0.isoformat(),
             "text": "Ann: I adopted a puppy named Biscuit last week."},
            {"id": "mail", "role": "user", "text": "Biscuit's vet is vet@example.com",
             "created_at": T0.isoformat()},
        ]
    )  # fmt: skip
    backends = Backends.from_frame(extra, vector="local_hash", embedding_cache=_cache())
    result = ContextAssembler().assemble(ContextRequest(query="Biscuit"), backends, 400)
    frame = result.to_frame()
    collected = frame.collect()
    assert "strategy" in collected.columns
    relevance = {f.node: f.relevance_score for f in result.fragments}
    assert dict(collected.select("id", "rank").iter_rows()) == relevance
    # original (input) order is kept
    order = [r["id"] for r in extra.collect().select("id").to_dicts()]
    ids = collected.get_column("id").to_list()
    assert ids == [i for i in order if i in set(ids)]
    assert {"c1:D1:0", "copy", "mail"} <= set(ids)
    processed = frame.dedupe().redact()
    pack = processed.pack(400, as_of=AS_OF)
    packed = [e.id for e in pack.manifest.entries if e.decision == "included"]
    assert "mail" in packed
    assert not ("copy" in packed and "c1:D1:0" in packed)  # one of the duplicates
    assert all("vet@example.com" not in m["content"] for m in pack.messages)
    assert pack.manifest.totals.included == len(packed) > 0


def test_fragments_to_frame_rejects_unknown_nodes(items: CognitionFrame) -> None:
    with pytest.raises(StrategyError, match=r"\['ghost'\]"):
        fragments_to_frame(items, [_fragment("ghost", 1.0)])


def test_locomo_items_use_speaker_and_session_edges(tmp_path: Path) -> None:
    path = tmp_path / "tiny.json"
    path.write_text(
        json.dumps(
            [
                {
                    "sample_id": "c9",
                    "conversation": {
                        "speaker_a": "Ann",
                        "speaker_b": "Bo",
                        "session_1_date_time": "9:00 am on 2 March, 2024",
                        "session_1": [
                            {"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a cat."},
                            {"speaker": "Bo", "dia_id": "D1:2", "text": "What is its name?"},
                            {"speaker": "Ann", "dia_id": "D1:3", "text": "Her name is Miso."},
                        ],
                        "session_2_date_time": "9:00 am on 9 March, 2024",
                        "session_2": [
                            {"speaker": "Bo", "dia_id": "D2:1", "text": "How is Miso?"},
                        ],
                    },
                }
            ]
        )
    )
    frame = load_locomo(path)
    backends = Backends.from_frame(frame, vector="local_hash", embedding_cache=_cache())
    graph = GraphBackend(backends.store, EdgeWeights(lineage=0, adjacent=0, session=0, speaker=1))
    assert set(graph.traverse(["c9:D1:2"], hops=1).get_column("id")) == {"c9:D1:2", "c9:D2:1"}
    request = ContextRequest(query="", focus_nodes=("c9:D1:1",), breadth=1)
    found = BreadthDepthNavigatorStrategy().assemble(request, backends, 1000, None)
    assert _nodes(found)[:2] == ["c9:D1:1", "c9:D1:2"]


def test_backend_kinds_constant() -> None:
    assert BACKEND_KINDS == ("text", "vector", "graph", "temporal")
    with pytest.raises(StrategyError, match="unknown backend kinds"):
        Backends.from_frame(
            CognitionFrame([{"id": "a", "role": "user", "text": "x"}]), vector=False
        ).without("sql")
