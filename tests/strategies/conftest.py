"""Fixtures of the strategy tests: the conversation frame, its backends, a release event."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from cognoxium import CognitionFrame
from cognoxium.strategies import (
    Backends,
)
from tests.strategies.helpers import AS_OF, conversation_records, embedding_cache


@pytest.fixture(scope="module")
def items() -> CognitionFrame:
    return CognitionFrame(conversation_records())


@pytest.fixture(scope="module")
def backends(items: CognitionFrame) -> Backends:
    return Backends.from_frame(
        items, vector="local_hash", embedding_cache=embedding_cache(), as_of=AS_OF
    )


@pytest.fixture
def release() -> Iterator[threading.Event]:
    """An event hung strategies wait on; set at teardown so their threads end."""
    event = threading.Event()
    yield event
    event.set()
