"""Continuity: Strategy contracts, EngineContext, DefaultStrategy, Container, engine."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any, ClassVar

import jsonschema
import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cognoxium import CognitionFrame, CognoxiumError
from cognoxium.continuity import (
    CONFIG_FILE,
    AdmitInput,
    AdmitOutput,
    Answer,
    ConfigError,
    Container,
    ContinuityEngine,
    Contract,
    ContractError,
    DefaultStrategy,
    Embedder,
    EngineContext,
    FlatQuery,
    FlatStructure,
    Group,
    Hit,
    InMemoryBackend,
    MemoryBackend,
    Note,
    Query,
    RetrieveInput,
    RetrieveOutput,
    Strategy,
    Structure,
    StructureOutput,
    StructureQuery,
    UnknownNoteError,
    hits_to_frame,
)
from cognoxium.retrieval.embeddings import LocalHashEmbedder
from tests.reach import reached, reaching

SEED_NOTES = [
    Note(id="n1", text="october product launch", timestamp=1.0),
    Note(id="n2", text="october launch plan", timestamp=2.0),
    Note(id="n3", text="apple pie recipe", timestamp=3.0),
]


def _engine(notes: list[Note] | None = None, **pieces: Any) -> ContinuityEngine:
    engine = ContinuityEngine(container=Container(search_cwd=False, **pieces))
    engine.ingest_many(SEED_NOTES if notes is None else notes)
    return engine


# -- test structures ------------------------------------------------------------


class FixedStructure(Structure):
    """Returns a given output and records the query it was given."""

    kind: ClassVar[str] = "fixed"

    def __init__(self, output: StructureOutput) -> None:
        self.output = output
        self.seen: list[StructureQuery] = []

    def search(self, query: StructureQuery, memory: MemoryBackend) -> StructureOutput:
        self.seen.append(query)
        return self.output


class GroupingStructure(FixedStructure):
    """A second class name for raw keys."""


class FailingStructure(Structure):
    def search(self, query: StructureQuery, memory: MemoryBackend) -> StructureOutput:
        raise RuntimeError("index unavailable")


class WrongOutputStructure(Structure):
    def search(self, query: StructureQuery, memory: MemoryBackend) -> StructureOutput:
        return {"hits": []}  # type: ignore[return-value]


class KOnlyQuery(StructureQuery):
    k: int = 1
    note: str = "declared by the structure"


class KOnlyStructure(FixedStructure):
    query_input: ClassVar[type[StructureQuery]] = KOnlyQuery


class NeedsLabelQuery(StructureQuery):
    label: str


class NeedsLabelStructure(FixedStructure):
    query_input: ClassVar[type[StructureQuery]] = NeedsLabelQuery


def _hit(note_id: str, score: float) -> Hit:
    return Hit(id=note_id, score=score, text=f"text of {note_id}", timestamp=1.0)


def _context(structures: list[Structure], notes: list[Note] | None = None) -> EngineContext:
    embedder = LocalHashEmbedder()
    memory = InMemoryBackend()
    for note in notes or []:
        memory.put(note, embedder.vector(note.text))
    return EngineContext(embedder=embedder, memory=memory, structures=structures)


def _retrieve(ctx: EngineContext, text: str | None = "october launch", **query: Any) -> Any:
    q = Query(text=text, **query)
    vector = ctx.embedder.vector(text) if q.has_text and text is not None else None
    return DefaultStrategy().retrieve(RetrieveInput(query=q, query_vector=vector, context=ctx))


# -- the worked example -----------------------------------------------------------


def test_worked_example_gives_tied_hits_by_id_and_raw_key() -> None:
    c = Container(search_cwd=False)
    ContinuityEngine(container=c).ingest_many(SEED_NOTES)
    embedder, memory = c.get(Embedder), c.get(MemoryBackend)  # type: ignore[type-abstract]
    structures = c.get_all(Structure)  # type: ignore[type-abstract]

    ctx = EngineContext(embedder=embedder, memory=memory, structures=structures)
    q = Query(text="october launch", k=2)
    out = c.get(Strategy).retrieve(  # type: ignore[type-abstract]
        RetrieveInput(query=q, query_vector=embedder.vector(q.text or ""), context=ctx)
    )
    assert [(h.id, round(h.score, 3)) for h in out.hits] == [("n1", 0.816), ("n2", 0.816)]
    assert list(out.raw) == ["0:FlatStructure"]
    assert out.hits[0].score == out.hits[1].score


def test_ties_are_ordered_by_id_whatever_the_insertion_order() -> None:
    notes = [Note(id=f"t{i:02d}", text="same words here", timestamp=float(i)) for i in range(30)]
    shuffled = notes[:]
    random.Random(7).shuffle(shuffled)
    hits = _engine(shuffled).ask(Query(text="same words", k=5)).hits
    assert [h.id for h in hits] == ["t00", "t01", "t02", "t03", "t04"]
    assert len({h.score for h in hits}) == 1


# -- contracts: serialisation ------------------------------------------------------

_ids = st.sampled_from(["n1", "n2", "n3", "a", "é", "x y"])
_text = st.text(st.characters(exclude_categories=("Cs",)), max_size=20)
_times = st.floats(min_value=-1e10, max_value=1e11, allow_nan=False)
_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | _text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=6,
)
_metadata = st.dictionaries(_text, _json, max_size=3)
_vectors = st.lists(
    st.floats(width=32, allow_nan=False, allow_infinity=False), min_size=1, max_size=8
)
_scores = st.floats(min_value=-1, max_value=1, allow_nan=False)

notes_st = st.builds(Note, id=_ids, text=_text, timestamp=_times, metadata=_metadata)
queries_st = st.builds(
    Query,
    text=st.none() | _text,
    k=st.integers(1, 50),
    near=st.none() | _ids,
    time_range=st.none() | st.lists(_times, min_size=2, max_size=2).map(sorted).map(tuple),
)
hits_st = st.builds(Hit, id=_ids, score=_scores, text=_text, timestamp=_times, metadata=_metadata)
groups_st = st.builds(
    Group,
    label=_text,
    ids=st.lists(_ids, max_size=3).map(tuple),
    score=st.none() | _scores,
)
hit_lists = st.lists(hits_st, max_size=4, unique_by=lambda h: h.id)
structure_outputs = st.builds(
    StructureOutput, hits=hit_lists, groups=st.lists(groups_st, max_size=2)
)


@st.composite
def retrieve_inputs(draw: st.DrawFn) -> RetrieveInput:
    query = draw(queries_st)
    vector = draw(_vectors) if query.has_text and draw(st.booleans()) else None
    return RetrieveInput(query=query, query_vector=vector)


contracts = st.one_of(
    notes_st,
    queries_st,
    hits_st,
    groups_st,
    structure_outputs,
    st.builds(AdmitInput, note=notes_st, vector=_vectors),
    st.builds(AdmitOutput, admit=st.booleans()),
    retrieve_inputs(),
    st.builds(
        RetrieveOutput,
        hits=hit_lists,
        groups=st.lists(groups_st, max_size=2),
        raw=st.dictionaries(st.sampled_from(["0:FlatStructure", "1:X"]), structure_outputs),
    ),
    st.builds(Answer, query=queries_st, hits=hit_lists, groups=st.lists(groups_st, max_size=2)),
    st.builds(
        FlatQuery,
        vector=st.none() | _vectors,
        k=st.integers(1, 9),
        anchor_id=st.none() | _ids,
    ),
)


@settings(max_examples=300, deadline=None)
@given(contracts)
def test_contracts_round_trip_through_dict_and_json(contract: Contract) -> None:
    cls = type(contract)
    text = contract.to_json()
    assert cls.from_json(text) == contract
    assert cls.from_dict(contract.to_dict()) == contract
    assert json.loads(text) == contract.to_dict()
    assert cls.from_json(text).to_json() == text
    jsonschema.validate(contract.to_dict(), cls.json_schema())


@settings(max_examples=100, deadline=None)  # no per-example time limit on a loaded machine
@given(st.builds(AdmitInput, note=notes_st, vector=_vectors))
def test_vectors_survive_json_exactly_as_float32(inp: AdmitInput) -> None:
    back = AdmitInput.from_json(inp.to_json())
    assert back.vector.dtype == np.float32
    assert np.array_equal(back.vector, inp.vector)


def test_to_json_is_canonical() -> None:
    note = Note(id="n1", text="é", timestamp=1, metadata={"b": 1, "a": [2]})
    assert note.to_json() == '{"id":"n1","metadata":{"a":[2],"b":1},"text":"é","timestamp":1.0}'


def test_context_is_excluded_from_dict_json_and_schema() -> None:
    ctx = _context([FlatStructure()])
    admit = AdmitInput(note=SEED_NOTES[0], vector=[0.5, 0.5], context=ctx)
    retrieve = RetrieveInput(query=Query(text="x"), query_vector=[1.0], context=ctx)
    for contract in (admit, retrieve):
        assert "context" not in contract.to_dict()
        assert "context" not in json.loads(contract.to_json())
        schema = type(contract).json_schema()
        assert "context" not in schema["properties"]
        assert "context" not in json.dumps(schema)
        rebuilt = type(contract).from_json(contract.to_json())
        assert rebuilt.context is None
        assert contract.context is ctx


def test_from_dict_refuses_a_context_key() -> None:
    data = {"query": {"text": "x"}, "context": {}}
    with pytest.raises(ContractError, match="runtime-only"):
        RetrieveInput.from_dict(data)


def test_context_accepts_only_an_engine_context() -> None:
    inp = RetrieveInput(query=Query(text="x"))
    with pytest.raises(ContractError, match="context"):
        inp.context = {"embedder": LocalHashEmbedder()}  # type: ignore[assignment]


def test_schema_describes_fields_and_vectors() -> None:
    schema = AdmitInput.json_schema()
    assert schema["required"] == ["note", "vector"]
    assert schema["properties"]["vector"] == {
        "items": {"type": "number"},
        "title": "Vector",
        "type": "array",
    }
    assert schema["description"] == "The input of :meth:`Strategy.admit`."
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"note": {"id": "n", "text": "t"}, "vector": []}, schema)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: Note(id="", text="x", timestamp=1), "id"),
        (lambda: Note(id="n", text="x", timestamp=datetime(2024, 1, 1)), "timezone-aware"),
        (lambda: Note(id="n", text="x", timestamp=float("nan")), "finite"),
        (lambda: Note(id="n", text="x", timestamp=1e20), "9999"),
        (lambda: Note(id="n", text="x", timestamp=True), "bool"),
        (lambda: Query(k=0), "k"),
        (lambda: Query(time_range=(5, 1)), "after its end"),
        (lambda: Query(near=""), "near"),
        (lambda: AdmitInput(note=SEED_NOTES[0], vector=[[1.0]]), "one-dimensional"),
        (lambda: AdmitInput(note=SEED_NOTES[0], vector=[float("inf")]), "finite"),
        (lambda: AdmitInput(note=SEED_NOTES[0], vector="abc"), "sequence of numbers"),
        (lambda: RetrieveInput(query=Query(text=" "), query_vector=[1.0]), "no text"),
        (lambda: StructureOutput(hits=[_hit("a", 1), _hit("a", 0.5)]), "distinct"),
        (lambda: Hit(id="a", score=float("nan"), text="", timestamp=0), "score"),
        (lambda: Note.from_json("{"), "not valid JSON"),
        (lambda: Note.from_dict([1]), "mapping"),  # type: ignore[arg-type]
        (lambda: Note.from_dict({"id": "n", "text": "", "timestamp": 0, "x": 1}), "x"),
    ],
)
def test_invalid_contracts_raise_contract_error(build: Any, message: str) -> None:
    with pytest.raises(ContractError, match=message):
        build()


def test_contract_error_is_a_type_and_value_error() -> None:
    assert issubclass(ContractError, CognoxiumError)
    assert issubclass(ContractError, TypeError)
    assert issubclass(ContractError, ValueError)


def test_aware_datetimes_become_utc_seconds() -> None:
    paris = timezone(timedelta(hours=2))
    note = Note(id="n", text="", timestamp=datetime(1970, 1, 1, 2, 0, 5, tzinfo=paris))
    assert note.timestamp == 5.0


def test_values_are_frozen_and_vectors_read_only() -> None:
    with pytest.raises(ContractError, match="frozen"):
        SEED_NOTES[0].text = "changed"  # type: ignore[misc]
    inp = AdmitInput(note=SEED_NOTES[0], vector=np.array([1.0, 2.0]))
    with pytest.raises(ValueError, match="read-only"):
        inp.vector[0] = 5.0


def test_assignment_is_validated() -> None:
    out = RetrieveOutput()
    with pytest.raises(ContractError, match="hits"):
        out.hits = [1]  # type: ignore[list-item]


# -- contracts around a strategy ------------------------------------------------------


class EchoStrategy(Strategy):
    def _retrieve(self, inp: RetrieveInput) -> RetrieveOutput:
        self._context(inp)
        return RetrieveOutput(hits=[_hit("e", 1.0)])


def test_an_input_rebuilt_from_json_needs_an_engine_context() -> None:
    ctx = _context([FlatStructure()], SEED_NOTES)
    inp = RetrieveInput(
        query=Query(text="october"), query_vector=ctx.embedder.vector("october"), context=ctx
    )
    rebuilt = RetrieveInput.from_json(inp.to_json())
    with pytest.raises(ContractError, match="needs an EngineContext"):
        DefaultStrategy().retrieve(rebuilt)
    admit = AdmitInput.from_dict(
        AdmitInput(note=SEED_NOTES[0], vector=[1.0], context=ctx).to_dict()
    )
    with pytest.raises(ContractError, match="needs an EngineContext"):
        DefaultStrategy().admit(admit)
    rebuilt.context = ctx
    assert [h.id for h in DefaultStrategy().retrieve(rebuilt).hits] == ["n1", "n2"]


def test_strategy_rejects_inputs_of_the_wrong_type() -> None:
    ctx = _context([FlatStructure()])
    admit = AdmitInput(note=SEED_NOTES[0], vector=[1.0], context=ctx)
    with pytest.raises(
        ContractError, match=r"EchoStrategy.retrieve takes RetrieveInput, got AdmitInput"
    ):
        EchoStrategy().retrieve(admit)  # type: ignore[arg-type]
    with pytest.raises(ContractError, match="takes AdmitInput, got dict"):
        EchoStrategy().admit({"note": {}})  # type: ignore[arg-type]


class WrongTypeStrategy(Strategy):
    def _admit(self, inp: AdmitInput) -> AdmitOutput:
        return RetrieveOutput()  # type: ignore[return-value]

    def _retrieve(self, inp: RetrieveInput) -> RetrieveOutput:
        return {"hits": []}  # type: ignore[return-value]


class MutatedOutputStrategy(Strategy):
    def _retrieve(self, inp: RetrieveInput) -> RetrieveOutput:
        out = RetrieveOutput()
        out.hits.append("not a hit")  # type: ignore[arg-type]
        return out


def test_strategy_output_contracts_are_checked() -> None:
    ctx = _context([])
    retrieve = RetrieveInput(query=Query(text="x"), context=ctx)
    admit = AdmitInput(note=SEED_NOTES[0], vector=[1.0], context=ctx)
    with pytest.raises(ContractError, match=r"WrongTypeStrategy._retrieve returned dict"):
        WrongTypeStrategy().retrieve(retrieve)
    with pytest.raises(
        ContractError, match=r"_admit returned RetrieveOutput, expected AdmitOutput"
    ):
        WrongTypeStrategy().admit(admit)
    with pytest.raises(ContractError, match="returned an invalid RetrieveOutput"):
        MutatedOutputStrategy().retrieve(retrieve)


def test_context_helper_returns_the_typed_context() -> None:
    ctx = _context([])
    inp = RetrieveInput(query=Query(text="x"), context=ctx)
    assert EchoStrategy()._context(inp) is ctx
    with pytest.raises(ContractError, match="needs an EngineContext"):
        EchoStrategy()._context(RetrieveInput(query=Query(text="x")))


def test_default_admit_admits_everything() -> None:
    ctx = _context([])
    for note in SEED_NOTES:
        out = EchoStrategy().admit(AdmitInput(note=note, vector=[1.0], context=ctx))
        assert out == AdmitOutput(admit=True)


def test_engine_context_checks_its_parts() -> None:
    embedder, memory = LocalHashEmbedder(), InMemoryBackend()
    assert isinstance(EngineContext(embedder, memory, [FlatStructure()]).structures, tuple)
    with pytest.raises(ContractError, match="embedder"):
        EngineContext(object(), memory, [])  # type: ignore[arg-type]
    with pytest.raises(ContractError, match="memory"):
        EngineContext(embedder, {}, [])  # type: ignore[arg-type]
    with pytest.raises(ContractError, match=r"structures\[1\]"):
        EngineContext(embedder, memory, [FlatStructure(), "flat"])  # type: ignore[list-item]


# -- the default strategy -----------------------------------------------------------------


def test_raw_is_keyed_by_index_and_class_name() -> None:
    empty = StructureOutput()
    ctx = _context(
        [FlatStructure(), GroupingStructure(empty), FlatStructure(), FixedStructure(empty)],
        SEED_NOTES,
    )
    out = _retrieve(ctx)
    assert list(out.raw) == [
        "0:FlatStructure",
        "1:GroupingStructure",
        "2:FlatStructure",
        "3:FixedStructure",
    ]
    assert out.raw["1:GroupingStructure"] is empty
    assert [h.id for h in out.raw["2:FlatStructure"].hits] == ["n1", "n2"]


def test_hits_are_the_first_non_empty_hit_list() -> None:
    first = FixedStructure(StructureOutput())
    second = FixedStructure(StructureOutput(hits=[_hit("b", 0.2)]))
    third = FixedStructure(StructureOutput(hits=[_hit("c", 0.9)]))
    out = _retrieve(_context([first, second, third]))
    assert [h.id for h in out.hits] == ["b"]
    out = _retrieve(_context([third, second]))
    assert [h.id for h in out.hits] == ["c"]
    assert _retrieve(_context([first])).hits == []


def test_flat_without_matches_lets_the_next_structure_answer() -> None:
    fallback = FixedStructure(StructureOutput(hits=[_hit("fallback", 0.1)]))
    ctx = _context([FlatStructure(), fallback], SEED_NOTES)
    assert [h.id for h in _retrieve(ctx, "zebra crossing").hits] == ["fallback"]
    assert [h.id for h in _retrieve(ctx, "apple").hits] == ["n3"]


def test_groups_are_collected_from_all_structures_in_order() -> None:
    g1, g2, g3 = (
        Group(label="a", ids=("n1",)),
        Group(label="b", ids=()),
        Group(label="c", ids=("x",)),
    )
    ctx = _context(
        [
            FixedStructure(StructureOutput(groups=[g1, g2])),
            FixedStructure(StructureOutput(hits=[_hit("h", 1.0)])),
            GroupingStructure(StructureOutput(hits=[_hit("i", 1.0)], groups=[g3])),
        ]
    )
    out = _retrieve(ctx)
    assert out.groups == [g1, g2, g3]
    assert [h.id for h in out.hits] == ["h"]


def test_errors_from_a_structure_propagate() -> None:
    ctx = _context([FlatStructure(), FailingStructure()], SEED_NOTES)
    with pytest.raises(RuntimeError, match="index unavailable"):
        _retrieve(ctx)


def test_a_structure_returning_the_wrong_type_breaks_the_contract() -> None:
    ctx = _context([FlatStructure(), WrongOutputStructure()], SEED_NOTES)
    with pytest.raises(ContractError, match="1:WrongOutputStructure returned dict"):
        _retrieve(ctx)


def test_each_structure_gets_its_own_declared_query_input() -> None:
    flat_probe = FixedStructure(StructureOutput())
    k_only = KOnlyStructure(StructureOutput())
    ctx = _context([flat_probe, k_only], SEED_NOTES)
    vector = ctx.embedder.vector("october")
    q = Query(text="october", k=3, near="n1", time_range=(1.0, 2.5))
    DefaultStrategy().retrieve(RetrieveInput(query=q, query_vector=vector, context=ctx))

    # FixedStructure declares the base StructureQuery: nothing to fill.
    assert type(flat_probe.seen[0]) is StructureQuery
    (k_query,) = k_only.seen
    assert type(k_query) is KOnlyQuery
    assert k_query == KOnlyQuery(k=3)

    recorder = _FlatRecorder()
    ctx = _context([recorder], SEED_NOTES)
    DefaultStrategy().retrieve(RetrieveInput(query=q, query_vector=vector, context=ctx))
    (flat_query,) = recorder.seen
    assert isinstance(flat_query, FlatQuery)
    assert np.array_equal(flat_query.vector, vector)
    assert (flat_query.k, flat_query.time_range, flat_query.anchor_id) == (3, (1.0, 2.5), "n1")


class _FlatRecorder(FlatStructure):
    def __init__(self) -> None:
        self.seen: list[StructureQuery] = []

    def search(self, query: StructureQuery, memory: MemoryBackend) -> StructureOutput:
        self.seen.append(query)
        return super().search(query, memory)


def test_a_query_input_that_cannot_be_filled_is_a_contract_error() -> None:
    ctx = _context([NeedsLabelStructure(StructureOutput())])
    with pytest.raises(ContractError, match=r"0:NeedsLabelStructure.*label"):
        _retrieve(ctx)


# -- the flat structure ---------------------------------------------------------------------


def _memory(rows: dict[str, tuple[float, list[float]]]) -> InMemoryBackend:
    memory = InMemoryBackend()
    for note_id, (timestamp, vector) in rows.items():
        memory.put(Note(id=note_id, text=note_id, timestamp=timestamp), vector)
    return memory


def test_flat_honours_k_time_range_and_anchor() -> None:
    memory = _memory(
        {
            "a": (1.0, [1.0, 0.0]),
            "b": (2.0, [0.9, 0.1]),
            "c": (3.0, [0.5, 0.5]),
            "d": (4.0, [0.0, 1.0]),
        }
    )
    flat = FlatStructure()
    hits = flat.search(FlatQuery(vector=[1.0, 0.0], k=2), memory).hits
    assert [h.id for h in hits] == ["a", "b"]
    assert hits[0].score == pytest.approx(1.0)
    in_range = flat.search(FlatQuery(vector=[1.0, 0.0], k=9, time_range=(2.0, 3.0)), memory)
    assert [h.id for h in in_range.hits] == ["b", "c"]
    near_d = flat.search(FlatQuery(anchor_id="d", k=9), memory)
    assert [h.id for h in near_d.hits] == ["c", "b"]
    near_with_vector = flat.search(FlatQuery(vector=[1.0, 0.0], anchor_id="a", k=9), memory)
    assert [h.id for h in near_with_vector.hits] == ["b", "c"]
    assert flat.search(FlatQuery(k=3), memory).hits == []


def test_flat_skips_notes_with_no_similarity() -> None:
    memory = _memory({"a": (1.0, [1.0, 0.0]), "z": (1.0, [0.0, 0.0]), "o": (1.0, [-1.0, 0.0])})
    hits = FlatStructure().search(FlatQuery(vector=[1.0, 0.0]), memory).hits
    assert [h.id for h in hits] == ["a"]


def test_flat_errors_name_what_was_wrong() -> None:
    memory = _memory({"a": (1.0, [1.0, 0.0])})
    with pytest.raises(UnknownNoteError, match="'ghost'"):
        FlatStructure().search(FlatQuery(anchor_id="ghost"), memory)
    with pytest.raises(UnknownNoteError, match="'ghost'"):
        FlatStructure().search(FlatQuery(vector=[1.0, 0.0], anchor_id="ghost"), memory)
    with pytest.raises(ContractError, match="dimension 3"):
        FlatStructure().search(FlatQuery(vector=[1.0, 0.0, 0.0]), memory)
    with pytest.raises(ContractError, match="takes a FlatQuery"):
        FlatStructure().search(KOnlyQuery(), memory)


@reaching(0.8)  # either hits ranked against the reference, or none where none may be
@settings(max_examples=200, deadline=None)
@given(
    rows=st.lists(
        st.tuples(
            st.sampled_from([0.0, 1.0, 2.0, 3.0]),
            st.lists(st.sampled_from([1.0, 0.5, 2.0, 0.0, -1.0]), min_size=3, max_size=3),
        ),
        min_size=3,
        max_size=25,
    ),
    reference=st.lists(st.sampled_from([1.0, 3.0, 0.0, -1.0]), min_size=3, max_size=3),
    k=st.integers(1, 8),
    time_range=st.none() | st.sampled_from([(0.0, 1.0), (1.0, 3.0), (2.0, 2.0)]),
    anchor=st.none() | st.integers(0, 24),
    # A query vector 3 times in 4, else an anchor note; at least 3 notes, positive values
    # first: most queries have notes of positive similarity to find.
    use_vector=st.sampled_from([True, True, True, False]),
)
def test_flat_matches_a_brute_force_reference(
    rows: list[tuple[float, list[float]]],
    reference: list[float],
    k: int,
    time_range: tuple[float, float] | None,
    anchor: int | None,
    use_vector: bool,
) -> None:
    ids = [f"id{(i * 7) % 31:02d}" for i in range(len(rows))]
    memory = _memory(dict(zip(ids, rows, strict=True)))
    if anchor is None and not use_vector:
        anchor = 0  # without a vector, the query is by an anchor note
    anchor_id = ids[anchor % len(ids)] if anchor is not None else None
    query = FlatQuery(
        vector=reference if use_vector else None, k=k, time_range=time_range, anchor_id=anchor_id
    )
    got = FlatStructure().search(query, memory).hits

    # Reference in float64: cosine of every note that passes the filters.
    ref = np.array(reference, dtype=np.float64) if use_vector else None
    if ref is None and anchor_id is not None:
        ref = memory.vector(anchor_id).astype(np.float64)
    exact: dict[str, float] = {}
    if ref is not None:
        for note_id, (timestamp, vector) in zip(ids, rows, strict=True):
            v = np.array(vector, dtype=np.float64)
            denominator = float(np.linalg.norm(v) * np.linalg.norm(ref))
            score = float(v @ ref) / denominator if denominator else 0.0
            in_range = time_range is None or time_range[0] <= timestamp <= time_range[1]
            if in_range and note_id != anchor_id:
                exact[note_id] = score
    tol = 2e-6
    positive = {i for i, score in exact.items() if score > tol}
    maybe = {i for i, score in exact.items() if score > -tol}
    got_ids = [h.id for h in got]
    assert len(set(got_ids)) == len(got_ids)
    assert set(got_ids) <= maybe  # filters hold, and nothing without similarity
    assert len(got) == min(k, len(positive)) or len(positive) < len(got) <= len(maybe)
    for hit in got:
        assert hit.score == pytest.approx(exact[hit.id], abs=tol)
        assert hit.score == round(hit.score, 6)
    # Order: score descending, then id ascending, on the reported scores.
    assert [(-h.score, h.id) for h in got] == sorted((-h.score, h.id) for h in got)
    if not got:
        assert not positive  # checked above: nothing passes the filters with similarity
        reached("no note to find, none found")
    # Nothing better was left out.
    if got:
        floor = got[-1].score
        left_out = [i for i in positive if i not in got_ids]
        assert all(exact[i] <= floor + tol for i in left_out)
        reached("hits checked")


# -- memory -----------------------------------------------------------------------------------


def test_in_memory_backend_stores_replaces_and_grows() -> None:
    memory = InMemoryBackend()
    for i in range(40):
        memory.put(Note(id=f"n{i}", text=str(i), timestamp=float(i)), [float(i), 1.0])
    memory.put(Note(id="n3", text="replaced", timestamp=99.0), [0.0, 5.0])
    arrays = memory.arrays()
    assert len(memory) == 40
    assert arrays.vectors.shape == (40, 2)
    assert memory.get("n3").text == "replaced"
    assert arrays.ids[3] == "n3"
    assert arrays.timestamps[3] == 99.0
    assert arrays.vectors[3].tolist() == [0.0, 5.0]
    assert memory.vector("n3").tolist() == [0.0, 5.0]
    assert arrays.norms[3] == pytest.approx(5.0)
    assert arrays.ids[np.argsort(arrays.id_rank)].tolist() == sorted(arrays.ids.tolist())
    assert "n39" in memory
    assert "n40" not in memory
    assert 3 not in memory
    with pytest.raises(ValueError, match="read-only"):
        arrays.vectors[0, 0] = 1.0


def test_in_memory_backend_checks_its_inputs() -> None:
    memory = InMemoryBackend()
    memory.put(SEED_NOTES[0], [1.0, 0.0])
    with pytest.raises(ContractError, match=r"dimension 3.*dimension 2"):
        memory.put(SEED_NOTES[1], [1.0, 0.0, 0.0])
    with pytest.raises(ContractError, match="takes a Note"):
        memory.put({"id": "x"}, [1.0, 0.0])  # type: ignore[arg-type]
    with pytest.raises(ContractError, match="finite"):
        memory.put(SEED_NOTES[1], [float("nan"), 0.0])
    with pytest.raises(UnknownNoteError, match="'n9'"):
        memory.get("n9")
    assert len(memory) == 1


def test_empty_memory_has_no_hits() -> None:
    out = FlatStructure().search(FlatQuery(vector=[1.0]), InMemoryBackend())
    assert out.hits == []


# -- container and configuration --------------------------------------------------------------


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / CONFIG_FILE
    path.write_text(text, encoding="utf-8")
    return path


def test_container_defaults() -> None:
    c = Container(search_cwd=False)
    assert c.config_path is None
    assert isinstance(c.get(Strategy), DefaultStrategy)  # type: ignore[type-abstract]
    assert isinstance(c.get(MemoryBackend), InMemoryBackend)  # type: ignore[type-abstract]
    assert isinstance(c.get(Embedder), LocalHashEmbedder)  # type: ignore[type-abstract]
    assert [type(s) for s in c.get_all(Structure)] == [FlatStructure]  # type: ignore[type-abstract]
    assert c.get_all(object) == [c.embedder, c.memory, *c.structures, c.strategy]


def test_container_reads_every_section(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        """
        [embedder]
        kind = "local_hash"

        [memory]
        kind = "in_memory"

        [[structures]]
        kind = "flat"

        [[structures]]
        kind = "flat"

        [strategy]
        kind = "default"
        """,
    )
    c = Container(path)
    assert c.config_path == path
    assert [type(s) for s in c.structures] == [FlatStructure, FlatStructure]
    assert isinstance(c.strategy, DefaultStrategy)
    with pytest.raises(ConfigError, match=r"2 pieces.*use get_all"):
        c.get(Structure)  # type: ignore[type-abstract]


@pytest.mark.parametrize(
    ("text", "kinds"),
    [
        ('structures = ["flat", "flat"]', [FlatStructure, FlatStructure]),
        ('[structures]\nkind = "flat"', [FlatStructure]),
        ("structures = []", []),
        ("[strategy]", [FlatStructure]),
    ],
)
def test_container_structure_forms(tmp_path: Path, text: str, kinds: list[type]) -> None:
    c = Container(_write(tmp_path, text))
    assert [type(s) for s in c.structures] == kinds


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '[strategy]\nkind = "fancy"',
            r"strategy\.kind: unknown kind 'fancy'; known kinds: default",
        ),
        ('[memory]\nkind = "redis"', r"memory\.kind: unknown kind 'redis'; known kinds: in_memory"),
        ('[[structures]]\nkind = "flat"\n[[structures]]\nkind = "graph"', r"structures\[1\]\.kind"),
        ('[embedder]\nkind = "word2vec"', r"embedder\.kind: unknown embedder 'word2vec'"),
        ('[strategy]\nkind = "default"\nalpha = 0.5', r"strategy\.alpha: unknown parameter"),
        ("[embedder]\ndim = 8", r"embedder\.dim: unknown parameter"),
        ("[strategy]\nkind = 3", r"strategy\.kind must be a string"),
        ("strategy = 3", r"strategy must be a table"),
        ("structures = 3", r"structures must be an array of tables"),
        ('[retriever]\nkind = "x"', r"unknown key 'retriever'"),
        ("[strategy\n", r"invalid TOML"),
    ],
)
def test_container_configuration_errors_name_the_file_and_key(
    tmp_path: Path, text: str, message: str
) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError, match=message) as info:
        Container(path)
    assert str(info.value).startswith(str(path))


def test_container_searches_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write(tmp_path, "structures = []")
    monkeypatch.chdir(tmp_path)
    assert Container().structures == ()
    assert Container().config_path == tmp_path / CONFIG_FILE
    assert len(Container(search_cwd=False).structures) == 1
    _write(tmp_path, '[strategy]\nkind = "nope"')
    with pytest.raises(ConfigError, match=CONFIG_FILE):
        Container()


def test_container_with_a_missing_file_fails(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        Container(tmp_path / "absent.toml")


def test_container_arguments_override_the_file(tmp_path: Path) -> None:
    path = _write(tmp_path, 'structures = []\n[strategy]\nkind = "default"')
    memory, strategy = InMemoryBackend(), EchoStrategy()
    c = Container(path, memory=memory, strategy=strategy, structures=[FlatStructure()])
    assert c.memory is memory
    assert c.strategy is strategy
    assert len(c.structures) == 1
    with pytest.raises(ConfigError, match="must be a Strategy"):
        Container(search_cwd=False, strategy=DefaultStrategy)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="sequence of Structure"):
        Container(search_cwd=False, structures=["flat"])  # type: ignore[list-item]
    with pytest.raises(ConfigError, match="no piece"):
        Container(search_cwd=False).get(Answer)


# -- engine -----------------------------------------------------------------------------------


class NoSecrets(DefaultStrategy):
    kind: ClassVar[str] = "no_secrets"

    def _admit(self, inp: AdmitInput) -> AdmitOutput:
        return AdmitOutput(admit="secret" not in inp.note.text)


def test_engine_admits_through_the_strategy() -> None:
    engine = ContinuityEngine(container=Container(search_cwd=False, strategy=NoSecrets()))
    notes = [*SEED_NOTES, Note(id="s", text="the secret launch code", timestamp=4.0)]
    assert engine.ingest_many(notes) == [True, True, True, False]
    assert "s" not in engine.context.memory
    assert len(engine.context.memory) == 3
    assert [h.id for h in engine.ask("launch code").hits] == ["n1", "n2"]
    assert engine.ingest(Note(id="p", text="launch code public", timestamp=5.0)) is True
    assert engine.ask(Query(text="launch code", k=1)).hits[0].id == "p"


def test_engine_ask_returns_the_query_hits_and_groups() -> None:
    groups = [Group(label="launch", ids=("n1", "n2"))]
    engine = _engine(structures=[FlatStructure(), FixedStructure(StructureOutput(groups=groups))])
    answer = engine.ask("october launch")
    assert answer.query == Query(text="october launch")
    assert [h.id for h in answer.hits] == ["n1", "n2"]
    assert answer.hits[0].text == "october product launch"
    assert answer.hits[0].timestamp == 1.0
    assert answer.groups == groups
    assert Answer.from_json(answer.to_json()) == answer


def test_engine_queries_without_text_use_the_anchor() -> None:
    engine = _engine()
    assert [h.id for h in engine.ask(Query(near="n1")).hits] == ["n2"]
    assert engine.ask(Query(text="  ")).hits == []
    assert [h.id for h in engine.ask(Query(text="launch", near="n2")).hits] == ["n1"]
    with pytest.raises(UnknownNoteError):
        engine.ask(Query(near="missing"))


def test_engine_replaces_a_note_with_a_known_id() -> None:
    engine = _engine()
    engine.ingest(Note(id="n3", text="october launch recap", timestamp=9.0))
    assert len(engine.context.memory) == 3
    assert [h.id for h in engine.ask(Query(text="recap")).hits] == ["n3"]


def test_engine_rejects_bad_input_before_ingesting() -> None:
    engine = ContinuityEngine(container=Container(search_cwd=False))
    with pytest.raises(ContractError, match="element 1 is a dict"):
        engine.ingest_many([SEED_NOTES[0], {"id": "x"}])  # type: ignore[list-item]
    assert len(engine.context.memory) == 0
    with pytest.raises(ContractError, match="takes a Query or a text"):
        engine.ask(3)  # type: ignore[arg-type]
    with pytest.raises(ContractError, match="takes a Container"):
        ContinuityEngine(container="cognoxium.toml")  # type: ignore[arg-type]
    assert engine.ingest_many([]) == []


def test_engine_answers_are_deterministic() -> None:
    notes = [Note(id=f"n{i}", text=f"topic {i % 3} word {i % 5}", timestamp=i) for i in range(40)]
    reversed_notes = list(reversed(notes))
    first = _engine(notes).ask(Query(text="topic 1 word 2", k=7))
    again = _engine(notes).ask(Query(text="topic 1 word 2", k=7))
    other_order = _engine(reversed_notes).ask(Query(text="topic 1 word 2", k=7))
    assert first.to_json() == again.to_json() == other_order.to_json()


def test_engine_uses_the_configured_file(tmp_path: Path) -> None:
    path = _write(tmp_path, "structures = []")
    engine = ContinuityEngine(container=Container(path))
    engine.ingest_many(SEED_NOTES)
    assert engine.ask("october").hits == []


# -- frames and packing --------------------------------------------------------------------------


def test_hits_become_a_frame_of_memory_items() -> None:
    answer = _engine().ask("october launch")
    frame = answer.to_frame()
    assert isinstance(frame, CognitionFrame)
    df = frame.to_polars()
    assert df["id"].to_list() == ["n1", "n2"]
    assert df["role"].cast(pl.String).to_list() == ["memory", "memory"]
    assert df["rank"].to_list() == [h.score for h in answer.hits]
    assert df["created_at"].to_list() == [
        datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC),
        datetime(1970, 1, 1, 0, 0, 2, tzinfo=UTC),
    ]
    assert df["text"].to_list() == ["october product launch", "october launch plan"]
    assert hits_to_frame([]).count() == 0
    documents = hits_to_frame(answer.hits, role="document").to_polars()
    assert documents["role"].cast(pl.String).unique().to_list() == ["document"]


def test_hit_metadata_reaches_the_frame() -> None:
    engine = _engine([Note(id="m", text="launch", timestamp=1.0, metadata={"topic": "x"})])
    df = engine.ask("launch").to_frame().filter("metadata.topic = 'x'").to_polars()
    assert df["id"].to_list() == ["m"]


def test_retrieved_hits_flow_into_dedupe_and_pack() -> None:
    notes = [
        *SEED_NOTES,
        Note(id="n4", text="october launch plan", timestamp=4.0),
        Note(id="n5", text="launch checklist for october " + "detail " * 200, timestamp=5.0),
    ]
    engine = _engine(notes)
    ctx = engine.context
    q = Query(text="october launch plan", k=5)
    out = engine.container.strategy.retrieve(
        RetrieveInput(query=q, query_vector=ctx.embedder.vector(q.text or ""), context=ctx)
    )
    assert [h.id for h in out.hits] == ["n2", "n4", "n1", "n5"]
    frame = out.to_frame().dedupe()
    assert frame.to_polars()["id"].to_list() == ["n2", "n1", "n5"]  # n4 repeats n2's text
    pack = frame.pack(60, as_of=datetime(2026, 1, 1, tzinfo=UTC))
    manifest = pack.manifest.to_polars()
    assert manifest["id"].to_list() == ["n2", "n1", "n5"]
    decisions = dict(zip(manifest["id"].to_list(), manifest["decision"].to_list(), strict=True))
    assert decisions["n5"] != "included"  # the long note does not fit 60 tokens
    assert pack.ids == ["n2", "n1"]  # best rank first in selection, input order in the pack
    assert pack.used_tokens <= 60
    assert all(m["role"] == "user" for m in pack.messages)


# -- extension by subclass ------------------------------------------------------------------------


class TaggedRetrieveInput(RetrieveInput):
    tag: str


class TaggedRetrieveOutput(RetrieveOutput):
    tag: str = ""


class TaggedHit(Hit):
    source: str = "flat"


class TaggingStrategy(DefaultStrategy):
    retrieve_input: ClassVar[type[RetrieveInput]] = TaggedRetrieveInput
    retrieve_output: ClassVar[type[RetrieveOutput]] = TaggedRetrieveOutput

    def _retrieve(self, inp: RetrieveInput) -> RetrieveOutput:
        assert isinstance(inp, TaggedRetrieveInput)
        base = super()._retrieve(inp)
        hits = [TaggedHit(**h.model_dump(), source=inp.tag) for h in base.hits]
        return TaggedRetrieveOutput(hits=hits, groups=base.groups, raw=base.raw, tag=inp.tag)


def test_contracts_extend_by_subclass() -> None:
    ctx = _context([FlatStructure()], SEED_NOTES)
    vector = ctx.embedder.vector("apple")
    inp = TaggedRetrieveInput(query=Query(text="apple"), query_vector=vector, context=ctx, tag="t1")
    out = TaggingStrategy().retrieve(inp)
    assert isinstance(out, TaggedRetrieveOutput)
    assert out.tag == "t1"
    assert out.to_dict()["hits"][0]["source"] == "t1"

    data = inp.to_dict()
    assert data["tag"] == "t1"
    assert "context" not in data
    schema = TaggedRetrieveInput.json_schema()
    assert "tag" in schema["required"]
    assert "context" not in schema["properties"]
    rebuilt = TaggedRetrieveInput.from_dict(data)
    assert rebuilt == inp
    assert rebuilt.context is None

    plain = RetrieveInput(query=Query(text="apple"), query_vector=vector, context=ctx)
    with pytest.raises(ContractError, match="takes TaggedRetrieveInput, got RetrieveInput"):
        TaggingStrategy().retrieve(plain)

    class Untagged(TaggingStrategy):
        def _retrieve(self, inp: RetrieveInput) -> RetrieveOutput:
            return RetrieveOutput()

    with pytest.raises(
        ContractError, match="returned RetrieveOutput, expected TaggedRetrieveOutput"
    ):
        Untagged().retrieve(inp)


def test_structure_outputs_keep_extension_fields_in_raw() -> None:
    class ScoredOutput(StructureOutput):
        latency_ms: float = 0.0

    class Timed(FixedStructure):
        pass

    ctx = _context([Timed(ScoredOutput(latency_ms=1.5))])
    out = _retrieve(ctx)
    assert out.to_dict()["raw"]["0:Timed"]["latency_ms"] == 1.5
    rebuilt = RetrieveOutput.from_json(out.to_json())
    assert rebuilt.to_dict() == out.to_dict()
