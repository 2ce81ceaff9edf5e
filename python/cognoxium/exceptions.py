"""The error tree of Cognoxium.

Every error raised on purpose by the package derives from
:class:`CognoxiumError` and from the built-in exception that fits it, so code
that catches ``ValueError`` or ``LookupError`` keeps working.

Every error carries a stable ``code`` (a dotted name from :data:`ERROR_CODES`)
and ``params``, a dict of the structured values behind its message (the
budget and the required items' costs, the path of an output, ...). Each class
has a default code; a raise site may pass a more specific one
(``code="output.locked"``). Adding a code is one line in :data:`ERROR_CODES`.

Examples
--------
>>> error = PackError("budget must be a non-negative whole number of tokens, got -1",
...                   params={"budget": -1})
>>> error.code, error.params
('pack.invalid', {'budget': -1})
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Self, cast

__all__ = [
    "ERROR_CODES",
    "BudgetError",
    "CognoxiumError",
    "ConfigError",
    "ContractError",
    "DependencyError",
    "MessageError",
    "ModelError",
    "OrderWarning",
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


ERROR_CODES: dict[str, str] = {
    "budget.required_overflow": "the required items alone exceed the token budget",
    "budget.reserve_invalid": "the reply reserve is not a whole number from 0 to the budget",
    "command.interrupted": "a command was stopped by SIGINT or SIGTERM before it finished",
    "config.invalid": "a configuration file or setting is invalid",
    "contract.broken": "a continuity input or output breaks its contract",
    "dependency.missing": "an optional dependency is not installed",
    "error": "an error of Cognoxium without a more specific code",
    "file.unreadable": "an input file is missing, unreadable or not UTF-8 text",
    "file.unwritable": "an output file or directory cannot be written",
    "internal.error": "a fault of Cognoxium, not of the input: an exception no command expects",
    "messages.invalid": "chat messages break a documented rule of the API they are sent to",
    "model.unavailable": "an embedding model is unknown, not installed or not as published",
    "note.unknown": "a note id is not in the memory backend",
    "output.invalid": "an output directory cannot be committed",
    "output.locked": "another run is writing the same output directory",
    "pack.invalid": "a pack cannot honour its contract (budget, as_of, ids, groups)",
    "plan.invalid": "a frame operation was given arguments that cannot make a valid plan",
    "policy.violated": "a policy forbids packing an item",
    "predicate.refused": "a string predicate does not parse or leaves the predicate grammar",
    "profile.invalid": "a token profile's tokenizer files are missing or not as published",
    "profile.unknown": "a token profile or model name is not known",
    "rank.invalid": "scores, ranked lists or embeddings are invalid",
    "record.image_invalid": "an inline image (a data: URL) is not base64 PNG, JPEG, GIF or WebP "
    "data of its declared type",
    "record.invalid": "a record cannot be turned into a ContextItem",
    "record.too_large": "an item's payload is larger than the maximum item size",
    "request.invalid": "a pack request is invalid or cannot be packed",
    "schema.invalid": "a table does not match the context-item schema",
    "strategy.invalid": "a context strategy or the strategy registry is invalid",
    "usage.invalid": "a command-line option or argument is invalid",
}
"""Every stable error code, mapped to what it means.

A code never changes meaning once released; new situations get new codes.
"""


def _restored(kind: type[CognoxiumError], args: tuple[Any, ...], state: dict[str, Any]) -> Any:
    """An error of type ``kind`` with ``args`` and attributes ``state`` (see ``__reduce__``)."""
    error = kind.__new__(kind, *args)
    error.args = args
    error.__dict__.update(state)
    return error


class CognoxiumError(Exception):
    """Root of every error raised by Cognoxium.

    Parameters
    ----------
    message
        What was wrong and what to do.
    code
        A key of :data:`ERROR_CODES` more specific than the class's default
        (``default_code``), if any.
    params
        The structured values behind the message (JSON-compatible), if any.

    Attributes
    ----------
    code : str
        The stable code: ``code`` if given, else the class's ``default_code``.
    params : dict
        The structured values; a subclass adds its own (``BudgetError`` its
        ``budget`` and ``costs``).

    Raises
    ------
    ValueError
        If ``code`` is not a key of :data:`ERROR_CODES` (a bug at the raise
        site, never a user's input).

    Examples
    --------
    >>> error = CognoxiumError("something failed")
    >>> error.code, error.params, str(error)
    ('error', {}, 'something failed')
    """

    default_code: ClassVar[str] = "error"

    def __init__(
        self, message: str = "", *, code: str | None = None, params: Mapping[str, Any] | None = None
    ) -> None:
        resolved = code if code is not None else self.default_code
        if resolved not in ERROR_CODES:
            raise ValueError(f"unknown error code {resolved!r}; add it to ERROR_CODES")
        self.code = resolved
        self.params: dict[str, Any] = dict(params or {})
        super().__init__(message)

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle the error whole (its message and every attribute), for worker processes.

        Examples
        --------
        >>> import pickle
        >>> error = RecordError("must be a string", source="a.jsonl", line=3, field="role")
        >>> pickle.loads(pickle.dumps(error)).to_dict() == error.to_dict()
        True
        """
        return (_restored, (type(self), self.args, self.__dict__))

    def within(self, context: str, **params: Any) -> Self:
        """Return the same error with its message led by ``context``, and ``params`` added.

        The type, code and every attribute are kept, so a caller that adds
        where the error happened (a batch names the request) raises what it
        caught.

        Examples
        --------
        >>> error = BudgetError("over budget", costs={"a": 9}, budget=5).within(
        ...     "request 'r1'", request_id="r1")
        >>> str(error), error.budget, error.params["request_id"]
        ("request 'r1': over budget", 5, 'r1')
        """
        state = {**self.__dict__, "params": {**self.params, **params}}
        return cast(Self, _restored(type(self), (f"{context}: {self}", *self.args[1:]), state))

    @property
    def location(self) -> tuple[str | None, int | None, str | None]:
        """``(file, line, field)`` of the error, each ``None`` when unknown."""
        return None, None, None

    def to_dict(self) -> dict[str, Any]:
        """Return the error as a JSON-compatible dict.

        Returns
        -------
        dict
            ``{"code", "message", "file", "line", "field", "params"}``:
            ``message`` is ``str(error)``; ``file``, ``line`` (1-based) and
            ``field`` are ``None`` when unknown.

        Examples
        --------
        >>> error = RecordError("must be a string", source="a.jsonl", line=3, field="role")
        >>> error.to_dict()  # doctest: +NORMALIZE_WHITESPACE
        {'code': 'record.invalid', 'message': 'a.jsonl:3: field role: must be a string',
         'file': 'a.jsonl', 'line': 3, 'field': 'role', 'params': {}}
        """
        file, line, field = self.location
        return {
            "code": self.code,
            "message": str(self),
            "file": file,
            "line": line,
            "field": field,
            "params": self.params,
        }


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
    code
        A more specific code than ``record.invalid`` (``request.invalid``), if any.
    params
        Structured values behind the message; ``row`` is added when given.

    Examples
    --------
    >>> str(RecordError("expected a string", source="a.jsonl", line=3, field="role"))
    'a.jsonl:3: field role: expected a string'
    >>> str(RecordError("must not be null", source="a.parquet", row=0, field="id"))
    'a.parquet: row 0: field id: must not be null'
    """

    default_code: ClassVar[str] = "record.invalid"

    def __init__(
        self,
        message: str,
        *,
        source: str | None = None,
        line: int | None = None,
        row: int | None = None,
        field: str | None = None,
        code: str | None = None,
        params: Mapping[str, Any] | None = None,
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
        extra = {} if row is None else {"row": row}
        super().__init__(
            f"{prefix}{fieldpart}{message}", code=code, params={**(params or {}), **extra}
        )

    @property
    def location(self) -> tuple[str | None, int | None, str | None]:
        """``(source, line, field)`` of the record."""
        return self.source, self.line, self.field


class SchemaError(CognoxiumError, ValueError):
    """A table does not match the canonical context-item schema.

    Parameters
    ----------
    message
        What was wrong and what to do.
    file
        The file at fault, when one is known (a file of a store directory).
    code, params
        As for :class:`CognoxiumError`.

    Examples
    --------
    >>> error = SchemaError("s/k=a/p.parquet: not Parquet", file="s/k=a/p.parquet")
    >>> error.code, error.to_dict()["file"]
    ('schema.invalid', 's/k=a/p.parquet')
    """

    default_code: ClassVar[str] = "schema.invalid"

    def __init__(
        self,
        message: str = "",
        *,
        file: str | None = None,
        code: str | None = None,
        params: Mapping[str, Any] | None = None,
    ) -> None:
        self.file = file
        super().__init__(message, code=code, params=params)

    @property
    def location(self) -> tuple[str | None, int | None, str | None]:
        """``(file, None, None)``: the file at fault, if known."""
        return self.file, None, None


class PlanError(CognoxiumError, ValueError):
    """A frame operation was given arguments that cannot make a valid plan."""

    default_code: ClassVar[str] = "plan.invalid"


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

    default_code: ClassVar[str] = "predicate.refused"

    def __init__(self, message: str, *, predicate: str, position: int | None = None) -> None:
        self.message = message
        self.predicate = predicate
        self.position = position
        at = "" if position is None else f", at character {position + 1}"
        super().__init__(
            f"predicate {predicate!r}{at}: {message}",
            params={"predicate": predicate, "position": position},
        )


class PackError(CognoxiumError, ValueError):
    """A pack cannot honour its contract.

    For example: a negative budget, or a required item in a group that cannot be packed.
    """

    default_code: ClassVar[str] = "pack.invalid"


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
    params
        Further structured values (``request_id``, ``reserve``, ...);
        ``budget`` and ``costs`` are always added.
    code
        ``budget.reserve_invalid`` for a bad reply reserve; the default is
        ``budget.required_overflow``.

    Examples
    --------
    >>> error = BudgetError("too big", costs={"a": 9}, budget=5)
    >>> error.code, error.params
    ('budget.required_overflow', {'budget': 5, 'costs': {'a': 9}})
    """

    default_code: ClassVar[str] = "budget.required_overflow"

    def __init__(
        self,
        message: str,
        *,
        costs: dict[str, int],
        budget: int,
        params: Mapping[str, Any] | None = None,
        code: str | None = None,
    ) -> None:
        self.costs = dict(costs)
        self.budget = budget
        super().__init__(
            message,
            code=code,
            params={**(params or {}), "budget": budget, "costs": dict(self.costs)},
        )


class DependencyError(CognoxiumError, ImportError):
    """An optional dependency is not installed; the message names the extra that provides it."""

    default_code: ClassVar[str] = "dependency.missing"


class ContractError(CognoxiumError, TypeError, ValueError):
    """A continuity contract is broken.

    An input or output of the wrong type, an invalid field, or an input
    without the ``EngineContext`` it needs. It derives from both ``TypeError``
    (wrong type) and ``ValueError`` (invalid value).
    """

    default_code: ClassVar[str] = "contract.broken"


class ConfigError(CognoxiumError, ValueError):
    """A configuration file or setting is invalid; the message names the file and the key."""

    default_code: ClassVar[str] = "config.invalid"


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
    code
        ``output.locked`` when another run holds the directory's lock; the
        default is ``output.invalid``.

    Examples
    --------
    >>> error = OutputError("busy", path="out/run", code="output.locked")
    >>> error.code, error.to_dict()["file"]
    ('output.locked', 'out/run')
    """

    default_code: ClassVar[str] = "output.invalid"

    def __init__(self, message: str, *, path: str, code: str | None = None) -> None:
        self.path = path
        super().__init__(message, code=code, params={"path": path})

    @property
    def location(self) -> tuple[str | None, int | None, str | None]:
        """``(path, None, None)``: the output directory."""
        return self.path, None, None


class UnknownNoteError(CognoxiumError, LookupError):
    """A note id is not in the memory backend."""

    default_code: ClassVar[str] = "note.unknown"


class ProfileError(CognoxiumError, LookupError):
    """A token profile is unknown or its encoder files are not as published.

    Its code is ``profile.unknown`` for a name that resolves to no profile
    (``params["name"]``, ``params["close_matches"]``), else ``profile.invalid``.
    """

    default_code: ClassVar[str] = "profile.invalid"


class ModelError(CognoxiumError, LookupError):
    """An embedding model is unknown, not installed, or its files are not as published."""

    default_code: ClassVar[str] = "model.unavailable"


class StrategyError(CognoxiumError, ValueError):
    """A context strategy or the strategy registry is invalid.

    For example: a duplicate strategy name, an enabled strategy that is not
    registered, a strategy without a backend capability or resource types, or
    a request or fragment with an invalid field. The message names the
    strategy and the field.
    """

    default_code: ClassVar[str] = "strategy.invalid"


class MessageError(CognoxiumError, ValueError):
    """Chat messages break a documented rule of the API they are sent to.

    Raised by the validators of :mod:`cognoxium.formats` and by a pack with
    ``tool_errors="error"``; the message says which rule and what to do.

    Parameters
    ----------
    message
        What was wrong and what to do.
    index
        The 0-based index of the message at fault (in the request's
        ``messages``, or in the pack), or ``None`` for the request as a whole.
    rule
        The rule broken: a key of
        :data:`cognoxium.packing.message_rules.MESSAGE_RULES`.
    params
        Further structured values (the item ``id``, its input ``row``);
        ``index`` and ``rule`` are always added.

    Examples
    --------
    >>> error = MessageError("no result", index=2, rule="tool_call_unanswered")
    >>> error.code, error.index, error.rule, error.params
    ('messages.invalid', 2, 'tool_call_unanswered', {'index': 2, 'rule': 'tool_call_unanswered'})
    """

    default_code: ClassVar[str] = "messages.invalid"

    def __init__(
        self,
        message: str,
        *,
        index: int | None,
        rule: str,
        params: Mapping[str, Any] | None = None,
    ) -> None:
        self.index = index
        self.rule = rule
        super().__init__(message, params={**(params or {}), "index": index, "rule": rule})


class RankError(CognoxiumError, ValueError):
    """Scores, ranked lists or embeddings given to a ranker or to fusion are invalid.

    For example: a NaN or infinite score, a null id, or embeddings whose
    shapes do not match.
    """

    default_code: ClassVar[str] = "rank.invalid"


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

    default_code: ClassVar[str] = "policy.violated"

    def __init__(self, message: str, *, outcomes: list[dict[str, str]]) -> None:
        self.outcomes = list(outcomes)
        super().__init__(message, params={"outcomes": list(self.outcomes)})


class OrderWarning(UserWarning):
    """A chat history's input order runs against its timestamps.

    A pack without a rank takes the conversation items newest first from
    the last one in input order back (the input order is the
    conversation's order). When their ``created_at`` falls as the input
    goes on (a frame sorted newest first, the Polars idiom for "the latest
    N"), that pack keeps the oldest messages and sends them in reverse:
    sort by ``created_at`` ascending after choosing the latest, or keep
    the order the messages came in. It is raised when ``created_at`` falls
    more than twice as often as it rises along the unranked conversation
    items. A warning, not an error: the packer
    does not reorder what it is given.
    """
