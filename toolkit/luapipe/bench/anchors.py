"""Reproduce the published figures (REDIS_FACTS.md) on this machine, and check the harness.

- 10k PINGs one by one vs in one pipeline, bare redis-py on loopback (Redis docs: 4.7x);
- the harness itself: pipelined PING throughput through :func:`run_bench` vs a bare loop in
  the same run (should be >= 90%);
- Redis in Action table 4.4: update_token one call at a time vs pipelined at RTT 0.271 ms
  (3.8x) and 48 ms (5.0x), with the proxy calibration and the model error beside them.

Each RTT is timed long enough for the slowest form (naive: 5 round trips a call) to complete
:data:`CALLS_PER_FORM` calls, so no published point ends in "too few samples" (at 48 ms that
is about 7 s per form); a point where a form still fell short (a busy machine) runs again,
longer. Progress is reported from the start: each PING run, each harness
check, each benchmark slice and each proxy calibration is a step.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import redis

from luapipe.bench.results import BenchResult, finish
from luapipe.bench.rttproxy import Calibration, RttProxy, calibrate
from luapipe.bench.runner import BenchConfig, Progress, run_bench
from luapipe.bench.verdict import MIN_CALLS
from luapipe.bench.workloads import PingWorkload, UpdateTokenWorkload

__all__ = ["AnchorReport", "CALLS_PER_FORM", "DURATION_S", "anchor_duration_s", "run_anchors"]

#: timed seconds per form at an RTT where the slowest form needs no more
DURATION_S = 3.0
#: timed calls the slowest form completes at each RTT: half again the verdict's minimum
CALLS_PER_FORM = MIN_CALLS * 3 // 2
#: round trips of update_token's slowest form (naive: HSET, ZADD, ZADD, ZREMRANGEBYRANK,
#: ZINCRBY, one at a time)
SLOWEST_TRIPS = 5
#: what a round trip costs beyond the added RTT (loopback, client and server CPU, proxy), ms
TRIP_OVERHEAD_MS = 0.3


def anchor_duration_s(rtt_ms: float, base_s: float) -> float:
    """Timed seconds per form at ``rtt_ms``: ``base_s``, or longer where the slowest form
    would otherwise complete fewer than :data:`CALLS_PER_FORM` calls."""
    call_s = SLOWEST_TRIPS * (rtt_ms + TRIP_OVERHEAD_MS) / 1000.0
    return max(base_s, CALLS_PER_FORM * call_s)


class _Steps:
    """Progress over the anchors' phases: a step is done when it ends; the benchmark's own
    slices count as steps too (its total replaces the estimate once it is known)."""

    def __init__(self, report: Callable[[Progress], None] | None, total: int) -> None:
        self.report, self.done, self.total = report, 0, total

    def start(self, label: str) -> None:
        if self.report is not None:
            self.report(Progress(self.done, self.total, label))

    def step(self, label: str) -> None:
        self.done += 1
        self.start(label)

    def bench(self, estimate: int) -> Callable[[Progress], None]:
        """A progress callback for one :func:`run_bench` whose ticks were estimated as
        ``estimate`` steps: the run's own total replaces the estimate."""
        base, expected = self.done, [estimate]

        def tick(p: Progress) -> None:
            self.total += p.total - expected[0]
            expected[0] = p.total
            self.done = base + p.done
            self.start(p.label)

        return tick


@dataclass(frozen=True)
class AnchorReport:
    ping_sequential_s: float
    ping_pipelined_s: float
    harness_pings_per_s: float
    bare_pings_per_s: float
    bench: BenchResult
    accuracy: tuple[Calibration, ...] = ()

    @property
    def harness_ratio(self) -> float:
        return self.harness_pings_per_s / self.bare_pings_per_s

    def ratio(self, rtt: float, a: str = "pipelined", b: str = "naive") -> float | None:
        rec = {r.form: r for r in self.bench.records if r.rtt_ms_nominal == rtt}
        if a in rec and b in rec and rec[b].ops_per_sec:
            return rec[a].ops_per_sec / rec[b].ops_per_sec
        return None

    def lines(self) -> list[str]:
        """The figures as text, published values beside ours."""
        out = [
            "10k PINGs on loopback (median of 3): one by one "
            f"{self.ping_sequential_s:.3f} s, pipelined "
            f"{self.ping_pipelined_s:.3f} s: {self.ping_sequential_s / self.ping_pipelined_s:.1f}x "
            "(Redis docs: 1.185 s vs 0.251 s, 4.7x)",
            f"harness (best of 5): pipelined PING {self.harness_pings_per_s:,.0f}/s through the "
            "harness vs "
            f"{self.bare_pings_per_s:,.0f}/s bare redis-py: {self.harness_ratio:.0%} "
            "(target >= 90%)",
        ]
        published = {0.271: (739, 2841, 3.8), 48.0: (3.67, 18.2, 5.0)}
        for rtt in sorted({r.rtt_ms_nominal for r in self.bench.records}):
            rec = {r.form: r for r in self.bench.records if r.rtt_ms_nominal == rtt}
            naive, pipe = rec.get("naive"), rec.get("pipelined")
            if naive is None or pipe is None:
                continue
            ratio = pipe.ops_per_sec / naive.ops_per_sec if naive.ops_per_sec else 0.0
            pub = published.get(rtt)
            ref = f" (Redis in Action: {pub[0]:g} vs {pub[1]:g}, {pub[2]}x)" if pub else ""
            out.append(
                f"update_token at RTT {rtt:g} ms (measured {naive.rtt_ms_measured:.3f}): "
                f"naive {naive.ops_per_sec:,.2f}/s vs pipelined {pipe.ops_per_sec:,.2f}/s: "
                f"{ratio:.2f}x{ref}"
            )
            for r in rec.values():
                if r.model_error_pct is not None:
                    out.append(
                        f"  model {r.form}: predicted {r.model_latency_ms:.3f} ms vs measured "
                        f"{r.latency_ms['mean']:.3f} ms per call ({r.model_error_pct:+.1f}%)"
                    )
        machine = self.bench.manifest.get("machine", {})
        out.append(
            f"machine: {machine.get('cpus')} CPUs, load average at start "
            f"{machine.get('load_average_at_start')}, at end {machine.get('load_average_at_end')}"
        )
        for c in (*self.bench.calibrations, *self.accuracy):
            if c.rtt_ms_nominal > 0 and c.error_pct is not None:
                out.append(
                    f"proxy: nominal {c.rtt_ms_nominal:g} ms, measured {c.rtt_ms_measured:.4f} ms "
                    f"({c.error_pct:+.1f}%, target within 10%)"
                )
            else:
                out.append(
                    f"proxy overhead at rtt 0: {c.proxy_overhead_ms:.4f} ms per round trip "
                    f"(direct PING {c.direct_ping_ms:.4f} ms)"
                )
        return out


def _ping_times(client: redis.Redis, n: int) -> tuple[float, float]:
    t = time.perf_counter()
    for _ in range(n):
        client.ping()
    seq = time.perf_counter() - t
    t = time.perf_counter()
    pipe = client.pipeline(transaction=False)
    for _ in range(n):
        pipe.ping()
    pipe.execute()
    return seq, time.perf_counter() - t


def _bare_pipelined_rate(client: redis.Redis, batch: int, seconds: float) -> float:
    done, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        pipe = client.pipeline(transaction=False)
        for _ in range(batch):
            pipe.ping()
        pipe.execute()
        done += batch
    return done / (time.perf_counter() - t0)


def run_anchors(
    url: str,
    *,
    rtts_ms: tuple[float, ...] = (0.271, 48.0),
    duration_s: float = DURATION_S,
    progress: Callable[[Progress], None] | None = None,
    pings: int = 10_000,
    harness_tries: int = 5,
    accuracy_rtts: tuple[float, ...] | None = None,
) -> AnchorReport:
    """Run the anchor figures against the real server at ``url``; never prints.

    ``duration_s`` is the least timed time per form at each RTT (see
    :func:`anchor_duration_s`)."""
    accuracy = ACCURACY_RTTS if accuracy_rtts is None else accuracy_rtts
    work = UpdateTokenWorkload(forms=("naive", "pipelined", "script"))
    config = BenchConfig(duration_s=duration_s, warmup_s=0.3, rounds=6)
    per_point = len(work.forms) * (config.rounds + 1)
    steps = _Steps(progress, 3 + harness_tries + per_point * len(rtts_ms) + len(accuracy))
    steps.start(f"{pings:,} PINGs one by one, then pipelined (run 1 of 3)")
    client = redis.Redis.from_url(url)
    try:
        _ping_times(client, max(1, pings // 10))  # warm-up
        runs = []
        for k in range(3):  # medians: a shared machine
            runs.append(_ping_times(client, pings))
            steps.step(f"{pings:,} PINGs, run {k + 1} of 3 done")
        seq = statistics.median(r[0] for r in runs)
        pipe = statistics.median(r[1] for r in runs)
        batch, harness, bare = 1000, [], []
        ping = PingWorkload(batch=batch)
        quick = BenchConfig(duration_s=0.5, warmup_s=0.1, rounds=1, bystander=False)
        for k in range(harness_tries):  # interleaved bare/harness; best of each
            bare.append(_bare_pipelined_rate(client, batch, 0.5))
            res = run_bench(url, [_only(ping, "pipelined")], quick)
            harness.append(res.records[0].ops_per_sec)
            steps.step(f"harness check {k + 1} of {harness_tries}")
    finally:
        client.close()
    parts = [
        _point(url, work, replace(config, rtts_ms=(rtt,)), duration_s, steps, per_point)
        for rtt in rtts_ms
    ]
    bench = _merged(parts, work, config, duration_s)
    cals = _proxy_accuracy(url, accuracy, steps)
    return AnchorReport(seq, pipe, max(harness), max(bare), bench, cals)


#: runs of one RTT point at most: the estimate, then longer runs while a form fell short
POINT_TRIES = 3


def _point(
    url: str,
    work: UpdateTokenWorkload,
    config: BenchConfig,
    base_s: float,
    steps: _Steps,
    per_point: int,
) -> BenchResult:
    """One RTT, timed for :data:`CALLS_PER_FORM` calls of the slowest form: first by the
    estimate, then, if a form still completed fewer than the verdict's minimum (a busy
    machine, a slow proxy), again for as long as the calls it did complete say it needs."""
    seconds = anchor_duration_s(config.rtts_ms[0], base_s)
    for attempt in range(POINT_TRIES):
        point = replace(config, duration_s=seconds)
        # a longer run after the first was not in the estimate: its steps add to the total
        result = run_bench(url, [work], point, steps.bench(per_point if attempt == 0 else 0))
        fewest = min(r.calls + r.errors for r in result.records)
        if fewest >= MIN_CALLS:
            break
        seconds *= min(10.0, CALLS_PER_FORM / max(fewest, 1) * 1.2)
    return result


def _merged(
    parts: list[BenchResult], work: UpdateTokenWorkload, config: BenchConfig, base_s: float
) -> BenchResult:
    """One result from the per-RTT runs (each RTT ran its own duration)."""
    manifest = parts[0].manifest
    rtts = [r for p in parts for r in p.manifest["spec"]["config"]["rtts_ms"]]
    manifest["spec"]["config"].update(rtts_ms=rtts, duration_s=base_s)
    manifest["spec"]["config"]["durations_s"] = {
        f"{p.manifest['spec']['config']['rtts_ms'][0]:g}": p.manifest["spec"]["config"][
            "duration_s"
        ]
        for p in parts
    }
    direct = [c for p in parts for c in p.calibrations if c.rtt_ms_nominal == 0][:1]
    cals = direct + [c for p in parts for c in p.calibrations if c.rtt_ms_nominal > 0]
    result = finish(
        manifest,
        cals,
        [r for p in parts for r in p.records],
        [(work.name, work.forms)],
        cluster=False,
        skipped=[],
        events=[e for p in parts for e in p.errors if e.get("operation") == "harness"],
    )
    longer = [f"{r} ms: {d:.1f} s" for r, d in manifest["spec"]["config"]["durations_s"].items()
              if d > base_s]  # fmt: skip
    if longer:
        result.notes.insert(
            0,
            f"Timed seconds per form were raised where the slowest form (naive, "
            f"{SLOWEST_TRIPS} round trips a call) would otherwise complete fewer than "
            f"{CALLS_PER_FORM} calls (the verdict needs {MIN_CALLS}): {', '.join(longer)}.",
        )
    return result


ACCURACY_RTTS = (0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0)


def _proxy_accuracy(url: str, rtts: tuple[float, ...], steps: _Steps) -> tuple[Calibration, ...]:
    """Calibrate the proxy at each RTT: nominal vs measured PING round trip."""
    admin = redis.Redis.from_url(url)
    kw = admin.connection_pool.connection_kwargs
    host, port = str(kw.get("host", "127.0.0.1")), int(kw.get("port", 6379))
    admin.close()
    out = []
    with RttProxy(host, port) as proxy:
        for rtt in rtts:
            out.append(calibrate(proxy, host, port, rtt))
            steps.step(f"proxy calibrated at {rtt:g} ms")
    return tuple(out)


def _only(w: PingWorkload, form: str) -> PingWorkload:
    return PingWorkload(batch=w.batch, forms=(form,))
