"""asyncio forms: ``await op.run(aclient, form, keys=..., args=...)``.

A thin driver: the forms themselves are the I/O-free steps of :mod:`luapipe.operations.clientforms`
and :mod:`luapipe.operations.serverforms` (the same commands, reply handling, errors and WATCH retry
policy as the sync forms); only the sending differs, through
:mod:`luapipe.wire.aio` (each batch written once, nothing re-sent after a timeout or
a cancellation: :class:`~luapipe.errors.OutcomeUnknown`). The script form is
``await reg.call(aclient, ...)``; on ``redis.asyncio.RedisCluster`` the other forms are
routed by key slot (:mod:`luapipe.operations.aio_clusterforms`, the twin of
:mod:`luapipe.operations.clusterforms`).

::

    op = luapipe.load_operation("examples/operations/reserve_stock.toml")
    await op.run(aclient, "script", keys={"stock": "stock:42"}, args={"qty": 2})
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, TypeVar

from redis.asyncio.cluster import RedisCluster

from luapipe.operations import clientforms, serverforms
from luapipe.operations.forms import bind, check_form, plan_of
from luapipe.operations.plan import Env, Plan, RunResult, Steps, wire
from luapipe.wire.aio import AsyncSession, async_session
from luapipe.wire.clients import require_async_client
from luapipe.wire.policy import DEFAULT

if TYPE_CHECKING:
    from luapipe.operations.operation import Operation
    from luapipe.wire.clients import AsyncClient

__all__ = [
    "drive_async",
    "run_form_async",
    "run_plan_async",
    "run_value_async",
    "script_async",
    "transaction_async",
]

T = TypeVar("T")


async def drive_async(steps: Steps[T], s: AsyncSession, *, asking: bool = False) -> T:
    """Run ``steps`` on one async session: each yielded batch is one round trip (``asking``:
    on the node an ASK redirect named)."""
    try:
        batch = next(steps)
        while True:
            batch = steps.send(await s.execute(batch, asking=asking))
    except StopIteration as done:
        result: T = done.value
        return result


async def run_plan_async(
    plan: Plan,
    client: AsyncClient,
    form: str,
    keys: Mapping[str, Any],
    args: Mapping[str, Any],
    *,
    max_retries: int = 20,
) -> RunResult:
    """The async twin of :func:`luapipe.operations.forms.run_plan`: same checks, same result."""
    require_async_client(client, f"{plan.name} ({form}, async)", f"the sync form ({form})")
    check_form(plan, client, form)
    env = bind(plan, keys, args)
    if form == "script":
        return RunResult(await script_async(plan, client, env), form, 1)
    if isinstance(client, RedisCluster):  # every other form, routed by slot
        from luapipe.operations.aio_clusterforms import run_cluster_async

        return await run_cluster_async(plan, client, form, env, max_retries)
    if form == "transaction":
        return await transaction_async(plan, lambda: async_session(client), env, max_retries)
    async with async_session(client) as s:
        if form == "function":
            value = await drive_async(serverforms.function_steps(plan, env, s.address), s)
            return RunResult(value, form, 1)
        value = await drive_async(clientforms.STEPS[form](plan, env), s)
        return RunResult(value, form, s.round_trips)


async def script_async(plan: Plan, client: AsyncClient, env: Env) -> Any:
    """EVALSHA through the registry (``reg.call`` routes a cluster client by slot)."""
    wire_keys, wire_args = serverforms.split(plan, env)
    reply = await serverforms.registry_of(plan).call(
        client, serverforms.script_name(plan), wire_keys, wire_args
    )
    return wire(reply)


async def transaction_async(
    plan: Plan,
    open_session: Callable[[], AbstractAsyncContextManager[AsyncSession]],
    env: Env,
    max_retries: int,
    *,
    asking: bool = False,
) -> RunResult:
    """WATCH/MULTI/EXEC attempts, each on a session from ``open_session`` (one node)."""
    trips = 0
    for attempt in range(max_retries + 1):
        async with open_session() as s:
            try:
                steps = clientforms.transaction_steps(plan, dict(env))
                ok, ret = await drive_async(steps, s, asking=asking)
            except BaseException:
                # A WATCH may still be set on this connection: never hand it back as it is.
                await s.conn.disconnect(nowait=True)
                raise
            finally:
                trips += s.round_trips
        if ok:
            return RunResult(ret, "transaction", trips, attempt)
        await asyncio.sleep(DEFAULT.watch_delay(attempt))
    raise clientforms.aborted(plan, max_retries)


async def run_form_async(
    op: Operation,
    client: AsyncClient,
    form: str,
    keys: Mapping[str, Any],
    args: Mapping[str, Any],
    *,
    max_retries: int = 20,
) -> RunResult:
    """``await op.run_detailed(aclient, ...)``."""
    return await run_plan_async(plan_of(op), client, form, keys, args, max_retries=max_retries)


async def run_value_async(
    op: Operation,
    client: AsyncClient,
    form: str,
    keys: Mapping[str, Any],
    args: Mapping[str, Any],
) -> Any:
    """``await op.run(aclient, ...)``: the reply only."""
    return (await run_form_async(op, client, form, keys, args)).value
