"""Figure: ``await reg.call(aclient, ...)`` vs raw ``await aclient.evalsha(...)``.

    .venv/bin/python examples/app/bench/async_overhead.py [--url redis://...] [--calls 20000]

Without --url it starts a private redis-server. Both sides run on one asyncio client (the
pool hands back the same connection), interleaved in blocks of 500 (ABAB), so machine
noise hits both alike; the figure is the ratio of medians (target <= 1.05).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import redis.asyncio

from luapipe.bench.server import EmbeddedRedis
from luapipe.scripts.registry import ScriptRegistry
from luapipe.scripts.script import LuaScript

SCRIPT = LuaScript.from_source(
    "bump", "-- @key k\n-- @arg by\nreturn redis.call('INCRBY', KEYS[1], ARGV[1])\n"
)


async def per_call_ns(fn: Callable[[], Awaitable[Any]], n: int) -> list[int]:
    out = []
    clock = time.perf_counter_ns
    for _ in range(n):
        t0 = clock()
        await fn()
        out.append(clock() - t0)
    return out


async def measure(url: str, calls: int, block: int = 500) -> None:
    client = redis.asyncio.Redis.from_url(url)
    reg = ScriptRegistry([SCRIPT])
    await reg.load(client)
    sha = SCRIPT.sha

    def raw() -> Awaitable[Any]:
        return client.evalsha(sha, 1, "k", 1)  # type: ignore[no-any-return]

    def ours() -> Awaitable[Any]:
        return reg.call(client, "bump", keys=["k"], args=[1])  # type: ignore[no-any-return]

    for _ in range(2000):  # warm-up
        await raw()
        await ours()
    xs: list[int] = []
    ys: list[int] = []
    for i in range(max(1, calls // block)):
        first, second = (raw, ours) if i % 2 == 0 else (ours, raw)
        a = await per_call_ns(first, block)
        b = await per_call_ns(second, block)
        xs += a if first is raw else b
        ys += b if first is raw else a
    m_raw, m_ours = statistics.median(xs), statistics.median(ys)
    print(
        f"async single call, {len(xs)} each, interleaved blocks of {block}: raw "
        f"`await aclient.evalsha` median {m_raw / 1000:.1f} us, `await reg.call` median "
        f"{m_ours / 1000:.1f} us, ratio of medians {m_ours / m_raw:.3f} (target <= 1.05)"
    )
    pipe = reg.pipeline(client)
    for _ in range(10):
        pipe.call("bump", keys=["k"], args=[1])
    await pipe.execute()
    print(f"10-call async pipeline: {pipe.last_round_trips} round trip per execute")
    await client.aclose()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--url", default=None)
    ap.add_argument("--calls", type=int, default=20000)
    opts = ap.parse_args()
    if opts.url:
        asyncio.run(measure(opts.url, opts.calls))
        return
    with EmbeddedRedis() as server:
        asyncio.run(measure(server.url, opts.calls))


if __name__ == "__main__":
    main()
