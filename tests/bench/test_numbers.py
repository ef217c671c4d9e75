"""The numbers behind a verdict, pinned by value: known latencies through the real
aggregation, two workers whose merged percentiles are known, throughput over wall time, and
a forced lost update that must mark the record (also when a later slice is intact)."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import pytest
import redis

from luapipe.bench.aggregate import FormTotals, SliceCost, build_record
from luapipe.bench.batching import lockstep
from luapipe.bench.loop import WorkerResult, run_turns
from luapipe.bench.opworkload import OperationWorkload, resolve_workloads
from luapipe.bench.runner import BenchConfig, run_bench
from luapipe.bench.server import ServerProcess
from luapipe.bench.stats import LatencyHistogram
from luapipe.bench.workloads import OpFn, PingWorkload
from luapipe.operations import steps
from luapipe.operations.plan import bind, plan_of
from luapipe.report import render_html, render_table
from luapipe.wire import sync as transport
from luapipe.wire.drivers import Driver
from luapipe.wire.routing import sent_to

from ..helpers import unwrapped

HDR = 1e-3  # HdrHistogram keeps 3 significant digits


def _worker(latencies_ms: list[float], elapsed_s: float) -> WorkerResult:
    h = LatencyHistogram()
    for ms in latencies_ms:
        h.record_us(ms * 1000)
    n = len(latencies_ms)
    return WorkerResult(
        hist=h.encode(),
        hist_uncorrected=b"",
        calls=n,
        errors=0,
        error_samples=(),
        retries=0,
        round_trips=n,
        commands=n,
        cpu_s=0.1,
        elapsed_s=elapsed_s,
    )


def _cost(ok: bool = True, detail: str = "held", broken: int = 0) -> SliceCost:
    """A slice's server side: the invariant checked on 64 cases, ``broken`` of them broke."""
    return SliceCost(
        calls=0,
        usec=0,
        bystander=None,
        invariant_ok=ok,
        invariant_detail=detail,
        broken=broken,
        checked=64,
    )


def _record(totals: FormTotals) -> Any:
    (w,) = resolve_workloads(["ping"])
    return build_record(w, "naive", totals, 0.0, 0.0, 2, None)


def _page(*records: Any) -> tuple[str, str]:
    data: dict[str, Any] = {
        "manifest": {},
        "calibration": [],
        "records": [r.as_dict() for r in records],
        "crossovers": [],
        "recommendations": [],
        "notes": [],
    }
    return render_table(data), render_html(data)


def _printed(table: str, row: str, *columns: str) -> list[str]:
    """The cells of ``columns`` in the table's row that starts with ``row`` (a point's
    block: its title, the header, a row per form; the columns up to p99 are one word
    each)."""
    lines = [line.strip() for line in table.splitlines()]
    header = next(line for line in lines if line.startswith("form")).split()
    cells = next(line.split() for line in lines if line.startswith(row))
    return [cells[header.index(c)] for c in columns]


def test_percentiles_of_a_known_distribution() -> None:
    """1, 2, ..., 10000 us once each: every percentile is known exactly."""
    h = LatencyHistogram()
    for us in range(1, 10_001):
        h.record_us(us)
    s = h.summary()
    assert s.count == 10_000
    assert s.p50 == pytest.approx(5.0, rel=HDR)
    assert s.p90 == pytest.approx(9.0, rel=HDR)
    assert s.p99 == pytest.approx(9.9, rel=HDR)
    assert s.p999 == pytest.approx(9.99, rel=HDR)
    assert s.mean == pytest.approx(5.0005, rel=HDR)
    assert s.min == pytest.approx(0.001) and s.max == pytest.approx(10.0, rel=HDR)


def test_two_workers_merge_into_known_percentiles_and_wall_time_throughput() -> None:
    """Two workers side by side in two rounds. Round 1 (2 s): A 1000 calls of 1 ms, B 980
    of 3 ms and 20 of 50 ms; round 2 (4 s): A 1000 of 1 ms, B 1000 of 3 ms. Merged (4000
    calls): p50 1 ms, p90 and p99 3 ms, max 50 ms, mean 2.235 ms; B alone would say p50
    3 ms, round 2 alone max 3 ms. Throughput is calls over the wall time: 1000/s, then
    500/s (not over the workers' summed seconds); the figure shown is the median round's,
    750/s, beside its interval, with two rounds their range; 4000 / 6 s over both rounds
    (a round weighs by its calls) is kept as the pooled figure."""
    totals = FormTotals()
    for seconds, b_tail in ((2.0, [50.0] * 20), (4.0, [3.0] * 20)):
        a = _worker([1.0] * 1000, seconds)
        b = _worker([3.0] * 980 + b_tail, seconds)
        totals.add([a, b], _cost())
    rec = _record(totals)
    lat = rec.latency_ms
    assert rec.ops == 4000 and rec.duration_s == pytest.approx(6.0)
    assert [r["ops_per_sec"] for r in rec.rounds] == pytest.approx([1000.0, 500.0])
    assert rec.ops_per_sec == pytest.approx(750.0)
    assert rec.pooled["ops_per_sec"] == pytest.approx(4000 / 6)
    assert rec.ops_per_sec_interval == pytest.approx((500.0, 1000.0))
    assert lat["p50"] == pytest.approx(1.0, rel=HDR)
    assert lat["p90"] == pytest.approx(3.0, rel=HDR)
    assert lat["p99"] == pytest.approx(3.0, rel=HDR)
    assert lat["max"] == pytest.approx(50.0, rel=HDR)
    assert lat["mean"] == pytest.approx((2.47 + 2.0) / 2, rel=HDR)  # the two rounds' means
    assert rec.pooled["latency_ms"]["mean"] == pytest.approx(2.235, rel=HDR)
    table, page = _page(rec)
    assert _printed(table, "naive", "ops/s", "p50", "p99") == ["750", "1", "3"]
    cells = re.sub(r"<small>[^<]*</small>|\n", "", page)  # without the intervals under them
    assert "<td>750</td><td>1</td><td>3</td><td>3</td>" in cells  # ops/s, p50, p90, p99
    assert "<small>500-1,000</small>" in page  # the interval under ops/s


def test_a_broken_slice_marks_the_record_even_when_later_slices_hold() -> None:
    totals = FormTotals()
    totals.add([_worker([1.0] * 100, 1.0)], _cost(False, "stock went to -1", broken=1))
    for _ in range(3):
        totals.add([_worker([1.0] * 100, 1.0)], _cost())
    rec = _record(totals)
    assert rec.invariant_ok is False
    assert "stock went to -1" in rec.invariant_detail
    assert (rec.lost_updates, rec.invariant_cases) == (1, 4 * 64)
    table, page = _page(rec)
    assert (  # the totals of "FAIL 1/256", then the first broken round's own finding
        "INVARIANT FAILED: ping naive at 0 ms RTT, 2 clients: broke in 1 of 256 cases "
        "checked; first broken round: stock went to -1" in unwrapped(table)
    )
    assert " FAIL 1/256 " in table  # the lost updates, in the cases checked over 4 rounds
    assert "FAILED in 1 of 256 cases; first broken round: stock went to -1" in page
    assert re.search(r">FAILED[^<]*: stock went to -1", page)


# -- through the real runner -------------------------------------------------------------


@pytest.fixture
def url(redis_server: ServerProcess) -> str:
    redis.Redis(host=redis_server.host, port=redis_server.port).flushall()
    return redis_server.url


def test_throughput_is_calls_over_the_timed_wall_time(url: str) -> None:
    """Two worker processes for 2 x 0.2 s: ops/s is ops over ~0.4 s of wall time (summing the
    workers' seconds would halve it)."""
    config = BenchConfig(clients=(2,), duration_s=0.4, warmup_s=0.05, rounds=2, bystander=False)
    for rec in run_bench(url, [PingWorkload(forms=("naive",))], config).records:
        assert rec.calls > 100
        assert rec.duration_s <= 0.4 * 1.2  # the window, plus at most one call's overshoot
        assert rec.pooled["ops_per_sec"] == pytest.approx(rec.ops / rec.duration_s)
        assert rec.pooled["ops_per_sec"] >= rec.ops / (0.4 * 1.2)
        assert rec.ops_per_sec == pytest.approx(  # shown: the median (here: mean) of 2 rounds
            sum(r["ops_per_sec"] for r in rec.rounds) / 2
        )


@dataclass
class LosesOnce:
    """The real reserve_stock workload, except that the first timed slice of ``naive`` begins
    with a forced lost update: two reservations of the last unit with their round trips
    interleaved (both read 1, both write). Later slices start from a fresh keyspace and hold."""

    real: OperationWorkload
    forms: tuple[str, ...] = ("naive", "script")
    slices: dict[str, int] = field(default_factory=dict)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    def op_fn(self, client: redis.Redis, form: str, worker: int, seed: int) -> OpFn:
        inner: Callable[[int], int] = self.real.op_fn(client, form, worker, seed)
        n = self.slices[form] = self.slices.get(form, 0) + 1
        if form != "naive" or n != 2:  # slice 1 is the discarded warm-up
            return inner

        def first(i: int) -> int:
            if i == 0:
                plan = plan_of(self.real.op)
                stock = self.real.cases[0].keys_dict["stock"]
                client.set(stock, 1)
                envs = [bind(plan, {"stock": stock}, {"qty": 1}) for _ in "ab"]
                with transport.session(client) as s:
                    calls = lockstep([steps.naive_steps(plan, e) for e in envs])
                    Driver(client, held=s).run(sent_to(calls, s.address))
            return inner(i)

        return first


def test_a_forced_lost_update_marks_the_record_and_the_report(url: str) -> None:
    (real,) = resolve_workloads(["reserve_stock"])
    assert isinstance(real, OperationWorkload)
    work = LosesOnce(real)
    config = BenchConfig(duration_s=0.3, warmup_s=0.05, rounds=3, bystander=False, turns=0)
    result = run_bench(url, [work], config)
    by_form = {r.form: r for r in result.records}
    assert work.slices == {"naive": 4, "script": 4}  # warm-up + 3 rounds each
    assert by_form["naive"].invariant_ok is False
    assert "invariant broken in 1 of" in by_form["naive"].invariant_detail
    naive = by_form["naive"]
    assert naive.lost_updates == 1 and naive.invariant_cases >= 3  # one case, in one round
    assert by_form["script"].invariant_ok is True
    table, page = _page(*result.records)
    said = unwrapped(table)
    assert "INVARIANT FAILED: reserve_stock naive at 0 ms RTT, 1 client: broke in 1 of" in said
    assert "no longer holds: stock never below zero" in said
    assert f" FAIL 1/{naive.invariant_cases} " in table
    assert re.search(r">FAILED[^<]*: invariant broken in 1 of", page)


def test_a_worker_slow_to_connect_still_gets_its_whole_window(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Forked workers that take 0.3 s to connect (a busy machine) with windows of 0.05 s:
    the windows open once both are ready, so each runs its 0.05 s, none misses it."""
    from luapipe.bench import loop

    real = loop.client_for

    def slow(plan: Any) -> redis.Redis:
        time.sleep(0.3)
        return real(plan)

    monkeypatch.setattr(loop, "client_for", slow)
    config = BenchConfig(clients=(2,), duration_s=0.1, warmup_s=0.01, rounds=2, bystander=False)
    (rec,) = run_bench(url, [PingWorkload(forms=("naive",))], config).records
    assert all(r["calls"] > 10 for r in rec.rounds), rec.rounds
    assert rec.duration_s == pytest.approx(0.1, abs=0.05)


class ColdAfterAnother:
    """Forms whose call takes 3 ms right after another form's call (the client's and the
    server's code cold) and 0.2 ms after its own, on a clock of their own."""

    def __init__(self) -> None:
        self.last = ""
        self.now = 0.0

    def clock(self) -> float:
        return self.now

    def op_fn(self, client: Any, form: str, worker: int, seed: int) -> Callable[[int], int]:
        def call(i: int) -> int:
            self.now += 0.003 if self.last != form else 0.0002
            self.last = form
            return 0

        return call


def test_turns_time_each_form_warm_not_the_cost_of_switching_to_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Taking turns call by call timed every call right after another form's: the cost of
    the switch (3 to 15% per call on this machine, more for some forms than others) was
    counted as the form's own. A turn's first call is not timed, and a turn is 16 calls."""
    from luapipe.bench import loop

    forms = ColdAfterAnother()
    monkeypatch.setattr(loop.time, "perf_counter", forms.clock)
    hists = run_turns(cast(Any, forms), cast(Any, None), ("a", "b"), 1, 0.1)
    for form, h in hists.items():
        s = h.summary()
        assert s.count >= 15 and s.count % 15 == 0, form  # turns of 15 timed calls
        assert s.max == pytest.approx(0.2, rel=1e-2), form  # no switch timed
        assert s.p50 == pytest.approx(0.2, rel=1e-2), form


def test_at_rtt_0_one_client_the_forms_take_turns_and_that_decides(url: str) -> None:
    config = BenchConfig(duration_s=0.3, warmup_s=0.02, rounds=6, bystander=False)
    result = run_bench(url, [PingWorkload(forms=("naive", "pipelined"))], config)
    assert all(r.p50_turns_ms is not None for r in result.records)
    assert all(x.get("p50_turns") for r in result.records for x in r.rounds)
    (rec,) = result.recommendations
    assert rec["figure"] == "p50_turns_ms"
    assert any("the forms taking turns of 16 calls" in why for why in rec["reasons"])
    alone = BenchConfig(duration_s=0.3, warmup_s=0.02, rounds=6, bystander=False, turns=0)
    (rec,) = run_bench(url, [PingWorkload(forms=("naive", "pipelined"))], alone).recommendations
    assert rec["figure"] == "p50_ms"
