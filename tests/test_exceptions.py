"""Stable error codes: every error carries a documented code and its structured params."""

from __future__ import annotations

import inspect
import pickle
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import cognoxium as cx
from cognoxium import exceptions
from cognoxium.exceptions import (
    ERROR_CODES,
    BudgetError,
    CognoxiumError,
    PackError,
    PredicateError,
    RecordError,
)

DOCS = Path(__file__).resolve().parents[1] / "docs" / "reference" / "errors.md"
AS_OF = datetime(2026, 1, 1, tzinfo=UTC)
ERROR_CLASSES = [
    value
    for name in exceptions.__all__
    if inspect.isclass(value := getattr(exceptions, name)) and issubclass(value, CognoxiumError)
]


def test_every_error_class_has_a_registered_default_code() -> None:
    for cls in ERROR_CLASSES:
        assert cls.default_code in ERROR_CODES, cls.__name__
    defaults = {cls.__name__: cls.default_code for cls in ERROR_CLASSES}
    assert defaults == {
        "BudgetError": "budget.required_overflow",
        "CognoxiumError": "error",
        "ConfigError": "config.invalid",
        "ContractError": "contract.broken",
        "DependencyError": "dependency.missing",
        "MessageError": "messages.invalid",
        "ModelError": "model.unavailable",
        "OutputError": "output.invalid",
        "PackError": "pack.invalid",
        "PlanError": "plan.invalid",
        "PolicyError": "policy.violated",
        "PredicateError": "predicate.refused",
        "ProfileError": "profile.invalid",
        "RankError": "rank.invalid",
        "RecordError": "record.invalid",
        "SchemaError": "schema.invalid",
        "StrategyError": "strategy.invalid",
        "UnknownNoteError": "note.unknown",
    }


def test_a_subclass_without_its_own_code_inherits_its_parents() -> None:
    class TruncationError(PackError):
        pass

    assert TruncationError("x").code == "pack.invalid"


def test_codes_are_dotted_lowercase_names() -> None:
    for code in ERROR_CODES:
        assert code == "error" or re.fullmatch(r"[a-z]+\.[a-z_]+", code), code


def test_an_unregistered_code_is_refused() -> None:
    with pytest.raises(ValueError, match=r"unknown error code 'pack\.typo'"):
        PackError("x", code="pack.typo")


def test_the_docs_table_lists_exactly_the_codes() -> None:
    rows = re.findall(r"^\| `([a-z_.]+)` \| (.+?) \|", DOCS.read_text(), flags=re.MULTILINE)
    assert dict(rows) == ERROR_CODES


def test_a_budget_overflow_carries_budget_and_costs() -> None:
    records = [
        {"id": "s", "role": "system", "text": "Be brief.", "retention": "required"},
        {"id": "u", "role": "user", "text": "hello world", "retention": "required"},
    ]
    frame = cx.CognitionFrame.from_records([{**r, "created_at": AS_OF} for r in records])
    with pytest.raises(BudgetError) as caught:
        frame.pack(10, profile="cl100k_base", as_of=AS_OF)
    error = caught.value
    # system: 3 + 1 (role) + 3 (Be brief.) = 7; user: 3 + 1 + 2 = 6; 3 of reply priming.
    assert error.code == "budget.required_overflow"
    assert error.params == {"budget": 10, "costs": {"s": 7, "u": 6}, "budget_needed": 16}
    assert error.to_dict()["params"] == error.params


def test_a_negative_budget_is_pack_invalid_with_the_budget() -> None:
    frame = cx.CognitionFrame.from_records(
        [{"id": "u", "role": "user", "text": "hi", "created_at": AS_OF}]
    )
    with pytest.raises(PackError) as caught:
        frame.pack(-1, as_of=AS_OF)
    assert (caught.value.code, caught.value.params) == ("pack.invalid", {"budget": -1})


def test_a_refused_predicate_names_its_text_and_position() -> None:
    frame = cx.CognitionFrame.from_records(
        [{"id": "u", "role": "user", "text": "hi", "created_at": AS_OF}]
    )
    with pytest.raises(PredicateError) as caught:
        frame.filter("role == 'user' and __import__('os')")
    error = caught.value
    assert error.code == "predicate.refused"
    assert error.params["predicate"] == "role == 'user' and __import__('os')"
    assert isinstance(error.params["position"], int)


def test_a_record_error_locates_itself() -> None:
    with pytest.raises(RecordError) as caught:
        cx.CognitionFrame.from_records([{"id": "a", "role": "narrator", "text": "hi"}])
    assert caught.value.to_dict() | {"message": ""} == {
        "code": "record.invalid",
        "message": "",
        "file": None,
        "line": None,
        "field": "role",
        "params": {"row": 0},
    }
    located = RecordError("bad", source="t.parquet", row=4, field="id")
    assert located.to_dict()["params"] == {"row": 4}


def test_a_bad_reply_reserve_has_its_own_code() -> None:
    frame = cx.CognitionFrame.from_records(
        [{"id": "u", "role": "user", "text": "hi", "created_at": AS_OF}]
    )
    with pytest.raises(BudgetError) as caught:
        frame.pack(10, reserve=11, as_of=AS_OF)
    assert caught.value.code == "budget.reserve_invalid"
    assert caught.value.params == {"reserve": 11, "budget": 10, "costs": {}}


def test_an_overflow_under_a_reserve_names_the_reserve() -> None:
    records = [{"id": "s", "role": "system", "text": "Be brief.", "retention": "required"}]
    frame = cx.CognitionFrame.from_records([{**r, "created_at": AS_OF} for r in records])
    with pytest.raises(BudgetError) as caught:
        frame.pack(12, reserve=4, profile="cl100k_base", as_of=AS_OF)
    # system: 7 tokens + 3 of reply priming = 10 > 12 - 4.
    assert caught.value.code == "budget.required_overflow"
    expected = {"reserve": 4, "budget": 8, "costs": {"s": 7}, "budget_needed": 14}
    assert caught.value.params == expected


@pytest.mark.parametrize(
    "settings",
    [{}, {"reserve": 5}, {"target": "anthropic"}, {"target": "anthropic", "reserve": 5}],
)
def test_the_budget_an_overflow_names_is_the_least_that_fits(settings: dict[str, Any]) -> None:
    # budget_needed counts what the budget keeps out: the reserve, an Anthropic opening.
    records = [
        {"id": "s", "role": "system", "text": "Be brief. " * 9, "retention": "required"},
        {"id": "a", "role": "assistant", "text": "Earlier answer."},
    ]
    frame = cx.CognitionFrame.from_records([{**r, "created_at": AS_OF} for r in records])
    with pytest.raises(BudgetError) as caught:
        frame.pack(12, profile="cl100k_base", as_of=AS_OF, **settings)
    needed = caught.value.params["budget_needed"]
    with pytest.raises(BudgetError):
        frame.pack(needed - 1, profile="cl100k_base", as_of=AS_OF, **settings)
    pack = frame.pack(needed, profile="cl100k_base", as_of=AS_OF, **settings)
    assert "s" in pack.frame.get_column("id").to_list()


def _example(cls: type[CognoxiumError]) -> CognoxiumError:
    """An instance of ``cls`` with every keyword its constructor requires."""
    required = {
        name: {
            "costs": {"a": 9},
            "budget": 5,
            "predicate": "a = 1",
            "path": "out",
            "outcomes": [],
            "index": 0,
            "rule": "tool_call_unanswered",
        }[name]
        for name, p in inspect.signature(cls).parameters.items()
        if p.kind is inspect.Parameter.KEYWORD_ONLY and p.default is inspect.Parameter.empty
    }
    return cls(f"{cls.__name__} happened", **required)


@pytest.mark.parametrize("cls", ERROR_CLASSES, ids=lambda cls: cls.__name__)
def test_every_error_crosses_a_process_boundary_whole(cls: type[CognoxiumError]) -> None:
    error = _example(cls)
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is cls
    assert str(copy) == str(error)
    assert copy.to_dict() == error.to_dict()
    assert vars(copy) == vars(error)


def test_an_error_within_a_context_keeps_its_type_code_and_attributes() -> None:
    error = RecordError("must be a string", source="a.jsonl", line=3, field="role")
    named = error.within("request 'r1'", request_id="r1")
    assert type(named) is RecordError
    assert str(named) == f"request 'r1': {error}"
    assert named.location == ("a.jsonl", 3, "role")
    assert (named.code, named.params) == (error.code, {**error.params, "request_id": "r1"})
    assert pickle.loads(pickle.dumps(named)).to_dict() == named.to_dict()
    assert error.params == RecordError("x", source="a.jsonl", line=3, field="role").params
