"""The built-in recognisers and Presidio's on the test tables of Presidio's own recognisers.

Presidio (``microsoft/presidio``) tests each of its pattern recognisers with a
``pytest.mark.parametrize`` table: a text, how many values its recogniser
must find and where. This script reads those tables from a checkout of
Presidio (they are not shipped with the ``presidio-analyzer`` package, and
are not copied here), runs every case through
:func:`cognoxium.governance.redaction.find_spans` and through Presidio's
analyzer (:class:`cognoxium.governance.presidio.PresidioRecognisers`, the
offline blank-pipeline analyzer at its default score threshold), and counts
the cases each passes.

A case passes when the spans redacted of the table's type are as many as the
table expects and, where the table gives positions, at exactly those
positions (start and end, in characters). The spans redacted are those
:func:`~cognoxium.governance.redaction.redact_text` replaces: spans are found
again in the text with the spans found so far masked, until none is found
(the same for both engines). Scores are not compared.

The tables read, and their settings:

=====================================  ============  ==================================
file                                   type          phone regions
=====================================  ============  ==================================
test_credit_card_recognizer.py         CREDIT_CARD
test_email_recognizer.py               EMAIL
test_iban_recognizer.py                IBAN
test_ip_recognizer.py                  IP_ADDRESS
test_phone_recognizer.py               PHONE         Presidio's default regions (plus JP
                                                     and CN for the table that names them)
test_tr_phone_number_recognizer.py     PHONE         TR
test_ph_mobile_number_recognizer.py    PHONE         PH
test_us_ssn_recognizer.py              US_SSN
=====================================  ============  ==================================

Three columns: Presidio configured as the table's fixture configures it
(its regions, and the leniency of a table that gives one per case);
Cognoxium configured alike (:func:`~cognoxium.governance.redaction.phone_recogniser`
with the same regions in place of the built-in national phone recogniser);
and Cognoxium with its defaults (:data:`~cognoxium.governance.redaction.RECOGNISERS`).

Usage: ``python benchmarks/presidio_tables.py --presidio-tests PATH/presidio-analyzer/tests
[--out benchmarks/results/presidio_tables.md] [--show-misses]``
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cognoxium.governance.redaction import RECOGNISERS, find_spans, phone_recogniser

# File -> (redaction type, Presidio entity, phone regions: None, "default" or a tuple).
TABLES: dict[str, tuple[str, str, Any]] = {
    "test_credit_card_recognizer.py": ("CREDIT_CARD", "CREDIT_CARD", None),
    "test_email_recognizer.py": ("EMAIL", "EMAIL_ADDRESS", None),
    "test_iban_recognizer.py": ("IBAN", "IBAN_CODE", None),
    "test_ip_recognizer.py": ("IP_ADDRESS", "IP_ADDRESS", None),
    "test_phone_recognizer.py": ("PHONE", "PHONE_NUMBER", "default"),
    "test_tr_phone_number_recognizer.py": ("PHONE", "PHONE_NUMBER", ("TR",)),
    "test_ph_mobile_number_recognizer.py": ("PHONE", "PHONE_NUMBER", ("PH",)),
    "test_us_ssn_recognizer.py": ("US_SSN", "US_SSN", None),
}
# Tables whose fixture adds regions to Presidio's default ones.
EXTRA_REGIONS: dict[str, tuple[str, ...]] = {"test_when_all_phones_then_succeed": ("JP", "CN")}
TEXT_COLUMNS = ("text", "iban")
POSITION_COLUMNS = ("expected_positions", "expected_res")


@dataclass(frozen=True)
class Case:
    """One row of a table: the text, how many spans, where (empty: not given), its settings."""

    table: str
    function: str
    text: str
    expected_len: int
    positions: frozenset[tuple[int, int]]
    type: str
    entity: str
    regions: tuple[str, ...] | None
    leniency: int | None


def _literal(node: ast.expr) -> Any:
    """``ast.literal_eval`` that also reads f-strings without placeholders."""
    if isinstance(node, ast.JoinedStr) and all(isinstance(v, ast.Constant) for v in node.values):
        return "".join(str(v.value) for v in node.values)  # type: ignore[attr-defined]
    if isinstance(node, ast.Tuple):
        return tuple(_literal(e) for e in node.elts)
    if isinstance(node, ast.List):
        return [_literal(e) for e in node.elts]
    return ast.literal_eval(node)


def read_cases(folder: Path, default_regions: tuple[str, ...]) -> list[Case]:
    """Every parametrized case of the tables in :data:`TABLES`, in file order.

    Raises
    ------
    FileNotFoundError
        If a table is missing from ``folder``.
    """
    cases: list[Case] = []
    for name, (kind, entity, regions) in TABLES.items():
        tree = ast.parse((folder / name).read_text(encoding="utf-8"))
        for fn in (n for n in tree.body if isinstance(n, ast.FunctionDef)):
            for deco in fn.decorator_list:
                if not (
                    isinstance(deco, ast.Call) and ast.unparse(deco.func).endswith("parametrize")
                ):
                    continue
                columns = [c.strip() for c in _literal(deco.args[0]).split(",")]
                table_regions = None
                if regions == "default":
                    table_regions = default_regions + EXTRA_REGIONS.get(fn.name, ())
                elif regions is not None:
                    table_regions = tuple(regions)
                for row in deco.args[1].elts:  # type: ignore[attr-defined]
                    values = dict(zip(columns, _literal(row), strict=True))
                    text = next(values[c] for c in TEXT_COLUMNS if c in values)
                    where = next((values[c] for c in POSITION_COLUMNS if c in values), ())
                    cases.append(
                        Case(
                            table=name,
                            function=fn.name,
                            text=text,
                            expected_len=int(values["expected_len"]),
                            positions=frozenset((int(s), int(e)) for s, e in where),
                            type=kind,
                            entity=entity,
                            regions=table_regions,
                            leniency=values.get("leniency"),
                        )
                    )
    return cases


def passes(case: Case, found: Sequence[tuple[int, int]]) -> bool:
    """Whether the spans found match the case: their number, and their positions if given."""
    if len(found) != case.expected_len:
        return False
    return not case.positions or set(found) == set(case.positions)


Finder = Callable[[Case, str], list[tuple[int, int]]]


def redacted(case: Case, find: Finder) -> list[tuple[int, int]]:
    """The spans a redaction to a fixed point replaces: found spans masked until none is found."""
    spans: set[tuple[int, int]] = set()
    current = case.text
    for _ in range(8):
        found = find(case, current)
        if not found:
            break
        for start, end in found:
            spans.add((start, end))
            current = current[:start] + "*" * (end - start) + current[end:]
    return sorted(spans)


def cognoxium_defaults(case: Case, text: str) -> list[tuple[int, int]]:
    """The built-in recognisers as they are."""
    return [(s.start, s.end) for s in find_spans(text, types=case.type)]


_NATIONAL = [r for r in RECOGNISERS if r.name == "PHONE" and r.refine is not None]
_OTHERS = tuple(r for r in RECOGNISERS if r not in _NATIONAL)


def cognoxium_configured(case: Case, text: str) -> list[tuple[int, int]]:
    """The built-in recognisers, the national phone one built for the table's regions."""
    if case.regions is None:
        return cognoxium_defaults(case, text)
    recognisers = [*_OTHERS, phone_recogniser(regions=case.regions)]
    return [(s.start, s.end) for s in find_spans(text, types=case.type, recognisers=recognisers)]


def presidio_finder() -> tuple[Finder, tuple[str, ...]]:
    """Presidio's analyzer, with its phone recogniser configured per table; its default regions."""
    from presidio_analyzer import AnalyzerEngine, RecognizerRegistry
    from presidio_analyzer.predefined_recognizers import PhoneRecognizer

    from cognoxium.governance.presidio import PresidioRecognisers

    base = PresidioRecognisers().analyzer
    others = [r for r in base.registry.recognizers if not isinstance(r, PhoneRecognizer)]
    sets: dict[tuple[Any, ...], PresidioRecognisers] = {}

    def recognisers(case: Case) -> PresidioRecognisers:
        key = (case.entity, case.regions, case.leniency)
        if key not in sets:
            phone = PhoneRecognizer(
                supported_regions=case.regions or PhoneRecognizer.DEFAULT_SUPPORTED_REGIONS,
                leniency=1 if case.leniency is None else case.leniency,
            )
            registry = RecognizerRegistry(recognizers=[*others, phone], supported_languages=["en"])
            analyzer = AnalyzerEngine(
                registry=registry, nlp_engine=base.nlp_engine, supported_languages=["en"]
            )
            sets[key] = PresidioRecognisers(entities=[case.entity], analyzer=analyzer)
        return sets[key]

    def find(case: Case, text: str) -> list[tuple[int, int]]:
        (spans,) = recognisers(case).find_batch([text])
        return sorted({(s.start, s.end) for s in spans})

    return find, tuple(PhoneRecognizer.DEFAULT_SUPPORTED_REGIONS)


def _commit(folder: Path) -> str:
    run = subprocess.run(
        ["git", "-C", str(folder), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    )
    return run.stdout.strip() or "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--presidio-tests", type=Path, required=True)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/presidio_tables.md"))
    parser.add_argument("--show-misses", action="store_true")
    args = parser.parse_args()

    presidio, default_regions = presidio_finder()
    cases = read_cases(args.presidio_tests, default_regions)
    finders: dict[str, Finder] = {
        "presidio": presidio,
        "cognoxium": cognoxium_configured,
        "cognoxium_defaults": cognoxium_defaults,
    }
    rows: dict[tuple[str, str], dict[str, int]] = {}
    misses: list[tuple[str, Case, list[tuple[int, int]]]] = []
    for case in cases:
        row = rows.setdefault((case.table, case.function), dict.fromkeys(["cases", *finders], 0))
        row["cases"] += 1
        for name, finder in finders.items():
            found = redacted(case, finder)
            ok = passes(case, found)
            row[name] += ok
            if not ok and name != "cognoxium_defaults":
                misses.append((name, case, found))
    totals = {k: sum(r[k] for r in rows.values()) for k in ("cases", *finders)}

    lines = [
        "| table | test | cases | Presidio | Cognoxium | Cognoxium defaults |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for (table, function), r in rows.items():
        lines.append(
            f"| {table.removeprefix('test_').removesuffix('_recognizer.py')} | {function} "
            f"| {r['cases']} | {r['presidio']} | {r['cognoxium']} | {r['cognoxium_defaults']} |"
        )
    lines.append(
        f"| all | | {totals['cases']} | {totals['presidio']} | {totals['cognoxium']} "
        f"| {totals['cognoxium_defaults']} |"
    )
    table = "\n".join(lines) + "\n"
    commit = _commit(args.presidio_tests)
    text = (
        "# Presidio's recogniser test tables\n\n"
        f"Cases of the `pytest.mark.parametrize` tables of Presidio's tests (checkout at "
        f"commit `{commit}`), run through Presidio's analyzer "
        "(`PresidioRecognisers`, offline, score >= 0.4; phone recogniser with the table's "
        "regions and leniency), through `find_spans` with the national phone recogniser "
        "built for the same regions (Cognoxium), and through `find_spans` with the "
        "built-in recognisers (Cognoxium defaults). A case passes when the spans of the "
        "table's type that a redaction to a fixed point replaces are as many as expected "
        "and, where the table gives positions, at those positions.\n\n"
        "Command: `python benchmarks/presidio_tables.py --presidio-tests "
        "<presidio checkout>/presidio-analyzer/tests`\n\n" + table
    )
    print(table)
    if args.show_misses:
        for name, case, found in misses:
            print(
                f"{name:10} {case.table.removeprefix('test_')[:14]:14} {case.text!r} "
                f"expected {case.expected_len} {sorted(case.positions)} found {found}"
            )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    args.out.with_suffix(".json").write_text(
        json.dumps(
            {
                "presidio_commit": commit,
                "totals": totals,
                "tables": [{"table": t, "test": f, **r} for (t, f), r in rows.items()],
            },
            indent=2,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
