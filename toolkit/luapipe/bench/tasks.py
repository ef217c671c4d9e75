"""Many requests in flight from one client process: ``--tasks N`` asyncio tasks, closed loop.

With ``--tasks N`` every client process runs N tasks on one ``redis.asyncio`` client, each
calling its form back to back (a connection of the client's pool per call in flight). The
forms also run **auto-pipelined**: ``auto naive``, ``auto pipelined``, ``auto script`` and
``auto function`` make the same calls through ``luapipe.autopipeline(client)``, so the N
tasks share round trips (``auto pipelined`` issues an operation's commands at once, one
write, not atomic; ``auto script`` is the registry's call, EVAL). With 64 tasks the report
answers "scripts or auto-pipelined commands, and at what latency cost?".

Round trips and commands are counted on the client side as in the sync loop (a counting
asyncio connection; the auto-pipeline's own count of its writes), so ``rt/op`` of an
auto-pipelined form is below one when calls share writes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import redis.asyncio
import redis.asyncio.cluster
from redis.asyncio.connection import Connection
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from luapipe.bench.stats import LatencyHistogram
from luapipe.errors import LuapipeError, mask_url

__all__ = [
    "AUTO",
    "AUTO_FORMS",
    "AsyncOpFn",
    "auto_forms",
    "run_tasks",
    "split_form",
]

#: an async callable ``f(i) -> retries`` doing one call of a form
AsyncOpFn = Callable[[int], Awaitable[int]]
AUTO = "auto "
#: the forms that have an auto-pipelined variant (a transaction holds a connection)
AUTO_FORMS = ("naive", "pipelined", "script", "function")
MAX_ERROR_SAMPLES = 3

_COUNTS = {"writes": 0, "commands": 0}  # this worker process's counting connections


def auto_forms(forms: Sequence[str]) -> tuple[str, ...]:
    """``forms`` and their auto-pipelined variants."""
    return (*forms, *(AUTO + f for f in forms if f in AUTO_FORMS))


def split_form(form: str) -> tuple[str, bool]:
    """``(base form, auto-pipelined?)``."""
    if form.startswith(AUTO):
        return form[len(AUTO) :], True
    return form, False


class _CountingWriter:
    """A stream writer that counts the writes made through it."""

    def __init__(self, writer: Any) -> None:
        self._w = writer

    def write(self, data: Any) -> None:
        _COUNTS["writes"] += 1
        self._w.write(data)

    def writelines(self, data: Any) -> None:
        _COUNTS["writes"] += 1
        self._w.writelines(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._w, name)


class CountingAsyncConnection(Connection):
    """A ``redis.asyncio`` connection counting writes and packed commands."""

    async def _connect(self) -> None:
        await super()._connect()  # type: ignore[no-untyped-call]
        self._writer = _CountingWriter(self._writer)  # type: ignore[assignment]

    def pack_command(self, *args: Any) -> list[bytes]:
        # redis.asyncio's pack_commands packs each command of a pipeline through this one
        _COUNTS["commands"] += 1
        return super().pack_command(*args)


def _client(url: str, cluster: bool, tasks: int) -> Any:
    no_retry = Retry(NoBackoff(), 0)
    if cluster:
        return redis.asyncio.cluster.RedisCluster.from_url(
            url, socket_timeout=30, retry=no_retry, connection_class=CountingAsyncConnection
        )
    pool = redis.asyncio.ConnectionPool.from_url(
        url,
        connection_class=CountingAsyncConnection,
        socket_timeout=30,
        retry=no_retry,
        max_connections=tasks + 8,
    )
    return redis.asyncio.Redis(connection_pool=pool, retry=no_retry)


async def _run(workload: Any, plan: Any, runqueue_wait_s: Callable[[], float]) -> dict[str, Any]:
    from luapipe.wire.autopipe import autopipeline

    base, auto = split_form(plan.form)
    client = _client(plan.url, plan.cluster, plan.tasks)
    ap = autopipeline(client) if auto else None
    target = ap if ap is not None else client
    make = getattr(workload, "op_fn_async", None)
    if make is None:
        raise LuapipeError(f"{workload.name} has no asyncio calls: run it with --tasks 1")
    ops = [make(target, base, plan.worker * plan.tasks + t, plan.seed) for t in range(plan.tasks)]
    hist = LatencyHistogram()
    stats = {"calls": 0, "errors": 0, "retries": 0}
    samples: list[str] = []
    clock = time.perf_counter
    # before the window: a connection per task in flight (PING: nothing is written)
    await asyncio.gather(*(target.ping() for _ in ops), return_exceptions=True)
    delay = plan.t_start - clock()
    if delay > 0:
        await asyncio.sleep(delay)
    wrote0 = [getattr(op, "wrote", None) for op in ops]
    w0 = dict(_COUNTS)
    a0 = (ap.writes, ap.commands) if ap is not None else (0, 0)
    cpu0, wait0 = time.process_time(), runqueue_wait_s()
    t0 = clock()
    last = [t0]

    async def one(op: AsyncOpFn) -> None:
        i = 0
        while True:
            start = clock()
            if start >= plan.t_end:
                return
            try:
                stats["retries"] += await op(i)
            except (redis.RedisError, LuapipeError, OSError) as exc:
                stats["errors"] += 1
                if len(samples) < MAX_ERROR_SAMPLES:
                    samples.append(mask_url(f"{type(exc).__name__}: {exc}")[:200])
            else:
                end = clock()
                stats["calls"] += 1
                hist.record_seconds(end - start)
                last[0] = max(last[0], end)
            i += 1

    try:
        await asyncio.gather(*(one(op) for op in ops))
    finally:
        cpu = time.process_time() - cpu0
        if ap is not None:
            round_trips, commands = ap.writes - a0[0], ap.commands - a0[1]
            await ap.aclose()
        else:
            round_trips = _COUNTS["writes"] - w0["writes"]
            commands = _COUNTS["commands"] - w0["commands"]
        await client.aclose()
    wrote: int | None = 0
    for op, before in zip(ops, wrote0, strict=True):
        after = getattr(op, "wrote", None)
        if wrote is None or after is None or before is None:
            wrote = None
        else:
            wrote += int(after) - int(before)
    return dict(
        hist=hist.encode(),
        hist_uncorrected=b"",
        calls=stats["calls"],
        errors=stats["errors"],
        error_samples=tuple(samples),
        retries=stats["retries"],
        round_trips=round_trips,
        commands=commands,
        cpu_s=cpu,
        elapsed_s=max(max(last[0], plan.t_end) - t0, 1e-9),
        wrote=wrote,
        wait_s=max(0.0, runqueue_wait_s() - wait0),
    )


def run_tasks(workload: Any, plan: Any, runqueue_wait_s: Callable[[], float]) -> dict[str, Any]:
    """One client process's ``plan.tasks`` tasks (see the module docstring): the fields of
    the :class:`~luapipe.bench.loop.WorkerResult` the sync loop gives."""
    return asyncio.run(_run(workload, plan, runqueue_wait_s))
