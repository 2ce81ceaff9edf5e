"""``rank("strategies")``: the registry's assembly as a rank plan node.

The scorer of :class:`cognoxium.engine.ranks.RankStrategies`, imported by its
lowering the first time a plan ranks by strategies: the rows reaching the
node are the store of a :class:`~cognoxium.strategies.Backends`,
the default :class:`~cognoxium.strategies.ContextAssembler` assembles them for
the node's query under its budget, and each row scores the relevance of its
fragment, -1.0 for rows not assembled.

Backends are built once per distinct set of rows (a least-recently-used
cache of 16, keyed by the rows' ids and content hashes and the model), and
one assembler serves each (model, profile) pair, so its executor's circuit
breakers carry over from one request to the next, as in a long-running
service: a strategy that times out changes the ranking of later requests.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Final

import numpy as np
import numpy.typing as npt
import polars as pl

from cognoxium.engine.ranks import RankStrategies
from cognoxium.retrieval.embeddings import default_cache
from cognoxium.retrieval.scope import frame_key
from cognoxium.strategies.assembler import ContextAssembler, merge_fragments
from cognoxium.strategies.backends import Backends
from cognoxium.strategies.protocol import ContextRequest

__all__ = ["strategy_scores"]

_BACKENDS: OrderedDict[tuple[object, ...], Backends] = OrderedDict()
_BACKENDS_MAX: Final = 16
_ASSEMBLERS: dict[tuple[str, object], ContextAssembler] = {}


def _backends(rows: pl.DataFrame, model: str) -> Backends:
    key = (model, frame_key(rows, ("id", "content_hash")))
    found = _BACKENDS.get(key)
    if found is None:
        found = Backends.from_frame(rows, vector=model, embedding_cache=default_cache())
        _BACKENDS[key] = found
        if len(_BACKENDS) > _BACKENDS_MAX:
            _BACKENDS.popitem(last=False)
    else:
        _BACKENDS.move_to_end(key)
    return found


def strategy_scores(node: RankStrategies, rows: pl.DataFrame) -> npt.NDArray[np.float64]:
    """The score of each row under the strategy assembly of ``node``.

    Parameters
    ----------
    node
        The rank node: query, budget (tokens), as_of, profile and model.
    rows
        The rows reaching it, canonical schema, ``(n,)``.

    Returns
    -------
    numpy.ndarray
        ``float64`` ``(n,)``: the relevance of each assembled row's fragment,
        -1.0 for the others.
    """
    assembler = _ASSEMBLERS.setdefault((node.model, node.profile), ContextAssembler())
    result = assembler.assemble(
        ContextRequest(query=node.query, as_of=node.as_of, profile=node.profile),
        _backends(rows, node.model),
        node.budget,
    )
    relevance = {f.node: f.relevance_score for f in merge_fragments(result.fragments)}
    ids = rows.get_column("id")
    scores = ids.replace_strict(relevance, default=-1.0, return_dtype=pl.Float64)
    return scores.to_numpy().astype(np.float64)
