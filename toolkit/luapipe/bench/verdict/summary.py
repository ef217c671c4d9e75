"""The end of a run: the verdicts, crossover RTTs from the fitted model, the method notes.

It reads records as the results JSON has them (dicts), so a run and a saved file end alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from luapipe.bench.verdict.compare import MARGIN_PCT
from luapipe.bench.verdict.model import Crossover, crossovers, fit_cost
from luapipe.bench.verdict.policy import POLICY, at_stake, kind_of
from luapipe.bench.verdict.reasons import rule, rule_at, where
from luapipe.bench.verdict.withhold import recommendations

__all__ = [
    "MODEL_TOLERANCE_PCT",
    "Summary",
    "crossovers_at_stake",
    "method",
    "model_notes",
    "summarize",
]

Row = dict[str, Any]

#: the model is trusted within this much of the measured mean latency
MODEL_TOLERANCE_PCT = 15.0


@dataclass(frozen=True)
class Summary:
    """What the verdict adds to a run's records."""

    recommendations: list[dict[str, Any]]
    crossovers: list[Crossover]
    notes: list[str]
    model_notes: list[str] = field(default_factory=list)
    method: str = ""


def method(records: Sequence[Row], margin_pct: float = MARGIN_PCT) -> str:
    """The report's method in one paragraph: the figure, the rule and the interval method,
    the policy (stated once per report)."""
    counts = sorted({len(r.get("rounds") or ()) for r in records}, reverse=True)
    rounds = counts[0] if counts else 0
    figures = (
        "The figure, per round: with one client and one call at a time, and in the open loop "
        "(--rate), the p50 latency, the median call's (a stall of the host delays a few calls "
        "of a round, not its median; at RTT 0 with one client, while the forms take turns of "
        "16 calls); with several clients or several calls in flight (--tasks) the throughput, "
        "or at RTT 0 the client's plus the server's CPU per op (there the clients and the "
        "server share the host's CPUs)."
    )
    fewer = [f"{_points(records, n)}: {rule_at(n, margin_pct)}" for n in counts[1:]]
    also = f"; where a point ran fewer rounds: {'; '.join(fewer)}" if fewer else ""
    return f"{figures} The rule: {rule(rounds, margin_pct)}{also}. The policy: {POLICY}."


def _points(records: Sequence[Row], rounds: int) -> str:
    """The points of ``records`` that ran ``rounds`` rounds: "reserve_stock and rate_limit
    at 0 ms RTT with 4 clients, hot keys"."""
    ops: dict[tuple[float, int, str], list[str]] = {}
    for r in records:
        if len(r.get("rounds") or ()) == rounds:
            at = (
                float(r["rtt_ms_nominal"]),
                int(r["clients"]),
                str(r.get("contention") or "spread"),
            )
            if r["operation"] not in ops.setdefault(at, []):
                ops[at].append(str(r["operation"]))
    return "; ".join(f"{' and '.join(names)} {where(*at)}" for at, names in ops.items())


def summarize(
    records: Sequence[Row],
    workloads: Sequence[tuple[str, tuple[str, ...]]],
    *,
    skipped: list[dict[str, str]] | None = None,
    cluster: bool = False,
    load: float | None = None,
    cpus: int | None = None,
    netem: bool = True,
    margin_pct: float = MARGIN_PCT,
) -> Summary:
    """The verdicts and notes of a run: ``workloads`` is (name, forms that ran); ``load``
    the 1-minute load average at the end on ``cpus`` CPUs (a busy machine is noted)."""
    notes = [
        "RTT 0 runs connect directly; RTT > 0 runs go through the delay proxy, whose own "
        "overhead (proxy at delay 0 minus direct) is in the calibration table.",
        "The model (round trips x wire time + server time + client CPU + the client's wait "
        "for a CPU) is compared with the measured mean for 1 client, closed loop, batch 1; "
        "wire time is a back-to-back raw PING on the same path (minus its client CPU) "
        "measured beside every timed slice; the CPU wait comes from Linux schedstat.",
        "Server us/op and server commands/op come from INFO commandstats deltas; the "
        "bystander's GETs are subtracted (an estimate when the operation also uses GET). "
        "Server CPU per op in the CPU figure is the main thread's (INFO cpu), which also "
        "counts reading and parsing the commands.",
    ]
    if load is not None and cpus and load > cpus:
        notes.append(
            f"The machine was busy during this run (load average {load:.1f} on {cpus} CPUs): "
            "other processes competed for the CPU, so timings are noisy."
        )
    if not netem:
        notes.append("This kernel has no sch_netem, so RTT is simulated in user space.")
    if cluster:
        notes.append(
            "Cluster: each form's keys of one call share a hash tag where the form needs one "
            "slot; server cost sums INFO commandstats over the primaries; no bystander probe."
        )
    off = model_notes(records, load, cpus)
    notes.extend(off)
    return Summary(
        recommendations=recommendations(list(records), skipped, margin_pct=margin_pct),
        crossovers=crossovers_at_stake(records, workloads),
        notes=notes,
        model_notes=off,
        method=method(records, margin_pct),
    )


def model_notes(records: Sequence[Row], load: float | None, cpus: int | None = None) -> list[str]:
    """Where the round-trip model is off by more than :data:`MODEL_TOLERANCE_PCT`, and why:
    one line, grouped by RTT."""
    modelled = [r for r in records if r.get("model_error_pct") is not None]
    off = [r for r in modelled if abs(float(r["model_error_pct"])) > MODEL_TOLERANCE_PCT]
    if not off:
        return []
    parts = []
    for rtt in sorted({float(r["rtt_ms_nominal"]) for r in off}):
        here = [r for r in off if float(r["rtt_ms_nominal"]) == rtt]
        errs = [float(r["model_error_pct"]) for r in here]
        worst = max(here, key=lambda r: abs(float(r["model_error_pct"])))
        of = sum(float(r["rtt_ms_nominal"]) == rtt for r in modelled)
        lo, hi = f"{min(errs):+.0f}%", f"{max(errs):+.0f}%"
        span = lo if lo == hi else f"{lo} to {hi}"
        which = "worst " if len(here) > 1 else ""
        parts.append(
            f"at {rtt:g} ms RTT for {len(here)} of {of} records ({span}; "
            f"{which}{worst['operation']} {worst['form']})"
        )
    busy = ""
    if load is not None:
        busy = f" (load average {load:.1f}" + (f" on {cpus} CPUs)" if cpus else ")")
    return [
        f"The model is off by more than {MODEL_TOLERANCE_PCT:.0f}% "
        + "; ".join(parts)
        + ". Its parts are measured per op and form (round trips x the mean wire time of "
        "back-to-back PINGs beside each slice, server time from commandstats, the client's "
        "CPU and its wait for a CPU); on a busy machine the server and the delay proxy also "
        "wait for a CPU, at moments the short PING probe beside a slice may catch or miss, "
        "so the model lands above or below the measured mean, the more so the more round "
        f"trips go through the proxy{busy}."
    ]


def crossovers_at_stake(
    records: Sequence[Row], workloads: Sequence[tuple[str, tuple[str, ...]]]
) -> list[Crossover]:
    """Crossovers of the pairs at stake, fitted from >= 2 measured RTTs (1 client, closed
    loop, batch 1: where the round-trip model applies), per operation and contention."""
    out = []
    seen: set[str] = set()
    for name, forms in workloads:
        if name in seen:  # the same operation again (another contention): fitted once
            continue
        seen.add(name)
        mine = [
            r
            for r in records
            if r["operation"] == name
            and int(r["clients"]) == 1
            and not r.get("rate")
            and int(r.get("batch") or 1) == 1
            and (r.get("latency_ms") or {}).get("mean") is not None
        ]
        contention = str(mine[0].get("contention") or "spread") if mine else ""
        mine = [r for r in mine if str(r.get("contention") or "spread") == contention]
        if len({float(r["rtt_ms_nominal"]) for r in mine}) < 2:
            continue
        _, stake = at_stake(kind_of(mine), mine)
        pairs = {frozenset((a, b)) for a in stake for b in stake if a != b}
        costs = [
            fit_cost(form, [_point(r) for r in mine if r["form"] == form])
            for form in forms
            if any(r["form"] == form for r in mine)
        ]
        measured = tuple(sorted({round(max(0.0, float(r["rtt_ms_measured"])), 4) for r in mine}))
        out.extend(crossovers(name, 1, costs, measured, pairs))
    return out


def _point(r: Row) -> tuple[float, float, float, float]:
    """(added RTT, wire time, round trips, mean latency) of one call."""
    mean = float(r["latency_ms"].get("mean") or 0.0)
    batch = int(r.get("batch") or 1)
    return (float(r["rtt_ms_measured"]), float(r.get("wire_ms") or 0.0),
            float(r["round_trips_per_op"]) * batch, mean)  # fmt: skip
