"""Token profiles: real tokenizers with per-message framing, counts cached by content hash.

Also cutting a text at token boundaries (:func:`cut_tokens`).
"""

from typing import TYPE_CHECKING

from cognoxium._lazy import lazy_exports

if TYPE_CHECKING:
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
    from cognoxium.tokens.truncation import SIDES, Side, cut_tokens
else:
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "cognoxium.tokens.profiles": [
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
            ],
            "cognoxium.tokens.truncation": ["SIDES", "Side", "cut_tokens"],
        },
    )

__all__ = [
    "APPROXIMATE",
    "CACHE_MAX_ENTRIES",
    "HUGGINGFACE_PREFIX",
    "PROFILE_NAMES",
    "SIDES",
    "CacheInfo",
    "Encoder",
    "Side",
    "TokenProfile",
    "cache_info",
    "clear_cache",
    "cut_tokens",
    "get_profile",
    "tool_call_texts",
]
