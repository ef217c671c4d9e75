"""The retry policy: one frozen value, passed down (like urllib3's ``Retry``).

Nothing that may have run is ever re-sent: :func:`did_not_run` is the one predicate that
says a request is safe to send again, from typed facts only (a :class:`Redirect` reply, a
:class:`~luapipe.errors.ConnectionFailed` raised before anything was written), never from
an error's message. :class:`~luapipe.errors.OutcomeUnknown` is never "did not run".
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from luapipe.errors import ConnectionFailed, OutcomeUnknown, ServerError
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
    """

    redirects: int = 8
    watch_retries: int = 20
    refresh_base: float = 0.05
    refresh_cap: float = 1.0
    watch_base: float = 0.0005
    watch_cap: float = 0.05

    def refresh_delay(self, attempt: int) -> float:
        """Seconds to wait before re-reading the slot map after attempt ``attempt`` (0-based):
        a failover takes a moment."""
        return float(min(self.refresh_base * 2**attempt, self.refresh_cap))

    def watch_delay(self, attempt: int) -> float:
        """Seconds to wait after WATCH aborted attempt ``attempt`` (0-based): jittered, capped."""
        return random.uniform(0, min(self.watch_cap, self.watch_base * 2**attempt))

    def with_max_retries(self, max_retries: int | None) -> RetryPolicy:
        """This policy with ``watch_retries=max_retries`` (unchanged for None)."""
        if max_retries is None or max_retries == self.watch_retries:
            return self
        return RetryPolicy(
            self.redirects,
            max_retries,
            self.refresh_base,
            self.refresh_cap,
            self.watch_base,
            self.watch_cap,
        )


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
