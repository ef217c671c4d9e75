"""The verdict: three outcomes at one margin, the forms at stake, the stated policy, and words
that belong to the pair they name, checked on what a user reads (the recommendation's text,
the terminal table, the report's card).

Records are dicts as in the results JSON; ``rounds`` are the per-round figures the intervals
come from (paired by round across forms). With one client the figure is the p50 latency of
each round, so the helpers build rounds from per-round p50s (lower is better).
"""

from __future__ import annotations

import math
import random
import re
from typing import Any

import pytest

from luapipe.bench.verdict import (
    AHEAD,
    BEHIND,
    EQUIVALENT,
    INCONCLUSIVE,
    MARGIN_PCT,
    Interval,
    interval_of,
    method,
    outcome_of,
    ratio_of,
    recommend,
    recommendations,
)
from luapipe.bench.verdict.intervals import median_cut
from luapipe.report import render_html, render_table

from ..helpers import unwrapped


def rec(form: str, p50s: list[float], **kw: Any) -> dict[str, Any]:
    """A record of one client whose rounds had these p50 latencies (ms)."""
    mean = sum(p50s) / len(p50s)
    r: dict[str, Any] = {
        "operation": "op",
        "form": form,
        "rtt_ms_nominal": 1.0,
        "rtt_ms_measured": 1.0,
        "clients": 1,
        "ops": 1000,
        "calls": 1000,
        "ops_per_sec": 1000.0 / mean,
        "latency_ms": {"p50": mean, "p99": 2 * mean, "mean": mean},
        "round_trips_per_op": 1.0,
        "commands_per_op": 1.0,
        "server_usec_per_op": 10.0,
        "retries_per_op": 0.0,
        "errors": 0,
        "invariant_ok": True,
        "rounds": [{"ops_per_sec": 1000.0 / x, "p50": x, "p99": 2 * x} for x in p50s],
        "read_compute_write": False,
        "write_share_declared": 1.0,
    }
    r.update(kw)
    return r


RCW = {"read_compute_write": True}
TEN = [1.0] * 10


def scaled(k: float, n: int = 10) -> list[float]:
    return [k] * n


def page(records: list[dict[str, Any]]) -> tuple[str, str]:
    """What a user reads: the terminal table and the report's verdict cards."""
    data = {
        "records": records,
        "recommendations": recommendations(records),
        "method": method(records),
        "crossovers": [],
        "calibration": [],
        "notes": [],
    }
    html = render_html(data)
    return unwrapped(render_table(data)), html[html.index('id="verdict"') :]


# -- the one interval method ------------------------------------------------------------


def test_the_interval_is_the_median_rounds_distribution_free_interval() -> None:
    assert median_cut(10) == (2, pytest.approx(0.978515625))  # 2nd to 9th of 10
    assert median_cut(20) == (6, pytest.approx(0.958610534))  # 6th to 15th of 20
    assert median_cut(6) == (1, pytest.approx(0.96875))  # the fewest that reach 95%
    assert median_cut(5)[1] < 0.95
    iv = interval_of([5.0, 1.0, 4.0, 2.0, 3.0, 9.0, 8.0, 7.0, 6.0, 10.0])
    assert iv is not None and (iv.value, iv.lo, iv.hi) == (5.5, 2.0, 9.0)
    x = ratio_of([2.0, 4.0, 6.0], [1.0, 1.0, 2.0])
    y = ratio_of([1.0, 1.0, 2.0], [2.0, 4.0, 6.0])
    assert x is not None and y is not None
    assert (y.value, y.lo, y.hi) == pytest.approx((1 / x.value, 1 / x.hi, 1 / x.lo))


def test_per_form_intervals_of_skewed_latencies_never_run_below_zero() -> None:
    """A p99 of 0.05 ms in most rounds and 2 ms in two: a t interval of the mean ran from
    -0.3 ms; the median round's interval stays between rounds' own values."""
    p99s = [0.05, 0.052, 0.048, 0.051, 1.97, 0.049, 0.05, 2.1, 0.053, 0.05]
    iv = interval_of(p99s)
    assert iv is not None and 0 < iv.lo <= iv.value <= iv.hi
    records = [rec("script", [0.05] * 10), rec("function", [0.05] * 10)]
    records[0]["latency_ms_interval"] = {"p99": [iv.lo, iv.hi]}
    records[0]["ops_per_sec_interval"] = [19000.0, 21000.0]
    html = render_html({"records": records, "recommendations": []})
    shown = re.findall(r"<small>([-\d.,]+)-([\d.,]+)</small>", html)
    assert shown and all(float(lo.replace(",", "")) > 0 for lo, _ in shown)


def test_the_method_is_stated_once_per_report() -> None:
    records = [rec("script", scaled(1.0)), rec("function", scaled(1.0))]
    table, html = page(records)
    assert table.count("how the verdict decides:") == 1
    assert "the 2nd smallest to the 2nd largest: 97.9%" in table
    assert html.count("How the verdict decides.") == 1
    assert "95%" not in table.replace("covers 95%", "")  # no second method anywhere


# -- three outcomes at one margin -------------------------------------------------------


@pytest.mark.parametrize(
    ("lo", "hi", "rounds", "outcome"),
    [
        (1.12, 1.30, 10, AHEAD),
        (0.70, 0.89, 10, BEHIND),
        (0.95, 1.08, 10, EQUIVALENT),
        (1.0 / 1.1, 1.1, 10, EQUIVALENT),  # the margin itself is within
        (1.02, 1.15, 10, INCONCLUSIVE),  # straddles 1.1: neither
        (0.40, 2.88, 10, INCONCLUSIVE),  # the +-288% "tie" of the old verdict
        (1.5, 1.6, 5, INCONCLUSIVE),  # 5 rounds cover < 95%: nothing is decided
    ],
)
def test_a_pair_is_ahead_equivalent_or_inconclusive(
    lo: float, hi: float, rounds: int, outcome: str
) -> None:
    coverage = median_cut(rounds)[1]
    assert outcome_of(Interval((lo + hi) / 2, lo, hi, rounds, coverage), MARGIN_PCT) == outcome


def test_a_wide_interval_is_not_decided_and_says_what_would_decide_it() -> None:
    """The old verdict called this a tie "within +-288%": the data cannot tell."""
    rng = random.Random(3)
    rows = [
        rec("script", [rng.uniform(0.3, 3.0) for _ in range(10)], **RCW),
        rec("function", [rng.uniform(0.3, 3.0) for _ in range(10)], **RCW),
    ]
    (r,) = recommend(rows)
    assert r.status == "inconclusive" and not r.decided and r.tied_with == ()
    table, html = page(rows)
    assert "op at 1 ms RTT with 1 client: not decided: function vs script:" in table
    assert "neither beyond nor within +-10%" in table
    assert (  # 1.59x (0.887x to 3.17x): the end 0.887x must come past 0.909x
        "a narrower interval would decide it: about 30 rounds if the estimate holds (luapipe "
        "bench --rounds 30; this run had 10), a longer --duration" in table
    )
    assert "quieter machine" in table
    assert "tie" not in table and "equivalent" not in r.text
    assert '<span class="undecided">not decided</span>' in html


#: function's advantage over script per round: its median 1.09x, its interval (6th to 15th
#: of 20) 1.08x to 1.11x: it straddles the margin's 1.1x, and sits 0.9% from it
AT_THE_LINE = [1.06, 1.08, 1.09, 1.11, 1.13] * 4


def test_an_estimate_at_the_margin_is_said_to_be_there_never_promised_a_decision() -> None:
    """1.09x at a margin of 10%: more rounds narrow the interval around 1.09x, and a
    difference of about the margin may never clear it. The words said "more rounds (luapipe
    bench --rounds 40) ... would decide it"."""
    rows = [
        rec("script", [1.0] * 20, **RCW),
        rec("function", [1.0 / x for x in AT_THE_LINE], **RCW),
    ]
    (r,) = recommend(rows)
    assert r.status == INCONCLUSIVE and r.comparisons[0]["ratio"] == pytest.approx(1.09)
    table, html = page(rows)
    said = unwrapped(table)
    assert (
        "function vs script: the estimate sits at the margin (0.917x the p50 latency of "
        "script; the margin at 0.909x): more rounds, a longer --duration or a quieter machine "
        "narrow the interval, but it may stay on the line" in said
    )
    assert "would decide it" not in said and "if the estimate holds" not in said
    assert "luapipe bench --rounds" not in said
    assert "What more data can do: function vs script: the estimate sits at the margin" in html
    assert "would decide it" not in html


def test_a_pair_away_from_the_margin_is_told_about_how_many_rounds_would_decide_it() -> None:
    """function and script alike (1.00x) in rounds 15% apart: 10 rounds leave the interval
    wider than +-10%; about 30 rounds would narrow it enough if the estimate held. Drawn
    again from the same spread, that many rounds do decide it: equivalent."""
    rng = random.Random(7)

    def draw(n: int) -> list[dict[str, Any]]:
        ratios = [math.exp(rng.gauss(0.0, 0.15)) for _ in range(n)]
        return [rec("script", [1.0] * n, **RCW), rec("function", ratios, **RCW)]

    rows = draw(10)
    (r,) = recommend(rows)
    assert r.status == INCONCLUSIVE
    said = unwrapped(page(rows)[0])
    told = (
        r"a narrower interval would decide it: about (\d+) rounds if the estimate holds "
        r"\(luapipe bench --rounds \1; this run had 10\)"
    )
    match = re.search(told, said)
    assert match, said
    assert int(match[1]) == 30 and "on the line" not in said
    (more,) = recommend(draw(int(match[1])))
    assert more.status == EQUIVALENT, more.text


def test_each_undecided_pair_is_told_what_would_decide_it_in_its_own_words() -> None:
    """Three forms: function vs script sits at the margin, function vs transaction is far
    from it but its interval is wide: one clause each, neither borrowing the other's."""
    rng = random.Random(5)
    wide = [1.0 / (1.3 * math.exp(rng.gauss(0.0, 0.6))) for _ in range(20)]
    rows = [
        rec("transaction", [1.0] * 20, **RCW),
        rec("script", [1.0] * 20, **RCW),
        rec("function", [1.0 / x for x in AT_THE_LINE], **RCW),
    ]
    rows[0]["rounds"] = [{"ops_per_sec": 1000.0 * w, "p50": 1.0 / w} for w in wide]
    (r,) = recommend(rows)
    outcomes = {c["other"]: c["outcome"] for c in r.comparisons}
    assert outcomes == {"script": INCONCLUSIVE, "transaction": INCONCLUSIVE}, r.text
    would = r.would_decide
    assert "function vs transaction: a narrower interval would decide it: about" in would
    assert "function vs script: the estimate sits at the margin" in would
    assert would.count("would decide it") == 1 and would.count("on the line") == 1


def test_pairs_at_the_margin_are_said_once_together() -> None:
    rows = [
        rec("transaction", [1.0] * 20, **RCW),
        rec("script", [1.0] * 20, **RCW),
        rec("function", [1.0 / x for x in AT_THE_LINE], **RCW),
    ]
    (r,) = recommend(rows)
    assert r.would_decide == (
        "function vs transaction and function vs script: the estimates sit at the margin "
        "(0.917x the p50 latency of transaction, 0.917x the p50 latency of script; the margin "
        "at 0.909x): more rounds, a longer --duration or a quieter machine narrow the "
        "intervals, but they may stay on the line"
    )


def test_a_cell_is_decided_only_when_the_picks_every_comparison_is() -> None:
    """function is ahead of transaction but cannot be told from script: not decided."""
    rows = [
        rec("transaction", scaled(2.0), round_trips_per_op=2.0, **RCW),
        rec("script", [1.0, 1.3] * 5, **RCW),
        rec("function", [1.3, 1.0] * 5, **RCW),
    ]
    (r,) = recommend(rows)
    outcomes = {c["other"]: c["outcome"] for c in r.comparisons}
    assert outcomes == {"script": INCONCLUSIVE, "transaction": AHEAD}
    assert r.status == "inconclusive" and r.form == "function"
    assert "meanwhile function, by policy" in r.text


def test_equivalent_forms_get_the_policys_pick_shown_as_a_policy_never_as_a_win() -> None:
    rows = [
        rec("transaction", scaled(2.0), round_trips_per_op=2.0, **RCW),
        rec("script", [1.0, 1.02] * 5, **RCW),
        rec("function", [1.01, 1.0] * 5, **RCW),
    ]
    (r,) = recommend(rows)
    assert (r.status, r.form, r.tied_with) == ("equivalent", "function", ("script",))
    table, html = page(rows)
    assert "use function: equivalent to script within +-2% (0.980x to 1.010x its p50 latency)" in (
        table
    )
    assert "function by policy: one call that survives a failover" in table
    assert '<span class="pick">function</span> <span class="bypolicy">by policy' in html
    assert '<span class="form">function</span>' not in html  # not in bold as a winner


def test_noise_never_makes_one_form_ahead_of_an_equal_one() -> None:
    """Five runs of three forms with the same true speed and 30% noise per round: equal or
    not decided, never ahead or behind (a form ahead in one run is never behind in another)."""
    rng = random.Random(7)
    for _ in range(5):
        rows = [
            rec(f, [rng.uniform(0.7, 1.3) for _ in range(10)], **RCW)
            for f in ("transaction", "script", "function")
        ]
        (r,) = recommend(rows)
        assert {c["outcome"] for c in r.comparisons} <= {EQUIVALENT, INCONCLUSIVE}, r.text


# -- words that belong to the pair named ---------------------------------------------------


def test_each_plus_minus_and_ratio_is_the_pairs_own() -> None:
    """function is equivalent to script within +-2% and to pipelined within +-8%: each pair
    says its own reach, never the widest for both. function is 1.8x faster than transaction
    while script is 1.9x: the ratio quoted with function's name is function's."""
    rows = [
        rec("pipelined", [1.0, 1.08] * 5),
        rec("transaction", scaled(1.8)),
        rec("script", [0.95, 0.97] * 5),
        rec("function", [1.0, 1.0] * 5),
    ]
    (r,) = recommend(rows)
    assert r.status == "equivalent" and r.form == "function"
    table, _ = page(rows)
    pairs = dict(re.findall(r"equivalent to (\w+) within \+-([\d.]+)%", r.text))
    assert pairs == {"script": "5.3", "pipelined": "8"}
    assert "0.556x the p50 latency of transaction (0.556x to 0.556x): ahead beyond +-10%" in table
    assert "0.533x" not in table  # script's own ratio against transaction is not quoted


def test_the_headline_ratio_is_against_the_best_alternative_not_the_slowest() -> None:
    rows = [
        rec("transaction", scaled(2.0), round_trips_per_op=2.0, **RCW),
        rec("script", scaled(1.3), **RCW),
        rec("function", scaled(1.0), **RCW),
    ]
    (r,) = recommend(rows)
    assert (r.status, r.form, r.alternative) == ("ahead", "function", "script")
    assert r.ratio == pytest.approx(1.3)
    table, _ = page(rows)
    first = table.index("use function: ") + len("use function: ")
    assert table[first:].startswith("0.769x the p50 latency of script (0.769x to 0.769x)")
    assert "a lower p50 latency than script at the same round trips" in table


def test_the_stated_rule_is_the_rule_the_intervals_apply() -> None:
    """The words say "ahead by more than 10% in at least N of M rounds": ahead in exactly N
    rounds decides, in N - 1 it does not; "no more than K rounds beyond 10% on each side" is
    equivalent with K such rounds, not with K + 1."""
    for m in (10, 20):
        b = [1.0] * m
        (words,) = {x.rule for x in recommend([rec("a", scaled(1, m)), rec("b", scaled(1, m))])}
        need, of = map(int, re.search(r"in at least (\d+) of (\d+) paired rounds", words).groups())  # type: ignore[union-attr]
        # per side, and the words say so ("either way" read as 5 in all, not 5 on each side)
        k = int(
            re.search(r"no more than (\d+) of \d+ rounds beyond 10% on each side", words).group(1)
        )  # type: ignore[union-attr]
        assert of == m

        def outcome(fast: int, slow: int, near: int = 0, b: list[float] = b) -> str:
            a = [0.8] * fast + [1.25] * slow + [1.0] * near
            rows = [rec("script", b), rec("function", a)]
            (r,) = recommend(rows)
            return str(r.comparisons[0]["outcome"])

        assert outcome(need, m - need) == AHEAD
        assert outcome(need - 1, m - need + 1) != AHEAD
        assert outcome(k, k, m - 2 * k) == EQUIVALENT  # k rounds beyond on each side
        assert outcome(k + 1, 0, m - k - 1) != EQUIVALENT


def test_the_stated_rule_covers_every_round_count_of_the_run() -> None:
    """The demo: 20 rounds with one client, then a contention slice of 6 rounds. A verdict of
    the slice is ahead only when all 6 rounds are; the method a user reads must say so, not
    only "at least 15 of 20"."""
    one = [rec("script", scaled(1.0, 20), **RCW), rec("function", scaled(1.0, 20), **RCW)]
    hot = [
        rec(f, scaled(x, 6), clients=4, rtt_ms_nominal=0.0, contention="hot", **RCW)
        for f, x in (("script", 1.0), ("function", 0.8))
    ]
    table, html = page(one + hot)
    words = table[table.index("how the verdict decides:") :]
    assert "in at least 15 of 20 paired rounds" in words
    assert "op at 0 ms RTT with 4 clients, hot keys: 6 rounds" in words
    assert "ahead by more than 10% in all 6" in words
    assert "(the whole range: 96.9%" in words
    assert "ahead by more than 10% in all 6" in html


def _dead_rounds(form: str, rates: list[float], clients: int = 4, **kw: Any) -> dict[str, Any]:
    """At 1 ms RTT (4 clients: the throughput decides; 1: the p50); a rate of 0: every call
    of that round failed (no call completed, no p50, no CPU per op)."""
    r = rec(form, TEN, clients=clients, errors=sum(50 for x in rates if not x), **kw)
    r["rounds"] = [
        {"ops_per_sec": x, "calls": int(x / 10), "p50": 1000.0 / x if x else None} for x in rates
    ]
    r["ops_per_sec"] = sum(rates) / len(rates)
    return r


@pytest.mark.parametrize("clients", [4, 1])
def test_a_round_in_which_a_form_completed_no_call_is_a_round_it_lost(clients: int) -> None:
    """script completed no call in 3 of 10 rounds and was twice as fast as function in the
    other 7. The rule says ahead "in at least 9 of 10 paired rounds": script is ahead in 7,
    so it is not ahead (it read "use script: 2.00x the throughput of function (2.00x to
    2.00x): ahead", the dead rounds left out)."""
    rows = [
        _dead_rounds("script", [2000.0, 0.0] * 3 + [2000.0] * 4, clients, **RCW),
        _dead_rounds("function", [1000.0] * 10, clients, **RCW),
    ]
    (r,) = recommend(rows)
    (c,) = r.comparisons
    assert c["rounds"] == 10 and c["outcome"] == INCONCLUSIVE, r.text
    assert "use script" not in r.text
    assert "to unbounded)" in r.text or "(0x to " in r.text  # the dead rounds, in the interval


def test_rounds_with_no_completed_call_never_ask_for_rounds_the_run_already_had() -> None:
    """6 of 10 rounds dead: the verdict said "at least 6 rounds (--rounds 6 or more)" would
    decide it, after a run of 10."""
    rows = [
        _dead_rounds("script", [2000.0] + [0.0] * 6 + [2000.0] * 3, **RCW),
        _dead_rounds("function", [1000.0] * 10, **RCW),
    ]
    (r,) = recommend(rows)
    assert "--rounds 6 or more" not in r.text and "round(s) cannot decide" not in r.text
    assert r.comparisons[0]["rounds"] == 10 and "more rounds (luapipe bench --rounds 20" in r.text


# -- the forms at stake ------------------------------------------------------------------


def test_every_form_with_the_fewest_round_trips_is_at_stake_atomicity_a_stated_reason() -> None:
    """update_token: pipelined, transaction, script and function are one round trip each."""
    rows = [
        rec("naive", scaled(5.0), round_trips_per_op=5.0),
        rec("pipelined", scaled(1.0), server_usec_per_op=17.0),
        rec("transaction", scaled(1.01), server_usec_per_op=33.0),
        rec("script", scaled(1.0), server_usec_per_op=45.0),
        rec("function", scaled(1.0), server_usec_per_op=45.0),
    ]
    (r,) = recommend(rows)
    assert r.at_stake == ("pipelined", "transaction", "script", "function")
    assert r.form == "function" and set(r.tied_with) == {"pipelined", "transaction", "script"}
    table, html = page(rows)
    assert "function by policy: atomic (pipelined is not)" in table
    assert "The choice: <b>pipelined vs transaction vs script vs function</b>" in html
    # server CPU per op beside the verdict: the forms at stake are 2.6x apart
    assert (
        "server CPU per op (commandstats): script 45 us, function 45 us, transaction 33 us, "
        "pipelined 17 us: 2.65x apart" in table
    )


def test_server_cpu_is_not_said_when_the_forms_are_close() -> None:
    rows = [rec("script", TEN, server_usec_per_op=14.0), rec("pipelined", TEN)]
    (r,) = recommend(rows)
    assert r.server_cpu == "" and "server CPU per op" not in page(rows)[0]


def test_fewer_moving_parts_prefer_transaction_to_script_and_the_words_say_why() -> None:
    rows = [
        rec("transaction", [1.0, 1.02] * 5, **RCW),
        rec("script", [1.01, 1.0] * 5, **RCW),
    ]
    (r,) = recommend(rows)
    assert (r.status, r.form) == ("equivalent", "transaction")
    table, _ = page(rows)
    assert (
        "transaction by policy: nothing deployed, nothing lost in a failover (script: a "
        "per-node cache, lost on restart or failover)" in table
    )


def test_a_form_that_lost_updates_is_never_recommended_and_is_ruled_out_in_words() -> None:
    rows = [
        rec("transaction", scaled(2.0), round_trips_per_op=2.0, **RCW),
        rec("script", scaled(0.5), invariant_ok=False, lost_updates=5, invariant_cases=64, **RCW),
        rec("function", scaled(1.0), **RCW),
    ]
    (r,) = recommend(rows)
    assert r.form == "function" and "script" not in {c["other"] for c in r.comparisons}
    table, html = page(rows)
    assert "use function:" in table and "use script" not in table
    assert "ruled out: script lost updates in 5 of 64 cases" in table
    card = html[: html.index("How the verdict decides")]  # the card, not only "every reason"
    assert "ruled out: script lost updates in 5 of 64 cases" in card


def test_the_card_says_why_a_form_at_stake_is_not_compared_when_the_policy_picks() -> None:
    """script lost updates; function and transaction are equivalent: the card named script
    in "The choice" and then never again (the policy line replaces the main reason)."""
    rows = [
        rec("transaction", [1.0, 1.02] * 5, **RCW),
        rec("script", scaled(0.5), invariant_ok=False, lost_updates=5, invariant_cases=64, **RCW),
        rec("function", [1.01, 1.0] * 5, **RCW),
    ]
    _, html = page(rows)
    card = html[: html.index("How the verdict decides")]
    assert "function by policy" in card
    assert "ruled out: script lost updates in 5 of 64 cases" in card


def test_no_atomic_form_means_no_recommendation_for_a_read_compute_write() -> None:
    (r,) = recommend([rec("pipelined", TEN, **RCW), rec("naive", scaled(2.0), **RCW)])
    assert r.form is None and "no form at stake" in r.text


def test_no_correct_form_says_so() -> None:
    (r,) = recommend([rec("script", TEN, ops=0, errors=10)])
    assert r.form is None and "ran correctly" in r.text


def test_forms_skipped_on_a_cluster_are_named_with_their_reason() -> None:
    skipped = [{"operation": "op", "form": "script", "reason": "CROSSSLOT: keys in 2 slots"}]
    (r,) = recommend([rec("naive", scaled(3.0)), rec("pipelined", TEN)], skipped)
    assert r.form == "pipelined"
    assert "ruled out: script could not run here: CROSSSLOT: keys in 2 slots" in r.reasons


# -- races ---------------------------------------------------------------------------------


def test_one_client_never_reassures_about_races() -> None:
    rows = [
        rec("pipelined", scaled(0.9), round_trips_per_op=2.0, invariant_cases=64, **RCW),
        rec("transaction", scaled(2.0), round_trips_per_op=2.0, **RCW),
        rec("function", TEN, **RCW),
    ]
    (r,) = recommend(rows)
    (na,) = r.non_atomic
    assert "with one client no two calls meet on a key, so this run cannot show" in na["text"]
    table, html = page(rows)
    assert "no lost update" not in table + html
    assert "<summary>non-atomic pipelined: one client cannot show a race</summary>" in html
    hot = [dict(x, clients=4, contention="hot", rtt_ms_nominal=0.0) for x in rows]
    hot[0] |= {"invariant_ok": False, "lost_updates": 92, "invariant_cases": 130}
    one, four = recommend(rows + hot)
    assert "(the run with several clients on hot keys shows them)" in one.non_atomic[0]["text"]
    assert "it lost updates in 92 of 130 cases here" in four.non_atomic[0]["text"]
    assert four.text.startswith("op at 0 ms RTT with 4 clients, hot keys:")


@pytest.mark.parametrize("many", [{"tasks": 8}, {"batch": 10}], ids=["tasks", "batch"])
def test_one_client_with_calls_in_flight_or_a_lockstep_batch_is_not_said_to_be_race_free(
    many: dict[str, int],
) -> None:
    """One client with --tasks 8 (8 calls in flight) or a pipelined --batch 10 (operations in
    lockstep) does race on hot keys: a run showed FAIL 92/102 and FAIL 583/681. A form that
    happened to lose nothing there must not read "no two calls meet on a key"."""
    hot = {"contention": "hot", "rtt_ms_nominal": 0.0, **many}
    rows = [
        rec("pipelined", scaled(0.9), invariant_cases=64, **hot, **RCW),
        rec("transaction", scaled(2.0), round_trips_per_op=2.0, **hot, **RCW),
        rec("function", TEN, **hot, **RCW),
    ]
    (r,) = recommend(rows)
    (na,) = r.non_atomic
    assert na["text"].endswith("no lost update in 64 cases here, but it races when calls meet "
                               "on a key")  # fmt: skip
    table, html = page(rows)
    assert "so this run cannot show its races" not in table + html
    assert "one client cannot show a race" not in html
    assert "only a run with several clients can show them" not in table


def test_the_forms_that_lost_updates_are_listed_as_a_list() -> None:
    lost = {"invariant_ok": False, "lost_updates": 9, "invariant_cases": 10}
    hot = {"clients": 4, "contention": "hot", **RCW}
    rows = [rec(f, TEN, **hot, **lost) for f in ("naive", "pipelined", "auto naive")]
    rows += [rec("transaction", scaled(2.0), **hot), rec("function", TEN, **hot)]
    (r,) = recommend(rows)
    assert "(naive, pipelined and auto naive lost updates)" in r.text


# -- the figure ----------------------------------------------------------------------------


def test_several_clients_at_rtt_0_are_decided_on_cpu_per_op_and_say_so() -> None:
    def cpu(form: str, us: float) -> dict[str, Any]:
        r = rec(form, TEN, clients=4, rtt_ms_nominal=0.0, **RCW)
        r["client_cpu_usec_per_op"], r["server_cpu_usec_per_op"] = us - 10, 10.0
        for x in r["rounds"]:
            x["client_cpu_us"], x["server_cpu_us"] = us - 10, 10.0
        return r

    (r,) = recommend([cpu("transaction", 300.0), cpu("function", 100.0)])
    assert (r.figure, r.status, r.form) == ("cpu_us_per_op", "ahead", "function")
    assert "0.333x the CPU per op of transaction" in r.text
    assert any(x.startswith("decided on client + server CPU per op") for x in r.reasons)


def test_the_method_says_what_decides_with_one_client_and_many_calls_in_flight() -> None:
    """``bench --tasks 8``: one client, 8 calls in flight, decided on CPU per op at RTT 0; the
    method must not say "with one client ... the p50 latency"."""

    def cpu(form: str, us: float) -> dict[str, Any]:
        r = rec(form, TEN, tasks=8, rtt_ms_nominal=0.0, **RCW)
        r["client_cpu_usec_per_op"], r["server_cpu_usec_per_op"] = us - 10, 10.0
        for x in r["rounds"]:
            x["client_cpu_us"], x["server_cpu_us"] = us - 10, 10.0
        return r

    rows = [cpu("transaction", 300.0), cpu("function", 100.0)]
    (r,) = recommend(rows)
    assert r.figure == "cpu_us_per_op"
    words = unwrapped(method(rows))
    assert "with one client and one call at a time" in words
    assert "with several clients or several calls in flight (--tasks) the throughput, or at " \
        "RTT 0 the client's plus the server's CPU per op" in words  # fmt: skip


def test_the_open_loop_decides_on_p50_at_the_fixed_rate() -> None:
    rows = [
        rec("transaction", scaled(2.0), rate=500.0, **RCW),
        rec("script", scaled(1.0), rate=500.0, **RCW),
    ]
    (r,) = recommend(rows)
    assert (r.form, r.figure) == ("script", "p50_ms")
    assert "0.500x the p50 latency of transaction" in r.text


def test_one_recommendation_per_rtt_clients_and_contention() -> None:
    rows = [
        rec("script", TEN),
        rec("script", TEN, rtt_ms_nominal=2.0),
        rec("script", TEN, clients=4),
        rec("script", TEN, clients=4, contention="hot"),
    ]
    assert len(recommend(rows)) == 4


def test_too_few_samples_withholds_the_form_and_the_tie() -> None:
    rows = [rec("script", TEN), rec("function", TEN, calls=5, ops=5)]
    (r,) = recommendations(rows)
    assert r["form"] is None and r["tied_with"] == () and "too few samples" in r["text"]
    assert r["status"] == "too few samples"


def test_a_results_file_without_rounds_gets_an_undecided_verdict() -> None:
    """Schema 1 files have no rounds: one value per form, no interval, nothing decided."""
    rows = [rec("script", scaled(1.0)), rec("pipelined", scaled(2.5))]
    for r in rows:
        del r["rounds"]
    (r,) = recommend(rows)
    assert r.status == "inconclusive" and r.ratio == pytest.approx(2.5)
    assert "1 round(s) cannot decide (6 needed)" in r.text


def test_auto_pipelined_forms_share_writes_and_keep_their_forms_traits() -> None:
    """``bench --tasks 16``: the auto-pipelined forms' round trips per op are shared writes;
    the operation's one-round-trip forms (the transaction too) stay at stake, and with 16
    calls in flight the throughput decides."""
    many = {"tasks": 16, "rtt_ms_nominal": 1.0}
    rows = [
        rec("pipelined", TEN, **many),
        rec("transaction", TEN, **many),
        rec("script", TEN, **many),
        rec("function", TEN, **many),
        rec("auto pipelined", scaled(0.2), round_trips_per_op=0.1, **many),
        rec("auto function", scaled(0.2), round_trips_per_op=0.1, **many),
    ]
    (r,) = recommend(rows)
    assert "transaction" in r.at_stake and "auto function" in r.at_stake
    assert r.figure == "ops_per_sec"
    assert r.form == "auto function"  # atomic, a function's traits, by policy over auto pipelined
    assert "auto function by policy: atomic (auto pipelined is not)" in r.text
