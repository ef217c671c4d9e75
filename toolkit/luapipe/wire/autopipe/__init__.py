"""Auto-pipelining: concurrent calls from many tasks (or threads) share round trips.

::

    ap = luapipe.autopipeline(aclient)            # redis.asyncio Redis or RedisCluster
    await asyncio.gather(*(reg.call(ap, "rate_limit", keys=[k], args=[10, 60]) for k in ks))
    await ap.incr("hits"); await op.run(ap, "script", keys=..., args=...)

A scheduler (:mod:`~luapipe.wire.autopipe.schedule`) runs many callers' steps side by side,
as :func:`~luapipe.wire.routing.gather` runs a pipeline's per-node plans: every ``Send``
joins its node's queue, and each node's one connection writes the whole queue as one write
whenever it is idle (one write in flight per node; no timer), then resumes each caller with
its own reply or error. The asyncio flavour (:mod:`~luapipe.wire.autopipe.aio`, its links in
:mod:`~luapipe.wire.autopipe.aiolink`) waits on futures; the thread flavour
(:mod:`~luapipe.wire.autopipe.threads` and :mod:`~luapipe.wire.autopipe.threadlink`, for a
sync ``redis.Redis``/``RedisCluster``) on locks, with the caller whose call finds its node
idle doing that node's I/O. Only the waiting differs (:mod:`~luapipe.wire.autopipe.aiowait`,
:mod:`~luapipe.wire.autopipe.threadwait`).

Written once for both flavours, free of I/O: the scheduler and what it keeps
(:mod:`~luapipe.wire.autopipe.calls`); where calls go (:mod:`~luapipe.wire.autopipe.routers`,
with the key specs of :mod:`~luapipe.wire.autopipe.keyspecs`); which commands share a
connection and how replies become what redis-py's methods return
(:mod:`~luapipe.wire.autopipe.commands`); how calls become bytes
(:mod:`~luapipe.wire.autopipe.packing`) and bytes replies
(:mod:`~luapipe.wire.autopipe.reading`); what a caller gets when the auto-pipeline, not the
server, ends its call (:mod:`~luapipe.wire.autopipe.outcomes`).

Every guarantee of ``reg.call`` holds per caller:

- never applied twice; applied exactly once unless the caller got
  :class:`~luapipe.errors.OutcomeUnknown` (a write that may have reached the server and
  whose connection was lost is never re-sent);
- a write that provably never left (the socket refused it, or the connection was found
  closed before writing) is sent again on a new connection, and its callers see
  :class:`~luapipe.errors.ConnectionFailed` only if that fails too; a failed connect fails
  only the calls it was made for, and those that joined meanwhile get an attempt of their
  own (one per wave of callers, not per call);
- calls apply in the order they joined (their coroutine started): a call's later round
  trips keep its place. Scripts called through the registry travel as ``EVAL``, which a
  flushed cache cannot refuse, so a lost script cache never lets a later call overtake;
  steps that send ``EVALSHA``/``FCALL`` and heal a cache loss get a write boundary after
  them (see the scheduler's "hold"), so their re-send still goes first;
- one caller's cancellation, timeout or error leaves the others and the connection alone;
- work in flight is bounded (``max_in_flight`` calls, default 1024): further calls *wait*
  for a place, first come first served, rather than fail. Waiting keeps their order and
  sends nothing they could not take back; a caller that must not wait bounds its own wait
  with a timeout, which then cancels a call that provably did not run;
- on a cluster, each entry goes to its slot's node and a MOVED/ASK is handled per entry;
- what needs a connection of its own (WATCH/MULTI, the transaction form, blocking commands)
  runs on one from the client's pool, and what would change the shared connection
  (``SELECT``, ``CLIENT ...``, ``SUBSCRIBE``, ``AUTH``...) is refused with one error.

Knobs, off by default: ``max_batch`` (entries per write) and ``max_delay`` (seconds a write
waits for more callers, only when several already wait).
"""

from __future__ import annotations

from typing import Any

from luapipe.wire.autopipe.aio import AsyncAutoPipeline
from luapipe.wire.autopipe.threads import AutoPipeline
from luapipe.wire.clients import is_async_client
from luapipe.wire.policy import DEFAULT, RetryPolicy

__all__ = ["AsyncAutoPipeline", "AutoPipeline", "autopipeline", "is_autopipeline"]


def autopipeline(
    client: Any,
    *,
    max_in_flight: int = 1024,
    max_batch: int | None = None,
    max_delay: float | None = None,
    policy: RetryPolicy = DEFAULT,
) -> Any:
    """An auto-pipeline over ``client``: :class:`AsyncAutoPipeline` for a ``redis.asyncio``
    client, the thread-safe :class:`AutoPipeline` for a sync one (plain or cluster)."""
    if is_autopipeline(client):
        return client
    if is_async_client(client):
        return AsyncAutoPipeline(
            client,
            max_in_flight=max_in_flight,
            max_batch=max_batch,
            max_delay=max_delay,
            policy=policy,
        )
    return AutoPipeline(
        client,
        max_in_flight=max_in_flight,
        max_batch=max_batch,
        max_delay=max_delay,
        policy=policy,
    )


def is_autopipeline(client: object) -> bool:
    return bool(getattr(type(client), "luapipe_autopipeline", False))
