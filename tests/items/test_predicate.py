"""String predicates: the allow-listed grammar, its lowering to Polars and what it refuses."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cognoxium.exceptions import PlanError, PredicateError
from cognoxium.frame.frame import CognitionFrame
from cognoxium.items.predicate import PREDICATE_FUNCTIONS, parse_predicate
from cognoxium.items.schema import COLUMNS
from tests.reach import reached, reaching

CANARY = "canary-7f3a9c: the content of a file no predicate may read"

# Every table function Polars SQL offers (polars-sql table_functions.rs: read_csv,
# read_parquet, read_ipc, read_json, which reads NDJSON), the NDJSON spelling, and
# the lazy scan_* names of the Python API.
TABLE_FUNCTIONS = (
    "read_csv",
    "read_parquet",
    "read_ipc",
    "read_json",
    "read_ndjson",
    "scan_csv",
    "scan_parquet",
    "scan_ipc",
    "scan_ndjson",
)

SHAPES = (
    "id IN (SELECT column_1 FROM {f}('{path}'))",
    "id = (SELECT column_1 FROM {f}('{path}'))",
    "EXISTS (SELECT * FROM {f}('{path}'))",
    "{f}('{path}') IS NOT NULL",
    "id = {f}('{path}')",
    "role = 'user' OR id NOT IN (SELECT * FROM {f}('{path}') LIMIT 1)",
)


@pytest.fixture
def canary(tmp_path: Path) -> Path:
    path = tmp_path / "secret.csv"
    path.write_text(f"{CANARY}\n{CANARY}\n")
    return path


def frame() -> pl.DataFrame:
    return pl.DataFrame(
        {
            "id": ["a", "b", "c", "d"],
            "role": ["user", "tool", "user", "system"],
            "priority": [3, 0, None, -2],
            "rank": [0.5, None, 2.0, -1.0],
            "text": ["Refund please", "it's 100%", None, "line\nbreak"],
            "metadata": ['{"topic": "billing"}', '{"topic": "bugs"}', "{}", None],
        }
    )


def ids(predicate: str) -> list[str]:
    df = frame()
    return df.filter(parse_predicate(predicate, df.columns))["id"].to_list()


# ---------------------------------------------------------------------------
# refused: table functions, subqueries, comments, statements


@pytest.mark.parametrize("function", TABLE_FUNCTIONS)
@pytest.mark.parametrize("shape", SHAPES)
def test_table_functions_are_refused_without_reading_the_file(
    canary: Path, function: str, shape: str
) -> None:
    text = shape.format(f=function, path=canary)
    with pytest.raises(PredicateError) as info:
        parse_predicate(text)
    message = str(info.value)
    assert "canary-7f3a9c" not in message
    assert f"function {function}" in message
    assert "is not allowed" in message
    assert "which reads files" in message or "table functions read files" in message


@pytest.mark.parametrize("function", TABLE_FUNCTIONS)
def test_table_functions_are_refused_by_filter_with_nothing_leaked(
    canary: Path, function: str
) -> None:
    cf = CognitionFrame([{"id": "a", "role": "user", "text": "hi"}])
    with pytest.raises(PredicateError, match="is not allowed") as info:
        cf.filter(f"id IN (SELECT column_1 FROM {function}('{canary}'))")
    assert "canary-7f3a9c" not in str(info.value)
    assert isinstance(info.value, PlanError)


@pytest.mark.parametrize("function", TABLE_FUNCTIONS)
def test_a_missing_file_gives_the_same_error_as_an_existing_one(
    canary: Path, function: str
) -> None:
    text = f"id IN (SELECT column_1 FROM {function}('{canary}'))"
    with pytest.raises(PredicateError) as present:
        parse_predicate(text)
    canary.unlink()
    with pytest.raises(PredicateError) as missing:
        parse_predicate(text)
    assert str(missing.value) == str(present.value)
    assert (missing.value.position, missing.value.message) == (
        present.value.position,
        present.value.message,
    )


@pytest.mark.parametrize(
    ("text", "position", "fragment"),
    [
        ("id IN (SELECT id FROM items)", 15, "a subquery is not allowed"),
        ("id = ANY (SELECT 'a')", 18, "a subquery is not allowed"),
        ("EXISTS (SELECT 1)", 16, "a subquery is not allowed"),
        ("role = 'user' -- AND trust = 'trusted'", 15, "a comment is not allowed"),
        ("role = 'user' --", 15, "a comment is not allowed"),
        ("role = 'user' /* OR 1 = 1 */", 15, "a comment is not allowed"),
        ("/* c */ role = 'user'", 1, "a comment is not allowed"),
        ("role = 'user'\n-- c\n", 15, "a comment is not allowed"),
        ("-- only a comment", 1, "a comment is not allowed"),
        ("role = 'user'; DROP TABLE items", 14, "';' is not allowed"),
        ("role = 'user';", 14, "';' is not allowed"),
        ("role = 'user'; SELECT * FROM read_csv('/etc/passwd')", 14, "';' is not allowed"),
        ("*", 1, "'*' is not allowed"),
        ("id = version()", 6, "the function version is not allowed"),
        ("sha256(text) = 'x'", 1, "the function sha256 is not allowed"),
        ("CAST(priority AS INT) = 1", 6, "a cast to INT is not allowed"),
        ("priority::text = '1'", 1, "a cast to TEXT is not allowed"),
        ("priority + 1 > 2", 1, "'priority + 1' (Add) is not allowed"),
        ("text || 'x' = 'y'", 1, "(DPipe) is not allowed"),
        ("text LIKE 'a!%' ESCAPE '!'", 1, "LIKE ... ESCAPE is not allowed"),
        ("text LIKE role", 1, "LIKE needs a string literal pattern"),
        ("id IN ('a', role)", 13, "an IN list holds literals only"),
        ("id IN ('a', 1)", 1, "an IN list mixes types"),
        ("role IS TRUE", 1, "IS takes only NULL"),
        ("items.id = 'a'", 1, "items.id is not allowed: only metadata.<key>"),
        ("rol = 'user'", 1, "unknown column 'rol': did you mean 'role'?"),
        ("created_at > TIMESTAMP 'yesterday'", 24, "'yesterday' is not an ISO 8601 timestamp"),
        ("role = = 'user'", 8, "cannot parse the predicate: EQ is incomplete"),
    ],
)
def test_refused_constructs_name_what_where_and_why(
    text: str, position: int, fragment: str
) -> None:
    with pytest.raises(PredicateError) as info:
        parse_predicate(text)
    assert fragment in info.value.message
    assert str(info.value) == f"predicate {text!r}, at character {position}: {info.value.message}"
    assert info.value.predicate == text


@pytest.mark.parametrize("text", ["", "   ", "\n"])
def test_an_empty_predicate_is_refused(text: str) -> None:
    with pytest.raises(PredicateError, match="the predicate is empty"):
        parse_predicate(text)


def test_a_predicate_that_is_not_a_string_is_refused() -> None:
    with pytest.raises(PredicateError, match="a predicate is a string, got int"):
        parse_predicate(3)  # type: ignore[arg-type]


def test_deep_nesting_is_refused_not_a_crash() -> None:
    text = "(" * 5000 + "id = 'a'" + ")" * 5000
    with pytest.raises(PredicateError, match="nested too deeply"):
        parse_predicate(text)


# ---------------------------------------------------------------------------
# allowed: the grammar and its SQL semantics


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("role = 'user'", ["a", "c"]),
        ("role == 'user'", ["a", "c"]),
        ("role != 'user'", ["b", "d"]),
        ("role <> 'user'", ["b", "d"]),
        ("priority < 0", ["d"]),
        ("priority <= 0", ["b", "d"]),
        ("priority > 0", ["a"]),
        ("priority >= 0", ["a", "b"]),
        ("rank > -1.5 AND rank < 1e1", ["a", "c", "d"]),
        ("role = 'user' AND priority > 1 OR role = 'system'", ["a", "d"]),
        ("role = 'user' AND (priority > 1 OR role = 'system')", ["a"]),
        ("NOT role = 'user'", ["b", "d"]),
        ("NOT (priority > 0)", ["b", "d"]),  # null stays null: c is not kept
        ("role IN ('tool', 'system')", ["b", "d"]),
        ("role NOT IN ('tool', 'system')", ["a", "c"]),
        ("priority IN (0, 3.0)", ["a", "b"]),
        ("priority IN (3, NULL)", ["a"]),
        ("priority NOT IN (3, NULL)", []),  # SQL: never true with a NULL in the list
        ("priority NOT IN (3)", ["b", "d"]),
        ("text LIKE 'Refund%'", ["a"]),
        ("text LIKE '%100\\%'", []),  # no escape character: '\\' is a literal backslash
        ("text LIKE '%100%'", ["b"]),
        ("text LIKE 'it_s%'", ["b"]),
        ("text LIKE 'line_break'", ["d"]),  # '_' matches a line break too
        ("text LIKE 'refund%'", []),
        ("text ILIKE 'refund%'", ["a"]),
        ("text NOT LIKE 'Refund%'", ["b", "d"]),
        ("text NOT ILIKE 'REFUND%'", ["b", "d"]),
        ("text LIKE '(.*)'", []),  # regex characters are literal
        ("priority BETWEEN 0 AND 3", ["a", "b"]),
        ("priority NOT BETWEEN 0 AND 2", ["a", "d"]),
        ("rank BETWEEN priority AND 1", ["d"]),
        ("priority IS NULL", ["c"]),
        ("priority IS NOT NULL", ["a", "b", "d"]),
        ("text = 'it''s 100%'", ["b"]),
        ("\"role\" = 'tool'", ["b"]),
        ("lower(text) = 'refund please'", ["a"]),
        ("UPPER(role) = 'TOOL'", ["b"]),
        ("length(text) = 9", ["b"]),
        ("coalesce(priority, 10) > 5", ["c"]),
        ("abs(priority) = 2", ["d"]),
        ("-priority = 2", ["d"]),
        ("priority = -2", ["d"]),
        ("TRUE", ["a", "b", "c", "d"]),
        ("FALSE OR role = 'tool'", ["b"]),
        ("priority = NULL", []),
        ("text = 'caf\u00e9' OR role = 'tool'", ["b"]),
    ],
)
def test_the_grammar_filters_with_sql_semantics(text: str, expected: list[str]) -> None:
    assert ids(text) == expected


def test_metadata_keys_keep_their_meaning_in_frames() -> None:
    cf = CognitionFrame(
        [
            {"id": "a", "role": "user", "text": "x", "metadata": {"topic": "billing"}},
            {"id": "b", "role": "user", "text": "y", "metadata": {"topic": "bugs", "n": {"q": 2}}},
            {"id": "c", "role": "tool", "text": "z"},
        ]
    )
    assert cf.filter("metadata.topic = 'billing'").to_polars()["id"].to_list() == ["a"]
    assert cf.filter("metadata.\"topic\" <> 'billing'").to_polars()["id"].to_list() == ["b"]
    assert cf.filter("metadata.n.q = 2").to_polars()["id"].to_list() == ["b"]
    assert cf.filter("metadata.topic IS NULL").to_polars()["id"].to_list() == ["c"]
    assert cf.filter("lower(metadata.topic) LIKE 'b%'").to_polars()["id"].to_list() == ["a", "b"]
    demoted = cf.demote("metadata.topic = 'bugs'", priority_delta=-1).collect()
    assert demoted["priority"].to_list() == [0, -1, 0]
    held = cf.quarantine("metadata.topic IN ('billing')", reason="r").collect()
    assert held["quarantine_reason"].to_list() == ["r", None, None]


def test_metadata_key_lowers_to_struct_field_access() -> None:
    expr = parse_predicate("metadata.topic = 'billing'")
    expected = pl.col("metadata").struct.field("topic") == "billing"
    assert expr.meta.eq(expected)


def test_timestamp_literals_are_utc() -> None:
    df = pl.DataFrame(
        {
            "id": ["old", "new", "never"],
            "created_at": [
                datetime(2025, 1, 1, tzinfo=UTC),
                datetime(2025, 6, 1, 12, tzinfo=UTC),
                None,
            ],
        },
        schema={"id": pl.String, "created_at": pl.Datetime("us", "UTC")},
    )

    def kept(text: str) -> list[str]:
        return df.filter(parse_predicate(text, df.columns))["id"].to_list()

    assert kept("created_at > TIMESTAMP '2025-03-01'") == ["new"]
    assert kept("created_at >= TIMESTAMP '2025-06-01T14:00:00+02:00'") == ["new"]
    assert kept("created_at > TIMESTAMP '2025-06-01T14:00:00+01:00'") == []
    assert kept("created_at < DATE '2025-03-01'") == ["old"]


def test_the_columns_default_to_the_item_schema() -> None:
    for column in COLUMNS:
        assert parse_predicate(f'"{column}" IS NULL').meta.root_names() == [column]
    with pytest.raises(PredicateError, match="unknown column 'score'"):
        parse_predicate("score > 1")
    assert parse_predicate("score > 1", ["score"]).meta.root_names() == ["score"]


def test_unicode_text_is_not_taken_for_a_comment() -> None:
    assert ids("text = 'h\u00e9llo w\u00f6rld \U0001f600' OR text = 'it''s 100%'") == ["b"]


def test_the_documented_functions_are_the_allowed_ones() -> None:
    assert sorted(PREDICATE_FUNCTIONS) == ["abs", "coalesce", "length", "lower", "upper"]
    for name in PREDICATE_FUNCTIONS:
        argument = "priority" if name == "abs" else "text"
        parse_predicate(f"{name}({argument}) IS NULL")


# ---------------------------------------------------------------------------
# property: an allowed predicate keeps the rows Polars SQL keeps on a trusted frame

HYPO = pl.DataFrame(
    {
        "n": [1, 2, None, -3, 0, 2, 5],
        "x": [0.5, None, -1.25, 2.0, 0.0, 3.5, -0.5],
        "s": ["ab", "Ba", None, "a_b", "", "b%", "AB"],
        "t": ["x", "y", "x", None, "y", "x", "z"],
    }
)
INTS = st.integers(-4, 6)
FLOATS = st.sampled_from([-1.5, -0.5, 0.0, 0.5, 2.0, 3.25])
STRINGS = st.sampled_from(["ab", "Ba", "a_b", "", "b%", "AB", "x", "y", "z", "q"])
PATTERNS = st.text(alphabet="abAB_%", min_size=0, max_size=4)


def sql_string(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


@st.composite
def numeric(draw: st.DrawFn) -> str:
    column = draw(st.sampled_from(["n", "x", "abs(n)", "coalesce(n, 0)", "length(s)"]))
    return column


@st.composite
def text_value(draw: st.DrawFn) -> str:
    return draw(st.sampled_from(["s", "t", "lower(s)", "upper(s)", "coalesce(s, t)"]))


@st.composite
def atom(draw: st.DrawFn) -> str:
    kind = draw(st.sampled_from(["cmp_num", "cmp_str", "in", "like", "between", "null", "cols"]))
    op = draw(st.sampled_from(["=", "==", "!=", "<>", "<", "<=", ">", ">="]))
    if kind == "cmp_num":
        literal = draw(st.one_of(INTS, FLOATS))
        return f"{draw(numeric())} {op} {literal}"
    if kind == "cmp_str":
        return f"{draw(text_value())} {op} {sql_string(draw(STRINGS))}"
    if kind == "cols":
        return f"n {op} x" if draw(st.booleans()) else f"s {op} t"
    if kind == "in":
        negate = "NOT " if draw(st.booleans()) else ""
        if draw(st.booleans()):
            values = [str(v) for v in draw(st.lists(INTS, min_size=1, max_size=4))]
            target = draw(numeric())
        else:
            values = [sql_string(v) for v in draw(st.lists(STRINGS, min_size=1, max_size=4))]
            target = draw(text_value())
        if draw(st.booleans()):
            values.append("NULL")
        return f"{target} {negate}IN ({', '.join(values)})"
    if kind == "like":
        negate = "NOT " if draw(st.booleans()) else ""
        like = draw(st.sampled_from(["LIKE", "ILIKE"]))
        return f"{draw(text_value())} {negate}{like} {sql_string(draw(PATTERNS))}"
    if kind == "between":
        negate = "NOT " if draw(st.booleans()) else ""
        low, high = sorted(draw(st.lists(INTS, min_size=2, max_size=2)))
        return f"{draw(numeric())} {negate}BETWEEN {low} AND {high}"
    column = draw(st.sampled_from(["n", "x", "s", "t"]))
    return f"{column} IS {'NOT ' if draw(st.booleans()) else ''}NULL"


def predicates() -> st.SearchStrategy[str]:
    return st.recursive(
        atom(),
        lambda inner: st.one_of(
            st.tuples(inner, st.sampled_from(["AND", "OR"]), inner).map(
                lambda t: f"({t[0]}) {t[1]} ({t[2]})"
            ),
            inner.map(lambda p: f"NOT ({p})"),
        ),
        max_leaves=6,
    )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(predicates())
def test_allowed_predicates_keep_the_rows_polars_sql_keeps(text: str) -> None:
    ours = HYPO.with_row_index().filter(parse_predicate(text, HYPO.columns))["index"]
    trusted = HYPO.with_row_index().filter(pl.sql_expr(text))["index"]  # trusted text, test only
    assert ours.to_list() == trusted.to_list(), text


@pytest.mark.parametrize(
    "text",
    [
        "role IN ('user', 'tool')",
        "role NOT IN ('user', NULL)",
        "priority IN (1, 2.5)",
        "text LIKE 'a%' OR text ILIKE '_b'",
        "priority BETWEEN -1 AND 2",
        "coalesce(priority, 0) > abs(rank)",
        "length(lower(text)) > 2 AND upper(role) <> 'TOOL'",
        "metadata.topic = 'billing'",
        "created_at > TIMESTAMP '2025-01-01'",
        "NOT priority IS NULL",
    ],
)
def test_lowered_predicates_are_row_wise_so_the_optimizer_may_move_them(text: str) -> None:
    from cognoxium.engine.plan import Expression

    assert Expression.of(parse_predicate(text)).elementwise


# ---------------------------------------------------------------------------
# types: with the column types known, values that do not compare are refused

TYPED = pl.Schema(
    {
        "role": pl.Enum(["user", "tool", "system"]),
        "priority": pl.Int64(),
        "rank": pl.Float64(),
        "text": pl.String(),
        "created_at": pl.Datetime("us", "UTC"),
        "metadata": pl.Struct({"x": pl.String(), "n": pl.Struct({"k": pl.Int64()})}),
    }
)


@pytest.mark.parametrize(
    ("text", "parts"),
    [
        (
            "priority = 'high'",
            ["in \"priority = 'high'\"", "column priority is a number (Int64)", "'high' is text"],
        ),
        ("'high' <> priority", ["column priority is a number (Int64)", "compare priority"]),
        ("rank < TRUE", ["column rank is a number (Float64)", "TRUE is a boolean"]),
        ("priority IN ('a', 'b')", ["column priority is a number", "'a' is text"]),
        ("priority BETWEEN 1 AND 'z'", ["column priority is a number", "'z' is text"]),
        ("coalesce(priority, 'x') > 1", ["column priority is a number", "'x' is text"]),
        ("role = 3", ["column role is text (Enum of 'user', 'tool', 'system')", "3 is a number"]),
        (
            "created_at > '2025-11-01'",
            ["column created_at is a time", "TIMESTAMP '2025-11-01'", "DATE '2025-11-01'"],
        ),
        ("created_at BETWEEN '2025-01-01' AND '2025-02-01'", ["TIMESTAMP '2025-01-01'"]),
        ("metadata.x = 1", ["metadata.x is text (String)", "several types", "metadata.x = '1'"]),
        ("metadata.n = 2", ["metadata.n is an object with keys k", "as metadata.n.<key>"]),
        ("lower(priority) = 'x'", ["lower() takes text", "column priority is a number"]),
        ("length(created_at) > 3", ["length() takes text", "column created_at is a time"]),
        ("priority LIKE '1%'", ["LIKE takes text", "column priority is a number"]),
        ("rank ILIKE '1%'", ["ILIKE takes text", "column rank is a number"]),
        ("abs(role) > 1", ["abs() takes a number", "column role is text"]),
        ("lower(role) = 1", ["lower(role) is text (String)", "1 is a number"]),
        ("role AND priority > 1", ["AND takes a boolean", "column role is text"]),
        ("priority > 1 OR lower(role)", ["OR takes a boolean", "lower(role) is text"]),
        ("NOT priority", ["NOT takes a boolean", "column priority is a number"]),
        ("-role = 1", ["'-' takes a number", "column role is text"]),
        ("priority", ["a predicate is a condition (a boolean)", "column priority is a number"]),
        ("(metadata.x)", ["a predicate is a condition", "metadata.x is text"]),
        ("role = 'admin'", ["column role is text (Enum of", "which never holds 'admin'"]),
        ("'usr' <> role", ["which never holds 'usr'; did you mean 'user'?"]),
        ("role IN ('user', 'tol')", ["which never holds 'tol'; did you mean 'tool'?"]),
    ],
)
def test_a_comparison_of_types_that_do_not_compare_names_the_clause_and_types(
    text: str, parts: list[str]
) -> None:
    with pytest.raises(PredicateError) as info:
        parse_predicate(text, TYPED)
    message = str(info.value)
    for part in parts:
        assert part in message, (part, message)


UNTYPED_ROWS = pl.DataFrame(
    {
        "priority": ["high", "x", "10"],
        "created_at": ["2025-12-01", "2025-10-01", None],
        "metadata": [{"x": 1}, {"x": 2}, {"x": None}],
    }
)
"""Columns named as in TYPED, with other types: text priorities and times, a numeric x."""


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ("priority = 'high'", [0]),
        ("created_at > '2025-11-01'", [0]),  # text order, the frame's own type
        ("metadata.x = 1", [0]),
        ("lower(priority) = 'x'", [1]),
        ("priority LIKE '1%'", [2]),
    ],
)
def test_without_types_the_same_predicates_lower_as_before(text: str, kept: list[int]) -> None:
    # With names only, nothing is checked against TYPED: the predicate compares the
    # values of the frame it runs on, as it did before types were known.
    expr = parse_predicate(text, list(TYPED))
    rows = UNTYPED_ROWS.with_row_index("i").filter(expr)
    assert rows.get_column("i").to_list() == kept


TYPED_ROWS = pl.DataFrame(
    {
        "role": ["user", "tool", "system", None],
        "priority": [2, -1, 0, None],
        "rank": [2.5, 1.0, -0.5, None],
        "text": ["a", "bb", None, "c"],
        "created_at": [
            datetime(2025, 12, 1, tzinfo=UTC),
            datetime(2025, 10, 1, tzinfo=UTC),
            datetime(2025, 11, 15, tzinfo=UTC),
            None,
        ],
        "metadata": [
            {"x": "1", "n": {"k": 2}},
            {"x": "2", "n": {"k": 3}},
            {"x": None, "n": None},
            None,
        ],
    },
    schema=TYPED,
)


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ("priority = 2.5", []),
        ("rank IN (1, 2)", [1]),
        ("role = 'user' AND priority > 0", [0]),
        ("role IN ('user', NULL)", [0]),
        ("priority = NULL", []),
        ("created_at > TIMESTAMP '2025-11-01'", [0, 2]),
        ("created_at > DATE '2025-11-01'", [0, 2]),
        ("metadata.x = '1'", [0]),
        ("metadata.n.k = 2", [0]),
        ("metadata.n IS NULL", [2, 3]),
        ("coalesce(NULL, priority) = -1", [1]),
        ("length(lower(role)) = 4", [0, 1]),
        ("NOT (priority > 1) AND (rank < 0 OR role = 'tool')", [1, 2]),
        ("-priority < -rank", [2]),
    ],
)
def test_types_that_compare_are_accepted_and_keep_the_sql_rows(text: str, kept: list[int]) -> None:
    rows = TYPED_ROWS.with_row_index("i").filter(parse_predicate(text, TYPED))
    assert rows.get_column("i").to_list() == kept


def test_the_default_schema_is_the_item_schema_with_its_types() -> None:
    with pytest.raises(PredicateError, match=r"column priority is a number \(Int64\)"):
        parse_predicate("priority = 'high'")


ENUMS = pl.DataFrame(
    {
        "role": ["user", "Tool", "system", None],
        "priority": [1, 2, 3, 4],
        "created_at": [datetime(2025, m, 1, tzinfo=UTC) for m in (10, 11, 12, 12)],
    },
    schema={
        "role": pl.Enum(["user", "Tool", "system"]),
        "priority": pl.Int64,
        "created_at": pl.Datetime("us", "UTC"),
    },
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("lower(role) = 'tool'", [2]),
        ("upper(role) IN ('USER', 'SYSTEM')", [1, 3]),
        ("length(role) = 4", [1, 2]),
        ("role LIKE 'T%'", [2]),
        ("role ILIKE 't%'", [2]),
        ("role NOT LIKE '%s%'", [2]),
        ("lower(role) IS NULL", [4]),
        ("created_at >= TIMESTAMP '2025-11-01'", [2, 3, 4]),
    ],
)
def test_text_functions_and_patterns_read_an_enumeration_as_its_text(
    text: str, expected: list[int]
) -> None:
    for columns in (ENUMS.schema, ENUMS.columns):  # with the types, and with names only
        kept = ENUMS.filter(parse_predicate(text, columns))["priority"].to_list()
        assert kept == expected, (text, columns)


def test_type_helpers_group_types_by_the_values_they_hold() -> None:
    from cognoxium.items.predicate import comparable_types, describe_type, value_dtype

    assert comparable_types(pl.Enum(["a"]), pl.Categorical())
    assert comparable_types(pl.Date(), pl.Datetime("us", "UTC"))
    assert comparable_types(pl.Null(), pl.Int8())
    assert comparable_types(None, pl.String())
    assert not comparable_types(pl.UInt8(), pl.String())
    assert not comparable_types(pl.Struct({"a": pl.Int64}), pl.Int64())
    assert not comparable_types(pl.Boolean(), pl.Int64())
    assert value_dtype(datetime(2025, 1, 1, tzinfo=UTC)) == pl.Datetime("us", "UTC")
    assert value_dtype(True) == pl.Boolean
    assert describe_type(pl.Int64()) == "a number (Int64)"
    assert describe_type(pl.List(pl.String)) == "a list (List(String))"


MIXED_TYPES = pl.DataFrame(
    {
        "n": [1, 2, None, -3],
        "x": [0.5, None, -1.25, 2.0],
        "s": ["ab", "Ba", None, "a_b"],
        "e": ["user", "tool", "user", None],
        "b": [True, False, None, True],
        "d": [datetime(2025, m, 1, tzinfo=UTC) for m in (1, 2, 3, 4)],
    },
    schema_overrides={"e": pl.Enum(["user", "tool"])},
)
OPERANDS = st.sampled_from(
    ["n", "x", "s", "e", "b", "d", "lower(e)", "length(s)", "abs(x)", "coalesce(n, 0)", "-n"]
)
LITERALS = st.sampled_from(
    ["1", "-2.5", "'user'", "'2025-02-01'", "TRUE", "NULL", "TIMESTAMP '2025-02-01'"]
)


@st.composite
def typed_atom(draw: st.DrawFn) -> str:
    left = draw(OPERANDS)
    right = draw(st.one_of(OPERANDS, LITERALS))
    shape = draw(st.sampled_from(["cmp", "in", "between", "like", "not", "bare"]))
    if shape == "cmp":
        return f"{left} {draw(st.sampled_from(['=', '<>', '<', '>=']))} {right}"
    if shape == "in":
        return f"{left} IN ({draw(LITERALS)}, {draw(LITERALS)})"
    if shape == "between":
        return f"{left} BETWEEN {right} AND {draw(LITERALS)}"
    if shape == "like":
        return f"{left} LIKE 'u%'"
    return f"NOT {left}" if shape == "not" else left


def parsed(text: str, schema: pl.Schema) -> pl.Expr | PlanError:
    """The predicate ``text`` lowered over ``schema``, or the PlanError that refuses it."""
    try:
        return parse_predicate(text, schema)
    except PlanError as error:
        return error


FAMILIES = {
    "number": (["n", "x", "abs(x)", "coalesce(n, 0)", "-n", "length(s)"], ["1", "-2.5", "NULL"]),
    "text": (["s", "lower(e)", "e"], ["'user'", "'tool'", "NULL"]),
    "time": (["d"], ["TIMESTAMP '2025-02-01'", "NULL"]),
    "boolean": (["b"], ["TRUE", "NULL"]),
}
"""Operands and literals that compare with each other, by the type of value they hold."""


@st.composite
def well_typed_atom(draw: st.DrawFn) -> str:
    """A condition whose operands compare: accepted when the types are known."""
    family = draw(st.sampled_from(sorted(FAMILIES)))
    operands, literals = FAMILIES[family]
    left = draw(st.sampled_from(operands))
    right = draw(st.sampled_from(operands + literals))
    shape = draw(st.sampled_from(["cmp", "in", "between", "like", "not", "is_null"]))
    if shape == "like" and family == "text":
        return f"{left} LIKE 'u%'"
    if shape == "not" and family == "boolean":
        return f"NOT {left}"
    if shape == "in" and family != "boolean":
        return f"{left} IN ({draw(st.sampled_from(literals))}, {literals[0]})"
    if shape == "between" and family in {"number", "time"}:
        return f"{left} BETWEEN {right} AND {literals[0]}"
    if shape == "is_null":
        return f"{left} IS NULL"
    operator = draw(st.sampled_from(["=", "<>"] if family == "boolean" else ["=", "<>", "<", ">="]))
    return f"{left} {operator} {right}"


@reaching(0.8)
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(typed_atom(), well_typed_atom()), min_size=1, max_size=3))
def test_a_typed_predicate_accepted_runs_and_one_refused_is_a_predicate_error(
    atoms: list[str],
) -> None:
    text = " AND ".join(f"({a})" for a in atoms)
    expr = parsed(text, MIXED_TYPES.schema)
    if isinstance(expr, PlanError):
        # Refused before running, with a PredicateError (no other PlanError) naming
        # the predicate and where in it the refused clause is.
        assert type(expr) is PredicateError, expr
        assert str(expr).startswith(f"predicate {text!r}, at character "), expr
        reached("refused")
        return
    # Accepted: Polars runs it, and it is a condition, one boolean per row (or one
    # for all rows when it reads no column), keeping the rows where it is true.
    verdict = MIXED_TYPES.select(expr.alias("verdict")).get_column("verdict")
    assert verdict.dtype in {pl.Boolean, pl.Null}, (text, verdict.dtype)
    assert verdict.len() in {1, MIXED_TYPES.height}
    kept = MIXED_TYPES.with_row_index("i").filter(expr).get_column("i").to_list()
    truth = verdict.fill_null(False).to_list()
    assert kept == [i for i in range(MIXED_TYPES.height) if truth[i if len(truth) > 1 else 0]]
    reached("accepted")


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ("s < e", [0, 1]),  # 'ab' < 'user', 'Ba' < 'tool' as text; no cast into the enumeration
        ("e > s", [0, 1]),
        ("e > 'user'", [1]),  # the enumeration's order: user < tool
        ("e < 'tool'", [0, 2]),
        ("'tool' > e", [0, 2]),
        ("e BETWEEN 'user' AND 'user'", [0, 2]),
        ("e NOT BETWEEN 'tool' AND 'tool'", [0, 2]),
        ("e > e", []),
        ("e < lower('U')", [1]),  # against other text: text order ('tool' < 'u')
        ("e = lower(e)", [0, 1, 2]),
        ("e = 'user'", [0, 2]),
        ("e <> s", [0, 1]),
    ],
)
def test_an_enumeration_is_ordered_by_its_levels_and_read_as_text_against_other_text(
    text: str, kept: list[int]
) -> None:
    rows = MIXED_TYPES.with_row_index("i").filter(parse_predicate(text, MIXED_TYPES.schema))
    assert rows.get_column("i").to_list() == kept
    if "lower" not in text and "s" not in text.replace("'", " ").split():
        polars = MIXED_TYPES.with_row_index("i").sql(f"SELECT i FROM self WHERE {text}")
        assert polars.get_column("i").to_list() == kept  # as Polars' own SQL reads it


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ("sensitivity > 'internal'", ["confidential", "restricted"]),
        ("sensitivity >= 'internal'", ["internal", "confidential", "restricted"]),
        ("sensitivity BETWEEN 'internal' AND 'confidential'", ["internal", "confidential"]),
        ("retention < 'optional'", ["preferred"]),
        ("retention >= 'preferred'", ["preferred", "optional"]),
    ],
)
def test_sensitivity_and_retention_compare_by_their_levels_as_polars_does(
    text: str, kept: list[str]
) -> None:
    levels = ["public", "internal", "confidential", "restricted"]
    retentions = ["preferred", "preferred", "optional", "optional"]
    frame = CognitionFrame(
        [
            {"id": f"{s}/{r}", "role": "document", "text": s, "sensitivity": s, "retention": r}
            for s, r in zip(levels, retentions, strict=True)
        ]
    )
    got = frame.filter(text).collect()
    column = got.get_column(text.split()[0]).cast(pl.String)
    assert column.unique(maintain_order=True).to_list() == kept
    by_polars = frame.collect().filter(pl.sql_expr(text))
    assert got.get_column("id").to_list() == by_polars.get_column("id").to_list()
    manifest = frame.quarantine(text).pack(1000, as_of=datetime(2026, 1, 1, tzinfo=UTC)).manifest
    held = manifest.to_polars().filter(pl.col("reason") == "quarantined").get_column("id")
    assert held.to_list() == got.get_column("id").to_list()
    with pytest.raises(PredicateError, match=r"never holds 'secret' \(its order: public < "):
        frame.filter("sensitivity > 'secret'")


TEXT_OPERANDS = st.sampled_from(
    ["e", "c", "s", "lower(e)", "upper(s)", "'user'", "'tool'", "'u'", "'zzz'", "'Ba'", "NULL"]
)


@st.composite
def text_comparison(draw: st.DrawFn) -> str:
    a, b, c = draw(TEXT_OPERANDS), draw(TEXT_OPERANDS), draw(TEXT_OPERANDS)
    shape = draw(
        st.sampled_from(
            ["{a} = {b}", "{a} <> {b}", "{a} < {b}", "{a} >= {b}", "{a} BETWEEN {b} AND {c}"]
        )
    )
    return shape.format(a=a, b=b, c=c)


@reaching(0.8)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(text_comparison(), min_size=1, max_size=2), st.sampled_from([" AND ", " OR "]))
def test_an_accepted_comparison_of_enumerations_keeps_the_rows_their_text_keeps(
    clauses: list[str], join: str
) -> None:
    # An enumeration (e) whose order is its text's and a categorical (c) compare as
    # their text, except that a comparison with a string the enumeration cannot hold is
    # refused: where accepted, the rows kept are those the same predicate keeps with
    # both columns cast to String. (An enumeration ordered otherwise is ordered by its
    # levels: the tests above.)
    typed = MIXED_TYPES.with_columns(
        e=pl.col("e").cast(pl.String).cast(pl.Enum(["tool", "user"])),
        c=pl.col("e").cast(pl.Categorical),
    )
    text = typed.with_columns(pl.col("e", "c").cast(pl.String))
    predicate = join.join(clauses)
    expr = parsed(predicate, typed.schema)
    if isinstance(expr, PlanError):
        # Refused: only an equality with a string the column cannot hold, as a
        # PredicateError that says so.
        assert type(expr) is PredicateError, expr
        assert "which never holds" in str(expr), expr
        reached("refused")
        return
    kept = typed.with_row_index("i").filter(expr).get_column("i").to_list()
    as_text = parse_predicate(predicate, text.schema)
    assert kept == text.with_row_index("i").filter(as_text).get_column("i").to_list()
    reached("rows as text")
