"""asyncio forms: ``await op.run(aclient, form, keys=..., args=...)``.

A thin driver: the forms themselves are the I/O-free steps of :mod:`luapipe.clientforms`
and :mod:`luapipe.serverforms` (the same commands, reply handling, errors and WATCH retry
policy as the sync forms); only the sending differs, through
:mod:`luapipe.aio_transport` (each batch written once, nothing re-sent after a timeout or
a cancellation: :class:`~luapipe.errors.OutcomeUnknown`). The script form is
``await reg.call(aclient, ...)``, so it also runs on ``redis.asyncio.RedisCluster``; the
other forms need a single-node ``redis.asyncio.Redis``.

::

    op = luapipe.load_operation("examples/operations/reserve_stock.toml")
    await op.run(aclient, "script", keys={"stock": "stock:42"}, args={"qty": 2})
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import redis.asyncio
from redis.asyncio.cluster import RedisCluster

from luapipe import clientforms, serverforms
from luapipe.aio import require_async_client
from luapipe.aio_transport import AsyncSession, async_session
from luapipe.forms import bind, check_form, plan_of
from luapipe.plan import Env, Plan, RunResult, Steps, wire

if TYPE_CHECKING:
    from luapipe.operation import Operation
    from luapipe.registry import AsyncClient

__all__ = ["drive_async", "run_form_async", "run_plan_async", "run_value_async"]

T = TypeVar("T")


async def drive_async(steps: Steps[T], s: AsyncSession) -> T:
    """Run ``steps`` on one async session: each yielded batch is one round trip."""
    try:
        batch = next(steps)
        while True:
            batch = steps.send(await s.execute(batch))
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
    """The async twin of :func:`luapipe.forms.run_plan`: same checks, same result."""
    require_async_client(client, f"{plan.name} ({form}, async)", f"the sync form ({form})")
    check_form(plan, client, form)
    env = bind(plan, keys, args)
    if form == "script":
        wire_keys, wire_args = serverforms.split(plan, env)
        reply = await serverforms.registry_of(plan).call(
            client, serverforms.script_name(plan), wire_keys, wire_args
        )
        return RunResult(wire(reply), form, 1)
    assert not isinstance(client, RedisCluster)  # check_form refused it
    if form == "transaction":
        return await _transaction(plan, client, env, max_retries)
    async with async_session(client) as s:
        if form == "function":
            value = await drive_async(serverforms.function_steps(plan, env, s.address), s)
            return RunResult(value, form, 1)
        value = await drive_async(clientforms.STEPS[form](plan, env), s)
        return RunResult(value, form, s.round_trips)


async def _transaction(
    plan: Plan, client: redis.asyncio.Redis, env: Env, max_retries: int
) -> RunResult:
    trips = 0
    for attempt in range(max_retries + 1):
        async with async_session(client) as s:
            try:
                ok, ret = await drive_async(clientforms.transaction_steps(plan, dict(env)), s)
            except BaseException:
                # A WATCH may still be set on this connection: never hand it back as it is.
                await s.conn.disconnect(nowait=True)
                raise
            finally:
                trips += s.round_trips
        if ok:
            return RunResult(ret, "transaction", trips, attempt)
        await asyncio.sleep(clientforms.backoff(attempt))
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
