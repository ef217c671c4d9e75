"""Run every form of each workload across RTTs and client counts, interleaved.

For each (RTT, clients, workload): every form is prepared (scripts loaded) and warmed up
(discarded), then timed in ``rounds`` slices in ABAB order. Each slice starts from a fresh
keyspace, takes ``INFO commandstats`` before and after (server cost), runs the bystander
probe beside it, and ends with the workload's invariant check.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import redis

from luapipe.bench.aggregate import FormTotals, SliceCost, build_record, server_cost
from luapipe.bench.counting import counting_client
from luapipe.bench.loop import Bystander, ClientPlan, WorkerResult, run_client, run_clients
from luapipe.bench.manifest import build_manifest, netem_available, refuse_fake
from luapipe.bench.model import crossovers, fit_cost
from luapipe.bench.results import BenchResult, Record
from luapipe.bench.rttproxy import Calibration, RttProxy, calibrate, measure_ping
from luapipe.bench.workloads import Workload
from luapipe.errors import LuapipeError, mask_url, translate

__all__ = ["BenchConfig", "Progress", "retarget", "run_bench"]


@dataclass(frozen=True)
class BenchConfig:
    rtts_ms: tuple[float, ...] = (0.0,)
    clients: tuple[int, ...] = (1,)
    duration_s: float = 2.0  # timed seconds per form at each (rtt, clients) point
    warmup_s: float = 0.3
    rounds: int = 4
    rate: float | None = None  # open loop: total calls per second
    bystander: bool = True
    bystander_interval_s: float = 0.002
    seed: int = 1


@dataclass(frozen=True)
class Progress:
    done: int
    total: int
    label: str


def retarget(url: str, host: str, port: int) -> str:
    """``url`` with its host:port replaced (user, password and db kept)."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    auth = parts.netloc.rsplit("@", 1)[0] + "@" if "@" in parts.netloc else ""
    return urlunsplit(parts._replace(netloc=f"{auth}{host}:{port}"))


class _Run:
    def __init__(
        self,
        url: str,
        workloads: Sequence[Workload],
        config: BenchConfig,
        progress: Callable[[Progress], None] | None,
    ) -> None:
        self.url, self.workloads, self.config = url, list(workloads), config
        self.admin = redis.Redis.from_url(url, socket_timeout=60)
        refuse_fake(self.admin)
        self.progress = progress
        self.done = 0
        self.guess_ms: dict[str, float] = {}
        forms = sum(len(w.forms) for w in self.workloads)
        self.total = len(config.rtts_ms) * len(config.clients) * forms * (config.rounds + 1)

    def tick(self, label: str) -> None:
        self.done += 1
        if self.progress is not None:
            self.progress(Progress(self.done, self.total, label))

    def slice(
        self,
        w: Workload,
        form: str,
        target: str,
        clients: int,
        seconds: float,
        client: redis.Redis | None,
        timed: bool,
    ) -> tuple[list[WorkerResult | str], SliceCost]:
        cfg = self.config
        w.reset(self.admin)
        by = None
        if timed and cfg.bystander:
            self.admin.mset({f"bystander:{k}": "x" * 16 for k in range(100)})
            by = Bystander(target, cfg.bystander_interval_s)
        wire = self.probe(target) if timed else (0.0, 0.0)
        before = server_cost(self.admin)
        t0 = time.perf_counter() + (0.01 if client is not None else 0.25)
        rate = cfg.rate / clients if cfg.rate else None
        plans = [
            ClientPlan(target, form, k, cfg.seed, t0, t0 + seconds, rate) for k in range(clients)
        ]
        if client is not None:
            results: list[WorkerResult | str] = [run_client(w, client, plans[0])]
        else:
            results = run_clients(w, plans)
        after = server_cost(self.admin)
        by_hist, by_count, _cpu = by.finish() if by is not None else (None, 0, 0.0)
        calls = sum(r.calls for r in results if isinstance(r, WorkerResult))
        try:
            ok, detail = w.check_invariant(self.admin, calls * w.batch)
        except Exception as exc:  # a broken keyspace is a finding, not a crash
            ok, detail = False, f"invariant check raised {type(exc).__name__}: {exc}"
        window = time.perf_counter() - t0
        by_in_window = round(by_count * min(1.0, seconds / max(window + 0.05, 1e-9)))
        cost = SliceCost.of(before, after, by_in_window, by_hist, ok, detail, *wire)
        return results, cost

    def probe(self, target: str) -> tuple[float, float]:
        """Wire time of one round trip on ``target``'s path now, and what it adds to direct
        (ms); measured beside each slice, under the same load, so the model tracks it."""
        host, port = _hostport(target)
        kw = self.admin.connection_pool.connection_kwargs
        direct = (str(kw.get("host", "127.0.0.1")), int(kw.get("port", 6379)))
        d_rtt, _ = measure_ping(*direct, 40)
        if (host, port) == direct:
            rtt_us, cpu_us = d_rtt, _
        else:
            guess = self.guess_ms.get(target, 1.0)
            rtt_us, cpu_us = measure_ping(host, port, int(min(60, max(5, 60.0 / max(guess, 1.0)))))
            self.guess_ms[target] = rtt_us / 1e3
        return max(0.0, rtt_us - cpu_us) / 1e3, max(0.0, rtt_us - d_rtt) / 1e3

    def point(
        self, w: Workload, rtt: float, target: str, clients: int, cal: Calibration | None
    ) -> list[Record]:
        cfg = self.config
        in_proc = clients == 1 and cfg.rate is None
        client = counting_client(target, socket_timeout=60) if in_proc else None
        totals = {f: FormTotals() for f in w.forms}
        try:
            for form in w.forms:
                w.prepare(self.admin, form)
            for form in w.forms:  # warm-up, discarded
                self.slice(w, form, target, clients, cfg.warmup_s, client, timed=False)
                self.tick(f"{w.name} {form} warm-up rtt={rtt:g} clients={clients}")
            for _ in range(cfg.rounds):  # ABAB...
                for form in w.forms:
                    res, cost = self.slice(
                        w, form, target, clients, cfg.duration_s / cfg.rounds, client, timed=True
                    )
                    totals[form].add(res, cost)
                    self.tick(f"{w.name} {form} rtt={rtt:g} clients={clients}")
        finally:
            if client is not None:
                client.close()
        measured = cal.rtt_ms_measured if cal is not None else 0.0
        return [build_record(w, f, totals[f], rtt, measured, clients, cfg.rate) for f in w.forms]


def _hostport(url: str) -> tuple[str, int]:
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    return parts.hostname or "127.0.0.1", parts.port or 6379


def run_bench(
    url: str,
    workloads: Sequence[Workload],
    config: BenchConfig,
    progress: Callable[[Progress], None] | None = None,
) -> BenchResult:
    """Benchmark ``workloads`` on the real server at ``url``; never prints.

    Errors of single operations are counted in the records; losing the server itself (it
    stopped answering the harness) raises a :class:`~luapipe.errors.LuapipeError`.
    """
    if not url.startswith(("redis://", "rediss://")):
        raise LuapipeError(f"bench needs a TCP Redis URL (redis://host:port), not {mask_url(url)}")
    try:
        return _run_bench(url, workloads, config, progress)
    except redis.RedisError as exc:
        raise translate(exc, where=mask_url(url), sent=True) from None


def _run_bench(
    url: str,
    workloads: Sequence[Workload],
    config: BenchConfig,
    progress: Callable[[Progress], None] | None,
) -> BenchResult:
    run = _Run(url, workloads, config, progress)
    kw = run.admin.connection_pool.connection_kwargs
    host, port = str(kw.get("host", "127.0.0.1")), int(kw.get("port", 6379))
    spec: dict[str, Any] = {
        "config": asdict(config),
        "workloads": [w.describe() for w in workloads],
    }
    manifest = build_manifest(run.admin, url, spec)
    records: list[Record] = []
    cals: list[Calibration] = []
    proxy = RttProxy(host, port).start() if any(r > 0 for r in config.rtts_ms) else None
    try:
        for rtt in config.rtts_ms:
            cal = None
            target = url
            if rtt > 0 and proxy is not None:
                cal = calibrate(proxy, host, port, rtt)
                cals.append(cal)
                target = retarget(url, proxy.host, proxy.port)
            for clients in config.clients:
                for w in workloads:
                    records.extend(run.point(w, rtt, target, clients, cal))
        if proxy is not None:
            cals.insert(0, calibrate(proxy, host, port, 0.0))
            manifest["proxy_spin_us"] = proxy.spin_us
    finally:
        if proxy is not None:
            proxy.stop()
        run.admin.close()
    xs = []
    for w in workloads:
        for clients in config.clients:
            costs = []
            for form in w.forms:
                points = [
                    _point(r)
                    for r in records
                    if (r.operation, r.form, r.clients) == (w.name, form, clients)
                    and r.latency_ms.get("mean") is not None
                ]
                if points:
                    costs.append(fit_cost(form, points))
            xs.extend(crossovers(w.name, clients, costs))
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
    return BenchResult(
        manifest=manifest, calibrations=cals, records=records, crossovers=xs, notes=notes
    )


def _point(r: Record) -> tuple[float, float, float, float]:
    """(added RTT, wire time, round trips, mean latency) of one call."""
    mean = r.latency_ms.get("mean") or 0.0
    return r.rtt_ms_measured, r.wire_ms, r.round_trips_per_op * r.batch, mean
