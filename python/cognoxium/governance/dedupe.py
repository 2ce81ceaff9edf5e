"""Dedupe: exact, normalised and near-duplicate copies folded into one item.

Before, two copies of one document from two sources::

    id  text            trust      sources  metadata
    a   Lyon is sunny.  trusted    [s1]     {"lang":"en"}
    b   Lyon is sunny.  untrusted  [s2]     {"lang":"fr"}

After ``dedupe_frame(df)`` (merge, the default)::

    id  text            trust      sources   merged_ids  merge_conflicts
    a   Lyon is sunny.  untrusted  [s1, s2]  [b]         {"lang":{"a":"en","b":"fr"}}

The merge is conservative and independent of the copies' order (the rules
are :data:`cognoxium._columns.MERGE_RULES`), and it is recorded: the ids it
folded (``merged_ids``), the metadata values on which the copies differ
(``merge_conflicts``), the copies it dropped for being expired or not yet
valid (``merge_dropped``), and a ``merge`` lineage edge from each folded copy.
The ``Dedupe`` plan node lowers to :func:`dedupe_frame`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Final, overload

import polars as pl

from cognoxium._columns import MERGE_CONFLICTS, MERGE_DROPPED, MERGE_RULES, MERGED_IDS
from cognoxium.exceptions import PlanError, SchemaError
from cognoxium.items.model import canonical_json
from cognoxium.items.schema import POLARS_SCHEMA, packed_text_expr, timestamp_literal

__all__ = ["NORMALIZATIONS", "check_dedupe", "dedupe_frame"]

NORMALIZATIONS: Final = ("whitespace", "case", "nfc")
"""Text normalisations a dedupe can apply before comparing packed text."""

_KEY = "__cognoxium_dedupe_key"
_CALL_KEY = "__cognoxium_call"
_ASIDE = "__cognoxium_aside"
_EDGE = "__cognoxium_edge"
_ROW = "__cognoxium_row"
_TIMES = ("created_at", "valid_from", "expires_at")
_DROPPED_DTYPE = pl.List(pl.Struct({"id": pl.String(), "reason": pl.String()}))


def check_dedupe(
    by: Sequence[str], normalize: Sequence[str] = (), threshold: float | None = None
) -> None:
    """Check the arguments of a dedupe, before any data is read.

    Parameters
    ----------
    by
        The key columns (at least one).
    normalize
        Text normalisations, any of :data:`NORMALIZATIONS`.
    threshold
        Near-duplicate threshold, a Jaccard similarity in (0, 1], or None.

    Raises
    ------
    PlanError
        If ``by`` is empty, a normalisation is unknown, ``threshold`` is not
        a number in (0, 1], or ``normalize`` or ``threshold`` is given with
        ``by`` other than ``("content_hash",)`` (they compare text).

    Examples
    --------
    >>> check_dedupe(("content_hash",), normalize=("case",), threshold=0.8)
    >>> check_dedupe(("content_hash",), normalize=("stem",))
    Traceback (most recent call last):
    ...
    cognoxium.exceptions.PlanError: unknown normalisation ['stem']; use any of ['whitespace', 'case', 'nfc']
    """  # noqa: E501
    if not by:
        raise PlanError("dedupe needs at least one key column")
    unknown = [n for n in normalize if n not in NORMALIZATIONS]
    if unknown:
        raise PlanError(f"unknown normalisation {unknown}; use any of {list(NORMALIZATIONS)}")
    if threshold is not None and (
        isinstance(threshold, bool)
        or not isinstance(threshold, int | float)
        or not 0.0 < threshold <= 1.0
    ):
        raise PlanError(f"a near-duplicate threshold must be in (0, 1], got {threshold!r}")
    if (normalize or threshold is not None) and tuple(by) != ("content_hash",):
        raise PlanError("normalize and threshold compare text: they take no 'by' columns")


@overload
def dedupe_frame(
    frame: pl.DataFrame,
    by: Sequence[str] = ...,
    *,
    merge: bool = ...,
    normalize: Sequence[str] = ...,
    threshold: float | None = ...,
    as_of: datetime | None = ...,
) -> pl.DataFrame: ...
@overload
def dedupe_frame(
    frame: pl.LazyFrame,
    by: Sequence[str] = ...,
    *,
    merge: bool = ...,
    normalize: Sequence[str] = ...,
    threshold: float | None = ...,
    as_of: datetime | None = ...,
) -> pl.LazyFrame: ...
def dedupe_frame(
    frame: pl.DataFrame | pl.LazyFrame,
    by: Sequence[str] = ("content_hash",),
    *,
    merge: bool = True,
    normalize: Sequence[str] = (),
    threshold: float | None = None,
    as_of: datetime | None = None,
) -> pl.DataFrame | pl.LazyFrame:
    """Keep one row per group of duplicates, at the group's first occurrence's position.

    Copies are duplicates when their ``by`` values are equal (null equals
    null); with ``normalize``, when their payload kind and normalised packed
    text are equal; with ``threshold``, when they are linked, directly or
    through other items, by an estimated Jaccard similarity of 5-byte
    shingles of at least ``threshold`` (MinHash with LSH banding, see
    :mod:`cognoxium.retrieval.near_duplicates`; empty texts are never
    near-duplicates). In every case copies must also share ``group_id``
    (a null group is one value) and the tool call they answer
    (``metadata.tool_call_id``), when the frame has those columns.

    Without ``merge`` the first occurrence is kept as it is. With ``merge``
    the kept row is the group's representative (best ``rank``, then smallest
    ``id``; nulls last) absorbing its copies by the rules of
    :data:`cognoxium._columns.MERGE_RULES`: least trust, highest
    sensitivity, strongest retention, earliest ``created_at`` and
    ``expires_at``, latest
    ``valid_from``, highest priority, best rank, sorted unions of
    ``sources``, ``parents`` and ``lineage`` (plus a ``merge`` edge from each
    folded copy); other columns are the representative's.

    With ``as_of``, copies expired (``expires_at <= as_of``) or not yet valid
    (``valid_from`` or ``created_at`` after it) are dropped before grouping
    when their group has a valid copy; a group with no valid copy is kept
    whole. Without the three time columns expiry is not judged.

    Parameters
    ----------
    frame
        Items, as a DataFrame or LazyFrame; columns of
        :data:`cognoxium.items.schema.POLARS_SCHEMA` are merged by their
        rule, other columns are carried along.
    by
        Key columns of exact dedupe (default: the content hash).
    merge
        Fold each group into its representative and record the merge.
    normalize
        Text normalisations applied to the packed text before comparing,
        any of :data:`NORMALIZATIONS` (``whitespace``: runs collapsed to one
        space, ends trimmed; ``case``: lower-cased; ``nfc``: Unicode NFC).
    threshold
        Near-duplicate threshold in (0, 1]; None for equality.
    as_of
        UTC time at which expiry is judged; None not to judge it.

    Returns
    -------
    polars.DataFrame or polars.LazyFrame
        The kind of ``frame``: at most its rows, in its order, with its
        columns. With ``merge`` it also has ``merged_ids`` (List[String]: the
        ids folded into the row, sorted; empty when none, and a second
        dedupe adds to the first's), ``merge_conflicts`` (String: canonical
        JSON ``{key: {id: value}}`` of the metadata keys on which the copies
        differ, or null) and, when expiry was judged, ``merge_dropped``
        (List[Struct{id, reason}]: the copies dropped, sorted by id).

    Raises
    ------
    PlanError
        On invalid arguments (see :func:`check_dedupe`).
    SchemaError
        If ``frame`` lacks a ``by`` column, ``id`` (with ``merge``) or the
        payload columns (with ``normalize`` or ``threshold``).

    Examples
    --------
    >>> from cognoxium.items.records import records_to_frame
    >>> df = records_to_frame([
    ...     {"id": "a", "role": "document", "text": "Lyon is sunny.", "metadata": {"lang": "en"}},
    ...     {"id": "b", "role": "document", "text": "Rain in Oslo."},
    ...     {"id": "c", "role": "document", "text": "Lyon is sunny.", "trust": "trusted",
    ...      "metadata": {"lang": "fr"}},
    ... ])
    >>> out = dedupe_frame(df)
    >>> out.select("id", "trust", "merged_ids", "merge_conflicts").rows()
    [('a', 'untrusted', ['c'], '{"lang":{"a":"en","c":"fr"}}'), ('b', 'untrusted', [], None)]
    >>> dedupe_frame(df.lazy(), normalize=("case",), merge=False).collect()["id"].to_list()
    ['a', 'b']
    """
    check_dedupe(by, normalize, threshold)
    lf = frame.lazy()
    lf, partition = _with_partition(lf)
    _check_columns(lf.collect_schema(), by, merge, bool(normalize) or threshold is not None)
    temporary = [_CALL_KEY] if _CALL_KEY in partition else []
    if threshold is not None:
        lf = _with_near_duplicate_key(lf, tuple(normalize), threshold, partition)
        key = [_KEY]
        temporary.append(_KEY)
    elif normalize:
        # The payload kind and normalised text stand in for the key columns.
        kind = pl.col("payload_kind").cast(pl.String)
        text = pl.concat_str([kind, _normalized_text(tuple(normalize))], separator="\x00")
        lf = lf.with_columns(text.alias(_KEY))
        key = [_KEY, *partition]
        temporary.append(_KEY)
    else:
        key = [*by, *(k for k in partition if k not in by)]
    out = _dedupe_by(lf, key, merge, as_of).drop(temporary)
    return out.collect() if isinstance(frame, pl.DataFrame) else out


def _check_columns(schema: pl.Schema, by: Sequence[str], merge: bool, text: bool) -> None:
    """Raise SchemaError naming the columns the dedupe needs and ``schema`` lacks."""
    needed = [*(("payload_kind", "text", "json", "ref_uri", "ref_title") if text else by)]
    needed += ["id"] if merge else []
    missing = [c for c in dict.fromkeys(needed) if c not in schema]
    if missing:
        raise SchemaError(
            f"dedupe needs the columns {missing}, which the frame lacks; it has {schema.names()}"
        )


def _with_partition(lf: pl.LazyFrame) -> tuple[pl.LazyFrame, list[str]]:
    """Add the columns copies must share to be merged; return ``lf`` and their names.

    ``group_id`` (a null group is one value: ungrouped items merge with each
    other, never with grouped ones) and the tool call a result answers
    (``metadata.tool_call_id``, null for other items), so two results of
    different calls are never folded into one.
    """
    schema = lf.collect_schema()
    keys = ["group_id"] if "group_id" in schema else []
    if schema.get("metadata") == pl.String():
        call = pl.col("metadata").str.json_path_match("$.tool_call_id")
        lf = lf.with_columns(call.alias(_CALL_KEY))
        keys.append(_CALL_KEY)
    return lf, keys


def _normalized_text(steps: tuple[str, ...]) -> pl.Expr:
    """The packed text after the ``normalize`` steps of a dedupe."""
    text = packed_text_expr()
    if "nfc" in steps:
        text = text.str.normalize("NFC")
    if "case" in steps:
        text = text.str.to_lowercase()
    if "whitespace" in steps:
        text = text.str.replace_all(r"\s+", " ").str.strip_chars()
    return text


def _with_near_duplicate_key(
    lf: pl.LazyFrame, normalize: tuple[str, ...], threshold: float, partition: list[str]
) -> pl.LazyFrame:
    """Add the near-duplicate group of every row (its component's first row) as the key.

    Items are linked only within one payload kind and one ``partition``
    value (see :func:`_with_partition`).
    """
    from cognoxium.retrieval.near_duplicates import near_duplicate_labels

    def key(df: pl.DataFrame) -> pl.DataFrame:
        texts = df.select(_normalized_text(normalize)).to_series()
        parts = [pl.col("payload_kind").cast(pl.String), *map(pl.col, partition)]
        groups = df.select(pl.struct(parts).struct.json_encode()).to_series()
        labels = near_duplicate_labels(texts, float(threshold), groups=groups)
        return df.with_columns(pl.Series(_KEY, labels, dtype=pl.Int64))

    schema = pl.Schema(lf.collect_schema())
    schema[_KEY] = pl.Int64()
    # Links depend on every row reaching the dedupe: nothing may pass it.
    return lf.map_batches(
        key,
        schema=schema,
        predicate_pushdown=False,
        projection_pushdown=False,
        slice_pushdown=False,
        streamable=False,
    )


def _copy_state(as_of: datetime) -> pl.Expr:
    """``"expired"`` or ``"not_yet_valid"`` at ``as_of`` (pack's rule and order), else null."""
    when = timestamp_literal(as_of)
    expired = (pl.col("expires_at") <= when).fill_null(False)
    early = ((pl.col("valid_from") > when) | (pl.col("created_at") > when)).fill_null(False)
    return pl.when(expired).then(pl.lit("expired")).when(early).then(pl.lit("not_yet_valid"))


def _set_aside(lf: pl.LazyFrame, by: list[str], as_of: datetime, record: bool) -> pl.LazyFrame:
    """Drop the copies not valid at ``as_of`` that have a valid copy; record them if ``record``.

    A group whose copies are all invalid at ``as_of`` keeps them all (the
    merged item is then excluded by pack, with its reason). With ``record``,
    every remaining row gets ``_ASIDE``: its group's dropped copies as
    ``{id, reason}`` structs.
    """
    state = _copy_state(as_of)
    aside = state.is_not_null() & state.is_null().any().over(by)
    if not record:
        return lf.filter(~aside)
    # Only the groups with dropped copies get a record: a join, not a window over every group.
    dropped = (
        lf.filter(aside).group_by(by).agg(pl.struct(id=pl.col("id"), reason=state).alias(_ASIDE))
    )
    return lf.filter(~aside).join(
        dropped, on=by, how="left", nulls_equal=True, maintain_order="left"
    )


def _sorted_drops(union: pl.Expr) -> pl.Expr:
    union = union.unique()
    return union.sort_by(union.struct.field("id"))


def _with_drop_record(lf: pl.LazyFrame, judged: bool) -> tuple[pl.LazyFrame, bool]:
    """Give every row ``MERGE_DROPPED``: an earlier dedupe's record and this one's (``_ASIDE``).

    Returns the frame and whether it has the column (only when a dedupe
    judged expiry, now or before).
    """
    schema = lf.collect_schema()
    drops = [pl.col(MERGE_DROPPED)] if MERGE_DROPPED in schema else []
    drops += [pl.col(_ASIDE)] if judged else []
    if not drops:
        return lf, False
    empty = pl.lit([], dtype=_DROPPED_DTYPE)
    record = pl.concat_list([d.fill_null(empty) for d in drops]).list.eval(
        _sorted_drops(pl.element())
    )
    lf = lf.with_columns(record.alias(MERGE_DROPPED))
    return (lf.drop(_ASIDE) if judged else lf), True


def _best_first(schema: pl.Schema) -> dict[str, Any]:
    """Sort arguments putting a group's representative first: best rank, then smallest id."""
    by = [c for c in ("rank", "id") if c in schema]
    return {"by": by, "descending": [c == "rank" for c in by], "nulls_last": True}


def _merge_agg(name: str, dtype: pl.DataType, edges: bool) -> pl.Expr:
    """How a merging dedupe combines one column over a group of duplicates.

    The group's rows come best first (see :func:`_best_first`).
    """
    col = pl.col(name)
    canonical = POLARS_SCHEMA.get(name)
    if canonical is None or dtype != canonical or name not in MERGE_RULES:
        return col.first()
    if name in ("trust", "sensitivity", "priority", "valid_from", "rank"):
        return col.max()  # untrusted > trusted; restricted is the highest sensitivity
    if name in ("retention", "created_at", "expires_at"):
        return col.min()  # required is the strongest retention
    if name == "lineage":
        union = _merged_lineage(edges)
    elif name == "sources":
        union = col.list.explode(keep_nulls=False, empty_as_null=False).unique()
        union = union.sort_by(
            union.struct.field("uri"),
            union.struct.field("kind"),
            union.struct.field("title"),
            nulls_last=True,
        )
    else:
        union = col.list.explode(keep_nulls=False, empty_as_null=False).unique().sort()
    # A row without duplicates keeps its own list, in its own order.
    return pl.when(pl.len() > 1).then(union.implode()).otherwise(col.first())


def _metadata_conflicts(members: pl.Series) -> pl.Series:
    """Canonical JSON {key: {id: value}} of the metadata keys on which duplicates differ."""
    out: list[str | None] = [None] * len(members)
    differs = members.struct.field("metadata").list.n_unique() > 1
    for index in differs.arg_true().to_list():
        row = members[index]
        parsed = {i: json.loads(m) for i, m in zip(row["ids"], row["metadata"], strict=True)}
        keys = sorted({k for meta in parsed.values() for k in meta})
        conflicts = {
            key: {i: meta.get(key) for i, meta in parsed.items()}
            for key in keys
            if len({canonical_json(meta.get(key)) for meta in parsed.values()}) > 1
            or any(key not in meta for meta in parsed.values())
        }
        out[index] = canonical_json(conflicts)
    return pl.Series(out, dtype=pl.String)


def _dedupe_by(
    lf: pl.LazyFrame, by: list[str], merge: bool, as_of: datetime | None = None
) -> pl.LazyFrame:
    """Dedupe ``lf`` on the columns ``by``: the expiry phase, then keep-first or merge."""
    schema = lf.collect_schema()
    judged = as_of is not None and all(c in schema for c in _TIMES)
    if as_of is not None and judged:
        lf = _set_aside(lf, by, as_of, record=merge and "id" in schema)
    if not merge:
        return lf.unique(subset=by, keep="first", maintain_order=True)
    lf, drops = _with_drop_record(lf, judged)
    return _merged(lf, by, drops)


def _merged(lf: pl.LazyFrame, by: list[str], drops: bool) -> pl.LazyFrame:
    """Fold every group of ``by`` into its representative, with the merge records."""
    schema = lf.collect_schema()
    edges = "lineage" in schema and "content_hash" in schema
    records_of = (MERGED_IDS, MERGE_CONFLICTS, MERGE_DROPPED)
    kept = [n for n in schema.names() if n not in records_of]
    out = [*kept, MERGED_IDS, MERGE_CONFLICTS, *([MERGE_DROPPED] if drops else []), _ROW]
    lf = lf.with_row_index(_ROW)
    size = pl.len().over(by)
    single = lf.filter(size == 1).with_columns(_own_records(schema))
    # Groups of duplicates, each group's rows best first.
    grouped = lf.filter(size > 1).sort(**_best_first(schema), maintain_order=True)
    aggs = [
        _merge_agg(name, dtype, edges)
        for name, dtype in schema.items()
        if name not in by and name not in (MERGED_IDS, MERGE_DROPPED)
    ]
    if drops:
        union = pl.col(MERGE_DROPPED).list.explode(keep_nulls=False, empty_as_null=False)
        aggs.append(_sorted_drops(union).implode().alias(MERGE_DROPPED))
    records, conflicts = _group_records(schema)
    if edges:
        grouped = grouped.with_columns(_merge_edge())
    merged = grouped.group_by(by).agg(aggs + records).with_columns(conflicts)
    # Each group at its first occurrence's position.
    return pl.concat([single.select(out), merged.select(out)]).sort(_ROW).drop(_ROW)


def _own_records(schema: pl.Schema) -> list[pl.Expr]:
    """A row without duplicates is its own merge: it keeps the records an earlier dedupe wrote."""
    previous_ids = (
        pl.col(MERGED_IDS).list.unique().list.sort()
        if MERGED_IDS in schema
        else pl.lit([], dtype=pl.List(pl.String))
    )
    previous_conflicts = (
        pl.col(MERGE_CONFLICTS) if MERGE_CONFLICTS in schema else pl.lit(None, dtype=pl.String)
    )
    return [previous_ids.alias(MERGED_IDS), previous_conflicts.alias(MERGE_CONFLICTS)]


def _group_records(schema: pl.Schema) -> tuple[list[pl.Expr], pl.Expr]:
    """A group's merged ids, first row and metadata to compare, and its conflicts expression.

    A second dedupe keeps what the first one merged (its ``MERGED_IDS`` and
    ``MERGE_CONFLICTS``).
    """
    others = pl.col("id").slice(1)
    if MERGED_IDS in schema:
        others = others.append(pl.col(MERGED_IDS).explode(empty_as_null=False)).drop_nulls()
    records = [others.unique().sort().alias(MERGED_IDS), pl.col(_ROW).min()]
    if "metadata" in schema:
        records += [
            pl.col("metadata").sort_by("id").alias("__metadata"),
            pl.col("id").sort().alias("__ids"),
        ]
        conflicts = (
            pl.struct(pl.col("__ids").alias("ids"), pl.col("__metadata").alias("metadata"))
            .map_batches(_metadata_conflicts, return_dtype=pl.String)
            .alias(MERGE_CONFLICTS)
        )
    else:
        conflicts = pl.lit(None, dtype=pl.String).alias(MERGE_CONFLICTS)
    if MERGE_CONFLICTS in schema:
        conflicts = pl.coalesce(conflicts, pl.col(MERGE_CONFLICTS))
    return records, conflicts


def _merged_lineage(edges: bool) -> pl.Expr:
    """A group's lineage edges in the order the steps happened, each edge once.

    The kept copy's edges come first, then each folded copy's edges followed
    by its ``merge`` edge (``edges``), copies best first: every copy's steps
    keep their order, which :func:`~cognoxium.governance.lineage.lineage_edges`
    reads to link each step to the state it made.
    """
    lineage = pl.col("lineage").fill_null(pl.lit([], POLARS_SCHEMA["lineage"]))
    if edges:
        folded = pl.when(pl.int_range(pl.len()) > 0).then(pl.col(_EDGE))
        lineage = pl.concat_list(lineage, folded)
    union = lineage.explode(keep_nulls=False, empty_as_null=False).drop_nulls()
    return union.unique(maintain_order=True)


def _merge_edge() -> pl.Expr:
    """Each row's lineage edge ``merge`` (parent: its id and content hash), as ``_EDGE``."""
    return pl.struct(
        pl.col("id").alias("parent_id"),
        pl.col("content_hash").alias("parent_hash"),
        pl.lit("merge").alias("operation"),
        pl.lit(None, pl.String).alias("detail"),
    ).alias(_EDGE)
