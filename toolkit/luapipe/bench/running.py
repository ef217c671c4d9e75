"""What a benchmark has started and not yet stopped: the private redis-server, the delay
proxy, the worker processes. An interrupt (Ctrl-C, SIGTERM) names them in its one line.

Each owner registers what it starts and unregisters it once stopped, in a ``finally``::

    with running(f"the delay proxy (pid {pid})"):
        ...
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["defer_interrupt", "describe", "forking", "now", "running", "started", "stopped"]

#: reentrant: the interrupt handler asks :func:`now` on the main thread, which may be inside
#: :func:`started` or :func:`stopped` at that instant (a plain Lock waited on itself forever)
_lock = threading.RLock()
_live: dict[int, str] = {}
_tokens = itertools.count()


def started(what: str) -> int:
    """Record that ``what`` runs now; the token for :func:`stopped`."""
    with _lock:
        token = next(_tokens)
        _live[token] = what
    return token


def stopped(token: int) -> None:
    with _lock:
        _live.pop(token, None)


@contextmanager
def running(what: str) -> Iterator[None]:
    token = started(what)
    try:
        yield
    finally:
        stopped(token)


def now() -> list[str]:
    """What runs at this moment, in the order it started."""
    with _lock:
        return [_live[k] for k in sorted(_live)]


def describe(things: list[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    if len(things) <= 1:
        return "".join(things)
    return f"{', '.join(things[:-1])} and {things[-1]}"


#: forks under way in this process, and what to do before raising an interrupt that
#: arrived meanwhile (None: none did)
_forking: dict[str, Any] = {"depth": 0, "pending": None}


@contextmanager
def forking() -> Iterator[None]:
    """Around a fork and the bookkeeping of what it started: an interrupt that arrives
    meanwhile is raised once it is done (:func:`defer_interrupt`). Python runs its fork
    hooks (logging's lock...) where an exception is only reported as "ignored": a
    KeyboardInterrupt raised there would be lost, and the run would go on to its end."""
    _forking["depth"] += 1
    try:
        yield
    finally:
        _forking["depth"] -= 1
        pending = _forking["pending"]
        if not _forking["depth"] and pending is not None:
            _forking["pending"] = None
            pending()
            raise KeyboardInterrupt


def defer_interrupt(before: Callable[[], object]) -> bool:
    """For a signal handler about to raise KeyboardInterrupt: True while this process forks
    (:func:`forking` calls ``before`` and raises it when done; a forked child inherits the
    state and replaces the handler), else False."""
    if _forking["depth"]:
        _forking["pending"] = before
        return True
    return False
