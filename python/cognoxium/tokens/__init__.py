"""Token profiles: real tokenizers with per-message framing, counts cached by content hash.

Also cutting a text at token boundaries (:func:`cut_tokens`).
"""

from cognoxium.tokens.profiles import (
    CACHE_MAX_ENTRIES,
    PROFILE_NAMES,
    CacheInfo,
    TokenProfile,
    cache_info,
    clear_cache,
    get_profile,
    tool_call_texts,
)
from cognoxium.tokens.truncation import SIDES, Side, cut_tokens

__all__ = [
    "CACHE_MAX_ENTRIES",
    "PROFILE_NAMES",
    "SIDES",
    "CacheInfo",
    "Side",
    "TokenProfile",
    "cache_info",
    "clear_cache",
    "cut_tokens",
    "get_profile",
    "tool_call_texts",
]
