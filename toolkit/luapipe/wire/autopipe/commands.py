"""Which commands an auto-pipeline shares, and the steps of one command, free of I/O.

A shared connection carries many callers' commands in turn, so a command that changes the
connection itself (``SELECT``, ``CLIENT ...``, ``WATCH``/``MULTI``, ``SUBSCRIBE``, ``AUTH``...)
would change it for every caller: it is refused with one :class:`CallArgumentError`, and
nothing is sent. A command that blocks the connection (``BLPOP``, ``XREAD ... BLOCK``,
``WAIT``) or must overtake a blocked one (``SCRIPT KILL``, ``FUNCTION KILL``) runs on a
connection of its own from the client's pool instead, as the client would run it (at most
once). On a cluster, a command redis-py sends to several nodes (``KEYS``, ``FLUSHALL``...)
is refused too: call it on the cluster client.

A command the server may refuse because a script or function is not loaded (``EVALSHA``,
``FCALL``) holds its write (:func:`miss_group`: see the scheduler's "hold").
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from luapipe.errors import CallArgumentError, LuapipeError
from luapipe.wire.limits import LIMIT_QUESTION as _LIMIT
from luapipe.wire.limits import BulkLimits, Sized, might_exceed, sizes_steps
from luapipe.wire.policy import RetryPolicy, did_not_run
from luapipe.wire.replies import Command, Redirect, ReplyError, raise_for
from luapipe.wire.routing import Locate, Refresh, Send, SlotsOf, Steps, on_slot_node

__all__ = [
    "BLOCKING",
    "DEDICATED",
    "REFUSED",
    "command_name",
    "command_recover",
    "finisher",
    "looked_up",
    "miss_group",
    "one_command",
    "parsed",
    "route_by_head",
    "route_for",
    "route_of",
    "sized_command",
]

#: commands that change the connection for whoever shares it
REFUSED = frozenset(
    {
        "ASKING", "AUTH", "CLIENT", "DISCARD", "EXEC", "HELLO", "MONITOR", "MULTI",
        "PSUBSCRIBE", "PSYNC", "PUNSUBSCRIBE", "QUIT", "READONLY", "READWRITE", "REPLCONF",
        "RESET", "SCRIPT DEBUG", "SELECT", "SSUBSCRIBE", "SUBSCRIBE", "SUNSUBSCRIBE",
        "SWAPDB", "SYNC", "UNSUBSCRIBE", "UNWATCH", "WATCH",
    }
)  # fmt: skip
#: commands that hold the connection until something happens elsewhere
BLOCKING = frozenset(
    {
        "BLMOVE", "BLMPOP", "BLPOP", "BRPOP", "BRPOPLPUSH", "BZMPOP", "BZPOPMAX",
        "BZPOPMIN", "WAIT", "WAITAOF",
    }
)  # fmt: skip
#: the first words of commands that run on a connection of their own
DEDICATED = BLOCKING | {"SCRIPT KILL", "FUNCTION KILL", "SHUTDOWN", "DEBUG"}

_NEVER_DECODE = "NEVER_DECODE"
_EMPTY_RESPONSE = "EMPTY_RESPONSE"
_CLUSTER_WIDE = frozenset({"all", "primaries", "replicas"})


def command_name(args: tuple[Any, ...]) -> str:
    """The command's name in capitals, with the subcommand for container commands."""
    head = args[0]
    name = (head.decode(errors="replace") if isinstance(head, bytes) else str(head)).upper()
    if " " in name:
        return " ".join(name.split()[:2])
    if len(args) > 1 and name in ("SCRIPT", "FUNCTION", "CLIENT", "CONFIG", "CLUSTER"):
        sub = args[1]
        sub = sub.decode(errors="replace") if isinstance(sub, bytes) else str(sub)
        return f"{name} {sub.upper()}"
    return name


def route_of(args: tuple[Any, ...], options: Mapping[str, Any], node_flag: Any = None) -> str:
    """``"pipe"`` (shared), ``"dedicated"`` (a pool connection of its own) or raises the one
    error for a command that changes the connection (nothing is sent)."""
    name = command_name(args)
    first = name.split(" ", 1)[0]
    if first in REFUSED or name in REFUSED:
        raise CallArgumentError(
            f"{name} changes the connection it runs on, and an auto-pipeline shares its "
            "connections between callers: run it on the client itself (for WATCH/MULTI, the "
            "transaction form or a transaction=True pipeline); nothing was sent"
        )
    if node_flag in _CLUSTER_WIDE:
        raise CallArgumentError(
            f"{name} runs on several cluster nodes: call it on the cluster client itself; "
            "nothing was sent"
        )
    if first in DEDICATED or name in DEDICATED or _NEVER_DECODE in options:
        return "dedicated"
    if first in ("XREAD", "XREADGROUP") and any(
        isinstance(a, str | bytes) and _upper(a) == "BLOCK" for a in args[1:]
    ):
        return "dedicated"
    return "pipe"


#: first words whose route depends on the words after them (``SCRIPT KILL``, ``XREAD ... BLOCK``)
_ROUTED_BY_ARGS = frozenset(
    {"CLIENT", "CLUSTER", "CONFIG", "FUNCTION", "SCRIPT", "XREAD", "XREADGROUP"}
)


def route_by_head(head: Any) -> bool:
    """Whether every command starting with the word ``head`` takes the same route, so the
    route can be remembered by that word alone."""
    if not isinstance(head, str | bytes):
        return False
    return _upper(head) not in _ROUTED_BY_ARGS


def route_for(
    routes: dict[Any, str], cluster: Any, args: tuple[Any, ...], options: Mapping[str, Any]
) -> str:
    """:func:`route_of`, remembered in ``routes`` by the command's first word where that
    word alone decides (:func:`route_by_head`) and the call has no options. ``cluster``:
    the cluster client, whose ``command_flags`` name the commands it sends to several
    nodes (None for one server)."""
    head = args[0]
    route = routes.get(head) if not options else None
    if route is None:
        flag = cluster.command_flags.get(head) if cluster is not None else None
        route = route_of(args, options, flag)
        if not options and route_by_head(head):
            routes[head] = route
    return route


def _upper(arg: str | bytes) -> str:
    return (arg.decode(errors="replace") if isinstance(arg, bytes) else arg).upper()


_MISS_SCRIPT = frozenset({"EVALSHA", "EVALSHA_RO", b"EVALSHA", b"EVALSHA_RO"})
_MISS_FUNCTION = frozenset({"FCALL", "FCALL_RO", b"FCALL", b"FCALL_RO"})


def _word(arg: Any) -> Any:
    return arg.upper() if isinstance(arg, str | bytes) else arg


def miss_group(batch: Sequence[Command | Sequence[Any]]) -> Any:
    """What a batch may be refused for as "not loaded": ``"scripts"`` (EVALSHA: a flush
    clears every script at once), ``("function", name)`` (FCALL), or None. Also
    ``"limit"`` for the question asked before a value of 1 MB or more (``CONFIG GET
    proto-max-bulk-len``): its answer decides what the call sends next, so it holds the
    write the same way."""
    group: Any = None
    for cmd in batch:
        args = cmd.args if isinstance(cmd, Command) else cmd
        head = _word(args[0]) if args else None
        if head in _MISS_SCRIPT:
            group = "scripts"
        elif head in _MISS_FUNCTION and len(args) > 1:
            name = args[1]
            group = ("function", name.decode() if isinstance(name, bytes) else str(name))
        elif cmd is _LIMIT:
            group = "limit"
    return group


def finisher(
    callbacks: Mapping[Any, Callable[..., Any]], args: tuple[Any, ...], options: dict[str, Any]
) -> Callable[[Any], Any] | None:
    """What turns a command's raw value reply into what redis-py's method returns (its
    response callback with the call's options), or None (the raw reply)."""
    callback = callbacks.get(args[0])
    if callback is None:
        return None
    if options:
        kept = {k: v for k, v in options.items() if k not in ("keys", _EMPTY_RESPONSE)}
        if kept:
            return functools.partial(callback, **kept)
    return callback


def parsed(
    callbacks: Mapping[Any, Callable[..., Any]],
    commands: Sequence[Command | Sequence[Any]],
    replies: list[Any],
    parse: bool,
) -> list[Any]:
    """Each reply of a Send through its command's response callback where the Send asked
    for it (``parse``) or the command did: what redis-py's method returns (as
    :func:`finisher` for one command); error replies as they came."""
    out = []
    for cmd, reply in zip(commands, replies, strict=True):
        if reply.__class__ is ReplyError or not (parse or getattr(cmd, "parse", False)):
            out.append(reply)
            continue
        args, options = (cmd.args, cmd.options) if isinstance(cmd, Command) else (cmd, {})
        callback = callbacks.get(args[0])
        if callback is None:
            out.append(reply)
            continue
        kept = {k: v for k, v in options.items() if k not in ("keys", _EMPTY_RESPONSE)}
        out.append(callback(reply, **kept))
    return out


def _final(reply: Any, finish: Callable[[Any], Any] | None, options: Mapping[str, Any]) -> Any:
    if reply.__class__ is ReplyError:
        if _EMPTY_RESPONSE in options:
            return options[_EMPTY_RESPONSE]
        raise_for(reply)
    return finish(reply) if finish is not None else reply


def command_recover(
    args: tuple[Any, ...],
    slot: int | None,
    policy: RetryPolicy,
    finish: Callable[[Any], Any] | None,
    options: Mapping[str, Any],
) -> Callable[[str | None, Any, tuple[Any, ...]], Steps[Any]]:
    """The steps after a command's first reply was not a value (see
    :data:`~luapipe.wire.autopipe.schedule.Recover`): an error reply is raised (translated);
    a redirect, or a write that provably never left, is routed again (the slot map re-read
    on a cluster; on one server the cause stands); anything that may have run is raised."""

    def recover(node: str | None, outcome: Any, _: tuple[Any, ...]) -> Steps[Any]:
        cause = did_not_run(outcome)
        if cause is None:
            if isinstance(outcome, LuapipeError):
                raise outcome
            return _final(outcome, finish, options)
        ask = isinstance(cause, Redirect) and cause.ask is not None
        yield Refresh(cause, 0.0 if ask else policy.refresh_delay(0))

        def attempt(at: str, asking: bool) -> Steps[Any]:
            (reply,) = yield Send([args], at, asking)
            return Redirect.of(reply) or reply

        reply = yield from on_slot_node(attempt, slot, policy, what=str(args[0]))
        return _final(reply, finish, options)

    return recover


def looked_up(
    args: tuple[Any, ...],
    options: Mapping[str, Any],
    finish: Callable[[Any], Any] | None,
    policy: RetryPolicy,
    limits: BulkLimits,
) -> Steps[Any]:
    """A command whose keys only the server can find (``COMMAND GETKEYS``: SORT, MIGRATE,
    a server without key specs): its slot is asked for first (``SlotsOf``, which holds the
    call's place: nothing issued later is written meanwhile), then it goes as any other."""
    (slot,) = yield SlotsOf((args,))
    if might_exceed(args):
        command = Command(args, dict(options), parse=True)
        return (yield from sized_command(command, slot, policy, limits))

    def attempt(at: str, asking: bool) -> Steps[Any]:
        (reply,) = yield Send([args], at, asking)
        return Redirect.of(reply) or reply

    reply = yield from on_slot_node(attempt, slot, policy, what=str(args[0]))
    return _final(reply, finish, options)


def sized_command(
    command: Command, slot: int | None, policy: RetryPolicy, limits: BulkLimits
) -> Steps[Any]:
    """:func:`one_command` for a command holding a value of 1 MB or more: a value over the
    node's proto-max-bulk-len is refused before sending (sent, the server's protocol error
    would close the connection the other callers share)."""
    node = yield Locate(slot, False)
    sized: Sized = (f"command {command.name}", "args", command.args[1:], lambda i: "")
    yield from sizes_steps(node, [sized], limits)
    return (yield from one_command(command, slot, policy))


def one_command(
    command: Command, slot: int | None, policy: RetryPolicy, *, read_only: bool = False
) -> Steps[Any]:
    """One command on the node that owns ``slot``, redis-py's callback applied (the
    dedicated path: the drivers run it on a pooled connection of its own)."""

    def attempt(node: str, asking: bool) -> Steps[Any]:
        (reply,) = yield Send([command], node, asking)
        return Redirect.of(reply) or reply

    reply = yield from on_slot_node(attempt, slot, policy, what=command.name, read_only=read_only)
    return raise_for(reply)
