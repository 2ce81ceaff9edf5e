"""Token profiles: real tokenizers with per-message framing, counts cached by content hash."""

from cognoxium.tokens.profiles import (
    APPROXIMATE,
    CACHE_MAX_ENTRIES,
    HUGGINGFACE_PREFIX,
    PROFILE_NAMES,
    CacheInfo,
    Encoder,
    TokenProfile,
    cache_info,
    clear_cache,
    get_profile,
    tool_call_texts,
)

__all__ = [
    "APPROXIMATE",
    "CACHE_MAX_ENTRIES",
    "HUGGINGFACE_PREFIX",
    "PROFILE_NAMES",
    "CacheInfo",
    "Encoder",
    "TokenProfile",
    "cache_info",
    "clear_cache",
    "get_profile",
    "tool_call_texts",
]
