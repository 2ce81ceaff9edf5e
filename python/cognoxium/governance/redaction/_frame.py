"""Redaction of a frame of context items over Polars: :func:`redact_frame`.

The vectorised path: one ``str.contains`` of every recogniser's prefilter
over a column, ``str.extract_all`` of the framed patterns over the rows that
pass, validators on the distinct candidates; only the rows with a validated
candidate are rewritten, by the reference engine
(:mod:`cognoxium.governance.redaction._engine`). Text and Json payloads,
and on request ``metadata`` and ``sources``, with new content hashes and the
counts per type.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

import polars as pl

from cognoxium.exceptions import SchemaError
from cognoxium.governance.lineage import redactions_from_lineage
from cognoxium.governance.redaction._engine import (
    apply_spans,
    hash_key,
    redact_str,
    redact_value,
    select_sources,
    text_spans,
)
from cognoxium.governance.redaction._model import (
    JSON_STRING,
    PAD,
    External,
    Recogniser,
    RecogniserArg,
    RedactionStyle,
    Source,
)
from cognoxium.items.model import canonical_json, content_hashes

__all__ = ["redact_frame"]


def _padded(column: str) -> pl.Expr:
    return pl.concat_str(pl.lit(PAD), pl.col(column), pl.lit(PAD))


def _rows_with_spans(values: pl.Series, recs: tuple[Source, ...]) -> pl.Series:
    """Positions of ``values`` for which :func:`find_spans` finds something, without Python per row.

    1. Prefilter: every recogniser's prefilter (its bare pattern, no
       lead/trail, or a looser one: a superset) over the whole column, in one
       ``str.contains``.
    2. Candidates: ``str.extract_all`` of the framed patterns over the padded
       values of the prefiltered rows, exploded to one candidate per row; a
       candidate without what its recogniser ``requires`` is dropped.
    3. Validation: each recogniser's validator on its distinct candidates.

    A recogniser set scans the distinct values in one batch.
    """
    empty = pl.Series("i", [], pl.UInt32)
    if not recs or values.len() == 0:
        return empty
    builtin = tuple(r for r in recs if isinstance(r, Recogniser))
    found = [_builtin_rows(values, builtin)]
    externals = [r for r in recs if isinstance(r, External)]
    if externals:
        distinct = values.drop_nulls().unique(maintain_order=True).to_list()
        hits: set[str] = set()
        for r in externals:
            todo = [t for t in distinct if t not in hits]
            hits.update(t for t, spans in zip(todo, r.spans(todo), strict=True) if spans)
        if hits:
            found.append(values.is_in(list(hits)).fill_null(False).arg_true())
    return pl.concat(found).unique().sort()


def _builtin_rows(values: pl.Series, recs: tuple[Recogniser, ...]) -> pl.Series:
    """The part of :func:`_rows_with_spans` for built-in recognisers."""
    empty = pl.Series("i", [], pl.UInt32)
    if not recs or values.len() == 0:
        return empty
    frame = values.rename("s").to_frame()
    # One pattern for all recognisers: a single scan of the column.
    anywhere = "|".join(f"(?:{r.prefilter})" for r in recs)
    hit = frame.select(pl.col("s").str.contains(anywhere).fill_null(False)).to_series()
    rows = hit.arg_true()
    if rows.len() == 0:
        return empty
    # The values are padded once, then scanned by every framed pattern.
    sub = (
        pl.DataFrame({"i": rows, "s": values.gather(rows)})
        .with_columns(_padded("s").alias("s"))
        .select(
            "i", *[pl.col("s").str.extract_all(r.scan).alias(f"c{j}") for j, r in enumerate(recs)]
        )
    )
    found: list[pl.Series] = []
    for j, r in enumerate(recs):
        cands = sub.select("i", pl.col(f"c{j}").alias("c")).explode("c").drop_nulls("c")
        if r.requires is not None:
            # A superset of the value: a candidate without it has no value that has it.
            cands = cands.filter(pl.col("c").str.contains(r.requires))
        if cands.height == 0:
            continue
        good = [c for c in cands.get_column("c").unique().to_list() if r._accepts_candidate(c)]
        if good:
            found.append(cands.filter(pl.col("c").is_in(good)).get_column("i"))
    if not found:
        return empty
    return pl.concat(found).unique().sort()


def _json_rows_with_spans(
    docs: pl.Series, recs: tuple[Source, ...], keys: bool = True
) -> pl.Series:
    """Positions of canonical JSON documents that :func:`redact_json` would change."""
    empty = pl.Series("i", [], pl.UInt32)
    if not recs or docs.len() == 0:
        return empty
    frame = pl.DataFrame({"i": pl.int_range(docs.len(), dtype=pl.UInt32, eager=True), "j": docs})
    # String literals: keys end with ':' in the match, values are decoded by Polars.
    literals = (
        frame.select("i", pl.col("j").str.extract_all(JSON_STRING + ":?").alias("lit"))
        .explode("lit")
        .drop_nulls("lit")
        .filter(pl.lit(keys) | ~pl.col("lit").str.ends_with(":"))
        .select("i", pl.col("lit").str.strip_suffix(":").str.json_decode(pl.String).alias("s"))
    )
    at = _rows_with_spans(literals.get_column("s"), recs)
    found = [literals.get_column("i").gather(at)]
    for r in recs:
        if not isinstance(r, Recogniser) or r._json_rx is None:
            continue
        pairs = (
            frame.select("i", pl.col("j").str.extract_all(r._json_rx.pattern).alias("c"))
            .explode("c")
            .drop_nulls("c")
        )
        if pairs.height == 0:
            continue
        good = [c for c in pairs.get_column("c").unique().to_list() if r._accepts_json_pair(c)]
        if good:
            found.append(pairs.filter(pl.col("c").is_in(good)).get_column("i"))
    return pl.concat(found).unique().sort()


def _row_recognisers(
    values: pl.Series, recs: tuple[Source, ...]
) -> tuple[list[tuple[Source, ...]], list[tuple[Source, ...]]]:
    """Per text, the recognisers that can find anything in its first pass, and in later ones.

    A recogniser whose prefilter (its bare pattern, no lead or trail, or a
    looser one: a superset of its matches) does not occur in a text finds
    nothing in it: it is left out of the text's first pass. If its value
    comes first, it also finds nothing after any redaction of the text: a
    replacement token (``[EMAIL]``, ``[EMAIL:3f2a9c1d]``, a mask) only
    removes characters and puts in brackets, colons, capitals, hex digits or
    ``*``, which no bare pattern matches across. The recognisers with a context before the value
    (an assignment's key, the words before an SSN) are kept for the later
    passes of every text, since a shorter token can bring context and value
    closer; so are recogniser sets, in every pass. Redacting with these
    recognisers gives the same text and counts as with all of them, at a
    fraction of the cost of the row-by-row path.

    Returns
    -------
    tuple of (list, list)
        The first-pass and the later-pass recognisers of each text, in
        ``recs`` order.
    """
    builtin = {j: r for j, r in enumerate(recs) if isinstance(r, Recogniser)}
    context = {
        j for j, r in builtin.items() if r.context is not None or not r.pattern.startswith("(?P<v>")
    }
    frame = values.fill_null("").rename("s").to_frame()
    checks = (pl.col("s").str.contains(r.prefilter).alias(f"r{j}") for j, r in builtin.items())
    rows = frame.select(checks).rows() if builtin else [()] * values.len()
    # Texts in which the same recognisers occur share their subsets.
    subsets: dict[tuple[bool, ...], tuple[tuple[Source, ...], tuple[Source, ...]]] = {}
    first: list[tuple[Source, ...]] = []
    later: list[tuple[Source, ...]] = []
    for row in rows:
        pair = subsets.get(row)
        if pair is None:
            absent = {j for j, hit in zip(builtin, row, strict=True) if not hit}
            pair = subsets[row] = (
                tuple(r for j, r in enumerate(recs) if j not in absent),
                tuple(r for j, r in enumerate(recs) if j not in absent or j in context),
            )
        first.append(pair[0])
        later.append(pair[1])
    return first, later


def _redact_texts(
    values: pl.Series, recs: tuple[Source, ...], style: str, key: bytes | None
) -> tuple[list[str], list[dict[str, int]]]:
    """:func:`redact_str` of each text, with the check for a fixed point done on the column.

    Each text gets one pass row by row (with the recognisers that can find
    anything in it); :func:`_rows_with_spans` then finds, over the column of
    results, the few texts in which a further pass finds something, and only
    those go on row by row. Same texts and counts as :func:`redact_str`.
    """
    first, later = _row_recognisers(values, recs)
    outs: list[str] = []
    counts: list[dict[str, int]] = []
    for value, subset in zip(values.to_list(), first, strict=True):
        found: dict[str, int] = {}
        spans = text_spans(value, subset)
        if spans:
            value = apply_spans(value, spans, style, key)
            for span in spans:
                found[span.type] = found.get(span.type, 0) + 1
        outs.append(value)
        counts.append(found)
    for i in _rows_with_spans(pl.Series(outs, dtype=pl.String), recs).to_list():
        outs[i] = redact_str(outs[i], later[i], style, key, counts[i])
    return outs, counts


def _merge_counts(old: str | None, new: Mapping[str, int]) -> str:
    merged: dict[str, int] = dict(json.loads(old)) if old and old != "{}" else {}
    for kind, n in new.items():
        merged[kind] = merged.get(kind, 0) + n
    return canonical_json(merged)


def _merged_counts(old: pl.Series, new: list[dict[str, int]]) -> list[str]:
    """Each row's ``redactions`` (``old``, canonical JSON) with its new counts added."""
    return [_merge_counts(was, counts) for was, counts in zip(old.to_list(), new, strict=True)]


def redact_frame(
    df: pl.DataFrame,
    *,
    style: RedactionStyle = "placeholder",
    key: bytes | str | None = None,
    types: Iterable[str] | str | None = None,
    recognisers: RecogniserArg = None,
    keys: bool = True,
    metadata: bool = False,
    sources: bool = False,
) -> pl.DataFrame:
    """Redact the Text and Json payloads of a frame of context items, vectorised.

    Text payloads are redacted as by :func:`redact_text`; Json payloads as by
    :func:`redact_json` (string values and, with ``keys``, object keys) and
    written back in canonical form. Binary and Reference payloads are left as
    they are; ``metadata`` and ``sources`` only when asked.

    Parameters
    ----------
    df
        A frame with the columns of :data:`cognoxium.items.schema.POLARS_SCHEMA`
        (at least ``payload_kind``, ``text``, ``json``, ``content_hash``);
        other columns are carried along.
    style, key, types, recognisers
        As for :func:`redact_text`.
    keys
        Redact the object keys of Json payloads (and of ``metadata`` when it
        is redacted), as :func:`redact_json` does.
    metadata
        Also redact the ``metadata`` column (canonical JSON) as by
        :func:`redact_json`. It is not part of the content hash. Without
        it, the tool calls a message sends beside its text
        (``metadata.tool_calls``) are still redacted: their arguments, as
        the calls of a Json payload are. Call ids and ``tool_call_id`` /
        ``tool_call_ids``, which pair a call with its result, never are.
    sources
        Also redact the ``uri`` and ``title`` of every entry of the
        ``sources`` column as by :func:`redact_text`.

    Returns
    -------
    polars.DataFrame
        The same rows and columns in the same order, with ``text``, ``json``
        and ``content_hash`` (and ``metadata``, ``sources`` when asked)
        rewritten on the rows that changed, and three String columns (added
        at the end, or updated if present): ``redactions``, a canonical JSON
        object ``{TYPE: count}`` over every redacted field (``"{}"`` when
        nothing was redacted); ``redacted_from``, the content hash before
        redaction on the rows whose payload changed, null elsewhere; and
        ``unredacted``, a canonical JSON list of the fields outside the
        payload that hold data on that row and were not redacted
        (``["metadata", "sources"]``), null when there is none. Redacting a
        redacted frame again adds to the counts and keeps earlier values on
        the rows that do not change.

    Raises
    ------
    SchemaError
        If ``df`` is not a Polars DataFrame, lacks a payload column, or lacks
        the ``metadata`` or ``sources`` column it is asked to redact.
    PlanError
        On an unknown style or type name, the ``"hash"`` style without a key,
        or invalid ``recognisers`` (see :func:`find_spans`).

    Notes
    -----
    No Python runs for a row that holds no candidate. The Text column and the
    decoded JSON strings go through one ``str.contains`` of every
    recogniser's prefilter over the whole column, then ``str.extract_all`` of
    the framed patterns over the remaining rows; candidates without what
    their recogniser ``requires`` are dropped on the column, and the
    validators run on the distinct candidates left. A :class:`RecogniserSet`
    has no pattern to prefilter with: it scans every distinct text (and
    decoded JSON string) once, in one :meth:`~RecogniserSet.find_batch` call.
    Only the rows with a validated candidate are rewritten, by the reference
    path (:func:`redact_text`, :func:`redact_json`) with the recognisers whose
    prefilter occurs in the row, so the two paths agree row by row and share
    one overlap resolution.

    Examples
    --------
    >>> from cognoxium.items.model import ContextItem
    >>> from cognoxium.items.convert import items_to_frame
    >>> df = items_to_frame([
    ...     ContextItem(id="a", role="user", text="I am ana@example.org",
    ...                 created_at="2024-01-01T00:00:00Z"),
    ...     ContextItem(id="b", role="tool", payload={"kind": "json", "value": {"ip": "10.1.2.3"}},
    ...                 created_at="2024-01-01T00:00:00Z"),
    ...     ContextItem(id="c", role="user", text="hello", created_at="2024-01-01T00:00:00Z",
    ...                 metadata={"owner": "bo@example.org"}),
    ... ])
    >>> out = redact_frame(df)
    >>> out.select("text", "json", "redactions", "unredacted").rows()
    [('I am [EMAIL]', None, '{"EMAIL":1}', None), (None, '{"ip":"[IP_ADDRESS]"}', '{"IP_ADDRESS":1}', None), ('hello', None, '{}', '["metadata"]')]
    >>> out.get_column("redacted_from").to_list() == [*df.get_column("content_hash")[:2], None]
    True
    >>> redact_frame(df, metadata=True).select("metadata", "redactions").row(2)
    ('{"owner":"[EMAIL]"}', '{"EMAIL":1}')
    """  # noqa: E501
    _check_columns(df, metadata=metadata, sources=sources)
    recs = select_sources(types, recognisers)
    hkey = hash_key(style, key)
    kinds = df.get_column("payload_kind").cast(pl.String)
    text_rows = (kinds == "text").arg_true()
    json_rows = (kinds == "json").arg_true()
    texts = df.get_column("text").gather(text_rows).fill_null("")
    docs = df.get_column("json").gather(json_rows).fill_null("null")
    text_hits = text_rows.gather(_rows_with_spans(texts, recs))
    json_hits = json_rows.gather(_json_rows_with_spans(docs, recs, keys))
    columns = _payload_columns(df)
    for payload, hits in (("text", text_hits), ("json", json_hits)):
        if hits.len() == 0:
            continue
        values = columns[payload].gather(hits)
        if payload == "text":
            new_values, row_counts = _redact_texts(values, recs, style, hkey)
        else:
            new_values, row_counts = _redact_docs(values, recs, style, hkey, keys)
        _write_back(columns, payload, hits, new_values, row_counts)
    if metadata:
        columns.update(_redact_metadata(df, columns["redactions"], recs, style, hkey, keys))
    elif "metadata" in df.columns:  # the calls a message sends beside its text
        columns.update(_redact_metadata_calls(df, columns["redactions"], recs, style, hkey, keys))
    if sources:
        columns.update(_redact_sources(df, columns["redactions"], recs, style, hkey))
    columns["unredacted"] = _unredacted(df, metadata=metadata, sources=sources)
    return df.with_columns(series.alias(name) for name, series in columns.items())


def _check_columns(df: object, *, metadata: bool, sources: bool) -> None:
    """Raise :class:`SchemaError` unless ``df`` is a DataFrame with the columns to redact."""
    if not isinstance(df, pl.DataFrame):
        raise SchemaError(f"redact_frame expects a polars DataFrame, got {type(df).__name__}")
    missing = [c for c in ("payload_kind", "text", "json", "content_hash") if c not in df.columns]
    missing += [
        c for c, on in (("metadata", metadata), ("sources", sources)) if on and c not in df.columns
    ]
    if missing:
        raise SchemaError(f"redact_frame: missing item columns {missing}")


def _payload_columns(df: pl.DataFrame) -> dict[str, pl.Series]:
    """The columns a redaction rewrites, the audit columns started when absent."""
    n = df.height
    if "redactions" in df.columns:
        redactions = df.get_column("redactions").cast(pl.String).fill_null("{}")
    else:  # items read back from a file: their lineage holds their counts
        redactions = redactions_from_lineage(df)
    if "redacted_from" in df.columns:
        redacted_from = df.get_column("redacted_from").cast(pl.String)
    else:
        redacted_from = pl.Series("redacted_from", [None] * n, pl.String)
    return {
        "text": df.get_column("text"),
        "json": df.get_column("json"),
        "content_hash": df.get_column("content_hash"),
        "redactions": redactions,
        "redacted_from": redacted_from,
    }


_CALL_IDS = frozenset(
    {"tool_call_id", "tool_call_ids", "original_tool_call_id", "original_tool_call_ids"}
)
"""Members that pair a tool result with its call, and the ids the provider gave: never redacted.

The ``original_`` keys hold a call id a chat importer replaced, because an
earlier call of the conversation had it (:mod:`cognoxium.formats.openai`).
"""


def _redact_doc(
    doc: Any,
    recs: tuple[Source, ...],
    style: str,
    hkey: bytes | None,
    counts: dict[str, int],
    keys: bool,
) -> Any:
    """A JSON document redacted but for what pairs tool calls with their results.

    The ``tool_call_id`` and ``tool_call_ids`` members are kept, and of each
    call under ``tool_calls`` only its arguments are redacted (see
    :func:`_redact_calls`): a call's id redacted would no longer match the
    ``tool_call_id`` of its result, and the pack would drop both.
    """
    if not isinstance(doc, dict):
        return redact_value(doc, recs, style, hkey, counts, keys)
    structural = {k: v for k, v in doc.items() if k in _CALL_IDS}
    rest = {k: v for k, v in doc.items() if k not in _CALL_IDS and k != "tool_calls"}
    out = {**redact_value(rest, recs, style, hkey, counts, keys), **structural}
    if "tool_calls" in doc:
        out["tool_calls"] = _redact_calls(doc["tool_calls"], recs, style, hkey, counts, keys)
    return out


def _redact_calls(
    calls: Any,
    recs: tuple[Source, ...],
    style: str,
    hkey: bytes | None,
    counts: dict[str, int],
    keys: bool,
) -> Any:
    """OpenAI tool calls with their ``function.arguments`` redacted, ids and names kept.

    Arguments that are a JSON object are redacted as one (a member such as
    ``"ssn"`` names its value) and written back compactly when anything was
    redacted; other arguments are redacted as text. Anything else than a
    list of calls is redacted whole.
    """
    if not isinstance(calls, list) or not all(_is_call(call) for call in calls):
        return redact_value(calls, recs, style, hkey, counts, keys)
    out = []
    for call in calls:
        arguments = call["function"]["arguments"]
        found: dict[str, int] = {}
        try:
            parsed = json.loads(arguments)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            redacted = redact_value(parsed, recs, style, hkey, found, keys)
            new = json.dumps(redacted, ensure_ascii=False) if found else arguments
        else:
            new = redact_str(arguments, recs, style, hkey, found)
        for name, n in found.items():
            counts[name] = counts.get(name, 0) + n
        out.append({**call, "function": {**call["function"], "arguments": new}})
    return out


def _is_call(call: Any) -> bool:
    """Whether ``call`` is an OpenAI tool call whose arguments are text."""
    function = call.get("function") if isinstance(call, dict) else None
    return isinstance(function, dict) and isinstance(function.get("arguments"), str)


def _redact_docs(
    values: pl.Series, recs: tuple[Source, ...], style: str, hkey: bytes | None, keys: bool
) -> tuple[list[str], list[dict[str, int]]]:
    """Each JSON document of ``values`` redacted, in canonical form, and its counts."""
    new_values, row_counts = [], []
    for value in values.to_list():
        counts: dict[str, int] = {}
        doc = json.loads(value)
        new_values.append(canonical_json(_redact_doc(doc, recs, style, hkey, counts, keys)))
        row_counts.append(counts)
    return new_values, row_counts


def _write_back(
    columns: dict[str, pl.Series],
    payload: str,
    hits: pl.Series,
    new_values: list[str],
    row_counts: list[dict[str, int]],
) -> None:
    """Scatter the redacted ``payload`` values of rows ``hits`` and their audit into ``columns``."""
    rows = hits.to_list()
    new_hashes = content_hashes(payload, (out.encode("utf-8") for out in new_values))
    new_counts = _merged_counts(columns["redactions"].gather(hits), row_counts)
    previous = columns["content_hash"].gather(hits)
    for name, values in (
        (payload, pl.Series(new_values, dtype=pl.String)),
        ("content_hash", pl.Series(new_hashes, dtype=pl.String)),
        ("redactions", pl.Series(new_counts, dtype=pl.String)),
        ("redacted_from", previous.cast(pl.String)),
    ):
        columns[name] = columns[name].clone().scatter(rows, values)


def _redact_metadata(
    df: pl.DataFrame,
    redactions: pl.Series,
    recs: tuple[Source, ...],
    style: str,
    hkey: bytes | None,
    keys: bool,
) -> dict[str, pl.Series]:
    """The ``metadata`` column redacted as JSON, and the counts with its redactions."""
    column = df.get_column("metadata").cast(pl.String)
    hits = _json_rows_with_spans(column.fill_null("{}"), recs, keys)
    if hits.len() == 0:
        return {}
    new_values, row_counts = _redact_docs(column.gather(hits), recs, style, hkey, keys)
    new_counts = _merged_counts(redactions.gather(hits), row_counts)
    rows = hits.to_list()
    return {
        "metadata": column.clone().scatter(rows, pl.Series(new_values, dtype=pl.String)),
        "redactions": redactions.clone().scatter(rows, pl.Series(new_counts, dtype=pl.String)),
    }


def _redact_metadata_calls(
    df: pl.DataFrame,
    redactions: pl.Series,
    recs: tuple[Source, ...],
    style: str,
    hkey: bytes | None,
    keys: bool,
) -> dict[str, pl.Series]:
    """``metadata.tool_calls`` redacted (see :func:`_redact_calls`), the rest kept, and counts.

    A message with text keeps the tool calls it sends in its metadata: they
    are part of what a pack sends, so they are redacted with the payload.
    """
    column = df.get_column("metadata").cast(pl.String)
    rows = column.str.contains('"tool_calls"', literal=True).fill_null(False).arg_true()
    changed: list[int] = []
    new_values: list[str] = []
    row_counts: list[dict[str, int]] = []
    for row, value in zip(rows.to_list(), column.gather(rows).to_list(), strict=True):
        doc = json.loads(value)
        counts: dict[str, int] = {}
        if not isinstance(doc, dict) or "tool_calls" not in doc:
            continue
        calls = _redact_calls(doc["tool_calls"], recs, style, hkey, counts, keys)
        if counts:
            changed.append(row)
            new_values.append(canonical_json({**doc, "tool_calls": calls}))
            row_counts.append(counts)
    if not changed:
        return {}
    at = pl.Series(changed, dtype=pl.UInt32)
    new_counts = _merged_counts(redactions.gather(at), row_counts)
    return {
        "metadata": column.clone().scatter(changed, pl.Series(new_values, dtype=pl.String)),
        "redactions": redactions.clone().scatter(changed, pl.Series(new_counts, dtype=pl.String)),
    }


def _redact_sources(
    df: pl.DataFrame,
    redactions: pl.Series,
    recs: tuple[Source, ...],
    style: str,
    hkey: bytes | None,
) -> dict[str, pl.Series]:
    """The ``sources`` column with ``uri`` and ``title`` redacted, and the counts with them."""
    column = df.get_column("sources")
    flat = (
        pl.DataFrame({"i": pl.int_range(df.height, dtype=pl.UInt32, eager=True), "s": column})
        .explode("s")
        .drop_nulls("s")
        .select(
            "i",
            pl.col("s").struct.field("uri").fill_null("").alias("uri"),
            pl.col("s").struct.field("title").fill_null("").alias("title"),
        )
    )
    found = pl.concat(
        [
            flat.get_column("i").gather(_rows_with_spans(flat.get_column(c), recs))
            for c in ("uri", "title")
        ]
    )
    hits = found.unique().sort()
    if hits.len() == 0:
        return {}
    new_values, new_counts = [], []
    for entries, old in zip(
        column.gather(hits).to_list(), redactions.gather(hits).to_list(), strict=True
    ):
        counts: dict[str, int] = {}
        for entry in entries:
            for name in ("uri", "title"):
                if entry.get(name):
                    entry[name] = redact_str(entry[name], recs, style, hkey, counts)
        new_values.append(entries)
        new_counts.append(_merge_counts(old, counts))
    # Series.scatter does not take list-of-struct values: replace by a join on the position.
    replaced = (
        pl.DataFrame({"i": pl.int_range(df.height, dtype=pl.UInt32, eager=True), "old": column})
        .join(
            pl.DataFrame({"i": hits, "new": pl.Series(new_values, dtype=column.dtype)}),
            on="i",
            how="left",
            maintain_order="left",
        )
        .select(pl.coalesce("new", "old").alias("sources"))
        .to_series()
    )
    rows = hits.to_list()
    return {
        "sources": replaced,
        "redactions": redactions.clone().scatter(rows, pl.Series(new_counts, dtype=pl.String)),
    }


def _unredacted(df: pl.DataFrame, *, metadata: bool, sources: bool) -> pl.Series:
    """Per row, the fields outside the payload that hold data and were not redacted."""
    parts: list[pl.Expr] = []
    if not metadata and "metadata" in df.columns:
        held = pl.col("metadata").cast(pl.String).fill_null("{}") != "{}"
        parts.append(pl.when(held).then(pl.lit("metadata")))
    if not sources and "sources" in df.columns:
        held = pl.col("sources").list.len().fill_null(0) > 0
        parts.append(pl.when(held).then(pl.lit("sources")))
    if not parts:
        return pl.Series("unredacted", [None] * df.height, pl.String)
    listed = pl.concat_list(parts).list.drop_nulls()
    return df.select(
        pl.when(listed.list.len() > 0)
        .then(pl.lit('["') + listed.list.join('","') + pl.lit('"]'))
        .alias("unredacted")
    ).to_series()
