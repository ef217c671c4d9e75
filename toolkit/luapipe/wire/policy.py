"""The retry policy: one frozen value, passed down (like urllib3's ``Retry``).

Nothing that may have run is ever re-sent: :func:`did_not_run` is the one predicate that
says a request is safe to send again, from typed facts only (a :class:`Redirect` reply, a
:class:`~luapipe.errors.ConnectionFailed` raised before anything was written), never from
an error's message. :class:`~luapipe.errors.OutcomeUnknown` is never "did not run".
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, replace
from typing import Any

from luapipe.errors import CallArgumentError, ConnectionFailed, OutcomeUnknown, ServerError
from luapipe.wire.replies import Redirect, ReplyError

__all__ = ["DEFAULT", "CLUSTER_HINT", "RetryPolicy", "did_not_run", "policy_of"]

CLUSTER_HINT = "use a cluster client (redis.cluster.RedisCluster; the CLI detects clusters)"


@dataclass(frozen=True)
class RetryPolicy:
    """How often, and after how long, a request that provably did not run is sent again.

    - ``redirects``: attempts for one request across MOVED/ASK/TRYAGAIN/CLUSTERDOWN replies
      and connections refused before sending (a failover);
    - ``watch_retries``: WATCH attempts after the first for the transaction form;
    - ``refresh_base``/``refresh_cap``: the wait before re-reading the slot map (doubling);
    - ``watch_base``/``watch_cap``: the jittered wait after WATCH aborted an attempt.

    Every field is checked when the policy is made (a :class:`CallArgumentError`, also a
    ValueError): whole counts (``redirects`` >= 1, ``watch_retries`` >= 0) and finite waits
    >= 0; the waits stay bounded by their caps at any attempt number.
    """

    redirects: int = 8
    watch_retries: int = 20
    refresh_base: float = 0.05
    refresh_cap: float = 1.0
    watch_base: float = 0.0005
    watch_cap: float = 0.05

    def __post_init__(self) -> None:
        _count("redirects", self.redirects, 1)
        _count("watch_retries", self.watch_retries, 0, alias="max_retries")
        for name in ("refresh_base", "refresh_cap", "watch_base", "watch_cap"):
            value = getattr(self, name)
            ok = isinstance(value, int | float) and not isinstance(value, bool)
            if not (ok and math.isfinite(value) and value >= 0):
                raise CallArgumentError(
                    f"RetryPolicy: {name} must be a finite number of seconds >= 0, got {value!r}"
                )

    def refresh_delay(self, attempt: int) -> float:
        """Seconds to wait before re-reading the slot map after attempt ``attempt`` (0-based):
        a failover takes a moment."""
        return _backoff(self.refresh_base, self.refresh_cap, attempt)

    def watch_delay(self, attempt: int) -> float:
        """Seconds to wait after WATCH aborted attempt ``attempt`` (0-based): jittered, capped."""
        return random.uniform(0, _backoff(self.watch_base, self.watch_cap, attempt))

    def with_max_retries(self, max_retries: int | None) -> RetryPolicy:
        """This policy with ``watch_retries=max_retries`` (unchanged for None)."""
        if max_retries is None:
            return self
        _count("max_retries", max_retries, 0)
        if max_retries == self.watch_retries:
            return self
        return replace(self, watch_retries=max_retries)


def _count(name: str, value: object, minimum: int, alias: str = "") -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        also = f" ({alias})" if alias else ""
        raise CallArgumentError(f"{name}{also} must be a whole number >= {minimum}, got {value!r}")


#: 2**64 times any positive base is past every cap in seconds: no need to go further
_MAX_DOUBLINGS = 64


def _backoff(base: float, cap: float, attempt: int) -> float:
    """``min(base * 2**attempt, cap)`` for any attempt (a huge one gives the cap instead of
    an OverflowError; a negative one counts as 0)."""
    doublings = min(max(int(attempt), 0), _MAX_DOUBLINGS)
    return float(min(base * float(2**doublings), cap))


DEFAULT = RetryPolicy()


def policy_of(max_retries: int | None = None, policy: RetryPolicy | None = None) -> RetryPolicy:
    """The policy a public ``max_retries=`` keyword (and an optional base policy) builds."""
    return (policy or DEFAULT).with_max_retries(max_retries)


def did_not_run(outcome: Any) -> Redirect | ConnectionFailed | None:
    """The proof that a request did not run, or None.

    ``outcome`` is what came back: a reply (a :class:`Redirect` or an error reply that is
    one), or an exception (a :class:`~luapipe.errors.ServerError` raised for a redirect
    reply carries it as ``.redirect``). A :class:`ConnectionFailed` proves it (nothing was
    written); :class:`OutcomeUnknown` and everything else do not.
    """
    if isinstance(outcome, Redirect):
        return outcome
    if outcome.__class__ is ReplyError:
        return Redirect.of(outcome)
    if isinstance(outcome, ServerError):
        redirect = outcome.redirect
        return redirect if isinstance(redirect, Redirect) else None
    if isinstance(outcome, ConnectionFailed) and not isinstance(outcome, OutcomeUnknown):
        return outcome
    return None
