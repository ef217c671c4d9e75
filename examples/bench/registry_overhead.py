"""Figures for the script registry (issue 2): overhead vs raw redis-py, round trips per
pipeline, and SCRIPT EXISTS/LOAD seen by the server in steady state.

    .venv/bin/python examples/bench/registry_overhead.py [--url redis://...] [--calls 10000]

Without --url it starts a private redis-server. Ratios are of medians measured in the same
run, interleaved in blocks (ABAB), so machine noise hits both sides alike.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import redis

from luapipe.bench.server import EmbeddedRedis
from luapipe.scripts.registry import ScriptRegistry
from luapipe.scripts.script import LuaScript

SCRIPT = LuaScript.from_source(
    "bump", "-- @key k\n-- @arg by\nreturn redis.call('INCRBY', KEYS[1], ARGV[1])\n"
)


def per_call_ns(fn: Callable[[], Any], n: int) -> list[int]:
    out = []
    clock = time.perf_counter_ns
    for _ in range(n):
        t0 = clock()
        fn()
        out.append(clock() - t0)
    return out


def interleaved(
    a: Callable[[], Any], b: Callable[[], Any], total: int, block: int = 500
) -> tuple[list[int], list[int]]:
    xs: list[int] = []
    ys: list[int] = []
    for _ in range(max(1, total // block)):
        xs += per_call_ns(a, block)
        ys += per_call_ns(b, block)
    return xs, ys


def commandstats(client: redis.Redis) -> dict[str, int]:
    return {
        k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in client.info("commandstats").items()
    }


def run(client: redis.Redis, calls: int) -> None:
    reg = ScriptRegistry([SCRIPT])
    reg.load(client)
    sha = SCRIPT.sha
    # single connection for both sides: the pool hands back the same socket each time
    for _ in range(1000):  # warm-up
        client.evalsha(sha, 1, "k", 1)
        reg.call(client, "bump", keys=["k"], args=[1])
    raw, ours = interleaved(
        lambda: client.evalsha(sha, 1, "k", 1),
        lambda: reg.call(client, "bump", keys=["k"], args=[1]),
        calls,
    )
    m_raw, m_ours = statistics.median(raw), statistics.median(ours)
    print(
        f"single call, {len(raw)} each: raw evalsha median {m_raw / 1000:.1f} us, "
        f"reg.call median {m_ours / 1000:.1f} us, ratio {m_ours / m_raw:.3f} (target <= 1.05)"
    )

    # 10-call script pipelines: luapipe vs redis-py register_script in a pipeline
    script = client.register_script(SCRIPT.source)
    pipe = reg.pipeline(client)

    def ours_pipe() -> None:
        for _ in range(10):
            pipe.call("bump", keys=["k"], args=[1])
        pipe.execute()

    def redis_py_pipe() -> None:
        p = client.pipeline(transaction=False)
        for _ in range(10):
            script(keys=["k"], args=[1], client=p)
        p.execute()

    for _ in range(200):
        ours_pipe()
        redis_py_pipe()
    client.config_resetstat()
    for _ in range(100):
        ours_pipe()
    ours_stats = commandstats(client)
    client.config_resetstat()
    for _ in range(100):
        redis_py_pipe()
    rp_stats = commandstats(client)
    a, b = interleaved(ours_pipe, redis_py_pipe, min(calls, 4000), block=200)
    print(
        "10-call script pipeline: round trips per execute luapipe "
        f"{pipe.last_round_trips}, redis-py {1 + rp_stats.get('script|exists', 0) / 100:.0f} "
        f"(SCRIPT EXISTS per execute: luapipe {ours_stats.get('script|exists', 0) / 100:.0f}, "
        f"redis-py {rp_stats.get('script|exists', 0) / 100:.0f}); median latency luapipe "
        f"{statistics.median(a) / 1000:.1f} us, redis-py {statistics.median(b) / 1000:.1f} us, "
        f"ratio {statistics.median(a) / statistics.median(b):.3f}"
    )

    client.config_resetstat()
    for _ in range(1000):
        ours_pipe()
    s = commandstats(client)
    print(
        "1,000 steady-state pipeline executes: SCRIPT EXISTS "
        f"{s.get('script|exists', 0)}, SCRIPT LOAD {s.get('script|load', 0)}, "
        f"EVALSHA {s.get('evalsha', 0)} (target 0, 0, 10000)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url")
    parser.add_argument("--calls", type=int, default=10_000)
    opts = parser.parse_args()
    if opts.url:
        run(redis.Redis.from_url(opts.url), opts.calls)
        return
    with EmbeddedRedis() as server:
        client = redis.Redis(host=server.host, port=server.port)
        protocol = client.connection_pool.connection_kwargs.get("protocol") or "default"
        info = client.info("server")  # Valkey: server_name and valkey_version
        name = info.get("server_name") or "redis"
        version = info.get("valkey_version") or info["redis_version"]
        print(
            f"{name}-server {version} on {server.address}, redis-py {redis.__version__}, "
            f"protocol {protocol}"
        )
        run(client, opts.calls)


if __name__ == "__main__":
    main()
