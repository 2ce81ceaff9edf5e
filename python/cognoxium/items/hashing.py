"""Content hashes of item rows, computed in bulk on Polars' threads.

An item's ``content_hash`` is the sha256 hex of its payload kind, a NUL
byte and its canonical payload bytes
(:func:`~cognoxium.items.model.content_hash`). Here it is computed for whole
columns: text, JSON and binary payloads by one polars-hash expression, the
rows sliced into parts that hash on as many threads as Polars has
(:func:`digests_in_background` starts them while the caller lays out other
columns), references one by one. :func:`check_content_hashes` refuses rows
whose stated hash belongs to other content.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from cognoxium.exceptions import RecordError
from cognoxium.items.model import canonical_json, content_hash
from cognoxium.items.schema import PAYLOAD_COLUMNS

if TYPE_CHECKING:
    from polars.lazyframe.in_process import InProcessQuery

__all__ = [
    "check_content_hashes",
    "checked_content_hashes",
    "content_hash_expr",
    "digests_in_background",
    "row_content_hashes",
]


_HASH_CHUNK = 65536


def _hash_input() -> pl.Expr:
    """Each row's kind, a NUL byte and its canonical payload bytes; null for a reference."""
    kind = pl.col("payload_kind").cast(pl.String)
    return (
        pl.when(kind == "text")
        .then(pl.lit(b"text\x00") + pl.col("text").cast(pl.Binary))
        .when(kind == "json")
        .then(pl.lit(b"json\x00") + pl.col("json").cast(pl.Binary))
        .when(kind == "binary")
        .then(pl.lit(b"binary\x00") + pl.col("binary"))
        .otherwise(None)
    )


def _digest_expr() -> pl.Expr:
    """sha256 hex of each row's kind and canonical payload bytes; null for a reference."""
    from polars_hash import CryptographicHashingNameSpace

    return CryptographicHashingNameSpace(_hash_input()).sha2_256().alias("content_hash")


_HASH_PART_ROWS = 16_384
"""The fewest rows hashed as a part of their own, on a thread of Polars' pool."""


def _digest_query(payload: pl.LazyFrame, n: int) -> pl.LazyFrame:
    """The query of each row's :func:`_digest_expr`, its ``n`` rows hashed in parallel parts.

    A plugin expression runs on one thread per column; slices of the rows
    concatenated in order hash on as many threads as Polars has.
    """
    parts = max(1, min(pl.thread_pool_size(), n // _HASH_PART_ROWS))
    if parts == 1:
        return payload.select(_digest_expr())
    step = -(-n // parts)
    return pl.concat(
        [payload.slice(start, step).select(_digest_expr()) for start in range(0, n, step)]
    )


def digests_in_background(payload: list[pl.Series]) -> InProcessQuery:
    """Start hashing payloads on Polars' threads: each row's sha256 digest, fetched when done.

    Parameters
    ----------
    payload
        The payload columns (``payload_kind``, ``text``, ``json``,
        ``binary``; others are ignored), ``n`` rows each.

    Returns
    -------
    polars.lazyframe.in_process.InProcessQuery
        Its ``fetch_blocking()`` gives one column of ``n`` digests (sha256
        hex of the kind and canonical payload bytes; null for a reference),
        to pass to
        :func:`~cognoxium.items.validation.complete_valid_columns`.
    """
    query = _digest_query(pl.LazyFrame(payload), len(payload[0]))
    return query.collect(background=True)


def row_content_hashes(df: pl.DataFrame, digests: pl.Series | None = None) -> pl.Series:
    """The content hash of every row: sha256 in bulk (polars-hash), references one by one.

    A Reference's canonical bytes are the canonical JSON of its uri, title
    and digest, built per row in Python; every other kind is hashed in one
    expression (``digests``, when already computed).

    Parameters
    ----------
    df
        ``n`` rows with the payload columns (:data:`~cognoxium.items.schema.PAYLOAD_COLUMNS`),
        JSON text canonical.
    digests
        ``(n,)`` String: the digests :func:`digests_in_background` computed,
        if it did; ``None``: computed here.

    Returns
    -------
    polars.Series
        ``(n,)`` String: the sha256 hex of each row's kind and canonical
        payload bytes.
    """
    if digests is None:
        digests = _digest_query(df.lazy(), df.height).collect().to_series()
    references = df.get_column("payload_kind").cast(pl.String) == "reference"
    if not references.any():
        return digests
    rows = references.arg_true()
    refs = df.select("ref_uri", "ref_title", "ref_digest").gather(rows)
    values = [
        content_hash(
            "reference",
            canonical_json({"digest": digest, "title": title, "uri": uri}).encode("utf-8"),
        )
        for uri, title, digest in refs.iter_rows()
    ]
    return digests.scatter(rows, values)


def _struct_hashes(payload: pl.Series) -> pl.Series:
    return row_content_hashes(payload.struct.unnest())


def content_hash_expr() -> pl.Expr:
    """The ``content_hash`` of each row computed from its payload columns.

    sha256 hex of the payload kind and canonical bytes, as items have it;
    for frames whose payload columns were replaced (JSON text must already
    be canonical).

    Returns
    -------
    polars.Expr
        A String expression named ``content_hash``.

    Examples
    --------
    >>> from cognoxium.items.records import records_to_frame
    >>> df = records_to_frame([{"id": "a", "role": "user", "text": "hi"}])
    >>> changed = df.with_columns(text=pl.lit("bye"))
    >>> fresh = records_to_frame([{"id": "a", "role": "user", "text": "bye"}])
    >>> changed.select(content_hash_expr()).item() == fresh["content_hash"].item()
    True
    """
    return (
        pl.struct(list(PAYLOAD_COLUMNS))
        .map_batches(_struct_hashes, return_dtype=pl.String)
        .alias("content_hash")
    )


def checked_content_hashes(df: pl.DataFrame, source: str | None) -> pl.Series:
    """Compute every row's content hash, chunk by chunk, and check the ones given.

    Where every row has a hash (a file this package wrote), the given column
    is kept after checking, so no second copy of it outlives a chunk.

    Parameters
    ----------
    df
        ``n`` rows with the payload columns and ``content_hash`` (null where
        not given), JSON text canonical.
    source
        Named in the error.

    Returns
    -------
    polars.Series
        ``(n,)`` String: every row's content hash.

    Raises
    ------
    RecordError
        At the first row (0-based) whose given hash is not its payload's,
        field ``content_hash``.
    """
    given = df.get_column("content_hash")
    complete = given.null_count() == 0
    chunks = []
    for start in range(0, df.height, _HASH_CHUNK):
        part = df.slice(start, _HASH_CHUNK)
        computed = row_content_hashes(part)
        stated = given.slice(start, _HASH_CHUNK)
        mismatch = stated.is_not_null() & (stated != computed)
        if mismatch.any():
            at = int(mismatch.arg_true()[0])
            raise RecordError(
                f"content_hash {stated[at]!r} does not match the payload "
                f"(computed {computed[at]!r})",
                source=source,
                row=start + at,
                field="content_hash",
            )
        if not complete:
            chunks.append(computed)
    if complete:
        return given
    return pl.concat(chunks) if chunks else pl.Series("content_hash", [], pl.String)


def check_content_hashes(df: pl.DataFrame) -> None:
    """Raise unless every stated ``content_hash`` of ``df`` is the hash of its row's payload.

    For typed rows that reach a cache keyed by content hash (token counts,
    embeddings) without a reader's checks: a hash that belongs to other
    content would give a row that content's cost or vector. A null hash is
    left to the caller. The rows are hashed in bulk (about 20 ms per 100,000
    chat messages on 2 cores).

    Parameters
    ----------
    df
        ``n`` rows with the payload columns and ``content_hash`` in their
        :data:`~cognoxium.items.schema.POLARS_SCHEMA` types.

    Raises
    ------
    RecordError
        Naming the first row (0-based) whose hash does not match, field
        ``content_hash``, with the stated and the computed hash.

    Examples
    --------
    >>> from cognoxium.items.records import records_to_frame
    >>> df = records_to_frame([{"id": "a", "role": "user", "text": "hi"}])
    >>> check_content_hashes(df)
    >>> check_content_hashes(df.with_columns(text=pl.lit("bye")))
    Traceback (most recent call last):
    ...
    cognoxium.exceptions.RecordError: row 0: field content_hash: content_hash '...' does not ...
    """
    checked_content_hashes(df.select(*PAYLOAD_COLUMNS, "content_hash"), None)
