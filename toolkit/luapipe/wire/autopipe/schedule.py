"""The auto-pipeline's scheduling, free of I/O: one copy for the asyncio and thread flavours.

Many callers' calls run side by side. A call is either one command (the fast path: its
reply, if it is a value, is the caller's result) or :data:`~luapipe.wire.routing.Steps`
(a reply that is not a value turns the fast path into steps too: ``recover``). The
scheduler advances each call's steps, answers the requests it can answer at once (where a
slot lives, the nodes), queues every :class:`~luapipe.wire.routing.Send` on its node, and
hands the rest (``Refresh``, ``Sleep``, ``SlotsOf``) back to the caller's own waiting code,
which answers it and resumes the steps here. The flavours only move bytes and wait.

The rules every write follows, whatever the flavour:

- **Order.** Each call takes a sequence number when it joins (when its coroutine starts, or
  when its thread calls); a node's queue is kept in that order, and a call's later round
  trips (a re-send after a cache loss, the next step of a form) keep the call's number, so
  they go out before anything issued after the call. One write per node is in flight at a
  time, so nothing issued later can be written while a call's re-send is being decided.
- **The gate.** A call that must ask the server where its keys are (``SlotsOf`` the router
  cannot answer from the key specs: see :mod:`~luapipe.wire.autopipe.keyspecs`) holds
  every write of what was issued after it until it knows, then joins its node's queue
  ahead of them.
- **Hold after a possible cache miss.** A command the server may refuse because a script or
  function is not loaded (``EVALSHA``, ``FCALL``, sent by steps that heal it and send it
  again) ends its write, except for more commands of the same kind: if one of them is
  refused, the later ones of that write are refused too (a flush clears every script; a
  function goes with its library), so the re-sends keep the order. The one window left:
  another client loading that script or library back in the middle of that very write.
  Scripts called through the registry travel as ``EVAL`` (never refused as "not loaded"),
  so they never split a write.
- **At most once.** A write that failed before any byte reached the kernel did not run: its
  entries go back to their queue, ahead of later ones, for a new connection (the flavour
  tries one); if that fails too, each caller gets :class:`~luapipe.errors.ConnectionFailed`
  thrown into its steps. Once a write may have reached the server, a lost connection gives
  each of its callers :class:`~luapipe.errors.OutcomeUnknown`; nothing is re-sent.
- **One caller's trouble stays its own.** A cancelled call is dropped from the queue if it
  was not written, and its replies are read and discarded if it was; its error, a bad
  reply or a bug in its steps fail that call alone.

What the scheduler keeps (calls, their entries, the node queues) is
:mod:`~luapipe.wire.autopipe.calls`; where things are, the flavour's
:class:`~luapipe.wire.autopipe.routers.Router`; which commands hold a write,
:func:`~luapipe.wire.autopipe.commands.miss_group`; what the callers of a lost write get,
:mod:`~luapipe.wire.autopipe.outcomes`. Those names import from here too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from luapipe.errors import LuapipeError
from luapipe.wire.autopipe.calls import Call, Entry, NodeQueue, Recover, wire_words
from luapipe.wire.autopipe.commands import miss_group, parsed
from luapipe.wire.autopipe.outcomes import lost_after_write
from luapipe.wire.autopipe.routers import Router
from luapipe.wire.replies import Command, ReplyError
from luapipe.wire.routing import Locate, LocateMany, Nodes, Send, SendEach, SlotsOf, Steps

__all__ = [
    "Call",
    "Entry",
    "NodeQueue",
    "Recover",
    "Router",
    "Scheduler",
    "lost_after_write",
    "miss_group",
]


class Scheduler:
    """Calls, their steps and the per-node queues (see the module docstring).

    ``kick(queue)`` tells the flavour that ``queue`` has something to write; the flavour
    takes a write with :meth:`take` when its link to that node is idle, and reports back
    with :meth:`answered` / :meth:`answered_one` and :meth:`lost`. ``pack(words)`` turns
    commands into bytes (the connection's packer; a bad value is a CallArgumentError, for
    that caller alone); ``callbacks`` are redis-py's response callbacks, for Sends that ask
    for them.
    """

    __slots__ = (
        "_gate",
        "_gates",
        "_seq",
        "callbacks",
        "kick",
        "max_batch",
        "pack",
        "queues",
        "router",
    )

    def __init__(
        self,
        router: Router,
        kick: Callable[[NodeQueue], None],
        pack: Callable[[Sequence[Sequence[Any]]], bytes],
        max_batch: int | None = None,
    ) -> None:
        self.router = router
        self.kick = kick
        self.pack = pack
        self.max_batch = max_batch
        self.callbacks: Mapping[Any, Callable[..., Any]] = {}
        self.queues: dict[str, NodeQueue] = {}
        self._seq = 0
        #: the calls asking the server where their keys are (the gate), by sequence number;
        #: nothing issued after the first of them is written meanwhile
        self._gates: set[int] = set()
        self._gate: int | None = None

    def queue(self, node: str) -> NodeQueue:
        q = self.queues.get(node)
        if q is None:
            q = self.queues[node] = NodeQueue(node)
        return q

    # -- joining -------------------------------------------------------------------------
    def join(self, call: Call) -> None:
        """Give ``call`` its place in the order (when its coroutine or thread starts it)."""
        self._seq += 1
        call.seq = self._seq

    def submit(
        self,
        call: Call,
        args: tuple[Any, ...],
        packed: bytes,
        *,
        slot: int | None,
        read_only: bool,
        finish: Callable[[Any], Any] | None,
        recover: Recover | None,
        hold: Any,
    ) -> None:
        """Join a fast-path ``call`` (one command: ``args``, ``packed``) and queue it on
        ``slot``'s node; a slot no node covers goes to its ``recover`` steps."""
        self.join(call)
        call.args = args
        call.finish = finish
        call.recover = recover
        try:
            node = self.router.locate(slot, read_only)
        except LuapipeError as exc:
            self.recover(call, None, exc)
        else:
            self.send_one(call, node, packed, hold)

    def send_one(self, call: Call, node: str, packed: bytes, hold: Any = None) -> None:
        """Queue a fast-path call's one command (``call.args``, packed) on ``node``.
        ``hold``: what its ``recover`` heals and sends again if the server refuses it as
        not loaded (see :func:`miss_group`): the write ends after it (the hold)."""
        q = self.queues.get(node) or self.queue(node)
        q.add(Entry(call, node, (call.args,), packed, 1, None, False, hold))  # type: ignore[arg-type]
        self.kick(q)

    def start(self, call: Call, steps: Steps[Any]) -> None:
        call.steps = steps
        self.advance(call, None, False)

    # -- advancing a call's steps ----------------------------------------------------------
    def advance(self, call: Call, answer: Any, throw: bool) -> None:
        """Send ``answer`` into the call's steps (throw it if ``throw``) and carry on until
        they wait for a round trip, hand a request to the caller, or end."""
        if self._gates and call.seq in self._gates:  # the server said where its keys are
            before = self._lift(call)
            self._advance(call, answer, throw)  # its Send joins the queue in its place
            if self._gate != before:
                self._kick_all()  # and what waited behind it goes too
            return
        self._advance(call, answer, throw)

    def _advance(self, call: Call, answer: Any, throw: bool) -> None:
        steps = call.steps
        assert steps is not None
        if call.cancelled:
            steps.close()
            return
        while True:
            try:
                request = steps.throw(answer) if throw else steps.send(answer)
            except StopIteration as done:
                call.resolve(done.value)
                return
            except BaseException as exc:  # the call's own error (or a bug): its alone
                call.fail(exc)
                return
            kind = request.__class__
            throw = False
            try:
                if kind is Send:
                    self._queue(call, request, -1)
                    return
                if kind is Locate:
                    answer = self.router.locate(request.slot, request.read_only)
                    continue
                if kind is LocateMany:
                    answer = [self.router.locate(s, False) for s in request.slots]
                    continue
                if kind is Nodes:
                    answer = self.router.nodes()
                    continue
                if kind is SlotsOf:
                    answer = self.router.slots(request.commands)
                    if answer is not None:
                        continue
                    self._close_gate(call)  # the caller asks the server: later calls wait
                if kind is SendEach:
                    parts = request.parts
                    if not parts:
                        answer = []
                        continue
                    entries = [self._entry(call, p, i) for i, p in enumerate(parts)]
            except LuapipeError as exc:  # a slot no node covers, a value that cannot be sent
                answer, throw = exc, True
                continue
            if kind is SendEach:
                call.answers = [None] * len(entries)
                call.missing = len(entries)
                for e in entries:
                    self._add(e)
                return
            call.slow(request)  # Refresh, Sleep, SlotsOf...: the caller's own waiting answers
            return

    # -- the gate ------------------------------------------------------------------------
    def _close_gate(self, call: Call) -> None:
        """While ``call`` asks the server where its keys are, nothing issued after it is
        written: it joins its node's queue ahead of them once it knows."""
        self._gates.add(call.seq)
        if self._gate is None or call.seq < self._gate:
            self._gate = call.seq

    def ungate(self, call: Call) -> None:
        """``call`` no longer asks (its caller gave up, or failed): the gate opens."""
        if self._gates and call.seq in self._gates and self._lift(call) != self._gate:
            self._kick_all()

    def _lift(self, call: Call) -> int | None:
        """Remove ``call``'s gate; the gate before."""
        before = self._gate
        self._gates.discard(call.seq)
        self._gate = min(self._gates) if self._gates else None
        return before

    def _kick_all(self) -> None:
        for q in list(self.queues.values()):
            if q.entries:
                self.kick(q)

    def _entry(self, call: Call, send: Send, part: int) -> Entry:
        batch = send.batch
        words, keep = wire_words(batch, send.asking)
        packed = self.pack(words) if words else b""
        return Entry(
            call,
            send.node,
            batch,
            packed,
            len(words),
            keep,
            parse=send.parse,
            group=miss_group(batch),
            part=part,
        )

    def _queue(self, call: Call, send: Send, part: int) -> None:
        self._add(self._entry(call, send, part))

    def _add(self, entry: Entry) -> None:
        if not entry.nwire:  # nothing to send: answered at once
            self._deliver(entry, [])
            return
        q = self.queues.get(entry.node) or self.queue(entry.node)
        q.add(entry)
        self.kick(q)

    # -- the writes ------------------------------------------------------------------------
    def take(self, q: NodeQueue) -> list[Entry]:
        """The entries of the next write to ``q``'s node, in order (cancelled calls that
        were never written are dropped: they did not run). After a command that may be
        refused as "not loaded", only more of the same kind join the write (the hold)."""
        entries = q.entries
        if not entries:
            return []
        limit = self.max_batch
        gate = self._gate
        out: list[Entry] = []
        group = None
        n = 0
        for e in entries:
            if gate is not None and e.seq > gate:
                break  # issued after a call still asking where its keys are
            if e.call.cancelled:
                n += 1
                if e.call.steps is not None:
                    e.call.steps.close()
                continue
            g = e.group
            if group is not None and g != group:
                break
            n += 1
            if g is not None:
                group = g
            out.append(e)
            if limit is not None and len(out) >= limit:
                break
        del entries[:n]
        return out

    def unwritten(self, q: NodeQueue, entries: Sequence[Entry]) -> None:
        """A write that never left: its entries go back, in their places (ahead of later
        calls), for the next write."""
        for e in entries:
            q.add(e)

    def answered(self, entry: Entry, replies: list[Any]) -> None:
        """The replies of one entry (error replies as :class:`ReplyError`), in order."""
        call = entry.call
        if call.cancelled:
            if call.steps is not None:
                call.steps.close()
            return
        if entry.parse or any(isinstance(c, Command) and c.parse for c in entry.commands):
            try:
                replies = parsed(self.callbacks, entry.commands, replies, entry.parse)
            except Exception as exc:  # a callback that cannot read the reply: this call's
                call.fail(exc)
                return
        self._deliver(entry, replies)

    def answered_one(self, entry: Entry, reply: Any) -> None:
        """The fast path: the one reply of a one-command entry."""
        call = entry.call
        if call.cancelled:
            if call.steps is not None:
                call.steps.close()
            return
        if call.steps is None:  # a fast-path call's first reply
            if reply.__class__ is not ReplyError:
                finish = call.finish
                if finish is None:
                    call.resolve(reply)
                    return
                try:
                    value = finish(reply)
                except BaseException as exc:
                    call.fail(exc)
                    return
                call.resolve(value)
                return
            self.recover(call, entry.node, reply)
            return
        self.answered(entry, [reply])

    def recover(self, call: Call, node: str | None, outcome: Any) -> None:
        """A fast-path call whose reply was not a value (or whose write failed): its
        ``recover`` steps carry on from ``outcome``."""
        recover = call.recover
        if recover is None:
            call.fail(outcome if isinstance(outcome, BaseException) else LuapipeError(outcome))
            return
        try:
            call.steps = recover(node, outcome, call.args)  # type: ignore[arg-type]
        except BaseException as exc:
            call.fail(exc)
            return
        self.advance(call, None, False)

    def _deliver(self, entry: Entry, answer: Any) -> None:
        call = entry.call
        if entry.part < 0:
            if call.steps is None:  # a fast-path call whose write failed
                self.recover(call, entry.node, answer)
            elif isinstance(answer, LuapipeError):
                self.advance(call, answer, True)
            else:
                self.advance(call, answer, False)
            return
        answers = call.answers
        assert answers is not None
        answers[entry.part] = answer
        call.missing -= 1
        if call.missing == 0:
            call.answers = None
            self.advance(call, answers, False)

    def lost(self, entries: Sequence[Entry], make: Callable[[], LuapipeError]) -> None:
        """Each of ``entries`` failed with its own ``make()`` (OutcomeUnknown once written,
        ConnectionFailed when it provably was not): thrown into its steps, which decide."""
        for entry in entries:
            call = entry.call
            if call.cancelled:
                if call.steps is not None:
                    call.steps.close()
                continue
            self._deliver(entry, make())
