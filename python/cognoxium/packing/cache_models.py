"""Provider prompt caches as data: what a repeated prefix costs, in units of one uncached token.

Providers bill the prefix a request shares with an earlier one at a fraction
of the input price. Two rules cover the large providers, and every model is
one row of :data:`CACHE_MODEL_TABLE` under one of them (a new model is a new
row, not new code; :func:`register_cache_model` adds your own):

- ``automatic`` (OpenAI; Gemini, Mistral and others work alike): a prompt of
  at least ``min_tokens`` tokens is cached as it is sent; a later prompt that
  starts with the same tokens reads the longest cached prefix, counted in
  ``increment``-token steps from ``min_tokens`` on, at ``read_multiplier``
  times the input price. Writing costs nothing extra.
  (OpenAI, "Prompt caching" guide: 1,024 tokens, 128-token increments.)
- ``breakpoints`` (Anthropic): the request marks up to ``max_breakpoints``
  ends of prefixes with ``cache_control``; a marked prefix of at least
  ``min_tokens`` tokens is written to the cache at ``write_multiplier`` times
  the input price (1.25 for the 5-minute cache, 2 for the 1-hour one) and a
  later request that repeats it reads it at ``read_multiplier`` (0.1), when
  one of its marks ends at the cached prefix or at most
  ``lookback_blocks - 1`` content blocks after it: from each mark, earlier
  cache entries are looked for about 20 blocks back, no further.
  (Anthropic, "Prompt caching" documentation.)

A cache entry lives ``ttl_seconds`` after its last use; :func:`bill` reads
the earlier request's cache only when the later one comes within that time.

Examples
--------
>>> model = get_cache_model("openai:gpt-5")
>>> model.kind, model.min_tokens, model.increment, model.read_multiplier
('automatic', 1024, 128, 0.1)
>>> b = bill(model, input_tokens=3000, shared_tokens=2900, previous_input_tokens=2950)
>>> b.cached_tokens, b.uncached_tokens, b.billed_tokens
(2816, 184, 465.6)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal

from cognoxium.exceptions import PackError

__all__ = [
    "CACHE_KINDS",
    "CACHE_MODEL_TABLE",
    "CacheBill",
    "CacheKind",
    "CacheModel",
    "bill",
    "cache_models",
    "get_cache_model",
    "register_cache_model",
]

CacheKind = Literal["automatic", "breakpoints"]
CACHE_KINDS: tuple[CacheKind, ...] = ("automatic", "breakpoints")
"""The caching rules a :class:`CacheModel` follows."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CacheModel:
    """How one provider model caches prompt prefixes and bills them; checked when made.

    Parameters
    ----------
    name
        The model's name in the registry (``"provider:model"`` by convention).
    kind
        ``"automatic"`` or ``"breakpoints"`` (see the module's notes).
    min_tokens
        The shortest prefix that is cached, in tokens (> 0).
    increment
        ``automatic``: cache hits are counted in steps of this many tokens
        after ``min_tokens``; ``breakpoints``: 1.
    read_multiplier
        The price of a cached input token, as a share of an uncached one (0 to 1).
    write_multiplier
        The price of an input token written to the cache (``breakpoints``:
        1.25 or 2; ``automatic``: 1, writing costs nothing extra).
    max_breakpoints
        ``breakpoints``: the most ``cache_control`` marks one request may
        hold (Anthropic: 4); ``automatic``: 0.
    ttl_seconds
        How long a cache entry lives after its last use, in seconds (> 0).
    lookback_blocks
        ``breakpoints``: how many content blocks a mark looks back for an
        earlier cache entry, its own block included (Anthropic: 20); a
        later request reads an entry only from a mark that ends at it or
        fewer blocks after it. Not used by ``automatic`` caches.

    Raises
    ------
    PackError
        If a field is out of its range; it names the field and the model.

    Examples
    --------
    >>> CacheModel(name="mine", kind="automatic", min_tokens=0, read_multiplier=0.5,
    ...            ttl_seconds=300)
    Traceback (most recent call last):
    ...
    cognoxium.exceptions.PackError: cache model 'mine': min_tokens must be a whole number > 0, got 0
    """

    name: str
    kind: CacheKind
    min_tokens: int
    read_multiplier: float
    ttl_seconds: int
    increment: int = 1
    write_multiplier: float = 1.0
    max_breakpoints: int = 0
    lookback_blocks: int = 20

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise PackError(f"a cache model's name must be non-empty text, got {self.name!r}")
        where = f"cache model {self.name!r}"
        if self.kind not in CACHE_KINDS:
            raise PackError(f"{where}: kind must be one of {list(CACHE_KINDS)}, got {self.kind!r}")
        for field in ("min_tokens", "increment", "ttl_seconds", "lookback_blocks"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise PackError(f"{where}: {field} must be a whole number > 0, got {value!r}")
        breakpoints = self.max_breakpoints
        if isinstance(breakpoints, bool) or not isinstance(breakpoints, int) or breakpoints < 0:
            raise PackError(f"{where}: max_breakpoints must be a whole number >= 0")
        if self.kind == "breakpoints" and breakpoints == 0:
            raise PackError(f"{where}: a breakpoints cache needs max_breakpoints >= 1")
        if not _share(self.read_multiplier, 0.0, 1.0):
            raise PackError(
                f"{where}: read_multiplier must be a number from 0 to 1, "
                f"got {self.read_multiplier!r}"
            )
        if not _share(self.write_multiplier, 1.0, math.inf):
            raise PackError(
                f"{where}: write_multiplier must be a number >= 1, got {self.write_multiplier!r}"
            )


def _share(value: object, low: float, high: float) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and low <= value <= high
    )


_OPENAI = {"kind": "automatic", "min_tokens": 1024, "increment": 128, "ttl_seconds": 300}
_ANTHROPIC_5M = {
    "kind": "breakpoints",
    "max_breakpoints": 4,
    "lookback_blocks": 20,
    "read_multiplier": 0.1,
    "write_multiplier": 1.25,
    "ttl_seconds": 300,
}
_ANTHROPIC_1H = {**_ANTHROPIC_5M, "write_multiplier": 2.0, "ttl_seconds": 3600}

CACHE_MODEL_TABLE: tuple[Mapping[str, Any], ...] = (
    # OpenAI: cached input price over input price, from the published price list.
    {**_OPENAI, "name": "openai:gpt-4o", "read_multiplier": 0.5},
    {**_OPENAI, "name": "openai:gpt-4o-mini", "read_multiplier": 0.5},
    {**_OPENAI, "name": "openai:o1", "read_multiplier": 0.5},
    {**_OPENAI, "name": "openai:gpt-4.1", "read_multiplier": 0.25},
    {**_OPENAI, "name": "openai:gpt-4.1-mini", "read_multiplier": 0.25},
    {**_OPENAI, "name": "openai:o3", "read_multiplier": 0.25},
    {**_OPENAI, "name": "openai:o4-mini", "read_multiplier": 0.25},
    {**_OPENAI, "name": "openai:gpt-5", "read_multiplier": 0.1},
    {**_OPENAI, "name": "openai:gpt-5-mini", "read_multiplier": 0.1},
    # Anthropic: the minimum cacheable prompt length of each model; ":1h" is the 1-hour cache.
    {**_ANTHROPIC_5M, "name": "anthropic:claude-opus-4-1", "min_tokens": 1024},
    {**_ANTHROPIC_5M, "name": "anthropic:claude-sonnet-4-5", "min_tokens": 1024},
    {**_ANTHROPIC_5M, "name": "anthropic:claude-sonnet-4", "min_tokens": 1024},
    {**_ANTHROPIC_5M, "name": "anthropic:claude-3-7-sonnet", "min_tokens": 1024},
    {**_ANTHROPIC_5M, "name": "anthropic:claude-3-5-haiku", "min_tokens": 2048},
    {**_ANTHROPIC_5M, "name": "anthropic:claude-opus-4-5", "min_tokens": 4096},
    {**_ANTHROPIC_5M, "name": "anthropic:claude-haiku-4-5", "min_tokens": 4096},
    {**_ANTHROPIC_1H, "name": "anthropic:claude-sonnet-4-5:1h", "min_tokens": 1024},
    {**_ANTHROPIC_1H, "name": "anthropic:claude-opus-4-5:1h", "min_tokens": 4096},
)
"""The built-in cache models, one row each: the fields of :class:`CacheModel`.

Also under their provider's name alone: ``"openai"`` is ``openai:gpt-4o``
(cached input at 0.5x) and ``"anthropic"`` is ``anthropic:claude-sonnet-4-5``
(5-minute cache).
"""

_ALIASES = {"openai": "openai:gpt-4o", "anthropic": "anthropic:claude-sonnet-4-5"}

_REGISTRY: dict[str, CacheModel] = {row["name"]: CacheModel(**row) for row in CACHE_MODEL_TABLE}


def register_cache_model(model: CacheModel, *, replace: bool = False) -> CacheModel:
    """Add a cache model to the registry, so packs can name it (``cache_model="name"``).

    Parameters
    ----------
    model
        The model; its ``name`` is its key.
    replace
        Replace a model of the same name (``False``: refuse).

    Returns
    -------
    CacheModel
        ``model``.

    Raises
    ------
    PackError
        If ``model`` is not a :class:`CacheModel`, or its name is taken and
        ``replace`` is false.

    Examples
    --------
    >>> mine = register_cache_model(CacheModel(
    ...     name="example:lite", kind="automatic", min_tokens=2048, increment=1,
    ...     read_multiplier=0.25, ttl_seconds=3600))
    >>> get_cache_model("example:lite") is mine
    True
    """
    if not isinstance(model, CacheModel):
        raise PackError(f"register_cache_model takes a CacheModel, got {type(model).__name__}")
    if not replace and (model.name in _REGISTRY or model.name in _ALIASES):
        raise PackError(
            f"a cache model named {model.name!r} exists; pass replace=True to replace it"
        )
    _REGISTRY[model.name] = model
    return model


def get_cache_model(model: str | CacheModel) -> CacheModel:
    """The cache model of that name (a :class:`CacheModel` is returned as it is).

    Raises
    ------
    PackError
        If no model has that name; it lists the names known.
    """
    if isinstance(model, CacheModel):
        return model
    if isinstance(model, str):
        found = _REGISTRY.get(_ALIASES.get(model, model))
        if found is not None:
            return found
    raise PackError(
        f"no cache model named {model!r}; the cache models are "
        f"{sorted([*_REGISTRY, *_ALIASES])} (add one with register_cache_model)"
    )


def cache_models() -> Mapping[str, CacheModel]:
    """The registered cache models by name (a read-only view)."""
    return MappingProxyType(_REGISTRY)


@dataclass(frozen=True, slots=True)
class CacheBill:
    """The input tokens of one request as a provider's cache bills them.

    Attributes
    ----------
    input_tokens
        Every input token of the request.
    cached_tokens
        Tokens read from the cache (billed at ``read_multiplier``).
    cache_write_tokens
        Tokens written to the cache (billed at ``write_multiplier``; 0 for
        ``automatic`` caches, whose writes cost nothing extra).
    uncached_tokens
        The rest, billed at the input price.
    billed_tokens
        The request's input price in units of one uncached token:
        ``uncached + read_multiplier * cached + write_multiplier * written``,
        rounded to 6 decimals.
    """

    input_tokens: int
    cached_tokens: int
    cache_write_tokens: int
    uncached_tokens: int
    billed_tokens: float


def bill(
    model: CacheModel,
    *,
    input_tokens: int,
    shared_tokens: int = 0,
    previous_input_tokens: int | None = None,
    previous_breakpoints: Sequence[int] = (),
    breakpoints: Sequence[int] = (),
    elapsed_seconds: float = 0.0,
) -> CacheBill:
    """Bill one request's input tokens under ``model``, against the request before it.

    Parameters
    ----------
    model
        The cache model.
    input_tokens
        The request's input tokens.
    shared_tokens
        How many leading tokens it shares with the request before it.
    previous_input_tokens
        ``automatic``: the earlier request's input tokens (cached when at
        least ``min_tokens``); ``None``: there was none, nothing is cached.
    previous_breakpoints, breakpoints
        ``breakpoints``: the prefix lengths, in tokens, that the earlier and
        this request mark with ``cache_control`` (at most
        ``max_breakpoints`` are used, the longest).
    elapsed_seconds
        The time from the earlier request to this one; beyond
        ``ttl_seconds`` its cache has expired.

    Returns
    -------
    CacheBill
        Cached, written and uncached tokens and the billed input.

    Examples
    --------
    A prefix of 1,500 tokens marked and written, then read by a request that
    repeats it and marks 400 tokens more (written at 1.25x):

    >>> claude = get_cache_model("anthropic")
    >>> first = bill(claude, input_tokens=1600, breakpoints=[1500])
    >>> first.cache_write_tokens, first.billed_tokens
    (1500, 1975.0)
    >>> second = bill(claude, input_tokens=2000, shared_tokens=1900,
    ...               previous_breakpoints=[1500], breakpoints=[1900])
    >>> second.cached_tokens, second.cache_write_tokens, second.billed_tokens
    (1500, 400, 750.0)
    """
    live = elapsed_seconds <= model.ttl_seconds
    shared = min(shared_tokens, input_tokens)
    cached = written = 0
    if model.kind == "automatic":
        if live and previous_input_tokens is not None and previous_input_tokens >= model.min_tokens:
            shared = min(shared, previous_input_tokens)
            if shared >= model.min_tokens:
                steps = (shared - model.min_tokens) // model.increment
                cached = model.min_tokens + steps * model.increment
    else:
        used = sorted(b for b in breakpoints if 0 < b <= input_tokens)[-model.max_breakpoints :]
        before = sorted(previous_breakpoints)[-model.max_breakpoints :]
        if live:
            read = [b for b in before if model.min_tokens <= b <= shared]
            cached = max(read, default=0)
        marked = [b for b in used if b >= model.min_tokens]
        if marked and max(marked) > cached:
            written = max(marked) - cached
    uncached = input_tokens - cached - written
    billed = uncached + model.read_multiplier * cached + model.write_multiplier * written
    return CacheBill(
        input_tokens=input_tokens,
        cached_tokens=cached,
        cache_write_tokens=written,
        uncached_tokens=uncached,
        billed_tokens=round(billed, 6),
    )
