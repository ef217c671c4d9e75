"""Cluster routing, free of I/O: the rules, the request vocabulary and its combinators.

Logic above the transport is written once, as a generator of *requests* (:data:`Steps`).
A driver (:func:`luapipe.wire.drivers.drive`, :func:`~luapipe.wire.drivers.drive_async`) answers
each request on held connections and sends the answer back in; a transport error is
*thrown* into the generator (:class:`~luapipe.errors.ConnectionFailed`: nothing was
written; :class:`~luapipe.errors.OutcomeUnknown`: it may have run), so every retry decision
stays in pure code. The vocabulary:

=========================  ===============================================================
request                    answer
=========================  ===============================================================
``Locate(slot, ro)``       the address of the node that owns ``slot`` (a replica for a
                           ``read_only`` request where the client reads from replicas);
                           the one server's address on a plain client
``LocateMany(slots)``      ``Locate`` for many slots at once: a list of addresses
``Nodes()``                every node's address, primaries first (script caches are per node)
``SlotsOf(commands)``      the slot of each plain command's keys (None: any node)
``Send(batch, node)``      one round trip on that node: the replies in order, error
                           replies as :class:`~luapipe.wire.replies.ReplyError` values
``SendEach(parts)``        one round trip per part (concurrent under asyncio): per part its
                           replies, or the :class:`~luapipe.errors.LuapipeError` it raised
``Refresh(cause, delay)``  ``cause`` proves a request did not run: wait ``delay`` and re-read
                           the slot map (not after an ASK). A plain client has no map: the
                           driver throws ``cause`` back (a redirect as a ServerError naming
                           the cluster client to use)
``Sleep(seconds)``         wait (the WATCH backoff)
``Release()``              drop the held connections (before the next WATCH attempt)
=========================  ===============================================================

The combinators here (:func:`on_slot_node`) are written against that vocabulary, so the
sync and asyncio paths share every routing and retry decision.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias, TypeVar

import redis.exceptions as rex
from redis.crc import key_slot

from luapipe.errors import (
    CallArgumentError,
    ConnectionFailed,
    CrossSlotError,
    LuapipeError,
)
from luapipe.wire.clients import is_cluster
from luapipe.wire.policy import RetryPolicy, did_not_run
from luapipe.wire.replies import Command, Redirect

__all__ = [
    "Locate",
    "LocateMany",
    "Nodes",
    "Refresh",
    "Release",
    "Request",
    "Send",
    "SendEach",
    "Sleep",
    "SlotsOf",
    "Steps",
    "command_slot_error",
    "gather",
    "routed",
    "sent_to",
    "is_cluster",
    "key_bytes",
    "no_node_took",
    "node_order",
    "on_slot_node",
    "per_node",
    "slot_of",
]

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)


# -- the request vocabulary -------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Locate:
    slot: int | None
    read_only: bool = False


@dataclass(frozen=True, slots=True)
class LocateMany:
    slots: tuple[int | None, ...]


@dataclass(frozen=True, slots=True)
class Nodes:
    pass


@dataclass(frozen=True, slots=True)
class SlotsOf:
    commands: tuple[tuple[Any, ...], ...]


@dataclass(frozen=True, slots=True)
class Send:
    batch: Sequence[Command | Sequence[Any]]
    node: str
    asking: bool = False
    parse: bool = False


@dataclass(frozen=True, slots=True)
class SendEach:
    parts: tuple[Send, ...]


@dataclass(frozen=True, slots=True)
class Refresh:
    cause: Redirect | ConnectionFailed
    delay: float = 0.0


@dataclass(frozen=True, slots=True)
class Sleep:
    seconds: float


@dataclass(frozen=True, slots=True)
class Release:
    pass


Request: TypeAlias = (
    Locate | LocateMany | Nodes | SlotsOf | Send | SendEach | Refresh | Sleep | Release
)
#: Logic as an I/O-free generator: it yields requests, is sent their answers and returns
#: its result. Run it with ``wire.drivers.drive`` or ``drive_async``.
Steps: TypeAlias = Generator[Any, Any, T]


# -- pure cluster rules ------------------------------------------------------------------
def key_bytes(key: Any) -> bytes:
    """A key as redis-py's default encoder sends it (for its hash slot)."""
    if isinstance(key, bytes | bytearray | memoryview):
        return bytes(key)
    if isinstance(key, bool):
        raise CallArgumentError(f"invalid key {key!r}: convert bools to bytes, str or a number")
    if isinstance(key, int | float):
        return repr(key).encode()
    return str(key).encode("utf-8", "surrogateescape")


def _text(key: Any) -> str:
    return key.decode(errors="backslashreplace") if isinstance(key, bytes) else str(key)


def slot_of(keys: Sequence[Any]) -> int | None:
    """The one slot of ``keys`` (None without keys); :class:`CrossSlotError` otherwise."""
    if not keys:
        return None
    slots: dict[int, list[Any]] = {}
    for k in keys:
        slots.setdefault(key_slot(key_bytes(k)), []).append(k)
    if len(slots) > 1:
        shown = "; ".join(
            f"slot {s}: {', '.join(map(_text, ks))}" for s, ks in sorted(slots.items())
        )
        raise CrossSlotError(
            f"keys of one call must share a cluster slot ({shown}); give them a common hash "
            f"tag, e.g. {{order:42}}:stock and {{order:42}}:log"
        )
    (slot,) = slots
    return slot


def command_slot_error(args: Sequence[Any], exc: BaseException) -> int | None:
    """What redis-py's failure to find a plain command's slot means: no key (None: any node
    will do), keys in several slots (:class:`CrossSlotError`), or an unroutable command."""
    text = str(exc)
    first = text.splitlines()[0] if text else type(exc).__name__
    if "same slot" in text or "CROSSSLOT" in text or "different slots" in text:
        raise CrossSlotError(f"{args[0]}: {first}") from exc
    if "Missing key" in text or "No way to dispatch" in text:
        return None
    raise CallArgumentError(f"cannot route {args[0]} in a cluster: {first}") from exc


def node_order(nodes: Sequence[tuple[str, bool]]) -> list[str]:
    """Node names, primaries first, then by name: ``nodes`` is ``(name, is_primary)``."""
    return [n for n, _ in sorted(nodes, key=lambda x: (not x[1], x[0]))]


# -- combinators ------------------------------------------------------------------------
def on_slot_node(
    attempt: Callable[[str, bool], Steps[T | Redirect]],
    slot: int | None,
    policy: RetryPolicy,
    *,
    what: str,
    read_only: bool = False,
) -> Steps[T]:
    """``attempt(node, asking)`` on the node that owns ``slot``, again while it did not run.

    ``attempt`` returns its result, or a :class:`Redirect` (it did not run); a
    :class:`~luapipe.errors.ConnectionFailed` thrown in means the same. An ``ASK`` goes at
    once to the node it names (after ASKING); any other redirect waits for the slot map to
    be re-read. Anything else (:class:`~luapipe.errors.OutcomeUnknown` above all) passes.
    When ``policy.redirects`` attempts all proved it did not run, it ends as a
    :class:`~luapipe.errors.ConnectionFailed` naming the slot, the attempts and the last
    cause (:func:`no_node_took`): code that retries on ConnectionFailed may send it again.
    """
    last: Redirect | ConnectionFailed | None = None
    ask: str | None = None
    for n in range(policy.redirects):
        cause: Redirect | ConnectionFailed | None
        try:
            node: str = ask if ask is not None else (yield Locate(slot, read_only))
            outcome = yield from attempt(node, ask is not None)
        except ConnectionFailed as exc:
            cause = did_not_run(exc)
            if cause is None:
                raise
        else:
            if not isinstance(outcome, Redirect):
                return outcome
            cause = outcome
        last, ask = cause, (cause.ask if isinstance(cause, Redirect) else None)
        yield Refresh(cause, 0.0 if ask is not None else policy.refresh_delay(n))
    raise no_node_took(what, slot, policy.redirects, last)


#: what redis-py's cluster client raises when its redirects run out ("TTL exhausted")
_NO_NODE_LIKE = (rex.ConnectionError, rex.ClusterError)


def no_node_took(
    what: str, slot: int | None, attempts: int, last: Redirect | ConnectionFailed | None
) -> ConnectionFailed:
    """The error for a request that no node took after ``attempts`` attempts, each of
    which proved it did not run (``last``: the last one's redirect or connection failure):
    a :class:`~luapipe.errors.ConnectionFailed` (it did not run), also redis-py's
    ``ConnectionError`` and ``ClusterError``."""
    return ConnectionFailed(
        f"no node would take {what} (slot {slot}) after {attempts} attempts; "
        f"it did not run (the last: {last})",
        like=_NO_NODE_LIKE,
    )


def gather(parts: Mapping[K, Steps[T]]) -> Steps[dict[K, T | LuapipeError]]:
    """Run several steps side by side, each on its own node: every round, the pending
    :class:`Send` of each goes out in one :class:`SendEach` (concurrently under asyncio).

    The parts may yield only :class:`Send`. A part's transport error is thrown into that
    part alone; what it raises (a :class:`~luapipe.errors.LuapipeError`) becomes its
    outcome, so one node's failure never hides the others' results. This is also how
    many callers' steps share round trips (an auto-pipeline): one write per node a round.
    """
    out: dict[K, T | LuapipeError] = {}
    waiting: dict[K, tuple[Steps[T], Send]] = {}

    def advance(key: K, steps: Steps[T], answer: Any) -> None:
        try:
            if isinstance(answer, LuapipeError):
                request = steps.throw(answer)
            else:
                request = steps.send(answer)
        except StopIteration as done:
            out[key] = done.value
            return
        except LuapipeError as exc:
            out[key] = exc
            return
        if request.__class__ is not Send:
            raise TypeError(f"gather: parts may only send, got {request!r}")
        waiting[key] = (steps, request)

    for key, steps in parts.items():
        advance(key, steps, None)
    while waiting:
        keys = list(waiting)
        answers = yield SendEach(tuple(waiting[k][1] for k in keys))
        for key, answer in zip(keys, answers, strict=True):
            steps = waiting.pop(key)[0]
            advance(key, steps, answer)
    return out


def sent_to(
    batches: Generator[Sequence[Any], list[Any], T], node: str, *, asking: bool = False
) -> Steps[T]:
    """Steps that yield bare batches (one round trip each), sent to one ``node``."""
    try:
        batch = next(batches)
        while True:
            batch = batches.send((yield Send(batch, node, asking)))
    except StopIteration as done:
        result: T = done.value
        return result


def per_node(
    slots: Sequence[int | None],
    part: Callable[[str, bool, list[int]], Steps[Sequence[Any]]],
    policy: RetryPolicy,
) -> Steps[list[Any]]:
    """Items routed by slot: each round, ``part(node, asking, indexes)`` for every node that
    owns some (side by side, one write per node: :func:`gather`); the outcomes in order.

    A part returns one outcome per index; a :class:`Redirect` outcome, or the part raising
    :class:`~luapipe.errors.ConnectionFailed`, means those did not run: only they are routed
    again (ASK at once to the node named, after ASKING; the others after the slot map is
    re-read). A part raising anything else may have run: it is raised once every part of
    that round has answered, and nothing is re-sent. Items still refused after
    ``policy.redirects`` rounds get a :class:`~luapipe.errors.ConnectionFailed` in their
    place (:func:`no_node_took`: they did not run);
    on a plain client (no slot map) they get the driver's error naming the cluster client.
    """
    results: list[Any] = [None] * len(slots)
    pending = list(range(len(slots)))
    asks: dict[int, str] = {}  # item -> the node an ASK named (its slot is migrating)
    retry: dict[int, Redirect | ConnectionFailed] = {}
    for attempt in range(policy.redirects):
        own = [i for i in pending if i not in asks]
        nodes = (yield LocateMany(tuple(slots[i] for i in own))) if own else []
        groups: dict[tuple[str, bool], list[int]] = {}
        for i, node in zip(own, nodes, strict=True):
            groups.setdefault((node, False), []).append(i)
        for i in pending:
            if i in asks:
                groups.setdefault((asks[i], True), []).append(i)
        outcomes = yield from gather({k: part(k[0], k[1], idx) for k, idx in groups.items()})
        retry = {}
        failure: LuapipeError | None = None
        for key, idx in groups.items():
            outcome = outcomes[key]
            if isinstance(outcome, LuapipeError):
                cause = did_not_run(outcome)
                if cause is not None:
                    retry.update((i, cause) for i in idx)
                    continue
                failure = failure or outcome  # it may have run: never re-sent
                outcome = [outcome] * len(idx)
            for i, r in zip(idx, outcome, strict=True):
                results[i] = r
                if isinstance(r, Redirect):
                    retry[i] = r
        if failure is not None:  # the other nodes' parts ran; nothing is re-sent
            raise failure
        if not retry:
            return results
        pending = sorted(retry)
        asks = {i: a for i, c in retry.items() if isinstance(c, Redirect) and (a := c.ask)}
        # an ASK goes on at once; any other cause waits for the slot map to be re-read
        cause = next((c for i, c in retry.items() if i not in asks), retry[pending[0]])
        try:
            yield Refresh(cause, policy.refresh_delay(attempt))
        except LuapipeError as exc:  # a plain client: no slot map to re-read
            if exc is cause:
                raise
            for i in pending:
                results[i] = exc
            return results
    for i in pending:
        results[i] = no_node_took("this command", slots[i], policy.redirects, retry[i])
    return results


def routed(
    batch: Sequence[Sequence[Any]], policy: RetryPolicy, *, cluster: bool, parse: bool = False
) -> Steps[list[Any]]:
    """``batch`` (one key each, at position 1) sent to the nodes that own the keys
    (:func:`per_node`); the replies in order, error replies as ReplyError values. Commands
    that did not run are sent again, alone; an error that may have run is raised."""
    cmds = [tuple(c) for c in batch]
    if not cluster:
        node: str = yield Locate(None)
        only: list[Any] = yield Send(cmds, node, parse=parse)
        return only

    def part(node: str, asking: bool, idx: list[int]) -> Steps[list[Any]]:
        replies = yield Send([cmds[i] for i in idx], node, asking, parse)
        return [Redirect.of(r) or r for r in replies]

    slots = [key_slot(key_bytes(c[1])) if len(c) > 1 else None for c in cmds]
    replies = yield from per_node(slots, part, policy)
    for r in replies:
        if isinstance(r, LuapipeError):  # still refused after every attempt (Send's
            raise r  # own error replies are ReplyError values)
    return replies
