"""Slices into a record: per-round figures and their interval, the measured write share,
lost updates summed over rounds, and the model from its measured parts."""

from __future__ import annotations

from typing import Any

import pytest

from luapipe.bench.aggregate import FormTotals, SliceCost, build_record
from luapipe.bench.loop import WorkerResult, runqueue_wait_s
from luapipe.bench.stats import LatencyHistogram


class Work:
    name = "op"
    forms = ("script",)
    batch = 1
    write_share_declared = 0.8

    def describe(self) -> dict[str, Any]:
        return {"read_compute_write": True}


def worker(calls: int, ms: float, *, wrote: int | None, seconds: float = 1.0) -> WorkerResult:
    h = LatencyHistogram()
    for _ in range(calls):
        h.record_us(ms * 1000)
    return WorkerResult(h.encode(), b"", calls, 0, (), 0, calls * 2, calls * 2, calls * 100e-6,
                        seconds, wrote=wrote, wait_s=calls * 50e-6)  # fmt: skip


def cost(broken: int = 0, checked: int = 10, wire_ms: float = 0.2) -> SliceCost:
    return SliceCost(0, 0, None, broken == 0, "detail", wire_ms, 0.0, broken, checked)


def test_rounds_intervals_write_share_and_lost_updates() -> None:
    t = FormTotals()
    for calls, wrote, broken in ((100, 80, 0), (400, 300, 3), (150, 120, 1)):
        t.add([worker(calls, 1.0, wrote=wrote)], cost(broken=broken))
    r = build_record(Work(), "script", t, 0.0, 0.0, 1, None)
    assert [x["ops_per_sec"] for x in r.rounds] == [100.0, 400.0, 150.0]
    assert r.ops_per_sec == 150.0  # the median round's, shown beside its interval
    assert r.pooled["ops_per_sec"] == pytest.approx(650 / 3)  # all ops over all timed seconds
    # the median round's interval, never below zero: at 3 rounds, their range
    assert r.ops_per_sec_interval == pytest.approx((100.0, 400.0))
    assert r.write_share == pytest.approx(500 / 650) and not r.write_share_off  # 0.77 vs 0.8
    assert (r.lost_updates, r.invariant_cases, r.invariant_ok) == (4, 30, False)


def test_unknown_writes_in_one_worker_make_the_share_unknown() -> None:
    t = FormTotals()
    t.add([worker(100, 1.0, wrote=100), worker(100, 1.0, wrote=None)], cost())
    r = build_record(Work(), "script", t, 0.0, 0.0, 1, None)
    assert r.write_share is None and not r.write_share_off


def test_a_share_more_than_ten_points_off_is_flagged() -> None:
    t = FormTotals()
    t.add([worker(100, 1.0, wrote=69)], cost())
    assert build_record(Work(), "script", t, 0.0, 0.0, 1, None).write_share_off


def test_the_model_adds_its_measured_parts() -> None:
    """2 round trips x 0.2 ms wire + 100 us client CPU + 50 us waiting for a CPU."""
    t = FormTotals()
    t.add([worker(100, 1.0, wrote=100)], cost(wire_ms=0.2))
    r = build_record(Work(), "script", t, 0.0, 0.0, 1, None)
    assert r.client_cpu_usec_per_op == pytest.approx(100) and r.client_wait_usec_per_op == 50
    assert r.model_latency_ms == pytest.approx(2 * 0.2 + 0.100 + 0.050)
    assert r.model_error_pct == pytest.approx(100 * (0.55 - 1.0) / 1.0, abs=0.1)


def test_the_cpu_wait_clock_only_moves_forward() -> None:
    a = runqueue_wait_s()
    sum(range(200_000))
    assert runqueue_wait_s() >= a >= 0.0


def test_a_broken_round_is_reported_whichever_rounds_held() -> None:
    def one(ok: bool, detail: str) -> SliceCost:
        return SliceCost(0, 0, None, ok, detail, 0.2, 0.0, 0 if ok else 2, 10)

    t = FormTotals()
    for ok, detail in ((True, "held"), (False, "stock -3"), (True, "held"), (False, "stock -1")):
        t.add([worker(10, 1.0, wrote=10)], one(ok, detail))
    r = build_record(Work(), "script", t, 0.0, 0.0, 1, None)
    assert not r.invariant_ok and (r.lost_updates, r.invariant_cases) == (4, 40)
    assert r.invariant_detail == "stock -3 (and in 1 more round(s))"
    t = FormTotals()
    t.add([worker(10, 1.0, wrote=10)], one(True, "held in 10 cases"))
    assert build_record(Work(), "script", t, 0.0, 0.0, 1, None).invariant_detail == (
        "held in 10 cases"
    )
