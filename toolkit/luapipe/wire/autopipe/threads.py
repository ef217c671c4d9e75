"""The thread flavour of the auto-pipeline: a sync client shared by many threads.

:class:`AutoPipeline` wraps a ``redis.Redis`` or ``redis.cluster.RedisCluster``; any number
of threads call through it at once. The scheduling is the asyncio flavour's
(:mod:`~luapipe.wire.autopipe.schedule`), run under one mutex; only the waiting differs:

- **who does the I/O**: no background thread. A caller whose call finds its node's link
  idle takes the link (:class:`~luapipe.wire.autopipe.threadlink.ThreadLink`), writes
  everything queued there as one write, reads the replies and hands them out; then it
  passes the link to the caller of the next queued call (who is waiting anyway), so no
  thread works for the others longer than one write, and none drives one node while its
  own call waits on another;
- **waiting**: each call has a lock its thread blocks on; the scheduler releases it with
  the call's outcome, a request to answer (``Refresh``, ``Sleep``...), or a link to drive.

Both are :mod:`~luapipe.wire.autopipe.threadwait` (:class:`AutoPipeline`'s base
:class:`~luapipe.wire.autopipe.threadwait.ThreadWaiting`). Here: the calls, the bound on the
calls in flight, making the links' connections, and closing.

Whether it pays under the GIL: see the README ("Auto-pipelining", threads).
"""

from __future__ import annotations

import contextlib
import threading
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import redis
import redis.cluster
import redis.exceptions as rex
from redis.commands.core import CoreCommands

from luapipe.errors import CallArgumentError, ConnectionFailed, translate
from luapipe.wire.autopipe.calls import NodeQueue, Recover
from luapipe.wire.autopipe.commands import (
    command_recover,
    finisher,
    one_command,
    route_for,
    sized_command,
)
from luapipe.wire.autopipe.outcomes import closed as _closed
from luapipe.wire.autopipe.packing import Packer
from luapipe.wire.autopipe.routers import KeyRouter, PlainRouter, Router, address
from luapipe.wire.autopipe.schedule import Scheduler
from luapipe.wire.autopipe.threadlink import ThreadLink
from luapipe.wire.autopipe.threadwait import ThreadWaiting, _ThreadCall
from luapipe.wire.drivers import _locate, drive
from luapipe.wire.limits import BulkLimits, might_exceed
from luapipe.wire.policy import DEFAULT, RetryPolicy
from luapipe.wire.replies import Command
from luapipe.wire.routing import Steps, command_slot_error
from luapipe.wire.values import check_values

__all__ = ["AutoPipeline"]


class _ClusterRouter(KeyRouter):
    def locate(self, slot: int | None, read_only: bool) -> str:
        return _locate(self.client, slot, read_only)

    def own_slot(self, args: Sequence[Any]) -> int | None:
        client: Any = self.client
        try:
            return int(client.determine_slot(*args))
        except rex.RedisClusterException as exc:
            return command_slot_error(args, exc)
        except rex.DataError as exc:
            raise translate(exc) from exc


class AutoPipeline(ThreadWaiting, CoreCommands):
    """The thread-safe auto-pipeline over a sync client: see :mod:`luapipe.wire.autopipe`.

    Every redis-py command method (``ap.get(k)``, ``ap.incr``...) goes through
    :meth:`execute_command`; ``reg.call(ap, ...)`` and ``op.run(ap, ...)`` take it as a
    client, from any number of threads."""

    luapipe_autopipeline = True
    luapipe_async = False
    _event_dispatcher: Any = None  # redis-py's command mixins declare it

    def __init__(
        self,
        client: redis.Redis | redis.cluster.RedisCluster,
        *,
        max_in_flight: int = 1024,
        max_batch: int | None = None,
        max_delay: float | None = None,
        policy: RetryPolicy = DEFAULT,
    ) -> None:
        if max_in_flight < 1:
            raise CallArgumentError(f"max_in_flight must be at least 1, got {max_in_flight}")
        self.client = client
        self.on_cluster = isinstance(client, redis.cluster.RedisCluster)
        self.policy = policy
        self.max_in_flight = max_in_flight
        self.max_delay = max_delay
        self._mutex = threading.Lock()
        self._local = threading.local()
        self._links: dict[str, ThreadLink] = {}
        self._active = 0
        self._waiting: deque[_ThreadCall] = deque()
        self._closed = False
        self._refresh_lock = threading.Lock()
        self._routes: dict[Any, str] = {}
        #: each node's proto-max-bulk-len, once a big value made it ask
        self.limits = BulkLimits()
        #: writes (round trips) so far, on all nodes, and the commands they carried
        self.writes = 0
        self.commands = 0
        if self.on_cluster:
            node = client.get_default_node()  # type: ignore[union-attr]
            pool = node.redis_connection.connection_pool
            router: Router = _ClusterRouter(client)
        else:
            pool = client.connection_pool  # type: ignore[union-attr]
            router = PlainRouter(address(pool.connection_kwargs))
        self._packer = Packer(pool.connection_class(**pool.connection_kwargs))
        self._sched = Scheduler(router, self._kick, self._packer.many, max_batch)
        self._sched.callbacks = (
            node.redis_connection.response_callbacks
            if self.on_cluster
            else client.response_callbacks  # type: ignore[union-attr]
        )

    # -- the calls -----------------------------------------------------------------------
    def call(
        self,
        args: tuple[Any, ...],
        *,
        slot: int | None = None,
        read_only: bool = False,
        finish: Callable[[Any], Any] | None = None,
        recover: Recover | None = None,
        hold: Any = None,
    ) -> Any:
        """One command for ``slot``'s node (see :meth:`AsyncAutoPipeline.call`)."""
        packed = self._packer.one(args)
        call = _ThreadCall()
        self._admit(call)
        try:
            with self._mutex:
                self._sched.submit(
                    call,
                    args,
                    packed,
                    slot=slot,
                    read_only=read_only,
                    finish=finish,
                    recover=recover,
                    hold=hold,
                )
            return self._wait(call)
        finally:
            self._leave()

    def run(self, steps: Steps[Any]) -> Any:
        """Run any steps (a form, a pipeline's plans): their Sends share the writes."""
        return self.run_counted(steps)[0]

    def run_counted(self, steps: Steps[Any]) -> tuple[Any, int]:
        """:meth:`run`, and the round trips this call's steps took."""
        call = _ThreadCall()
        self._admit(call)
        try:
            with self._mutex:
                self._sched.join(call)
                self._sched.start(call, steps)
            return self._wait(call), call.written
        finally:
            self._leave()

    def get_encoder(self) -> Any:
        """The client's encoder: redis-py's command methods ask for it (``acl_setuser``,
        ``register_script``)."""
        return self.client.get_encoder()

    def get_connection_kwargs(self) -> dict[str, Any]:
        """The client's connection settings: redis-py's ``slowlog_get`` reads them."""
        kwargs: dict[str, Any] = self.client.get_connection_kwargs()
        return kwargs

    def dedicated(self, steps: Steps[Any]) -> Any:
        """Run ``steps`` on connections of their own from the client's pool."""
        return drive(steps, self.client)

    def execute_command(self, *args: Any, **options: Any) -> Any:
        """A redis-py command through the auto-pipeline: what the client's method returns."""
        check_values(f"command {args[0]}", "args", args[1:])  # not at pack time, unnamed
        route = route_for(self._routes, self.client if self.on_cluster else None, args, options)
        slot = self._slot(args) if self.on_cluster else None
        if route == "dedicated":
            cmd = Command(tuple(args), options, parse=True)
            return self.dedicated(one_command(cmd, slot, self.policy))
        if might_exceed(args):  # a value of 1 MB or more: its size is checked first
            cmd = Command(tuple(args), options, parse=True)
            return self.run(sized_command(cmd, slot, self.policy, self.limits))
        finish = finisher(self._sched.callbacks, args, options)
        recover = command_recover(args, slot, self.policy, finish, options)
        return self.call(args, slot=slot, finish=finish, recover=recover)

    def _admit(self, call: _ThreadCall) -> None:
        """A place among the calls in flight, first come first served."""
        if self._closed:
            raise _closed()
        with self._mutex:
            if self._active < self.max_in_flight and not self._waiting:
                self._active += 1
                return
            self._waiting.append(call)
        try:
            call.lock.acquire()
        except BaseException:  # interrupted while it waited (Ctrl-C): a place it was
            with self._mutex:  # given goes on, or it leaves the line
                given = call not in self._waiting
                if not given:
                    self._waiting.remove(call)
            if given:
                self._leave()
            raise
        with self._mutex:
            call.signalled = False
            closed = self._closed
        if closed:  # closed while it waited: nothing was sent; its place goes on
            self._leave()
            raise _closed()

    def _leave(self) -> None:
        with self._mutex:
            self._active -= 1
            waiting = self._waiting
            while waiting and self._active < self.max_in_flight:
                self._active += 1
                waiting.popleft().signal()

    # -- links ---------------------------------------------------------------------------
    def _kick(self, q: NodeQueue) -> None:  # under the mutex
        link = self._links.get(q.node)
        if link is None:
            link = self._links[q.node] = ThreadLink(q, self._make_connection)
        if not link.owned:  # idle: the thread that queued takes it
            link.owned = True
            self._claimed().append(link)

    def _make_connection(self, node: str) -> Any:
        if not self.on_cluster:
            pool = self.client.connection_pool  # type: ignore[union-attr]
            return pool.connection_class(**pool.connection_kwargs)
        client: Any = self.client
        found = client.get_node(node_name=node)
        if found is None:
            with contextlib.suppress(rex.RedisError, OSError):
                client.nodes_manager.initialize()
            found = client.get_node(node_name=node)
        if found is None:
            raise ConnectionFailed(f"no node {node} in the cluster's slot map; nothing was sent")
        pool = found.redis_connection.connection_pool
        return pool.connection_class(**pool.connection_kwargs)

    # -- closing -------------------------------------------------------------------------
    def close(self) -> None:
        """Close the auto-pipeline's own connections (not the client's). Calls still
        queued, waiting for a place or between round trips get ConnectionFailed; a write in
        flight finishes first (its thread then closes that connection)."""
        with self._mutex:
            self._closed = True
            for link in self._links.values():
                if not link.owned:
                    self._shut(link)

    def __enter__(self) -> AutoPipeline:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
