"""What a benchmark has started and not yet stopped: the private redis-server, the delay
proxy, the worker processes. An interrupt (Ctrl-C, SIGTERM) names them in its one line.

Each owner registers what it starts and unregisters it once stopped, in a ``finally``::

    with running(f"the delay proxy (pid {pid})"):
        ...
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["describe", "now", "running", "started", "stopped"]

_lock = threading.Lock()
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
