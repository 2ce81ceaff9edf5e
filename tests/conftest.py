"""Test-run rules: no skip under ``COGNOXIUM_NO_SKIPS=1``; the reach of each property.

``.ci/run`` sets ``COGNOXIUM_NO_SKIPS=1``: a test that would skip (its real
data file missing, an optional extra not installed) fails instead, so a CI
run cannot pass without the tests that need them. ``pytest -v`` prints, for
each property decorated with :func:`tests.reach.reaching`, how many of its
valid examples reached its check.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

from tests.data import NO_SKIPS
from tests.reach import SHARES

_NO_SKIP = "COGNOXIUM_NO_SKIPS=1 allows no skip"


def _skip_reason(report: pytest.CollectReport | pytest.TestReport) -> str:
    longrepr: Any = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])
    return str(longrepr)


def _fail_skip(report: pytest.CollectReport | pytest.TestReport) -> None:
    if NO_SKIPS and report.skipped and not hasattr(report, "wasxfail"):
        reason = _skip_reason(report)
        report.outcome = "failed"
        report.longrepr = f"{_NO_SKIP}: {report.nodeid} would skip ({reason})"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    _fail_skip(report)
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(
    collector: pytest.Collector,
) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
    report = yield
    _fail_skip(report)
    return report


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    if not SHARES or config.option.verbose < 1:
        return
    terminalreporter.section("examples that reached each property's check")
    for name, tally in sorted(SHARES.items()):
        labels = ", ".join(f"{k} {v}" for k, v in sorted(tally.labels.items()))
        terminalreporter.write_line(f"{name}: {tally.describe()}; {labels}")
