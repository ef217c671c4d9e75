"""asyncio support: the registry's calls and pipelines on ``redis.asyncio`` clients.

::

    aclient = redis.asyncio.Redis(...)
    await reg.call(aclient, "rate_limit_fixed", keys=["rl:alice"], args=[10, 60])
    async with reg.pipeline(aclient) as p:
        p.call("check_and_decr", keys=["stock:42"], args=[1])
        p.incr("orders")
        results = await p.execute()

Same semantics as the sync path, and the same logic:
:class:`luapipe.scripts.protocol.Plan` decides what to send and what replies mean; only the
transport (:mod:`luapipe.wire.aio`) differs.
EVALSHA in steady state (one round trip), exact-NOSCRIPT recovery that runs every call once,
EVAL inside MULTI for transactions, nothing re-sent after a timeout or a cancellation.
``redis.asyncio.cluster.RedisCluster`` is routed by key slot (:mod:`luapipe.scripts.aio_cluster`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import redis
import redis.asyncio
from redis.asyncio.cluster import RedisCluster

from luapipe.errors import CallArgumentError, LuapipeError, ServerError, redis_class_of_reply
from luapipe.scripts.protocol import (
    Plan,
    ScriptCall,
    ask_target,
    cached_by_eval,
    check_loaded,
    script_error,
)
from luapipe.scripts.registry import CLUSTER_HINT, NodeStatus, ScriptState, killed_by
from luapipe.scripts.script import Value
from luapipe.wire.aio import AsyncSession, acquire, async_session
from luapipe.wire.sync import ReplyError, raise_for

if TYPE_CHECKING:
    from luapipe.scripts.registry import ScriptRegistry

__all__ = [
    "AsyncScriptPipeline",
    "Moved",
    "call_async",
    "flush_async",
    "kill_async",
    "load_async",
    "require_async_client",
    "require_sync_client",
    "run_plan",
    "status_async",
]


# -- which client is which ----------------------------------------------------------------
def _is_async(client: object) -> bool:
    return isinstance(client, redis.asyncio.Redis | RedisCluster)


def require_async_client(client: object, what: str, sync_hint: str) -> None:
    """A one-line :class:`CallArgumentError` unless ``client`` is a ``redis.asyncio`` one."""
    if not _is_async(client):
        raise CallArgumentError(
            f"{what} needs a redis.asyncio client (redis.asyncio.Redis or RedisCluster), "
            f"got {type(client).__module__}.{type(client).__name__}; with a sync client "
            f"use {sync_hint}"
        )


def require_sync_client(client: object, what: str, async_hint: str) -> None:
    """A one-line :class:`CallArgumentError` if ``client`` is a ``redis.asyncio`` one.

    For the registry's sync-only methods, e.g. ``require_sync_client(client, "reg.load",
    "await luapipe.scripts.aio.load_async(reg, client)")``.
    """
    if _is_async(client):
        raise CallArgumentError(
            f"{what} needs a sync client (redis.Redis or RedisCluster), got "
            f"{type(client).__module__}.{type(client).__name__}; with a redis.asyncio "
            f"client use {async_hint}"
        )


# -- one node -------------------------------------------------------------------------------
class Moved(LuapipeError):
    """A cluster redirect (MOVED, ASK, TRYAGAIN, CLUSTERDOWN): the command did not run on
    this node; cluster routing refreshes the slot map and sends it again (after an ASK, it
    sends it at once to the node named, after ASKING)."""

    @property
    def ask(self) -> str | None:
        """``host:port`` of an ``ASK`` reply (the key's slot is being migrated and this key
        has moved already); None for any other redirect."""
        return ask_target(str(self))


def _check_moved(reply: Any) -> None:
    if isinstance(reply, ReplyError) and reply.is_redirect:
        raise Moved(reply.text)


async def run_plan(
    plan: Plan, s: AsyncSession, *, redirects: bool = False, asking: bool = False
) -> Plan:
    """Drive ``plan`` on one connection: each batch in one round trip until it is done.

    With ``redirects`` a redirect reply raises :class:`Moved` before the plan sees it
    (nothing of that command ran; the caller re-routes). Only for single-call plans.
    ``asking``: the node was named by an ASK redirect; every batch goes after ASKING.
    """
    batch = plan.start()
    while batch:
        replies = await s.execute(batch, asking=asking)
        if redirects:
            for reply in replies:
                _check_moved(reply)
        batch = plan.feed(replies)
    return plan


async def call_on(
    registry: ScriptRegistry, s: AsyncSession, call: ScriptCall, *, asking: bool = False
) -> Any:
    """One script call on one connection: EVALSHA, or load + EVALSHA via the shared Plan.

    ``asking``: ``s`` is the node an ASK redirect named; the call is sent after ASKING."""
    script = call.script
    node = s.address
    if registry.known.has(node, script.sha):
        keys, args = call.keys, call.args
        verb = "EVALSHA_RO" if script.read_only else "EVALSHA"
        cmd = (verb, script.sha, len(keys), *keys, *args)
        reply = (await s.execute([cmd], asking=True))[0] if asking else await s.send_one(cmd)
        if reply.__class__ is not ReplyError:
            return reply
        if not reply.is_noscript:
            _check_moved(reply)
            raise script_error(script, reply.text)
        registry.known.discard(node, script.sha)
        # Once, as EVAL: a NOSCRIPT answer to it can only be the script's own error.
        (reply,) = await s.execute([call.eval()], asking=asking)
        if cached_by_eval(reply):
            registry.known.add(node, script.sha)
        if isinstance(reply, ReplyError):
            _check_moved(reply)
            raise script_error(script, reply.text)
        return reply
    plan = registry.plan([call], node, transaction=False)
    await run_plan(plan, s, redirects=True, asking=asking)
    return _raise_or_return(plan.results[0])


def _raise_or_return(result: Any) -> Any:
    if isinstance(result, LuapipeError):
        raise result
    return result


_POOLED: set[type] = set()  # client classes known to be plain (non-cluster) redis.asyncio.Redis


async def call_async(
    registry: ScriptRegistry,
    client: Any,
    name: str,
    keys: Sequence[Value] = (),
    args: Sequence[Value] = (),
) -> Any:
    """``await reg.call(aclient, ...)``: one script call, at most once, NOSCRIPT recovered."""
    script = registry[name]
    keys_t: tuple[Value, ...] = tuple(keys)
    args_t: tuple[Value, ...] = tuple(args)
    script.check_call(keys_t, args_t)
    call = ScriptCall(script, keys_t, args_t)
    if client.__class__ not in _POOLED:
        if isinstance(client, RedisCluster):
            from luapipe.scripts.aio_cluster import cluster_call

            return await cluster_call(registry, client, call)
        require_async_client(client, "call_async", "reg.call(client, ...)")
        _POOLED.add(client.__class__)
    try:
        if client.single_connection_client:
            async with async_session(client) as s:
                return await call_on(registry, s, call)
        # The hot path, flattened (no context manager): same steps as async_session.
        pool = client.connection_pool
        conn = await acquire(pool)
        s = AsyncSession(client, conn)
        try:
            return await call_on(registry, s, call)
        finally:
            await s.close_if_dirty()
            await pool.release(conn)
    except Moved as exc:  # a plain client at a cluster node: as the sync reg.call says it
        raise ServerError(
            f"{exc}: this server is a cluster node; {CLUSTER_HINT}",
            like=redis_class_of_reply(str(exc)),
        ) from None


# -- load / status / flush ----------------------------------------------------------------
async def _sessions(client: Any) -> list[Any]:
    """One session factory per node: the client itself, or every node of a cluster."""
    if isinstance(client, RedisCluster):
        from luapipe.scripts.aio_cluster import node_sessions

        return await node_sessions(client)
    return [async_session(client)]


async def load_async(registry: ScriptRegistry, client: Any) -> dict[str, str]:
    """SCRIPT LOAD every script (one round trip per node); returns {name: sha}."""
    require_async_client(client, "load_async", "reg.load(client)")
    scripts = list(registry)
    for factory in await _sessions(client):
        async with factory as s:
            replies = await s.execute([("SCRIPT", "LOAD", sc.source) for sc in scripts])
            for sc, reply in zip(scripts, replies, strict=True):
                err = check_loaded(sc, reply)
                if err is not None:
                    raise err
                registry.known.add(s.address, sc.sha)
    return {sc.name: sc.sha for sc in scripts}


async def status_async(registry: ScriptRegistry, client: Any) -> list[NodeStatus]:
    """SCRIPT EXISTS for every script, per node."""
    require_async_client(client, "status_async", "reg.status(client)")
    scripts = list(registry)
    out: list[NodeStatus] = []
    for factory in await _sessions(client):
        async with factory as s:
            if not scripts:
                out.append(NodeStatus(s.address, ()))
                continue
            (reply,) = await s.execute([("SCRIPT", "EXISTS", *[sc.sha for sc in scripts])])
            flags = raise_for(reply)
            states = tuple(
                ScriptState(sc.name, sc.sha, bool(f)) for sc, f in zip(scripts, flags, strict=True)
            )
            out.append(NodeStatus(s.address, states))
    return out


async def flush_async(registry: ScriptRegistry, client: Any) -> list[str]:
    """SCRIPT FLUSH on every node (all applications' scripts); returns the nodes."""
    require_async_client(client, "flush_async", "reg.flush(client)")
    nodes: list[str] = []
    for factory in await _sessions(client):
        async with factory as s:
            raise_for((await s.execute([("SCRIPT", "FLUSH")]))[0])
            registry.known.forget(s.address)
            nodes.append(s.address)
    return nodes


async def kill_async(registry: ScriptRegistry, client: Any) -> list[str]:
    """SCRIPT KILL on every node; returns the nodes where a script was killed."""
    require_async_client(client, "kill_async", "reg.kill(client)")
    killed: list[str] = []
    for factory in await _sessions(client):
        async with factory as s:
            if killed_by((await s.execute([("SCRIPT", "KILL")]))[0], s.address):
                killed.append(s.address)
    return killed


from luapipe.scripts.aio_pipeline import AsyncScriptPipeline  # noqa: E402  (re-exported)
