"""The verdict: the choice at stake, ties within noise, the stated tie-break, the headline.

Records are dicts as in the results JSON; ``rounds`` are the per-round figures the
intervals come from (paired by round across forms).
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from luapipe.bench.intervals import NOISE_PCT, mean_interval, median_cut, ratio_of, t975
from luapipe.bench.recommend import recommend
from luapipe.bench.verdict import recommendations


def rec(form: str, rounds: list[float], **kw: Any) -> dict[str, Any]:
    """A record whose rounds ran at ``rounds`` ops/s (one client, closed loop)."""
    rate = sum(rounds) / len(rounds)
    r: dict[str, Any] = {
        "operation": "op",
        "form": form,
        "rtt_ms_nominal": 1.0,
        "clients": 1,
        "ops": 1000,
        "calls": 1000,
        "ops_per_sec": rate,
        "latency_ms": {"p50": 1000.0 / rate, "p99": 2000.0 / rate},
        "round_trips_per_op": 1.0,
        "server_usec_per_op": 10.0,
        "errors": 0,
        "invariant_ok": True,
        "bystander_p99_ms": 0.5,
        "abort_rate": 0.0,
        "rounds": [{"ops_per_sec": x, "p50": 1000.0 / x, "p99": None} for x in rounds],
        "read_compute_write": False,
        "write_share_declared": 1.0,
    }
    r.update(kw)
    return r


RCW = {"read_compute_write": True}


def test_t_quantiles_and_intervals() -> None:
    assert t975(4) == pytest.approx(2.776) and t975(30) == pytest.approx(2.04, abs=0.01)
    lo, hi = mean_interval([10.0, 12.0, 11.0, 9.0, 13.0])  # mean 11, sd 2.5 ** 0.5
    half = 2.776 * 2.5**0.5 / 5**0.5
    assert (lo, hi) == pytest.approx((11 - half, 11 + half))
    assert mean_interval([5.0]) is None
    x = ratio_of([200, 220, 180], [100, 110, 90])  # exactly 2x in every round
    assert x is not None and (x.value, x.lo, x.hi) == pytest.approx((2.0, 2.0, 2.0))
    assert x.beats() and not ratio_of([104, 104], [100, 100]).beats()  # type: ignore[union-attr]


def test_the_ratio_interval_is_the_sign_test_interval_of_the_median_round() -> None:
    # the distribution-free interval of a median (any statistics table): ranks (k, n - k + 1)
    assert median_cut(5) == (1, pytest.approx(0.9375))  # 5 rounds: the whole range, 94%
    assert median_cut(10) == (2, pytest.approx(0.978515625))  # 2nd to 9th of 10
    assert median_cut(20) == (6, pytest.approx(0.958610534))  # 6th to 15th of 20
    x = ratio_of([3.0, 1.0, 2.0, 5.0, 4.0], [1.0] * 5)
    assert x is not None and (x.value, x.lo, x.hi, x.coverage) == pytest.approx((3, 1, 5, 0.9375))


def test_one_disturbed_round_on_each_side_cannot_flip_the_verdict() -> None:
    """A stall that hit only one form in a round: the mean of the log ratios (a t interval)
    calls 2x a tie here; the median of the rounds does not care how far the stall went."""
    script = [200.0] * 8 + [10.0, 2000.0]  # round 9: a stall hit script; round 10: the other
    transaction = [100.0] * 10
    x = ratio_of(script, transaction)
    assert x is not None and x.value == pytest.approx(2.0) and x.beats()
    assert (x.lo, x.hi) == pytest.approx((2.0, 2.0))
    # two rounds against it out of ten is no longer "9 of 10": a tie
    y = ratio_of([200.0] * 8 + [10.0, 10.0], transaction)
    assert y is not None and not y.beats() and not y.loses()


def test_an_atomic_winner_is_compared_with_the_best_atomic_alternative_never_naive() -> None:
    rows = [
        rec("naive", [100, 110, 90, 100, 105], round_trips_per_op=2.0, **RCW),
        rec("pipelined", [300, 320, 280, 300, 310], round_trips_per_op=2.0, **RCW),
        rec("transaction", [250, 260, 240, 255, 250], round_trips_per_op=2.0, **RCW),
        rec("script", [500, 520, 480, 500, 510], **RCW),
    ]
    (r,) = recommend(rows)
    assert (r.form, r.kind, r.at_stake) == (
        "script",
        "read_compute_write",
        ("transaction", "script"),
    )
    assert r.alternative == "transaction" and r.tied_with == ()
    assert r.ratio == pytest.approx(2.0, rel=0.03)
    assert r.ratio_interval is not None and r.ratio_interval[0] > 1.05
    assert "2x the throughput of transaction" in r.headline and "naive" not in r.headline
    assert r.main_reason.startswith("1 round trip(s) per op instead of 2")
    (gain,) = [n for n in r.non_atomic if n["form"] == "pipelined"]
    assert gain["ratio"] == pytest.approx(0.6, rel=0.03) and gain["invariant_ok"]


def test_what_non_atomic_forms_lost_is_stated() -> None:
    rows = [
        rec("pipelined", [900, 950, 880, 920, 910], invariant_ok=False, lost_updates=142,
            invariant_cases=187, invariant_detail="stock below zero", **RCW),
        rec("transaction", [300, 310, 290, 300, 305], abort_rate=0.25, **RCW),
        rec("function", [600, 610, 590, 600, 605], **RCW),
    ]  # fmt: skip
    (r,) = recommend(rows)
    assert r.form == "function"
    (lost,) = r.non_atomic
    assert (lost["form"], lost["lost_updates"], lost["invariant_cases"]) == ("pipelined", 142, 187)
    assert lost["ratio"] == pytest.approx(1.5, rel=0.03)  # what it would gain
    assert "lost updates in 142 of 187 cases" in lost["text"]
    assert "pipelined lost updates" in r.main_reason


def test_forms_within_noise_tie_and_the_tie_break_is_stated() -> None:
    rows = [
        rec("transaction", [200, 210, 190, 205, 200], round_trips_per_op=2.0, **RCW),
        rec("script", [500, 430, 560, 470, 520], **RCW),
        rec("function", [480, 520, 500, 540, 450], **RCW),
    ]
    (r,) = recommend(rows)
    assert r.form == "function" and r.tied_with == ("script",)
    assert r.tie_within_pct is not None and r.tie_within_pct >= NOISE_PCT
    assert f"tie with script (within +-{r.tie_within_pct:.0f}%)" in r.headline
    assert "the throughput of transaction" in r.headline  # the first form it clearly beats
    assert r.tie_break is not None and r.tie_break.startswith("fewer moving parts: function")


def test_blind_writes_weigh_pipelined_against_server_code_atomic_first() -> None:
    rows = [
        rec("naive", [100, 100, 100, 100, 100]),
        rec("pipelined", [510, 470, 530, 480, 500]),
        rec("transaction", [300, 300, 300, 300, 300]),
        rec("script", [480, 520, 500, 470, 530]),
    ]
    (r,) = recommend(rows)
    assert r.at_stake == ("pipelined", "script") and r.kind == "blind_writes"
    assert r.form == "script" and r.tied_with == ("pipelined",)
    assert r.tie_break == "atomic over non-atomic: no other client sees it half done"


def test_a_clearly_faster_non_atomic_form_wins_blind_writes() -> None:
    rows = [rec("pipelined", [1000, 1020, 990, 1010, 1000]), rec("script", [500] * 4 + [510])]
    (r,) = recommend(rows)
    assert r.form == "pipelined" and r.tied_with == ()
    assert any("not atomic" in why for why in r.reasons)


def test_a_form_beaten_by_another_never_wins_a_tie_break() -> None:
    """transaction is within noise of the noisy best (function) but clearly behind script:
    it is out, although it would win the tie-break against script."""
    rows = [
        rec("transaction", [200, 200, 210, 190, 200], round_trips_per_op=2.0, **RCW),
        rec("script", [420, 400, 410, 400, 415], **RCW),
        rec("function", [900, 150, 800, 200, 950], **RCW),
    ]
    (r,) = recommend(rows)
    assert r.form == "function" and r.tied_with == ("script",)


def test_open_loop_ranks_by_latency_at_the_fixed_rate() -> None:
    """Both forms keep up with --rate, so their ops/s are equal; the p50 decides."""

    def open_rec(form: str, p50: list[float]) -> dict[str, Any]:
        r = rec(form, [500.0] * 5, rate=500.0, **RCW)
        r["latency_ms"] = {"p50": sum(p50) / 5, "p99": 3.0}
        r["rounds"] = [{"ops_per_sec": 500.0, "p50": p, "p99": None} for p in p50]
        return r

    (r,) = recommend([open_rec("transaction", [2.0, 2.1, 1.9, 2.0, 2.0]),
                      open_rec("script", [1.0, 1.05, 0.95, 1.0, 1.0])])  # fmt: skip
    assert (r.form, r.metric) == ("script", "p50_ms")
    assert "p50 2x lower than transaction's" in r.headline


def test_noise_gives_declared_ties_not_flips() -> None:
    """Five runs of three forms with the same true speed and 30% noise per round: every
    run names a form or a tie that contains the other runs' form."""
    rng = random.Random(7)
    picks = []
    for _ in range(5):
        rows = [
            rec(f, [1000 * rng.uniform(0.7, 1.3) for _ in range(5)], **RCW)
            for f in ("transaction", "script", "function")
        ]
        (r,) = recommend(rows)
        picks.append({r.form, *r.tied_with})
    assert all(p == {"transaction", "script", "function"} for p in picks), picks


def test_no_atomic_form_means_no_recommendation_for_a_read_compute_write() -> None:
    (r,) = recommend([rec("pipelined", [900] * 5, **RCW), rec("naive", [100] * 5, **RCW)])
    assert r.form is None and "no form at stake" in r.text


def test_no_correct_form_says_so() -> None:
    (r,) = recommend([rec("script", [1.0] * 5, ops=0, errors=10)])
    assert r.form is None and "ran correctly" in r.text


def test_one_recommendation_per_rtt_and_clients() -> None:
    rows = [
        rec("script", [100] * 5),
        rec("script", [50] * 5, rtt_ms_nominal=2.0),
        rec("script", [90] * 5, clients=4),
    ]
    assert len(recommend(rows)) == 3


def test_forms_skipped_on_a_cluster_are_named_with_their_reason() -> None:
    skipped = [{"operation": "op", "form": "script", "reason": "CROSSSLOT: keys in 2 slots"}]
    (r,) = recommend([rec("naive", [100] * 5), rec("pipelined", [300] * 5)], skipped)
    assert r.form == "pipelined"
    assert "ruled out: script could not run here: CROSSSLOT: keys in 2 slots" in r.reasons


def test_too_few_samples_withholds_the_form_and_the_tie() -> None:
    rows = [rec("script", [500] * 5), rec("function", [505] * 5, calls=5, ops=5)]
    (r,) = recommendations(rows)
    assert r["form"] is None and r["tied_with"] == () and "too few samples" in r["text"]


def test_a_results_file_without_rounds_still_gets_a_verdict() -> None:
    """Schema 1 files have no rounds: one value per form, no interval."""
    rows = [rec("script", [500] * 5), rec("pipelined", [200] * 5)]
    for r in rows:
        del r["rounds"]
    (r,) = recommend(rows)
    assert r.form == "script" and r.ratio == pytest.approx(2.5) and r.ratio_interval is None


def test_a_win_the_winner_did_not_clear_is_never_claimed_for_it() -> None:
    """function ties with script; script clearly beats pipelined, function does not (two
    rounds of ten it was behind). The headline must not say "function: 1.2x pipelined": it
    says which form cleared the noise against pipelined. Seen in `make demo`:
    'use function: tie with script (within +-18%); 1.2x the throughput of pipelined (0.89x
    to 1.5x)'."""
    rows = [
        rec("pipelined", [1000.0] * 10),
        rec("script", [1250.0] * 8 + [1200.0, 1150.0]),
        rec("function", [1250.0] * 8 + [900.0, 950.0]),
    ]
    (r,) = recommend(rows)
    assert r.form == "function" and r.tied_with == ("script",)
    assert r.beats == "pipelined" and r.beats_by == "script"
    assert r.beats_ratio_interval is not None and r.beats_ratio_interval[0] > 1.05
    assert "script, tied with it, has 1.2x the throughput of pipelined (1.2x to 1.2x)" in (
        r.headline
    )
    assert "; 1.2x the throughput of pipelined" not in r.headline


def test_the_open_loop_never_says_a_higher_p50_is_lower() -> None:
    """A non-atomic form slower than the winner at the fixed rate: 'p50 1.25x higher', not
    'p50 0.8x lower'."""

    def open_rec(form: str, p50: float, **kw: Any) -> dict[str, Any]:
        r = rec(form, [400.0] * 10, rate=400.0, **kw)
        r["latency_ms"] = {"p50": p50, "p99": 3.0}
        r["rounds"] = [{"ops_per_sec": 400.0, "p50": p50, "p99": None} for _ in range(10)]
        return r

    (r,) = recommend([open_rec("pipelined", 2.5, **RCW), open_rec("script", 2.0, **RCW),
                      open_rec("transaction", 4.0, **RCW)])  # fmt: skip
    (na,) = r.non_atomic
    assert "pipelined would be p50 1.2x higher than script's" in na["text"], na["text"]
    assert "lower" not in na["text"]
