"""Phase 3 of :func:`~cognoxium.packing.packer.pack`: what each item sends, and what it costs.

An item costs the tokens of its rendered content under the token profile,
plus the per-message framing of its chat role. :func:`render` fixes the
content, chat role and framing of every row by column operations;
:class:`UnitCosts` counts tokens lazily, only for the units the selection
reaches, in batches, and proves cheaper lower bounds first (see
:meth:`~cognoxium.tokens.profiles.TokenProfile.lower_bound`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from cognoxium._columns import CHAT_ROLES
from cognoxium.governance.policies import data_block_expr
from cognoxium.items.schema import packed_text_expr
from cognoxium.packing._model import UNSET
from cognoxium.packing._policies import PolicyReview
from cognoxium.packing._units import Units
from cognoxium.tokens.profiles import TokenProfile

__all__ = ["Rendering", "UnitCosts", "render"]


@dataclass(frozen=True)
class Rendering:
    """Every row as it would be sent.

    Attributes
    ----------
    content
        ``(n,)`` String: the text the item sends (policies' data blocks included).
    chat_role
        ``(n,)`` String: the chat role it is sent as.
    key
        ``(n,)`` String: the token cache key of ``content`` (the content hash,
        or the rendered text itself when a policy rewrote it).
    framing
        ``(n,)`` int64: the chat format's per-message framing, in tokens.
    cheap
        ``(n,)`` Int64: a lower bound of the cost known for every row at no
        real cost, ``framing + ceil(UTF-8 bytes / longest token bytes)``, in tokens.
    """

    content: pl.Series
    chat_role: pl.Series
    key: pl.Series
    framing: np.ndarray
    cheap: pl.Series

    def messages(self, rows: np.ndarray) -> list[dict[str, str]]:
        """OpenAI chat messages ``{"role", "content"}`` of ``rows`` (``(k,)`` int64), in order."""
        roles = self.chat_role.gather(rows).to_list()
        contents = self.content.gather(rows).to_list()
        return [{"role": r, "content": c} for r, c in zip(roles, contents, strict=True)]


def render(df: pl.DataFrame, profile: TokenProfile, review: PolicyReview) -> Rendering:
    """Render every row of ``df`` as its chat message, as the policies decided.

    Parameters
    ----------
    df
        The items, ``n`` rows.
    profile
        The token profile (its framing and longest token).
    review
        The policies' verdicts: ``render_as_user`` sends the item as a ``user``
        message, ``render_as_data`` also wraps its content in a data block.

    Returns
    -------
    Rendering
        Content, chat role, cache key, framing and cheap bound of every row.
    """
    role = pl.col("role").cast(pl.String)
    width = profile.longest_token_bytes
    all_text = bool((df.get_column("payload_kind") == "text").all())
    content = pl.col("text").fill_null("") if all_text else packed_text_expr()
    chat_role = role.replace_strict(CHAT_ROLES, return_dtype=pl.String)
    key = pl.col("content_hash")
    action_column = review.column("action")
    if action_column is not None:
        action = pl.lit(action_column)
        as_data = action == "render_as_data"
        chat_role = (
            pl.when(action.is_in(["render_as_user", "render_as_data"]))
            .then(pl.lit("user"))
            .otherwise(chat_role)
        )
        content = pl.when(as_data).then(data_block_expr(content)).otherwise(content)
        # The cache key of a rendered text is the text itself.
        key = pl.when(as_data).then(pl.concat_str([pl.lit("data:"), content])).otherwise(key)
    framing_by_chat = {chat: profile.framing(chat) for chat in set(CHAT_ROLES.values())}
    cols = df.select(
        content.alias("content"),
        chat_role.alias("chat_role"),
        key.alias("key"),
        chat_role.replace_strict(framing_by_chat, return_dtype=pl.Int64).alias("framing"),
    ).with_columns(
        (
            pl.col("framing")
            + (pl.col("content").str.len_bytes().cast(pl.Int64) + width - 1) // width
        ).alias("cheap"),
    )
    return Rendering(
        content=cols.get_column("content"),
        chat_role=cols.get_column("chat_role"),
        key=cols.get_column("key"),
        framing=cols.get_column("framing").to_numpy(),
        cheap=cols.get_column("cheap"),
    )


class UnitCosts:
    """The costs of the packing units, known lazily.

    ``bound`` holds each unit's proven lower bound on its cost and ``cost`` its
    exact cost, ``(n_units,)`` int64 in tokens, and ``row_tokens`` each row's
    exact cost, ``(n,)`` int64 in tokens; all are
    :data:`~cognoxium.packing._model.UNSET` while not computed. They are filled
    in batches, only for the units that the selection reaches; ``batch`` is
    the size of the next batch, doubling up to 8192.

    Parameters
    ----------
    profile
        The token profile that counts.
    rendering
        What every row sends.
    units
        The packing units.
    """

    def __init__(self, profile: TokenProfile, rendering: Rendering, units: Units) -> None:
        self.profile = profile
        self.content = rendering.content
        self.hashes = rendering.key
        self.framing = rendering.framing
        self.units = units
        self.row_tokens = np.full(len(self.content), UNSET, dtype=np.int64)
        self.cost = np.full(units.n_units, UNSET, dtype=np.int64)
        self.bound = np.full(units.n_units, UNSET, dtype=np.int64)
        self.batch = 256

    def ensure_bounds(self, units: np.ndarray) -> None:
        """Compute the lower bound of every unit of ``units`` (``(k,)`` int64) that lacks one."""
        units = units[self.bound[units] == UNSET]
        if len(units) == 0:
            return
        rows, starts = self.units.rows_of(units)
        texts = self.content.gather(rows).to_frame("text")
        bound = texts.select(self.profile.lower_bound(pl.col("text"))).to_series().to_numpy()
        self.bound[units] = self.units.per_unit(bound.astype(np.int64) + self.framing[rows], starts)

    def count(self, units: np.ndarray) -> None:
        """Count the exact cost of every unit of ``units`` (``(k,)`` int64) not yet counted."""
        units = units[self.cost[units] == UNSET]
        if len(units) == 0:
            return
        rows, starts = self.units.rows_of(units)
        counts = self.profile.count_cached(
            self.hashes.gather(rows).to_list(), self.content.gather(rows).to_list()
        )
        self.row_tokens[rows] = counts + self.framing[rows]
        self.cost[units] = self.units.per_unit(self.row_tokens[rows], starts)

    def prefetch(self, order: np.ndarray, pos: int, remaining: int) -> None:
        """Count the next batch of uncounted units of ``order`` from ``pos`` on that may still fit.

        ``remaining`` is the budget left, in tokens: a unit whose lower bound
        exceeds it is skipped without counting.
        """
        picked: list[np.ndarray] = []
        need = self.batch
        stop = len(order)
        while pos < stop and need > 0:
            span = order[pos : pos + 4 * self.batch]
            self.ensure_bounds(span)
            take = span[(self.bound[span] <= remaining) & (self.cost[span] == UNSET)][:need]
            picked.append(take)
            need -= len(take)
            pos += len(span)
        self.count(np.concatenate(picked))
        self.batch = min(self.batch * 2, 8192)
