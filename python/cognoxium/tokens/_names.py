"""The names of the built-in token profiles, without loading a tokenizer.

:mod:`cognoxium.tokens.profiles` re-exports them; the command line reads them
for its help text, which must not load tiktoken, NumPy or Polars.
"""

__all__ = ["APPROXIMATE", "HUGGINGFACE_PREFIX", "PROFILE_NAMES"]

APPROXIMATE: str = "approximate"
"""Name of the profile that counts UTF-8 bytes: a proven upper bound, flagged estimated."""

HUGGINGFACE_PREFIX: str = "huggingface:"
"""Prefix of a profile name that loads ``tokenizer.json`` at the path after it."""

PROFILE_NAMES: tuple[str, ...] = ("cl100k_base", "o200k_base", APPROXIMATE)
"""Built-in profile names. :func:`~cognoxium.tokens.profiles.get_profile` also takes
model names and ``huggingface:PATH``."""
