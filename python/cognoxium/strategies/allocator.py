"""Split a token budget among strategies, in proportion to their weights.

The split is the largest remainder method (Hamilton's apportionment method):
each share gets the integer part of its exact quota ``budget × w / Σw``, and
the tokens left over go one each to the largest fractional parts. Quotas are
computed with exact rational arithmetic, so the shares are non-negative
integers that always sum to the budget, and ties are broken deterministically
(larger weight first, then name ascending). See M. L. Balinski and H. P.
Young, *Fair Representation* (2nd ed., 2001), ch. 2.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from fractions import Fraction

from cognoxium.exceptions import StrategyError
from cognoxium.strategies.selector import StrategySelection

__all__ = ["BudgetAllocator", "split_budget"]


def _check_budget(budget: object) -> int:
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 0:
        raise StrategyError(f"a token budget must be a non-negative int (tokens), got {budget!r}")
    return budget


def split_budget(budget: int, weights: Mapping[str, float]) -> dict[str, int]:
    """Split ``budget`` tokens among ``weights`` by the largest remainder method.

    Parameters
    ----------
    budget
        The token budget, in tokens, at least 0.
    weights
        Non-negative finite weight per name. When every weight is 0, the
        budget is split evenly.

    Returns
    -------
    dict of str to int
        The sub-budget of every name, in tokens, in the order of ``weights``;
        the values sum to ``budget`` (empty when ``weights`` is).

    Raises
    ------
    StrategyError
        On a negative budget or a negative, NaN or infinite weight.

    Examples
    --------
    >>> split_budget(1000, {"text": 0.4, "vector": 0.4, "graph": 0.2})
    {'text': 400, 'vector': 400, 'graph': 200}
    >>> split_budget(10, {"a": 1.0, "b": 1.0, "c": 1.0})
    {'a': 4, 'b': 3, 'c': 3}
    >>> split_budget(5, {"a": 0.0, "b": 0.0})
    {'a': 3, 'b': 2}
    """
    _check_budget(budget)
    if not weights:
        return {}
    exact: dict[str, Fraction] = {}
    for name, weight in weights.items():
        if (
            isinstance(weight, bool)
            or not isinstance(weight, int | float)
            or not math.isfinite(weight)
            or weight < 0
        ):
            raise StrategyError(
                f"weight of {name!r} must be a non-negative finite number, got {weight!r}"
            )
        exact[name] = Fraction(weight)
    total = sum(exact.values(), Fraction(0))
    if total == 0:
        exact = dict.fromkeys(exact, Fraction(1))
        total = Fraction(len(exact))
    quotas = {name: budget * w / total for name, w in exact.items()}
    shares = {name: math.floor(q) for name, q in quotas.items()}
    left = budget - sum(shares.values())
    order = sorted(quotas, key=lambda n: (-(quotas[n] - shares[n]), -exact[n], n))
    for name in order[:left]:
        shares[name] += 1
    return shares


class BudgetAllocator:
    """Give each selected strategy a share of the token budget.

    A strategy's weight is ``confidence × quality_score``; shares follow
    :func:`split_budget`, so they are integers summing exactly to the budget.

    Examples
    --------
    >>> from cognoxium.strategies.builtin import SimpleKeywordStrategy, ArceStrategy
    >>> picks = [StrategySelection(ArceStrategy(), 1.0),
    ...          StrategySelection(SimpleKeywordStrategy(), 1.0)]
    >>> BudgetAllocator().allocate(1000, picks)
    {'arce': 760, 'simple-keyword': 240}
    """

    def allocate(self, budget: int, selections: Sequence[StrategySelection]) -> dict[str, int]:
        """Split ``budget`` tokens among ``selections``.

        Parameters
        ----------
        budget
            The token budget, in tokens.
        selections
            The selected strategies with their confidence (from
            :class:`~cognoxium.strategies.selector.StrategySelector`); names
            must be unique.

        Returns
        -------
        dict of str to int
            Tokens per strategy name, in selection order, summing to ``budget``.

        Raises
        ------
        StrategyError
            On a negative budget or a repeated strategy name.
        """
        weights: dict[str, float] = {}
        for selection in selections:
            name = selection.strategy.name
            if name in weights:
                raise StrategyError(f"strategy {name!r} is selected twice")
            weights[name] = selection.weight
        return split_budget(budget, weights)
