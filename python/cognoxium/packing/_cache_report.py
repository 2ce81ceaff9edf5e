"""The manifest's account of a continuing pack (see :mod:`cognoxium.packing.cache`)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["CacheReport"]


class CacheReport(BaseModel):
    """What a continuing pack kept of the earlier pack's prefix, what it evicted, and its bill.

    Token counts are in tokens of the pack's profile, by the chat costing
    rule (framing included).

    A continuing pack keeps, holds out and evicts whole packing units
    (groups and, with ``turns=True``, whole turns), as the packer packs or
    drops them: a ``document`` or ``memory`` item that shares a unit with
    history is evicted with it, listed in ``evicted`` when the earlier pack
    sent it, and its manifest reason is ``evicted_for_cache``. A unit with a
    required item is never evicted.

    Attributes
    ----------
    continues
        The digest (:attr:`PackManifest.digest`) of the earlier pack's manifest.
    eviction_share
        The share of the evictable history evicted at each eviction step.
    prefix_items, prefix_tokens
        The leading messages this pack sends exactly as the earlier pack
        sent them (messages of :attr:`ContextPack.messages`: a user message
        of a text and an image is one), and the tokens of all their items:
        the prefix a provider can read from its cache. They are compared
        on the request as the target sends it: the OpenAI messages in
        order, or, with ``target="anthropic"`` or a ``breakpoints`` cache
        model, the Anthropic request as the provider reads it, its
        ``system`` block (every system and developer message) first, then
        the messages' content blocks; a changed system block shares nothing.
    prefix_ids
        The ids of those messages' items, in pack order.
    stable_tokens
        The tokens of this pack's history (every message before its
        document and memory items, and for Anthropic the system block):
        the prefix the next pack keeps, where
        :meth:`~cognoxium.packing.ContextPack.to_anthropic` places the
        history's ``cache_control`` breakpoint.
    evicted
        Ids of the earlier pack's items this pack evicted (reason
        ``evicted_for_cache``), in input order, the documents and memories
        of evicted units included.
    eviction_steps
        How many eviction steps were taken (0: the earlier prefix was kept whole).
    eviction_detail
        Why the steps were taken (the tokens needed and the items' budget), or ``None``.
    replayed_cuts
        Ids of the items the earlier pack cut to fit that this pack sends,
        in input order: each is cut as it was then, or further, never sent
        longer, so its bytes stay those the provider cached (see
        :attr:`PackManifest.truncations`).
    cache_model
        The :class:`~cognoxium.packing.cache_models.CacheModel` billed, or
        ``None`` (no ``cache_model`` option: the fields below are ``None``).
    input_tokens, cached_tokens, cache_write_tokens, uncached_tokens
        The request's input tokens (``used_tokens``) as the model's cache
        bills them against the earlier pack (see
        :func:`~cognoxium.packing.cache_models.bill`). A ``breakpoints``
        model reads the longest of the earlier request's marks that is in
        the shared prefix and ends at most ``lookback_blocks - 1`` content
        blocks before one of this request's marks, and writes up to this
        request's last mark.
    billed_tokens
        The input price in units of one uncached token.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    continues: str
    eviction_share: float
    prefix_items: int
    prefix_tokens: int
    prefix_ids: list[str]
    stable_tokens: int
    evicted: list[str]
    eviction_steps: int
    eviction_detail: str | None
    replayed_cuts: list[str] = []
    cache_model: str | None = None
    input_tokens: int | None = None
    cached_tokens: int | None = None
    cache_write_tokens: int | None = None
    uncached_tokens: int | None = None
    billed_tokens: float | None = None
