"""Per-strategy settings: defaults, keys and validation."""

from __future__ import annotations

import pytest

from cognoxium.exceptions import StrategyError
from cognoxium.strategies import (
    SETTING_KEYS,
    StrategyConfig,
    StrategySettings,
)


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
