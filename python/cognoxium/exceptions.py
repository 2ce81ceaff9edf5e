"""The error tree of Cognoxium.

Every error raised on purpose by the package derives from
:class:`CognoxiumError` and from the built-in exception that fits it, so code
that catches ``ValueError`` or ``LookupError`` keeps working.
"""

from __future__ import annotations

__all__ = [
    "BudgetError",
    "CognoxiumError",
    "ConfigError",
    "ContractError",
    "DependencyError",
    "ModelError",
    "OutputError",
    "PackError",
    "PlanError",
    "PolicyError",
    "PredicateError",
    "ProfileError",
    "RankError",
    "RecordError",
    "SchemaError",
    "StrategyError",
    "UnknownNoteError",
]


class CognoxiumError(Exception):
    """Root of every error raised by Cognoxium."""


class RecordError(CognoxiumError, ValueError):
    """A record could not be turned into a ``ContextItem``.

    Parameters
    ----------
    message
        What was wrong.
    source
        The file (or other origin) of the record, if any.
    line
        The 1-based line number in ``source`` (JSONL) or the 1-based record
        number of a sequence of records, if known.
    row
        The 0-based row index of a table (Arrow, Polars, Parquet), if known.
    field
        The dotted name of the offending field or column, if known.

    Examples
    --------
    >>> str(RecordError("expected a string", source="a.jsonl", line=3, field="role"))
    'a.jsonl:3: field role: expected a string'
    >>> str(RecordError("must not be null", source="a.parquet", row=0, field="id"))
    'a.parquet: row 0: field id: must not be null'
    """

    def __init__(
        self,
        message: str,
        *,
        source: str | None = None,
        line: int | None = None,
        row: int | None = None,
        field: str | None = None,
    ) -> None:
        self.message = message
        self.source = source
        self.line = line
        self.row = row
        self.field = field
        where = ":".join(str(p) for p in (source, line) if p is not None)
        if row is not None:
            where = f"{where}: row {row}" if where else f"row {row}"
        prefix = f"{where}: " if where else ""
        fieldpart = f"field {field}: " if field else ""
        super().__init__(f"{prefix}{fieldpart}{message}")


class SchemaError(CognoxiumError, ValueError):
    """A table does not match the canonical context-item schema."""


class PlanError(CognoxiumError, ValueError):
    """A frame operation was given arguments that cannot make a valid plan."""


class PredicateError(PlanError):
    """A string predicate does not parse or uses a construct outside the predicate grammar.

    The grammar is that of :mod:`cognoxium.items.predicate`; a refused
    predicate is never run, so no data or file is read.

    Parameters
    ----------
    message
        What was refused and why.
    predicate
        The predicate text.
    position
        The 0-based character offset in ``predicate`` of the refused
        construct, if known (shown 1-based).

    Examples
    --------
    >>> str(PredicateError("'*' is not allowed: name the columns", predicate="*", position=0))
    "predicate '*', at character 1: '*' is not allowed: name the columns"
    """

    def __init__(self, message: str, *, predicate: str, position: int | None = None) -> None:
        self.message = message
        self.predicate = predicate
        self.position = position
        at = "" if position is None else f", at character {position + 1}"
        super().__init__(f"predicate {predicate!r}{at}: {message}")


class PackError(CognoxiumError, ValueError):
    """A pack cannot honour its contract.

    For example: a negative budget, or a required item in a group that cannot be packed.
    """


class BudgetError(PackError):
    """The required items alone do not fit the token budget.

    Parameters
    ----------
    message
        What was wrong and what to do.
    costs
        The required items' ids mapped to their token costs.
    budget
        The token budget, in tokens.
    """

    def __init__(self, message: str, *, costs: dict[str, int], budget: int) -> None:
        self.costs = dict(costs)
        self.budget = budget
        super().__init__(message)


class DependencyError(CognoxiumError, ImportError):
    """An optional dependency is not installed; the message names the extra that provides it."""


class ContractError(CognoxiumError, TypeError, ValueError):
    """A continuity contract is broken.

    An input or output of the wrong type, an invalid field, or an input
    without the ``EngineContext`` it needs. It derives from both ``TypeError``
    (wrong type) and ``ValueError`` (invalid value).
    """


class ConfigError(CognoxiumError, ValueError):
    """A configuration file or setting is invalid; the message names the file and the key."""


class OutputError(CognoxiumError, RuntimeError):
    """An output directory cannot be committed; the message names the path and what to do.

    For example: another run holds the directory's lock, or the path is a
    non-empty directory or a link that Cognoxium did not make.

    Parameters
    ----------
    message
        What was wrong and what to do.
    path
        The output directory.
    """

    def __init__(self, message: str, *, path: str) -> None:
        self.path = path
        super().__init__(message)


class UnknownNoteError(CognoxiumError, LookupError):
    """A note id is not in the memory backend."""


class ProfileError(CognoxiumError, LookupError):
    """A token profile is unknown or its encoder files are not as published."""


class ModelError(CognoxiumError, LookupError):
    """An embedding model is unknown, not installed, or its files are not as published."""


class StrategyError(CognoxiumError, ValueError):
    """A context strategy or the strategy registry is invalid.

    For example: a duplicate strategy name, an enabled strategy that is not
    registered, a strategy without a backend capability or resource types, or
    a request or fragment with an invalid field. The message names the
    strategy and the field.
    """


class RankError(CognoxiumError, ValueError):
    """Scores, ranked lists or embeddings given to a ranker or to fusion are invalid.

    For example: a NaN or infinite score, a null id, or embeddings whose
    shapes do not match.
    """


class PolicyError(PackError):
    """A policy forbids a pack: an item breaks a rule whose action is ``error``, or strict mode.

    Parameters
    ----------
    message
        What was wrong and what to do.
    outcomes
        The policy outcomes behind the error, as dicts (policy, rule, id,
        action, message).
    """

    def __init__(self, message: str, *, outcomes: list[dict[str, str]]) -> None:
        self.outcomes = list(outcomes)
        super().__init__(message)
