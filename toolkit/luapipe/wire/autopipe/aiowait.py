"""How a caller's task waits in the asyncio auto-pipeline: its future, and the requests it answers.

Each call has a future (:class:`_AioCall`) the scheduler
(:mod:`~luapipe.wire.autopipe.schedule`) resolves with the call's outcome, or with a request
it hands back (``Refresh``, ``Sleep``, ``SlotsOf``: a :class:`_Slow`), which is answered in
the caller's own task, so a slot map re-read or a backoff never stalls the other callers; the
call's steps then go on. A cancelled caller's call leaves the queue if it was never written,
or its reply is read and dropped (:func:`_cancelled`).

:class:`AsyncWaiting` is that half of
:class:`~luapipe.wire.autopipe.aio.AsyncAutoPipeline` (its base class); the calls, the bound,
the links and closing are the other half.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import redis.asyncio
import redis.exceptions as rex
from redis.asyncio.cluster import RedisCluster

from luapipe.errors import LuapipeError, ServerError, translate
from luapipe.wire.autopipe.aiolink import copy_error
from luapipe.wire.autopipe.calls import Call
from luapipe.wire.autopipe.outcomes import holds_connections
from luapipe.wire.autopipe.schedule import Scheduler
from luapipe.wire.policy import CLUSTER_HINT
from luapipe.wire.replies import Redirect
from luapipe.wire.routing import Refresh, Release, Sleep, SlotsOf, command_slot_error

__all__ = ["AsyncWaiting"]


class _Slow:
    """A request handed back to the caller's task."""

    __slots__ = ("request",)

    def __init__(self, request: Any) -> None:
        self.request = request


class _AioCall(Call):
    __slots__ = ("fut",)

    def __init__(self, fut: asyncio.Future[Any]) -> None:  # Call's fields, set inline
        self.seq = 0
        self.steps = None
        self.args = None
        self.finish = None
        self.recover = None
        self.cancelled = False
        self.written = 0
        self.answers = None
        self.missing = 0
        self.fut = fut

    def resolve(self, value: Any) -> None:
        if not self.fut.done():
            self.fut.set_result(value)

    def fail(self, exc: BaseException) -> None:
        if not self.fut.done():
            self.fut.set_exception(exc)

    def slow(self, request: Any) -> None:
        if not self.fut.done():
            self.fut.set_result(_Slow(request))


def _cancelled(call: Call, exc: BaseException) -> None:
    """The caller gave up: the call leaves the queue if it was never written (it did not
    run); if it was, its reply is read and dropped. Nothing else is touched."""
    call.cancelled = True
    if call.written:
        exc.add_note(
            "luapipe: cancelled after the request was sent; the outcome is unknown "
            "and it was not re-sent"
        )


class AsyncWaiting:
    """The waiting half of :class:`~luapipe.wire.autopipe.aio.AsyncAutoPipeline`: what its
    callers' tasks do between joining and their outcome (see the module docstring)."""

    client: redis.asyncio.Redis | RedisCluster
    on_cluster: bool
    _loop: asyncio.AbstractEventLoop
    _refreshing: asyncio.Task[None] | None
    _sched: Scheduler

    # -- waiting -------------------------------------------------------------------------
    async def _wait(self, call: _AioCall, out: Any = None) -> Any:
        """The call's outcome; requests handed back meanwhile are answered here."""
        try:
            while True:
                if out is None:
                    out = await call.fut
                if out.__class__ is not _Slow:
                    return out
                call.fut = self._loop.create_future()
                try:
                    answer = await self._answer(out.request)
                except LuapipeError as exc:
                    self._sched.advance(call, exc, True)
                except BaseException:
                    self._sched.ungate(call)
                    raise
                else:
                    self._sched.advance(call, answer, False)
                out = None
        except asyncio.CancelledError as exc:
            _cancelled(call, exc)
            self._sched.ungate(call)
            raise

    async def _answer(self, request: Any) -> Any:
        kind = request.__class__
        if kind is Refresh:
            return await self._refresh(request)
        if kind is Sleep:
            return await asyncio.sleep(request.seconds)
        if kind is SlotsOf:
            return [await self._slot(tuple(a)) for a in request.commands]
        if kind is Release:
            raise holds_connections()
        raise TypeError(f"not a request: {request!r}")

    async def _refresh(self, request: Refresh) -> None:
        cause = request.cause
        if not self.on_cluster:  # no slot map to re-read: the cause stands
            if isinstance(cause, Redirect):
                raise ServerError(f"{cause}: this server is a cluster node; {CLUSTER_HINT}")
            raise copy_error(cause)
        if isinstance(cause, Redirect) and cause.ask is not None:
            return
        await asyncio.sleep(request.delay)
        task = self._refreshing
        if task is None or task.done():
            task = self._refreshing = self._loop.create_task(self._reinitialize())
        await asyncio.shield(task)

    async def _reinitialize(self) -> None:
        with contextlib.suppress(rex.RedisError, OSError):
            await self.client.nodes_manager.initialize()  # type: ignore[union-attr]

    async def _slot(self, args: tuple[Any, ...]) -> int | None:
        """The slot of a command's keys, asking the server if it must (``COMMAND GETKEYS``:
        nothing of the call is sent, so a failure is a ConnectionFailed)."""
        try:
            return int(await self.client._determine_slot(*args))  # type: ignore[union-attr]
        except rex.RedisClusterException as exc:
            return command_slot_error(args, exc)
        except (rex.RedisError, OSError) as exc:
            raise translate(exc, sent=False) from exc
