"""The ``cognoxium`` command line: batch packing and the LoCoMo evaluation.

Commands
--------
``cognoxium pack ITEMS REQUESTS --out DIR [--engine ray [--address ADDR]]``
    Pack every request of a JSONL or Parquet file over a store of items (see
    :func:`cognoxium.app.batch.run_batch`), here or as Ray Data tasks (see
    :func:`cognoxium.app.distributed.run_batch_ray`).
``cognoxium locomo PATH --out DIR``
    Import LoCoMo, pack a context per question and budget and report evidence
    recall (see :func:`cognoxium.app.locomo.run_locomo`).
``cognoxium train-ranker PATH --out MODEL``
    Fit the learned ranker on LoCoMo (see :func:`cognoxium.app.ranker.train_ranker`).
``cognoxium redact SOURCE TARGET``
    Redact personal data and secrets in the items of SOURCE into TARGET.
``cognoxium inspect MANIFESTS``
    Summarise manifests: budget use, decisions, reasons, tokens by role,
    tier and source (see :func:`cognoxium.packing.manifests.summarize_manifests`).

``cognoxium --version``
    Print the installed package version.

Exit codes
----------
0
    Success.
1
    Usage error: an unknown command or option, a bad option value, a missing
    required argument or option.
2
    Bad input: a record, request or table is invalid (the message names the
    file, the line and the field), or an input file is missing or cannot be
    read, or an output cannot be written (the message names the path), or
    another run is writing the same ``--out``.
3
    Infeasible budget: a request's required items alone exceed its token
    budget.
4
    Internal error: an exception no command expects, a fault of Cognoxium.
130
    Interrupted by ``SIGINT`` (``Ctrl-C``, ``kill -INT``).
143
    Stopped by ``SIGTERM`` (``kill``).

A command stops the same way on either signal: ``pack`` ends its worker
processes at once, those packing included, and leaves ``--out`` as the last
run that finished left it (see :func:`cognoxium.app.batch.run_batch`); its
message is ``interrupted by SIGINT`` (or ``SIGTERM``), code
``command.interrupted``. A signal that comes once the run is committed
(``--out`` holds it) does not stop the command: it finishes, exits 0 and
notes the signal on standard error.

Errors are printed to standard error as one message, without a traceback.
An exception no command expects is a fault of Cognoxium, not of the input:
it exits with 4 (:data:`EXIT_INTERNAL`), code ``internal.error``, and its
traceback goes to standard error before the message, to report.
With ``--json``, a failed command also prints exactly one JSON object to
standard output (canonical: sorted keys, compact)::

    {"error": {"code": "budget.required_overflow", "message": "...",
               "file": null, "line": null, "field": null,
               "params": {"budget": 64, "costs": {...}, "request_id": "q1"}}}

``code`` is a stable code of :data:`cognoxium.exceptions.ERROR_CODES`
(``usage.invalid`` for a usage error, ``file.unreadable`` and
``file.unwritable`` for paths), ``file``, ``line`` (1-based) and ``field``
locate the error when known, and ``params`` holds its structured values. The
exit code is as without ``--json``.

Output
------
Every command takes ``--quiet`` (print nothing on success) and ``--json``
(print one machine-readable JSON summary, canonical: sorted keys, compact, to
standard output, and nothing else). Progress bars go to standard error, only
when it is a terminal, and never with ``--quiet`` or ``--json``. ``--help``
is as wide as the terminal, or :data:`PIPED_HELP_WIDTH` columns when standard
output is not a terminal (``TERMINAL_WIDTH``, Typer's setting, or
``COLUMNS``, Rich's, set another width).
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import threading
import traceback
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from enum import StrEnum
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, NoReturn

import typer
from typer.core import TyperGroup

from cognoxium._distribution import DISTRIBUTION
from cognoxium.app._outputs import publications
from cognoxium.exceptions import BudgetError, CognoxiumError, ProfileError, SchemaError
from cognoxium.tokens._names import PROFILE_NAMES

if TYPE_CHECKING:
    from collections.abc import Callable

    import polars as pl
    from rich.table import Table

    from cognoxium.app.batch import Request
    from cognoxium.frame.frame import CognitionFrame
    from cognoxium.packing.options import PackOptions
    from cognoxium.retrieval.scope import RetrievalSettings

# The help of every command needs only Typer and Rich: the engine (Polars, Arrow,
# pydantic, tokenizers) and each command's own imports load in the command's body.

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_BUDGET",
    "EXIT_INTERNAL",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_TERMINATED",
    "EXIT_USAGE",
    "PIPED_HELP_WIDTH",
    "app",
    "main",
]

EXIT_OK = 0
"""Success."""
EXIT_USAGE = 1
"""Usage error (unknown option, bad option value, missing argument)."""
EXIT_BAD_INPUT = 2
"""Invalid input records or requests, or an input or output path that fails."""
EXIT_BUDGET = 3
"""A request's required items alone exceed its token budget."""
EXIT_INTERNAL = 4
"""An internal error: a fault of Cognoxium, not of the input (traceback on standard error)."""
EXIT_INTERRUPTED = 128 + signal.SIGINT
"""Interrupted by ``SIGINT`` (130, as a shell reports a process that ``SIGINT`` ended)."""
EXIT_TERMINATED = 128 + signal.SIGTERM
"""Stopped by ``SIGTERM`` (143, as a shell reports a process that ``SIGTERM`` ended)."""


class _Terminated(KeyboardInterrupt):
    """``SIGTERM``, raised where ``SIGINT`` raises ``KeyboardInterrupt``, to stop the same way."""


@contextmanager
def _interrupts() -> Iterator[list[signal.Signals]]:
    """While in the block, ``SIGINT`` and ``SIGTERM`` stop the command, until its run is committed.

    ``SIGINT`` raises ``KeyboardInterrupt`` and ``SIGTERM``
    :class:`_Terminated` in the main thread. ``SIGTERM``'s default ends the
    process at once, with no cleanup: the run's directory and lock file
    stay, and ``multiprocessing``'s resource tracker warns of the pool's
    semaphores. Once the command has committed its run (its ``--out`` link
    swapped, see :func:`~cognoxium.app._outputs.publications`), a signal
    no longer stops it: ``--out`` holds the whole run, so the command
    finishes (removing the run before it, writing its summary) and the
    signal is added to the list the block is given. Off the main thread
    (where a handler cannot be set) the signals keep their handlers.
    """
    late: list[signal.Signals] = []
    if threading.current_thread() is not threading.main_thread():
        yield late
        return
    before = publications()

    def interrupt(signum: int, frame: object) -> None:
        if publications() > before:
            late.append(signal.Signals(signum))
            return
        raise _Terminated if signum == signal.SIGTERM else KeyboardInterrupt

    previous = {signum: signal.signal(signum, interrupt) for signum in _STOPS}
    try:
        yield late
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


_STOPS = (signal.SIGINT, signal.SIGTERM)


def _usage_exit(exc: typer.TyperException) -> None:
    # Typer's command-line errors (click's UsageError, BadParameter, ...) carry
    # their exit code; click uses 2 for usage errors, this CLI uses 2 for bad input.
    if hasattr(exc, "exit_code"):
        exc.exit_code = EXIT_USAGE


class _CommandError(Exception):
    """A failed command: the error as the JSON output has it, and the exit code."""

    def __init__(self, error: dict[str, Any], exit_code: int) -> None:
        super().__init__(error["message"])
        self.error = error
        self.exit_code = exit_code


def _error_dict(
    code: str,
    message: str,
    *,
    file: str | None = None,
    field: str | None = None,
    params: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``error`` object of the JSON output, for an error that is not a CognoxiumError."""
    return {
        "code": code,
        "message": message,
        "file": file,
        "line": None,
        "field": field,
        "params": params or {},
    }


def _usage_error(exc: typer.TyperException) -> dict[str, Any]:
    """The ``error`` object of a command-line usage error (``usage.invalid``)."""
    param = getattr(exc, "param", None)
    hint = getattr(exc, "param_hint", None)
    if isinstance(hint, list | tuple):
        hint = hint[0] if hint else None
    if hint is None and param is not None:
        hint = param.opts[0] if getattr(param, "opts", None) else param.name
    format_message = getattr(exc, "format_message", None)
    message = format_message() if callable(format_message) else str(exc)
    return _error_dict("usage.invalid", message, field=hint)


PIPED_HELP_WIDTH = 132
"""Columns of the help text when standard output is not a terminal.

Rich, which renders Typer's help, falls back to 80 columns there, which
breaks the examples and the option tables' words across lines. A terminal
gets its own width; ``TERMINAL_WIDTH`` (Typer's setting) or ``COLUMNS``
(Rich's) wins over both.
"""


@contextmanager
def _help_width() -> Iterator[None]:
    """Typer's help width (``typer.rich_utils.MAX_WIDTH``) for this run, then the old one."""
    from typer import rich_utils

    saved = rich_utils.MAX_WIDTH
    piped = not sys.stdout.isatty()
    if saved is None and piped and not os.environ.get("COLUMNS", "").strip():
        rich_utils.MAX_WIDTH = PIPED_HELP_WIDTH
    try:
        yield
    finally:
        rich_utils.MAX_WIDTH = saved


class _Group(TyperGroup):
    """A command group whose usage errors exit with :data:`EXIT_USAGE` (click uses 2).

    It also reports a failed command: its message on standard error, and with
    ``--json`` its ``{"error": {...}}`` object on standard output; and renders
    help at :data:`PIPED_HELP_WIDTH` columns when standard output is not a
    terminal.
    """

    def main(self, *args: Any, **kwargs: Any) -> Any:
        with _help_width():
            return super().main(*args, **kwargs)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        """The command ``cmd_name``, its rank options' help naming the methods there are now."""
        command = super().get_command(ctx, cmd_name)
        for param in getattr(command, "params", ()):
            live = _LIVE_HELP.get(param.name)
            if live is not None:
                param.help = live()
        if command is not None:
            _name_params([*command.params, command.get_help_option(ctx)])
        return command

    def get_params(self, ctx: Any) -> Any:
        """The group's parameters, named in its help as the commands' are (see ``_name_params``)."""
        params = super().get_params(ctx)
        _name_params(params)
        return params

    def make_context(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().make_context(*args, **kwargs)
        except typer.TyperException as exc:
            _usage_exit(exc)
            raise

    def invoke(self, ctx: Any) -> Any:
        args = [*getattr(ctx, "_protected_args", []), *ctx.args]
        wants_json = "--json" in args
        try:
            with _interrupts() as late:
                result = super().invoke(ctx)
            if late and "--quiet" not in args:
                typer.echo(
                    f"note: {late[0].name} came after the run was committed; the command "
                    "finished it",
                    err=True,
                )
            return result
        except KeyboardInterrupt as stop:
            terminated = isinstance(stop, _Terminated)
            signum = signal.SIGTERM if terminated else signal.SIGINT
            _report_failure(_interrupted(signum), wants_json=wants_json)
            raise typer.Exit(EXIT_TERMINATED if terminated else EXIT_INTERRUPTED) from None
        except _CommandError as failure:
            _report_failure(failure.error, wants_json=wants_json)
            raise typer.Exit(failure.exit_code) from None
        except typer.TyperException as exc:
            _usage_exit(exc)
            if wants_json and hasattr(exc, "format_message"):
                typer.echo(_canonical_json({"error": _usage_error(exc)}))
            raise
        except (typer.Exit, typer.Abort):
            raise
        except CognoxiumError as exc:
            _report_failure(exc.to_dict(), wants_json=wants_json)
            raise typer.Exit(EXIT_BAD_INPUT) from None
        except Exception as exc:
            traceback.print_exc()
            _report_failure(_internal_error(exc), wants_json=wants_json)
            raise typer.Exit(EXIT_INTERNAL) from None


def _report_failure(error: dict[str, Any], *, wants_json: bool) -> None:
    """Print a failed command's message to standard error and, with ``--json``, its object."""
    typer.echo(f"error: {error['message']}", err=True)
    if wants_json:
        typer.echo(_canonical_json({"error": error}))


def _interrupted(signum: signal.Signals) -> dict[str, Any]:
    """The ``error`` object of a command stopped by ``signum`` (``command.interrupted``)."""
    message = f"interrupted by {signum.name}; the command stopped before it finished"
    return _error_dict("command.interrupted", message, params={"signal": signum.name})


def _internal_error(exc: Exception) -> dict[str, Any]:
    """The ``error`` object of an exception no command expects: a fault to report."""
    kind = f"{type(exc).__module__}.{type(exc).__qualname__}"
    message = (
        f"internal error ({kind}: {exc}); this is a fault of cognoxium, not of the input: "
        "please report it with the traceback above"
    )
    return _error_dict("internal.error", message, params={"exception": kind})


def _name_params(params: Any) -> None:
    """Name arguments by their names (``ITEMS``) and give flags no value in usage and help.

    Typer shows a required argument as ``{items}`` in the usage line and a
    flag, which takes no value, as ``<bool>``; the usage line here reads
    ``cognoxium pack [OPTIONS] ITEMS REQUESTS``, as click's own does.
    """
    for param in params:
        if param.metavar is not None:
            continue
        if param.param_type_name == "argument":
            name = param.name.upper()
            param.metavar = name
            piece = (name if param.required else f"[{name}]") + ("..." if param.nargs != 1 else "")
            param.get_usage_pieces = lambda ctx, piece=piece: [piece]
        elif getattr(param, "is_flag", False):
            param.metavar = ""


_EXIT_CODES_HELP = (
    "Exit codes: 0 ok, 1 usage error, 2 bad input, 3 infeasible budget, 4 internal error, "
    "130 SIGINT, 143 SIGTERM."
)
"""The exit codes line of the help of the commands that pack (pack, locomo)."""
_EXIT_CODES_NO_PACK_HELP = (
    "Exit codes: 0 ok, 1 usage error, 2 bad input, 4 internal error, 130 SIGINT, 143 SIGTERM."
)
"""The exit codes line of the help of the commands that do not pack (they never exit with 3)."""

_Quiet = Annotated[
    bool,
    typer.Option(
        "--quiet", "-q", help="Print nothing on success; errors still go to standard error."
    ),
]
_Json = Annotated[
    bool,
    typer.Option(
        "--json",
        help="Print one JSON summary (sorted keys, compact) to standard output, and nothing else.",
    ),
]
_Progress = Annotated[
    bool,
    typer.Option(
        help="Show progress on standard error: a bar on a terminal, else a line every minute "
        "(never with --quiet or --json)."
    ),
]


def _epilog(*examples: str, note: str = "", packs: bool = False) -> str:
    """A command's help epilog: its examples, an optional note, and the exit codes.

    ``packs``: the command packs, so it can exit with 3 (infeasible budget).
    """
    lines = ["Examples:" if len(examples) > 1 else "Example:", *(f"  {e}" for e in examples)]
    parts = ["\n\n".join(lines)]
    if note:
        parts.append(note)
    parts.append(_EXIT_CODES_HELP if packs else _EXIT_CODES_NO_PACK_HELP)
    return "\n\n".join(parts)


def _canonical_json(value: Any) -> str:
    """``value`` as canonical JSON (sorted keys, compact), the one line of ``--json``."""
    from cognoxium.items.model import canonical_json

    return canonical_json(value)


def _report(summary: dict[str, Any], *, json_output: bool) -> None:
    """Print the JSON summary when asked to (the one line on standard output)."""
    if json_output:
        typer.echo(_canonical_json(summary))


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
        "  cognoxium inspect out/sample --items examples/sample/items.jsonl\n\n"
        "Every command takes --quiet and --json. Exit codes: 0 ok, 1 usage error, 2 bad "
        "input, 3 infeasible budget (pack, locomo), 4 internal error, 130 SIGINT, 143 SIGTERM."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


class ToolErrors(StrEnum):
    """What a pack does with tool messages the chat APIs reject (see ``pack``)."""

    REPAIR = "repair"
    ERROR = "error"


class Target(StrEnum):
    """The API a pack is built for (see ``pack``)."""

    OPENAI = "openai"
    ANTHROPIC = "anthropic"


class StartOn(StrEnum):
    """Where a pack's conversation starts after its system block (see ``pack``)."""

    USER = "user"


class Gaps(StrEnum):
    """What a pack does when a conversation item without a rank does not fit (see ``pack``)."""

    STOP = "stop"
    FILL = "fill"


class Overflow(StrEnum):
    """What a pack does when its required items alone exceed the budget (see ``pack``)."""

    ERROR = "error"
    TRUNCATE = "truncate"


class Engine(StrEnum):
    """Where ``cognoxium pack`` packs (see :mod:`cognoxium.app.distributed`)."""

    LOCAL = "local"
    RAY = "ray"


class ManifestFormat(StrEnum):
    """How ``pack`` and ``locomo`` store manifests (see :mod:`cognoxium.packing.manifests`)."""

    PARQUET = "parquet"
    JSONL = "jsonl"


_Manifests = Annotated[
    ManifestFormat,
    typer.Option(
        "--manifests",
        help="How to store the manifests, in parts (one per task, read in number order): "
        "parquet (DIR/manifests/part-<n>.parquet, one row per entry, and "
        "DIR/manifest_headers/part-<n>.jsonl, one header per request) or jsonl "
        "(DIR/manifests/part-<n>.jsonl, one manifest per line).",
    ),
]


def _batch_files(out: Path, form: ManifestFormat) -> dict[str, str]:
    """The directories of a run's parts in ``form``, by role, as the --json summaries name them."""
    from cognoxium.packing.manifests import MANIFEST_HEADERS, MANIFESTS, PACKS

    files = {"packs": str(out / PACKS), "manifests": str(out / MANIFESTS)}
    if form is ManifestFormat.PARQUET:
        files["manifest_headers"] = str(out / MANIFEST_HEADERS)
    return files


_BUILT_IN_RANKS = (
    "bm25",
    "embedding",
    "hybrid",
    "hybrid-lineage",
    "learned",
    "recency",
    "priority",
    "strategies",
    "none",
)
"""The rank methods a help names before the engine is loaded: ``--help`` loads no engine.

The rank registry's built-in methods and ``none``, as
:func:`cognoxium.app.batch.batch_rank_methods` gives them (a test holds the two
equal). Once the engine is loaded the help names the registry's methods,
which include those an application registered.
"""


def _rank_methods() -> tuple[str, ...]:
    """The methods ``--rank`` takes, as the help names them (see :data:`_BUILT_IN_RANKS`)."""
    if "cognoxium.engine.ranks" not in sys.modules:
        return _BUILT_IN_RANKS
    from cognoxium.app.batch import batch_rank_methods

    return batch_rank_methods()


def _rank_help() -> str:
    return (
        f"How to rank each scope by its query: {', '.join(_rank_methods())}. The default, "
        "learned, is a logistic model over ranking features fitted on LoCoMo (see cognoxium "
        "train-ranker); hybrid-lineage fuses BM25, embedding cosine, the cosine of each item "
        "read with the one before it and the best cosine of items derived from it; "
        "strategies is the context strategy registry's assembly; none ranks nothing, so "
        "conversation items go newest first (see --gaps) and the others by token cost. Every "
        "method is described under CognitionFrame.rank."
    )


def _compare_help() -> str:
    return (
        "Comma-separated rank methods to run on the same questions in the same run for the "
        f"report's comparison (files in DIR/compare/<method>/), each one of "
        f"{', '.join(_rank_methods())}; '' compares none."
    )


_LIVE_HELP: dict[str, Callable[[], str]] = {"rank": _rank_help, "compare": _compare_help}
"""The options whose help :class:`_Group` writes when a command runs, by parameter name."""


def _rank_option(value: str) -> str:
    """Check ``--rank`` against the rank registry (when the command runs, not for its help)."""
    from cognoxium.app.batch import check_rank_method

    try:
        check_rank_method(value)
    except CognoxiumError as exc:
        raise typer.BadParameter(str(exc)) from None
    return value


_RankOption = Annotated[
    str, typer.Option(help=_rank_help(), metavar="METHOD", callback=_rank_option)
]
_Model = Annotated[
    str,
    typer.Option(help="Embedding model of the retrieval ranks: minilm or local_hash."),
]
_Neighbours = Annotated[
    float,
    typer.Option(
        min=0.0,
        max=1.0,
        help="Neighbour expansion of the retrieval ranks: each item also scores this share "
        "of its adjacent items' scores (0 turns it off).",
    ),
]
_Ranker = Annotated[
    Path | None,
    typer.Option(
        "--ranker",
        help="Model file of the learned rank (cognoxium train-ranker writes one); "
        "default: the model shipped with the package.",
        exists=True,
        dir_okay=False,
        readable=True,
    ),
]


def _retrieval(model: str, neighbours: float, ranker: Path | None = None) -> RetrievalSettings:
    from cognoxium.retrieval.embeddings import EMBEDDER_NAMES
    from cognoxium.retrieval.scope import RetrievalSettings

    if model not in EMBEDDER_NAMES:
        raise typer.BadParameter(
            f"unknown model {model!r}; use one of {list(EMBEDDER_NAMES)}", param_hint="--model"
        )
    return RetrievalSettings(
        model=model, neighbours=neighbours, ranker=None if ranker is None else str(ranker)
    )


def _pack_options(**given: Any) -> PackOptions:
    """The pack options of the command's flags (a bad value is a usage error)."""
    from cognoxium.packing.options import PackOptions

    try:
        return PackOptions(**given)
    except CognoxiumError as exc:
        raise typer.BadParameter(str(exc)) from None


_EMBEDDING_RANKS = frozenset({"learned", "hybrid-lineage", "hybrid", "embedding"})
"""The built-in rank methods that embed texts (their model is loaded ahead)."""


def _preload_model(rank: str, retrieval: RetrievalSettings) -> None:
    """Start loading the embedding model ``rank`` uses, in the background (see ``preload``)."""
    if rank not in _EMBEDDING_RANKS:
        return
    from cognoxium.retrieval.embeddings import preload

    name = retrieval.model
    if rank == "learned":
        from cognoxium.retrieval.learned import load_model

        try:
            name = load_model(retrieval.ranker).embedding_model
        except CognoxiumError:
            return  # the rank names the unreadable model file when it loads it
    preload(name)


_PROFILE_HELP = (
    f"Token profile: {', '.join(PROFILE_NAMES)}, an OpenAI model name (gpt-4o, gpt-4.1-mini, "
    "o3, gpt-4, gpt-3.5-turbo, ...) or huggingface:PATH of a tokenizer.json."
)


def _profile(value: str) -> str:
    from cognoxium.tokens.profiles import get_profile

    try:
        get_profile(value)
    except ProfileError as exc:
        raise typer.BadParameter(str(exc)) from None
    return value


_AS_OF_HINT = "'--as-of'"
"""How a usage error names the option (the value is read in the command, not a callback)."""


def _as_of(value: str) -> datetime:
    """The UTC time of ``--as-of`` (``now``: the current time); a bad value names the option."""
    from cognoxium.items._checks import FINE_TIME_MESSAGE, finer_than_microseconds, to_utc

    if value.strip().lower() == "now":
        return datetime.now(UTC)
    if finer_than_microseconds(value):
        raise typer.BadParameter(f"{value!r} {FINE_TIME_MESSAGE}", param_hint=_AS_OF_HINT)
    try:
        parsed = datetime.fromisoformat(value.strip())
    except ValueError:
        raise typer.BadParameter(
            f"not an ISO 8601 time: {value!r}; use for example 2026-01-01T00:00:00Z, or now",
            param_hint=_AS_OF_HINT,
        ) from None
    if parsed.tzinfo is None:
        raise typer.BadParameter(
            f"{value!r} has no timezone; add one, for example 2026-01-01T00:00:00Z",
            param_hint=_AS_OF_HINT,
        )
    try:
        return to_utc(parsed)
    except ValueError as exc:
        raise typer.BadParameter(f"{value!r}: {exc}", param_hint=_AS_OF_HINT) from None


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
    """Fail the command with ``exc`` (its code, location and params) and exit code ``code``."""
    raise _CommandError(exc.to_dict(), code) from None


def _fail_io(
    exc: OSError | UnicodeDecodeError, action: Literal["read", "write"], default: Path
) -> NoReturn:
    """Report a failed read or write as bad input, naming the path (``default`` if unknown)."""
    code = "file.unreadable" if action == "read" else "file.unwritable"
    if isinstance(exc, UnicodeDecodeError):
        message = f"cannot read {default}: not UTF-8 text ({exc.reason})"
        error = _error_dict(code, message, file=str(default), params={"reason": "not UTF-8"})
        raise _CommandError(error, EXIT_BAD_INPUT) from None
    path = Path(exc.filename) if exc.filename is not None else default
    reason = exc.strerror or str(exc) or type(exc).__name__
    hint = ""
    if action == "write" and isinstance(exc, FileExistsError | NotADirectoryError):
        hint = "; --out must be a directory (or a path where one can be made), not a file"
    message = f"cannot {action} {path}: {reason}{hint}"
    error = _error_dict(code, message, file=str(path), params={"reason": reason})
    raise _CommandError(error, EXIT_BAD_INPUT) from None


def _package_version() -> str:
    try:
        return version(DISTRIBUTION)
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


def _readable_file(path: Path | None) -> Path | None:
    """Check an input file before any work: one that cannot be read is bad input (exit 2)."""
    if path is None:  # an optional file that was not given
        return None
    if path.is_dir():
        reason = "is a directory, not a file"
    elif not path.exists():
        reason = "no such file"
    elif not os.access(path, os.R_OK):
        reason = "permission denied"
    else:
        return path
    message = f"cannot read {path}: {reason}"
    error = _error_dict("file.unreadable", message, file=str(path), params={"reason": reason})
    raise _CommandError(error, EXIT_BAD_INPUT)


_EXISTING_FILE: dict[str, Any] = {"callback": _readable_file}


def _readable_store(path: Path) -> Path:
    """Check the items argument of pack: a readable file, or a directory of partitions."""
    readable = path.is_dir() and os.access(path, os.R_OK | os.X_OK)
    if readable and any("=" in name for name in os.listdir(path)):
        return path  # a hive-partitioned store; read_store checks the rest
    checked = _readable_file(path)
    assert checked is not None
    return checked


def _readable_manifests(path: Path) -> Path:
    """Check the manifests argument of inspect: a directory or a readable file."""
    if path.is_dir() and os.access(path, os.R_OK | os.X_OK):
        return path
    checked = _readable_file(path)
    assert checked is not None
    return checked


def _pack_store(items: Path, *, quiet: bool = False) -> CognitionFrame:
    """The items pack packs: a store directory scanned lazily, any other store read whole.

    A hive-partitioned directory is checked whole first, a batch of rows at
    a time (:func:`~cognoxium.items.store.check_store`), then scanned: each
    scope reads only its partitions, so the memory follows the scopes packed
    at once, not the store. A directory that fails the check or the scan is
    read whole (:func:`~cognoxium.items.store.read_store`), which raises its
    error; when that read succeeds, standard error says why the store was
    not scanned (unless ``quiet``).
    """
    import polars as pl

    from cognoxium.engine.plan import LazySource, Scan
    from cognoxium.frame.frame import CognitionFrame
    from cognoxium.items.io import read_items
    from cognoxium.items.scan import scan_parquet_items
    from cognoxium.items.schema import COLUMNS
    from cognoxium.items.store import check_store, partition_key, read_store

    # The readers check every item: the frame need not check them again.
    if not items.is_dir():
        return CognitionFrame._of_checked(read_items(items))
    key = partition_key(items)
    assert key is not None
    try:
        check_store(items)
        scan = scan_parquet_items(items, hive_partitioning=True, hive_schema={key: pl.String()})
    except (CognoxiumError, OSError, pl.exceptions.PolarsError) as exc:
        whole = CognitionFrame._of_checked(read_store(items))
        if not quiet:
            typer.echo(
                f"warning: {items} is read whole, not scanned a scope at a time, so memory "
                f"follows the store: {exc}; a store written by "
                "cognoxium.items.write_partitioned (every item column) is scanned",
                err=True,
            )
        return whole
    return CognitionFrame._wrap(Scan(source=LazySource(scan))).select(*COLUMNS)


@app.command(
    "pack",
    epilog=_epilog(
        "cognoxium pack examples/sample/items.jsonl examples/sample/requests.jsonl "
        "--out out/sample --as-of 2026-01-01T00:00:00Z",
        "cognoxium pack items.parquet requests.jsonl --out out/recent --rank recency --json",
        "cognoxium pack chats.jsonl --conversations --budget 8000 --out out/chats",
        note='Each request is a JSON object per line: {"id", "budget", "reserve", "overflow", '
        '"query", "where", "as_of", "evidence", "labels", "turns", "start_on", "gaps", '
        '"tool_errors", "target", "gap_note", "previous"}; turns (true/false) packs whole '
        'turns, start_on ("user") starts the pack on a user message after the system block, '
        "gaps, tool_errors, target and gap_note are as the flags of the same names, previous "
        "names an earlier request of the same where whose pack this one continues; where is "
        "a SQL predicate over the item "
        "columns (comparisons, AND/OR/NOT, IN, LIKE, BETWEEN, IS NULL, lower, upper, length, "
        "coalesce, abs; no subqueries, table functions or comments), and metadata.<key> "
        "reaches a metadata field. --json prints "
        '{"command", "requests", "seconds", "packs_per_s", "p50_ms", "p95_ms", "unscoped", '
        '"newest_user_left_out", "files"}, unscoped the number of requests whose where matched '
        "no item (each packed empty), newest_user_left_out the number whose conversation, "
        "packed newest first, left out its newest user message for the budget; without "
        "--quiet and --json a warning on standard error names them.",
        packs=True,
    ),
)
def pack_command(
    items: Annotated[
        Path,
        typer.Argument(
            help="Items: a .jsonl or .parquet file, or a hive-partitioned Parquet store "
            "directory (<key>=<value>/*.parquet).",
            callback=_readable_store,
        ),
    ],
    out: Annotated[
        Path,
        typer.Option(
            "--out",
            "-o",
            help="Output directory for the packs and the manifests (DIR/packs/, DIR/manifests/, "
            "in parts): a link to the last finished run's files, swapped in one step (missing, "
            "empty or written by a run).",
        ),
    ],
    requests: Annotated[
        Path | None,
        typer.Argument(
            help="Requests: a .jsonl file, one request per line, or a .parquet file, one per "
            "row. Left out with --conversations and --budget: one request per conversation.",
            **_EXISTING_FILE,
        ),
    ] = None,
    conversations: Annotated[
        bool,
        typer.Option(
            "--conversations",
            help='ITEMS is a .jsonl file of chat conversations, one {"conversation_id", '
            '"messages"} object per line (OpenAI chat messages, as exported chat logs and '
            "fine-tuning files hold them): each message is an item whose "
            "metadata.conversation is its conversation's id (see read_openai_conversations). "
            "Tool results that break the chat APIs' rules are read, for --tool-errors to "
            "repair or refuse.",
        ),
    ] = False,
    budget: Annotated[
        int | None,
        typer.Option(
            min=0,
            help="With --conversations and no REQUESTS: pack each conversation, in file order, "
            "as a request of this many tokens, its id the conversation's id.",
        ),
    ] = None,
    profile: Annotated[str, typer.Option(help=_PROFILE_HELP, callback=_profile)] = "cl100k_base",
    rank: _RankOption = "learned",
    manifests: _Manifests = ManifestFormat.PARQUET,
    bodies: Annotated[
        bool,
        typer.Option(
            "--bodies/--no-bodies",
            help="Write each pack's body in its packs line: the messages of the model API "
            "request that sends it (for --target anthropic also its system), with the texts "
            "the pack cut and its gap notes, which the ids alone cannot rebuild. --no-bodies "
            "writes the ids only.",
        ),
    ] = True,
    model: _Model = "minilm",
    neighbours: _Neighbours = 0.0,
    ranker: _Ranker = None,
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
    reserve: Annotated[
        int,
        typer.Option(
            min=0,
            help="Tokens of each budget kept for the reply, for requests without their own "
            "reserve: the items fit in budget - reserve.",
        ),
    ] = 0,
    overflow: Annotated[
        Overflow,
        typer.Option(
            help="When a request's required items alone exceed budget - reserve: 'error' "
            "(exit 3) or 'truncate' (cut its truncatable required items), for requests "
            "without their own overflow.",
        ),
    ] = Overflow.ERROR,
    turns: Annotated[
        bool,
        typer.Option(
            "--turns",
            help="Pack whole turns (a user message with the replies and tool exchanges that "
            "answer it), for requests without their own turns.",
        ),
    ] = False,
    start_on: Annotated[
        StartOn | None,
        typer.Option(
            help="'user': after the system block each pack starts on a user message, for "
            "requests without their own start_on.",
        ),
    ] = None,
    tool_errors: Annotated[
        ToolErrors,
        typer.Option(
            help="Tool messages the chat APIs reject (a call without its result, a result "
            "without its call or after another message, a call answered twice; for "
            "--target anthropic, a call whose arguments are not a JSON object): 'repair' "
            "leaves them out, each with its reason in the manifest; 'error' fails the "
            "request (exit 2); for requests without their own tool_errors.",
        ),
    ] = ToolErrors.REPAIR,
    target: Annotated[
        Target,
        typer.Option(
            help="The API the packs are built for: 'anthropic' makes each pack a valid "
            "Anthropic Messages request (it starts on a user message; an opening user "
            "message it needs is counted); for requests without their own target.",
        ),
    ] = Target.OPENAI,
    gaps: Annotated[
        Gaps,
        typer.Option(
            help="When a conversation item without a rank (taken newest first) does not fit: "
            "'stop' keeps an unbroken tail of the conversation, 'fill' fills the space with "
            "older items and marks each hole in the manifest; for requests without their own "
            "gaps.",
        ),
    ] = Gaps.STOP,
    gap_note: Annotated[
        str | None,
        typer.Option(
            help="The text of a message put in place of each hole in a packed conversation, "
            "{n} the items left out there, as '({n} earlier messages omitted)'; counted in "
            "the budget and recorded in the manifest's gap_records; for requests without "
            "their own gap_note. Default: no message.",
        ),
    ] = None,
    cache_model: Annotated[
        str | None,
        typer.Option(
            help="The provider's prompt cache model, as 'openai:gpt-5' or "
            "'anthropic:claude-sonnet-4-5', under which the manifest of each request that "
            "continues an earlier one (its 'previous') bills its input: cached, written and "
            "uncached tokens. Default: not billed.",
        ),
    ] = None,
    engine: Annotated[
        Engine,
        typer.Option(
            help="Where to pack: 'local' (this machine) or 'ray' (Ray Data, tasks of several "
            "scopes, each writing its parts into DIR, which must be on storage every worker "
            "writes; needs the ray extra and a Parquet store; same files as local)."
        ),
    ] = Engine.LOCAL,
    address: Annotated[
        str | None,
        typer.Option(
            help="With --engine ray: the Ray cluster to connect to ('auto', "
            "'ray://head:10001'); default a local Ray started for the run."
        ),
    ] = None,
    workers: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Processes that pack scopes at once (default: one per CPU); with --engine "
            "ray, most Ray tasks at once. The files are the same whatever the number.",
        ),
    ] = None,
    progress: _Progress = True,
    quiet: _Quiet = False,
    json_output: _Json = False,
) -> None:
    """Pack every request of REQUESTS over the items of ITEMS.

    With --conversations and --budget (no REQUESTS), ITEMS is a chat export and
    each of its conversations is a request.

    Writes the packs, DIR/packs/part-<n>.jsonl (request_id, included ids in order,
    used_tokens, budget, and the body to send: {"messages"}, or {"system", "messages"}
    for --target anthropic), and the manifests: DIR/manifests/part-<n>.parquet (one row
    per entry) and DIR/manifest_headers/part-<n>.jsonl (one header per request), or
    with --manifests jsonl DIR/manifests/part-<n>.jsonl (one canonical manifest per
    request). Each task of scopes writes its own part <n> (00000, 00001, ...: five
    digits at least); the parts in number order make each table, the same whatever
    --workers and --engine. A request's own as_of wins over --as-of. DIR is a link
    to DIR.<run id>, swapped when every file is written, so readers see the files of
    one run; a second run into DIR while one writes exits with 2. With --engine ray
    the scopes are packed as Ray Data tasks over a Parquet store (a hive-partitioned
    directory or a file) and the files are the same, byte for byte; a request whose
    scope has no item exits with 2.
    """
    retrieval = _retrieval(model, neighbours, ranker)
    if engine is Engine.LOCAL:
        _preload_model(rank, retrieval)  # loads while the modules below and the items are read

    from cognoxium.app.batch import read_requests
    from cognoxium.frame.frame import CognitionFrame

    options = _pack_options(
        profile=profile,
        as_of=_as_of(as_of),
        reserve=reserve,
        overflow="truncate" if overflow is Overflow.TRUNCATE else "error",
        turns=turns,
        start_on="user" if start_on is StartOn.USER else None,
        tool_errors=tool_errors.value,
        target=target.value,
        gaps="fill" if gaps is Gaps.FILL else "stop",
        gap_note=gap_note,
        cache_model=cache_model,
    )
    _check_requests_given(items, requests, conversations, budget, engine)
    store = _conversations(items, tool_errors) if conversations else items
    runner = _batch_runner(engine, store, address, workers, quiet=quiet or json_output)
    try:
        if requests is None:
            assert isinstance(store, CognitionFrame)
            assert budget is not None
            batch = _export_requests(items, store, budget)
        else:
            batch = read_requests(requests)
        stats = runner(
            batch,
            out_dir=out,
            options=options,
            rank=rank,
            retrieval=retrieval,
            manifests=manifests.value,
            bodies=bodies,
            progress=progress and not (quiet or json_output),
        )
    except OSError as exc:
        _fail_io(exc, "write", out)
    except BudgetError as exc:
        _fail(_export_overflow(exc) if requests is None else exc, EXIT_BUDGET)
    except CognoxiumError as exc:
        _fail(exc, EXIT_BAD_INPUT)
    files = _batch_files(out, manifests)
    if not (quiet or json_output):
        _warn_unscoped(stats.unscoped, conversations=requests is None)
        _warn_left_out(stats.newest_user_left_out, conversations=requests is None)
        _warn_cache_target(options)
    _report({"command": "pack", **stats.to_dict(), "files": files}, json_output=json_output)
    if quiet or json_output:
        return
    typer.echo(
        f"{stats.requests} requests in {stats.seconds:.2f} s: "
        f"{stats.packs_per_s:.1f} packs/s; a pack after its scope's shared work (embeddings, "
        f"indexes): p50 {stats.p50_ms:.2f} ms, p95 {stats.p95_ms:.2f} ms"
    )
    typer.echo(f"wrote the parts of {files['packs']} and {files['manifests']}")


def _export_overflow(exc: BudgetError) -> BudgetError:
    """A chat export's overflow, naming the one remedy there is: ``--budget``.

    The required messages of a chat export are its system and developer
    messages, which its lines cannot mark truncatable or optional.
    """
    needed = exc.params.get("budget_needed")
    if exc.code != BudgetError.default_code or not isinstance(needed, int):
        return exc
    message = (
        f"conversation {exc.params.get('request_id')!r}: its system and developer messages, "
        f"which every pack sends whole, do not fit --budget: {exc.costs} tokens; raise "
        f"--budget to at least {needed}"
    )
    return BudgetError(message, costs=exc.costs, budget=exc.budget, params=exc.params)


def _warn_unscoped(unscoped: Sequence[str], *, conversations: bool = False) -> None:
    """Say on standard error which requests' ``where`` matched no item (packed empty).

    With ``conversations``, the requests are a chat export's conversations,
    and those are the conversations without a message.
    """
    if not unscoped:
        return
    shown = ", ".join(repr(i) for i in unscoped[:5]) + (", ..." if len(unscoped) > 5 else "")
    what = (
        "conversation(s) packed empty, holding no message"
        if conversations
        else "request(s) packed empty, their where matching no item"
    )
    typer.echo(f"warning: {len(unscoped)} {what}: {shown}", err=True)


def _warn_left_out(left_out: Sequence[str], *, conversations: bool = False) -> None:
    """Say on standard error which requests' packs left out their newest user message.

    With ``conversations``, the requests are a chat export's conversations,
    whose messages cannot be marked truncatable: the remedy is the budget.
    """
    if not left_out:
        return
    shown = ", ".join(repr(i) for i in left_out[:5]) + (", ..." if len(left_out) > 5 else "")
    remedy = (
        "raise --budget"
        if conversations
        else "raise the budget, or mark long messages truncatable (metadata.truncate)"
    )
    typer.echo(
        f"warning: {len(left_out)} request(s) left out their newest user message, which did "
        f"not fit in the budget (the pack asks an older question, or none): {shown}; {remedy}",
        err=True,
    )


def _warn_cache_target(options: PackOptions) -> None:
    """Say on standard error when --cache-model bills a cache that --target's bodies do not use.

    Anthropic caches a prefix only at the ``cache_control`` marks of an
    Anthropic body; OpenAI caches prefixes of Chat Completions requests
    without marks. A cache model of the other provider bills, in each
    continuing pack's manifest, cached tokens the provider will not cache.
    """
    from cognoxium.packing.cache_models import get_cache_model

    if options.cache_model is None:
        return
    model = get_cache_model(options.cache_model)
    wants, how = _CACHED_BY[model.kind]
    if options.target != wants:
        typer.echo(
            f"warning: --cache-model {model.name} {how}, not --target {options.target} ones: "
            "the manifests of the requests without their own target bill cached tokens the "
            f"provider will not cache; use --target {wants}, or a cache model for "
            f"{options.target}",
            err=True,
        )


_CACHED_BY = {
    "breakpoints": (
        "anthropic",
        "caches at the cache_control marks of --target anthropic requests",
    ),
    "automatic": ("openai", "caches the prompt prefixes of --target openai requests"),
}
"""Per cache kind: the target whose requests it caches, and how."""


def _check_requests_given(
    items: Path, requests: Path | None, conversations: bool, budget: int | None, engine: Engine
) -> None:
    """Refuse a pack whose requests are given twice or not at all (a usage error, exit 1).

    Also a Parquet file given as a chat export, and a chat export with Ray.
    """
    if requests is not None and budget is not None:
        raise typer.BadParameter(
            "give REQUESTS or --budget (with --conversations), not both", param_hint="--budget"
        )
    if budget is not None and not conversations:
        raise typer.BadParameter(
            "--budget packs each conversation of a chat export: give it with --conversations",
            param_hint="--budget",
        )
    if requests is None and not (conversations and budget is not None):
        raise typer.BadParameter(
            "REQUESTS is needed, unless --conversations and --budget pack each conversation "
            "of ITEMS",
            param_hint="REQUESTS",
        )
    if conversations and items.suffix.lower() == ".parquet":
        raise typer.BadParameter(
            "--conversations reads a .jsonl file of chat conversations, one per line; "
            "a Parquet file of items is packed without it",
            param_hint="--conversations",
        )
    if conversations and engine is Engine.RAY:
        raise typer.BadParameter(
            "--engine ray packs a Parquet store; --conversations reads a JSONL file",
            param_hint="--engine",
        )


def _conversations(items: Path, tool_errors: ToolErrors) -> CognitionFrame:
    """The chat conversations of the JSONL file ``items`` as items (exit 2 when bad)."""
    from cognoxium.formats.openai import read_openai_conversations

    try:
        if tool_errors is ToolErrors.REPAIR:  # read, for the packs to leave out
            return read_openai_conversations(items, tool_errors="keep")
        return read_openai_conversations(items, tool_errors="error")
    except (OSError, UnicodeDecodeError) as exc:
        _fail_io(exc, "read", items)
    except CognoxiumError as exc:
        _fail(exc, EXIT_BAD_INPUT)


def _export_requests(items: Path, store: CognitionFrame, budget: int) -> list[Request]:
    """One request per conversation of the chat export ``items``, in file order.

    A conversation without messages has no item: when the file holds more
    conversations than the items name, their ids are read from it, and
    each of those gets a request that packs nothing (reported as such).
    """
    from cognoxium.app.batch import conversation_requests
    from cognoxium.items.io import parse_json_lines

    requests = conversation_requests(store, budget)
    with items.open("rb") as lines:
        conversations = sum(1 for line in lines if line.strip())
    if conversations == len(requests):
        return requests
    ids = [record["conversation_id"] for _, record in parse_json_lines(items)]
    return conversation_requests(store, budget, conversations=ids)


def _batch_runner(
    engine: Engine,
    items: Path | CognitionFrame,
    address: str | None,
    workers: int | None,
    *,
    quiet: bool,
) -> Callable[..., Any]:
    """The batch run of ``pack``: over the store ``items`` here, or as Ray Data tasks.

    The local runner reads the store now (unless ``items`` is one already):
    a store it cannot read fails the command (exit 2).
    """
    from functools import partial

    from cognoxium.app.batch import run_batch
    from cognoxium.app.distributed import run_batch_ray

    if engine is Engine.RAY:  # Ray's own lines are progress output
        assert isinstance(items, Path)
        return partial(run_batch_ray, items, address=address, workers=workers, quiet=quiet)
    if not isinstance(items, Path):
        return partial(run_batch, items, workers=workers)
    try:
        return partial(run_batch, _pack_store(items, quiet=quiet), workers=workers)
    except (OSError, UnicodeDecodeError) as exc:
        _fail_io(exc, "read", items)
    except CognoxiumError as exc:
        _fail(exc, EXIT_BAD_INPUT)


@app.command(
    "locomo",
    epilog=_epilog(
        "cognoxium locomo ../shared/data/locomo/locomo7.json --out out/locomo "
        "--budgets 512,1024,2048,4096 --rank bm25",
        "cognoxium locomo locomo7.json --out out/recency --rank recency --json > report.json",
        note='--json prints {"command", "files", "report"}, report being DIR/report.json.',
        packs=True,
    ),
)
def locomo_command(
    path: Annotated[Path, typer.Argument(help="The LoCoMo JSON file.", **_EXISTING_FILE)],
    out: Annotated[
        Path,
        typer.Option(
            "--out",
            "-o",
            help="Output directory: items.parquet, requests.jsonl, the packs and the manifests "
            "in parts (packs/, manifests/; see --manifests), report.json; a link to the last "
            "finished run's files, swapped in one step (missing, empty or written by a run).",
        ),
    ],
    budgets: Annotated[
        str, typer.Option(help="Comma-separated token budgets.", callback=_budgets)
    ] = "512,1024,2048,4096",
    rank: _RankOption = "learned",
    compare: Annotated[str, typer.Option(help=_compare_help())] = "bm25,recency",
    model: _Model = "minilm",
    neighbours: _Neighbours = 0.0,
    ranker: _Ranker = None,
    profile: Annotated[str, typer.Option(help=_PROFILE_HELP, callback=_profile)] = "cl100k_base",
    loco: Annotated[
        bool,
        typer.Option(
            "--loco",
            help="Rank each conversation with a learned model fitted on the other "
            "conversations only (leave one conversation out), not the shipped model.",
        ),
    ] = False,
    manifests: _Manifests = ManifestFormat.PARQUET,
    progress: _Progress = True,
    quiet: _Quiet = False,
    json_output: _Json = False,
) -> None:
    """Pack a context for every LoCoMo question at each budget and report evidence recall.

    Each question's scope is the dialog turns of its conversation, ranked by
    the question; its as_of is the conversation's latest turn time, so runs
    are deterministic.
    """
    from rich.console import Console

    from cognoxium.app._reports import comparison_table, locomo_tables
    from cognoxium.app.locomo import run_locomo

    # The callback has already turned the text into a list of budgets.
    chosen: list[int] = budgets  # type: ignore[assignment]
    retrieval = _retrieval(model, neighbours, ranker)
    others = _compare_methods(compare)
    try:
        report = run_locomo(
            path,
            out,
            chosen,
            rank=rank,
            profile=profile,
            progress=progress and not (quiet or json_output),
            compare=others,
            retrieval=retrieval,
            loco=loco,
            manifests=manifests.value,
        )
    except OSError as exc:
        reading = exc.filename is not None and Path(exc.filename) == path
        _fail_io(exc, "read" if reading else "write", path if reading else out)
    except BudgetError as exc:
        _fail(exc, EXIT_BUDGET)
    except CognoxiumError as exc:
        _fail(exc, EXIT_BAD_INPUT)
    names = ("items.parquet", "requests.jsonl", "report.json")
    files = {name.split(".")[0]: str(out / name) for name in names}
    files |= _batch_files(out, manifests)
    _report({"command": "locomo", "files": files, "report": report}, json_output=json_output)
    if quiet or json_output:
        return
    console = Console(highlight=False)
    for table in locomo_tables(report):
        console.print(table)
    console.print(comparison_table(report))
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


@app.command(
    "train-ranker",
    epilog=_epilog(
        "cognoxium train-ranker ../shared/data/locomo/locomo7.json --out learned_ranker.json",
        note='--json prints {"command", "model", "provenance"}.',
    ),
)
def train_ranker_command(
    path: Annotated[Path, typer.Argument(help="The LoCoMo JSON file.", **_EXISTING_FILE)],
    out: Annotated[Path, typer.Option("--out", "-o", help="The model JSON to write.")],
    l2: Annotated[float, typer.Option(min=0.0, help="L2 penalty on the weights.")] = 1.0,
    cost_penalty: Annotated[
        float,
        typer.Option(min=0.0, help="c of the rank utility log p - c * log(token cost)."),
    ] = 0.5,
    profile: Annotated[
        str,
        typer.Option(help=_PROFILE_HELP + " It counts the log-cost feature.", callback=_profile),
    ] = "cl100k_base",
    quiet: _Quiet = False,
    json_output: _Json = False,
) -> None:
    """Fit the learned ranker (rank "learned") on every answerable LoCoMo question.

    Features are those rank("learned") computes over each question's
    conversation turns; evidence turns are the positives. The fit is
    deterministic: the same file gives the same weights. Refit after a
    change to the features, the embedding model or the LoCoMo import.
    """
    from rich.console import Console

    from cognoxium.app.ranker import train_ranker

    try:
        model = train_ranker(path, out, l2=l2, cost_penalty=cost_penalty, profile=profile)
    except OSError as exc:
        reading = exc.filename is not None and Path(exc.filename) == path
        _fail_io(exc, "read" if reading else "write", path if reading else out)
    except CognoxiumError as exc:
        _fail(exc, EXIT_BAD_INPUT)
    summary = {"command": "train-ranker", "model": str(out), "provenance": model.provenance}
    _report(summary, json_output=json_output)
    if quiet or json_output:
        return
    recall = model.provenance["metrics"]["training_recall_1_4"]
    Console(highlight=False).print(
        f"fitted {len(model.feature_names)} weights on {model.provenance['rows']} turns of "
        f"{model.provenance['questions']} questions; training recall 1-4 "
        f"{recall['1024']:.3f} at 1,024 and {recall['2048']:.3f} at 2,048 tokens; wrote {out}"
    )


def _compare_methods(compare: str) -> list[str]:
    """The rank methods of ``--compare`` (comma-separated), each checked."""
    from cognoxium.app.batch import check_rank_method

    others = [name.strip() for name in compare.split(",") if name.strip()]
    for name in others:
        try:
            check_rank_method(name)
        except CognoxiumError as exc:
            raise typer.BadParameter(
                f"{compare!r} is not a list of rank methods: {exc}", param_hint="--compare"
            ) from None
    return others


class Style(StrEnum):
    """Redaction styles offered by ``cognoxium redact``."""

    PLACEHOLDER = "placeholder"
    MASK = "mask"
    HASH = "hash"


@app.command(
    "redact",
    epilog=_epilog(
        "cognoxium redact items.jsonl redacted.parquet --types EMAIL,PHONE",
        "COGNOXIUM_REDACT_KEY=... cognoxium redact items.jsonl out.jsonl --style hash --json",
        note='--json prints {"command", "items", "redacted_items", "redactions", "files"}.',
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
    quiet: _Quiet = False,
    json_output: _Json = False,
) -> None:
    """Redact PII and secrets in the Text and Json payloads of SOURCE into TARGET.

    Changed items get a new content hash and a redact lineage edge to their
    previous content. Prints the redactions by type. TARGET is written
    atomically, in the format its suffix names.
    """
    import os

    from cognoxium.frame.frame import CognitionFrame
    from cognoxium.items.io import item_format, read_items
    from cognoxium.items.schema import COLUMNS

    try:
        writer = item_format(target).write
    except SchemaError as exc:
        error = _error_dict("usage.invalid", str(exc), field="TARGET", params=exc.params)
        raise _CommandError(error, EXIT_USAGE) from None
    kinds = None if types is None else [t.strip() for t in types.split(",") if t.strip()]
    key = os.environ.get(key_env) if style is Style.HASH else None
    try:
        frame = CognitionFrame(read_items(source)).redact(style=style.value, key=key, types=kinds)
    except (OSError, UnicodeDecodeError) as exc:
        _fail_io(exc, "read", source)
    except CognoxiumError as exc:
        if style is Style.HASH and key is None:
            message = f"the hash style needs a key in ${key_env}"
            error = _error_dict("usage.invalid", message, field="--key-env")
            raise _CommandError(error, EXIT_USAGE) from None
        _fail(exc, EXIT_BAD_INPUT)
    redacted = frame.collect()
    try:
        writer(redacted.select(COLUMNS), target)
    except OSError as exc:
        _fail_io(exc, "write", target)
    totals = _redaction_totals(redacted)
    changed = int(redacted.get_column("redacted_from").is_not_null().sum())
    summary = {
        "command": "redact",
        "items": redacted.height,
        "redacted_items": changed,
        "redactions": dict(sorted(totals.items())),
        "files": {"target": str(target)},
    }
    _report(summary, json_output=json_output)
    if quiet or json_output:
        return
    _print_redactions(totals, changed, redacted.height)
    typer.echo(f"wrote {target}")


def _redaction_totals(redacted: pl.DataFrame) -> dict[str, int]:
    """The redactions per recogniser type over the items' ``redactions`` JSON counts."""
    totals: dict[str, int] = {}
    for text in redacted.get_column("redactions").to_list():
        for kind, count in json.loads(text).items():
            totals[kind] = totals.get(kind, 0) + count
    return totals


def _print_redactions(totals: dict[str, int], changed: int, items: int) -> None:
    """Print the redactions per type, in a table titled with the items changed."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{changed} of {items} items redacted")
    table.add_column("type")
    table.add_column("redactions", justify="right")
    for kind, count in sorted(totals.items()):
        table.add_row(kind, str(count))
    Console(highlight=False).print(table)


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _group_table(
    title: str, key: str, groups: dict[str, dict[str, int]], limit: int, total: int
) -> Table:
    """Items, included items and included tokens per group, most tokens first.

    A group's share is of ``total``, the included tokens of every manifest:
    an item of several sources counts under each, so the source shares may
    add up to more than 100%.
    """
    from rich.table import Table

    ranked = sorted(groups.items(), key=lambda kv: (-kv[1]["included_tokens"], kv[0]))
    shown = ranked[:limit]
    caption = None
    if len(ranked) > limit:
        rest = ranked[limit:]
        caption = (
            f"{len(rest)} more {key}s with {sum(g['included_tokens'] for _, g in rest)} included "
            "tokens not shown (--json lists all)"
        )
    table = Table(title=title, caption=caption, caption_justify="left")
    table.add_column(key, overflow="fold")
    for header in ("items", "included", "included tokens", "share of tokens"):
        table.add_column(header, justify="right")
    for name, group in shown:
        table.add_row(
            name,
            str(group["items"]),
            str(group["included"]),
            str(group["included_tokens"]),
            _percent(group["included_tokens"] / total if total else None),
        )
    return table


def _inspect_tables(summary: dict[str, Any], limit: int) -> list[Table]:
    """The tables of ``cognoxium inspect``: budget use, reasons, tokens by role, tier, source."""
    tables = [_use_table(summary), _reasons_table(summary)]
    total = sum(group["included_tokens"] for group in summary["by_role"].values())
    for title, key, groups in (
        ("Tokens by role", "role", summary["by_role"]),
        ("Tokens by retention tier", "tier", summary["by_tier"]),
        (
            "Tokens by source (an item of several sources counts under each)",
            "source",
            summary["by_source"],
        ),
    ):
        if groups is not None:
            tables.append(_group_table(title, key, groups, limit, total))
    extra = [("redactions", summary["redactions"]), ("policy outcomes", summary["policy_outcomes"])]
    tables += [_count_table(title, counts) for title, counts in extra if counts]
    if len(summary["per_manifest"]) > 1:
        tables.append(_per_manifest_table(summary["per_manifest"], limit))
    return tables


def _use_table(summary: dict[str, Any]) -> Table:
    """Budget use over the manifests: tokens used, utilization, entries, merges."""
    from rich.table import Table

    budget, items = summary["budget"], summary["items"]
    use = Table(title=f"Budget use over {summary['manifests']} manifests", show_header=False)
    use.add_column("figure")
    use.add_column("value", justify="right")
    fraction = budget["used_fraction"]
    for name, value in (
        ("token profiles", ", ".join(summary["profiles"]) or "-"),
        ("used / budget tokens", f"{budget['used_tokens']} / {budget['budget_tokens']}"),
        ("utilization", _percent(budget["utilization"])),
        (
            "used per manifest (min / mean / max)",
            "-"
            if fraction is None
            else " / ".join(_percent(fraction[k]) for k in ("min", "mean", "max")),
        ),
        ("remaining tokens", str(budget["remaining_tokens"])),
        ("reply priming tokens", str(budget["pack_overhead_tokens"])),
        ("entries (included / excluded)", f"{items['included']} / {items['excluded']}"),
        ("tokenized / never counted", f"{items['counted']} / {items['not_counted']}"),
        ("duplicate merges", str(summary["merges"])),
    ):
        use.add_row(name, value)
    return use


def _reasons_table(summary: dict[str, Any]) -> Table:
    """Entries per decision and reason, the included reasons first, then by count."""
    from rich.table import Table

    from cognoxium.packing.packer import Reason

    reasons = Table(title="Decisions and reasons")
    reasons.add_column("decision")
    reasons.add_column("reason")
    reasons.add_column("entries", justify="right")
    included = {Reason.REQUIRED.value, Reason.SELECTED.value}
    for reason, count in sorted(
        summary["reasons"].items(), key=lambda kv: (kv[0] not in included, -kv[1], kv[0])
    ):
        reasons.add_row("included" if reason in included else "excluded", reason, str(count))
    return reasons


def _count_table(title: str, counts: dict[str, int]) -> Table:
    """Counts of redaction types or policy actions."""
    from rich.table import Table

    table = Table(title=title.capitalize())
    table.add_column("type" if title == "redactions" else "action")
    table.add_column("count", justify="right")
    for name, count in counts.items():
        table.add_row(name, str(count))
    return table


def _per_manifest_table(per: list[dict[str, Any]], limit: int) -> Table:
    """One row per manifest (the first ``limit``): label, budget, tokens, entries."""
    from rich.table import Table

    caption = (
        f"{len(per) - limit} more manifests not shown (--json lists all)"
        if len(per) > limit
        else None
    )
    table = Table(title="Per manifest", caption=caption, caption_justify="left")
    table.add_column("label")
    for header in ("budget", "used", "remaining", "included", "excluded"):
        table.add_column(header, justify="right")
    for row in per[:limit]:
        table.add_row(
            "-" if row["label"] is None else row["label"],
            *(
                str(row[k])
                for k in ("budget", "used_tokens", "remaining_tokens", "included", "excluded")
            ),
        )
    return table


@app.command(
    "inspect",
    epilog=_epilog(
        "cognoxium inspect out/sample",
        "cognoxium inspect out/sample --items examples/sample/items.jsonl",
        "cognoxium inspect out/sample/manifests/part-00000.parquet --json",
        note="MANIFESTS is the --out directory of cognoxium pack or cognoxium locomo (either "
        "--manifests form; every part, in number order), its manifests directory, one part "
        "(manifests/part-<n>.parquet, its headers read from manifest_headers/part-<n>.jsonl), "
        "a .jsonl file of one manifest per line, or one manifest saved as JSON. Entries are "
        "scanned in one streaming pass, so memory does not grow with the files. Tokens by "
        "source need "
        "--items, since manifest entries name items, not their sources. --json prints "
        "the summary: command, file, manifests, profiles, budget, items, decisions, "
        "reasons, by_role, by_tier, by_source, redactions, policy_outcomes, merges and "
        "per_manifest.",
    ),
)
def inspect_command(
    manifests: Annotated[
        Path,
        typer.Argument(
            help="Manifests: an output directory (or its manifests directory), a part "
            "(.parquet or .jsonl), a .jsonl file (one per line) or one .json manifest.",
            callback=_readable_manifests,
        ),
    ],
    items: Annotated[
        Path | None,
        typer.Option(
            help="The items the manifests were packed from (.jsonl or .parquet), to count "
            "tokens by source.",
            **_EXISTING_FILE,
        ),
    ] = None,
    limit: Annotated[
        int,
        typer.Option(
            min=1,
            help="Rows shown in each of the tables by role, tier and source, and per manifest; "
            "--json lists all.",
        ),
    ] = 20,
    quiet: _Quiet = False,
    json_output: _Json = False,
) -> None:
    """Summarise pack manifests: budget use, decisions, reasons, tokens by role, tier, source.

    Scans every manifest of MANIFESTS and prints tables of the token budget
    used (used/budget tokens, totals), the count of entries per decision and
    reason, and the items and included tokens per role, retention tier and
    (with --items) source. With --quiet it only checks that the file is valid.
    """
    from rich.console import Console

    from cognoxium.packing.manifests import summarize_manifests

    store = None
    if items is not None:
        from cognoxium.items.io import read_items

        try:
            store = read_items(items)
        except (OSError, UnicodeDecodeError) as exc:
            _fail_io(exc, "read", items)
        except CognoxiumError as exc:
            _fail(exc, EXIT_BAD_INPUT)
    try:
        summary = summarize_manifests(manifests, items=store)
    except (OSError, UnicodeDecodeError) as exc:
        _fail_io(exc, "read", manifests)
    except CognoxiumError as exc:
        _fail(exc, EXIT_BAD_INPUT)
    _report({"command": "inspect", "file": str(manifests), **summary}, json_output=json_output)
    if quiet or json_output:
        return
    console = Console(highlight=False)
    for table in _inspect_tables(summary, limit):
        console.print(table)


def main() -> None:
    """Run the ``cognoxium`` command line (the console-script entry point)."""
    from cognoxium.app._warnings import plain_warnings

    plain_warnings()
    app(prog_name="cognoxium")


if __name__ == "__main__":  # pragma: no cover
    main()
