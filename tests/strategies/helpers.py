"""Shared helpers of the strategy tests: a conversation with a plan hierarchy, a fake strategy."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from cognoxium.retrieval.embeddings import EmbeddingCache
from cognoxium.strategies import (
    RESOURCE_TYPES,
    Backends,
    ContextFragment,
    ContextRequest,
    StrategyCapabilities,
)

T0 = datetime(2024, 6, 1, tzinfo=UTC)
AS_OF = datetime(2024, 6, 30, tzinfo=UTC)


def embedding_cache() -> EmbeddingCache:
    return EmbeddingCache(persist=False)


def conversation_records() -> list[dict[str, Any]]:
    """Two sessions of one conversation, with speakers; plus a plan hierarchy with decisions."""
    turns = [
        (1, "Ann", "I adopted a puppy named Biscuit last week."),
        (1, "Bo", "Congratulations! What breed is Biscuit?"),
        (1, "Ann", "A golden retriever, very playful."),
        (1, "Bo", "I am training for the Lisbon marathon."),
        (2, "Ann", "Biscuit chewed my running shoes yesterday."),
        (2, "Bo", "The marathon is in October, I run every morning."),
        (2, "Ann", "My sister moved to Toronto for a new job."),
        (2, "Bo", "Toronto winters are cold, she will need a warm coat."),
    ]
    records: list[dict[str, Any]] = []
    for position, (session, speaker, text) in enumerate(turns):
        start = T0 if session == 1 else T0 + timedelta(days=20)
        records.append(
            {
                "id": f"c1:D{session}:{position}",
                "role": "user" if speaker == "Ann" else "assistant",
                "text": f"{speaker}: {text}",
                "created_at": (start + timedelta(minutes=position)).isoformat(),
                "metadata": {
                    "conversation": "c1",
                    "session": session,
                    "speaker": speaker,
                    "kind": "turn",
                },
            }
        )
    old = T0.isoformat()
    records += [
        {"id": "goal", "role": "memory", "text": "Goal: launch the product in Q3.",
         "created_at": old, "metadata": {"kind": "plan"}},
        {"id": "plan", "role": "memory", "text": "Plan: beta in July, launch in September.",
         "created_at": old, "metadata": {"kind": "plan", "parent_id": "goal"}},
        {"id": "step", "role": "memory", "text": "Step: recruit fifty beta testers.",
         "created_at": old, "parents": ["plan"], "metadata": {"kind": "plan"}},
        {"id": "d-goal", "role": "memory", "text": "Decision: target enterprise users first.",
         "created_at": old, "metadata": {"kind": "decision", "parent_id": "goal"}},
        {"id": "d-plan", "role": "memory", "text": "Decision: skip the public alpha.",
         "created_at": old, "metadata": {"kind": "decision", "parent_ids": ["plan"]}},
        {"id": "d-hot", "role": "memory", "text": "Decision: hire a tester today.",
         "created_at": AS_OF.isoformat(), "metadata": {"kind": "decision", "parent_id": "plan"}},
        {"id": "d-other", "role": "memory", "text": "Decision: repaint the office.",
         "created_at": old, "metadata": {"kind": "decision"}},
    ]  # fmt: skip
    return records


def make_fragment(node: str, score: float, tokens: int = 5, strategy: str = "x") -> ContextFragment:
    return ContextFragment(
        node=node, text=node, relevance_score=score, tokens=tokens, strategy=strategy,
        backend="text",
    )  # fmt: skip


class FakeStrategy:
    """A configurable strategy for selector, executor and registry tests."""

    def __init__(
        self,
        name: str = "fake",
        *,
        capabilities: StrategyCapabilities | None = None,
        confidence: float = 1.0,
        fragments: list[ContextFragment] | None = None,
        error: Exception | None = None,
        barrier: threading.Barrier | None = None,
        release: threading.Event | None = None,
    ) -> None:
        self._name = name
        self._capabilities = capabilities or StrategyCapabilities(
            uses_text=True, resource_types=RESOURCE_TYPES, quality_score=0.5
        )
        self.confidence = confidence
        self.fragments = fragments or []
        self.error = error
        self.barrier = barrier
        self.release = release
        self.polls = 0
        self.calls = 0

    @property
    def name(self) -> str:
        return self._name

    @property
    def capabilities(self) -> StrategyCapabilities:
        return self._capabilities

    def can_handle(self, request: ContextRequest, backends: Backends) -> float:
        self.polls += 1
        return self.confidence

    def assemble(
        self,
        request: ContextRequest,
        backends: Backends,
        budget: int,
        plan_context: Mapping[str, Any] | None,
    ) -> list[ContextFragment]:
        self.calls += 1
        if self.barrier is not None:
            self.barrier.wait()
        if self.release is not None:
            self.release.wait()
        if self.error is not None:
            raise self.error
        return list(self.fragments)

    def explain(self) -> str:
        return f"{self._name}: a test strategy"


def node_ids(fragments: list[ContextFragment]) -> list[str]:
    return [f.node for f in fragments]
