"""Figure: the shop's rate limiter under load, script form vs pipelined form, at two RTTs.

    .venv/bin/python examples/app/bench/load.py [--rtt 0.25,2] [--users 32] [--seconds 8]

Needs locust (``pip install locust``). Starts a private redis-server, luapipe's delay proxy
between the shop and Redis (the RTT is calibrated by PING and the measured value printed),
and the shop service; then runs locust headless against ``POST /limit/<user>?form=...``,
alternating the forms (ABAB) at each RTT. Every process is stopped by its own PID.
"""

from __future__ import annotations

import argparse
import csv
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from luapipe.bench.rttproxy import RttProxy, calibrate
from luapipe.bench.server import EmbeddedRedis, free_port

APP = Path(__file__).resolve().parents[1]
ROOT = APP.parents[1]


@dataclass(frozen=True)
class Run:
    form: str
    rtt_ms: float
    requests: int
    failures: int
    rps: float
    p50_ms: float
    p99_ms: float


def start_shop(redis_port: int) -> tuple[subprocess.Popen[str], int]:
    port = free_port()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(APP), str(ROOT / "toolkit"), env.get("PYTHONPATH", "")]
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "shop", "--redis-url", f"redis://127.0.0.1:{redis_port}/0",
         "--port", str(port), "--limit", str(10**9)],
        stdout=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if "listening" not in line:
        stop(proc)
        raise RuntimeError(f"shop did not start: {line!r}")
    return proc, port


def stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def locust(
    port: int, form: str, users: int, seconds: int, out: Path
) -> tuple[int, int, float, float, float]:
    exe = shutil.which("locust", path=str(Path(sys.executable).parent)) or "locust"
    prefix = out / f"{form}"
    env = dict(os.environ, SHOP_FORM=form)
    subprocess.run(
        [exe, "-f", str(APP / "bench" / "locustfile.py"), "--headless", "-u", str(users),
         "-r", str(users), "-t", f"{seconds}s", "--host", f"http://127.0.0.1:{port}",
         "--csv", str(prefix), "--only-summary", "--loglevel", "WARNING"],
        env=env, capture_output=True, text=True, timeout=seconds + 60, check=False,
    )  # fmt: skip
    with open(f"{prefix}_stats.csv", newline="") as f:
        row = next(r for r in csv.DictReader(f) if r["Name"] == "Aggregated")
    return (
        int(row["Request Count"]),
        int(row["Failure Count"]),
        float(row["Requests/s"]),
        float(row["50%"]),
        float(row["99%"]),
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rtt", default="0.25,2", help="nominal RTTs in ms, comma separated")
    ap.add_argument("--users", type=int, default=32)
    ap.add_argument("--seconds", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=2, help="ABAB rounds per RTT")
    opts = ap.parse_args()
    runs: list[Run] = []
    out = Path(tempfile.mkdtemp(prefix="shop-load-"))
    with EmbeddedRedis() as server, RttProxy(server.host, server.port) as proxy:
        shop, port = start_shop(proxy.port)
        try:
            for rtt in (float(x) for x in opts.rtt.split(",")):
                cal = calibrate(proxy, server.host, server.port, rtt)
                print(
                    f"RTT nominal {rtt} ms: measured {cal.rtt_ms_measured} ms "
                    f"(direct PING {cal.direct_ping_ms} ms, "
                    f"through the proxy {cal.proxied_ping_ms} ms)",
                    flush=True,
                )
                for _ in range(opts.rounds):
                    for form in ("script", "pipelined"):
                        stats = locust(port, form, opts.users, opts.seconds, out)
                        runs.append(Run(form, rtt, *stats))
                        r = runs[-1]
                        print(
                            f"  {form:9s} {r.rps:8.0f} req/s  p50 {r.p50_ms:5.1f} ms  "
                            f"p99 {r.p99_ms:5.1f} ms  ({r.requests} requests, {r.failures} failed)",
                            flush=True,
                        )
        finally:
            stop(shop)
            shutil.rmtree(out, ignore_errors=True)
    load = os.getloadavg()[0]
    print(
        f"\nsummary: median req/s over {opts.rounds} ABAB rounds (min-max); locust closed loop, "
        f"{opts.users} users, {opts.seconds} s per run; 1-min load average {load:.1f}"
    )
    for rtt in sorted({r.rtt_ms for r in runs}):
        med = {}
        for form in ("script", "pipelined"):
            v = sorted(r.rps for r in runs if r.rtt_ms == rtt and r.form == form)
            med[form] = statistics.median(v)
            print(f"  RTT {rtt} ms {form:9s} {med[form]:6.0f} req/s ({v[0]:.0f}-{v[-1]:.0f})")
        at = [r for r in runs if r.rtt_ms == rtt]
        pairs = [a.rps / b.rps for a, b in zip(at[::2], at[1::2], strict=True)]
        print(
            f"  RTT {rtt} ms script/pipelined: ratio of medians "
            f"{med['script'] / med['pipelined']:.2f}, median of adjacent-pair ratios "
            f"{statistics.median(pairs):.2f} ({', '.join(f'{x:.2f}' for x in pairs)})"
        )


if __name__ == "__main__":
    main()
