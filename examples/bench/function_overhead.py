"""Figures for calling Redis Functions (issue 17): ``reg.call`` on a library's function
against raw redis-py ``fcall``, and what a rolling deploy of a generated operation costs.

    .venv/bin/python examples/bench/function_overhead.py [--url redis://...] [--calls 20000]

Without --url it starts a private redis-server. The ratio is of medians measured in the
same run, interleaved in blocks (ABAB...), so machine noise hits both sides alike; it is
repeated ``--rounds`` times and each round's ratio is printed, then the median of them.
With --url it loads a library ``luapipe_bench_fn`` and two generated ones, and deletes
them afterwards.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

from luapipe.bench.server import EmbeddedRedis
from luapipe.operations.generate import library_name
from luapipe.operations.operation import Operation
from luapipe.operations.spec import load_operation, parse_operation
from luapipe.scripts.header import Param
from luapipe.scripts.library import FunctionLibrary, LuaFunction
from luapipe.scripts.registry import ScriptRegistry

HERE = Path(__file__).resolve().parent
LIBRARY = FunctionLibrary.of(
    "luapipe_bench_fn",
    "#!lua name=luapipe_bench_fn\n"
    "redis.register_function('luapipe_bench_bump', function(keys, args)\n"
    "  return redis.call('INCRBY', keys[1], args[1])\n"
    "end)\n",
    [LuaFunction("luapipe_bench_bump", "luapipe_bench_fn", (Param("k"),), (Param("by"),))],
)


def per_call_ns(fn: Callable[[], Any], n: int) -> list[int]:
    import time

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


def calls_of(client: redis.Redis, command: str) -> int:
    entry = client.info("commandstats").get(f"cmdstat_{command}")
    return int(entry["calls"]) if entry else 0


def overhead(client: redis.Redis, calls: int, rounds: int) -> None:
    reg = ScriptRegistry([], libraries=[LIBRARY])
    client.function_load(LIBRARY.source, replace=True)
    name = "luapipe_bench_bump"
    for _ in range(2000):  # warm-up: the pool's connection, both code paths
        client.fcall(name, 1, "k", 1)
        reg.call(client, name, keys=["k"], args=[1])
    ratios = []
    for r in range(rounds):
        raw, ours = interleaved(
            lambda: client.fcall(name, 1, "k", 1),
            lambda: reg.call(client, name, keys=["k"], args=[1]),
            calls,
        )
        m_raw, m_ours = statistics.median(raw), statistics.median(ours)
        ratios.append(m_ours / m_raw)
        print(
            f"round {r + 1}: {len(raw)} calls each: raw fcall median {m_raw / 1000:.1f} us, "
            f"reg.call median {m_ours / 1000:.1f} us, ratio {m_ours / m_raw:.3f}"
        )
    print(
        f"reg.call / raw fcall, median of {rounds} rounds: {statistics.median(ratios):.3f} "
        "(target <= 1.05)"
    )
    client.function_delete(LIBRARY.name)


def rolling_deploy(client: redis.Redis) -> None:
    """100 calls alternating between two versions of one spec, as two application versions
    side by side during a rolling deploy: each version's library is loaded once."""
    spec = HERE.parent / "operations" / "reserve_stock.toml"
    v1: Operation = load_operation(spec)
    v2: Operation = parse_operation(
        spec.read_text().replace('ok = "available >= qty"', 'ok = "available > qty"'), str(spec)
    )
    client.set("bench:stock", 1_000_000)
    client.config_resetstat()
    for i in range(100):
        op = v1 if i % 2 == 0 else v2
        op.run(client, "function", keys={"stock": "bench:stock"}, args={"qty": 1})
    loads, fcalls = calls_of(client, "function|load"), calls_of(client, "fcall")
    libs = sorted(
        lib["library_name"] if isinstance(lib, dict) else lib[lib.index("library_name") + 1]
        for lib in client.function_list()
    )
    print(
        f"100 alternating v1/v2 function-form calls: FUNCTION LOAD {loads} (target <= 2), "
        f"FCALL {fcalls}; libraries now {libs}"
    )
    for op in (v1, v2):
        client.function_delete(library_name(op))
    client.delete("bench:stock")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url")
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    opts = parser.parse_args()

    def run(client: redis.Redis) -> None:
        version = client.info("server")["redis_version"]
        print(f"redis-server {version}, redis-py {redis.__version__}")
        overhead(client, opts.calls, opts.rounds)
        rolling_deploy(client)

    if opts.url:
        run(redis.Redis.from_url(opts.url, decode_responses=True))
        return
    with EmbeddedRedis() as server:
        run(redis.Redis(host=server.host, port=server.port, decode_responses=True))


if __name__ == "__main__":
    main()
