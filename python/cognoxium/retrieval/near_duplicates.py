"""Near-duplicate detection: MinHash signatures, LSH banding and connected components.

Two texts are near-duplicates when the Jaccard similarity of their sets of
5-byte shingles (UTF-8) is at least a threshold. The similarity is estimated
by MinHash (Broder, "On the resemblance and containment of documents",
SEQUENCES 1997), computed by one permutation hashing (Li, Owen and Zhang,
NeurIPS 2012) with optimal densification (Shrivastava, ICML 2017): the
fraction of equal signature positions estimates the Jaccard similarity.
Candidate pairs come from locality-sensitive hashing by banding (Indyk and
Motwani, STOC 1998; Leskovec, Rajaraman and Ullman, *Mining of Massive
Datasets*, 3rd ed., section 3.4): signatures are cut into ``b`` bands of ``r``
rows and two texts are candidates when any band is equal. ``b`` and ``r`` are
chosen for the threshold by minimising a weighted sum of the false-positive
and false-negative areas under the S-curve ``1 - (1 - s^r)^b``. Every candidate is
then verified against the threshold with its MinHash estimate, and the groups
are the connected components of the verified pairs, so grouping does not
depend on the order of the texts.

All work is on columns: shingles are hashed with a rolling polynomial over the
Arrow byte buffer, bin minima are taken with ``numpy.minimum.at``, buckets are
a Polars self-join, components are found by label propagation with pointer
jumping.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from functools import lru_cache
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import polars as pl
import pyarrow as pa

from cognoxium.exceptions import PlanError

__all__ = [
    "MAX_BUCKET",
    "NUM_PERM",
    "SHINGLE_BYTES",
    "lsh_params",
    "minhash_signatures",
    "near_duplicate_labels",
]

NUM_PERM: Final = 128
"""MinHash signature length (bins of one permutation hashing)."""

SHINGLE_BYTES: Final = 5
"""Shingle width in UTF-8 bytes."""

_PRIME: Final = np.uint64(1_099_511_628_211)  # the 64-bit FNV prime
_MAX_BLOCK_BYTES: Final = 128 * 2**20
_EMPTY: Final = np.uint64(np.iinfo(np.uint64).max)

MAX_BUCKET: Final = 64
"""LSH buckets of more texts are linked first-and-next instead of pairwise."""

U64 = npt.NDArray[np.uint64]


def _mix(x: U64) -> U64:
    """SplitMix64's finaliser (Steele, Lea and Flood, OOPSLA 2014), element-wise, wrapping."""
    with np.errstate(over="ignore"):
        x = x ^ (x >> np.uint64(30))
        x = x * np.uint64(0xBF58476D1CE4E5B9)
        x = x ^ (x >> np.uint64(27))
        x = x * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def _short_hash(text: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "little")


def _shingles(
    texts: pl.Series, width: int
) -> tuple[U64, npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Hashes of every ``width``-byte shingle, their text's index, and each text's count.

    Shingles come grouped by text, in text order. A text shorter than
    ``width`` bytes (but not empty) has one shingle: the hash of its whole
    bytes. An empty or null text has none.
    """
    array = texts.cast(pl.String).fill_null("").rechunk().to_arrow()
    array = array.cast(pa.large_string())
    n = len(array)
    _, offsets_buffer, data_buffer = array.buffers()
    offsets = np.frombuffer(offsets_buffer, dtype=np.int64)[array.offset : array.offset + n + 1]
    raw = (
        np.frombuffer(data_buffer, dtype=np.uint8)[offsets[0] : offsets[-1]]
        if data_buffer is not None
        else np.zeros(0, dtype=np.uint8)
    )
    offsets = offsets - offsets[0]
    lengths = np.diff(offsets)
    long_ = lengths >= width
    counts = np.where(long_, lengths - width + 1, (lengths > 0).astype(np.int64))
    total = int(raw.shape[0])
    m = max(total - width + 1, 0)
    # Rolling polynomial hash of the shingle starting at every byte.
    rolling = raw[:m].astype(np.uint64)
    with np.errstate(over="ignore"):
        for j in range(1, width):
            np.multiply(rolling, _PRIME, out=rolling)
            np.add(rolling, raw[j : j + m], out=rolling, casting="unsafe")
    # A shingle is valid when it ends inside its own text: the last width - 1
    # starts of each text are not (nor any start of a text shorter than width).
    valid = np.ones(total, dtype=bool)
    ends = offsets[1:]
    for back in range(1, width):
        position = ends - back
        valid[position[position >= offsets[:-1]]] = False
    hashes = rolling[valid[:m]]
    owner = np.repeat(np.arange(n, dtype=np.int64), counts)
    short = np.flatnonzero((lengths > 0) & ~long_)
    if short.size:
        text_bytes = raw.tobytes()
        short_hashes = np.array(
            [_short_hash(text_bytes[offsets[i] : offsets[i + 1]]) for i in short.tolist()],
            dtype=np.uint64,
        )
        is_long = long_[owner]
        merged = np.empty(owner.shape[0], dtype=np.uint64)
        merged[is_long] = hashes
        merged[~is_long] = short_hashes
        hashes = merged
    return _mix(hashes), owner, counts


def _densify(filled: U64, present: npt.NDArray[np.int64], bins: int) -> U64:
    """Fill each empty bin of a present row from the bin its probe sequence reaches first.

    Optimal densification: the probes of bin ``j`` are ``h(j, 1), h(j, 2), ...``
    with one hash ``h`` shared by every row, so similar rows copy from the same
    bins. After 8 * ``bins`` rounds the rest copy from the next non-empty bin
    to the right (rotation), which always exists in a present row.
    """
    out = filled.copy()
    empty = filled[present] == _EMPTY
    rows, columns = np.nonzero(empty)
    rows = present[rows]
    attempt = np.uint64(0)
    while rows.size and attempt < np.uint64(8 * bins):
        attempt += np.uint64(1)
        probe = (_mix(columns.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15) + attempt)) % (
            np.uint64(bins)
        )
        found = filled[rows, probe.astype(np.int64)]
        hit = found != _EMPTY
        out[rows[hit], columns[hit]] = found[hit]
        rows, columns = rows[~hit], columns[~hit]
    for row, column in zip(rows.tolist(), columns.tolist(), strict=True):
        order = np.roll(filled[row], -column)
        out[row, column] = order[np.flatnonzero(order != _EMPTY)[0]]
    return out


def minhash_signatures(
    texts: pl.Series | Sequence[str | None],
    *,
    num_perm: int = NUM_PERM,
    shingle_bytes: int = SHINGLE_BYTES,
) -> U64:
    """MinHash signatures of texts over their byte shingles.

    Parameters
    ----------
    texts
        ``n`` texts; null counts as empty.
    num_perm
        Signature length (number of bins), at least 1.
    shingle_bytes
        Shingle width in UTF-8 bytes, at least 1.

    Returns
    -------
    numpy.ndarray
        ``uint64`` array of shape ``(n, num_perm)``; the fraction of equal
        positions of two rows estimates the Jaccard similarity of their
        shingle sets. A text with no shingles (empty) has the all-ones
        maximum in every position.

    Raises
    ------
    PlanError
        If ``num_perm`` or ``shingle_bytes`` is not a positive integer.

    Notes
    -----
    One permutation hashing with optimal densification: each shingle is
    hashed once (SplitMix64's finaliser over a rolling byte hash), its hash
    picks one of ``num_perm`` bins, each bin keeps its minimum, and empty bins
    are filled by densification, so the cost is linear in the text instead of
    ``num_perm`` times it. Sources: A. Z. Broder, "On the resemblance and
    containment of documents", SEQUENCES 1997; P. Li, A. Owen and C.-H.
    Zhang, "One permutation hashing", NeurIPS 2012; A. Shrivastava, "Optimal
    densification for fast and accurate minwise hashing", ICML 2017.

    Examples
    --------
    >>> sig = minhash_signatures(["refund window is 30 days", "refund window is 30 days!", "x"])
    >>> sig.shape
    (3, 128)
    >>> bool((sig[0] == sig[1]).mean() > 0.7), bool((sig[0] == sig[2]).mean() < 0.1)
    (True, True)
    """
    for name, value in (("num_perm", num_perm), ("shingle_bytes", shingle_bytes)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise PlanError(f"{name} must be a positive integer, got {value!r}")
    series = texts if isinstance(texts, pl.Series) else pl.Series(list(texts), dtype=pl.String)
    hashes, owner, counts = _shingles(series, shingle_bytes)
    n = len(series)
    filled = np.full((n, num_perm), _EMPTY, dtype=np.uint64)
    cells = (hashes % np.uint64(num_perm)).astype(np.int64)
    cells += owner * num_perm
    np.minimum.at(filled.reshape(-1), cells, hashes)
    return _densify(filled, np.flatnonzero(counts > 0), num_perm)


@lru_cache(maxsize=64)
def lsh_params(threshold: float, num_perm: int = NUM_PERM) -> tuple[int, int]:
    """Bands and rows per band for LSH at a Jaccard threshold.

    Parameters
    ----------
    threshold
        Jaccard similarity in (0, 1].
    num_perm
        Signature length; ``bands * rows <= num_perm``.

    Returns
    -------
    tuple of int
        ``(bands, rows)`` minimising ``0.1 * FP + 0.9 * FN``, where FP is the
        area under the S-curve ``1 - (1 - s^rows)^bands`` below the threshold
        and FN the area above the curve beyond it, both integrated
        numerically. False negatives weigh nine times more because every
        candidate is verified afterwards: a false positive costs only a
        comparison, a false negative loses a duplicate.

    Raises
    ------
    PlanError
        If the threshold is outside (0, 1].

    Notes
    -----
    Source: J. Leskovec, A. Rajaraman and J. D. Ullman, *Mining of Massive
    Datasets*, 3rd ed., section 3.4.

    Examples
    --------
    >>> lsh_params(0.8)
    (14, 9)
    """
    if isinstance(threshold, bool) or not (0.0 < float(threshold) <= 1.0):
        raise PlanError(f"a near-duplicate threshold must be in (0, 1], got {threshold!r}")
    below = np.linspace(0.0, threshold, 201)
    above = np.linspace(threshold, 1.0, 201)
    best: tuple[float, int, int] | None = None
    for bands in range(1, num_perm + 1):
        for rows in range(1, num_perm // bands + 1):
            fp = np.trapezoid(1.0 - (1.0 - below**rows) ** bands, below)
            fn = np.trapezoid((1.0 - above**rows) ** bands, above)
            error = float(0.1 * fp + 0.9 * fn)
            if (
                best is None
                or error < best[0] - 1e-12
                or (abs(error - best[0]) <= 1e-12 and rows > best[2])
            ):
                best = (error, bands, rows)
    assert best is not None
    return best[1], best[2]


def _band_keys(signatures: U64, bands: int, rows: int) -> U64:
    """One uint64 key per (text, band): the band's rows folded with SplitMix64."""
    keys = np.zeros((signatures.shape[0], bands), dtype=np.uint64)
    for r in range(rows):
        keys = _mix(keys ^ signatures[:, r::rows][:, :bands])
    return keys


def _candidate_pairs(buckets: pl.DataFrame) -> pl.DataFrame:
    """Pairs ``(row, row_other)``, ``row < row_other``, of texts sharing a band bucket.

    A bucket of up to :data:`MAX_BUCKET` texts gives every pair; a larger one
    links each text with the bucket's first text and with the next one (by
    row), so the work stays linear in the bucket's size while its texts can
    still join one component.
    """
    band = ["band", "key"]
    sized = buckets.with_columns(pl.len().over(band).alias("size"))
    small = sized.filter(pl.col("size") <= MAX_BUCKET).drop("size")
    every = (
        small.join(small, on=band, suffix="_other")
        .filter(pl.col("row") < pl.col("row_other"))
        .select("row", "row_other")
    )
    large = sized.filter(pl.col("size") > MAX_BUCKET).sort(*band, "row")
    first = large.select(pl.col("row").first().over(band), pl.col("row").alias("row_other"))
    chain = large.select(
        pl.col("row"), pl.col("row").shift(-1).over(band).alias("row_other")
    ).drop_nulls()
    linked = pl.concat([first, chain]).filter(pl.col("row") < pl.col("row_other"))
    return pl.concat([every, linked]).unique()


def _components(
    n: int, left: npt.NDArray[np.int64], right: npt.NDArray[np.int64]
) -> npt.NDArray[np.int64]:
    """Smallest member index of each node's connected component (label propagation)."""
    labels = np.arange(n, dtype=np.int64)
    if left.size == 0:
        return labels
    while True:
        low = np.minimum(labels[left], labels[right])
        before = labels.copy()
        np.minimum.at(labels, left, low)
        np.minimum.at(labels, right, low)
        labels = labels[labels]  # pointer jumping
        if np.array_equal(labels, before):
            return labels


def _group_labels(groups: pl.Series | Sequence[object], n: int) -> npt.NDArray[Any]:
    """``groups`` as ``n`` strings (null as ``""``); PlanError on another length."""
    series = groups if isinstance(groups, pl.Series) else pl.Series(list(groups))
    if len(series) != n:
        raise PlanError(f"groups has {len(series)} labels for {n} texts")
    labels: npt.NDArray[Any] = series.cast(pl.String).fill_null("").to_numpy()
    return labels


def _lsh_links(
    signatures: npt.NDArray[np.uint64],
    distinct: npt.NDArray[np.int64],
    banding: tuple[int, int],
    threshold: float,
    labels_of: npt.NDArray[Any] | None,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """The pairs of ``distinct`` rows that share an LSH bucket and reach ``threshold``.

    ``banding`` is ``(bands, rows)``; each candidate pair is verified on the
    signatures (in blocks of at most :data:`_MAX_BLOCK_BYTES`), and pairs with
    different ``labels_of`` are dropped.
    """
    bands, rows = banding
    keys = _band_keys(signatures[distinct], bands, rows)
    buckets = pl.DataFrame(
        {
            "row": np.repeat(distinct, bands),
            "band": np.tile(np.arange(bands, dtype=np.int32), distinct.size),
            "key": keys.ravel(),
        }
    )
    pairs = _candidate_pairs(buckets)
    a = pairs.get_column("row").to_numpy()
    b = pairs.get_column("row_other").to_numpy()
    keep = np.zeros(a.shape[0], dtype=bool)
    step = max(1, _MAX_BLOCK_BYTES // (8 * signatures.shape[1]))
    for first in range(0, a.shape[0], step):
        sl = slice(first, first + step)
        keep[sl] = (signatures[a[sl]] == signatures[b[sl]]).mean(axis=1) >= threshold - 1e-12
    if labels_of is not None:
        keep &= labels_of[a] == labels_of[b]
    return a[keep], b[keep]


def near_duplicate_labels(
    texts: pl.Series | Sequence[str | None],
    threshold: float,
    *,
    groups: pl.Series | Sequence[object] | None = None,
    num_perm: int = NUM_PERM,
) -> npt.NDArray[np.int64]:
    """Group near-duplicate texts: the smallest index of each text's group.

    Parameters
    ----------
    texts
        ``n`` texts. Empty and null texts are never near-duplicates of anything.
    threshold
        Jaccard similarity of 5-byte shingle sets, in (0, 1], at or above
        which two texts are linked (MinHash estimate).
    groups
        Optional ``n`` labels; texts with different labels are never linked
        (for example the payload kind).
    num_perm
        MinHash signature length.

    Returns
    -------
    numpy.ndarray
        ``int64`` array of shape ``(n,)``: for each text, the smallest index
        of its connected component of linked texts. The partition does not
        depend on the order of the texts.

    Raises
    ------
    PlanError
        On a threshold outside (0, 1] or ``groups`` of another length.

    Notes
    -----
    MinHash (Broder 1997) estimates the Jaccard similarity; LSH banding
    (Leskovec, Rajaraman and Ullman, *Mining of Massive Datasets*, section
    3.4) proposes candidate pairs; each candidate is verified against the
    threshold; groups are connected components, so near-duplicates chain.

    Examples
    --------
    >>> near_duplicate_labels(
    ...     ["Refund window is 30 days.", "Our office is in Lyon.", "Refund window is 30 days!"],
    ...     0.7,
    ... ).tolist()
    [0, 1, 0]
    """
    bands, rows = lsh_params(threshold, num_perm)
    series = texts if isinstance(texts, pl.Series) else pl.Series(list(texts), dtype=pl.String)
    n = len(series)
    labels_of = None if groups is None else _group_labels(groups, n)
    signatures = minhash_signatures(series, num_perm=num_perm)
    empty = (series.cast(pl.String).fill_null("").str.len_bytes() == 0).to_numpy()
    # Identical signatures link directly; LSH runs over the distinct ones only.
    digest = _band_keys(signatures, 1, num_perm)[:, 0]
    table = pl.DataFrame(
        {
            "row": np.arange(n, dtype=np.int64),
            "digest": digest,
            "group": labels_of if labels_of is not None else np.zeros(n, dtype=np.int64),
        }
    ).filter(~pl.Series(empty))
    firsts = table.group_by("digest", "group", maintain_order=True).agg(
        pl.col("row").first().alias("first"), pl.col("row")
    )
    same = firsts.explode("row").filter(pl.col("row") != pl.col("first"))
    left = [same.get_column("first").to_numpy()]
    right = [same.get_column("row").to_numpy()]
    distinct = firsts.get_column("first").to_numpy()
    if distinct.size > 1:
        a, b = _lsh_links(signatures, distinct, (bands, rows), threshold, labels_of)
        left.append(a)
        right.append(b)
    return _components(
        n, np.concatenate(left).astype(np.int64), np.concatenate(right).astype(np.int64)
    )
