"""CSV: redis-benchmark's ``--csv`` columns first (test, rps, latencies), then ours."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

from luapipe.report.files import write_whole

__all__ = ["CSV_COLUMNS", "render_csv", "write_csv"]

BENCHMARK_COLUMNS = (
    "test",
    "rps",
    "avg_latency_ms",
    "min_latency_ms",
    "p50_latency_ms",
    "p95_latency_ms",
    "p99_latency_ms",
    "max_latency_ms",
)
EXTRA = (
    "operation",
    "form",
    "rtt_ms_nominal",
    "rtt_ms_measured",
    "clients",
    "batch",
    "ops",
    "p90_latency_ms",
    "p999_latency_ms",
    "round_trips_per_op",
    "commands_per_op",
    "server_usec_per_op",
    "client_cpu_usec_per_op",
    "retries_per_op",
    "abort_rate",
    "errors",
    "invariant_ok",
    "bystander_p99_ms",
    "model_latency_ms",
    "contention",  # spread | hot | zipf:S: the demo's hot-key slice beside its sweep
    "tasks",  # calls in flight per client (--tasks)
    "lost_updates",  # the invariant broke in this many of invariant_cases
    "invariant_cases",
)
CSV_COLUMNS = BENCHMARK_COLUMNS + EXTRA


def _row(r: dict[str, Any]) -> dict[str, Any]:
    lat = r.get("latency_ms") or {}
    row = {k: r.get(k) for k in EXTRA}
    row.update(
        test=f"{r['operation']} {r['form']} rtt={r['rtt_ms_nominal']:g}ms c={r['clients']}"
        + (f"x{r['tasks']}" if int(r.get("tasks") or 1) > 1 else "")
        + (f" {r['contention']}" if (r.get("contention") or "spread") != "spread" else ""),
        contention=r.get("contention") or "spread",
        tasks=int(r.get("tasks") or 1),
        rps=round(float(r["ops_per_sec"]), 2),
        avg_latency_ms=lat.get("mean"),
        min_latency_ms=lat.get("min"),
        p50_latency_ms=lat.get("p50"),
        p95_latency_ms=lat.get("p95"),
        p99_latency_ms=lat.get("p99"),
        max_latency_ms=lat.get("max"),
        p90_latency_ms=lat.get("p90"),
        p999_latency_ms=lat.get("p999"),
    )
    return row


def render_csv(result: dict[str, Any]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(CSV_COLUMNS), quoting=csv.QUOTE_MINIMAL)
    writer.writeheader()
    for r in result["records"]:
        writer.writerow({k: ("" if v is None else v) for k, v in _row(r).items()})
    return buf.getvalue()


def write_csv(result: dict[str, Any], path: str | Path) -> None:
    write_whole(path, render_csv(result))
