"""Run one call of a plan in any form, on any client: one table from form to steps.

:data:`FORMS` maps each form to I/O-free steps in the request vocabulary of
:mod:`luapipe.wire.routing`; :func:`run` sends them with the sync driver
(:class:`~luapipe.wire.sync.Driver`), :func:`run_async` with the asyncio one, on a single
server or a cluster alike. So every form makes the same routing, redirect, retry and error
decisions whatever the client:

- naive / pipelined: each batch of :mod:`luapipe.operations.steps` goes to the node that
  owns each command's key; a command answered MOVED/ASK/TRYAGAIN/CLUSTERDOWN, or whose node
  refused the connection, did not run and only it is sent again;
- transaction: WATCH/MULTI/EXEC attempts on the node that owns the (one) slot of the
  declared keys, at most ``policy.watch_retries`` retries after a WATCH abort, counted;
- script: the registry's call steps (NOSCRIPT, slot routing, redirects);
- function: the registry's function steps too: FCALL on the slot's node; a missing
  library is loaded there (never replaced) and the call sent again, atomically.

Semantics shared by every form: reads, then the compute step, then every write is
attempted in order; if any write failed the call raises the first error after the rest ran
(as Lua's ``redis.pcall``, a pipeline and EXEC all do). Nothing is written when a read or
the compute step fails; nothing that may have run is sent again
(:class:`~luapipe.errors.OutcomeUnknown`). On a cluster, keys of an atomic form in several
slots raise :class:`~luapipe.errors.CrossSlotError` before anything is sent.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any, TypeVar

from redis.crc import key_slot

from luapipe.errors import CallArgumentError, ServerError
from luapipe.operations import steps
from luapipe.operations.model import FORMS as FORM_NAMES
from luapipe.operations.plan import Batches, Env, Plan, RunResult, bind, to_wire, wire
from luapipe.scripts.calls import call_steps, function_call_steps
from luapipe.scripts.script import param_name
from luapipe.wire.clients import require_async_client, require_sync_client
from luapipe.wire.drivers import AsyncDriver, Driver
from luapipe.wire.limits import Sized, might_exceed, sizes_steps
from luapipe.wire.policy import DEFAULT, RetryPolicy, policy_of
from luapipe.wire.replies import Redirect
from luapipe.wire.routing import (
    Locate,
    LocateMany,
    Refresh,
    Release,
    Send,
    Sleep,
    Steps,
    key_bytes,
    on_slot_node,
    routed,
    slot_of,
)

__all__ = ["FORMS", "execute_routed", "form_steps", "invariant", "run", "run_async"]

T = TypeVar("T")
#: what a form's steps return: the reply, and the WATCH retries it took
Outcome = tuple[Any, int]
FormSteps = Callable[[Plan, Env, RetryPolicy, bool], Steps[Outcome]]


# -- batches to requests -----------------------------------------------------------------


def on_node(batches: Batches[T], node: str, asking: bool = False) -> Steps[T | Redirect]:
    """``batches`` sent to ``node``, one round trip each. A redirect reply ends them and is
    returned: every form sends a redirected command before anything it writes, or inside
    MULTI (whose EXEC then aborts), so nothing of the attempt ran."""
    try:
        batch = next(batches)
        while True:
            replies: list[Any] = (yield Send(batch, node, asking)) if batch else []
            for reply in replies:
                redirect = Redirect.of(reply)
                if redirect is not None:
                    batches.close()
                    return redirect
            batch = batches.send(replies)
    except StopIteration as done:
        result: T = done.value
        return result


def spread(batches: Batches[T], policy: RetryPolicy, *, cluster: bool) -> Steps[T]:
    """``batches`` of one-key commands: on a cluster each command to the node that owns its
    key (redirected ones re-sent alone, see :func:`~luapipe.wire.routing.routed`); on one
    server all of them there (a redirect there: the driver raises the cluster-client hint)."""
    if not cluster:
        node: str = yield Locate(None)
        outcome = yield from on_node(batches, node)
        if isinstance(outcome, Redirect):
            yield Refresh(outcome)  # a plain client has no slot map: this raises the hint
            raise ServerError(str(outcome))  # (never reached: for type checkers)
        return outcome
    try:
        batch = next(batches)
        while True:
            replies = (yield from routed(batch, policy, cluster=True)) if batch else []
            batch = batches.send(replies)
    except StopIteration as done:
        result: T = done.value
        return result


def _slot(plan: Plan, env: Env, cluster: bool) -> int | None:
    """The one slot of a call's declared keys (:class:`CrossSlotError` before sending)."""
    return slot_of([x for k, _ in plan.keys for x in to_wire(env[k])]) if cluster else None


# -- the forms -----------------------------------------------------------------------------


def sizes(plan: Plan, env: Env, form: str, cluster: bool) -> Steps[None]:
    """A key or argument over its node's proto-max-bulk-len, refused by name before anything
    is sent: the server would reset the connection mid-request, which reads as an unknown
    outcome. Every form asks here, so every form says it in the same words, naming the
    operation and the argument (the registry's steps would name the generated script, or
    the generated function without its arguments' names)."""
    keys, args = steps.split(plan, env)
    if not (might_exceed(keys) or might_exceed(args)):
        return
    reg = steps.registry_of(plan)
    script = reg[steps.script_name(plan)]  # the declared names, flattened as on the wire
    who = f"operation {plan.name!r} ({form} form)"
    items: list[Sized] = [
        (who, "keys", keys, partial(param_name, script.keys)),
        (who, "args", args, partial(param_name, script.args)),
    ]
    slots = tuple(dict.fromkeys(key_slot(key_bytes(k)) for k in keys)) if cluster else (None,)
    nodes = yield LocateMany(slots or (None,))
    for node in dict.fromkeys(nodes):  # each node the form's commands may go to
        yield from sizes_steps(node, items, reg.known.limits)


def naive(plan: Plan, env: Env, policy: RetryPolicy, cluster: bool) -> Steps[Outcome]:
    yield from sizes(plan, env, "naive", cluster)
    value = yield from spread(steps.naive_steps(plan, env), policy, cluster=cluster)
    return value, 0


def pipelined(plan: Plan, env: Env, policy: RetryPolicy, cluster: bool) -> Steps[Outcome]:
    yield from sizes(plan, env, "pipelined", cluster)
    batches = steps.pipelined_steps(plan, env)
    return (yield from spread(batches, policy, cluster=cluster)), 0


def transaction(plan: Plan, env: Env, policy: RetryPolicy, cluster: bool) -> Steps[Outcome]:
    def attempt(node: str, asking: bool) -> Steps[Outcome | Redirect]:
        for n in range(policy.watch_retries + 1):
            done = yield from on_node(steps.transaction_steps(plan, dict(env)), node, asking)
            if isinstance(done, Redirect):  # a WATCH may be set: clear it, then route again
                yield Send([("UNWATCH",)], node, asking)
                return done
            committed, value = done
            if committed:
                return value, n
            yield Release()
            yield Sleep(policy.watch_delay(n))
        raise steps.aborted(plan, policy.watch_retries)

    slot = _slot(plan, env, cluster)
    yield from sizes(plan, env, "transaction", cluster)
    return (yield from on_slot_node(attempt, slot, policy, what=repr(plan.name)))


def script(plan: Plan, env: Env, policy: RetryPolicy, cluster: bool) -> Steps[Outcome]:
    yield from sizes(plan, env, "script", cluster)
    reg, call = steps.script_call(plan, env)
    return wire((yield from call_steps(call, reg.known, policy, cluster=cluster))), 0


def function(plan: Plan, env: Env, policy: RetryPolicy, cluster: bool) -> Steps[Outcome]:
    yield from sizes(plan, env, "function", cluster)
    call = steps.function_call(plan, env)
    return wire((yield from function_call_steps(call, policy, cluster=cluster))), 0


#: every form, in the order of :data:`luapipe.operations.model.FORMS`
FORMS: dict[str, FormSteps] = {
    "naive": naive,
    "pipelined": pipelined,
    "transaction": transaction,
    "script": script,
    "function": function,
}
assert tuple(FORMS) == FORM_NAMES


def form_steps(
    plan: Plan,
    form: str,
    keys: Mapping[str, Any],
    args: Mapping[str, Any],
    max_retries: int | None = None,
    policy: RetryPolicy | None = None,
    *,
    cluster: bool,
) -> Steps[Outcome]:
    """The steps of one call: a known form and valid keys/args, or an error (nothing sent).
    ``max_retries`` (WATCH retries) and ``policy`` build the retry policy (default: DEFAULT)."""
    make = FORMS.get(form)
    if make is None:
        raise CallArgumentError(f"unknown form {form!r} ({', '.join(FORMS)})")
    if max_retries is not None or policy is not None:
        return make(plan, bind(plan, keys, args), policy_of(max_retries, policy), cluster)
    return make(plan, bind(plan, keys, args), DEFAULT, cluster)


# -- running -------------------------------------------------------------------------------


def run(
    plan: Plan,
    client: Any,
    form: str,
    keys: Mapping[str, Any],
    args: Mapping[str, Any],
    *,
    max_retries: int | None = None,
    policy: RetryPolicy | None = None,
) -> RunResult:
    """One call of ``plan`` in ``form`` on a sync client (``redis.Redis`` or ``RedisCluster``)."""
    require_sync_client(client, f"{plan.name} ({form})", f"the async form ({form}_async)")
    if getattr(type(client), "luapipe_autopipeline", False):  # a thread auto-pipeline
        if form == "transaction":  # WATCH/MULTI hold a connection: one of the pool's
            return run(
                plan, client.client, form, keys, args, max_retries=max_retries, policy=policy
            )
        call = form_steps(plan, form, keys, args, max_retries, policy, cluster=client.on_cluster)
        (value, retries), round_trips = client.run_counted(call)
        return RunResult(value, form, round_trips, retries)
    driver = Driver(client)
    call = form_steps(plan, form, keys, args, max_retries, policy, cluster=driver.cluster)
    value, retries = driver.run(call)
    return RunResult(value, form, driver.round_trips, retries)


async def run_async(
    plan: Plan,
    client: Any,
    form: str,
    keys: Mapping[str, Any],
    args: Mapping[str, Any],
    *,
    max_retries: int | None = None,
    policy: RetryPolicy | None = None,
) -> RunResult:
    """The same on a ``redis.asyncio`` client (``Redis`` or ``RedisCluster``)."""
    require_async_client(client, f"{plan.name} ({form}, async)", f"the sync form ({form})")
    if getattr(type(client), "luapipe_autopipeline", False):  # an asyncio auto-pipeline
        if form == "transaction":  # WATCH/MULTI hold a connection: one of the pool's
            return await run_async(
                plan, client.client, form, keys, args, max_retries=max_retries, policy=policy
            )
        call = form_steps(plan, form, keys, args, max_retries, policy, cluster=client.on_cluster)
        (value, retries), round_trips = await client.run_counted(call)
        return RunResult(value, form, round_trips, retries)
    driver = AsyncDriver(client)
    call = form_steps(plan, form, keys, args, max_retries, policy, cluster=driver.cluster)
    value, retries = await driver.run(call)
    return RunResult(value, form, driver.round_trips, retries)


# -- reads and writes outside the forms (verify, bench) ------------------------------------


def _invariant_steps(plan: Plan, env: Env, cluster: bool) -> Steps[Any]:
    for level in range(plan.levels):
        batches = steps.read_level_steps(plan, level, env)
        yield from spread(batches, DEFAULT, cluster=cluster)
    for name, fn in plan.lets:
        env[name] = fn(env)
    return plan.invariant(env) if plan.invariant is not None else None


def invariant(plan: Plan, client: Any, keys: Mapping[str, Any], args: Mapping[str, Any]) -> Any:
    """The invariant's value now, from reads only (routed per key on a cluster); None
    without an invariant."""
    if plan.invariant is None:
        return None
    driver = Driver(client)
    return driver.run(_invariant_steps(plan, bind(plan, keys, args), driver.cluster))


def execute_routed(client: Any, commands: Sequence[Sequence[Any]]) -> tuple[list[Any], int]:
    """Send ``commands`` (one key each, at position 1) to the nodes that own their keys, one
    write per node; (replies in order, error replies as values; round trips)."""
    driver = Driver(client)
    if not commands:
        return [], 0
    replies = driver.run(routed(commands, DEFAULT, cluster=driver.cluster))
    return replies, driver.round_trips
