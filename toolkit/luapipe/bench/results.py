"""Benchmark results as values: one :class:`Record` per (operation, form, rtt, clients).

The JSON document (see ``luapipe.report.json_out`` for the schema) is ``BenchResult.as_dict``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from luapipe.bench.manifest import netem_available
from luapipe.bench.rttproxy import Calibration
from luapipe.bench.verdict import Crossover, summarize

__all__ = ["BenchResult", "Record", "SCHEMA_VERSION", "error_summary", "finish"]

SCHEMA_VERSION = 2


@dataclass(frozen=True)
class Record:
    operation: str
    form: str
    rtt_ms_nominal: float
    rtt_ms_measured: float
    clients: int
    ops: int
    ops_per_sec: float
    latency_ms: dict[str, float | None]
    round_trips_per_op: float
    commands_per_op: float
    server_usec_per_op: float
    retries_per_op: float
    errors: int
    invariant_ok: bool
    # beyond the minimum
    batch: int = 1
    calls: int = 0
    duration_s: float = 0.0
    rate: float | None = None
    latency_ms_uncorrected: dict[str, float | None] | None = None
    latency_ms_per_op: dict[str, float | None] | None = None
    latency_distribution: list[tuple[float, float]] = field(default_factory=list)
    server_commands_per_op: float = 0.0
    client_cpu_usec_per_op: float = 0.0
    abort_rate: float = 0.0
    watch_attempts_per_op: float | None = None  # transaction form: EXEC attempts per call
    error_samples: list[str] = field(default_factory=list)
    invariant_detail: str = ""
    bystander_p99_ms: float | None = None
    bystander_samples: int = 0
    rtt_ms_under_load: float = 0.0  # added RTT by raw PING beside each slice (noisier)
    wire_ms: float = 0.0  # one bare round trip on this path (calibration PING)
    model_latency_ms: float | None = None
    model_error_pct: float | None = None
    atomic: bool = False
    read_compute_write: bool = False  # writes depend on reads: non-atomic forms can race
    write_share: float | None = None  # measured share of calls that took the write path
    write_share_declared: float | None = None  # the bench profile's intended share
    write_share_off: bool = False  # more than 10 points between the two
    rounds: list[dict[str, Any]] = field(default_factory=list)  # per timed round, in order
    ops_per_sec_interval: tuple[float, float] | None = None  # the median round's interval
    latency_ms_interval: dict[str, tuple[float, float] | None] = field(default_factory=dict)
    lost_updates: int = 0  # checked cases (state copies) whose invariant broke
    invariant_cases: int = 0  # cases (state copies) the invariant was checked on
    client_wait_usec_per_op: float = 0.0  # client runnable but waiting for a CPU
    #: the server's main thread CPU per op (INFO cpu: parsing and socket I/O included);
    #: None when the server does not say
    server_cpu_usec_per_op: float | None = None
    #: the client's plus the server's main thread CPU per op (the figure with several
    #: clients at RTT 0), and its interval across rounds
    cpu_usec_per_op: float | None = None
    cpu_usec_per_op_interval: tuple[float, float] | None = None
    contention: str = "spread"  # hot | spread | zipf:S: which keys the calls touched
    #: one client: the median of the rounds' p50 while the forms took turns of 16 calls
    #: (what decides there), and its interval across rounds
    p50_turns_ms: float | None = None
    p50_turns_ms_interval: tuple[float, float] | None = None
    tasks: int = 1  # asyncio tasks per client (requests in flight per client, --tasks)
    #: the figures shown beside an interval (ops_per_sec, latency_ms's p50, p99 and mean,
    #: cpu_usec_per_op) are their median round's; these are the same over every call of
    #: every round (a round weighs by its calls), as they were before issue 19
    pooled: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class BenchResult:
    manifest: dict[str, Any]
    calibrations: list[Calibration]
    records: list[Record]
    crossovers: list[Crossover]
    recommendations: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: where the round-trip model is more than 15% off the measured mean, and why (also in
    #: ``notes``); the terminal table prints these
    model_notes: list[str] = field(default_factory=list)
    #: forms that could not run here (a cluster and keys in several slots): operation, form,
    #: reason
    skipped: list[dict[str, str]] = field(default_factory=list)
    #: failed calls per (operation, form, rtt, clients), and the harness's retried failures
    errors: list[dict[str, Any]] = field(default_factory=list)
    #: the figure, the decision rule, the interval method and the policy, stated once
    method: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "manifest": self.manifest,
            "calibration": [
                asdict(c) | {"error_pct": c.error_pct, "wire_ms": c.wire_ms}
                for c in self.calibrations
            ],
            "records": [r.as_dict() for r in self.records],
            "crossovers": [asdict(c) | {"text": c.describe()} for c in self.crossovers],
            "recommendations": self.recommendations,
            "method": self.method,
            "notes": self.notes,
            "model_notes": self.model_notes,
            "skipped": self.skipped,
            "errors": self.errors,
        }


def error_summary(records: list[Record]) -> list[dict[str, Any]]:
    """One entry per record that had failed calls: where, how many, and samples."""
    return [
        {
            "operation": r.operation,
            "form": r.form,
            "rtt_ms": r.rtt_ms_nominal,
            "clients": r.clients,
            "errors": r.errors,
            "calls": r.calls,
            "samples": r.error_samples[:3],
        }
        for r in records
        if r.errors
    ]


def finish(
    manifest: dict[str, Any],
    cals: list[Calibration],
    records: list[Record],
    workloads: Sequence[tuple[str, tuple[str, ...]]],
    *,
    cluster: bool,
    skipped: list[dict[str, str]],
    events: list[dict[str, Any]],
) -> BenchResult:
    """The :class:`BenchResult` of a run, with the verdict (``luapipe.bench.verdict``):
    ``workloads`` is (name, forms that ran)."""
    load = os.getloadavg()
    manifest["machine"]["load_average_at_end"] = [round(x, 2) for x in load]
    s = summarize(
        [r.as_dict() for r in records],
        workloads,
        skipped=skipped,
        cluster=cluster,
        load=load[0],
        cpus=os.cpu_count(),
        netem=netem_available(),
    )
    return BenchResult(
        manifest=manifest,
        calibrations=cals,
        records=records,
        crossovers=s.crossovers,
        recommendations=s.recommendations,
        notes=s.notes,
        model_notes=s.model_notes,
        skipped=skipped,
        errors=error_summary(records) + events,
        method=s.method,
    )
