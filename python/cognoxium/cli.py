"""The ``cognoxium`` command line: batch packing and the LoCoMo evaluation.

Commands
--------
``cognoxium pack ITEMS REQUESTS --out DIR``
    Pack every request of a JSONL file over a store of items (see
    :func:`cognoxium.batch.run_batch`).
``cognoxium locomo PATH --out DIR``
    Import LoCoMo, pack a context per question and budget and report evidence
    recall (see :func:`cognoxium.locomo.run_locomo`).

``cognoxium --version``
    Print the installed package version.

Exit codes
----------
0
    Success.
1
    Usage error: an unknown command or option, a bad option value, a missing
    file.
2
    Bad input: a record, request or table is invalid (the message names the
    file, the line and the field), or an input cannot be read or an output
    cannot be written (the message names the path).
3
    Infeasible budget: a request's required items alone exceed its token
    budget.

Errors are printed to standard error as one message, without a traceback.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from enum import StrEnum
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Annotated, Any, Literal, NoReturn

import typer
from rich.console import Console
from rich.table import Table
from typer.core import TyperGroup

from cognoxium.exceptions import BudgetError, CognoxiumError
from cognoxium.tokens import PROFILE_NAMES

__all__ = ["EXIT_BAD_INPUT", "EXIT_BUDGET", "EXIT_OK", "EXIT_USAGE", "app", "main"]

EXIT_OK = 0
"""Success."""
EXIT_USAGE = 1
"""Usage error (unknown option, bad option value, missing file)."""
EXIT_BAD_INPUT = 2
"""Invalid input records or requests, or an input or output path that fails."""
EXIT_BUDGET = 3
"""A request's required items alone exceed its token budget."""


def _usage_exit(exc: typer.TyperException) -> None:
    # Typer's command-line errors (click's UsageError, BadParameter, ...) carry
    # their exit code; click uses 2 for usage errors, this CLI uses 2 for bad input.
    if hasattr(exc, "exit_code"):
        exc.exit_code = EXIT_USAGE


class _Group(TyperGroup):
    """A command group whose usage errors exit with :data:`EXIT_USAGE` (click uses 2)."""

    def make_context(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().make_context(*args, **kwargs)
        except typer.TyperException as exc:
            _usage_exit(exc)
            raise

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except typer.TyperException as exc:
            _usage_exit(exc)
            raise


app = typer.Typer(
    cls=_Group,
    name="cognoxium",
    help="Cognoxium: pack LLM context under token budgets, with a manifest for every decision.",
    epilog=(
        "Examples:\n\n"
        "  cognoxium pack examples/sample/items.jsonl examples/sample/requests.jsonl "
        "--out out/sample --as-of 2026-01-01T00:00:00Z\n\n"
        "  cognoxium locomo ../shared/data/locomo/locomo7.json --out out/locomo "
        "--budgets 1024,2048\n\n"
        "Exit codes: 0 ok, 1 usage error, 2 bad input, 3 infeasible budget."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


class Rank(StrEnum):
    """Ranking methods of the command line."""

    BM25 = "bm25"
    RECENCY = "recency"
    NONE = "none"


def _profile(value: str) -> str:
    if value not in PROFILE_NAMES:
        raise typer.BadParameter(
            f"unknown token profile {value!r}; use one of {list(PROFILE_NAMES)}"
        )
    return value


def _as_of(value: str) -> datetime:
    if value.strip().lower() == "now":
        return datetime.now(UTC)
    try:
        parsed = datetime.fromisoformat(value.strip())
    except ValueError:
        raise typer.BadParameter(
            f"not an ISO 8601 time: {value!r}; use for example 2026-01-01T00:00:00Z, or now"
        ) from None
    if parsed.tzinfo is None:
        raise typer.BadParameter(
            f"{value!r} has no timezone; add one, for example 2026-01-01T00:00:00Z"
        )
    return parsed.astimezone(UTC)


_WHOLE = re.compile(r"[0-9]+")


def _budgets(value: str) -> list[int]:
    """Parse ``--budgets``: comma-separated whole numbers of tokens, each once."""
    budgets: list[int] = []
    usage = "give comma-separated whole numbers of tokens, such as 512,1024,2048"
    for position, raw in enumerate(value.split(","), start=1):
        entry = raw.strip()
        where = f"entry {position} of {value!r}"
        if not entry:
            raise typer.BadParameter(f"{where} is empty; {usage}")
        if entry.startswith("-") and _WHOLE.fullmatch(entry[1:]):
            raise typer.BadParameter(f"budget {entry!r} ({where}) is negative; {usage}")
        if not _WHOLE.fullmatch(entry):
            raise typer.BadParameter(
                f"budget {entry!r} ({where}) is not a whole number of tokens; {usage}"
            )
        budget = int(entry)
        if budget in budgets:
            raise typer.BadParameter(
                f"budget {entry!r} ({where}) repeats entry {budgets.index(budget) + 1}; "
                "give each budget once"
            )
        budgets.append(budget)
    return budgets


def _fail(exc: CognoxiumError, code: int) -> NoReturn:
    typer.echo(f"error: {exc}", err=True)
    raise typer.Exit(code)


def _fail_io(
    exc: OSError | UnicodeDecodeError, action: Literal["read", "write"], default: Path
) -> NoReturn:
    """Report a failed read or write as bad input, naming the path (``default`` if unknown)."""
    if isinstance(exc, UnicodeDecodeError):
        typer.echo(f"error: cannot read {default}: not UTF-8 text ({exc.reason})", err=True)
        raise typer.Exit(EXIT_BAD_INPUT)
    path = Path(exc.filename) if exc.filename is not None else default
    reason = exc.strerror or str(exc) or type(exc).__name__
    hint = ""
    if action == "write" and isinstance(exc, FileExistsError | NotADirectoryError):
        hint = "; --out must be a directory (or a path where one can be made), not a file"
    typer.echo(f"error: cannot {action} {path}: {reason}{hint}", err=True)
    raise typer.Exit(EXIT_BAD_INPUT)


def _package_version() -> str:
    try:
        return version("cognoxium")
    except PackageNotFoundError:
        return "unknown (the package is not installed)"


def _show_version(value: bool) -> None:
    if value:
        typer.echo(f"cognoxium {_package_version()}")
        raise typer.Exit(EXIT_OK)


@app.callback()
def _main(
    show_version: Annotated[
        bool,
        typer.Option(
            "--version",
            help="Print the installed version and exit.",
            callback=_show_version,
            is_eager=True,
        ),
    ] = False,
) -> None:
    """Options that come before the command."""


_EXISTING_FILE: dict[str, Any] = {
    "exists": True,
    "dir_okay": False,
    "readable": True,
    "resolve_path": False,
}


@app.command(
    "pack",
    epilog=(
        "Example:\n\n"
        "  cognoxium pack examples/sample/items.jsonl examples/sample/requests.jsonl "
        "--out out/sample --as-of 2026-01-01T00:00:00Z\n\n"
        'Each request is a JSON object per line: {"id", "budget", "query", "where", '
        '"as_of"}; where is a Polars SQL predicate over the item columns, and '
        "metadata.<key> reaches a metadata field."
    ),
)
def pack_command(
    items: Annotated[
        Path, typer.Argument(help="Items: a .jsonl or .parquet file.", **_EXISTING_FILE)
    ],
    requests: Annotated[
        Path,
        typer.Argument(help="Requests: a .jsonl file, one request per line.", **_EXISTING_FILE),
    ],
    out: Annotated[
        Path,
        typer.Option("--out", "-o", help="Output directory for packs.jsonl and manifests.jsonl."),
    ],
    profile: Annotated[
        str, typer.Option(help=f"Token profile: {', '.join(PROFILE_NAMES)}.", callback=_profile)
    ] = "cl100k_base",
    rank: Annotated[Rank, typer.Option(help="How to rank each request's scope.")] = Rank.BM25,
    as_of: Annotated[
        str,
        typer.Option(
            "--as-of",
            help=(
                "UTC time at which expiry is evaluated for requests without their own as_of: "
                "an ISO 8601 time with a timezone, or 'now' (the default). Give a fixed time "
                "for byte-identical manifests."
            ),
        ),
    ] = "now",
    progress: Annotated[
        bool, typer.Option(help="Show a progress bar (only on a terminal).")
    ] = True,
) -> None:
    """Pack every request of REQUESTS over the items of ITEMS.

    Writes DIR/packs.jsonl (request_id, included ids in order, used_tokens,
    budget) and DIR/manifests.jsonl (one canonical manifest per request).
    A request's own as_of wins over --as-of.
    """
    from cognoxium.batch import read_requests, run_batch
    from cognoxium.io import read_items

    when = _as_of(as_of)
    try:
        store = read_items(items)
    except (OSError, UnicodeDecodeError) as exc:
        _fail_io(exc, "read", items)
    except CognoxiumError as exc:
        _fail(exc, EXIT_BAD_INPUT)
    try:
        batch = read_requests(requests)
        stats = run_batch(
            store,
            batch,
            out_dir=out,
            profile=profile,
            rank=rank.value,
            as_of=when,
            progress=progress,
        )
    except OSError as exc:
        _fail_io(exc, "write", out)
    except BudgetError as exc:
        _fail(exc, EXIT_BUDGET)
    except CognoxiumError as exc:
        _fail(exc, EXIT_BAD_INPUT)
    typer.echo(
        f"{stats.requests} requests in {stats.seconds:.2f} s: "
        f"{stats.packs_per_s:.1f} packs/s, p50 {stats.p50_ms:.2f} ms, p95 {stats.p95_ms:.2f} ms"
    )
    typer.echo(f"wrote {out / 'packs.jsonl'} and {out / 'manifests.jsonl'}")


def _fmt(value: float | None, spec: str = ".3f") -> str:
    return "-" if value is None else format(value, spec)


def _report_tables(report: dict[str, Any]) -> tuple[Table, Table]:
    """The overall figures and the per-category recall, one row per budget."""
    from cognoxium.locomo import CATEGORY_NAMES

    rows = sorted(report["budgets"].items(), key=lambda kv: int(kv[0]))
    overall = Table(
        title="LoCoMo evidence recall (mean per question)",
        caption=(
            "recall 1-4 = mean per-question evidence recall (share of a question's evidence "
            "turns that are packed) over categories 1-4; recall all = the same over all "
            "categories; all found 1-4 = share of questions of categories 1-4 whose evidence "
            "is all packed; tokens = mean tokens used per pack; packs/s = packs per second "
            "of packing. Questions without valid evidence are excluded."
        ),
        caption_justify="left",
    )
    for header in ("budget", "recall 1-4", "recall all", "all found 1-4", "tokens", "packs/s"):
        overall.add_column(header, justify="right")
    for budget, row in rows:
        overall.add_row(
            budget,
            _fmt(row["recall_answerable"]),
            _fmt(row["recall_all"]),
            _fmt(row["hit_rate_answerable"]),
            _fmt(row.get("mean_used_tokens"), ".0f"),
            _fmt(row.get("packs_per_s"), ".1f"),
        )
    per_category = Table(
        title="Recall per question category",
        caption=(
            "Mean per-question evidence recall of each LoCoMo question category "
            "(5 adversarial: questions the conversation does not answer); - = no question."
        ),
        caption_justify="left",
    )
    per_category.add_column("budget", justify="right")
    for category, name in CATEGORY_NAMES.items():
        per_category.add_column(f"{category} {name}", justify="right")
    for budget, row in rows:
        per = row["per_category"]
        per_category.add_row(
            budget, *[_fmt(per.get(str(c), {}).get("recall")) for c in CATEGORY_NAMES]
        )
    return overall, per_category


@app.command(
    "locomo",
    epilog=(
        "Example:\n\n"
        "  cognoxium locomo ../shared/data/locomo/locomo7.json --out out/locomo "
        "--budgets 512,1024,2048,4096 --rank bm25"
    ),
)
def locomo_command(
    path: Annotated[Path, typer.Argument(help="The LoCoMo JSON file.", **_EXISTING_FILE)],
    out: Annotated[
        Path,
        typer.Option(
            "--out",
            "-o",
            help="Output directory: items.parquet, requests.jsonl, packs.jsonl, "
            "manifests.jsonl, report.json.",
        ),
    ],
    budgets: Annotated[
        str, typer.Option(help="Comma-separated token budgets.", callback=_budgets)
    ] = "512,1024,2048,4096",
    rank: Annotated[Rank, typer.Option(help="How to rank each question's scope.")] = Rank.BM25,
    profile: Annotated[
        str, typer.Option(help=f"Token profile: {', '.join(PROFILE_NAMES)}.", callback=_profile)
    ] = "cl100k_base",
    progress: Annotated[
        bool, typer.Option(help="Show a progress bar (only on a terminal).")
    ] = True,
) -> None:
    """Pack a context for every LoCoMo question at each budget and report evidence recall.

    Each question's scope is the dialog turns of its conversation, ranked by
    the question; its as_of is the conversation's latest turn time, so runs
    are deterministic.
    """
    from cognoxium.locomo import run_locomo

    # The callback has already turned the text into a list of budgets.
    chosen: list[int] = budgets  # type: ignore[assignment]
    try:
        report = run_locomo(path, out, chosen, rank=rank.value, profile=profile, progress=progress)
    except OSError as exc:
        reading = exc.filename is not None and Path(exc.filename) == path
        _fail_io(exc, "read" if reading else "write", path if reading else out)
    except BudgetError as exc:
        _fail(exc, EXIT_BUDGET)
    except CognoxiumError as exc:
        _fail(exc, EXIT_BAD_INPUT)
    console = Console(highlight=False)
    for table in _report_tables(report):
        console.print(table)
    imported = report["import"]
    batch = report["batch"]
    console.print(
        f"{imported['questions']} questions x {len(chosen)} budgets = {batch['requests']} packs "
        f"in {batch['seconds']:.1f} s ({batch['packs_per_s']:.1f} packs/s, "
        f"p50 {batch['p50_ms']:.2f} ms, p95 {batch['p95_ms']:.2f} ms); "
        f"{imported.get('questions_without_evidence', 0)} questions without valid evidence "
        f"excluded; evidence ids dropped: {imported.get('question_evidence_malformed', 0)} "
        f"malformed, {imported.get('question_evidence_missing', 0)} naming no turn"
    )
    console.print(f"wrote {out / 'report.json'}")


class Style(StrEnum):
    """Redaction styles offered by ``cognoxium redact``."""

    PLACEHOLDER = "placeholder"
    MASK = "mask"
    HASH = "hash"


@app.command(
    "redact",
    epilog=(
        "Example:\n\n"
        "  cognoxium redact items.jsonl redacted.parquet --types EMAIL,PHONE\n\n"
        "  COGNOXIUM_REDACT_KEY=... cognoxium redact items.jsonl out.jsonl --style hash"
    ),
)
def redact_command(
    source: Annotated[
        Path, typer.Argument(help="Items: a .jsonl or .parquet file.", **_EXISTING_FILE)
    ],
    target: Annotated[
        Path, typer.Argument(help="Where to write the redacted items: .jsonl or .parquet.")
    ],
    style: Annotated[Style, typer.Option(help="How a value is replaced.")] = Style.PLACEHOLDER,
    types: Annotated[
        str | None,
        typer.Option(help="Comma-separated recogniser types (default: all), e.g. EMAIL,PHONE."),
    ] = None,
    key_env: Annotated[
        str,
        typer.Option(help="Environment variable holding the HMAC key of the hash style."),
    ] = "COGNOXIUM_REDACT_KEY",
) -> None:
    """Redact PII and secrets in the Text and Json payloads of SOURCE into TARGET.

    Changed items get a new content hash and a redact lineage edge to their
    previous content. Prints the redactions by type. TARGET is written
    atomically, in the format its suffix names.
    """
    import os

    from cognoxium.frame import CognitionFrame
    from cognoxium.io import read_items, write_jsonl, write_parquet
    from cognoxium.schema import COLUMNS

    writers = {".jsonl": write_jsonl, ".ndjson": write_jsonl, ".parquet": write_parquet}
    writer = writers.get(target.suffix.lower())
    if writer is None:
        typer.echo(f"error: {target}: unsupported file type; use .jsonl or .parquet", err=True)
        raise typer.Exit(EXIT_USAGE)
    kinds = None if types is None else [t.strip() for t in types.split(",") if t.strip()]
    key = os.environ.get(key_env) if style is Style.HASH else None
    try:
        frame = CognitionFrame(read_items(source)).redact(style=style.value, key=key, types=kinds)
    except (OSError, UnicodeDecodeError) as exc:
        _fail_io(exc, "read", source)
    except CognoxiumError as exc:
        if style is Style.HASH and key is None:
            typer.echo(f"error: the hash style needs a key in ${key_env}", err=True)
            raise typer.Exit(EXIT_USAGE) from None
        _fail(exc, EXIT_BAD_INPUT)
    redacted = frame.collect()
    try:
        writer(redacted.select(COLUMNS), target)
    except OSError as exc:
        _fail_io(exc, "write", target)
    totals: dict[str, int] = {}
    for text in redacted.get_column("redactions").to_list():
        for kind, count in json.loads(text).items():
            totals[kind] = totals.get(kind, 0) + count
    changed = int(redacted.get_column("redacted_from").is_not_null().sum())
    table = Table(title=f"{changed} of {redacted.height} items redacted")
    table.add_column("type")
    table.add_column("redactions", justify="right")
    for kind, count in sorted(totals.items()):
        table.add_row(kind, str(count))
    Console(highlight=False).print(table)
    typer.echo(f"wrote {target}")


def main() -> None:
    """Run the ``cognoxium`` command line (the console-script entry point)."""
    app(prog_name="cognoxium")


if __name__ == "__main__":  # pragma: no cover
    main()
