"""Turn slices into records: merge histograms, sum counters, subtract the bystander."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from luapipe.bench.loop import WorkerResult
from luapipe.bench.results import Record
from luapipe.bench.stats import LatencyHistogram
from luapipe.bench.verdict import interval_of, predict_ms
from luapipe.bench.workloads import ATOMIC_FORMS, Workload

__all__ = [
    "WRITE_SHARE_TOLERANCE",
    "FormTotals",
    "ServerCounters",
    "SliceCost",
    "build_record",
    "server_cost",
]

#: the latencies with an interval (per round in ``rounds``): shown as their median round's
SHOWN_LATENCIES = ("p50", "p99", "mean")

#: a measured write share further than this from the declared one is flagged
WRITE_SHARE_TOLERANCE = 0.10

#: commands the harness itself sends (connection setup, admin, reset)
HARNESS_COMMANDS = (
    "info",
    "hello",
    "client",
    "select",
    "flushdb",
    "flushall",
    "config",
    "script",
    "function",
    "command",
    "auth",
    "mset",
    "cluster",
)


@dataclass(frozen=True)
class ServerCounters:
    """The server's counters at one moment, summed over a cluster's primaries:
    ``{command: (calls, usec)}`` from INFO commandstats (time inside each command), and the
    main thread's CPU (user + system, INFO cpu: parsing and socket I/O included)."""

    commands: dict[str, tuple[int, int]]
    cpu_us: int = 0


def server_cost(admin: Any) -> ServerCounters:
    """INFO commandstats and INFO cpu of every primary, in one INFO call each."""
    from luapipe.bench.topology import primaries

    out: dict[str, tuple[int, int]] = {}
    cpu = 0.0
    for node in primaries(admin):
        raw: dict[str, Any] = dict(node.info("commandstats", "cpu"))
        for key, v in raw.items():
            if key in ("used_cpu_user_main_thread", "used_cpu_sys_main_thread"):
                cpu += float(v)
            elif key.startswith("cmdstat_") and isinstance(v, dict):
                name = key.removeprefix("cmdstat_")
                c0, u0 = out.get(name, (0, 0))
                out[name] = (c0 + int(v.get("calls", 0)), u0 + int(v.get("usec", 0)))
    return ServerCounters(out, round(cpu * 1e6))


@dataclass(frozen=True)
class SliceCost:
    calls: int  # server-side commands of the workload (script bodies' calls included)
    usec: int
    bystander: LatencyHistogram | None
    invariant_ok: bool
    invariant_detail: str
    wire_ms: float = 0.0  # one round trip on the path, without client CPU (probe)
    added_rtt_ms: float = 0.0  # what the path adds to a direct round trip (probe)
    broken: int = 0  # cases (state copies) whose invariant broke
    checked: int = 0  # cases (state copies) the invariant was checked on
    cpu_us: int = 0  # the server's main thread CPU during the slice (INFO cpu)

    @classmethod
    def of(
        cls,
        before: ServerCounters,
        after: ServerCounters,
        bystander_gets: int,
        by_hist: LatencyHistogram | None,
        ok: bool,
        detail: str,
        wire_ms: float = 0.0,
        added_rtt_ms: float = 0.0,
        broken: int = 0,
        checked: int = 0,
    ) -> SliceCost:
        calls = usec = 0
        for name, (c1, u1) in after.commands.items():
            if name.split("|")[0] in HARNESS_COMMANDS:
                continue
            c0, u0 = before.commands.get(name, (0, 0))
            if c1 < c0:  # the server restarted during the slice: its counters began again
                c0 = u0 = 0
            dc, du = c1 - c0, u1 - u0
            if name == "get" and bystander_gets and dc > 0:
                share = min(bystander_gets, dc)
                du -= round(du * share / dc)
                dc -= share
            calls += dc
            usec += du
        cpu = max(0, after.cpu_us - before.cpu_us)  # a restart begins the counter again
        return cls(calls, usec, by_hist, ok, detail, wire_ms, added_rtt_ms, broken, checked, cpu)


@dataclass
class FormTotals:
    """Everything measured for one form at one point, over all its slices."""

    hist: LatencyHistogram = field(default_factory=LatencyHistogram)
    raw: LatencyHistogram = field(default_factory=LatencyHistogram)
    bystander: LatencyHistogram = field(default_factory=LatencyHistogram)
    calls: int = 0
    errors: int = 0
    retries: int = 0
    round_trips: int = 0
    commands: int = 0
    cpu_s: float = 0.0
    seconds: float = 0.0
    server_calls: int = 0
    server_usec: int = 0
    server_cpu_us: int = 0
    invariant_ok: bool = True
    details: list[str] = field(default_factory=list)
    wires: list[float] = field(default_factory=list)
    added: list[float] = field(default_factory=list)
    samples: list[str] = field(default_factory=list)
    wait_s: float = 0.0
    wrote: int | None = 0
    broken: int = 0
    checked: int = 0
    rounds: list[dict[str, Any]] = field(default_factory=list)

    def add(self, results: list[WorkerResult | str], cost: SliceCost, batch: int = 1) -> None:
        """One timed slice (a round): its workers' results and what it cost the server."""
        times = []
        hist = LatencyHistogram()
        calls = 0
        cpu_s = 0.0
        wrote: int | None = 0
        for r in results:
            if isinstance(r, str):
                self.errors += 1
                self.samples.append(r)
                continue
            hist.merge(LatencyHistogram.decode(r.hist))
            self.raw.merge(LatencyHistogram.decode(r.hist_uncorrected))
            calls += r.calls
            wrote = None if wrote is None or r.wrote is None else wrote + r.wrote
            self.wait_s += r.wait_s
            self.calls += r.calls
            self.errors += r.errors
            self.retries += r.retries
            self.round_trips += r.round_trips
            self.commands += r.commands
            self.cpu_s += r.cpu_s
            cpu_s += r.cpu_s
            times.append(r.elapsed_s)
            self.samples.extend(s for s in r.error_samples if len(self.samples) < 5)
        seconds = sum(times) / len(times) if times else 0.0
        self.seconds += seconds
        self.hist.merge(hist)
        self.wrote = None if self.wrote is None or wrote is None else self.wrote + wrote
        self.broken += cost.broken
        self.checked += cost.checked
        lat = hist.summary()
        ops = calls * batch
        self.rounds.append(
            {
                "ops_per_sec": _div(ops, seconds),
                "calls": calls,
                "seconds": seconds,
                "p50": lat.p50,
                "p99": lat.p99,
                "mean": lat.mean,
                # per operation: the client's CPU, the server's time inside commands
                # (commandstats) and its main thread's CPU (INFO cpu)
                "client_cpu_us": _div(cpu_s * 1e6, ops) if ops else None,
                "server_us": _div(cost.usec, ops) if ops else None,
                "server_cpu_us": _div(cost.cpu_us, ops) if ops and cost.cpu_us else None,
            }
        )
        self.wires.append(cost.wire_ms)
        self.added.append(cost.added_rtt_ms)
        self.server_calls += cost.calls
        self.server_usec += cost.usec
        self.server_cpu_us += cost.cpu_us
        if cost.bystander is not None:
            self.bystander.merge(cost.bystander)
        if not cost.invariant_ok:
            if self.invariant_ok:  # the first broken round: its finding replaces "held"
                self.details.clear()
            self.invariant_ok = False
            self.details.append(cost.invariant_detail)
        elif not self.details:
            self.details.append(cost.invariant_detail)


def _detail(t: FormTotals) -> str:
    """The first broken round's finding and how many more rounds broke; else the first
    round's (the invariant held)."""
    if not t.details:
        return ""
    more = len(t.details) - 1
    return t.details[0][:400] + (f" (and in {more} more round(s))" if more else "")


def _div(a: float, b: float) -> float:
    return a / b if b else 0.0


def _scaled(d: dict[str, float | None], k: float) -> dict[str, float | None]:
    return {key: (v / k if v is not None else None) for key, v in d.items()}


def build_record(
    w: Workload,
    form: str,
    t: FormTotals,
    rtt: float,
    rtt_measured: float,
    clients: int,
    rate: float | None,
    tasks: int = 1,
) -> Record:
    b = max(1, w.batch)
    ops = t.calls * b
    wire_ms = statistics.median(t.wires) if t.wires else 0.0
    under_load = statistics.median(t.added) if t.added and rtt > 0 else 0.0
    attempts = t.calls + t.errors
    summary = t.hist.summary()
    lat = summary.as_dict()
    by = t.bystander.summary()
    model = None
    cpu_us, server_us = _div(t.cpu_s * 1e6, ops), _div(t.server_usec, ops)
    wait_us = _div(t.wait_s * 1e6, ops)
    rt = _div(t.round_trips, attempts)
    if summary.mean is not None and tasks == 1:  # the model is of one call at a time
        model = predict_ms(rt, wire_ms, server_us * b, (cpu_us + wait_us) * b)
    share = None if t.wrote is None or not ops else t.wrote / ops
    declared = getattr(w, "write_share_declared", None)
    server_cpu = _div(t.server_cpu_us, ops) if t.server_cpu_us else None
    turns = interval_of([r.get("p50_turns") for r in t.rounds])
    cpu_rounds = [
        None
        if r["client_cpu_us"] is None or r["server_cpu_us"] is None
        else r["client_cpu_us"] + r["server_cpu_us"]
        for r in t.rounds
    ]
    # every figure shown beside an interval is its median round's (the pooled ones, over
    # every call of every round, weigh a round by its calls: a fast round counts more)
    pooled_ops = _div(ops, t.seconds)
    pooled_cpu = None if server_cpu is None else cpu_us + server_cpu
    lat_rounds = {k: _span([r[k] for r in t.rounds]) for k in SHOWN_LATENCIES}
    shown = dict(lat)
    for k in SHOWN_LATENCIES:
        shown[k] = _median_round([r[k] for r in t.rounds], lat.get(k))
    pooled = {
        "ops_per_sec": pooled_ops,
        "latency_ms": {k: lat.get(k) for k in SHOWN_LATENCIES},
        "cpu_usec_per_op": pooled_cpu,
    }
    model_err = None
    mean = shown.get("mean")
    if model is not None and mean:  # against the mean the report shows
        model_err = 100.0 * (model - mean) / mean
    shown_ops = _median_round([r["ops_per_sec"] for r in t.rounds], pooled_ops)
    return Record(
        operation=w.name,
        form=form,
        rtt_ms_nominal=rtt,
        rtt_ms_measured=round(rtt_measured, 4),
        clients=clients,
        ops=ops,
        ops_per_sec=pooled_ops if shown_ops is None else shown_ops,
        latency_ms=shown,
        round_trips_per_op=_div(rt, b),
        commands_per_op=_div(t.commands, attempts * b),
        server_usec_per_op=server_us,
        server_cpu_usec_per_op=server_cpu,
        cpu_usec_per_op=None if pooled_cpu is None else _median_round(cpu_rounds, pooled_cpu),
        cpu_usec_per_op_interval=_span(cpu_rounds),
        retries_per_op=_div(t.retries, ops),
        errors=t.errors,
        invariant_ok=t.invariant_ok,
        batch=b,
        calls=t.calls,
        duration_s=t.seconds,
        rate=rate,
        latency_ms_uncorrected=t.raw.summary().as_dict() if rate else None,
        latency_ms_per_op=_scaled(shown, b) if b > 1 else None,
        latency_distribution=t.hist.distribution(),
        server_commands_per_op=_div(t.server_calls, ops),
        client_cpu_usec_per_op=cpu_us,
        abort_rate=_div(t.retries, t.retries + t.calls),
        watch_attempts_per_op=1.0 + _div(t.retries, t.calls) if form == "transaction" else None,
        error_samples=t.samples[:5],
        invariant_detail=_detail(t),
        bystander_p99_ms=by.p99,
        bystander_samples=by.count,
        wire_ms=wire_ms,
        rtt_ms_under_load=round(under_load, 4),
        model_latency_ms=model,
        model_error_pct=model_err if clients == 1 and rate is None and b == 1 else None,
        atomic=form in getattr(w, "atomic_forms", ATOMIC_FORMS),
        write_share=share,
        write_share_declared=declared,
        write_share_off=share is not None
        and declared is not None
        and abs(share - declared) > WRITE_SHARE_TOLERANCE,
        rounds=list(t.rounds),
        ops_per_sec_interval=_span([r["ops_per_sec"] for r in t.rounds]),
        latency_ms_interval=lat_rounds,
        lost_updates=t.broken,
        invariant_cases=t.checked,
        client_wait_usec_per_op=wait_us,
        read_compute_write=bool(w.describe().get("read_compute_write", False)),
        contention=str(getattr(w, "contention", "spread")),
        p50_turns_ms=None if turns is None else turns.value,
        p50_turns_ms_interval=_span([r.get("p50_turns") for r in t.rounds]),
        tasks=tasks,
        pooled=pooled,
    )


def _median_round(values: list[float | None], pooled: float | None) -> float | None:
    """The figure shown beside the interval of :func:`_span`: the median round's (inside its
    interval by construction); ``pooled`` where no interval is shown (one round)."""
    iv = interval_of(values)
    return pooled if iv is None or iv.rounds < 2 else iv.value


def _span(values: list[float | None]) -> tuple[float, float] | None:
    """The report's one interval (the median round's, see ``bench/verdict/intervals.py``);
    None with fewer than two rounds."""
    iv = interval_of(values)
    return None if iv is None or iv.rounds < 2 else (iv.lo, iv.hi)
