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

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from redis.asyncio.cluster import RedisCluster

from luapipe.operations import clientforms, serverforms
from luapipe.operations.aio_clusterforms import run_cluster_async, transaction_async
from luapipe.operations.forms import check_form
from luapipe.operations.plan import (
    Env,
    Generated,
    Plan,
    RunResult,
    bind,
    drive_async,
    plan_of,
    wire,
)
from luapipe.wire.aio import async_session
from luapipe.wire.clients import require_async_client

if TYPE_CHECKING:
    from luapipe.wire.clients import AsyncClient

__all__ = [
    "drive_async",
    "run_form_async",
    "run_plan_async",
    "run_value_async",
    "script_async",
    "transaction_async",
]


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


async def run_form_async(
    op: Generated,
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
    op: Generated,
    client: AsyncClient,
    form: str,
    keys: Mapping[str, Any],
    args: Mapping[str, Any],
) -> Any:
    """``await op.run(aclient, ...)``: the reply only."""
    return (await run_form_async(op, client, form, keys, args)).value
