"""The harness's own commands survive faults: restarts, killed connections, BUSY, flushes.

What the harness sends between timed slices (reset the keyspace, read ``INFO``, load
scripts, check invariants, probe the wire) is idempotent, so on a transient failure it is
retried with backoff for a while; each retry is recorded as a harness event, which the
results report. A failure that outlasts the patience is raised: the server is gone.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import redis

from luapipe.errors import BusyError, ConnectionFailed, OutcomeUnknown, mask_url

__all__ = ["PATIENCE_S", "Events", "patiently", "transient"]

PATIENCE_S = 20.0
T = TypeVar("T")
_PIPELINE_PREFIX = " of pipeline caused error: "
_TRANSIENT_REPLIES = ("BUSY", "LOADING", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN", "NOSCRIPT")


def transient(exc: BaseException) -> bool:
    """A failure that goes away by itself: the server restarting or busy, a killed
    connection, a flushed script cache."""
    if isinstance(exc, redis.ConnectionError | redis.TimeoutError | OSError):
        return True
    if isinstance(exc, ConnectionFailed | OutcomeUnknown | BusyError):
        return True
    text = str(exc).lstrip()
    # redis-py's pipeline names the command first: "Command # 1 (UNLINK k) of pipeline
    # caused error: BUSY Redis is busy running a script..."
    text = text.rpartition(_PIPELINE_PREFIX)[2] or text
    return text.startswith(_TRANSIENT_REPLIES) or (
        isinstance(exc, redis.ResponseError) and "BUSY" in text[:40]
    )


@dataclass
class Events:
    """Harness events (retried failures), counted by what was being done."""

    counts: dict[str, int] = field(default_factory=dict)
    samples: dict[str, str] = field(default_factory=dict)

    def add(self, what: str, exc: BaseException) -> None:
        self.counts[what] = self.counts.get(what, 0) + 1
        self.samples.setdefault(what, mask_url(f"{type(exc).__name__}: {exc}")[:200])

    def as_list(self) -> list[dict[str, object]]:
        return [
            {"operation": "harness", "form": what, "errors": n, "samples": [self.samples[what]]}
            for what, n in self.counts.items()
        ]


def patiently(
    fn: Callable[[], T], what: str, events: Events | None = None, patience_s: float = PATIENCE_S
) -> T:
    """``fn()``, retried on transient failures for up to ``patience_s`` seconds."""
    start = time.monotonic()
    attempt = 0
    while True:
        try:
            return fn()
        except Exception as exc:
            if not transient(exc) or time.monotonic() - start > patience_s:
                raise
            if events is not None:
                events.add(what, exc)
            time.sleep(min(0.02 * 2**attempt, 0.5))
            attempt += 1
