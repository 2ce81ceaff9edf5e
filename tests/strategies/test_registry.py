"""The strategy registry: defaults, validation rules, registration, TOML configuration, loading."""

from __future__ import annotations

import dataclasses
import textwrap
from pathlib import Path

import pytest

from cognoxium.exceptions import ConfigError, StrategyError
from cognoxium.strategies import (
    DEFAULT_ENABLED,
    FALLBACK_ORDER,
    RESOURCE_TYPES,
    ContextAssembler,
    SimpleKeywordStrategy,
    StrategyCapabilities,
    StrategyConfig,
    StrategyRegistry,
    StrategySettings,
    load_config,
    load_strategy,
)
from tests.strategies.helpers import FakeStrategy


def test_default_enabled_list() -> None:
    assert DEFAULT_ENABLED == ("simple-keyword", "semantic-embedding", "breadth-depth-navigator")
    assert StrategyConfig().enabled == DEFAULT_ENABLED
    assert StrategyConfig.from_toml("").active() == DEFAULT_ENABLED


def test_fallback_order() -> None:
    assert FALLBACK_ORDER == (
        "arce", "breadth-depth-navigator", "semantic-embedding", "simple-keyword",
    )  # fmt: skip


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
