"""The registry's server work as I/O-free steps: load, status, flush, kill, call, execute.

Each function returns :data:`~luapipe.wire.routing.Steps`; the registry and the pipelines
run them with :func:`luapipe.wire.drivers.drive` or :func:`~luapipe.wire.drivers.drive_async`, so a
sync and an asyncio client get the same commands, the same reply handling, the same
redirect and retry decisions and the same errors.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

from luapipe.errors import CrossSlotError, LuapipeError, ServerError
from luapipe.scripts.fcall import FunctionCall, heal_batch, read_heal
from luapipe.scripts.problems import ScriptProblem, problems_error
from luapipe.scripts.protocol import (
    Entry,
    KnownScripts,
    Plan,
    ScriptCall,
    cached_by_eval,
    check_loaded,
    function_result,
    load_command,
    load_failed,
    script_error,
    script_result,
)
from luapipe.scripts.script import LuaScript, param_name
from luapipe.wire.limits import BulkLimits, Sized, might_exceed, sizes_steps
from luapipe.wire.policy import RetryPolicy, did_not_run
from luapipe.wire.replies import Command, Redirect, ReplyError, raise_for
from luapipe.wire.routing import (
    Locate,
    LocateMany,
    Nodes,
    Refresh,
    Send,
    SendEach,
    SlotsOf,
    Steps,
    on_slot_node,
    per_node,
    slot_of,
)

T = TypeVar("T")

__all__ = [
    "NodeStatus",
    "ScriptState",
    "call_steps",
    "again_if_not_run",
    "eval_steps",
    "execute_steps",
    "flush_steps",
    "function_call_steps",
    "kill_steps",
    "load_steps",
    "status_steps",
]


@dataclass(frozen=True)
class ScriptState:
    name: str
    sha: str
    loaded: bool

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "sha": self.sha, "loaded": self.loaded}


@dataclass(frozen=True)
class NodeStatus:
    """Which scripts one node has cached."""

    node: str
    scripts: tuple[ScriptState, ...]

    @property
    def missing(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.scripts if not s.loaded)

    def as_dict(self) -> dict[str, Any]:
        """The node as ``scripts status --json`` prints it."""
        return {"node": self.node, "scripts": [s.as_dict() for s in self.scripts]}


# -- every node ---------------------------------------------------------------------------
def _on_every_node(batch: list[Command]) -> Steps[list[tuple[str, list[Any]]]]:
    """``batch`` on every node (primaries first), one round trip each: (node, replies).
    Every node is tried; the first failure is raised after the others answered."""
    nodes: list[str] = yield Nodes()
    answers = yield SendEach(tuple(Send(batch, n) for n in nodes))
    failed = [a for a in answers if isinstance(a, LuapipeError)]
    done = [(n, a) for n, a in zip(nodes, answers, strict=True) if not isinstance(a, BaseException)]
    if failed:
        raise failed[0]
    return done


def load_steps(
    scripts: Sequence[LuaScript], known: KnownScripts, problems: Sequence[ScriptProblem] = ()
) -> Steps[dict[str, str]]:
    """SCRIPT LOAD every script on every node; {name: sha}.

    All or nothing: with any ``problems`` (scripts a lenient registry set aside) nothing is
    sent, and one error names every broken file."""
    refused = problems_error(problems, refusing="nothing loaded")
    if refused is not None:
        raise refused
    first: LuapipeError | None = None
    for node, replies in (yield from _on_every_node([load_command(sc) for sc in scripts])):
        for sc, reply in zip(scripts, replies, strict=True):
            err = check_loaded(sc, reply)
            if err is None:
                known.add(node, sc.sha)
            else:
                first = first or err
    if first is not None:
        raise first
    return {sc.name: sc.sha for sc in scripts}


def status_steps(scripts: Sequence[LuaScript]) -> Steps[list[NodeStatus]]:
    """SCRIPT EXISTS for every script, per node (primaries first, then replicas)."""
    if not scripts:
        return [NodeStatus(n, ()) for n in (yield Nodes())]
    exists = Command(("SCRIPT", "EXISTS", *[sc.sha for sc in scripts]))
    out: list[NodeStatus] = []
    for node, (reply,) in (yield from _on_every_node([exists])):
        flags = raise_for(reply)
        pairs = zip(scripts, flags, strict=True)
        states = tuple(ScriptState(sc.name, sc.sha, bool(f)) for sc, f in pairs)
        out.append(NodeStatus(node, states))
    return out


def flush_steps(known: KnownScripts) -> Steps[list[str]]:
    """SCRIPT FLUSH on every node (every application's scripts); the nodes."""
    flushed = []
    for node, (reply,) in (yield from _on_every_node([Command(("SCRIPT", "FLUSH"))])):
        raise_for(reply)
        known.forget(node)
        flushed.append(node)
    return flushed


_KILLS = [Command(("SCRIPT", "KILL")), Command(("FUNCTION", "KILL"))]


def _not_running(reply: ReplyError) -> bool:
    """A KILL reply that says nothing of its kind runs: NOTBUSY; BUSY naming the other KILL
    (a script runs, not a function, or the reverse); no FUNCTION command (Redis 6)."""
    text = reply.text
    return text.startswith(("NOTBUSY", "BUSY", "ERR unknown command"))


def kill_steps() -> Steps[list[str]]:
    """SCRIPT KILL and FUNCTION KILL on every node (one round trip each: whichever runs is
    stopped, the other KILL answers NOTBUSY or BUSY); the nodes where one was killed."""
    killed = []
    for node, replies in (yield from _on_every_node(_KILLS)):
        errors = [r for r in replies if isinstance(r, ReplyError)]
        if len(errors) < len(replies):
            killed.append(node)
            continue
        if any(r.text.startswith("UNKILLABLE") for r in errors):
            raise ServerError(
                f"UNKILLABLE: the script or function running on {node} has already "
                "written and cannot be killed; wait for it (or SHUTDOWN NOSAVE, losing data)"
            )
        for reply in errors:
            if not _not_running(reply):
                raise_for(reply)
    return killed


# -- one call ------------------------------------------------------------------------------
def _raise_or_return(result: Any) -> Any:
    if isinstance(result, LuapipeError):
        raise result
    return result


def after_evalsha(
    call: ScriptCall, known: KnownScripts, node: str, reply: Any, asking: bool
) -> Steps[Any]:
    """What an EVALSHA's reply means: the value, a :class:`Redirect` (it did not run), the
    script's error, or NOSCRIPT: sent once more as EVAL, whose NOSCRIPT can only be the
    script's own error reply."""
    if reply.__class__ is not ReplyError:
        return reply
    redirect = Redirect.of(reply)
    if redirect is not None:
        return redirect
    script = call.script
    if not reply.is_noscript:
        raise script_error(script, reply.text, reply.where, reply.command)
    known.discard(node, script.sha)
    (reply,) = yield Send([call.eval()], node, asking)
    redirect = Redirect.of(reply)
    if redirect is not None:
        return redirect
    if cached_by_eval(reply):
        known.add(node, script.sha)
    return _raise_or_return(script_result(script, reply))


def call_on_node(call: ScriptCall, known: KnownScripts, node: str, asking: bool) -> Steps[Any]:
    """One attempt on ``node``: EVALSHA in steady state, else SCRIPT LOAD + EVALSHA in one
    write; returns the reply or a :class:`Redirect`."""
    if known.has(node, call.script.sha):
        (reply,) = yield Send([call.evalsha_args()], node, asking)
        return (yield from after_evalsha(call, known, node, reply, asking))
    plan = Plan([call], known, node, transaction=False)
    yield from plan_steps(plan, node, asking)
    result = plan.results[0]
    return result if isinstance(result, Redirect) else _raise_or_return(result)


def call_steps(
    call: ScriptCall,
    known: KnownScripts,
    policy: RetryPolicy,
    *,
    cluster: bool,
    first: tuple[str, Any] | None = None,
) -> Steps[Any]:
    """One script call on the node that owns its keys' slot, at most once.

    ``first``: ``(node, reply)`` of an EVALSHA a fast path already sent there (the driver
    holds that connection); the steps carry on from its reply.
    """
    if first is not None:
        outcome = yield from after_evalsha(call, known, first[0], first[1], False)
        if not isinstance(outcome, Redirect):
            return outcome
        yield Refresh(outcome, policy.refresh_delay(0))
    slot = slot_of(call.keys) if cluster else None
    yield from size_steps([call], [slot], known.limits)
    return (
        yield from on_slot_node(
            lambda node, asking: call_on_node(call, known, node, asking),
            slot,
            policy,
            what=f"script {call.script.name!r}",
            read_only=call.script.read_only,
        )
    )


# -- sizes -------------------------------------------------------------------------------
def _values(entry: Entry) -> Sequence[Any]:
    return entry.args[1:] if isinstance(entry, Command) else (*entry.keys, *entry.args)


def _sized(entry: Entry) -> list[Sized]:
    if isinstance(entry, Command):
        return [(f"pipeline command {entry.name}", "args", entry.args[1:], lambda i: "")]
    callee = entry.script if isinstance(entry, ScriptCall) else entry.function
    who = f"{'script' if isinstance(entry, ScriptCall) else 'function'} {callee.name!r}"
    return [
        (who, "keys", entry.keys, partial(param_name, callee.keys)),
        (who, "args", entry.args, partial(param_name, callee.args)),
    ]


def size_steps(
    entries: Sequence[Entry], slots: Sequence[int | None], known: BulkLimits | None = None
) -> Steps[None]:
    """Refuse, before anything is sent, a key or argument longer than its node's
    proto-max-bulk-len (only when a value is 1 MB or more; ``known`` remembers the limits:
    see wire.limits)."""
    big = [i for i, e in enumerate(entries) if might_exceed(_values(e))]
    if not big:
        return
    nodes = yield LocateMany(tuple(slots[i] for i in big))
    per_node: dict[str, list[Sized]] = {}
    for i, node in zip(big, nodes, strict=True):
        per_node.setdefault(node, []).extend(_sized(entries[i]))
    for node, items in per_node.items():
        yield from sizes_steps(node, items, known)


# -- one function call ---------------------------------------------------------------------
def after_fcall(
    call: FunctionCall, node: str, reply: Any, asking: bool, slot: int | None
) -> Steps[Any]:
    """What an FCALL's reply means: the value, a :class:`Redirect` (it did not run), the
    function's error, or the exact "ERR Function not found" (it did not run): then its
    library is loaded on the primary that owns the slot (never on a replica; FCALL_RO may
    have been sent to one) and the call sent again, atomically (:mod:`luapipe.scripts.fcall`)."""
    if reply.__class__ is not ReplyError:
        return reply
    redirect = Redirect.of(reply)
    if redirect is not None:
        return redirect
    if not reply.is_function_not_found:
        return _raise_or_return(function_result(call, reply))
    home = node
    if call.read_only and not asking:  # maybe a replica: heal on the slot's primary
        home = yield Locate(slot, False)
    replies = yield Send(heal_batch([call]), home, asking and home == node)
    (outcome,) = read_heal([call], replies, home, function_result, load_failed)
    return outcome if isinstance(outcome, Redirect) else _raise_or_return(outcome)


def function_call_steps(
    call: FunctionCall,
    policy: RetryPolicy,
    *,
    cluster: bool,
    first: tuple[str, Any] | None = None,
) -> Steps[Any]:
    """One function call on the node that owns its keys' slot (a replica for ``no-writes``
    where the client reads from replicas), at most once.

    ``first``: ``(node, reply)`` of an FCALL a fast path already sent on a plain client."""
    if first is not None:
        outcome = yield from after_fcall(call, first[0], first[1], False, None)
        if not isinstance(outcome, Redirect):
            return outcome
        yield Refresh(outcome, policy.refresh_delay(0))
    slot = slot_of(call.keys) if cluster else None
    yield from size_steps([call], [slot])

    def attempt(node: str, asking: bool) -> Steps[Any]:
        (reply,) = yield Send([call.fcall_args()], node, asking)
        return (yield from after_fcall(call, node, reply, asking, slot))

    return (
        yield from on_slot_node(
            attempt,
            slot,
            policy,
            what=f"function {call.function.name!r}",
            read_only=call.read_only,
        )
    )


# -- a pipeline ----------------------------------------------------------------------------
def plan_steps(plan: Plan, node: str, asking: bool) -> Steps[Plan]:
    """Drive a :class:`Plan` on one node: each batch one round trip until it is done."""
    batch = plan.start()
    while batch:
        batch = plan.feed((yield Send(batch, node, asking)))
    return plan


def _slots(entries: Sequence[Entry], transaction: bool) -> Steps[list[int | None]]:
    """The slot of every entry (CrossSlotError before anything is sent)."""
    plain = [i for i, e in enumerate(entries) if isinstance(e, Command)]
    found = iter((yield SlotsOf(tuple(entries[i].args for i in plain))) if plain else ())
    slots = [slot_of(e.keys) if not isinstance(e, Command) else next(found) for e in entries]
    if not transaction:
        return slots
    used = sorted({s for s in slots if s is not None})
    if len(used) > 1:
        raise CrossSlotError(
            f"transaction=True needs every key in one slot, got slots {used}; "
            "use a common hash tag such as {user:42}; nothing was sent"
        )
    return [used[0] if used else None] * len(entries)


def execute_steps(
    entries: Sequence[Entry],
    known: KnownScripts,
    policy: RetryPolicy,
    *,
    transaction: bool,
    cluster: bool,
) -> Steps[tuple[list[Any], int]]:
    """A pipeline's entries, one :class:`Plan` per node (:func:`per_node`); (results in
    queue order, calls re-sent after NOSCRIPT). Entries that did not run (a redirect, a
    node that refused the connection) are routed again; anything that may have run is
    never re-sent."""
    slots = (yield from _slots(entries, transaction)) if cluster else [None] * len(entries)
    yield from size_steps(entries, slots, known.limits)
    reloads = 0

    def part(node: str, asking: bool, idx: list[int]) -> Steps[list[Any]]:
        nonlocal reloads
        plan = Plan([entries[i] for i in idx], known, node, transaction=transaction)
        yield from plan_steps(plan, node, asking)
        reloads += plan.reloads
        return plan.results

    results = yield from per_node(slots, part, policy)
    return results, reloads


# -- a call through an auto-pipeline -------------------------------------------------------
def again_if_not_run(outcome: LuapipeError, again: Steps[T], policy: RetryPolicy) -> Steps[T]:
    """After a write that failed with ``outcome``: ``again`` if it provably did not run
    (after the slot map is re-read; on one server the cause stands, raised), else
    ``outcome`` raised: what may have run is never sent again."""
    cause = did_not_run(outcome)
    if cause is None:
        raise outcome
    yield Refresh(cause, policy.refresh_delay(0))
    return (yield from again)


def eval_steps(
    call: ScriptCall, policy: RetryPolicy, *, cluster: bool, first: tuple[str | None, Any]
) -> Steps[Any]:
    """A script call sent as EVAL (an auto-pipeline's form: a flushed cache cannot refuse
    it, so no later call can overtake it), carried on from the ``first`` outcome that was
    not a value: ``(node, reply)``, or ``(node, error)`` for a write that failed. The
    script's error is raised; a redirect, or a write that provably never left, is routed
    again; anything that may have run is raised, never re-sent."""
    _, outcome = first
    cause = did_not_run(outcome)
    if cause is None:
        if isinstance(outcome, LuapipeError):
            raise outcome
        return _raise_or_return(script_result(call.script, outcome))
    ask = isinstance(cause, Redirect) and cause.ask is not None
    yield Refresh(cause, 0.0 if ask else policy.refresh_delay(0))

    def attempt(at: str, asking: bool) -> Steps[Any]:
        (reply,) = yield Send([call.eval()], at, asking)
        redirect = Redirect.of(reply)
        if redirect is not None:
            return redirect
        return _raise_or_return(script_result(call.script, reply))

    slot = slot_of(call.keys) if cluster else None
    return (
        yield from on_slot_node(
            attempt,
            slot,
            policy,
            what=f"script {call.script.name!r}",
            read_only=call.script.read_only,
        )
    )
