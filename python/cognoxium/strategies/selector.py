"""Choose the strategies that can serve a request, by polling ``can_handle``.

For every candidate strategy, in the order given, the selector

1. skips it when a backend its capabilities require is missing (``can_handle``
   is not called);
2. skips it when it retrieves none of the requested resource types;
3. calls ``can_handle(request, backends)``; a confidence of 0, a value outside
   ``[0, 1]`` or an exception skips it (with the reason recorded).

The selected strategies are ordered by weight (``confidence × quality_score``)
descending, then quality descending, then name ascending.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from cognoxium.strategies.backends import Backends
from cognoxium.strategies.protocol import ContextRequest, ContextStrategy

__all__ = ["Selection", "StrategySelection", "StrategySelector"]


@dataclasses.dataclass(frozen=True, slots=True)
class StrategySelection:
    """A strategy chosen for a request, with its confidence in ``[0, 1]``."""

    strategy: ContextStrategy
    confidence: float

    @property
    def weight(self) -> float:
        """``confidence × quality_score``: the strategy's share weight for the budget."""
        return self.confidence * self.strategy.capabilities.quality_score


@dataclasses.dataclass(frozen=True, slots=True)
class Selection:
    """The outcome of polling: what was selected and why the others were not.

    Parameters
    ----------
    selected
        The chosen strategies, in selection order (see the module docstring).
    skipped
        ``(name, reason)`` for every strategy not chosen, in polling order.
    """

    selected: tuple[StrategySelection, ...]
    skipped: tuple[tuple[str, str], ...]

    @property
    def names(self) -> tuple[str, ...]:
        """The names of the selected strategies, in order."""
        return tuple(s.strategy.name for s in self.selected)


class StrategySelector:
    """Poll strategies with ``can_handle`` and order the ones that can serve a request.

    Parameters
    ----------
    strategies
        The candidates (usually the enabled strategies of a registry).

    Examples
    --------
    >>> from cognoxium import CognitionFrame
    >>> from cognoxium.strategies.builtin import SimpleKeywordStrategy, ArceStrategy
    >>> backends = Backends.from_frame(
    ...     CognitionFrame([{"id": "a", "role": "user", "text": "my cat"}]), vector=False)
    >>> selection = StrategySelector([ArceStrategy(), SimpleKeywordStrategy()]).select(
    ...     ContextRequest(query="cat"), backends)
    >>> selection.names, selection.skipped
    (('simple-keyword',), (('arce', 'missing backends: vector'),))
    """

    def __init__(self, strategies: Sequence[ContextStrategy]) -> None:
        self.strategies = tuple(strategies)

    def select(self, request: ContextRequest, backends: Backends) -> Selection:
        """Poll every candidate and return the selected ones in order.

        Parameters
        ----------
        request
            The request.
        backends
            The available backends.

        Returns
        -------
        Selection
            The selected strategies with their confidences, and the skipped
            ones with a reason each.
        """
        chosen: list[StrategySelection] = []
        skipped: list[tuple[str, str]] = []
        for strategy in self.strategies:
            name = strategy.name
            capabilities = strategy.capabilities
            missing = backends.missing(capabilities)
            if missing:
                skipped.append((name, f"missing backends: {', '.join(missing)}"))
                continue
            if not capabilities.handles(request.resource_types):
                skipped.append((name, "retrieves none of the requested resource types"))
                continue
            try:
                confidence = strategy.can_handle(request, backends)
            except Exception as exc:
                skipped.append((name, f"can_handle raised {type(exc).__name__}: {exc}"))
                continue
            if (
                isinstance(confidence, bool)
                or not isinstance(confidence, int | float)
                or not math.isfinite(confidence)
                or not 0.0 <= confidence <= 1.0
            ):
                skipped.append((name, f"can_handle returned {confidence!r}, not in [0, 1]"))
                continue
            if confidence == 0:
                skipped.append((name, "can_handle returned 0.0"))
                continue
            chosen.append(StrategySelection(strategy, float(confidence)))
        chosen.sort(
            key=lambda s: (-s.weight, -s.strategy.capabilities.quality_score, s.strategy.name)
        )
        return Selection(tuple(chosen), tuple(skipped))
