"""Worker threads for work that overlaps the caller's: one thread per purpose and process."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from functools import cache

__all__ = ["worker"]


def worker(purpose: str) -> ThreadPoolExecutor:
    """The one worker thread of ``purpose`` in this process, made when first needed.

    Work submitted to it runs in order. A process forked from one that had
    it gets its own, as the parent's thread does not exist in the child.

    Parameters
    ----------
    purpose
        A short name; the thread is named ``cognoxium-<purpose>``.

    Examples
    --------
    >>> worker("example").submit(sum, [1, 2, 3]).result()
    6
    >>> worker("example") is worker("example")
    True
    """
    return _worker(purpose, os.getpid())


@cache
def _worker(purpose: str, pid: int) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"cognoxium-{purpose}")
