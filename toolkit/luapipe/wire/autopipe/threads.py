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

Whether it pays under the GIL: see the README ("Auto-pipelining", threads).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import redis
import redis.cluster
import redis.exceptions as rex
from redis.commands.core import CoreCommands

from luapipe.errors import (
    CallArgumentError,
    ConnectionFailed,
    LuapipeError,
    OutcomeUnknown,
    ServerError,
    translate,
)
from luapipe.wire.autopipe.calls import Call, NodeQueue, Recover
from luapipe.wire.autopipe.commands import (
    command_recover,
    finisher,
    one_command,
    route_for,
    sized_command,
)
from luapipe.wire.autopipe.keyspecs import LOOKUP
from luapipe.wire.autopipe.outcomes import closed as _closed
from luapipe.wire.autopipe.outcomes import holds_connections
from luapipe.wire.autopipe.packing import Packer
from luapipe.wire.autopipe.routers import KeyRouter, PlainRouter, Router, address
from luapipe.wire.autopipe.schedule import Scheduler
from luapipe.wire.autopipe.threadlink import ThreadLink, lost_error
from luapipe.wire.drivers import _locate, drive
from luapipe.wire.limits import BulkLimits, might_exceed
from luapipe.wire.policy import CLUSTER_HINT, DEFAULT, RetryPolicy
from luapipe.wire.replies import Command, Redirect
from luapipe.wire.routing import (
    Refresh,
    Release,
    Sleep,
    SlotsOf,
    Steps,
    command_slot_error,
)
from luapipe.wire.values import check_values

__all__ = ["AutoPipeline"]

_NONE, _DONE, _FAILED, _SLOW = range(4)


class _ThreadCall(Call):
    __slots__ = ("kind", "leads", "lock", "outcome", "signalled")

    def __init__(self) -> None:
        Call.__init__(self)
        self.lock = threading.Lock()
        self.lock.acquire()
        self.signalled = False
        self.kind = _NONE
        self.outcome: Any = None
        #: links handed to this call's thread to drive
        self.leads: list[ThreadLink] = []

    def signal(self) -> None:  # under the mutex
        if not self.signalled:
            self.signalled = True
            self.lock.release()

    def resolve(self, value: Any) -> None:
        self.kind, self.outcome = _DONE, value
        self.signal()

    def fail(self, exc: BaseException) -> None:
        self.kind, self.outcome = _FAILED, exc
        self.signal()

    def slow(self, request: Any) -> None:
        self.kind, self.outcome = _SLOW, request
        self.signal()


def _interrupted(node: str, stop: BaseException) -> Callable[[], LuapipeError]:
    def make() -> LuapipeError:
        return OutcomeUnknown(
            f"the thread writing to {node} was interrupted ({stop!r}); outcome unknown, "
            "it was not re-sent"
        )

    return make


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


class AutoPipeline(CoreCommands):
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

    # -- waiting -------------------------------------------------------------------------
    def _claimed(self) -> list[ThreadLink]:
        found: list[ThreadLink] | None = getattr(self._local, "claimed", None)
        if found is None:
            found = self._local.claimed = []
        return found

    def _wait(self, call: _ThreadCall) -> Any:
        try:
            return self._wait_for(call)
        except BaseException:  # its own error; or the thread is interrupted (Ctrl-C)
            self._abandon(call)
            raise

    def _abandon(self, call: _ThreadCall) -> None:
        """The caller's thread leaves: its call is dropped from the queues if unwritten
        (its reply is read and dropped if written), and the links this thread was to drive
        go to the next callers; the other threads would otherwise wait on them forever."""
        claimed = self._claimed()
        with self._mutex:
            call.cancelled = True
            self._sched.ungate(call)  # if it was asking where its keys are
            links, call.leads = [*claimed, *call.leads], []
            claimed.clear()
            for link in links:
                self._hand_on(link)

    def _hand_on(self, link: ThreadLink) -> None:  # under the mutex, by the link's owner
        nxt = next((e.call for e in link.q.entries if not e.call.cancelled), None)
        if nxt is None or not isinstance(nxt, _ThreadCall):
            link.owned = False
            return
        nxt.leads.append(link)
        nxt.signal()

    def _wait_for(self, call: _ThreadCall) -> Any:
        claimed = self._claimed()
        while True:
            while claimed:
                self._drive(claimed.pop(0), call)
            call.lock.acquire()
            with self._mutex:
                call.signalled = False
                kind, outcome = call.kind, call.outcome
                call.kind, call.outcome = _NONE, None
                leads, call.leads = call.leads, []
            claimed.extend(leads)
            if kind == _NONE:
                continue
            while claimed:
                self._drive(claimed.pop(0), call)
            if kind == _DONE:
                return outcome
            if kind == _FAILED:
                raise outcome
            try:
                answer, throw = self._answer(outcome), False
            except LuapipeError as exc:
                answer, throw = exc, True
            with self._mutex:
                self._sched.advance(call, answer, throw)

    def _answer(self, request: Any) -> Any:
        kind = request.__class__
        if kind is Refresh:
            return self._refresh(request)
        if kind is Sleep:
            return time.sleep(request.seconds)
        if kind is SlotsOf:
            return [self._slot(tuple(a)) for a in request.commands]
        if kind is Release:
            raise holds_connections()
        raise TypeError(f"not a request: {request!r}")

    def _refresh(self, request: Refresh) -> None:
        cause = request.cause
        if not self.on_cluster:
            if isinstance(cause, Redirect):
                raise ServerError(f"{cause}: this server is a cluster node; {CLUSTER_HINT}")
            raise cause
        if isinstance(cause, Redirect) and cause.ask is not None:
            return
        time.sleep(request.delay)
        if self._refresh_lock.acquire(blocking=False):  # one re-read at a time; the
            try:  # others wait for it and use its map
                with contextlib.suppress(rex.RedisError, OSError):
                    self.client.nodes_manager.initialize()  # type: ignore[union-attr]
            finally:
                self._refresh_lock.release()
        else:
            with self._refresh_lock:
                pass

    def _slot(self, args: tuple[Any, ...]) -> int | None:
        """The slot of a command's keys, asking the server if it must (``COMMAND GETKEYS``,
        in the caller's thread before its call joins: a thread's calls keep their order,
        as it makes the next one only after this one; nothing of the call is sent, so a
        failure is a ConnectionFailed)."""
        slot = self._sched.router.slot(args)  # type: ignore[attr-defined]
        if slot is not LOOKUP:
            return slot  # type: ignore[no-any-return]
        try:
            client: Any = self.client
            return int(client.determine_slot(*args))
        except rex.RedisClusterException as exc:
            return command_slot_error(args, exc)
        except (rex.RedisError, OSError) as exc:
            raise translate(exc, sent=False) from exc

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

    def _drive(self, link: ThreadLink, me: _ThreadCall) -> None:
        """Write what ``link`` has queued and hand out the replies; then pass the link to
        the caller of the next queued entry (this thread again only for its own call), so
        no thread works for the others longer than one write, and none waits on a link
        while it drives another."""
        sched = self._sched
        while True:
            if self.max_delay is not None and len(link.q) > 1:
                time.sleep(self.max_delay)  # several callers wait: let more join
            with self._mutex:
                if self._closed:
                    self._shut(link)
                    return
                entries = sched.take(link.q)
                if not entries:
                    link.owned = False
                    return
            try:
                replies, failed, unwritten, exc, sent = link.io(entries)
            except BaseException as stop:  # the thread is interrupted mid-write (Ctrl-C)
                with self._mutex:
                    if link.conn is not None:  # out of step with its replies
                        with contextlib.suppress(Exception):
                            link.conn.disconnect()
                        link.conn = None
                    self._sched.lost(entries, _interrupted(link.node, stop))
                    self._hand_on(link)
                raise
            with self._mutex:
                if sent:
                    self.writes += 1
                    self.commands += sum(e.nwire for e in entries[:sent])
                for entry, got in zip(entries, replies, strict=False):  # those answered
                    if entry.nwire == 1 and entry.keep is None:
                        sched.answered_one(entry, got[0])
                    else:
                        keep = entry.keep
                        sched.answered(entry, got if keep is None else [got[i] for i in keep])
                if failed:
                    sched.lost(failed, lost_error(link.node, exc, sent=True))
                if unwritten:
                    if link.refused:  # a new connection failed, or refused it too
                        link.refused = 0
                        sched.lost(unwritten, lost_error(link.node, exc, sent=False))
                    else:
                        link.refused += 1
                        sched.unwritten(link.q, unwritten)
                else:
                    link.refused = 0
                if self._closed:
                    self._shut(link)
                    return
                nxt = next((e.call for e in link.q.entries if not e.call.cancelled), None)
                if nxt is None:
                    link.q.entries.clear()
                    link.owned = False
                    return
                if nxt is not me and isinstance(nxt, _ThreadCall):
                    nxt.leads.append(link)  # the link stays owned: by that caller now
                    nxt.signal()
                    return

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

    def _shut(self, link: ThreadLink) -> None:  # under the mutex, by the link's owner
        """After :meth:`close`: the link's queued calls fail (nothing was sent), its
        connection is closed and nobody owns it."""
        queued = [e for e in link.q.entries if not e.call.cancelled]
        link.q.entries.clear()
        link.owned = False
        if link.conn is not None:
            with contextlib.suppress(Exception):
                link.conn.disconnect()
            link.conn = None
        self._sched.lost(queued, _closed)

    def __enter__(self) -> AutoPipeline:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
