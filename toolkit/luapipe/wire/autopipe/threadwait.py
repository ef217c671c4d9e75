"""How a caller's thread waits in the thread auto-pipeline, and drives the links handed to it.

Each call has a lock its thread blocks on (:class:`_ThreadCall`); the scheduler
(:mod:`~luapipe.wire.autopipe.schedule`) releases it with the call's outcome, a request to
answer (``Refresh``, ``Sleep``, ``SlotsOf``: answered here, in the caller's own thread, so a
slot map re-read or a backoff never stalls the others), or a link to drive. No background
thread does the I/O: a caller whose call finds its node's link idle takes the link
(:class:`~luapipe.wire.autopipe.threadlink.ThreadLink`), writes everything queued there as
one write, reads the replies and hands them out; then it passes the link to the caller of
the next queued call (who is waiting anyway), so no thread works for the others longer than
one write, and none drives one node while its own call waits on another. A thread that
leaves (its error, Ctrl-C) hands its links on, so nobody waits on them forever.

:class:`ThreadWaiting` is that half of :class:`~luapipe.wire.autopipe.threads.AutoPipeline`
(its base class); the calls, the bound and closing are the other half.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

import redis
import redis.cluster
import redis.exceptions as rex

from luapipe.errors import LuapipeError, OutcomeUnknown, ServerError, translate
from luapipe.wire.autopipe.calls import Call
from luapipe.wire.autopipe.keyspecs import LOOKUP
from luapipe.wire.autopipe.outcomes import closed as _closed
from luapipe.wire.autopipe.outcomes import holds_connections
from luapipe.wire.autopipe.schedule import Scheduler
from luapipe.wire.autopipe.threadlink import ThreadLink, lost_error
from luapipe.wire.policy import CLUSTER_HINT
from luapipe.wire.replies import Redirect
from luapipe.wire.routing import Refresh, Release, Sleep, SlotsOf, command_slot_error

__all__ = ["ThreadWaiting"]

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


class ThreadWaiting:
    """The waiting half of :class:`~luapipe.wire.autopipe.threads.AutoPipeline`: what its
    callers' threads do between joining and their outcome (see the module docstring)."""

    client: redis.Redis | redis.cluster.RedisCluster
    on_cluster: bool
    max_delay: float | None
    writes: int
    commands: int
    _closed: bool
    _mutex: threading.Lock
    _local: threading.local
    _refresh_lock: threading.Lock
    _sched: Scheduler

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

    # -- links ---------------------------------------------------------------------------
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
