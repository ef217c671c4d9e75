"""The token bucket of token_bucket.lua, written in Python as a team would: the forms that
``luapipe bench token_bucket.lua`` times beside the script (see token_bucket.bench.toml).

A Python form takes a redis-py client and the call's keys and args, as the script gets
them, and returns what the script returns: ``[taken (1 or 0), tokens left]``.
"""

from __future__ import annotations

from typing import Any

import redis
import redis.asyncio


def _decide(
    held: list[Any], capacity: int, rate: float, now: int, cost: int
) -> tuple[int, int, int, bool]:
    """What the script computes: (add, taken, tokens left, whether ts moves)."""
    tokens = int(held[0]) if held[0] is not None else capacity
    ts = int(held[1]) if held[1] is not None else now
    add = min(capacity - tokens, int((now - ts) * rate // 1000)) if now > ts else 0
    taken = 1 if tokens + add >= cost else 0
    return add, taken, tokens + add - taken * cost, add > 0 or held[1] is None


def take(client: redis.Redis, keys: list[str], args: list[Any]) -> list[int]:
    """Read, decide, write: two round trips, not atomic (two callers can take one token)."""
    capacity, rate, now, cost = int(args[0]), float(args[1]), int(args[2]), int(args[3])
    held = client.hmget(keys[0], "tokens", "ts")
    add, taken, left, moved = _decide(held, capacity, rate, now, cost)
    pipe = client.pipeline(transaction=False)
    if held[0] is None:
        pipe.hsetnx(keys[0], "tokens", capacity)
    pipe.hincrby(keys[0], "tokens", add - taken * cost)
    if moved:
        pipe.hset(keys[0], "ts", now)
    pipe.execute()
    return [taken, left]


def take_watch(client: redis.Redis, keys: list[str], args: list[Any]) -> list[int]:
    """The same under WATCH/MULTI/EXEC, retried when another client got in between."""
    capacity, rate, now, cost = int(args[0]), float(args[1]), int(args[2]), int(args[3])
    with client.pipeline(transaction=True) as pipe:
        while True:
            try:
                pipe.watch(keys[0])
                held = pipe.hmget(keys[0], "tokens", "ts")
                _, taken, left, moved = _decide(held, capacity, rate, now, cost)
                pipe.multi()
                pipe.hset(keys[0], "tokens", left)
                if moved:
                    pipe.hset(keys[0], "ts", now)
                pipe.execute()
                return [taken, left]
            except redis.WatchError:
                continue


async def take_async(client: redis.asyncio.Redis, keys: list[str], args: list[Any]) -> list[int]:
    """``take`` on an asyncio client (what an asyncio web service would write)."""
    capacity, rate, now, cost = int(args[0]), float(args[1]), int(args[2]), int(args[3])
    held = await client.hmget(keys[0], "tokens", "ts")
    add, taken, left, moved = _decide(held, capacity, rate, now, cost)
    pipe = client.pipeline(transaction=False)
    if held[0] is None:
        pipe.hsetnx(keys[0], "tokens", capacity)
    pipe.hincrby(keys[0], "tokens", add - taken * cost)
    if moved:
        pipe.hset(keys[0], "ts", now)
    await pipe.execute()
    return [taken, left]


def tokens_in_range(client: redis.Redis, keys: list[str], args: list[Any]) -> bool:
    """The invariant: a bucket never holds fewer than 0 tokens, nor more than its capacity."""
    held = client.hget(keys[0], "tokens")
    return held is None or 0 <= int(held) <= int(args[0])
