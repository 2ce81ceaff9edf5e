"""Token profiles: real tokenizers with per-message framing, counts cached by content hash."""

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

__all__ = [
    "CACHE_MAX_ENTRIES",
    "PROFILE_NAMES",
    "CacheInfo",
    "TokenProfile",
    "cache_info",
    "clear_cache",
    "get_profile",
    "tool_call_texts",
]
