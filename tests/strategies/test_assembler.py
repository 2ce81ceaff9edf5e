"""The context assembler end to end.

Validation, the hang case, the fallback path, and the hand-over of fragments to the engine.
"""

from __future__ import annotations

import threading

import pytest

from cognoxium import CognitionFrame
from cognoxium.exceptions import StrategyError
from cognoxium.strategies import (
    DEFAULT_ENABLED,
    FALLBACK_ORDER,
    RESOURCE_TYPES,
    Backends,
    ContextAssembler,
    ContextRequest,
    StrategyCapabilities,
    StrategyConfig,
    StrategyRegistry,
    StrategySettings,
    fallback_chain,
    fragments_to_frame,
)
from tests.strategies.helpers import (
    AS_OF,
    T0,
    FakeStrategy,
    conversation_records,
    embedding_cache,
    make_fragment,
)


def test_assembler_validates_its_registry() -> None:
    config = StrategyConfig(enabled=("simple-keyword", "ghost"))
    with pytest.raises(StrategyError, match="rule 1"):
        ContextAssembler(config=config)


def test_hung_strategy_times_out_breaker_opens_and_fallback_still_gives_context(
    items: CognitionFrame, release: threading.Event
) -> None:
    hung = FakeStrategy(
        "hung",
        capabilities=StrategyCapabilities(
            uses_text=True, resource_types=RESOURCE_TYPES, quality_score=0.9
        ),
        release=release,
    )
    registry = StrategyRegistry.builtin()
    registry.register(hung)
    config = StrategyConfig(
        enabled=("hung",),
        overrides={"hung": StrategySettings(timeout_seconds=0.2, circuit_breaker_threshold=2)},
    )
    assembler = ContextAssembler(registry, config)
    text_only = Backends.from_frame(items, vector=False, graph=False, temporal=False)
    request = ContextRequest(query="Where did the sister move?")

    for attempt in (1, 2):
        result = assembler.assemble(request, text_only, 200)
        assert hung.calls == attempt
        assert result.fallback == "simple-keyword"
        assert result.fragments
        assert result.fragments[0].node == "c1:D2:6"
        assert result.errors == (
            "timeout: 'hung' did not finish within 0.2 s; its call was abandoned",
        )
        assert [r.strategy_name for r in result.results] == ["hung", "simple-keyword"]
        assert result.results[1].stats["fallback"] is True

    assert assembler.executor.breaker("hung").state == "open"
    result = assembler.assemble(request, text_only, 200)
    assert hung.calls == 2  # skipped without running
    assert result.fallback == "simple-keyword"
    assert result.tokens_used <= 200
    assert result.fragments[0].node == "c1:D2:6"
    assert result.errors == (
        "circuit open: 'hung' skipped without running after 2 consecutive failures (threshold 2)",
    )
    assert result.to_frame().pack(200, as_of=AS_OF).manifest.totals.included > 0


@pytest.mark.parametrize(
    ("missing", "expected"),
    [
        ((), "arce"),
        (("text",), "breadth-depth-navigator"),
        (("graph",), "semantic-embedding"),
        (("graph", "vector"), "simple-keyword"),
        (("text", "vector"), "breadth-depth-navigator"),
    ],
)
def test_fallback_degrades_along_the_spec_order(
    backends: Backends, missing: tuple[str, ...], expected: str
) -> None:
    reduced = backends.without(*missing)
    chain = [s.name for s in fallback_chain(StrategyRegistry.builtin(), reduced)]
    assert chain[0] == expected
    assert chain == [n for n in FALLBACK_ORDER if n in chain]
    # A registry whose only enabled strategy cannot run still produces context.
    config = StrategyConfig(enabled=("plan-decision-context",))
    request = ContextRequest(query="Biscuit puppy", focus_nodes=("c1:D1:0",))
    result = ContextAssembler(config=config).assemble(request, reduced.without("temporal"), 300)
    assert result.fallback == expected
    assert result.fragments
    assert result.skipped == (("plan-decision-context", "missing backends: temporal"),)


def test_no_fallback_when_the_selected_strategies_produce_context(backends: Backends) -> None:
    result = ContextAssembler().assemble(ContextRequest(query="marathon"), backends, 300)
    assert result.fallback is None
    assert set(result.allocations) == set(DEFAULT_ENABLED)
    assert sum(result.allocations.values()) == 300
    assert result.tokens_used <= 300
    assert len({f.node for f in result.fragments}) == len(result.fragments)


def test_fragments_flow_into_dedupe_redact_and_pack(items: CognitionFrame) -> None:
    extra = CognitionFrame(
        [
            *conversation_records(),
            {"id": "copy", "role": "user", "created_at": T0.isoformat(),
             "text": "Ann: I adopted a puppy named Biscuit last week."},
            {"id": "mail", "role": "user", "text": "Biscuit's vet is vet@example.com",
             "created_at": T0.isoformat()},
        ]
    )  # fmt: skip
    backends = Backends.from_frame(extra, vector="local_hash", embedding_cache=embedding_cache())
    result = ContextAssembler().assemble(ContextRequest(query="Biscuit"), backends, 400)
    frame = result.to_frame()
    collected = frame.collect()
    assert "strategy" in collected.columns
    relevance = {f.node: f.relevance_score for f in result.fragments}
    assert dict(collected.select("id", "rank").iter_rows()) == relevance
    # original (input) order is kept
    order = [r["id"] for r in extra.collect().select("id").to_dicts()]
    ids = collected.get_column("id").to_list()
    assert ids == [i for i in order if i in set(ids)]
    assert {"c1:D1:0", "copy", "mail"} <= set(ids)
    processed = frame.dedupe().redact()
    pack = processed.pack(400, as_of=AS_OF)
    packed = [e.id for e in pack.manifest.entries if e.decision == "included"]
    assert "mail" in packed
    assert not ("copy" in packed and "c1:D1:0" in packed)  # one of the duplicates
    assert all("vet@example.com" not in m["content"] for m in pack.messages)
    assert pack.manifest.totals.included == len(packed) > 0


def test_fragments_to_frame_rejects_unknown_nodes(items: CognitionFrame) -> None:
    with pytest.raises(StrategyError, match=r"\['ghost'\]"):
        fragments_to_frame(items, [make_fragment("ghost", 1.0)])
