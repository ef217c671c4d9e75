"""The end of a run: crossover RTTs from the fitted model, method notes, the result."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from luapipe.bench.manifest import netem_available
from luapipe.bench.model import Crossover, crossovers, fit_cost
from luapipe.bench.recommend import at_stake, kind_of
from luapipe.bench.results import BenchResult, Record, error_summary
from luapipe.bench.rttproxy import Calibration
from luapipe.bench.verdict import recommendations

__all__ = ["MODEL_TOLERANCE_PCT", "crossovers_at_stake", "model_notes", "summarize"]


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
    xs = crossovers_at_stake(records, workloads)
    notes = [
        "RTT 0 runs connect directly; RTT > 0 runs go through the delay proxy, whose own "
        "overhead (proxy at delay 0 minus direct) is in the calibration table.",
        "The model (round trips x wire time + server time + client CPU + the client's wait "
        "for a CPU) is compared with the measured mean for 1 client, closed loop, batch 1; "
        "wire time is a back-to-back raw PING on the same path (minus its client CPU) "
        "measured beside every timed slice; the CPU wait comes from Linux schedstat.",
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
    off = model_notes(records, load)
    notes.extend(off)
    return BenchResult(
        manifest=manifest,
        calibrations=cals,
        records=records,
        crossovers=xs,
        recommendations=recommendations([r.as_dict() for r in records], skipped),
        notes=notes,
        model_notes=off,
        skipped=skipped,
        errors=error_summary(records) + events,
    )


#: the model is trusted within this much of the measured mean latency
MODEL_TOLERANCE_PCT = 15.0


def model_notes(records: list[Record], load: float) -> list[str]:
    """Where the round-trip model is off by more than :data:`MODEL_TOLERANCE_PCT`, and why:
    one line, grouped by RTT."""
    modelled = [r for r in records if r.model_error_pct is not None]
    off = [r for r in modelled if abs(r.model_error_pct or 0.0) > MODEL_TOLERANCE_PCT]
    if not off:
        return []
    parts = []
    for rtt in sorted({r.rtt_ms_nominal for r in off}):
        here = [r for r in off if r.rtt_ms_nominal == rtt]
        errs = [r.model_error_pct or 0.0 for r in here]
        worst = max(here, key=lambda r: abs(r.model_error_pct or 0.0))
        of = sum(r.rtt_ms_nominal == rtt for r in modelled)
        lo, hi = f"{min(errs):+.0f}%", f"{max(errs):+.0f}%"
        span = lo if lo == hi else f"{lo} to {hi}"
        which = "worst " if len(here) > 1 else ""
        parts.append(
            f"at {rtt:g} ms RTT for {len(here)} of {of} records ({span}; "
            f"{which}{worst.operation} {worst.form})"
        )
    return [
        f"The model is off by more than {MODEL_TOLERANCE_PCT:.0f}% "
        + "; ".join(parts)
        + ". Its parts are measured per op and form (round trips x the mean wire time of "
        "back-to-back PINGs beside each slice, server time from commandstats, the client's "
        "CPU and its wait for a CPU); on a busy machine the server and the delay proxy also "
        "wait for a CPU, at moments the short PING probe beside a slice may catch or miss, "
        "so the model lands above or below the measured mean, the more so the more round "
        f"trips go through the proxy (load average {load:.1f} on {os.cpu_count()} CPUs)."
    ]


def crossovers_at_stake(
    records: list[Record], workloads: Sequence[tuple[str, tuple[str, ...]]]
) -> list[Crossover]:
    """Crossovers of the pairs at stake, fitted from >= 2 measured RTTs (1 client, closed
    loop, batch 1: where the round-trip model applies)."""
    out = []
    for name, forms in workloads:
        mine = [
            r
            for r in records
            if r.operation == name
            and r.clients == 1
            and r.rate is None
            and r.batch == 1
            and r.latency_ms.get("mean") is not None
        ]
        if len({r.rtt_ms_nominal for r in mine}) < 2:
            continue
        flags = [{"read_compute_write": r.read_compute_write,
                  "write_share_declared": r.write_share_declared} for r in mine]  # fmt: skip
        _, stake = at_stake(kind_of(flags), forms)
        pairs = {frozenset((a, b)) for a in stake for b in stake if a != b}
        costs = [
            fit_cost(form, [_point(r) for r in mine if r.form == form])
            for form in forms
            if any(r.form == form for r in mine)
        ]
        measured = tuple(sorted({round(max(0.0, r.rtt_ms_measured), 4) for r in mine}))
        out.extend(crossovers(name, 1, costs, measured, pairs))
    return out


def _point(r: Record) -> tuple[float, float, float, float]:
    """(added RTT, wire time, round trips, mean latency) of one call."""
    mean = r.latency_ms.get("mean") or 0.0
    return r.rtt_ms_measured, r.wire_ms, r.round_trips_per_op * r.batch, mean
