"""Recommendations in plain words: fastest correct form, atomic preferred when close."""

from __future__ import annotations

from typing import Any

from luapipe.bench.recommend import recommend


def rec(form: str, rate: float, **kw: Any) -> dict[str, Any]:
    r: dict[str, Any] = {
        "operation": "op",
        "form": form,
        "rtt_ms_nominal": 1.0,
        "clients": 1,
        "ops": 100,
        "ops_per_sec": rate,
        "latency_ms": {"p50": 1.0, "p99": 2.0},
        "round_trips_per_op": 1.0,
        "server_usec_per_op": 10.0,
        "errors": 0,
        "invariant_ok": True,
        "bystander_p99_ms": 0.5,
        "abort_rate": 0.0,
    }
    r.update(kw)
    return r


def test_fastest_form_wins_with_reasons() -> None:
    (r,) = recommend([rec("naive", 100, round_trips_per_op=5.0), rec("script", 480)])
    assert r.form == "script"
    assert "4.8x the throughput" in r.text
    assert any("atomic" in why for why in r.reasons)
    assert any("Cluster" in why for why in r.reasons)


def test_atomic_form_preferred_when_within_ten_percent() -> None:
    (r,) = recommend([rec("pipelined", 1000), rec("script", 950), rec("naive", 200)])
    assert r.form == "script"
    assert any("pipelined is 5% faster but not atomic" in why for why in r.reasons)


def test_forms_that_lose_updates_are_ruled_out() -> None:
    rows = [
        rec("pipelined", 2000, invariant_ok=False, invariant_detail="stock went negative"),
        rec("transaction", 900, abort_rate=0.25),
    ]
    (r,) = recommend(rows)
    assert r.form == "transaction"
    assert any("ruled out: pipelined lost updates (stock went negative)" in w for w in r.reasons)
    assert any("aborted 25%" in w for w in r.reasons)


def test_no_correct_form_says_so() -> None:
    (r,) = recommend([rec("naive", 0, ops=0, errors=10)])
    assert r.form is None and "no form ran correctly" in r.text


def test_one_recommendation_per_rtt_and_clients() -> None:
    rows = [rec("naive", 100), rec("naive", 50, rtt_ms_nominal=2.0), rec("naive", 90, clients=4)]
    assert len(recommend(rows)) == 3


def test_read_compute_write_needs_an_atomic_form() -> None:
    rows = [
        rec("pipelined", 2000, read_compute_write=True),
        rec("script", 1500, read_compute_write=True),
    ]
    (r,) = recommend(rows)
    assert r.form == "script"
    assert any("ruled out: pipelined: its writes depend on its reads" in w for w in r.reasons)


def test_forms_skipped_on_a_cluster_are_named_with_their_reason() -> None:
    skipped = [{"operation": "op", "form": "script", "reason": "CROSSSLOT: keys in 2 slots"}]
    (r,) = recommend([rec("naive", 100), rec("pipelined", 300)], skipped)
    assert r.form == "pipelined"
    assert "ruled out: script could not run here: CROSSSLOT: keys in 2 slots" in r.reasons
