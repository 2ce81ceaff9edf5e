"""A learned ranker: L2-regularised logistic regression over ranking features.

The model scores each scope item by the probability that it is evidence for
the query, from the :data:`~cognoxium.retrieval.features.FEATURE_NAMES`
columns of a :class:`~cognoxium.retrieval.features.FeatureExtractor`:

``p = sigmoid(b + w · (x - mean) / scale)``

and ranks by the utility ``log p - c · log_cost`` (``c`` = the model's
``cost_penalty``; 0 ranks by probability alone), so that a packer that fills
a token budget in rank order can prefer cheap items of equal promise.

:func:`fit_logistic` fits ``w`` and ``b`` with Newton's method (iteratively
reweighted least squares) on standardised features, deterministically: no
random start, a fixed iteration cap and tolerance, and a fixed-order sum.
The model is stored as canonical JSON (:meth:`LearnedModel.to_json`): weights,
feature names, means, scales, the cost penalty and its provenance (training
data and its sha256, date, command, metrics). The shipped model is
``cognoxium/retrieval/models/learned_ranker.json``
(:func:`default_model_path`).

Source: logistic regression fitted by IRLS, as in T. Hastie, R. Tibshirani and
J. Friedman, *The Elements of Statistical Learning*, 2nd ed., section 4.4.1.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from cognoxium.exceptions import PlanError, RecordError
from cognoxium.items._checks import invalid_json
from cognoxium.retrieval.features import FEATURE_NAMES, FeatureExtractor

__all__ = [
    "MODEL_FORMAT",
    "LearnedModel",
    "default_model_path",
    "fit_logistic",
    "learned_scores",
    "load_model",
    "model_digest",
]

MODEL_FORMAT: Final = "cognoxium.learned_ranker/1"
"""The ``format`` field of a learned ranker's JSON."""

_SCORE_DECIMALS: Final = 9


def _sigmoid(z: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    out: npt.NDArray[np.float64] = np.empty_like(z)
    positive = z >= 0
    out[positive] = 1.0 / (1.0 + np.exp(-z[positive]))
    e = np.exp(z[~positive])
    out[~positive] = e / (1.0 + e)
    return out


def _log_sigmoid(z: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    out: npt.NDArray[np.float64] = -np.logaddexp(0.0, -z)
    return out


def fit_logistic(
    x: npt.ArrayLike,
    y: npt.ArrayLike,
    *,
    l2: float = 1.0,
    max_iter: int = 30,
    tol: float = 1e-8,
) -> tuple[npt.NDArray[np.float64], float]:
    """Fit L2-regularised logistic regression with Newton's method (IRLS).

    Minimises ``sum_i log(1 + exp(-s_i z_i)) + l2/2 · ||w||²`` with
    ``z = x · w + b`` and ``s_i = ±1`` (the intercept is not penalised).
    Starts at zero; each step solves the Newton system exactly; stops when
    the largest change of a coefficient is below ``tol`` or after
    ``max_iter`` steps. BLAS runs on one thread (threadpoolctl), so the same
    input gives the same bytes whatever the machine's load.

    Parameters
    ----------
    x
        Features, shape ``(m, d)``, finite (standardise them first; see
        :meth:`LearnedModel.fit`).
    y
        Labels, shape ``(m,)``, 0 or 1.
    l2
        L2 penalty (>= 0) on the weights.
    max_iter
        Newton steps at most (>= 1).
    tol
        Convergence threshold on the coefficient change.

    Returns
    -------
    weights : numpy.ndarray
        ``float64``, shape ``(d,)``.
    bias : float
        The intercept.

    Raises
    ------
    PlanError
        On shapes that do not match, non-finite features, labels other than
        0 and 1, or a bad setting.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> x = rng.normal(size=(4000, 2))
    >>> y = (rng.random(4000) < 1 / (1 + np.exp(-(2 * x[:, 0] - x[:, 1] + 0.5)))).astype(int)
    >>> w, b = fit_logistic(x, y, l2=0.0)
    >>> np.round(w, 1).tolist(), round(b, 1)
    ([2.0, -1.0], 0.5)
    """
    xs = np.asarray(x, dtype=np.float64)
    ys = np.asarray(y, dtype=np.float64)
    if xs.ndim != 2 or ys.shape != (xs.shape[0],):
        raise PlanError(f"fit_logistic needs x (m, d) and y (m,), got {xs.shape} and {ys.shape}")
    if not np.isfinite(xs).all():
        raise PlanError("fit_logistic: features must be finite (no NaN or infinity)")
    if not np.isin(ys, (0.0, 1.0)).all():
        raise PlanError("fit_logistic: labels must be 0 or 1")
    if isinstance(l2, bool) or not (isinstance(l2, int | float) and 0 <= l2 < math.inf):
        raise PlanError(f"l2 must be a finite number >= 0, got {l2!r}")
    if isinstance(max_iter, bool) or not isinstance(max_iter, int) or max_iter < 1:
        raise PlanError(f"max_iter must be an integer >= 1, got {max_iter!r}")
    from threadpoolctl import threadpool_limits

    # One BLAS thread: the sums then run in one fixed order, so the same input
    # gives the same bytes on any machine load (and threads only contend on
    # small, tall matrices like these).
    with threadpool_limits(limits=1, user_api="blas"):
        return _newton(xs, ys, float(l2), max_iter, tol)


def _newton(
    xs: npt.NDArray[np.float64], ys: npt.NDArray[np.float64], l2: float, max_iter: int, tol: float
) -> tuple[npt.NDArray[np.float64], float]:
    m, d = xs.shape
    design = np.hstack([xs, np.ones((m, 1))])
    penalty = np.full(d + 1, l2)
    penalty[d] = 0.0
    beta = np.zeros(d + 1)
    for _ in range(max_iter):
        p = _sigmoid(design @ beta)
        gradient = design.T @ (p - ys) + penalty * beta
        hessian = (design.T * (p * (1.0 - p))) @ design + np.diag(penalty)
        hessian[np.diag_indices(d + 1)] += 1e-12
        step = np.linalg.solve(hessian, gradient)
        beta = beta - step
        if float(np.max(np.abs(step))) < tol:
            break
    return beta[:d].copy(), float(beta[d])


@dataclass(frozen=True, slots=True, kw_only=True)
class LearnedModel:
    """A fitted learned ranker (see the module docstring for the score).

    Parameters
    ----------
    feature_names
        The features, a subset of :data:`FEATURE_NAMES` in any order.
    weights, means, scales
        One float per feature: the weight on the standardised feature, and
        the mean and scale (standard deviation, 1 where it is 0) it is
        standardised with.
    bias
        The intercept.
    cost_penalty
        ``c`` >= 0 of the utility ``log p - c · log_cost``.
    embedding_model
        The embedder the features were computed with (``"minilm"``).
    l2
        The L2 penalty it was fitted with.
    provenance
        Free-form JSON: training data name and sha256, date, command, metrics.

    Raises
    ------
    PlanError
        On an unknown feature name, lengths that differ, a non-finite value
        or a negative cost penalty.
    """

    feature_names: tuple[str, ...]
    weights: tuple[float, ...]
    means: tuple[float, ...]
    scales: tuple[float, ...]
    bias: float
    cost_penalty: float = 0.0
    embedding_model: str = "minilm"
    l2: float = 1.0
    provenance: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)

    def __post_init__(self) -> None:
        unknown = [n for n in self.feature_names if n not in FEATURE_NAMES]
        if unknown:
            raise PlanError(f"learned model: unknown features {unknown}; known: {FEATURE_NAMES}")
        d = len(self.feature_names)
        if not (len(self.weights) == len(self.means) == len(self.scales) == d):
            raise PlanError("learned model: weights, means and scales need one value per feature")
        values = (*self.weights, *self.means, *self.scales, self.bias, self.cost_penalty)
        if not all(math.isfinite(v) for v in values):
            raise PlanError("learned model: weights, means, scales and bias must be finite")
        if any(s <= 0 for s in self.scales) or self.cost_penalty < 0:
            raise PlanError("learned model: scales must be > 0 and cost_penalty >= 0")

    @classmethod
    def fit(
        cls,
        x: npt.ArrayLike,
        y: npt.ArrayLike,
        *,
        feature_names: tuple[str, ...] = FEATURE_NAMES,
        l2: float = 1.0,
        cost_penalty: float = 0.0,
        embedding_model: str = "minilm",
        provenance: dict[str, Any] | None = None,
    ) -> LearnedModel:
        """Standardise ``x`` (column mean and standard deviation) and fit :func:`fit_logistic`.

        Parameters
        ----------
        x
            Features, shape ``(m, len(feature_names))``.
        y
            Labels 0/1, shape ``(m,)``.
        feature_names, l2, cost_penalty, embedding_model, provenance
            As the fields.

        Returns
        -------
        LearnedModel

        Examples
        --------
        >>> x = np.array([[0.0], [1.0], [2.0], [3.0]])
        >>> model = LearnedModel.fit(x, [0, 0, 1, 1], feature_names=("bm25",))
        >>> model.means, round(model.scales[0], 4), model.weights[0] > 0
        ((1.5,), 1.118, True)
        """
        xs = np.asarray(x, dtype=np.float64)
        if xs.ndim != 2 or xs.shape[1] != len(feature_names):
            raise PlanError(
                f"learned model: x has shape {xs.shape}, expected (m, {len(feature_names)})"
            )
        means = xs.mean(axis=0)
        scales = xs.std(axis=0)
        scales = np.where(scales > 0, scales, 1.0)
        weights, bias = fit_logistic((xs - means) / scales, y, l2=l2)
        return cls(
            feature_names=tuple(feature_names),
            weights=tuple(float(v) for v in weights),
            means=tuple(float(v) for v in means),
            scales=tuple(float(v) for v in scales),
            bias=bias,
            cost_penalty=float(cost_penalty),
            embedding_model=embedding_model,
            l2=float(l2),
            provenance=dict(provenance or {}),
        )

    def logits(self, x: npt.ArrayLike) -> npt.NDArray[np.float64]:
        """``b + w · (x - mean) / scale`` per row of ``x`` (shape ``(m, d)`` → ``(m,)``)."""
        xs = np.asarray(x, dtype=np.float64)
        standard = (xs - np.asarray(self.means)) / np.asarray(self.scales)
        out: npt.NDArray[np.float64] = standard @ np.asarray(self.weights) + self.bias
        return out

    def utility(self, x: npt.ArrayLike, log_cost: npt.ArrayLike) -> npt.NDArray[np.float64]:
        """``log p - cost_penalty · log_cost``, rounded to 9 decimals (shape ``(m,)``)."""
        raw = _log_sigmoid(self.logits(x)) - self.cost_penalty * np.asarray(
            log_cost, dtype=np.float64
        )
        return np.asarray(np.round(raw, _SCORE_DECIMALS), dtype=np.float64)

    def to_dict(self) -> dict[str, Any]:
        """The model as a JSON-ready dict (see :meth:`to_json`)."""
        return {
            "format": MODEL_FORMAT,
            "feature_names": list(self.feature_names),
            "weights": list(self.weights),
            "means": list(self.means),
            "scales": list(self.scales),
            "bias": self.bias,
            "cost_penalty": self.cost_penalty,
            "embedding_model": self.embedding_model,
            "l2": self.l2,
            "provenance": self.provenance,
        }

    def to_json(self) -> str:
        """Canonical JSON: sorted keys, two-space indent, floats by ``repr`` (round-trip exact)."""
        return json.dumps(self.to_dict(), sort_keys=True, indent=2, ensure_ascii=False) + "\n"

    @classmethod
    def from_dict(cls, data: Any, *, source: str = "<model>") -> LearnedModel:
        """Read a model dict written by :meth:`to_dict`.

        Raises
        ------
        RecordError
            If the format is not :data:`MODEL_FORMAT` or a field is missing
            or of the wrong type; names the source and the field.
        """
        if not isinstance(data, dict) or data.get("format") != MODEL_FORMAT:
            raise RecordError(f"not a learned ranker model ({MODEL_FORMAT})", source=source)
        try:
            return cls(
                feature_names=tuple(str(v) for v in data["feature_names"]),
                weights=tuple(float(v) for v in data["weights"]),
                means=tuple(float(v) for v in data["means"]),
                scales=tuple(float(v) for v in data["scales"]),
                bias=float(data["bias"]),
                cost_penalty=float(data.get("cost_penalty", 0.0)),
                embedding_model=str(data.get("embedding_model", "minilm")),
                l2=float(data.get("l2", 1.0)),
                provenance=dict(data.get("provenance") or {}),
            )
        except KeyError as exc:
            raise RecordError("missing field", source=source, field=str(exc.args[0])) from None
        except (TypeError, ValueError) as exc:
            raise RecordError(f"bad model field: {exc}", source=source) from None


def default_model_path() -> Path:
    """The shipped model, ``cognoxium/retrieval/models/learned_ranker.json``.

    Examples
    --------
    >>> default_model_path().name
    'learned_ranker.json'
    """
    return Path(str(resources.files("cognoxium.retrieval") / "models" / "learned_ranker.json"))


@functools.lru_cache(maxsize=8)
def _load(path: str, mtime_ns: int, size: int) -> LearnedModel:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise RecordError(f"cannot read the model: {exc.strerror}", source=path) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RecordError(invalid_json(exc), source=path, line=exc.lineno) from None
    return LearnedModel.from_dict(data, source=path)


def load_model(path: str | os.PathLike[str] | None = None) -> LearnedModel:
    """Load a learned ranker model, cached by path, modification time and size.

    Parameters
    ----------
    path
        A model JSON file; ``None`` for :func:`default_model_path`.

    Returns
    -------
    LearnedModel

    Raises
    ------
    RecordError
        If the file cannot be read or is not a model.

    Examples
    --------
    >>> model = load_model()
    >>> model.feature_names[0], model.embedding_model
    ('fused', 'minilm')
    """
    where = Path(path) if path is not None else default_model_path()
    try:
        stat = where.stat()
    except OSError as exc:
        raise RecordError(f"cannot read the model: {exc.strerror}", source=str(where)) from None
    return _load(str(where), stat.st_mtime_ns, stat.st_size)


def model_digest(model: LearnedModel) -> str:
    """sha256 hex digest of the model's canonical JSON (its identity in caches)."""
    return hashlib.sha256(model.to_json().encode("utf-8")).hexdigest()


def learned_scores(
    extractor: FeatureExtractor, query: str, model: LearnedModel
) -> npt.NDArray[np.float64]:
    """Score every scope item of ``extractor`` for ``query`` with ``model``.

    Parameters
    ----------
    extractor
        The scope's features.
    query
        The query text.
    model
        The fitted model.

    Returns
    -------
    numpy.ndarray
        ``float64``, shape ``(n,)``, aligned with the scope: the utility
        ``log p - c · log_cost`` (<= 0 when ``c`` = 0), rounded to 9
        decimals, higher is better.
    """
    if extractor.n == 0:
        return np.zeros(0, dtype=np.float64)
    columns = extractor.columns(query)
    x = np.column_stack([columns[name] for name in model.feature_names])
    return model.utility(x, columns["log_cost"])
