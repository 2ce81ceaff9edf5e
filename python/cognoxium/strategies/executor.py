"""Run strategies in parallel, each under a timeout and behind a circuit breaker.

Every strategy call runs in its own daemon thread and reports through a
:class:`concurrent.futures.Future`; the calling thread waits on the futures
with :func:`concurrent.futures.wait`. At most ``max_workers`` calls run at
once. A call that outlives its ``timeout_seconds`` is abandoned: its result is
recorded as a timeout and its thread, a daemon, is never joined, so a hung
strategy blocks neither the caller nor interpreter exit (a
``ThreadPoolExecutor`` joins its workers at exit). An abandoned call no longer
counts against ``max_workers``.

Each strategy has a :class:`CircuitBreaker` (the circuit breaker pattern of
M. T. Nygard, *Release It!*, 2007): after ``circuit_breaker_threshold``
consecutive failures (exceptions, timeouts, malformed answers) the circuit
opens and the strategy is skipped without running; after
``recovery_seconds`` (if set) one trial call is let through (half-open), and a
success closes the circuit again. Breakers live as long as the executor.

The result of every call, skipped or not, is a
:class:`~cognoxium.strategies.protocol.ContextStrategyResult` whose
``errors`` say what went wrong.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from typing import Any

from cognoxium._threads import in_daemon_thread
from cognoxium.exceptions import StrategyError
from cognoxium.strategies.backends import Backends
from cognoxium.strategies.protocol import (
    ContextFragment,
    ContextRequest,
    ContextStrategy,
    ContextStrategyResult,
    sort_fragments,
)
from cognoxium.strategies.settings import StrategySettings, positive_int

__all__ = ["CircuitBreaker", "StrategyExecutor"]


class CircuitBreaker:
    """Count consecutive failures of one strategy and open after a threshold.

    States: ``closed`` (calls run), ``open`` (calls are skipped) and
    ``half_open`` (the recovery time has passed: the next call is a trial).
    While half-open, :meth:`allow` lets exactly one trial call through and
    refuses every other caller until that trial's result is recorded with
    :meth:`record_success` or :meth:`record_failure`.

    Parameters
    ----------
    threshold
        Consecutive failures that open the circuit, at least 1.
    recovery_seconds
        Seconds after opening before a trial call is allowed; ``None`` keeps
        the circuit open until :meth:`reset`.
    clock
        Monotonic clock in seconds (injectable for tests).

    Raises
    ------
    StrategyError
        On a threshold below 1 or a negative recovery time.

    Examples
    --------
    >>> breaker = CircuitBreaker(2)
    >>> breaker.record_failure(); breaker.state
    'closed'
    >>> breaker.record_failure(); breaker.state, breaker.allow()
    ('open', False)
    >>> breaker.reset(); breaker.allow()
    True
    """

    def __init__(
        self,
        threshold: int,
        *,
        recovery_seconds: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        positive_int(threshold, "circuit_breaker_threshold")
        if recovery_seconds is not None and not recovery_seconds >= 0:
            raise StrategyError(
                f"recovery_seconds must be non-negative or None, got {recovery_seconds!r}"
            )
        self.threshold = threshold
        self.recovery_seconds = recovery_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._failures = 0
        self._opened_at: float | None = None
        self._trial_running = False

    @property
    def failures(self) -> int:
        """Consecutive failures since the last success or reset."""
        return self._failures

    @property
    def state(self) -> str:
        """``"closed"``, ``"open"`` or ``"half_open"``."""
        with self._lock:
            return self._state()

    def _state(self) -> str:
        if self._opened_at is None:
            return "closed"
        if (
            self.recovery_seconds is not None
            and self._clock() - self._opened_at >= self.recovery_seconds
        ):
            return "half_open"
        return "open"

    def allow(self) -> bool:
        """Whether a call may run now.

        Returns
        -------
        bool
            True when closed; when half-open, True for the one trial call
            only (the caller must then record its result), False for every
            other caller until that result is recorded; False when open.
        """
        with self._lock:
            state = self._state()
            if state == "closed":
                return True
            if state == "half_open" and not self._trial_running:
                self._trial_running = True
                return True
            return False

    def record_success(self) -> None:
        """Close the circuit and forget past failures."""
        with self._lock:
            self._failures = 0
            self._opened_at = None
            self._trial_running = False

    def record_failure(self) -> None:
        """Count a failure; open at the threshold, or again after a failed trial."""
        with self._lock:
            self._failures += 1
            if self._state() == "half_open" or self._failures >= self.threshold:
                self._opened_at = self._clock()
            self._trial_running = False

    def reset(self) -> None:
        """Close the circuit (as :meth:`record_success`)."""
        self.record_success()


def _run_in_daemon(name: str, call: Callable[[], Any]) -> Future[tuple[Any, float]]:
    """Start ``call`` in a daemon thread; the future resolves to (result, seconds)."""

    def timed() -> tuple[Any, float]:
        start = time.perf_counter()
        return call(), time.perf_counter() - start

    return in_daemon_thread(f"cognoxium-strategy:{name}", timed)


class StrategyExecutor:
    """Run strategies in parallel under per-strategy timeouts and circuit breakers.

    Parameters
    ----------
    defaults
        Settings of every strategy without its own; ``defaults.max_workers``
        is the number of calls run at once.
    settings
        Settings per strategy name.
    recovery_seconds
        Seconds before an open circuit lets a trial call through; ``None``
        (the default) keeps it open until :meth:`reset`.
    clock
        Monotonic clock of the circuit breakers, in seconds.

    Examples
    --------
    >>> from cognoxium import CognitionFrame
    >>> from cognoxium.strategies.builtin import SimpleKeywordStrategy
    >>> backends = Backends.from_frame(CognitionFrame([
    ...     {"id": "a", "role": "user", "text": "my cat is called Miso"}]), vector=False)
    >>> executor = StrategyExecutor()
    >>> [result] = executor.execute(ContextRequest(query="cat"), backends,
    ...                             [(SimpleKeywordStrategy(), 200)])
    >>> result.strategy_name, [f.node for f in result.fragments], result.errors
    ('simple-keyword', ['a'], ())
    """

    def __init__(
        self,
        *,
        defaults: StrategySettings | None = None,
        settings: Mapping[str, StrategySettings] | None = None,
        recovery_seconds: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.defaults = defaults or StrategySettings()
        self.settings = dict(settings or {})
        self.recovery_seconds = recovery_seconds
        self._clock = clock
        self._breakers: dict[str, CircuitBreaker] = {}
        self._lock = threading.Lock()

    @property
    def max_workers(self) -> int:
        """How many strategy calls run at once."""
        return self.defaults.max_workers

    def settings_for(self, name: str) -> StrategySettings:
        """The settings of strategy ``name`` (its own, else the defaults)."""
        return self.settings.get(name, self.defaults)

    def breaker(self, name: str) -> CircuitBreaker:
        """The circuit breaker of strategy ``name``, made on first use."""
        with self._lock:
            breaker = self._breakers.get(name)
            if breaker is None:
                breaker = CircuitBreaker(
                    self.settings_for(name).circuit_breaker_threshold,
                    recovery_seconds=self.recovery_seconds,
                    clock=self._clock,
                )
                self._breakers[name] = breaker
            return breaker

    def reset(self, name: str | None = None) -> None:
        """Close the circuit of ``name``, or of every strategy."""
        with self._lock:
            breakers = list(self._breakers.values()) if name is None else []
            if name is not None and name in self._breakers:
                breakers = [self._breakers[name]]
        for breaker in breakers:
            breaker.reset()

    def execute(
        self,
        request: ContextRequest,
        backends: Backends,
        budgets: Sequence[tuple[ContextStrategy, int]],
        plan_context: Mapping[str, Any] | None = None,
    ) -> tuple[ContextStrategyResult, ...]:
        """Run each strategy with its token budget, in parallel.

        Parameters
        ----------
        request
            The request.
        backends
            The backends every strategy reads.
        budgets
            ``(strategy, budget in tokens)`` pairs; names must be unique.
        plan_context
            Passed to every ``assemble`` call.

        Returns
        -------
        tuple of ContextStrategyResult
            One per pair, in the order of ``budgets``. A strategy whose
            circuit is open is not run; its result says so. Fragments are
            ordered by ``(relevance_score DESC, node ASC)``, limited to
            ``max_fragments``, and an answer over its budget is trimmed
            (greedily, in that order) with an error saying so.

        Raises
        ------
        StrategyError
            On a repeated strategy name or a negative budget.
        """
        _check_budgets(budgets)
        results: dict[int, ContextStrategyResult] = {}
        pending: list[int] = []
        for index, (strategy, budget) in enumerate(budgets):
            breaker = self.breaker(strategy.name)
            if breaker.allow():
                pending.append(index)
            else:
                results[index] = _circuit_open(strategy, budget, breaker)
        results |= self._run(request, backends, budgets, plan_context, pending)
        return tuple(results[i] for i in range(len(budgets)))

    def _run(
        self,
        request: ContextRequest,
        backends: Backends,
        budgets: Sequence[tuple[ContextStrategy, int]],
        plan_context: Mapping[str, Any] | None,
        pending: list[int],
    ) -> dict[int, ContextStrategyResult]:
        """Run the strategies of ``budgets`` at ``pending``, at most ``max_workers`` at once."""
        results: dict[int, ContextStrategyResult] = {}
        running: dict[Future[tuple[Any, float]], tuple[int, float]] = {}
        queue = list(reversed(pending))
        while queue or running:
            while queue and len(running) < self.max_workers:
                index = queue.pop()
                strategy, budget = budgets[index]
                timeout = self.settings_for(strategy.name).timeout_seconds
                future = _run_in_daemon(
                    strategy.name,
                    _bind(strategy, request, backends, budget, plan_context),
                )
                running[future] = (index, time.monotonic() + timeout)
            next_deadline = min(deadline for _, deadline in running.values())
            done, _ = wait(
                list(running),
                timeout=max(0.0, next_deadline - time.monotonic()),
                return_when=FIRST_COMPLETED,
            )
            now = time.monotonic()
            for future in list(running):
                index, deadline = running[future]
                strategy, budget = budgets[index]
                if future in done:
                    del running[future]
                    results[index] = self._finish(strategy, budget, future)
                elif now >= deadline:
                    del running[future]
                    results[index] = self._timed_out(strategy, budget)
        return results

    def _timed_out(self, strategy: ContextStrategy, budget: int) -> ContextStrategyResult:
        timeout = self.settings_for(strategy.name).timeout_seconds
        self.breaker(strategy.name).record_failure()
        return ContextStrategyResult(
            strategy_name=strategy.name,
            execution_time_ms=float(timeout) * 1000.0,
            errors=(
                f"timeout: {strategy.name!r} did not finish within {timeout} s; "
                "its call was abandoned",
            ),
            stats={"budget": budget, "timed_out": True},
        )

    def _finish(
        self,
        strategy: ContextStrategy,
        budget: int,
        future: Future[tuple[Any, float]],
    ) -> ContextStrategyResult:
        name = strategy.name
        breaker = self.breaker(name)
        error = future.exception()
        if error is not None:
            breaker.record_failure()
            return ContextStrategyResult(
                strategy_name=name,
                errors=(f"error: {name!r} raised {type(error).__name__}: {error}",),
                stats={"budget": budget},
            )
        value, seconds = future.result()
        elapsed_ms = seconds * 1000.0
        if not isinstance(value, list | tuple) or not all(
            isinstance(f, ContextFragment) for f in value
        ):
            breaker.record_failure()
            return ContextStrategyResult(
                strategy_name=name,
                execution_time_ms=elapsed_ms,
                errors=(
                    f"error: {name!r} returned {type(value).__name__}, "
                    "not a list of ContextFragment",
                ),
                stats={"budget": budget},
            )
        breaker.record_success()
        return _limited(name, value, budget, self.settings_for(name), elapsed_ms)


def _check_budgets(budgets: Sequence[tuple[ContextStrategy, int]]) -> None:
    """Raise :class:`StrategyError` on a repeated strategy name or a bad budget."""
    names = [strategy.name for strategy, _ in budgets]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise StrategyError(f"strategies {repeated} are given more than once")
    for strategy, budget in budgets:
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < 0:
            raise StrategyError(
                f"budget of {strategy.name!r} must be a non-negative int (tokens), got {budget!r}"
            )


def _circuit_open(
    strategy: ContextStrategy, budget: int, breaker: CircuitBreaker
) -> ContextStrategyResult:
    """The result of a strategy not run because its circuit is open."""
    return ContextStrategyResult(
        strategy_name=strategy.name,
        errors=(
            f"circuit open: {strategy.name!r} skipped without running after "
            f"{breaker.failures} consecutive failures (threshold "
            f"{breaker.threshold})",
        ),
        stats={"budget": budget, "skipped": True, "circuit": "open"},
    )


def _bind(
    strategy: ContextStrategy,
    request: ContextRequest,
    backends: Backends,
    budget: int,
    plan_context: Mapping[str, Any] | None,
) -> Callable[[], Any]:
    def call() -> Any:
        return strategy.assemble(request, backends, budget, plan_context)

    return call


def _limited(
    name: str,
    returned: Sequence[ContextFragment],
    budget: int,
    settings: StrategySettings,
    elapsed_ms: float,
) -> ContextStrategyResult:
    """Deduplicate, order, trim to the budget and to ``max_fragments``."""
    errors: list[str] = []
    best: dict[str, ContextFragment] = {}
    for fragment in sort_fragments(returned):
        best.setdefault(fragment.node, fragment)
    ordered = sort_fragments(best.values())
    total = len(ordered)
    returned_tokens = sum(f.tokens for f in ordered)
    kept: list[ContextFragment] = []
    if returned_tokens > budget:
        room = budget
        for fragment in ordered:
            if fragment.tokens <= room:
                kept.append(fragment)
                room -= fragment.tokens
        errors.append(
            f"over budget: {name!r} returned {returned_tokens} tokens for a budget of "
            f"{budget}; trimmed to {sum(f.tokens for f in kept)}"
        )
    else:
        kept = list(ordered)
    kept = kept[: settings.max_fragments]
    return ContextStrategyResult(
        strategy_name=name,
        fragments=tuple(kept),
        total_fragments=total,
        tokens_used=sum(f.tokens for f in kept),
        execution_time_ms=elapsed_ms,
        errors=tuple(errors),
        stats={
            "budget": budget,
            "returned": len(returned),
            "duplicates": len(returned) - total,
            "backends": dict(sorted(Counter(f.backend for f in kept).items())),
        },
    )
