"""Helpers shared by the tests: what the server really saw, slow scripts, cluster clients."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Generator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import redis
import redis.asyncio.cluster as acluster
import redis.cluster

from luapipe.scripts.script import LuaScript
from luapipe.wire import sync as transport

if TYPE_CHECKING:
    from luapipe.bench.cluster import EmbeddedCluster

T = TypeVar("T")

#: Lua that spins for ARGV[1] milliseconds on the server, then returns 1. Until ARGV[1] ms
#: of wall time (TIME) or of the server's own CPU time (INFO cpu) have passed, whichever
#: comes first: from Redis 7.2 (and on Valkey 8) TIME is frozen for the whole script (the
#: server's clock is read once per command it runs) until busy-reply-threshold passes,
#: so a script that spins on TIME alone holds the server for that threshold (5 s), not for
#: ARGV[1] ms. The server's CPU time advances all along; on a busy machine it advances more
#: slowly than the wall clock, so the spin then lasts longer, never shorter.
SPIN = """
local function cpu()
  local info = redis.call('INFO', 'cpu')
  return tonumber(string.match(info, 'used_cpu_user_main_thread:([%d.]+)'))
    + tonumber(string.match(info, 'used_cpu_sys_main_thread:([%d.]+)'))
end
local ms = tonumber(ARGV[1])
local t = redis.call('TIME')
local start, cpu0 = t[1] * 1000000 + t[2], cpu()
repeat
  t = redis.call('TIME')
until t[1] * 1000000 + t[2] - start >= ms * 1000 or (cpu() - cpu0) * 1000 >= ms
return 1
"""
#: counts a run in KEYS[1], then spins for ARGV[1] ms (a writing script: unkillable)
SLOW = LuaScript.from_source(
    "slow",
    "-- Count a run, then spin for `ms` milliseconds (a writing script: unkillable).\n"
    "-- @key ran\n-- @arg ms\nredis.call('INCR', KEYS[1])" + SPIN,
)


def unwrapped(text: str) -> str:
    """``text`` with every run of white space one space: what the wrapped lines of the
    terminal report say, as one line."""
    return " ".join(text.split())


def calls(client: redis.Redis, command: str) -> int:
    """How many times the server ran ``command`` (INFO commandstats, e.g. "evalsha")."""
    stats = client.info("commandstats")
    entry = stats.get(f"cmdstat_{command.lower()}")
    return int(entry["calls"]) if entry else 0


def reset_stats(client: redis.Redis) -> None:
    client.config_resetstat()


def arun(cluster: EmbeddedCluster, body: Callable[[acluster.RedisCluster], Awaitable[T]]) -> T:
    """``await body(client)`` on a fresh asyncio cluster client, closed afterwards."""

    async def main() -> T:
        client = acluster.RedisCluster(host="127.0.0.1", port=cluster.ports[0])
        try:
            return await body(client)
        finally:
            await client.aclose()

    return asyncio.run(main())


def emptied_cluster_client(cluster: EmbeddedCluster) -> redis.cluster.RedisCluster:
    """A client on ``cluster`` with every node emptied of keys, scripts and functions."""
    client = cluster.client()
    client.flushall(target_nodes=redis.cluster.RedisCluster.PRIMARIES)
    for node in client.get_nodes():  # script caches are per node, replicas too
        client.get_redis_connection(node).script_flush()
    for node in client.get_primaries():  # functions replicate (a replica refuses FLUSH)
        client.get_redis_connection(node).function_flush()
    return client


def interleaved(client: redis.Redis, calls: Sequence[Generator[Any, Any, Any]]) -> list[Any]:
    """Run each call's I/O-free steps on its own connection, one round trip of every call in
    turn (A's first, B's first, A's second, ...): the interleaving a race needs, every run,
    instead of hoping that threads meet. Returns each call's result."""
    results: list[Any] = [None] * len(calls)
    with contextlib.ExitStack() as stack:
        sessions = [stack.enter_context(transport.session(client)) for _ in calls]
        pending = {i: next(steps) for i, steps in enumerate(calls)}
        while pending:
            for i in list(pending):
                replies = sessions[i].execute(pending[i])
                try:
                    pending[i] = calls[i].send(replies)
                except StopIteration as done:
                    results[i] = done.value
                    del pending[i]
    return results
