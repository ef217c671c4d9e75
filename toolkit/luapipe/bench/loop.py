"""The timed loops: one benchmark client (closed or open loop) and the bystander probe.

A client runs ``op(i)`` from ``t_start`` to ``t_end``. Closed loop: the next call starts when
the previous one ends. Open loop (``rate``): calls are due at ``t_start + i / rate``; latency
is measured from the due time (coordinated omission corrected) and, beside it, from the
actual start. A failing call is counted as an error with a sample of its message; the loop
carries on. Worker processes are forked; results come back as encoded histograms.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection
from typing import Any

import redis

from luapipe.bench import running
from luapipe.bench.benchkeys import key
from luapipe.bench.counting import Counts, counters, counting_client
from luapipe.bench.stats import LatencyHistogram
from luapipe.bench.workloads import Workload
from luapipe.errors import LuapipeError, mask_url

__all__ = [
    "Bystander",
    "ClientPlan",
    "WorkerResult",
    "bounded",
    "bystander_keys",
    "client_for",
    "run_client",
    "run_clients",
    "run_turns",
    "runqueue_wait_s",
    "wait_until",
]

#: a forked worker's word that it connected and waits for its window's start
READY = "ready"
READY_TIMEOUT_S = 30.0
SPIN_S = 150e-6  # time.sleep overshoots ~90-110 us here: sleep to 150 us before, then spin
MAX_ERROR_SAMPLES = 3
#: a call still running this long after its timed window ended will not return (a form
#: stuck in a team's Python code: nothing else bounds it): the run stops with that error
HUNG_AFTER_S = 30.0


def _hung(what: str) -> LuapipeError:
    return LuapipeError(
        f"{what}: a call was still running {HUNG_AFTER_S:g} s after its timed window ended "
        "(a form that never returns?); the run stopped"
    )


class _Hung(BaseException):
    """Raised by the alarm of :func:`bounded`: past the loops' counting of failed calls."""


@contextlib.contextmanager
def bounded(seconds: float, what: str) -> Iterator[None]:
    """Run the block (a timed window of ``seconds`` in this thread) for at most ``seconds``
    + :data:`HUNG_AFTER_S`, then stop it with :func:`_hung`'s error; SIGALRM, so only in
    the main thread (elsewhere the block is not bounded)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def expired(signum: int, frame: Any) -> None:
        raise _Hung

    before = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds + HUNG_AFTER_S)
    try:
        yield
    except _Hung:
        raise _hung(what) from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, before)


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
    tasks: int = 1  # asyncio tasks in this client process (bench/tasks.py) when > 1


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
    wrote: int | None = None  # calls whose reply says they wrote (None: cannot tell)
    wait_s: float = 0.0  # runnable but waiting for a CPU (Linux schedstat), 0 if unknown


def run_client(workload: Workload, client: redis.Redis, plan: ClientPlan) -> WorkerResult:
    """Run one client's loop in this thread; ``client`` should be a counting client."""
    op = workload.op_fn(client, plan.form, plan.worker, plan.seed)
    hist, raw = LatencyHistogram(), LatencyHistogram()
    calls = errors = retries = 0
    samples: list[str] = []
    own = getattr(op, "counts", None)  # a form with a client of its own (asyncio) counts it
    before = _plus(counters(client), own)
    interval = 1.0 / plan.rate if plan.rate else 0.0
    wait_until(plan.t_start)
    wrote0 = getattr(op, "wrote", None)
    wait0 = runqueue_wait_s()
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
    waited = runqueue_wait_s() - wait0
    wrote = getattr(op, "wrote", None)
    delta = _plus(counters(client), own).minus(before)
    close = getattr(op, "close", None)
    if close is not None:
        close()
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
        wrote=None if wrote is None or wrote0 is None else int(wrote) - int(wrote0),
        wait_s=max(0.0, waited),
    )


def _plus(counts: Counts, own: Any) -> Counts:
    extra = own() if own is not None else None
    if extra is None:
        return counts
    return Counts(counts.round_trips + extra.round_trips, counts.commands + extra.commands)


#: calls per turn of :func:`run_turns`, the first of them untimed
TURN_CALLS = 16


def run_turns(
    workload: Workload,
    client: redis.Redis,
    forms: tuple[str, ...],
    seed: int,
    seconds: float,
    calls: int = TURN_CALLS,
) -> dict[str, LatencyHistogram]:
    """One client, the ``forms`` taking turns (A, B, C, A, B, C...) of ``calls`` calls each
    for ``seconds``: each form's latencies. A moment of the host (a stall, a slow spell)
    then falls on every form alike, so their medians compare at a fine pairing.

    The first call of a turn is not timed: after another form's calls, the client's code
    and the server's (a script and a function run in different Lua states) start cold, and
    call by call (A, B, A, B) that cost 3 to 15% per call, more for some forms than for
    others, enough to move a ratio of two forms by 3 to 5% (pipelined against transaction
    read 0.915 where their own slices read 0.887). Failed calls are not timed (the forms'
    own slices count them)."""
    fns = {f: workload.op_fn(client, f, 0, seed) for f in forms}
    hists = {f: LatencyHistogram() for f in forms}
    clock = time.perf_counter
    end = clock() + seconds
    turn = 0
    while clock() < end:
        for f in forms:
            for j in range(calls):  # each form's calls numbered 0, 1, 2... as in its slice
                start = clock()
                try:
                    fns[f](turn * calls + j)
                except (redis.RedisError, LuapipeError, OSError):
                    continue
                if j:
                    hists[f].record_seconds(clock() - start)
        turn += 1
    for fn in fns.values():  # a form with a client of its own (asyncio) closes it
        close = getattr(fn, "close", None)
        if close is not None:
            close()
    return hists


def runqueue_wait_s() -> float:
    """Seconds this thread has spent runnable but waiting for a CPU (Linux
    ``/proc/thread-self/schedstat``; 0.0 where the kernel does not say)."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return 0.0


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
    """A forked worker dies at once on SIGTERM or SIGHUP (the parent's handler turns them
    into KeyboardInterrupt so that it cleans up; a worker has nothing to clean up), and
    leaves a Ctrl-C to the parent, which stops it."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _worker_main(workload: Workload, plan: ClientPlan, out: Connection) -> None:
    """Connect, say "ready", take the window's start from the parent, run, send the result."""
    _default_sigterm()
    try:
        if plan.tasks > 1:  # many requests in flight: asyncio tasks (bench/tasks.py)
            from luapipe.bench.tasks import run_tasks

            out.send(WorkerResult(**run_tasks(workload, plan, runqueue_wait_s)))
            return
        client = client_for(plan)
        out.send(READY)
        start = float(out.recv())
        span = plan.t_end - plan.t_start
        out.send(run_client(workload, client, replace(plan, t_start=start, t_end=start + span)))
    except BaseException as exc:  # the parent reports it; a worker never hangs the run
        out.send(f"{type(exc).__name__}: {mask_url(str(exc))}")
    finally:
        out.close()


def run_clients(workload: Workload, plans: list[ClientPlan]) -> list[WorkerResult | str]:
    """Run each plan in a forked worker process; a string result is a worker's failure.

    The timed windows open together once every worker has connected (not before the plans'
    ``t_start``), so a worker forked late on a busy machine does not miss its window; each
    window keeps its planned length. Every worker is stopped before this returns or raises
    (an interrupt included)."""
    ctx = mp.get_context("fork")
    procs: list[tuple[Any, Connection]] = []
    n = len(plans)
    token = running.started(f"{n} benchmark worker{'' if n == 1 else 's'}")
    try:
        for plan in plans:
            mine, theirs = ctx.Pipe(duplex=True)
            p = ctx.Process(target=_worker_main, args=(workload, plan, theirs), daemon=True)
            with running.forking():  # an interrupt meanwhile: raised once p is in procs
                p.start()
                theirs.close()
                procs.append((p, mine))
        early: dict[int, WorkerResult | str] = {}
        for n, (p, conn) in enumerate(procs):  # each says "ready", or why it cannot run
            if plans[n].tasks > 1:  # asyncio tasks say nothing before their window's result
                end = plans[n].t_end + HUNG_AFTER_S
                if not conn.poll(max(READY_TIMEOUT_S, end - time.perf_counter())):
                    raise _hung(f"{workload.name} {plans[n].form}")
                early[n] = _receive(p, conn, None)
                continue
            said = _receive(p, conn, READY_TIMEOUT_S)
            if said != READY:
                early[n] = said
        start = max(time.perf_counter() + 0.002, min(plan.t_start for plan in plans))
        for n, (_, conn) in enumerate(procs):
            if n not in early:
                conn.send(start)
        results: list[WorkerResult | str] = []
        end = start + max(plan.t_end - plan.t_start for plan in plans) + HUNG_AFTER_S
        for n, (p, conn) in enumerate(procs):
            if n not in early and not conn.poll(max(0.0, end - time.perf_counter())):
                raise _hung(f"{workload.name} {plans[n].form}")
            results.append(early[n] if n in early else _receive(p, conn, None))
            p.join(timeout=10)
        return results
    finally:
        for p, recv in procs:
            _stop(p)
            recv.close()
        running.stopped(token)


def _receive(p: Any, conn: Connection, timeout: float | None) -> Any:
    """What worker ``p`` sends next, or why nothing came."""
    try:
        if timeout is not None and not conn.poll(timeout):
            return f"worker {p.pid} did not connect within {timeout:g} s"
        return conn.recv()
    except EOFError:
        p.join(timeout=1)
        return f"worker {p.pid} exited with code {p.exitcode}"


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


def _bystander_main(url: str, interval_s: float, ctl: Connection) -> None:
    """Wait for "go", GET until "stop", send that slice's histogram; until "quit"."""
    _default_sigterm()
    client = redis.Redis.from_url(url, socket_timeout=30)
    names = bystander_keys()
    with contextlib.suppress(redis.RedisError, OSError):
        client.get(names[0])  # connect before timing
    while _command(ctl) == "go":
        hist = LatencyHistogram()
        cpu = 0.0
        i = 0
        nxt = time.perf_counter()
        while not ctl.poll():
            c, t = time.thread_time(), time.perf_counter()
            try:
                client.get(names[i % len(names)])
            except (redis.RedisError, OSError):  # the server is restarting: try again later
                time.sleep(interval_s)
            else:
                hist.record_seconds(time.perf_counter() - t)
            cpu += time.thread_time() - c
            i += 1
            nxt += interval_s
            wait_until(max(nxt, time.perf_counter()))
        ctl.recv()  # "stop"
        ctl.send((hist.encode(), hist.count, cpu))
    ctl.close()


def _command(ctl: Connection) -> str:
    try:
        return str(ctl.recv())
    except (EOFError, OSError):  # the parent is gone
        return "quit"


class Bystander:
    """A light client doing GETs on its own keys in another process while a form runs.

    One process serves every slice of a point: :meth:`begin` before the slice,
    :meth:`finish` after it (a fork per slice cost ~25 ms on this 2-vCPU machine)."""

    def __init__(self, url: str, interval_s: float = 0.002) -> None:
        ctx = mp.get_context("fork")
        self._ctl, child = ctx.Pipe(duplex=True)
        self._proc = ctx.Process(target=_bystander_main, args=(url, interval_s, child), daemon=True)
        self._token: int | None = None
        try:
            with running.forking():  # an interrupt meanwhile: raised once it is recorded
                self._proc.start()
                self._token = running.started(f"the bystander probe (pid {self._proc.pid})")
                child.close()
        except BaseException:  # the caller does not hold the probe yet: stop it here
            self.kill()
            raise

    def begin(self) -> None:
        self._ctl.send("go")

    def finish(self) -> tuple[LatencyHistogram, int, float]:
        """End this slice's probe: its histogram, GET count and the client CPU seconds
        those GETs took."""
        try:
            self._ctl.send("stop")
            if not self._ctl.poll(30):
                raise EOFError
            data, count, cpu = self._ctl.recv()
        except (EOFError, OSError):
            data, count, cpu = b"", 0, 0.0
        return LatencyHistogram.decode(data), int(count), float(cpu)

    def close(self) -> None:
        """Stop the probe process (this process's own child)."""
        with contextlib.suppress(OSError):
            self._ctl.send("quit")
        self._proc.join(timeout=5)
        self.kill()

    def kill(self) -> None:
        """Stop the probe without waiting for its results (after an error or interrupt)."""
        _stop(self._proc)
        self._ctl.close()
        if self._token is not None:
            running.stopped(self._token)
            self._token = None
