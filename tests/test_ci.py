"""CI runs the README's test command, and there a missing data file or extra fails, never skips."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.data import REPO

CI_RUN = REPO / ".ci" / "run"


def _readme_test_command() -> str:
    """The README's test command: the ``make`` line of its quick start that runs the tests."""
    blocks = re.findall(r"```console\n(.*?)```", (REPO / "README.md").read_text(), flags=re.S)
    commands = [
        line.split("#")[0].strip()
        for block in blocks
        for line in block.splitlines()
        if line.startswith("make ") and "all tests" in line
    ]
    assert len(commands) == 1, commands
    return commands[0]


def test_ci_runs_the_readmes_test_command_with_no_skips() -> None:
    lines = [
        line.strip()
        for line in CI_RUN.read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    assert _readme_test_command() == "make test"
    assert lines[-1] == "make test"
    assert "export COGNOXIUM_NO_SKIPS=1" in lines[:-1]
    assert os.access(CI_RUN, os.X_OK)


def _pytest(args: list[str], *, no_skips: bool, **env: str) -> subprocess.CompletedProcess[str]:
    # The run's own pytest options (PYTEST_ADDOPTS may name test files) stay out.
    environ = {
        k: v for k, v in os.environ.items() if k not in {"COGNOXIUM_NO_SKIPS", "PYTEST_ADDOPTS"}
    }
    environ.update(env)
    if no_skips:
        environ["COGNOXIUM_NO_SKIPS"] = "1"
    return subprocess.run(
        [sys.executable, *args, "-p", "no:cacheprovider", "-q", "--no-header"],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO,
        env=environ,
    )


def test_a_missing_locomo_file_fails_under_no_skips_and_skips_otherwise(tmp_path: Path) -> None:
    test = "tests/app/test_locomo.py::test_locomo_end_to_end"
    nowhere = str(tmp_path / "missing" / "locomo7.json")
    failed = _pytest(["-m", "pytest", test], no_skips=True, COGNOXIUM_LOCOMO=nowhere)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "1 error" in failed.stdout  # failed in its set-up, where skipif runs
    assert f"COGNOXIUM_NO_SKIPS=1 allows no skip: {test} would skip" in failed.stdout
    assert f"LoCoMo data not found at {nowhere}" in failed.stdout
    skipped = _pytest(["-m", "pytest", test], no_skips=False, COGNOXIUM_LOCOMO=nowhere)
    assert skipped.returncode == 0, skipped.stdout + skipped.stderr
    assert "1 skipped" in skipped.stdout


def test_a_missing_extra_fails_under_no_skips() -> None:
    # The notebooks' module skips without nbformat (the docs extra): here it cannot import.
    code = (
        "import sys; sys.modules['nbformat'] = None; import pytest; "
        "sys.exit(pytest.main(sys.argv[1:]))"
    )
    args = ["-c", code, "tests/test_notebooks.py", "-o", "addopts=-ra"]
    failed = _pytest(args, no_skips=True)
    assert failed.returncode != 0, failed.stdout + failed.stderr
    assert "COGNOXIUM_NO_SKIPS=1 allows no skip: tests/test_notebooks.py would skip" in (
        failed.stdout
    )
    assert "needs the docs extra" in failed.stdout
    skipped = _pytest(args, no_skips=False)
    # The whole module skips: no test is collected, which is not a failure.
    assert skipped.returncode == pytest.ExitCode.NO_TESTS_COLLECTED, skipped.stdout
    assert "1 skipped" in skipped.stdout
