"""A call run on a daemon thread of its own, its result read through a future.

Used where the work releases the interpreter lock (hashing, Polars) or must
not hold the caller up (a strategy under a timeout). A thread is started per
call rather than taken from a pool: a pool made before a ``fork`` has no
thread in the child, and its work would never run there.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import TypeVar

__all__ = ["in_daemon_thread"]

T = TypeVar("T")


def in_daemon_thread(name: str, call: Callable[[], T]) -> Future[T]:
    """Start ``call()`` on a daemon thread named ``name``; the future resolves to its result.

    Parameters
    ----------
    name
        The thread's name.
    call
        The work; whatever it raises is set on the future (``result()``
        raises it in the caller).

    Returns
    -------
    concurrent.futures.Future
        Its result or exception once ``call`` returns; a future cancelled
        before the thread starts the call is left cancelled.

    Examples
    --------
    >>> in_daemon_thread("example", lambda: 6 * 7).result()
    42
    """
    future: Future[T] = Future()

    def work() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            value = call()
        except BaseException as exc:  # resolve the future whatever the call raised
            future.set_exception(exc)
        else:
            future.set_result(value)

    threading.Thread(target=work, name=name, daemon=True).start()
    return future
