"""Figures for the auto-pipeline (issue 20): many requests in flight, who wins?

    .venv/bin/python examples/bench/autopipeline.py [--url redis://...] [--tasks 1,8,64,256]
        [--rtt 0,1] [--duration 1.5] [--rounds 3] [--no-peers]

One script doing ``INCRBY`` on a key per task, as in the issue's table, called by N
concurrent asyncio tasks (Node: promises), closed loop, at each RTT (0: direct; otherwise
through luapipe's delay proxy, calibrated). Each case prints calls/s and the p50/p99 of a
call's latency:

- ``reg.call``: plain concurrent ``await reg.call(aclient, ...)`` (a pool connection each);
- ``autopipeline reg.call``: the same calls through ``luapipe.autopipeline(aclient)``;
- ``autopipeline INCRBY``: the command itself through the auto-pipeline (script or command?);
- ``explicit pipeline``: one task, luapipe pipelines of N calls (a call's latency is its
  pipeline's);
- ``threads reg.call`` / ``threads autopipeline``: N threads on a sync client, without and
  with ``luapipe.autopipeline(client)`` (does it pay under the GIL?);
- ``coredis evalsha`` (installed into a temporary venv, not a project dependency) and
  ``ioredis evalsha`` / ``ioredis autopipelining`` when ``node`` is on the machine
  (installed into a temporary directory with npm).

Without ``--url`` it starts a private redis-server. Rounds are interleaved (each round runs
every case once, in a rotated order); calls/s is the median of the rounds, latencies pool
every round's calls. The machine's load average is printed beside the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
import redis.asyncio

import luapipe
from luapipe.bench.rttproxy import RttProxy, calibrate
from luapipe.bench.server import EmbeddedRedis
from luapipe.scripts.registry import ScriptRegistry
from luapipe.scripts.script import LuaScript

SOURCE = "return redis.call('INCRBY', KEYS[1], ARGV[1])\n"
SCRIPT = LuaScript.from_source("bump", "-- @key k\n-- @arg by\n" + SOURCE)


@dataclass
class Figures:
    rates: list[float] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)  # seconds
    note: str = ""

    def add(self, calls: int, elapsed: float, lat: list[float]) -> None:
        self.rates.append(calls / elapsed if elapsed > 0 else 0.0)
        self.latencies.extend(lat)

    def rate(self) -> float:
        return statistics.median(self.rates) if self.rates else 0.0

    def pct(self, q: float) -> float:
        if not self.latencies:
            return float("nan")
        lat = sorted(self.latencies)
        return lat[min(len(lat) - 1, int(q * len(lat)))] * 1e6


# -- the Python cases -----------------------------------------------------------------------


async def closed_loop(
    tasks: int, duration: float, call: Callable[[int], Awaitable[Any]]
) -> tuple[int, float, list[float]]:
    """``tasks`` coroutines calling ``call(task)`` back to back for ``duration`` seconds."""
    lat: list[float] = []
    clock = time.perf_counter
    stop = clock() + duration

    async def one(i: int) -> int:
        n = 0
        while True:
            t = clock()
            if t >= stop:
                return n
            await call(i)
            lat.append(clock() - t)
            n += 1

    t0 = clock()
    done = await asyncio.gather(*(one(i) for i in range(tasks)))
    return sum(done), clock() - t0, lat


async def case_async(kind: str, host: str, port: int, tasks: int, duration: float) -> Any:
    client = redis.asyncio.Redis(host=host, port=port, max_connections=max(tasks, 10) + 4)
    reg = ScriptRegistry([SCRIPT])
    await reg.load(client)
    ap = luapipe.autopipeline(client)
    try:
        if kind == "reg.call":

            async def call(i: int) -> Any:
                return await reg.call(client, "bump", keys=[f"k{i}"], args=[1])

        elif kind == "autopipeline reg.call":

            async def call(i: int) -> Any:
                return await reg.call(ap, "bump", keys=[f"k{i}"], args=[1])

        elif kind == "autopipeline INCRBY":

            async def call(i: int) -> Any:
                return await ap.incrby(f"k{i}", 1)

        else:  # explicit pipeline: one task, pipelines of `tasks` calls
            pipe = reg.pipeline(client)

            async def batch(i: int) -> Any:
                for j in range(tasks):
                    pipe.call("bump", keys=[f"k{j}"], args=[1])
                return await pipe.execute()

            for _ in range(20):
                await batch(0)
            calls, elapsed, lat = await closed_loop(1, duration, batch)
            return calls * tasks, elapsed, lat * 1  # a call waits for its whole pipeline
        for _ in range(200 // max(1, tasks) + 2):  # warm up: connections, scripts
            await asyncio.gather(*(call(i) for i in range(tasks)))
        return await closed_loop(tasks, duration, call)
    finally:
        await ap.aclose()
        await client.aclose()


def case_threads(kind: str, host: str, port: int, tasks: int, duration: float) -> Any:
    client = redis.Redis(host=host, port=port, max_connections=tasks + 4)
    reg = ScriptRegistry([SCRIPT])
    reg.load(client)
    target: Any = luapipe.autopipeline(client) if kind == "threads autopipeline" else client
    lat: list[list[float]] = [[] for _ in range(tasks)]
    counts = [0] * tasks
    clock = time.perf_counter
    start = threading.Barrier(tasks + 1)
    stop = [0.0]

    def run(i: int) -> None:
        key = f"k{i}"
        for _ in range(20):
            reg.call(target, "bump", keys=[key], args=[1])
        start.wait()
        mine = lat[i]
        while True:
            t = clock()
            if t >= stop[0]:
                break
            reg.call(target, "bump", keys=[key], args=[1])
            mine.append(clock() - t)
        counts[i] = len(mine)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(tasks)]
    for t in threads:
        t.start()
    stop[0] = clock() + duration + 0.05
    start.wait()
    t0 = clock()
    for t in threads:
        t.join()
    elapsed = clock() - t0
    if target is not client:
        target.close()
    client.close()
    return sum(counts), elapsed, [x for per in lat for x in per]


# -- the peers -------------------------------------------------------------------------------

COREDIS_CASE = r"""
import asyncio, json, sys, time
import coredis
host, sha = sys.argv[1], sys.argv[5]
port, tasks, duration = int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
async def main():
    async with coredis.Redis(host=host, port=port) as client:  # coredis 6: a context
        lat = []
        clock = time.perf_counter
        async def one(i, until, record):
            n = 0
            while True:
                t = clock()
                if t >= until:
                    return n
                await client.evalsha(sha, [f"k{i}"], [1])
                if record:
                    lat.append(clock() - t)
                n += 1
        warm = clock() + 0.3
        await asyncio.gather(*(one(i, warm, False) for i in range(tasks)))
        stop = clock() + duration
        t0 = clock()
        done = await asyncio.gather(*(one(i, stop, True) for i in range(tasks)))
        print(json.dumps({"calls": sum(done), "elapsed": clock() - t0, "lat": lat}))
asyncio.run(main())
"""

IOREDIS_CASE = r"""
const Redis = require("ioredis");
const [host, port, tasks, duration, sha, auto] = process.argv.slice(2);
async function main() {
  const client = new Redis({ host, port: +port, enableAutoPipelining: auto === "1" });
  const lat = [];
  const clock = () => Number(process.hrtime.bigint()) / 1e9;
  async function one(i, until, record) {
    let n = 0;
    for (;;) {
      const t = clock();
      if (t >= until) return n;
      await client.evalsha(sha, 1, "k" + i, 1);
      if (record) lat.push(clock() - t);
      n++;
    }
  }
  const ids = [...Array(+tasks).keys()];
  let until = clock() + 0.3;
  await Promise.all(ids.map((i) => one(i, until, false)));
  until = clock() + +duration;
  const t0 = clock();
  const done = await Promise.all(ids.map((i) => one(i, until, true)));
  const calls = done.reduce((a, b) => a + b, 0);
  console.log(JSON.stringify({ calls, elapsed: clock() - t0, lat }));
  client.disconnect();
}
main();
"""


class Peers:
    """coredis in a temporary venv, ioredis in a temporary npm directory (when node is on
    the machine); removed at exit."""

    def __init__(self, enabled: bool) -> None:
        self.dir = tempfile.mkdtemp(prefix="luapipe-peers-")
        self.python: str | None = None
        self.node: str | None = None
        self.notes: list[str] = []
        if not enabled:
            return
        venv = Path(self.dir) / "venv"
        try:
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
            pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "coredis"]
            subprocess.run(pip, check=True, capture_output=True, timeout=600)
            self.python = str(venv / "bin" / "python")
            (Path(self.dir) / "coredis_case.py").write_text(COREDIS_CASE)
        except (subprocess.SubprocessError, OSError) as exc:
            self.notes.append(f"coredis not measured: {exc}")
        node, npm = shutil.which("node"), shutil.which("npm")
        if node is None or npm is None:
            self.notes.append("ioredis not measured: node/npm not on PATH")
            return
        try:
            cmd = [npm, "install", "--silent", "--no-audit", "--no-fund", "--prefix", self.dir]
            subprocess.run([*cmd, "ioredis@5"], check=True, capture_output=True, timeout=600)
            (Path(self.dir) / "ioredis_case.js").write_text(IOREDIS_CASE)
            self.node = node
        except (subprocess.SubprocessError, OSError) as exc:
            self.notes.append(f"ioredis not measured: {exc}")

    def kinds(self) -> list[str]:
        out = ["coredis evalsha"] if self.python else []
        if self.node:
            out += ["ioredis evalsha", "ioredis autopipelining"]
        return out

    def run(self, kind: str, host: str, port: int, tasks: int, duration: float) -> Any:
        args = [host, str(port), str(tasks), str(duration), SCRIPT.sha]
        if kind.startswith("coredis"):
            assert self.python is not None
            cmd = [self.python, str(Path(self.dir) / "coredis_case.py"), *args]
        else:
            assert self.node is not None
            auto = "1" if kind.endswith("autopipelining") else "0"
            cmd = [self.node, str(Path(self.dir) / "ioredis_case.js"), *args, auto]
        env = {**os.environ, "NODE_PATH": str(Path(self.dir) / "node_modules")}
        out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env, timeout=120)
        data = json.loads(out.stdout.strip().splitlines()[-1])
        return int(data["calls"]), float(data["elapsed"]), [float(x) for x in data["lat"]]

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


# -- the run ---------------------------------------------------------------------------------

PY_ASYNC = ["reg.call", "autopipeline reg.call", "autopipeline INCRBY", "explicit pipeline"]
PY_THREADS = ["threads reg.call", "threads autopipeline"]


def run_case(kind: str, host: str, port: int, tasks: int, duration: float, peers: Peers) -> Any:
    if kind in PY_ASYNC:
        return asyncio.run(case_async(kind, host, port, tasks, duration))
    if kind in PY_THREADS:
        return case_threads(kind, host, port, tasks, duration)
    return peers.run(kind, host, port, tasks, duration)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", help="a server of yours (default: a private redis-server)")
    ap.add_argument("--tasks", default="1,8,64,256")
    ap.add_argument("--rtt", default="0,1", help="milliseconds, comma-separated")
    ap.add_argument("--duration", type=float, default=1.5, help="seconds per case and round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-threads", type=int, default=64, help="thread cases up to this many")
    ap.add_argument("--no-peers", action="store_true", help="skip coredis and ioredis")
    opts = ap.parse_args()
    tasks_list = [int(x) for x in opts.tasks.split(",")]
    rtts = [float(x) for x in opts.rtt.split(",")]

    server = None
    if opts.url:
        info = redis.Redis.from_url(opts.url).connection_pool.connection_kwargs
        host, port = str(info.get("host", "127.0.0.1")), int(info.get("port", 6379))
    else:
        server = EmbeddedRedis()
        started = server.start()
        host, port = started.host, started.port
    redis.Redis(host=host, port=port).script_load(SOURCE)
    peers = Peers(not opts.no_peers)
    proxy = RttProxy(host, port).start() if any(r > 0 for r in rtts) else None
    results: dict[tuple[float, int, str], Figures] = {}
    try:
        print(f"# load average before: {os.getloadavg()}, cpus {os.cpu_count()}", flush=True)
        for rtt in rtts:
            target = (host, port)
            if rtt > 0:
                assert proxy is not None
                cal = calibrate(proxy, host, port, rtt)
                target = (proxy.host, proxy.port)
                print(f"# rtt {rtt} ms: measured {cal.rtt_ms_measured:.3f} ms", flush=True)
            for tasks in tasks_list:
                kinds = PY_ASYNC + [k for k in PY_THREADS if tasks <= opts.max_threads]
                kinds += peers.kinds()
                for rnd in range(opts.rounds):
                    shift = rnd % len(kinds)
                    for kind in kinds[shift:] + kinds[:shift]:
                        fig = results.setdefault((rtt, tasks, kind), Figures())
                        try:
                            fig.add(*run_case(kind, *target, tasks, opts.duration, peers))
                        except Exception as exc:  # a peer that failed: say so, carry on
                            fig.note = f"{type(exc).__name__}: {exc}"[:80]
                print(f"# rtt {rtt} tasks {tasks} done, load {os.getloadavg()[0]:.2f}", flush=True)
    finally:
        if proxy is not None:
            proxy.stop()
        peers.close()
        if server is not None:
            server.stop()
    report(results, rtts, tasks_list, peers.notes)


def report(
    results: dict[tuple[float, int, str], Figures],
    rtts: list[float],
    tasks_list: list[int],
    notes: list[str],
) -> None:
    print(f"\nload average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print("| RTT ms | tasks | case | calls/s | p50 us | p99 us |")
    print("|---|---|---|---|---|---|")
    for (rtt, tasks, kind), fig in sorted(results.items(), key=lambda x: (x[0][0], x[0][1])):
        if fig.note and not fig.rates:
            print(f"| {rtt:g} | {tasks} | {kind} | {fig.note} | | |")
            continue
        print(
            f"| {rtt:g} | {tasks} | {kind} | {fig.rate():,.0f} | {fig.pct(0.5):,.0f} "
            f"| {fig.pct(0.99):,.0f} |"
        )
    for note in notes:
        print(f"note: {note}")

    def get(rtt: float, tasks: int, kind: str) -> Figures | None:
        fig = results.get((rtt, tasks, kind))
        return fig if fig is not None and fig.rates else None

    print("\ntargets:")
    ap64, io64 = get(0.0, 64, "autopipeline reg.call"), get(0.0, 64, "ioredis autopipelining")
    pipe64 = get(0.0, 64, "explicit pipeline")
    if ap64 and io64:
        ratio = ap64.rate() / io64.rate()
        print(f"- 64 tasks, RTT 0: {ratio:.2f}x ioredis autopipelining (target >= 0.5)")
    if ap64 and pipe64:
        ratio = ap64.rate() / pipe64.rate()
        print(f"- 64 tasks, RTT 0: {ratio:.2f}x explicit pipelines of 64 (target >= 1)")
    ap1, plain1 = get(0.0, 1, "autopipeline reg.call"), get(0.0, 1, "reg.call")
    if ap1 and plain1:
        ratio = ap1.pct(0.5) / plain1.pct(0.5)
        print(f"- 1 task, RTT 0: p50 {ratio:.2f}x a plain reg.call's (target <= 1.1)")
    slow = [r for r in rtts if r >= 1.0]
    if slow:
        one = get(slow[0], 1, "autopipeline reg.call")
        many = get(slow[0], 64, "autopipeline reg.call")
        if one and many:
            ratio = many.rate() / one.rate()
            print(f"- RTT {slow[0]:g} ms: 64 tasks {ratio:.1f}x one task's calls/s (target >= 20)")
    with contextlib.suppress(Exception):
        t64, p64 = get(0.0, 64, "threads autopipeline"), get(0.0, 64, "threads reg.call")
        if t64 and p64:
            print(f"- threads, 64, RTT 0: autopipeline {t64.rate() / p64.rate():.2f}x a pool")


if __name__ == "__main__":
    main()
