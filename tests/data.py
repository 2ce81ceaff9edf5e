"""Where the tests find real data, and whether a missing input may skip a test.

The LoCoMo tests read ``COGNOXIUM_LOCOMO``, by default
``../shared/data/locomo/locomo7.json`` next to the checkout. Without the file
they skip, unless ``COGNOXIUM_NO_SKIPS=1`` (set by ``.ci/run``): then every
skip, of a missing data file or of a missing optional extra, fails the run
(``tests/conftest.py``).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

__all__ = ["LOCOMO", "NO_SKIPS", "REPO", "needs_locomo"]

REPO = Path(__file__).resolve().parents[1]
"""The checkout's root directory."""

LOCOMO = Path(
    os.environ.get(
        "COGNOXIUM_LOCOMO", str(REPO / ".." / "shared" / "data" / "locomo" / "locomo7.json")
    )
)
"""The LoCoMo file (locomo7.json) of the real-data tests."""

NO_SKIPS = os.environ.get("COGNOXIUM_NO_SKIPS", "") == "1"
"""Whether a skipped test fails the run (``COGNOXIUM_NO_SKIPS=1``, as in CI)."""

needs_locomo = pytest.mark.skipif(
    not LOCOMO.is_file(),
    reason=f"LoCoMo data not found at {LOCOMO} (set COGNOXIUM_LOCOMO to the locomo7.json file)",
)
"""Skips a test without the LoCoMo file (a failure under ``COGNOXIUM_NO_SKIPS=1``)."""
