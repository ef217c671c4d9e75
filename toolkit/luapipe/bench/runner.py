"""Run every form of each workload across RTTs and client counts, interleaved.

For each (RTT, clients, workload): every form is prepared (scripts loaded) and warmed up
(discarded), then timed in ``rounds`` slices in ABAB order, each round starting one form
later (over 10 rounds of 5 forms each form runs twice in each position, so a load that comes
and goes with the position in a round does not favour one form). Each slice starts from a fresh
keyspace, takes ``INFO commandstats`` before and after (server cost), runs the bystander
probe beside it, and ends with the workload's invariant check.

The run never flushes a database: every key it writes is under ``luapipe:bench:`` (see
``bench/benchkeys.py``), and it deletes them all at the end, also after an error.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from functools import partial
from typing import Any, TypeVar

import redis
import redis.cluster

from luapipe.bench.aggregate import (
    FormTotals,
    ServerCounters,
    SliceCost,
    build_record,
    server_cost,
)
from luapipe.bench.benchkeys import delete_run_keys
from luapipe.bench.calibrate import PingProbe
from luapipe.bench.loop import (
    Bystander,
    ClientPlan,
    WorkerResult,
    bounded,
    bystander_keys,
    run_client,
    run_clients,
    run_turns,
)
from luapipe.bench.manifest import build_manifest, refuse_fake
from luapipe.bench.patience import Events, patiently
from luapipe.bench.results import BenchResult, Record, finish
from luapipe.bench.rttproxy import Calibration, RttProxy, calibrate
from luapipe.bench.tasks import auto_forms, split_form
from luapipe.bench.topology import (
    counting_for,
    hostport,
    is_cluster_server,
    primaries,
    retarget,
    workload_skips,
)
from luapipe.bench.workloads import Workload
from luapipe.errors import LuapipeError, printable_url, translate
from luapipe.wire.connect import client_from_url

__all__ = ["BenchConfig", "Part", "Progress", "retarget", "run_bench"]

T = TypeVar("T")


@dataclass(frozen=True)
class BenchConfig:
    rtts_ms: tuple[float, ...] = (0.0,)
    clients: tuple[int, ...] = (1,)
    duration_s: float = 2.0  # timed seconds per form at each (rtt, clients) point
    warmup_s: float = 0.3
    rounds: int = 10  # interleaved rounds: the intervals and ties come from them
    rate: float | None = None  # open loop: total calls per second
    bystander: bool = True
    bystander_interval_s: float = 0.002
    seed: int = 1
    patience_s: float = 10.0  # how long the harness retries its own commands (restart, BUSY)
    tasks: int = 1  # asyncio tasks per client process; > 1 adds the auto-pipelined forms
    #: one client at RTT 0 (closed loop): each round also lets the forms take turns of 16
    #: calls (loop.TURN_CALLS) for this many times a form's slice; their p50s there decide
    #: (0: no turns). Over a
    #: simulated RTT a call is long and steady (the proxy's delay): a form's own slice gives
    #: more calls per round than a share of turns, and its p50 decides
    turns: float = 2.0


#: more workloads measured in the same run with their own settings (the demo's contention
#: slice: 4 clients on hot keys after the 1-client sweep)
Part = tuple[Sequence[Workload], BenchConfig]


#: why a ``rediss://`` URL is refused (its client connections could speak TLS; the PING
#: probes, the calibration and the counting connection do not)
NO_TLS = (
    "the benchmark measures plain TCP (its PING probes and delay proxy do not speak TLS): "
    "give it a redis:// URL of a port without TLS"
)


@dataclass(frozen=True)
class Progress:
    done: int
    total: int
    label: str


class _Run:
    def __init__(
        self,
        url: str,
        parts: Sequence[Part],
        progress: Callable[[Progress], None] | None,
    ) -> None:
        self.parts = [(list(ws), cfg) for ws, cfg in parts]
        self.workloads = [w for ws, _ in self.parts for w in ws]
        self.url, self.config = url, self.parts[0][1]
        self.proxy: RttProxy | None = None  # the delay proxy, while one runs
        self.node_admin = redis.Redis.from_url(url, socket_timeout=60)
        refuse_fake(self.node_admin)
        self.events = Events()
        self.cluster = patiently(
            lambda: is_cluster_server(self.node_admin), "connect", None, self.config.patience_s
        )
        self.admin: Any = self.node_admin
        if self.cluster:
            self.admin = redis.cluster.RedisCluster.from_url(url, socket_timeout=60)
        self.skips = {
            w.name: self.retry(partial(workload_skips, w, self.admin), "reset")
            for w in self.workloads
        }
        self.progress = progress
        self.done = 0
        self.guess_ms: dict[str, float] = {}
        self.pings = PingProbe()
        self.total = sum(
            len(cfg.rtts_ms) * len(cfg.clients) * len(self.forms(w, cfg)) * (cfg.rounds + 1)
            for ws, cfg in self.parts
            for w in ws
        )

    def forms(self, w: Workload, cfg: BenchConfig | None = None) -> tuple[str, ...]:
        """The forms of ``w`` that can run here (on a cluster: not the skipped ones); with
        several tasks per client (of ``cfg``, else the part being measured), their
        auto-pipelined variants too."""
        tasks = (cfg or self.config).tasks
        forms = auto_forms(w.forms) if tasks > 1 else tuple(w.forms)
        skips = self.skips.get(w.name, {})
        return tuple(f for f in forms if f not in skips and split_form(f)[0] not in skips)

    def retry(self, fn: Callable[[], T], what: str) -> T:
        """``fn()`` retried through restarts, BUSY and killed connections (idempotent)."""
        return patiently(fn, what, self.events, self.config.patience_s)

    def cost(self) -> ServerCounters:
        """INFO commandstats and cpu, summed over the primaries of a cluster."""
        return self.retry(lambda: server_cost(self.admin), "INFO commandstats")

    def cleanup(self) -> None:
        """Delete every key the run wrote (workloads' and the bystander's) and what the
        workloads loaded for themselves; best effort: the server may be gone already."""
        with contextlib.suppress(Exception):
            delete_run_keys(self.admin)
        for w in self.workloads:
            done = getattr(w, "cleanup", None)
            if done is not None:
                with contextlib.suppress(Exception):
                    done(self.admin)

    def close(self) -> None:
        self.pings.close()
        self.admin.close()
        if self.admin is not self.node_admin:
            self.node_admin.close()

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
        bystander: Bystander | None = None,
        round_no: int = 0,
    ) -> tuple[list[WorkerResult | str], SliceCost]:
        """One form for ``seconds``. Every form of a round draws the same keys and arguments
        (seed + round): their figures pair; the next round draws others."""
        cfg = self.config
        if self.proxy is not None:  # a proxy that died fails every call through it
            self.proxy.check()
        self.retry(lambda: w.reset(self.admin), "reset")
        by = bystander if timed else None
        if by is not None:
            keys = dict.fromkeys(bystander_keys(), "x" * 16)
            self.retry(lambda: self.admin.mset(keys), "reset")
            by.begin()
        try:
            wire = self.probe(target) if timed else (0.0, 0.0)
            before = self.cost()
            t0 = time.perf_counter() + 0.002  # forked workers: the window waits for them
            rate = cfg.rate / clients if cfg.rate else None
            seed = cfg.seed + 7919 * round_no
            plans = [
                ClientPlan(target, form, k, seed, t0, t0 + seconds, rate, self.cluster, cfg.tasks)
                for k in range(clients)
            ]
            if client is not None:
                with bounded(seconds + 0.002, f"{w.name} {form}"):
                    results: list[WorkerResult | str] = [run_client(w, client, plans[0])]
            else:
                results = run_clients(w, plans)
            after = self.cost()
            by_hist, by_count, _cpu = by.finish() if by is not None else (None, 0, 0.0)
        except BaseException:
            if by is not None:  # an error or an interrupt: stop the probe process too
                by.kill()
            raise
        calls = sum(r.calls for r in results if isinstance(r, WorkerResult))
        try:
            check = partial(w.check_invariant, self.admin, calls * w.batch)
            ok, detail = self.retry(check, "invariant check")
        except Exception as exc:  # a broken keyspace is a finding, not a crash
            ok, detail = False, f"invariant check raised {type(exc).__name__}: {exc}"
        window = time.perf_counter() - t0
        by_in_window = round(by_count * min(1.0, seconds / max(window + 0.05, 1e-9)))
        counted = getattr(w, "state", {}).get("checked") if ok or "raised" not in detail else None
        broken, checked = counted if counted is not None else (0 if ok else 1, 1)
        cost = SliceCost.of(
            before, after, by_in_window, by_hist, ok, detail, *wire, broken, checked
        )
        return results, cost

    def probe(self, target: str) -> tuple[float, float]:
        """Wire time of one round trip on ``target``'s path now (the mean of back-to-back
        PINGs, as the model is compared with mean latency), and what it adds to direct (ms);
        measured beside each slice, under the same load, so the model tracks it."""
        host, port = hostport(target)
        kw = self.node_admin.connection_pool.connection_kwargs
        direct = (str(kw.get("host", "127.0.0.1")), int(kw.get("port", 6379)))
        try:
            d_rtt, d_cpu = self.retry(partial(self.pings.mean_us, *direct, 8), "probe")
            if (host, port) == direct:
                rtt_us, cpu_us = d_rtt, d_cpu
            else:
                guess = self.guess_ms.get(target, 1.0)
                n = int(min(20, max(6, 6.0 / max(guess, 0.25))))
                probe = partial(self.pings.mean_us, host, port, n)
                rtt_us, cpu_us = self.retry(probe, "probe")
                self.guess_ms[target] = rtt_us / 1e3
        except (OSError, redis.RedisError, LuapipeError):  # no probe this slice
            return 0.0, 0.0
        return max(0.0, rtt_us - cpu_us) / 1e3, max(0.0, rtt_us - d_rtt) / 1e3

    def point(
        self, w: Workload, rtt: float, target: str, clients: int, cal: Calibration | None
    ) -> list[Record]:
        cfg = self.config
        in_proc = clients == 1 and cfg.rate is None and cfg.tasks == 1
        forms = self.forms(w)
        client = None
        if in_proc:
            client = self.retry(partial(counting_for, target, self.cluster), "connect")
        totals = {f: FormTotals() for f in forms}
        by = None
        if cfg.bystander and not self.cluster:
            by = Bystander(target, cfg.bystander_interval_s)
        try:
            for form in forms:
                base = split_form(form)[0]
                self.retry(partial(w.prepare, self.admin, base), f"prepare {form}")
            for form in forms:  # warm-up, discarded (it also loads scripts and functions)
                self.slice(w, form, target, clients, cfg.warmup_s, client, timed=False)
                self.tick(f"{w.name} {form} warm-up rtt={rtt:g} clients={clients}")
            for k in range(cfg.rounds):  # ABAB..., each round starting one form later
                order = forms[k % len(forms) :] + forms[: k % len(forms)]
                for form in order:
                    res, cost = self.slice(
                        w,
                        form,
                        target,
                        clients,
                        cfg.duration_s / cfg.rounds,
                        client,
                        timed=True,
                        bystander=by,
                        round_no=k + 1,
                    )
                    totals[form].add(res, cost, w.batch)
                    self.tick(f"{w.name} {form} rtt={rtt:g} clients={clients}")
                if client is not None and cfg.turns > 0 and len(forms) > 1 and rtt == 0:
                    seconds = cfg.turns * cfg.duration_s / cfg.rounds
                    self.retry(lambda: w.reset(self.admin), "reset")
                    with bounded(seconds, f"{w.name} {', '.join(order)}"):
                        turns = run_turns(w, client, order, cfg.seed + 7919 * (k + 1), seconds)
                    for form, hist in turns.items():
                        totals[form].rounds[-1]["p50_turns"] = hist.summary().p50
        finally:
            if by is not None:
                by.close()
            if client is not None:
                client.close()
        measured = cal.rtt_ms_measured if cal is not None else 0.0
        return [
            build_record(w, f, totals[f], rtt, measured, clients, cfg.rate, cfg.tasks)
            for f in forms
        ]


def run_bench(
    url: str,
    workloads: Sequence[Workload],
    config: BenchConfig,
    progress: Callable[[Progress], None] | None = None,
    *,
    also: Sequence[Part] = (),
) -> BenchResult:
    """Benchmark ``workloads`` on the real server at ``url``; never prints.

    ``also``: more (workloads, config) parts measured after the first in the same run, on
    the same server, into the same result (their records say their clients and contention).
    Errors of single operations are counted in the records; losing the server itself (it
    stopped answering the harness) raises a :class:`~luapipe.errors.LuapipeError`.
    """
    if url.startswith("rediss://"):
        raise LuapipeError(f"cannot benchmark {printable_url(url)}: {NO_TLS}")
    if not url.startswith("redis://"):
        raise LuapipeError(
            f"bench needs a TCP Redis URL (redis://host:port), not {printable_url(url)}"
        )
    # connected to once, as every command does first: an invalid URL (urllib would quote a
    # piece of a password holding a raw "/"), a refused connection (nothing ran) or a wrong
    # password reads as it does everywhere, before anything starts
    for ws, cfg in [(workloads, config), *also]:
        for w in ws:  # refused before anything starts, not as an error of every slice
            if cfg.tasks > 1 and getattr(w, "op_fn_async", None) is None:
                raise LuapipeError(
                    f"{w.name} has no asyncio calls (op_fn_async): run it with --tasks 1"
                )
    client_from_url(url).close()  # a cluster's client too (its first commands refused)
    try:
        return _run_bench(url, [(workloads, config), *also], progress)
    except redis.RedisError as exc:
        host, port = hostport(url)  # the node, as the transports name it
        raise translate(exc, where=f"{host}:{port}", sent=True) from None


def _run_bench(
    url: str, parts: Sequence[Part], progress: Callable[[Progress], None] | None
) -> BenchResult:
    run = _Run(url, parts, progress)
    try:
        return _measure(run, url)
    finally:  # also after an error or an interrupt: leave nothing of ours behind
        run.cleanup()
        run.close()


def _measure(run: _Run, url: str) -> BenchResult:
    config = run.config
    rtts = [r for _, cfg in run.parts for r in cfg.rtts_ms]
    if run.cluster and any(r > 0 for r in rtts):
        raise LuapipeError(
            "simulated RTT is not available on a cluster (the delay proxy fronts one node; "
            "redirects would bypass it): use --rtt 0"
        )
    kw = run.node_admin.connection_pool.connection_kwargs
    host, port = str(kw.get("host", "127.0.0.1")), int(kw.get("port", 6379))
    spec: dict[str, Any] = {
        "config": asdict(config),
        "workloads": [w.describe() for w in run.parts[0][0]],
    }
    if len(run.parts) > 1:
        spec["also"] = [
            {"config": asdict(cfg), "workloads": [w.describe() for w in ws]}
            for ws, cfg in run.parts[1:]
        ]
    manifest = run.retry(partial(build_manifest, run.node_admin, url, spec), "manifest")
    if run.cluster:
        manifest["redis"]["cluster_primaries"] = len(primaries(run.admin))
    records: list[Record] = []
    cals: dict[float, Calibration] = {}
    proxy = RttProxy(host, port).start() if any(r > 0 for r in rtts) else None
    run.proxy = proxy
    try:
        for workloads, cfg in run.parts:
            run.config = cfg
            for rtt in cfg.rtts_ms:
                cal = None
                target = url
                if rtt > 0 and proxy is not None:
                    if rtt not in cals:
                        cals[rtt] = run.retry(
                            partial(calibrate, proxy, host, port, rtt), "calibrate"
                        )
                    cal = cals[rtt]
                    target = retarget(url, proxy.host, proxy.port)
                for clients in cfg.clients:
                    for w in workloads:
                        records.extend(run.point(w, rtt, target, clients, cal))
        calibrations = list(cals.values())
        if proxy is not None:
            direct = run.retry(partial(calibrate, proxy, host, port, 0.0), "calibrate")
            calibrations.insert(0, direct)
            manifest["proxy_spin_us"] = proxy.spin_us
    except (LuapipeError, redis.RedisError, OSError):
        if proxy is not None:  # (its control pipe: BrokenPipeError) say so, not the symptom
            proxy.check()
        raise
    finally:
        run.proxy = None
        if proxy is not None:
            proxy.stop()
    return finish(
        manifest,
        calibrations,
        records,
        [(w.name, run.forms(w, cfg)) for ws, cfg in run.parts for w in ws],
        cluster=run.cluster,
        skipped=[
            {"operation": name, "form": f, "reason": why}
            for name, forms in run.skips.items()
            for f, why in forms.items()
        ],
        events=run.events.as_list(),
    )
