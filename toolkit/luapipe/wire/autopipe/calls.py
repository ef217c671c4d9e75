"""What the auto-pipeline's scheduler keeps: each caller's call, its entries, each node's queue.

A :class:`Call` is one caller's call (the flavours subclass it with the way its caller
waits); an :class:`Entry` is that call's commands for one round trip on one node, packed,
kept together in a write; a :class:`NodeQueue` holds what waits to be written to one node,
in the callers' order (their sequence numbers). The rules that move them are the
scheduler's (:mod:`~luapipe.wire.autopipe.schedule`).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from typing import Any, TypeAlias

from luapipe.wire.replies import Command, as_command, with_asking
from luapipe.wire.routing import Steps

__all__ = ["Call", "Entry", "NodeQueue", "Recover", "wire_words"]

#: ``recover(node, outcome, args)``: the steps that carry on after a fast-path call's first
#: reply was not a value (an error reply, a redirect) or its write failed (``outcome`` is
#: then the :class:`~luapipe.errors.LuapipeError`); ``node`` is where it went (None: not
#: located), ``args`` the command's words (so one ``recover`` serves every call of a kind).
Recover: TypeAlias = Callable[[str | None, Any, tuple[Any, ...]], Steps[Any]]


class Call:
    """One caller's call. The flavours subclass it with the way its caller waits:
    :meth:`resolve`, :meth:`fail` and :meth:`slow` are called by the scheduler."""

    __slots__ = (
        "answers",
        "args",
        "cancelled",
        "finish",
        "missing",
        "recover",
        "seq",
        "steps",
        "written",
    )

    def __init__(self) -> None:
        self.seq = 0
        self.steps: Steps[Any] | None = None
        #: the fast path: the one command, what turns its value into the result
        self.args: tuple[Any, ...] | None = None
        self.finish: Callable[[Any], Any] | None = None
        self.recover: Recover | None = None
        self.cancelled = False
        #: round trips of this call written so far (``RunResult.round_trips``)
        self.written = 0
        #: a SendEach in progress: its answers, and how many parts are still out
        self.answers: list[Any] | None = None
        self.missing = 0

    # -- what the flavour does with an outcome ------------------------------------------
    def resolve(self, value: Any) -> None:
        raise NotImplementedError

    def fail(self, exc: BaseException) -> None:
        raise NotImplementedError

    def slow(self, request: Any) -> None:
        """A request the scheduler does not answer (Refresh, Sleep, SlotsOf): the caller's
        waiting code answers it and calls
        :meth:`~luapipe.wire.autopipe.schedule.Scheduler.advance`."""
        raise NotImplementedError


class Entry:
    """One call's commands for one round trip on one node (kept together in the write):
    the bytes to write, how many replies come back and which of them are the call's."""

    __slots__ = (
        "asking",
        "call",
        "commands",
        "group",
        "keep",
        "node",
        "nwire",
        "packed",
        "parse",
        "part",
        "seq",
    )

    def __init__(
        self,
        call: Call,
        node: str,
        commands: Sequence[Command | Sequence[Any]],
        packed: bytes,
        nwire: int = 1,
        keep: list[int] | None = None,
        parse: bool = False,
        group: Any = None,
        part: int = -1,
    ) -> None:
        self.call = call
        self.seq = call.seq
        self.node = node
        self.commands = commands
        self.packed = packed
        self.nwire = nwire
        #: where the call's replies are among the written commands' (None: all, in order)
        self.keep = keep
        self.asking = keep is not None
        self.parse = parse
        self.group = group
        #: its index in a SendEach, or -1 for a Send (or the fast path)
        self.part = part


def wire_words(
    batch: Sequence[Command | Sequence[Any]], asking: bool
) -> tuple[list[Sequence[Any]], list[int] | None]:
    """The words of ``batch`` as written (after ASKING where a node's ASK named it), and
    where its replies are among the written commands' (None: one each, in order)."""
    if not asking:
        return [c.args if isinstance(c, Command) else c for c in batch], None
    full, keep = with_asking([as_command(c) for c in batch])
    return [c.args for c in full], keep


class NodeQueue:
    """What waits to be written to one node, in the callers' order (sequence numbers)."""

    __slots__ = ("entries", "node")

    def __init__(self, node: str) -> None:
        self.node = node
        self.entries: list[Entry] = []

    def add(self, entry: Entry) -> None:
        entries = self.entries
        if not entries or entries[-1].seq <= entry.seq:
            entries.append(entry)
        else:  # a call's later round trip, or a write sent back: ahead of later calls
            bisect.insort_right(entries, entry, key=_seq)

    def __len__(self) -> int:
        return len(self.entries)


def _seq(entry: Entry) -> int:
    return entry.seq
