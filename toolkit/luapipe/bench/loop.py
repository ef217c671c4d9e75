"""The timed loops: one benchmark client (closed or open loop) and the bystander probe.

A client runs ``op(i)`` from ``t_start`` to ``t_end``. Closed loop: the next call starts when
the previous one ends. Open loop (``rate``): calls are due at ``t_start + i / rate``; latency
is measured from the due time (coordinated omission corrected) and, beside it, from the
actual start. A failing call is counted as an error with a sample of its message; the loop
carries on. Worker processes are forked; results come back as encoded histograms.
"""

from __future__ import annotations

import multiprocessing as mp
import signal
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import redis

from luapipe.bench.benchkeys import key
from luapipe.bench.counting import counters, counting_client
from luapipe.bench.stats import LatencyHistogram
from luapipe.bench.workloads import Workload
from luapipe.errors import LuapipeError, mask_url

__all__ = [
    "Bystander",
    "ClientPlan",
    "WorkerResult",
    "bystander_keys",
    "client_for",
    "run_client",
    "run_clients",
    "wait_until",
]

SPIN_S = 150e-6  # time.sleep overshoots ~90-110 us here: sleep to 150 us before, then spin
MAX_ERROR_SAMPLES = 3


def wait_until(deadline: float) -> None:
    """Sleep until shortly before ``deadline`` (perf_counter), then spin."""
    left = deadline - time.perf_counter()
    if left > SPIN_S:
        time.sleep(left - SPIN_S)
    while time.perf_counter() < deadline:
        pass


@dataclass(frozen=True)
class ClientPlan:
    url: str
    form: str
    worker: int
    seed: int
    t_start: float
    t_end: float
    rate: float | None = None  # calls per second for this client (open loop)
    cluster: bool = False  # url is a cluster node: use a cluster client


@dataclass(frozen=True)
class WorkerResult:
    hist: bytes  # latency per call, from the intended start
    hist_uncorrected: bytes  # open loop: from the actual start (empty in closed loop)
    calls: int
    errors: int
    error_samples: tuple[str, ...]
    retries: int
    round_trips: int
    commands: int
    cpu_s: float
    elapsed_s: float


def run_client(workload: Workload, client: redis.Redis, plan: ClientPlan) -> WorkerResult:
    """Run one client's loop in this thread; ``client`` should be a counting client."""
    op = workload.op_fn(client, plan.form, plan.worker, plan.seed)
    hist, raw = LatencyHistogram(), LatencyHistogram()
    calls = errors = retries = 0
    samples: list[str] = []
    before = counters(client)
    interval = 1.0 / plan.rate if plan.rate else 0.0
    wait_until(plan.t_start)
    cpu0, clock = time.thread_time(), time.perf_counter
    t0 = clock()
    last_end = t0
    i = 0
    while True:
        due = t0 + i * interval if interval else clock()
        if due >= plan.t_end:
            break
        if interval:
            wait_until(due)
        start = clock()
        try:
            retries += op(i)
            ok = True
        except (redis.RedisError, LuapipeError, OSError) as exc:
            ok = False
            errors += 1
            if len(samples) < MAX_ERROR_SAMPLES:
                samples.append(mask_url(f"{type(exc).__name__}: {exc}")[:200])
        last_end = clock()
        if ok:
            calls += 1
            hist.record_seconds(last_end - due)
            if interval:
                raw.record_seconds(last_end - start)
        i += 1
    cpu = time.thread_time() - cpu0
    delta = counters(client).minus(before)
    return WorkerResult(
        hist=hist.encode(),
        hist_uncorrected=raw.encode() if interval else b"",
        calls=calls,
        errors=errors,
        error_samples=tuple(samples),
        retries=retries,
        round_trips=delta.round_trips,
        commands=delta.commands,
        cpu_s=cpu,
        # the window, not the calls' own time: in open loop the client idles between calls
        elapsed_s=max(max(last_end, plan.t_end) - t0, 1e-9),
    )


def _connect(client: redis.Redis) -> None:
    pool: Any = client.connection_pool
    pool.release(pool.get_connection())


def client_for(plan: ClientPlan) -> redis.Redis:
    """A connected counting client for ``plan`` (a cluster client on a cluster)."""
    if plan.cluster:
        from luapipe.bench.topology import counting_cluster_client

        rc: Any = counting_cluster_client(plan.url)
        return rc  # type: ignore[no-any-return]
    client = counting_client(plan.url, socket_timeout=30)
    _connect(client)
    return client


def _default_sigterm() -> None:
    """A forked worker dies at once on SIGTERM (the parent's handler turns SIGTERM into
    KeyboardInterrupt so that it cleans up; a worker has nothing to clean up)."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _worker_main(workload: Workload, plan: ClientPlan, out: Connection) -> None:
    _default_sigterm()
    try:
        client = client_for(plan)
        out.send(run_client(workload, client, plan))
    except BaseException as exc:  # the parent reports it; a worker never hangs the run
        out.send(f"{type(exc).__name__}: {mask_url(str(exc))}")
    finally:
        out.close()


def run_clients(workload: Workload, plans: list[ClientPlan]) -> list[WorkerResult | str]:
    """Run each plan in a forked worker process; a string result is a worker's failure.

    Every worker is stopped before this returns or raises (an interrupt included)."""
    ctx = mp.get_context("fork")
    procs: list[tuple[Any, Connection]] = []
    try:
        for plan in plans:
            recv, send = ctx.Pipe(duplex=False)
            p = ctx.Process(target=_worker_main, args=(workload, plan, send), daemon=True)
            p.start()
            send.close()
            procs.append((p, recv))
        results: list[WorkerResult | str] = []
        for p, recv in procs:
            try:
                results.append(recv.recv())
            except EOFError:
                results.append(f"worker {p.pid} exited with code {p.exitcode}")
            p.join(timeout=10)
        return results
    finally:
        for p, recv in procs:
            _stop(p)
            recv.close()


def _stop(p: Any) -> None:
    """Stop one of this process's own workers (by its Process handle) and reap it."""
    if p.is_alive():
        p.terminate()
        p.join(timeout=5)
        if p.is_alive():
            p.kill()
            p.join()


def bystander_keys() -> list[str]:
    """The bystander's own 100 keys, under the benchmark's prefix (deleted after the run)."""
    return [key("bystander", str(k)) for k in range(100)]


def _bystander_main(url: str, interval_s: float, stop: Any, out: Connection) -> None:
    _default_sigterm()
    hist = LatencyHistogram()
    cpu = 0.0
    try:
        client = redis.Redis.from_url(url, socket_timeout=30)
        names = bystander_keys()
        client.get(names[0])  # connect before timing
        client.mset(dict.fromkeys(names, "x" * 16))
        i = 0
        nxt = time.perf_counter()
        while not stop.is_set():
            c, t = time.thread_time(), time.perf_counter()
            client.get(names[i % len(names)])
            hist.record_seconds(time.perf_counter() - t)
            cpu += time.thread_time() - c
            i += 1
            nxt += interval_s
            wait_until(max(nxt, time.perf_counter()))
    except (redis.RedisError, OSError):
        pass
    out.send((hist.encode(), hist.count, cpu))
    out.close()


class Bystander:
    """A light client doing GETs on its own keys in another process while a form runs."""

    def __init__(self, url: str, interval_s: float = 0.002) -> None:
        ctx = mp.get_context("fork")
        self._stop = ctx.Event()
        self._recv, send = ctx.Pipe(duplex=False)
        self._proc = ctx.Process(
            target=_bystander_main, args=(url, interval_s, self._stop, send), daemon=True
        )
        self._proc.start()
        send.close()

    def finish(self) -> tuple[LatencyHistogram, int, float]:
        """Stop the probe (this process's own child): its histogram, GET count and the
        client CPU seconds those GETs took."""
        self._stop.set()
        try:
            data, count, cpu = self._recv.recv()
        except EOFError:
            data, count, cpu = b"", 0, 0.0
        finally:
            self._proc.join(timeout=10)
            _stop(self._proc)
            self._recv.close()
        return LatencyHistogram.decode(data), int(count), float(cpu)

    def kill(self) -> None:
        """Stop the probe without waiting for its results (after an error or interrupt)."""
        self._stop.set()
        _stop(self._proc)
        self._recv.close()
