"""The end of a run: crossover RTTs from the fitted model, method notes, the result."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from luapipe.bench.manifest import netem_available
from luapipe.bench.model import crossovers, fit_cost
from luapipe.bench.results import BenchResult, Record, error_summary
from luapipe.bench.rttproxy import Calibration

__all__ = ["summarize"]


def summarize(
    manifest: dict[str, Any],
    cals: list[Calibration],
    records: list[Record],
    workloads: Sequence[tuple[str, tuple[str, ...]]],
    client_counts: Sequence[int],
    *,
    cluster: bool,
    skipped: list[dict[str, str]],
    events: list[dict[str, Any]],
) -> BenchResult:
    """The :class:`BenchResult` of a run: ``workloads`` is (name, forms that ran)."""
    xs = []
    for name, forms in workloads:
        for clients in client_counts:
            costs = []
            for form in forms:
                points = [
                    _point(r)
                    for r in records
                    if (r.operation, r.form, r.clients) == (name, form, clients)
                    and r.latency_ms.get("mean") is not None
                ]
                if points:
                    costs.append(fit_cost(form, points))
            xs.extend(crossovers(name, clients, costs))
    notes = [
        "RTT 0 runs connect directly; RTT > 0 runs go through the delay proxy, whose own "
        "overhead (proxy at delay 0 minus direct) is in the calibration table.",
        "The model (round trips x wire time + server + client CPU) is compared with the "
        "measured mean for 1 client, closed loop, batch 1; wire time is a back-to-back raw "
        "PING on the same path (minus its client CPU) measured beside every timed slice.",
        "Server us/op and server commands/op come from INFO commandstats deltas; the "
        "bystander's GETs are subtracted (an estimate when the operation also uses GET).",
    ]
    load = os.getloadavg()[0]
    manifest["machine"]["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    if load > (os.cpu_count() or 1):
        notes.append(
            f"The machine was busy during this run (load average {load:.1f} on "
            f"{os.cpu_count()} CPUs): other processes competed for the CPU, so timings are noisy."
        )
    if not netem_available():
        notes.append("This kernel has no sch_netem, so RTT is simulated in user space.")
    if cluster:
        notes.append(
            "Cluster: each form's keys of one call share a hash tag where the form needs one "
            "slot; server cost sums INFO commandstats over the primaries; no bystander probe."
        )
    return BenchResult(
        manifest=manifest,
        calibrations=cals,
        records=records,
        crossovers=xs,
        notes=notes,
        skipped=skipped,
        errors=error_summary(records) + events,
    )


def _point(r: Record) -> tuple[float, float, float, float]:
    """(added RTT, wire time, round trips, mean latency) of one call."""
    mean = r.latency_ms.get("mean") or 0.0
    return r.rtt_ms_measured, r.wire_ms, r.round_trips_per_op * r.batch, mean
