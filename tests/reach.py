"""How many drawn examples of a property reach its check, asserted.

A property that returns early, or asserts only inside a branch, can pass
without checking what its name says: when most drawn inputs take the early
exit, the check runs on a few examples or on none. ``@reaching(share)``, put
above ``@given``, counts the valid examples (those not rejected by
``assume``) and those that called :func:`reached` at the check, and fails
the test when fewer than ``share`` of them did::

    @reaching(0.8)
    @settings(max_examples=100, deadline=None)
    @given(st.integers(0, 10))
    def test_halves(n):
        if n % 2:
            return
        assert (n // 2) * 2 == n
        reached()

:func:`reached` also records a hypothesis event, so
``pytest --hypothesis-show-statistics`` lists the share per label; ``pytest
-v`` prints each property's count in the terminal summary (see
``tests/conftest.py``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from hypothesis import event
from hypothesis.errors import UnsatisfiedAssumption

__all__ = ["SHARES", "Tally", "reached", "reaching"]

F = TypeVar("F", bound=Callable[..., Any])


@dataclass
class Tally:
    """The examples of one run of a property, and those that reached its check."""

    name: str
    minimum: float
    label: str | None = None
    examples: int = 0
    reached: int = 0
    labels: dict[str, int] = field(default_factory=dict)

    @property
    def share(self) -> float:
        return self.reached / self.examples if self.examples else 0.0

    def describe(self) -> str:
        check = f" reached {self.label!r}" if self.label is not None else ""
        return (
            f"{self.reached}/{self.examples}{check} ({self.share:.0%}, at least {self.minimum:.0%})"
        )


SHARES: dict[str, Tally] = {}
"""The tally of each property run in this process, by test name."""

_current: list[tuple[Tally, set[str]]] = []
"""The tally of the example running now, and the labels it reached."""


def reached(label: str = "checked") -> None:
    """Mark that the running example reached the property's check (``label`` names it).

    Raises
    ------
    RuntimeError
        If no ``@reaching`` property is running.
    """
    if not _current:
        raise RuntimeError("reached() is called from a property decorated with @reaching")
    event(f"reached: {label}")
    _current[-1][1].add(label)


def reaching(minimum: float, label: str | None = None) -> Callable[[F], F]:
    """Fail the property when fewer than ``minimum`` of its valid examples call :func:`reached`.

    Parameters
    ----------
    minimum
        The least share, in (0, 1], of valid examples that must reach the check.
    label
        The check that counts, when a property has several (each branch a
        check of its own): only examples that reached this label count.

    Raises
    ------
    TypeError
        If the decorated function is not a hypothesis test (put ``@reaching``
        above ``@given``).
    """
    if not 0 < minimum <= 1:
        raise ValueError(f"minimum must be a share in (0, 1], got {minimum!r}")

    def decorate(test: F) -> F:
        handle = getattr(test, "hypothesis", None)
        if handle is None:
            raise TypeError(f"@reaching goes above @given, got {test!r}")
        inner = handle.inner_test
        tally = Tally(test.__name__, minimum, label)

        @functools.wraps(inner)
        def counted(*args: Any, **kwargs: Any) -> Any:
            labels: set[str] = set()
            _current.append((tally, labels))
            try:
                result = inner(*args, **kwargs)
            except UnsatisfiedAssumption:
                raise  # rejected by assume(): not an example
            finally:
                _current.pop()
            tally.examples += 1
            if (label in labels) if label is not None else bool(labels):
                tally.reached += 1
            for name in labels:
                tally.labels[name] = tally.labels.get(name, 0) + 1
            return result

        handle.inner_test = counted

        @functools.wraps(test)
        def run(*args: Any, **kwargs: Any) -> None:
            tally.examples = tally.reached = 0
            tally.labels.clear()
            test(*args, **kwargs)
            SHARES[tally.name] = tally
            assert tally.examples > 0, f"{tally.name}: no valid example was drawn"
            assert tally.share >= minimum, (
                f"{tally.name}: {tally.describe()} of the valid examples reached the check; "
                "draw inputs that exercise it"
            )

        return run  # type: ignore[return-value]

    return decorate
