"""Per-strategy execution settings, with the registry's documented defaults.

=============================  ======  =======  ======================================
key                            type    default  meaning
=============================  ======  =======  ======================================
``timeout_seconds``            number  30       per-strategy assembly timeout (seconds)
``max_fragments``              int     100      most fragments kept per call
``max_workers``                int     4        parallel workers of the executor
``circuit_breaker_threshold``  int     3        consecutive failures before the
                                                circuit opens
``enabled``                    bool    true     whether the strategy is active
=============================  ======  =======  ======================================
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from cognoxium.exceptions import StrategyError

__all__ = [
    "DEFAULT_CIRCUIT_BREAKER_THRESHOLD",
    "DEFAULT_MAX_FRAGMENTS",
    "DEFAULT_MAX_WORKERS",
    "DEFAULT_TIMEOUT_SECONDS",
    "SETTING_KEYS",
    "StrategySettings",
]

DEFAULT_TIMEOUT_SECONDS = 30
"""Default per-strategy assembly timeout, in seconds."""

DEFAULT_MAX_FRAGMENTS = 100
"""Default maximum number of fragments kept per strategy call."""

DEFAULT_MAX_WORKERS = 4
"""Default number of strategies the executor runs at once."""

DEFAULT_CIRCUIT_BREAKER_THRESHOLD = 3
"""Default number of consecutive failures after which a strategy's circuit opens."""


def positive_int(value: object, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise StrategyError(f"{key} must be a positive int, got {value!r}")
    return value


def positive_seconds(value: object, key: str) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise StrategyError(f"{key} must be a positive number of seconds, got {value!r}")
    return value


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class StrategySettings:
    """How the executor runs one strategy (see the module docstring for the table).

    Parameters
    ----------
    timeout_seconds
        Wall-clock limit of one ``assemble`` call, in seconds (> 0).
    max_fragments
        Keep at most this many fragments (the best ones) per call.
    max_workers
        Strategies run at once by the executor. An executor-wide setting: it
        is read from the defaults, not per strategy.
    circuit_breaker_threshold
        Consecutive failures (exceptions or timeouts) after which the
        strategy's circuit opens and the strategy is skipped without running.
    enabled
        Whether the strategy takes part in assembly.

    Raises
    ------
    StrategyError
        On a non-positive or non-finite value, or a non-bool ``enabled``.

    Examples
    --------
    >>> StrategySettings()
    StrategySettings(timeout_seconds=30, max_fragments=100, max_workers=4, circuit_breaker_threshold=3, enabled=True)
    >>> StrategySettings().replace(timeout_seconds=0.2).timeout_seconds
    0.2
    """  # noqa: E501

    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS
    max_fragments: int = DEFAULT_MAX_FRAGMENTS
    max_workers: int = DEFAULT_MAX_WORKERS
    circuit_breaker_threshold: int = DEFAULT_CIRCUIT_BREAKER_THRESHOLD
    enabled: bool = True

    def __post_init__(self) -> None:
        positive_seconds(self.timeout_seconds, "timeout_seconds")
        positive_int(self.max_fragments, "max_fragments")
        positive_int(self.max_workers, "max_workers")
        positive_int(self.circuit_breaker_threshold, "circuit_breaker_threshold")
        if not isinstance(self.enabled, bool):
            raise StrategyError(f"enabled must be true or false, got {self.enabled!r}")

    def replace(self, **changes: Any) -> StrategySettings:
        """A copy with the given fields changed (validated again)."""
        return dataclasses.replace(self, **changes)


SETTING_KEYS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(StrategySettings))
"""The keys of the per-strategy settings, in table order."""
