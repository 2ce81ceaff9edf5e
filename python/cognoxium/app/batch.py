"""Batch packing: many pack requests over one store of context items.

A batch is a list of :class:`Request` objects (read from JSONL with
:func:`read_requests`) and a store (a frame of the canonical schema).
:func:`run_batch` packs every request and writes the packs and their
manifests, grouped by scope (scopes in the order of their first request,
the requests of a scope in their order: the input order when the requests
of a scope come together), and makes every file visible in one step (the
output directory is a link swapped to a fresh version directory; see
:func:`run_batch`). Each table is written in parts, one per task of
consecutive scopes, by the process that packs the task; the parts in number
order make the table (:func:`~cognoxium.packing.manifests.scan_packs` and
:func:`~cognoxium.packing.manifests.scan_manifests` read them as one). A
part's number ``<n>`` has five digits at least (``part-00000.jsonl``):

``packs/part-<n>.jsonl``
    One line per request, ``{"body", "budget", "ids", "request_id",
    "used_tokens"}``: the context fields of the model API request that sends
    the pack (:func:`request_body`; left out with ``bodies=False``), the
    token budget, the ids of the included items in pack (conversational)
    order and the tokens the pack uses.
``manifests/part-<n>.parquet`` and ``manifest_headers/part-<n>.jsonl`` (``manifests="parquet"``)
    One row per manifest entry (the columns of
    :meth:`~cognoxium.packing.packer.PackManifest.to_polars` after
    ``request_id``), and one canonical JSON object per request: the manifest
    without its entries, with ``request_id`` (see
    :mod:`cognoxium.packing.manifests`). The default form.
``manifests/part-<n>.jsonl`` (``manifests="jsonl"``)
    One line per request: the pack manifest exactly as
    :meth:`~cognoxium.packing.packer.PackManifest.to_json` writes it
    (canonical JSON: sorted keys, compact, UTF-8).

Every manifest's ``label`` is its request id. Every batch writes part 0 of
each table, empty for a batch of no request, so the layout is one whatever
the batch.

Work is shared across requests: the scope of each distinct ``where`` clause
is filtered once and prepared once (:class:`PreparedScope`: its
:class:`~cognoxium.packing.packer.PackScope`, its token counts in one call
to the tokenizer, and each distinct query's rank, computed once for all its
budgets, the queries of a method with a batched lowering, such as BM25,
scored together through the plan: :func:`~cognoxium.engine.ranks.collect_ranks`);
the rank kernels cache their BM25 index and retrievers
(embeddings, windows, lineage links) per scope, and token counts per content
hash, so no item is tokenized or embedded twice in a batch. Consecutive
requests over one scope are packed together by :func:`pack_scope`, whose
manifests' entries are built as columns.
"""

from __future__ import annotations

import dataclasses
import difflib
import gc
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import datetime
from functools import cached_property, partial
from pathlib import Path
from typing import IO, Any, Literal, TypeAlias, TypeVar

import numpy as np
import polars as pl
import pyarrow as pa
from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    PrivateAttr,
    StrictBool,
    StrictInt,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from cognoxium.app._outputs import committed_output
from cognoxium.app._scopes import ScopeIndex, batch_units, collect_scope, where_filter
from cognoxium.app._workers import (
    Task,
    default_workers,
    finish_parts,
    run_tasks,
    task_ranges,
    tasks_of,
    unit_weights,
)
from cognoxium.engine.plan import polars_error_text
from cognoxium.engine.ranks import Rank, RankContext, collect_ranks, rank_entry, rank_methods
from cognoxium.exceptions import BudgetError, MessageError, PackError, PlanError, RecordError
from cognoxium.frame.frame import CognitionFrame
from cognoxium.items._checks import (
    FINE_TIME_MESSAGE,
    MAX_INT,
    ItemId,
    UnicodeStr,
    finer_than_microseconds,
    json_problem,
    to_utc,
)
from cognoxium.items._json import canonical_json_list
from cognoxium.items.io import invalid_utf8_error, json_lines
from cognoxium.items.model import canonical_json
from cognoxium.packing.cache_models import get_cache_model
from cognoxium.packing.manifests import (
    MANIFEST_FORMS,
    ManifestForm,
    ManifestWriter,
)
from cognoxium.packing.options import PackOptions
from cognoxium.packing.packer import ContextPack, PackManifest, PackOutcome, PackScope
from cognoxium.retrieval.scope import RetrievalSettings
from cognoxium.tokens.profiles import TokenProfile

__all__ = [
    "NO_RANK",
    "BatchSettings",
    "BatchStats",
    "PreparedScope",
    "RankMethod",
    "Request",
    "ScopeResult",
    "batch_rank_methods",
    "check_rank_method",
    "conversation_requests",
    "pack_scope",
    "prepare_requests",
    "rank_request",
    "read_requests",
    "request_body",
    "run_batch",
    "scope_rows",
]

RankMethod: TypeAlias = str
"""How :func:`run_batch` ranks a request's scope before packing: one of
:func:`batch_rank_methods`."""

NO_RANK: str = "none"
"""The batch's rank method that ranks nothing: the scope's order and priorities."""


def batch_rank_methods() -> tuple[str, ...]:
    """The rank methods :func:`run_batch` takes: the registered ones, then :data:`NO_RANK`.

    Read from the rank registry (:func:`~cognoxium.engine.ranks.rank_methods`)
    at each call, so a method registered by the application is offered too.

    Examples
    --------
    >>> batch_rank_methods()[:2], batch_rank_methods()[-3:]
    (('bm25', 'embedding'), ('priority', 'strategies', 'none'))
    """
    return (*rank_methods(), NO_RANK)


def check_rank_method(method: str) -> None:
    """Check that ``method`` is one of :func:`batch_rank_methods`.

    Raises
    ------
    PlanError
        If it is not; the message lists the methods and the closest one.
    """
    methods = batch_rank_methods()
    if method not in methods:
        close = difflib.get_close_matches(str(method), methods, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise PlanError(f"unknown rank method {method!r}; use one of {list(methods)}{hint}")


class Request(BaseModel):
    r"""One pack request of a batch.

    Parameters
    ----------
    id
        The request's identity, unique within a batch; written as
        ``request_id`` in the outputs. Non-blank text of at most
        :data:`~cognoxium.items.MAX_ID_LENGTH` (1024) characters,
        without control characters, as item ids are.
    budget
        The token budget, in tokens: an integer from 0 to 2**63 - 1.
        ``true``, ``64.0`` and ``"64"`` are refused (as an item's
        ``priority`` refuses them).
    reserve
        Tokens of the budget kept for the reply, from 0 to ``budget``
        (default 0): the items fit in ``budget - reserve`` (see
        :func:`cognoxium.packing.packer.pack`).
    overflow
        ``"error"`` (default) or ``"truncate"``: what the pack does when the
        required items alone exceed ``budget - reserve``.
    query
        Text to rank the scope by (BM25); ``None`` for no query.
    where
        A SQL predicate over the item columns that selects the scope, in
        the grammar of :mod:`cognoxium.items.predicate` (``metadata.<key>``
        reaches a metadata field; no subqueries, table functions or
        comments), for example ``"metadata.topic = 'billing' AND role <>
        'tool'"``; ``None`` for the whole store.
    as_of
        The UTC time at which validity and expiry are evaluated; ``None`` to
        use the batch's time. ISO 8601 text with a UTC offset, or a
        timezone-aware datetime; numbers are refused.
    evidence
        Evaluation data: the ids of the items that answer the request (for
        evidence recall; see :func:`cognoxium.app.locomo.evaluate`). Empty by
        default. Not used by packing.
    labels
        Evaluation data: a free-form JSON object (for example a question
        category), nested at most :data:`~cognoxium.items.MAX_JSON_DEPTH`
        (64) levels deep, without NaN or infinity. Empty by default. Not used
        by packing.
    turns
        Pack whole turns (a user message with the replies and tool exchanges
        that answer it); ``false`` by default. ``true`` or ``false`` only.
    start_on
        ``"user"``: after the system block the pack starts on a user
        message; ``None`` (the default) for no such rule. See
        :func:`cognoxium.packing.packer.pack`.
    gaps
        ``"stop"`` (the default) or ``"fill"``: what the pack does when a
        conversation item without a rank, taken newest first, does not fit
        (see :class:`~cognoxium.packing.options.PackOptions`).
    tool_errors
        ``"repair"`` (the default) or ``"error"``: what the pack does with
        tool messages the chat APIs reject (an unanswered call, an orphan or
        duplicate result): leave them out, with the rule as the reason, or
        raise :class:`~cognoxium.exceptions.MessageError`.
    target
        ``"openai"`` (the default) or ``"anthropic"``: the API the pack is
        rendered for. For ``"anthropic"`` the pack starts on a user message,
        and the opening user message a rendering adds is counted.
    gap_note
        ``None`` (the default), or the text of the message put in place of
        each hole of the conversation, whose only field is ``{n}`` (the
        number of items left out there), as ``"({n} earlier messages
        omitted)"``; counted in the budget.
    previous
        ``None`` (the default), or the ``id`` of an earlier request of the
        batch with the same ``where`` whose pack this one continues, as
        ``pack(budget, previous=...)`` does: the earlier pack's messages stay
        the cached prefix a provider bills at its cached price, and the
        manifest's ``cache`` section reports it (see
        :mod:`cognoxium.packing.cache`). For a session replayed request by
        request, each giving its ``as_of``.

    Notes
    -----
    A request has exactly these fields: an unknown field (a typo such as
    ``"qurey"``) is an error, so nothing is silently dropped; put other data
    under ``labels``. A request is immutable. Every text field must be valid
    Unicode (a lone surrogate such as ``"\ud800"`` is refused).

    Examples
    --------
    >>> r = Request.model_validate({"id": "r1", "budget": 512, "query": "refund",
    ...                             "evidence": ["t3"], "labels": {"category": 4}})
    >>> r.budget, r.where, r.evidence, r.labels
    (512, None, ['t3'], {'category': 4})
    >>> Request.model_validate({"id": "r2", "budget": 512, "qurey": "refund"})
    Traceback (most recent call last):
    ...
    pydantic_core._pydantic_core.ValidationError: 1 validation error for Request
    qurey
      Extra inputs are not permitted ...
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: ItemId
    budget: StrictInt = Field(ge=0, le=MAX_INT)
    reserve: StrictInt = Field(default=0, ge=0, le=MAX_INT)
    overflow: Literal["error", "truncate"] = "error"
    query: UnicodeStr | None = None
    where: UnicodeStr | None = None
    as_of: AwareDatetime | None = None
    evidence: list[ItemId] = Field(default_factory=list)
    labels: dict[str, JsonValue] = Field(default_factory=dict)
    turns: StrictBool = False
    start_on: Literal["user"] | None = None
    gaps: Literal["stop", "fill"] = "stop"
    tool_errors: Literal["repair", "error"] = "repair"
    target: Literal["openai", "anthropic"] = "openai"
    gap_note: UnicodeStr | None = None
    previous: ItemId | None = None

    _source: str | None = PrivateAttr(default=None)
    _line: int | None = PrivateAttr(default=None)
    _row: int | None = PrivateAttr(default=None)
    _options: PackOptions | None = PrivateAttr(default=None)

    @field_validator("reserve")
    @classmethod
    def _reserve_in_budget(cls, value: int, info: ValidationInfo) -> int:
        budget = info.data.get("budget")
        if budget is not None and value > budget:
            raise ValueError(f"must not exceed the budget ({value} > {budget})")
        return value

    @field_validator("as_of", mode="before")
    @classmethod
    def _time_form(cls, value: Any) -> Any:
        if isinstance(value, str) and finer_than_microseconds(value):
            raise ValueError(FINE_TIME_MESSAGE)
        if value is None or isinstance(value, str | datetime):
            return value
        raise ValueError("must be an ISO 8601 time with a UTC offset, such as 2024-01-01T00:00:00Z")

    @field_validator("as_of")
    @classmethod
    def _utc(cls, value: datetime | None) -> datetime | None:
        return None if value is None else to_utc(value)

    @field_validator("labels", mode="before")
    @classmethod
    def _json_labels(cls, value: Any) -> Any:
        problem = json_problem(value) if isinstance(value, dict) else None
        if problem is not None:
            raise ValueError(problem)
        return value

    @field_validator("gap_note")
    @classmethod
    def _note_form(cls, value: str | None) -> str | None:
        try:
            PackOptions(gap_note=value)
        except PackError as exc:
            raise ValueError(str(exc).removeprefix("gap_note ")) from None
        return value

    @field_validator("where")
    @classmethod
    def _non_blank(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("must not be blank; omit it (or use null) for the whole store")
        return value

    def to_record(self) -> dict[str, Any]:
        """Return the request as a JSON record, a line of a requests file.

        The pack options (``reserve``, ``overflow``, ``turns``, ``start_on``,
        ``gaps``, ``tool_errors``, ``target``, ``gap_note``) and ``previous``
        are left out unless given, so a request that does not use them reads
        as it did before they existed; :func:`read_requests` gives back an
        equal request.

        Examples
        --------
        >>> list(Request(id="r1", budget=512).to_record())
        ['id', 'budget', 'query', 'where', 'as_of', 'evidence', 'labels']
        >>> Request(id="r2", budget=512, reserve=64).to_record()["reserve"]
        64
        """
        defaults = ({*_OPTIONS, "previous"} - {"as_of"}) - self.model_fields_set
        return self.model_dump(mode="json", exclude=defaults)

    @property
    def options(self) -> PackOptions:
        """The request's pack options: the batch's, with those the request gives in their place.

        The batch's are those :func:`prepare_requests` was given; a request
        that was not prepared takes the defaults of
        :class:`~cognoxium.packing.options.PackOptions`.

        Examples
        --------
        >>> Request(id="r", budget=100, reserve=10, turns=True).options.reserve
        10
        >>> prepared = prepare_requests([Request(id="r", budget=100)],
        ...                             options=PackOptions(reserve=5, turns=True))
        >>> prepared[0].options.reserve, prepared[0].options.turns
        (5, True)
        """
        if self._options is None:
            return self.over(PackOptions())
        return self._options

    def over(self, defaults: PackOptions) -> PackOptions:
        """``defaults`` with the pack options this request gives in their place.

        An option counts as given when the request's record holds it; an
        ``as_of`` of ``None`` means the batch's time.

        Raises
        ------
        RecordError
            If the options' ``reserve`` exceeds the request's budget; it
            names the request and the field.
        """
        own = {name: getattr(self, name) for name in _OPTIONS if name in self.model_fields_set}
        if own.get("as_of", 0) is None:
            del own["as_of"]
        options = dataclasses.replace(defaults, **own) if own else defaults
        if options.reserve > self.budget:
            raise self.error(
                f"the batch's reserve {options.reserve!r} is not a whole number of tokens from "
                f"0 to the request's budget ({self.budget})",
                field="reserve",
            )
        return options

    def error(self, message: str, *, field: str | None = None) -> RecordError:
        """Return a :class:`~cognoxium.exceptions.RecordError` about this request.

        The error names the file and the line (JSONL) or 0-based row
        (Parquet) the request was read from, when known (see
        :func:`read_requests`), and the request id.
        """
        return RecordError(
            f"request {self.id!r}: {message}",
            source=self._source,
            line=self._line,
            row=self._row,
            field=field,
            code="request.invalid",
            params={"request_id": self.id},
        )


_OPTIONS: tuple[str, ...] = (
    "reserve",
    "overflow",
    "as_of",
    "turns",
    "start_on",
    "gaps",
    "tool_errors",
    "target",
    "gap_note",
)
"""The fields of a :class:`Request` that are pack options (:class:`PackOptions` fields)."""


@dataclass(frozen=True, slots=True)
class _Where:
    """Where a request was read: a JSONL file's 1-based line or a table's 0-based row."""

    source: str
    line: int | None = None
    row: int | None = None

    def error(self, message: str, *, field: str | None = None) -> RecordError:
        return RecordError(
            message,
            source=self.source,
            line=self.line,
            row=self.row,
            field=field,
            code="request.invalid",
        )

    def __str__(self) -> str:
        return f"line {self.line}" if self.row is None else f"row {self.row}"


def _located(request: Request, where: _Where) -> Request:
    request._source = where.source
    request._line = where.line
    request._row = where.row
    return request


_FIELDS: tuple[str, ...] = tuple(Request.model_fields)

_T = TypeVar("_T")


def _invalid(exc: ValidationError, where: _Where) -> RecordError:
    """The first problem of an invalid request line; an unknown field comes first.

    An unknown field is reported before a missing one, because a misspelt
    field (``"budjet"``) also leaves its real field missing.
    """
    errors = exc.errors()
    unknown = [str(e["loc"][0]) for e in errors if e["type"] == "extra_forbidden" and e["loc"]]
    if unknown:
        close = difflib.get_close_matches(unknown[0], _FIELDS, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        names = ", ".join(repr(name) for name in unknown)
        return where.error(
            f"unknown field{'s' if len(unknown) > 1 else ''} {names}; {hint}a request has "
            f"the fields {', '.join(_FIELDS)} (put other data under 'labels')",
            field=unknown[0],
        )
    first = errors[0]
    name = ".".join(str(part) for part in first["loc"]) or None
    message = first["msg"].removeprefix("Value error, ")
    return where.error(message, field=name)


def _conversations_of(store: CognitionFrame, key: str) -> list[str]:
    """The distinct ``metadata.<key>`` of the items, in order of their first items."""
    ids = store.to_polars().get_column("metadata").str.json_path_match(f"$.{key}")
    missing = ids.is_null().arg_true()
    if len(missing):
        raise RecordError(
            f"no metadata.{key} names this item's conversation",
            row=int(missing[0]),
            field="metadata",
        )
    conversations: list[str] = ids.unique(maintain_order=True).to_list()
    return conversations


def _is_parquet(path: str | os.PathLike[str]) -> bool:
    return Path(path).suffix.lower() == ".parquet"


def _parquet_rows(path: str | os.PathLike[str]) -> list[tuple[int, Any]]:
    """The rows of a requests Parquet file as records, numbered from 0; nulls left out."""
    try:
        rows = pl.read_parquet(Path(path)).to_dicts()
    except pl.exceptions.PolarsError as exc:
        bad = invalid_utf8_error([Path(path)])
        if bad is not None:
            raise bad from None
        raise RecordError(
            f"not a readable Parquet file: {polars_error_text(exc)}",
            source=str(path),
            code="file.unreadable",
        ) from None
    return [(n, {k: v for k, v in row.items() if v is not None}) for n, row in enumerate(rows)]


def read_requests(path: str | os.PathLike[str]) -> list[Request]:
    r"""Read pack requests from a JSONL file (one JSON object per line) or a Parquet file.

    Blank lines are skipped. A ``.parquet`` file holds one request per row,
    a column per field; a null is a field left out, and errors name the
    0-based row, as those of an items Parquet file do. Reading is all or
    nothing.

    Parameters
    ----------
    path
        The file.

    Returns
    -------
    list of Request
        In file order.

    Raises
    ------
    RecordError
        At the first bad line (invalid JSON, not an object, an unknown,
        invalid or missing field, a duplicate id), naming the file, the
        1-based line (the 0-based row of a Parquet file) and the field.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "requests.jsonl"
    >>> _ = p.write_text('{"id": "a", "budget": 64}\n{"id": "b", "budget": -1}\n')
    >>> read_requests(p)
    Traceback (most recent call last):
    ...
    cognoxium.exceptions.RecordError: ...requests.jsonl:2: field budget: Input should be ...
    >>> _ = p.write_text('{"id": "a", "budget": 64, "qurey": "refund"}\n')
    >>> read_requests(p)
    Traceback (most recent call last):
    ...
    cognoxium.exceptions.RecordError: ...:1: field qurey: ...; did you mean 'query'? ...
    """
    source = str(path)
    requests: list[Request] = []
    seen: dict[str, _Where] = {}
    parquet = _is_parquet(path)
    try:
        # Lines end at "\n" only: JSON text may hold U+2028 and other line breaks.
        records = _parquet_rows(path) if parquet else list(json_lines(path))
    except OSError as exc:
        detail = exc.strerror or str(exc)
        raise RecordError(
            f"cannot read the requests file: {detail}", source=source, code="file.unreadable"
        ) from None
    for number, record in records:
        where = _Where(source, row=number) if parquet else _Where(source, line=number)
        if not isinstance(record, dict):
            raise where.error("a request must be a JSON object")
        try:
            request = Request.model_validate(record)
        except ValidationError as exc:
            raise _invalid(exc, where) from None
        if request.id in seen:
            raise where.error(
                f"duplicate request id {request.id!r} (first on {seen[request.id]})", field="id"
            )
        seen[request.id] = where
        requests.append(_located(request, where))
    return requests


def conversation_requests(
    store: CognitionFrame,
    budget: int,
    *,
    key: str = "conversation",
    conversations: Sequence[str] | None = None,
) -> list[Request]:
    r"""One request per conversation of ``store``, each packing that conversation alone.

    The conversations are the distinct values of ``metadata.<key>``, in
    the order of their first items: the text ids that
    :func:`~cognoxium.formats.openai.read_openai_conversations` writes.
    Each request's ``id`` is the conversation's id and its ``where``
    ``metadata.<key> = '<id>'``; it has no query, so the default rank keeps
    the conversation's newest messages (as ``rank("none")`` does).

    Parameters
    ----------
    store
        The items.
    budget
        Every request's budget, in tokens.
    key
        The metadata key that names each item's conversation.
    conversations
        The conversations' ids, in order, when known: a conversation
        without items (an empty one of a chat export) then gets a request
        too, which packs nothing. ``None``: those of the items.

    Returns
    -------
    list of Request
        In the order of ``conversations``, or of the conversations' first
        items; empty for a store without items.

    Raises
    ------
    RecordError
        If an item has no ``metadata.<key>`` (field ``metadata``, ``row``
        its 0-based row), or a conversation's id cannot be a
        request id (field ``id``), or ``budget`` is not a valid budget.

    Examples
    --------
    >>> from cognoxium.formats.openai import from_openai_messages
    >>> chat = from_openai_messages([{"role": "user", "content": "Hi"}])
    >>> store = chat.with_columns(metadata=pl.lit('{"conversation":"it\'s"}'))
    >>> [(r.id, r.budget, r.where) for r in conversation_requests(store, 512)]
    [("it's", 512, "metadata.conversation = 'it''s'")]
    """
    if conversations is None:
        conversations = _conversations_of(store, key)
    requests = []
    for conversation in conversations:
        where = f"metadata.{key} = '" + conversation.replace("'", "''") + "'"
        try:
            requests.append(Request(id=conversation, budget=budget, where=where))
        except ValidationError as exc:
            message = exc.errors()[0]["msg"].removeprefix("Value error, ")
            raise RecordError(
                f"conversation {conversation!r} cannot be a request id: {message}", field="id"
            ) from None
    return requests


@dataclass(frozen=True, slots=True)
class BatchStats:
    """Throughput and latency of one :func:`run_batch` call.

    Attributes
    ----------
    requests
        Number of requests packed.
    seconds
        Wall time of the whole batch, in seconds (scopes, ranking, packing,
        writing).
    packs_per_s
        ``requests / seconds``.
    p50_ms, p95_ms
        Median and 95th percentile of the per-pack latency, in milliseconds:
        ranking one request and selecting its pack, with its manifest
        header (linear interpolation between order statistics; 0 for an
        empty batch). The work a scope's requests share (preparing the
        scope, the manifest entries built as columns, writing) is in
        ``seconds`` only.
    latencies_ms
        The per-pack latencies, in request order, in milliseconds.
    unscoped
        The ids of the requests whose ``where`` matched no item of the
        store, in request order: each was packed empty (often a typo in a
        value, or text in another Unicode normal form).
    newest_user_left_out
        The ids of the requests, in file order, whose conversation was
        packed newest first and left out its newest user message for the
        budget (:attr:`~cognoxium.packing.packer.PackOutcome.newest_user_message_left_out`):
        each asks the model an older question, or none.
    """

    requests: int
    seconds: float
    packs_per_s: float
    p50_ms: float
    p95_ms: float
    latencies_ms: tuple[float, ...] = field(default=(), repr=False)
    unscoped: tuple[str, ...] = field(default=(), repr=False)
    newest_user_left_out: tuple[str, ...] = field(default=(), repr=False)

    def to_dict(self) -> dict[str, float | int]:
        """The summary figures as a dict: ``latencies_ms`` left out, the id lists counted."""
        out = asdict(self)
        del out["latencies_ms"]
        out["unscoped"] = len(self.unscoped)
        out["newest_user_left_out"] = len(self.newest_user_left_out)
        return out


def scope_rows(store: CognitionFrame, request: Request) -> pl.DataFrame:
    """The items of a request's scope: ``store`` filtered by its ``where``, materialised.

    Parameters
    ----------
    store
        The whole store (a frame of the canonical schema).
    request
        The request; ``where=None`` is the whole store.

    Returns
    -------
    polars.DataFrame
        The rows of ``store`` that ``where`` keeps, in store order.

    Raises
    ------
    RecordError
        If ``where`` is not a valid predicate over the items (it does not
        parse, names an unknown column or metadata key, or does not type
        check); it names the request and the field ``where``, and its cause
        is the frame's or Polars' error.

    Examples
    --------
    >>> from datetime import UTC
    >>> from cognoxium.items.records import records_to_frame
    >>> store = CognitionFrame(records_to_frame([
    ...     {"id": "a", "role": "user", "text": "hi"},
    ...     {"id": "b", "role": "assistant", "text": "hello"}]))
    >>> scope_rows(store, Request(id="r", budget=10, where="role = 'user'"))["id"].to_list()
    ['a']
    >>> scope_rows(store, Request(id="r", budget=10, where="colour = 'red'"))
    Traceback (most recent call last):
    ...
    cognoxium.exceptions.RecordError: field where: request 'r': invalid where clause: ...'colour'...
    """
    if request.where is None:
        return store.collect()
    return collect_scope(where_filter(store, request), request)


def rank_request(
    scope: CognitionFrame,
    request: Request,
    method: RankMethod,
    *,
    store: CognitionFrame | None = None,
    retrieval: RetrievalSettings | None = None,
    profile: str | TokenProfile = "cl100k_base",
    as_of: datetime | None = None,
) -> CognitionFrame:
    """The request's scope ranked as :func:`run_batch` ranks it, by one ``rank`` call.

    ``"none"`` never ranks. Every other method is :meth:`CognitionFrame.rank
    <cognoxium.frame.CognitionFrame.rank>` with the arguments its entry in the
    rank registry takes from the request
    (:meth:`~cognoxium.engine.ranks.RankEntry.batch_arguments`): for the
    built-in methods the request's query, ``retrieval``'s model, fusion
    constant and neighbour weight; ``hybrid-lineage`` and ``learned`` look
    derived items up in ``store``, and ``learned`` scores with
    ``retrieval.ranker``'s model file (``None``: the shipped model);
    ``strategies`` assembles under the request's item budget (its budget
    minus its reserve), ``profile`` and ``as_of``. A request without a query
    (or a blank one) is not ranked by a method that takes one (all built-in
    ones but recency and priority).

    Parameters
    ----------
    scope
        The items the request may pack.
    request
        The request.
    method
        One of :func:`batch_rank_methods`.
    store
        The whole store (for ``hybrid-lineage`` and ``learned``); ``None``
        means the scope.
    retrieval
        Model, RRF constant and neighbour weight; ``None`` for the defaults.
    profile
        The token profile (for ``strategies``).
    as_of
        The evaluation time (for ``strategies``).

    Returns
    -------
    CognitionFrame
        ``scope`` with one more plan node, or ``scope`` itself when unranked.

    Raises
    ------
    PlanError
        If ``method`` is not one of :func:`batch_rank_methods`.

    Examples
    --------
    >>> scope = CognitionFrame([{"id": "a", "role": "user", "text": "refund"}])
    >>> ranked = rank_request(scope, Request(id="r", budget=10, query="refund"), "bm25")
    >>> print(ranked.explain().splitlines()[0])
    Rank bm25 query='refund'
    """
    check_rank_method(method)
    if method == NO_RANK:
        return scope
    context = _rank_context(
        request,
        lineage=store if store is not None else scope,
        retrieval=retrieval,
        profile=profile,
        as_of=as_of,
    )
    arguments = rank_entry(method).batch_arguments(context)
    return scope if arguments is None else scope.rank(method, **arguments)


def _rank_context(
    request: Request,
    *,
    lineage: object,
    retrieval: RetrievalSettings | None,
    profile: str | TokenProfile,
    as_of: datetime | None,
) -> RankContext:
    """What ``request`` gives the rank of its scope (see :func:`rank_request`)."""
    query = request.query if request.query is not None and request.query.strip() else None
    return RankContext(
        query=query,
        budget=request.budget - request.options.reserve,
        as_of=as_of,
        profile=profile,
        retrieval=retrieval if retrieval is not None else RetrievalSettings(),
        lineage=lineage,
    )


def _percentile(values: Sequence[float] | np.ndarray, q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=np.float64), q)) if len(values) else 0.0


PROGRESS_EVERY_S = 60.0
"""Seconds between the progress lines of a batch whose standard error is not a terminal."""


@contextmanager
def _progress(total: int, enabled: bool) -> Iterator[Callable[..., None]]:
    """Give a callback advancing the progress (by 1, or a count) of ``total`` requests.

    On a terminal, a progress bar; otherwise (a log, a pipe, a scheduler's
    job), a line on standard error every :data:`PROGRESS_EVERY_S` seconds
    (see :class:`_ProgressLines`), so that a long first run, which embeds
    every item its rank reads, says how far it is.
    """
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
    )

    console = Console(stderr=True)
    if enabled and not console.is_terminal:
        with _ProgressLines(total, PROGRESS_EVERY_S) as lines:
            yield lines.advance
        return
    with Progress(
        TextColumn("packing"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=console,
        disable=not (enabled and console.is_terminal),
        transient=True,
    ) as bar:
        task = bar.add_task("packing", total=total)
        yield partial(bar.advance, task)


class _ProgressLines:
    """Write ``packing: k of n requests, <elapsed>, about <left> left`` every ``every`` seconds.

    A thread of its own writes the line, so a request that takes long (the
    first of a large scope, whose items are embedded) still shows the time
    going. ``left`` is the elapsed time scaled by the requests not done, once
    one is done. It writes nothing once every request is done, or after the
    ``with`` block.
    """

    def __init__(self, total: int, every: float) -> None:
        self.total, self.every = total, every
        self.done = 0
        self.started = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="progress-lines", daemon=True)

    def __enter__(self) -> _ProgressLines:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def advance(self, count: int = 1) -> None:
        self.done += count

    def line(self) -> str:
        """The progress line as it stands now."""
        elapsed = time.monotonic() - self.started
        text = f"packing: {self.done:,} of {self.total:,} requests, {_duration(elapsed)}"
        if self.done:
            text += f", about {_duration(elapsed * (self.total - self.done) / self.done)} left"
        return text

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            if self.done >= self.total:
                return
            sys.stderr.write(self.line() + "\n")
            sys.stderr.flush()


def _duration(seconds: float) -> str:
    """``"42 s"``, ``"3 min 5 s"`` or ``"2 h 14 min"``."""
    whole = round(seconds)
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    return f"{whole // 3600} h {whole % 3600 // 60} min"


def run_batch(
    store: pl.DataFrame | CognitionFrame,
    requests: Sequence[Request],
    *,
    out_dir: str | os.PathLike[str],
    options: PackOptions | None = None,
    rank: RankMethod = "learned",
    retrieval: RetrievalSettings | None = None,
    manifests: ManifestForm = "parquet",
    bodies: bool = True,
    workers: int | None = 1,
    progress: bool = False,
    commit: bool = True,
) -> BatchStats:
    """Pack every request over one store and write the packs and manifests.

    The requests are grouped by scope (their ``where``): scopes in the order
    of their first request, the requests of a scope in their order, which
    is the order of the files. A scope is the store filtered by its
    ``where``, computed once per distinct clause over one split of the
    store (a clause that fixes a metadata key to text, such as
    ``metadata.conversation = 'c1'``, reads only the items of that value,
    never the whole store). Each request is ranked by
    ``rank`` with the same :meth:`CognitionFrame.rank
    <cognoxium.frame.CognitionFrame.rank>` call a user makes (see
    :func:`rank_request`), so ``explain()`` shows it and the Python API gives
    the same manifest; then it is packed under the request's token budget
    (see :func:`cognoxium.packing.packer.pack`).

    ============== ===========================================================
    rank           scores (requests without a query are not ranked, except
                   by recency and priority)
    ============== ===========================================================
    bm25           Okapi BM25; the scope's queries are scored together
    embedding      embedding cosine (all-MiniLM-L6-v2 by default)
    hybrid         reciprocal rank fusion of BM25 and embedding cosine;
                   k = 5 by default
    hybrid-lineage reciprocal rank fusion of BM25, embedding cosine, the
                   cosine of each item with the item before it, and the best
                   cosine of the store's items derived from it (observations,
                   summaries: lineage expansion); k = 10 by default
    learned        the default: the shipped learned ranker (logistic
                   regression over ranking features: the hybrid-lineage
                   lists, BM25 of windows and of derived items, speaker, time
                   and cost; :mod:`cognoxium.retrieval.learned`), or the
                   model file of ``retrieval.ranker``; the store is its
                   lineage
    recency        the ``created_at`` time
    priority       the priority
    strategies     the context strategy registry's default assembly
                   (:class:`cognoxium.strategies.ContextAssembler`) under the
                   request's budget: its fragments first, by relevance. Its
                   executor's per-strategy timeouts (30 s) and circuit
                   breakers apply, so a strategy that times out changes the
                   ranking of later requests: byte-identical manifests hold
                   only while no strategy times out.
    none           no ranking: the scope's order and priorities
    ============== ===========================================================

    A method an application registers
    (:func:`~cognoxium.engine.ranks.register_rank`) is offered too.

    Parameters
    ----------
    store
        The items, a frame of the canonical schema.
    requests
        The requests, with unique ids.
    out_dir
        Output directory for the packs and the manifests (their parts): missing,
        empty, or written by an earlier run. Every file is committed in one
        step (``out_dir`` becomes a link to a fresh version directory
        ``<out_dir>.<run id>``, swapped by one rename): a reader sees every
        file of the previous run or every file of this one, even if the run
        fails or is killed. Leftovers of killed runs are removed,
        and a second run into the same ``out_dir`` is refused while one
        writes (see Notes).
    options
        The batch's pack options (:class:`~cognoxium.packing.options.PackOptions`;
        ``None``: the defaults): its token profile, and the ``reserve``,
        ``overflow``, ``as_of``, ``turns``, ``start_on``, ``gaps``,
        ``tool_errors``, ``target`` and ``gap_note`` of the requests that do
        not give their own (see :attr:`Request.options`). An
        ``as_of`` of ``None`` means the current time, read once for the
        whole batch; give a fixed time for byte-identical manifests.
    rank
        One of :func:`batch_rank_methods` (table above).
    retrieval
        Model, RRF constant (``None``: the method's own) and neighbour
        expansion of the embedding and fused rank methods.
    manifests
        How the manifests are stored: ``"parquet"`` (``manifests/`` and
        ``manifest_headers/`` parts, about a tenth of the bytes) or
        ``"jsonl"`` (``manifests/`` parts of one manifest per line); both are
        byte-identical on rerun (see :mod:`cognoxium.packing.manifests`).
    bodies
        Write each pack's ``body`` in its packs line: the context fields of
        the model API request that sends it (:func:`request_body`: the
        ``messages``, and Anthropic's ``system``), with the texts the pack
        cut and its gap notes, which the item ids cannot rebuild; read them
        with :func:`~cognoxium.packing.manifests.read_bodies`. ``False``
        writes the ids only (a smaller table, for analysis).
    workers
        Processes that pack scopes at once (``None``: one per CPU this
        process may use); ``1`` packs in this process. The files are the
        same, byte for byte, whatever the number: the scopes are cut into
        tasks of about 20,000 items, the same whatever the number, and each
        task writes its own part of every table where it is packed; this
        process only collects the tasks' latencies and commits. A
        ``KeyboardInterrupt`` ends the workers at once, their running tasks
        included, and commits nothing.
    progress
        Show progress on standard error: a bar when it is a terminal, else
        a line every :data:`PROGRESS_EVERY_S` seconds.
    commit
        Commit the files in one step, as described under ``out_dir``.
        ``False`` writes them straight into ``out_dir`` (created if missing),
        for a caller that commits a larger set of files itself, as
        :func:`~cognoxium.app.locomo.run_locomo` does; a failed run may then
        leave partial files there.

    Returns
    -------
    BatchStats
        Throughput and per-pack latency.

    Raises
    ------
    RecordError
        If two requests share an id, ``reserve`` exceeds the budget of a
        request that takes it, or a request's ``where`` clause is not a
        valid predicate over the items (including a ``metadata.<key>`` that
        no item of the store has); the error names the request (and its file
        and line, when read by :func:`read_requests`) and the field.
    BudgetError
        If a request's required items alone exceed its budget; the message
        names the request and the items.
    PlanError
        If ``rank`` is not one of :func:`batch_rank_methods`, or ``manifests`` not
        one of :data:`~cognoxium.packing.manifests.MANIFEST_FORMS`.
    OutputError
        If another run is writing ``out_dir`` (it holds the lock), or
        ``out_dir`` is a non-empty directory or a link that no run wrote;
        the message names the path.
    OSError
        If ``out_dir`` cannot be written (``FileExistsError`` when it is a
        file); the exception names the path.

    Notes
    -----
    The layout beside ``out_dir`` (here ``out/sample``, a batch of one task)::

        out/sample -> sample.20260101T120000Z-1a2b3c4d
        out/sample.20260101T120000Z-1a2b3c4d/packs/part-00000.jsonl
        out/sample.20260101T120000Z-1a2b3c4d/manifests/part-00000.parquet
        out/sample.20260101T120000Z-1a2b3c4d/manifest_headers/part-00000.jsonl
        out/.sample.lock

    A run holds an exclusive ``flock`` on ``.sample.lock`` while it
    writes; the kernel releases it when the process ends, however it ends.
    Under the lock the run first removes every ``sample.<run id>`` that the
    link does not name (leftovers of killed runs), writes a new version,
    syncs it to disk, swaps the link, and removes the previous version. To
    read the files of one run while another run may commit, resolve the
    link once (``os.path.realpath``) or open every file before reading.

    Examples
    --------
    >>> import tempfile, json, pathlib
    >>> from datetime import UTC
    >>> from cognoxium.items.records import records_to_frame
    >>> store = records_to_frame([
    ...     {"id": "a", "role": "user", "text": "my invoice is wrong",
    ...      "created_at": "2025-01-01T00:00:00Z", "metadata": {"topic": "billing"}},
    ...     {"id": "b", "role": "user", "text": "the app crashes",
    ...      "created_at": "2025-01-02T00:00:00Z", "metadata": {"topic": "bugs"}}])
    >>> out = pathlib.Path(tempfile.mkdtemp()) / "out"
    >>> reqs = [Request(id="r1", budget=100, query="invoice",
    ...                 where="metadata.topic = 'billing'")]
    >>> when = PackOptions(as_of=datetime(2025, 6, 1, tzinfo=UTC))
    >>> stats = run_batch(store, reqs, out_dir=out, options=when, rank="bm25")
    >>> stats.requests
    1
    >>> from cognoxium.packing.manifests import scan_packs
    >>> scan_packs(out).select("request_id", "ids", "budget").collect().rows()
    [('r1', ['a'], 100)]
    >>> out.is_symlink(), sorted(p.name for p in out.resolve().iterdir())
    (True, ['manifest_headers', 'manifests', 'packs'])
    """
    settings = BatchSettings(
        options=(options if options is not None else PackOptions()).at_time(),
        rank=rank,
        retrieval=retrieval if retrieval is not None else RetrievalSettings(),
        bodies=bodies,
    )
    requests = prepare_requests(requests, rank=rank, manifests=manifests, options=settings.options)
    write = partial(
        _write_batch,
        store,
        requests,
        settings=settings,
        progress=progress,
        manifests=manifests,
        workers=default_workers() if workers is None else _checked_workers(workers),
    )
    if not commit:
        folder = Path(out_dir)
        folder.mkdir(parents=True, exist_ok=True)
        return write(folder)
    with committed_output(out_dir) as folder:
        return write(folder)


def prepare_requests(
    requests: Sequence[Request],
    *,
    rank: str = "learned",
    manifests: str = "parquet",
    options: PackOptions | None = None,
) -> list[Request]:
    """Check a batch's settings and ids, and give each request its pack options.

    What :func:`run_batch` does before packing: each request's
    :attr:`Request.options` are the batch's ``options`` with those the
    request gives in their place; an engine that packs elsewhere calls it
    first.

    Returns
    -------
    list of Request
        The requests, in order, each carrying its options.

    Raises
    ------
    PlanError
        If ``rank`` or ``manifests`` is unknown.
    RecordError
        If a request is not a :class:`Request` (``row`` its index), two
        requests share an id, ``reserve`` exceeds the budget of a request
        that takes it, or a request's ``previous`` is not the id of an
        earlier request with the same ``where``.

    Examples
    --------
    >>> [r.options.reserve for r in prepare_requests(
    ...     [Request(id="a", budget=100), Request(id="b", budget=100, reserve=5)],
    ...     options=PackOptions(reserve=10))]
    [10, 5]
    """
    check_rank_method(rank)
    if manifests not in MANIFEST_FORMS:
        raise PlanError(f"unknown manifest form {manifests!r}; use one of {list(MANIFEST_FORMS)}")
    for at, request in enumerate(requests):
        if not isinstance(request, Request):
            raise RecordError(
                f"a request must be a Request, got {type(request).__name__}; build one from a "
                "record with Request.model_validate(record), or read a file with read_requests",
                row=at,
                code="request.invalid",
            )
    ids = {r.id for r in requests}
    seen: dict[str, Request] = {}
    for request in requests:
        if request.id in seen:
            raise request.error("duplicate request id", field="id")
        _check_previous(request, seen, ids)
        seen[request.id] = request
    defaults = options if options is not None else PackOptions()
    return [_with_options(r, r.over(defaults)) for r in requests]


def _check_previous(request: Request, earlier: dict[str, Request], ids: set[str]) -> None:
    """Raise unless ``request.previous`` is ``None`` or an earlier request of its scope."""
    name = request.previous
    if name is None:
        return
    if name == request.id:
        raise request.error(
            "previous names the request itself: a pack continues an earlier one",
            field="previous",
        )
    continued = earlier.get(name)
    if continued is None:
        where = "comes after it" if name in ids else "is not in the batch"
        raise request.error(
            f"previous names request {name!r}, which {where}: a pack continues an earlier one",
            field="previous",
        )
    if continued.where != request.where:
        raise request.error(
            f"previous names request {name!r}, whose where clause {continued.where!r} is not "
            f"this request's ({request.where!r}): a pack continues one of its own scope",
            field="previous",
        )


def _with_options(request: Request, options: PackOptions) -> Request:
    """A copy of ``request`` carrying ``options`` (its file and line kept)."""
    copy = request.model_copy()
    copy._options = options
    return copy


def _write_batch(
    store: pl.DataFrame | CognitionFrame,
    requests: Sequence[Request],
    folder: Path,
    /,
    *,
    settings: BatchSettings,
    progress: bool,
    manifests: ManifestForm,
    workers: int,
) -> BatchStats:
    """Pack the requests and write the parts of the packs and manifests into ``folder``.

    ``folder`` exists; see :func:`run_batch` for the arguments. The requests
    of one scope are one :func:`pack_scope` call, over the scope's rows from
    one split of the store; consecutive scopes make a task, cut the same
    whatever ``workers``, and each task writes its own part of every table,
    here or in one of ``workers`` processes. This process keeps only the
    tasks' latencies.
    """
    started = time.perf_counter()
    frame = store if isinstance(store, CognitionFrame) else CognitionFrame(store)
    units = batch_units(requests)
    scopes = ScopeIndex(frame, units)
    lineage = scopes.derived if settings.reads_lineage else _no_lineage
    ranges = task_ranges(unit_weights(units, frame))
    parts: list[np.ndarray] = []
    left_out: list[str] = []
    unscoped: list[str] = []
    with _progress(len(requests), progress) as advance, _heap_frozen():
        tasks = _noting_unscoped(tasks_of(units, ranges, scopes.rows_of, lineage), unscoped)
        for stats in run_tasks(tasks, settings, manifests, folder, workers, done=advance):
            parts.append(stats.latencies_ms)
            left_out.extend(stats.newest_user_left_out)
    finish_parts(folder, manifests, len(ranges))
    latencies = np.concatenate(parts) if parts else np.empty(0)
    seconds = time.perf_counter() - started
    return BatchStats(
        requests=len(requests),
        seconds=seconds,
        packs_per_s=len(requests) / seconds if seconds > 0 else 0.0,
        p50_ms=_percentile(latencies, 50),
        p95_ms=_percentile(latencies, 95),
        latencies_ms=tuple(latencies.tolist()),
        unscoped=tuple(unscoped),
        newest_user_left_out=tuple(left_out),
    )


def _noting_unscoped(tasks: Iterator[Task], unscoped: list[str]) -> Iterator[Task]:
    """The tasks, noting in ``unscoped`` the requests of the scopes that hold no item."""
    for task in tasks:
        for unit, rows in zip(task.units, task.rows, strict=True):
            if rows.is_empty():
                unscoped.extend(request.id for request in unit.requests)
        yield task


def _no_lineage(scope: pl.DataFrame) -> None:
    """A scope's lineage items for a rank that reads none."""
    return None


def _checked_workers(workers: int) -> int:
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise PlanError(f"workers must be a whole number of processes, at least 1; got {workers!r}")
    return workers


@contextmanager
def _heap_frozen() -> Iterator[None]:
    """Leave the objects made before a batch out of Python's garbage collections during it.

    A batch makes many short-lived objects, so the collector runs often,
    and each full collection would traverse the process's whole heap (the
    store, the imported modules) again. ``gc.freeze`` moves what exists to
    a permanent generation, ``gc.unfreeze`` returns it on leaving (also on
    error). A process that froze objects itself (``gc.get_freeze_count()``)
    is left as it is.
    """
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


@dataclass(frozen=True)
class BatchSettings:
    """The settings every request of a batch shares.

    Attributes
    ----------
    options
        The batch's pack options, ``as_of`` fixed (the time of the requests
        without their own): what each request's options start from.
    rank
        One of :func:`batch_rank_methods`.
    retrieval
        Model, fusion constant, neighbour weight and ranker file of the rank methods.
    bodies
        Whether each pack's line holds its request ``body`` (see :func:`request_body`).
    """

    options: PackOptions = field(default_factory=lambda: PackOptions().at_time())
    rank: RankMethod = "learned"
    retrieval: RetrievalSettings = field(default_factory=RetrievalSettings)
    bodies: bool = True

    @property
    def reads_lineage(self) -> bool:
        """Whether the rank reads the items derived from a scope's items (its lineage)."""
        return self.rank != NO_RANK and rank_entry(self.rank).reads_lineage


BYTES_PER_TOKEN = 4.0
"""The bytes of English text per token, as an estimate (about 4 for cl100k_base)."""


class PreparedScope:
    """The work one scope's requests share: its rows, its :class:`PackScope` and its ranks.

    Built once per scope and reused by every :func:`pack_scope` call on it
    (the rank of a query is computed once for all its budgets).

    Parameters
    ----------
    store
        The whole store (the lineage of ``hybrid-lineage`` and ``learned``).
    scope
        The scope's items, materialised (a frame of the canonical schema).
    settings
        The batch's settings.
    """

    def __init__(self, store: CognitionFrame, scope: pl.DataFrame, settings: BatchSettings) -> None:
        self.store = store
        self.df = scope
        """The scope's rows."""
        self.settings = settings
        self._pack: PackScope | None = None
        self._ranks: dict[tuple[Any, ...], pl.Series] = {}

    @cached_property
    def frame(self) -> CognitionFrame:
        """The scope as a frame (what :func:`rank_request` ranks).

        Its rows come from the checked store, so they are not checked again.
        """
        return CognitionFrame._of_checked(self.df)

    def pack(self, request: Request) -> PackScope:
        """The scope's :class:`PackScope`, made at the first request (whose error it raises)."""
        if self._pack is None:
            profile = self.settings.options.profile
            self._pack = _packing(request, lambda: PackScope(self.df, profile=profile))
        return self._pack

    def count_tokens(self, requests: Sequence[Request]) -> None:
        """Count the scope's token costs for ``requests``' packs (:meth:`PackScope.count_tokens`).

        Counted at once only when the packs together may reach most rows:
        their budgets add up to at least half the scope's text, estimated at
        :data:`BYTES_PER_TOKEN` bytes a token. Otherwise (a few packs over a
        large scope) each pack counts the rows its selection reaches. Rows
        that cannot fit whole in the largest of the budgets are left to the
        pack that reaches them. The packs are the same either way.
        """
        if 2 * sum(r.budget for r in requests) < self._text_tokens:
            return
        scope = self.pack(requests[0])
        within = max(r.budget for r in requests)
        _packing(requests[0], lambda: scope.count_tokens(within))

    @cached_property
    def _text_tokens(self) -> float:
        """The scope's text in tokens, estimated from its UTF-8 bytes."""
        text = self.df.get_column("text").str.len_bytes().sum()
        return float(text or 0) / BYTES_PER_TOKEN

    def rank(self, request: Request, as_of: datetime | None) -> pl.Series | None:
        """The rank of the scope's rows for ``request`` (``None``: the rows' own rank).

        The same as the ``rank`` column of :func:`rank_request`'s frame;
        computed once per rank key (the query, and what else the method
        takes from the request: see
        :meth:`~cognoxium.engine.ranks.RankEntry.batch_key`).
        """
        key = self._rank_key(request, as_of)
        if key is None:
            return None
        if key not in self._ranks:
            ranked = self._ranked(request, as_of)
            self._ranks[key] = _packing(request, ranked.collect).get_column("rank")
        return self._ranks[key]

    def _ranked(self, request: Request, as_of: datetime | None) -> CognitionFrame:
        """The scope as :func:`rank_request` ranks it for ``request``."""
        return rank_request(
            self.frame,
            request,
            self.settings.rank,
            store=self.store,
            retrieval=self.settings.retrieval,
            profile=self.settings.options.profile,
            as_of=as_of,
        )

    def _rank_key(self, request: Request, as_of: datetime | None) -> tuple[Any, ...] | None:
        """The key of the request's rank in the scope's ranks (``None``: not ranked)."""
        method = self.settings.rank
        if method == NO_RANK:
            return None
        context = _rank_context(
            request,
            lineage=self.store,
            retrieval=self.settings.retrieval,
            profile=self.settings.options.profile,
            as_of=as_of,
        )
        return rank_entry(method).batch_key(context)

    def rank_all(self, requests: Sequence[Request]) -> None:
        """Rank the new rank keys of ``requests`` at once, where the method allows (BM25, learned).

        The rank nodes of the requests go to
        :func:`~cognoxium.engine.ranks.collect_ranks`, whose batched lowering
        scores them in one pass (BM25 tokenizes all the queries in one
        call; the learned rank embeds them in one run of the model); a
        method without a batched lowering ranks each key when its first
        request comes (:meth:`rank`).
        """
        method = self.settings.rank
        if method == NO_RANK or rank_entry(method).lower_many is None:
            return
        nodes: dict[tuple[Any, ...], Rank] = {}
        for request in requests:
            when = request.options.as_of
            key = self._rank_key(request, when)
            if key is None or key in self._ranks or key in nodes:
                continue
            plan = self._ranked(request, when)._plan
            assert isinstance(plan, Rank)
            nodes[key] = plan
        for key, column in zip(nodes, collect_ranks(list(nodes.values())), strict=True):
            self._ranks[key] = column


def _packing(request: Request, work: Callable[[], _T]) -> _T:
    """``work()``, with its packing errors naming ``request``."""
    try:
        return work()
    except (BudgetError, MessageError) as exc:
        raise exc.within(f"request {request.id!r}", request_id=request.id) from None
    except (PackError, PlanError) as exc:
        raise request.error(f"cannot pack: {exc}") from exc
    except pl.exceptions.PolarsError as exc:
        raise request.error(f"cannot pack: {polars_error_text(exc)}") from exc


@dataclass(frozen=True)
class ScopeResult:
    """The packs and manifests of some requests over one scope, as columns.

    Attributes
    ----------
    requests
        The ``k`` requests, in order.
    packs
        ``k`` rows: ``request_id``, ``budget`` and ``used_tokens`` (tokens),
        ``ids`` (the packed ids in pack order), and, unless the batch writes
        no bodies, ``body`` (the canonical JSON text of :func:`request_body`),
        as the packs parts hold them.
    manifests
        The ``k`` manifests without their entries (labelled by request id).
    entries
        ``k * n`` rows of :data:`~cognoxium.packing.packer.ENTRY_SCHEMA`
        (``n`` items in the scope): request ``i``'s entries are rows
        ``i * n`` to ``(i + 1) * n - 1``.
    latencies_ms
        Per request, the milliseconds of its rank and selection.
    newest_user_left_out
        The ids of the requests whose pack left out the newest user message
        (:attr:`~cognoxium.packing.packer.PackOutcome.newest_user_message_left_out`).
    """

    requests: tuple[Request, ...]
    packs: pl.DataFrame
    manifests: tuple[PackManifest, ...]
    entries: pl.DataFrame
    latencies_ms: tuple[float, ...]
    newest_user_left_out: tuple[str, ...] = ()

    def pack_lines(self) -> Iterator[str]:
        """The packs lines for these requests (canonical JSON, no newline).

        A ``body`` column holds each body's canonical JSON text, spliced in as
        the line's first key (keys sort, so it is the first).
        """
        if "body" not in self.packs.columns:
            for row in self.packs.iter_rows(named=True):
                yield canonical_json(row)
            return
        bodies = self.packs.get_column("body").to_list()
        rest = self.packs.drop("body").iter_rows(named=True)
        for body, row in zip(bodies, rest, strict=True):
            yield '{"body":' + body + "," + canonical_json(row)[1:]

    def take(self, start: int, stop: int) -> ScopeResult:
        """The result of requests ``start`` to ``stop - 1`` only (``0 <= start <= stop <= k``).

        Examples
        --------
        >>> from datetime import UTC
        >>> from cognoxium.items.records import records_to_frame
        >>> store = CognitionFrame(records_to_frame([{"id": "a", "role": "user", "text": "hi",
        ...                                           "created_at": "2025-01-01T00:00:00Z"}]))
        >>> settings = BatchSettings(PackOptions(as_of=datetime(2025, 6, 1, tzinfo=UTC)), "none")
        >>> result = pack_scope(store, [Request(id=f"r{b}", budget=b) for b in (4, 40)],
        ...                     settings)
        >>> part = result.take(1, 2)
        >>> [r.id for r in part.requests], part.packs["ids"].to_list(), part.entries.height
        (['r40'], [['a']], 1)
        """
        k = len(self.requests)
        if not 0 <= start <= stop <= k:
            raise PlanError(f"requests {start} to {stop} are not a range of the {k} requests")
        n = self.entries.height // k if k else 0
        left_out = set(self.newest_user_left_out)
        return ScopeResult(
            requests=self.requests[start:stop],
            packs=self.packs.slice(start, stop - start),
            manifests=self.manifests[start:stop],
            entries=self.entries.slice(start * n, (stop - start) * n),
            latencies_ms=self.latencies_ms[start:stop],
            newest_user_left_out=tuple(r.id for r in self.requests[start:stop] if r.id in left_out),
        )

    def write(self, packs: IO[str], manifests: ManifestWriter) -> None:
        """Append these requests' packs lines to ``packs`` and manifests to ``manifests``.

        What a task of :func:`run_batch` writes into its part for a scope's requests.
        """
        ids = [r.id for r in self.requests]
        manifests.write_many(ids, list(self.manifests), self.entries)
        packs.writelines(line + "\n" for line in self.pack_lines())


def pack_scope(
    store: CognitionFrame,
    requests: Sequence[Request],
    settings: BatchSettings,
    *,
    prepared: PreparedScope | None = None,
) -> ScopeResult:
    """Pack requests that share one scope (one ``where``), with the scope's work done once.

    The scope's rows, checks, rendering, exclusions, token counts, input
    fingerprint up to the rank and manifest columns are computed once (see
    :class:`~cognoxium.packing.packer.PackScope`); each request's rank is
    computed once per query, its selection runs over the scope's arrays
    with every cost known, and the manifests' entries are built as columns
    for all requests at once.
    Every pack and manifest equals what :meth:`CognitionFrame.pack
    <cognoxium.frame.CognitionFrame.pack>` gives for the request over
    :func:`rank_request`'s frame.

    Parameters
    ----------
    store
        The whole store (a frame of the canonical schema).
    requests
        ``k`` requests with one ``where``; a request that
        :func:`prepare_requests` did not give its options takes the batch's
        (``settings.options``) with its own in their place.
    settings
        The batch's profile, rank method, default ``as_of`` and retrieval settings.
    prepared
        The scope's shared work from an earlier call (``None``: made here).

    Returns
    -------
    ScopeResult
        The packs and manifests, in request order.

    Raises
    ------
    RecordError
        If a ``where`` is invalid or differs between the requests, or a
        request cannot be packed; it names the request.
    BudgetError
        If a request's required items alone exceed its budget.

    Examples
    --------
    >>> from datetime import UTC
    >>> from cognoxium.items.records import records_to_frame
    >>> store = CognitionFrame(records_to_frame([
    ...     {"id": "a", "role": "user", "text": "my invoice is wrong",
    ...      "created_at": "2025-01-01T00:00:00Z"},
    ...     {"id": "b", "role": "user", "text": "the app crashes",
    ...      "created_at": "2025-01-02T00:00:00Z"}]))
    >>> settings = BatchSettings(PackOptions(as_of=datetime(2025, 6, 1, tzinfo=UTC)), "bm25")
    >>> result = pack_scope(store, [Request(id="r1", budget=12, query="invoice"),
    ...                             Request(id="r2", budget=12, query="crash")], settings)
    >>> result.packs.drop("body").rows()
    [(12, ['a'], 'r1', 11), (12, ['b'], 'r2', 10)]
    >>> print(next(result.pack_lines())[:64])
    {"body":{"messages":[{"content":"my invoice is wrong","role":"us
    >>> result.entries.height, [m.label for m in result.manifests]
    (4, ['r1', 'r2'])
    """
    if not requests:
        raise PlanError("pack_scope needs at least one request")
    requests = [
        r if r._options is not None else _with_options(r, r.over(settings.options))
        for r in requests
    ]
    where = requests[0].where
    for request in requests:
        if request.where != where:
            raise request.error(
                f"the where clause {request.where!r} is not the scope's ({where!r})", field="where"
            )
    if prepared is None:
        prepared = PreparedScope(store, scope_rows(store, requests[0]), settings)
    _packing(requests[0], lambda: prepared.rank_all(requests))
    prepared.count_tokens(requests)
    continued = {r.previous for r in requests if r.previous is not None}
    earlier: dict[str, ContextPack] = {}
    outcomes: list[PackOutcome] = []
    latencies: list[float] = []
    for request in requests:
        t0 = time.perf_counter()
        outcome = _outcome(prepared, request, _continued_pack(request, earlier))
        if request.id in continued:
            earlier[request.id] = prepared.pack(request).context_pack(outcome)
        outcomes.append(outcome)
        latencies.append((time.perf_counter() - t0) * 1000.0)
    scope = prepared.pack(requests[0])
    entries = scope.entries(outcomes)
    packs = _pack_rows(scope, requests, outcomes)
    if settings.bodies:
        n = scope.df.height
        bodies = [
            _body(r, o, partial(scope.context_pack, o, entries=entries.slice(i * n, n)))
            for i, (r, o) in enumerate(zip(requests, outcomes, strict=True))
        ]
        packs.insert_column(0, pl.Series("body", canonical_json_list(bodies), dtype=pl.String))
    return ScopeResult(
        requests=tuple(requests),
        packs=packs,
        manifests=tuple(o.manifest for o in outcomes),
        entries=entries,
        latencies_ms=tuple(latencies),
        newest_user_left_out=tuple(
            r.id for r, o in zip(requests, outcomes, strict=True) if o.newest_user_message_left_out
        ),
    )


def _pack_rows(
    scope: PackScope, requests: Sequence[Request], outcomes: Sequence[PackOutcome]
) -> pl.DataFrame:
    """The packs rows of ``requests``: ``budget``, ``ids``, ``request_id``, ``used_tokens``."""
    selected = [o.decisions.selected for o in outcomes]
    lengths = np.array([len(rows) for rows in selected], dtype=np.int32)
    offsets = pa.array(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32))
    ids = scope.df.get_column("id").gather(np.concatenate(selected)).to_arrow()
    return pl.DataFrame(
        {
            "budget": pl.Series([r.budget for r in requests], dtype=pl.Int64),
            "ids": pl.Series(pa.ListArray.from_arrays(offsets, ids)),
            "request_id": pl.Series([r.id for r in requests], dtype=pl.String),
            "used_tokens": pl.Series([o.used_tokens for o in outcomes], dtype=pl.Int64),
        }
    )


def _body(
    request: Request, outcome: PackOutcome, pack: Callable[[], ContextPack]
) -> dict[str, Any]:
    """The body of ``request``'s pack; a pack its target cannot send names the request.

    :func:`request_body` of the pack; the messages of an OpenAI body are
    the outcome's own (written at once, so not copied), the pack is made
    only for an Anthropic body.
    """
    if request.options.target != "anthropic":
        return {"messages": outcome.messages}
    try:
        return request_body(pack(), request.options)
    except RecordError as exc:
        raise request.error(f"cannot render its pack for {request.options.target}: {exc}") from exc


def request_body(pack: ContextPack, options: PackOptions) -> dict[str, Any]:
    """The context fields of the model API request that sends ``pack``, for ``options.target``.

    What a batch writes as each pack's ``body``, the pack as
    :class:`~cognoxium.packing.packer.ContextPack` renders it, with what a
    pack costed and checked (cut texts, gap notes, policy renderings), which
    its item ids alone cannot rebuild. Add the model (and, for Anthropic,
    ``max_tokens``) to send it.

    Parameters
    ----------
    pack
        The pack.
    options
        Its options: ``target`` chooses the form; a ``cache_model`` that
        marks breakpoints (``"anthropic"``, ``"anthropic:<model>"``) marks
        them in an Anthropic body.

    Returns
    -------
    dict
        ``{"messages": [...]}``, :meth:`ContextPack.to_openai
        <cognoxium.packing.packer.ContextPack.to_openai>`, for ``"openai"``;
        the request of :meth:`ContextPack.to_anthropic
        <cognoxium.packing.packer.ContextPack.to_anthropic>` (``{"system",
        "messages"}``) for ``"anthropic"``.

    Raises
    ------
    RecordError
        If an Anthropic body holds a tool call whose arguments are not a JSON object.

    Examples
    --------
    >>> from datetime import UTC
    >>> from cognoxium.items.records import records_to_frame
    >>> frame = CognitionFrame(records_to_frame([
    ...     {"id": "s", "role": "system", "text": "Be brief.", "retention": "required"},
    ...     {"id": "u", "role": "user", "text": "Hello"}]))
    >>> options = PackOptions(as_of=datetime(2025, 6, 1, tzinfo=UTC))
    >>> request_body(frame.pack(100, options=options), options)
    {'messages': [{'role': 'system', 'content': 'Be brief.'}, {'role': 'user', 'content': 'Hello'}]}
    >>> anthropic = options.merged(target="anthropic")
    >>> body = request_body(frame.pack(100, options=anthropic), anthropic)
    >>> body["system"], body["messages"]
    ('Be brief.', [{'role': 'user', 'content': [{'type': 'text', 'text': 'Hello'}]}])
    """
    if options.target != "anthropic":
        return {"messages": pack.to_openai()}
    model = options.cache_model
    if model is None or get_cache_model(model).kind != "breakpoints":
        return pack.to_anthropic()
    return pack.to_anthropic(cache=True, cache_model=model)


def _continued_pack(request: Request, earlier: dict[str, ContextPack]) -> ContextPack | None:
    """The pack ``request`` continues, packed before it in its scope (``None``: none)."""
    if request.previous is None:
        return None
    pack = earlier.get(request.previous)
    if pack is None:
        raise request.error(
            f"previous names request {request.previous!r}, which is not an earlier request "
            "of this scope",
            field="previous",
        )
    return pack


def _outcome(
    prepared: PreparedScope, request: Request, previous: ContextPack | None
) -> PackOutcome:
    """One request's rank and selection over its prepared scope, continuing ``previous``."""
    options = request.options
    scope = prepared.pack(request)
    rank = prepared.rank(request, options.as_of)
    return _packing(
        request,
        lambda: scope.outcome(
            request.budget, options, label=request.id, rank=rank, previous=previous
        ),
    )
