"""Test-session settings shared by the tests and the doctests."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

# Embeddings computed by the tests (and by the CLI and notebooks they start)
# go to a cache of this session's own, never to the user's cache, unless a
# cache directory is given explicitly.
if "COGNOXIUM_CACHE_DIR" not in os.environ:
    _cache = tempfile.mkdtemp(prefix="cognoxium-test-embeddings-")
    os.environ["COGNOXIUM_CACHE_DIR"] = _cache
    atexit.register(shutil.rmtree, _cache, True)
