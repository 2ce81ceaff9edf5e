"""Fixtures of the app tests: one local Ray for the session, when Ray is installed."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def ray_local() -> Iterator[Any]:
    """A local Ray of 2 CPUs on the loopback address, stopped after the session."""
    ray = pytest.importorskip("ray", reason="needs the ray extra: pip install -e '.[ray]'")
    pytest.importorskip("ray.data", reason="needs the ray extra")
    # A short path: Ray's socket names must fit in 107 bytes.
    temp = tempfile.mkdtemp(prefix="ray-")
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        _node_ip_address="127.0.0.1",
        _temp_dir=temp,
    )
    try:
        yield ray
    finally:
        ray.shutdown()
        shutil.rmtree(temp, ignore_errors=True)
