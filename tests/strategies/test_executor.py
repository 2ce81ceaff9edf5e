"""The parallel executor: ordering, limits, budgets, errors, timeouts and the circuit breaker."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading

from cognoxium.strategies import (
    Backends,
    CircuitBreaker,
    ContextRequest,
    StrategyExecutor,
    StrategySettings,
)
from tests.strategies.helpers import FakeStrategy, make_fragment

REQUEST = ContextRequest(query="anything")


def test_fragments_are_ordered_by_relevance_desc_then_node(backends: Backends) -> None:
    fragments = [
        make_fragment("b", 0.5),
        make_fragment("c", 0.9),
        make_fragment("a", 0.5),
        make_fragment("d", 1),
    ]
    (result,) = StrategyExecutor().execute(
        REQUEST, backends, [(FakeStrategy(fragments=fragments), 100)]
    )
    assert [f.node for f in result.fragments] == ["d", "c", "a", "b"]
    assert result.errors == ()
    assert result.tokens_used == 20
    assert result.execution_time_ms >= 0


def test_max_fragments_limits_and_total_counts_before_limits(backends: Backends) -> None:
    fragments = [make_fragment(f"n{i:02d}", 1 - i / 100, tokens=1) for i in range(30)]
    executor = StrategyExecutor(settings={"fake": StrategySettings(max_fragments=4)})
    (result,) = executor.execute(REQUEST, backends, [(FakeStrategy(fragments=fragments), 100)])
    assert [f.node for f in result.fragments] == ["n00", "n01", "n02", "n03"]
    assert result.total_fragments == 30
    assert result.tokens_used == 4


def test_an_answer_over_budget_is_trimmed_with_an_error(backends: Backends) -> None:
    fragments = [make_fragment("a", 0.9, tokens=8), make_fragment("b", 0.8, tokens=8),
                 make_fragment("c", 0.7, tokens=2)]  # fmt: skip
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
        (FakeStrategy("one", barrier=barrier, fragments=[make_fragment("a", 1.0)]), 10),
        (FakeStrategy("two", barrier=barrier, fragments=[make_fragment("b", 1.0)]), 10),
    ]
    results = StrategyExecutor().execute(REQUEST, backends, pair)
    assert [r.errors for r in results] == [(), ()]
    assert [r.strategy_name for r in results] == ["one", "two"]


class Overlap:
    """Strategy calls that record when they start and end; the first waits for a second."""

    def __init__(self) -> None:
        self.log: list[str] = []
        self.second_started = threading.Event()
        self._lock = threading.Lock()

    def strategy(self, name: str) -> FakeStrategy:
        overlap = self

        class Logged(FakeStrategy):
            def assemble(self, *args: object, **kwargs: object) -> list:  # type: ignore[override]
                with overlap._lock:
                    overlap.log.append(f"{name} start")
                    first = len(overlap.log) == 1
                if first:
                    # A second call running at once sets the event at its start; run
                    # alone, this waits its full (generous) bound and ends.
                    overlap.second_started.wait(timeout=1.0)
                else:
                    overlap.second_started.set()
                with overlap._lock:
                    overlap.log.append(f"{name} end")
                return []

        return Logged(name)


def test_max_workers_bounds_concurrency(backends: Backends) -> None:
    overlap = Overlap()
    pair = [(overlap.strategy("one"), 10), (overlap.strategy("two"), 10)]
    executor = StrategyExecutor(defaults=StrategySettings(max_workers=1))
    results = executor.execute(REQUEST, backends, pair)
    assert [r.errors for r in results] == [(), ()]
    # One worker: the second call starts only after the first ended.
    assert overlap.log == ["one start", "one end", "two start", "two end"]


def test_two_workers_run_two_calls_at_once(backends: Backends) -> None:
    # The same strategies with two workers overlap: the check above can fail.
    overlap = Overlap()
    pair = [(overlap.strategy("one"), 10), (overlap.strategy("two"), 10)]
    executor = StrategyExecutor(defaults=StrategySettings(max_workers=2))
    executor.execute(REQUEST, backends, pair)
    assert sorted(overlap.log[:2]) == ["one start", "two start"]


def test_a_hung_strategy_times_out(backends: Backends, release: threading.Event) -> None:
    hung = FakeStrategy("hung", release=release)
    quick = FakeStrategy("quick", fragments=[make_fragment("a", 1.0)])
    # Only the hung strategy has the short timeout: it never returns, so it times out
    # whatever the machine's load; the quick one keeps the default 30 s.
    executor = StrategyExecutor(settings={"hung": StrategySettings(timeout_seconds=0.2)})
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
