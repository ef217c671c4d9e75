"""The same bench on a 3-primary Redis Cluster and on a single redis-server.

    python examples/bench/cluster_vs_single.py [OPERATION...] [--duration S]

Starts both privately on loopback (stopped by PID at the end), runs
``luapipe bench OPERATION... --url <url> --rtt 0`` against each and prints the two tables,
then ops/s and p99 per form side by side. On the cluster each case's keys share a hash tag,
so every form of a catalogue operation runs; forms that cannot (keys in several slots) are
listed as skipped with the reason.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from click.testing import CliRunner

from luapipe.bench.cluster import EmbeddedCluster
from luapipe.bench.server import EmbeddedRedis
from luapipe.cli import main


def bench(url: str, ops: list[str], duration: float, out: Path) -> dict[str, object]:
    args = ["bench", *ops, "--url", url, "--duration", str(duration), "--json", str(out)]
    res = CliRunner().invoke(main, args)
    if res.exit_code != 0:
        raise SystemExit(res.output)
    print(res.stdout)
    data: dict[str, object] = json.loads(out.read_text())
    return data


def main_() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("ops", nargs="*", default=["reserve_stock", "transfer"])
    parser.add_argument("--duration", type=float, default=2.0)
    ns = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="luapipe-cluster-bench-"))
    t0 = time.monotonic()
    with EmbeddedCluster(primaries=3, replicas=0) as cluster:
        print(f"cluster of 3 primaries ready in {time.monotonic() - t0:.2f} s\n== cluster")
        on_cluster = bench(cluster.url, ns.ops, ns.duration, tmp / "cluster.json")
    with EmbeddedRedis() as server:
        print("== single node")
        single = bench(server.url, ns.ops, ns.duration, tmp / "single.json")
    rows = {}
    for where, data in (("cluster", on_cluster), ("single", single)):
        for r in data["records"]:  # type: ignore[attr-defined]
            rows.setdefault((r["operation"], r["form"]), {})[where] = r
    print(f"{'operation':<15}{'form':<12}{'single ops/s':>13}{'p99 ms':>8}"
          f"{'cluster ops/s':>15}{'p99 ms':>8}")  # fmt: skip
    for (op, form), by in rows.items():
        cells = []
        for where in ("single", "cluster"):
            r = by.get(where)
            cells.append(f"{r['ops_per_sec']:>13,.0f}{r['latency_ms']['p99']:>8.3f}" if r else
                         f"{'skipped':>13}{'':>8}")  # fmt: skip
        print(f"{op:<15}{form:<12}{cells[0]}  {cells[1]}")


if __name__ == "__main__":
    main_()
