"""The verdict in words: the headline, the one main reason, and the reasons behind it.

Every ratio and every "+-x%" is said of the pair it belongs to, with the pair named; a form
picked among equivalents is said to be picked by the policy, never to win; an undecided
point says so, and what would decide it.
"""

from __future__ import annotations

import math
from typing import Any

from luapipe.bench.verdict.compare import (
    AHEAD,
    BEHIND,
    CPU,
    EQUIVALENT,
    P50,
    TURNS,
    Comparison,
    Figure,
)
from luapipe.bench.verdict.decide import Verdict
from luapipe.bench.verdict.intervals import MIN_ROUNDS, Interval, median_cut, method_text
from luapipe.bench.verdict.policy import is_atomic, policy_reason

__all__ = [
    "CLUSTER",
    "QUESTIONS",
    "SERVER_CPU_SPREAD",
    "calls_meet",
    "comparison_text",
    "explain",
    "rule",
    "rule_at",
    "where",
]

CLUSTER = {
    "script": "In Redis Cluster every key of the script must hash to one slot (use a {hash tag})"
    ", and the script must be loaded on each primary.",
    "function": "In Redis Cluster every key must hash to one slot (use a {hash tag}); functions"
    " are replicated and survive failover, unlike the script cache.",
    "transaction": "In Redis Cluster MULTI/EXEC needs all keys in one slot.",
    "pipelined": "In Redis Cluster the pipeline is split per node: still few round trips, keys "
    "may live anywhere.",
    "naive": "Works unchanged in Redis Cluster.",
}
# an auto-pipelined form (bench --tasks) has its form's cluster traits
CLUSTER.update({f"auto {f}": why for f, why in list(CLUSTER.items()) if f != "transaction"})
QUESTIONS = {
    "read_compute_write": "its writes depend on its reads, so it needs an atomic form",
    "blind_writes": "its writes do not depend on reads: every form with the fewest round "
    "trips, plain commands against server-side code",
    "read_only": "it only reads: plain commands against server-side code",
    "other": "every form that ran",
}
#: server CPU per op this many times apart among the forms at stake is said beside the verdict
SERVER_CPU_SPREAD = 1.5
#: what a figure is called after "the" in a ratio: "0.71x the CPU per op of transaction"
_SHORT = {
    "ops_per_sec": "throughput",
    "cpu_us_per_op": "CPU per op",
    "p50_ms": "p50 latency",
    "p50_turns_ms": "p50 latency",
}

Row = dict[str, Any]


def _x(v: float) -> str:
    """A ratio: 0.908x, 1.099x near the margin (three decimals below 2, so an end just
    outside the margin never reads as inside it), 2.45x, 12x, 0.042x below 0.1."""
    if math.isinf(v):  # the other form completed no call in most rounds
        return "unbounded"
    if v < 0.1:
        return f"{v:.2g}x"
    if v < 2:
        return f"{v:.3f}x"
    return f"{v:.2f}x" if v < 10 else f"{v:.0f}x"


def _pct(p: float) -> str:
    return f"{p:.2g}%" if p < 10 else f"{p:.0f}%"


def _ms(v: Any) -> str:
    return "-" if v is None else f"{float(v):.3g} ms"


def where(rtt: float, clients: int, contention: str = "spread") -> str:
    """ "at 1 ms RTT with 4 clients, hot keys" """
    text = f"at {rtt:g} ms RTT with {clients} client{'s' if clients != 1 else ''}"
    if contention == "hot":
        text += ", hot keys"
    elif contention != "spread":
        text += f", keys drawn {contention}"
    return text


def _shown(x: Interval, figure: Figure) -> Interval:
    """The advantage as the words say it: form over other for throughput, form's cost over
    the other's for CPU and latency (0.71x the CPU per op: cheaper)."""
    return x if figure.higher_is_better else x.inverted()


def _span(x: Interval) -> str:
    return f"{_x(x.lo)} to {_x(x.hi)}" if x.rounds >= 2 else "one round"


def comparison_text(c: Comparison) -> str:
    """One pair in words, with its own ratio and interval."""
    x = c.ratio
    if x is None:
        return f"{c.other}: not comparable (no round measured both)"
    s = _shown(x, c.figure)
    ratio = f"{_x(s.value)} the {_SHORT[c.figure.key]} of {c.other} ({_span(s)})"
    m = _pct(c.margin_pct)
    if c.outcome == EQUIVALENT:
        return (
            f"equivalent to {c.other} within +-{_pct(x.within_pct)} "
            f"({_span(s)} its {_SHORT[c.figure.key]})"
        )
    if c.outcome == AHEAD:
        return f"{ratio}: ahead beyond +-{m}"
    if c.outcome == BEHIND:
        return f"{ratio}: behind beyond +-{m}"
    if not x.sufficient:
        return f"{ratio}: {x.rounds} round(s) cannot decide ({MIN_ROUNDS} needed)"
    return f"{ratio}: neither beyond nor within +-{m}"


def rule(rounds: int, margin_pct: float) -> str:
    """The decision rule in words for ``rounds`` paired rounds (what the intervals need)."""
    m = _pct(margin_pct)
    up = 1.0 + margin_pct / 100.0
    if rounds < MIN_ROUNDS:
        return (
            f"with {rounds} round(s) no interval covers 95%: nothing is decided (at least "
            f"{MIN_ROUNDS} rounds are needed); {method_text(rounds)}"
        )
    k, _ = median_cut(rounds)
    need = rounds - k + 1
    return (
        f"margin +-{m}: a form is ahead of another when the interval of its advantage lies "
        f"beyond {up:.3g}x (ahead by more than {m} in at least {need} of {rounds} paired "
        f"rounds), equivalent when it lies within {1 / up:.3g}x to {up:.3g}x (no more than "
        f"{k - 1} of {rounds} rounds beyond {m} on each side), inconclusive otherwise; "
        f"{method_text(rounds)}"
    )


def rule_at(rounds: int, margin_pct: float) -> str:
    """The rule's counts, in short, for a point of ``rounds`` paired rounds (a run whose
    points ran different round counts, as the demo's contention slice)."""
    m = _pct(margin_pct)
    if rounds < MIN_ROUNDS:
        return f"{rounds} round(s): no interval covers 95%, nothing is decided"
    k, covered = median_cut(rounds)
    need = rounds - k + 1
    ahead = f"all {rounds}" if need == rounds else f"at least {need} of {rounds}"
    ends = "the whole range" if k == 1 else f"the {k}th smallest to the {k}th largest"
    return (
        f"{rounds} rounds: ahead by more than {m} in {ahead} paired rounds, equivalent with no "
        f"more than {k - 1} of them beyond {m} on each side ({ends}: {covered:.1%})"
    )


def reach(c: Comparison) -> tuple[float, float] | None:
    """How far ``c``'s estimate lies from the end of the margin its interval straddles, and
    how many times narrower the interval must become to clear it if the estimate held
    (``(distance, factor)``, both of the logs of the ratios); None where an end is unbounded
    (a form lost whole rounds) or ``c`` is decided."""
    x = c.ratio
    if x is None or c.decided or not (0 < x.lo <= x.value <= x.hi < math.inf):
        return None
    e, lo, hi = math.log(x.value), math.log(x.lo), math.log(x.hi)
    b = math.log1p(c.margin_pct / 100.0)
    if e > b:  # ahead once the lower end clears the margin
        sides = [(e - b, e - lo)]
    elif e < -b:  # behind once the upper end does
        sides = [(-b - e, hi - e)]
    else:  # equivalent once both ends come within it
        sides = [(b - e, hi - e), (e + b, e - lo)]
    d, w = min(sides, key=lambda s: s[0] / s[1] if s[1] > 0 else math.inf)
    return (d, w / d if d > 0 else math.inf)


#: an estimate nearer the margin than this share of it (of the logs: 1.1x +- 2.4% at a 10%
#: margin) sits at the margin: more data narrows its interval around a difference of about
#: the margin itself, which may stay on the line however narrow it gets
AT_MARGIN = 0.25


def at_margin(c: Comparison) -> bool:
    """Whether ``c``'s estimate sits at the margin (see :data:`AT_MARGIN`)."""
    found = reach(c)
    return found is not None and found[0] < AT_MARGIN * math.log1p(c.margin_pct / 100.0)


def rounds_to_decide(c: Comparison) -> int | None:
    """About how many rounds would narrow ``c``'s interval enough to decide it if its
    estimate held (the interval of a median narrows as one over the root of the rounds),
    rounded up to ten; None where no count would (unbounded, or at the margin)."""
    found = reach(c)
    if found is None or at_margin(c) or c.ratio is None:
        return None
    n = c.ratio.rounds
    return max(n + 1, 10 * math.ceil(n * found[1] ** 2 / 10))


def _margin_end(c: Comparison) -> str:
    """The end of the margin nearest ``c``'s estimate, as the words show the ratio."""
    assert c.ratio is not None
    up = 1.0 + c.margin_pct / 100.0
    shown = _shown(c.ratio, c.figure).value
    return _x(up if shown >= 1.0 else 1.0 / up)


def _pairs(cs: list[Comparison]) -> str:
    names = [f"{c.form} vs {c.other}" for c in cs]
    return ", ".join(names[:-1]) + " and " + names[-1] if len(names) > 1 else names[0]


def _would_decide(v: Verdict) -> str:
    """What would decide an inconclusive point, and where nothing may: a pair whose estimate
    sits at the margin is said to be there, never promised a decision by more data."""
    short = [c for c in v.inconclusive if c.ratio is None or not c.ratio.sufficient]
    if short:
        return (
            f"at least {MIN_ROUNDS} rounds are needed before anything is decided (luapipe "
            f"bench --rounds {MIN_ROUNDS} or more; with fewer, no interval covers 95%)"
        )
    line = [c for c in v.inconclusive if at_margin(c)]
    rest = [c for c in v.inconclusive if c not in line]
    clauses = []
    if rest:
        counts = [rounds_to_decide(c) for c in rest]
        had = max(c.ratio.rounds for c in rest if c.ratio is not None)
        rounds = f"more rounds (luapipe bench --rounds {2 * had})"  # an end is unbounded
        if all(counts):
            n = max(x for x in counts if x is not None)
            rounds = (
                f"about {n} rounds if the estimate holds (luapipe bench --rounds {n}; this run "
                f"had {had})"
            )
        clauses.append(
            f"{_pairs(rest)}: a narrower interval would decide it: {rounds}, a longer "
            "--duration (more calls per round) or a quieter machine (fewer stalls)"
        )
    if line:
        said = ", ".join(
            f"{_x(_shown(c.ratio, c.figure).value)} the {_SHORT[c.figure.key]} of {c.other}"
            for c in line
            if c.ratio is not None
        )
        ends = " and ".join(dict.fromkeys(_margin_end(c) for c in line))
        one = len(line) == 1
        clauses.append(
            f"{_pairs(line)}: the {'estimate sits' if one else 'estimates sit'} at the margin "
            f"({said}; the margin at {ends}): more rounds, a longer --duration or a quieter "
            f"machine narrow the {'interval' if one else 'intervals'}, but "
            f"{'it' if one else 'they'} may stay on the line"
        )
    return "; ".join(clauses)


def calls_meet(r: Row) -> bool:
    """Whether ``r``'s calls could meet on a key: several clients, several calls in flight
    (``--tasks``), or a pipelined ``--batch`` (its operations advance in lockstep)."""
    batch = int(r.get("batch") or 1) > 1 and str(r["form"]) == "pipelined"
    return int(r.get("clients") or 1) > 1 or int(r.get("tasks") or 1) > 1 or batch


def _lost(r: Row, races_shown: bool) -> str:
    lost, cases = int(r.get("lost_updates") or 0), int(r.get("invariant_cases") or 0)
    if r.get("invariant_ok") is False:
        return f"it lost updates in {lost} of {cases} cases here" if cases else "it lost updates"
    if not calls_meet(r):
        shown = " (the run with several clients on hot keys shows them)" if races_shown else ""
        return "with one client no two calls meet on a key, so this run cannot show its races" + (
            shown
        )
    seen = f"no lost update in {cases} cases here" if cases else "no invariant checked here"
    return f"{seen}, but it races when calls meet on a key"


def _non_atomic(v: Verdict, chosen: Row, races_shown: bool) -> list[dict[str, Any]]:
    if v.kind != "read_compute_write":
        return []
    out = []
    for r in v.rows:
        if is_atomic(r):
            continue
        x = v.figure.advantage(r, chosen)
        gain = "unmeasured"
        if x is not None:
            s = _shown(x, v.figure)
            gain = f"{_x(s.value)} the {_SHORT[v.figure.key]} of {chosen['form']} ({_span(s)})"
        out.append(
            {
                "form": r["form"],
                "ratio": None if x is None else x.value,
                "ratio_interval": None if x is None or x.rounds < 2 else (x.lo, x.hi),
                "lost_updates": int(r.get("lost_updates") or 0),
                "invariant_cases": int(r.get("invariant_cases") or 0),
                "invariant_ok": r.get("invariant_ok") is not False,
                "clients": int(r.get("clients") or 1),
                "calls_met": calls_meet(r),  # False: this run could not show its races
                "text": f"{r['form']} would be {gain}, but it is not atomic: "
                + _lost(r, races_shown),
            }
        )
    return out


def _figures(r: Row) -> str:
    iv = r.get("ops_per_sec_interval")
    rng = f" ({float(iv[0]):,.0f} to {float(iv[1]):,.0f})" if iv else ""
    lat = r["latency_ms"]
    return (
        f"{r['form']}: {float(r['ops_per_sec']):,.0f} ops/s{rng}, p50 {_ms(lat.get('p50'))}, "
        f"p99 {_ms(lat.get('p99'))}, {float(r['round_trips_per_op']):.2g} round trip(s) per op"
    )


def _server_cpu(v: Verdict) -> str:
    """Server CPU per op of the forms at stake, when they are more than
    :data:`SERVER_CPU_SPREAD` times apart (else "")."""
    rows = [r for r in v.rows if r["form"] in v.at_stake and r.get("server_usec_per_op")]
    if len(rows) < 2:
        return ""
    costs = sorted(((float(r["server_usec_per_op"]), str(r["form"])) for r in rows), reverse=True)
    hi, lo = costs[0][0], costs[-1][0]
    if lo <= 0 or hi / lo <= SERVER_CPU_SPREAD:
        return ""
    listed = ", ".join(f"{f} {us:.3g} us" for us, f in costs)
    return f"server CPU per op (commandstats): {listed}: {_x(hi / lo)} apart"


def _cpu_figures(v: Verdict) -> str:
    rows = [r for r in v.rows if r["form"] in v.at_stake]
    parts = []
    for r in rows:
        cpu = CPU.of_record(r)  # the median round's, as the table shows it
        if cpu is not None:
            parts.append(f"{r['form']} {cpu:.3g} us")
    return ", ".join(parts)


def explain(
    op: str,
    rtt: float,
    clients: int,
    v: Verdict,
    contention: str = "spread",
    races_shown: bool = False,
) -> dict[str, Any]:
    """The fields of a :class:`~luapipe.bench.verdict.recommend.Recommendation` for ``v``;
    ``races_shown``: the run also has this operation with several clients on hot keys."""
    at = where(rtt, clients, contention)
    question = " vs ".join(v.at_stake)
    rounds = max((c.ratio.rounds for c in v.comparisons if c.ratio is not None), default=0)
    if not rounds and v.rows:
        rounds = max(len(r.get("rounds") or ()) for r in v.rows)
    base: dict[str, Any] = {
        "question": question,
        "kind": v.kind,
        "at_stake": v.at_stake,
        "metric": v.figure.key,
        "figure": v.figure.key,
        "figure_name": v.figure.name,
        "margin_pct": v.margin_pct,
        "noise_threshold_pct": v.margin_pct,
        "contention": contention,
        "rule": rule(rounds, v.margin_pct),
    }
    chosen = v.chosen
    if chosen is None:
        text = f"{op} {at}: no form at stake ({question}) ran correctly; see the errors."
        return base | {"form": None, "status": "none", "decided": False, "text": text,
                       "reasons": v.ruled_out, "headline": text,
                       "main_reason": "no form at stake ran correctly"}  # fmt: skip
    form = str(chosen["form"])
    texts = [(c, comparison_text(c)) for c in v.comparisons]
    ahead = [t for c, t in texts if c.outcome == AHEAD]
    equal = [t for c, t in texts if c.outcome == EQUIVALENT]
    open_ = [f"{form} vs {c.other}: {t}" for c, t in texts if not c.decided]
    equivalents = [v.row(c.other) for c in v.equivalent]
    undecided = [v.row(c.other) for c in v.inconclusive]
    policy = policy_reason(chosen, equivalents + undecided) if equivalents or undecided else None
    non_atomic = _non_atomic(v, chosen, races_shown)
    lost = [n["form"] for n in non_atomic if not n["invariant_ok"]]
    listed = ", ".join(lost[:-1]) + " and " + lost[-1] if len(lost) > 1 else "".join(lost)
    tail = f" ({listed} lost updates)" if lost else ""
    would = ""
    if not v.comparisons:
        status = "only"
        headline = f"{op} {at}: use {form}: the only form at stake that ran correctly"
        main = "the only correct form at stake" + tail
    elif not v.decided:
        status = "inconclusive"
        would = _would_decide(v)
        headline = f"{op} {at}: not decided: " + "; ".join(open_)
        if equal or ahead:
            headline += f"; {form} is " + "; ".join(equal + ahead)
        main = f"the data cannot tell at +-{_pct(v.margin_pct)}: {would}"
        main += f"; meanwhile {form}, by policy" + tail
    elif equal:
        status = "equivalent"
        headline = f"{op} {at}: use {form}: " + "; ".join(equal + ahead)
        main = str(policy) + tail
    else:
        status = "ahead"
        headline = f"{op} {at}: use {form}: " + "; ".join(ahead)
        main = _ahead_reason(chosen, v.row(v.comparisons[0].other), v.figure) + tail
    reasons: list[str] = []
    if v.figure is CPU:
        reasons.append(
            f"decided on {CPU.name} ({_cpu_figures(v)}): {CPU.why}; the throughput is in the table"
        )
    elif v.figure is P50 or v.figure is TURNS:
        reasons.append(f"decided on the {v.figure.name} of each round: {v.figure.why}")
    reasons.extend(f"{form}: {t}" for _, t in texts)
    if policy and (equivalents or undecided):
        reasons.append(policy)
    if would:
        reasons.append(f"what more data can do: {would}")
    cpu = _server_cpu(v)
    if cpu:
        reasons.append(cpu)
    reasons.append(_figures(chosen))
    if is_atomic(chosen):
        reasons.append("atomic: no other client ever sees a half-done update")
    else:
        reasons.append("not atomic: other clients can see it half done")
    reasons.extend(n["text"] for n in non_atomic)
    reasons.extend(_details(chosen))
    reasons.extend(f"ruled out: {r}" for r in v.ruled_out)
    reasons.append(CLUSTER.get(form, ""))
    best = v.comparisons[0] if v.comparisons else None
    beat = next((c for c in v.comparisons if c.outcome == AHEAD), None)
    widest = max((c.ratio.within_pct for c in v.equivalent if c.ratio is not None), default=None)
    return base | {
        "form": form,
        "status": status,
        "decided": v.decided,
        "text": f"{headline}; {main}" + "".join(f"; ruled out: {r}" for r in v.ruled_out) + ".",
        "reasons": tuple(r for r in reasons if r),
        "headline": headline,
        "comparisons": tuple(c.as_dict() | {"text": t} for c, t in texts),
        "policy": policy,
        "would_decide": would,
        "server_cpu": cpu,
        "tied_with": tuple(str(r["form"]) for r in equivalents),
        "tie_within_pct": widest,
        "tie_break": policy if equivalents else None,
        "alternative": None if best is None else best.other,
        "ratio": None if best is None or best.ratio is None else best.ratio.value,
        "ratio_interval": _pair(best),
        "beats": None if beat is None else beat.other,
        "beats_by": None if beat is None else form,
        "beats_ratio": None if beat is None or beat.ratio is None else beat.ratio.value,
        "beats_ratio_interval": _pair(beat),
        "ratio_rounds": None if best is None or best.ratio is None else best.ratio.rounds,
        "ratio_coverage": None
        if best is None or best.ratio is None or best.ratio.rounds < 2
        else best.ratio.coverage,
        "non_atomic": tuple(non_atomic),
        "main_reason": main,
    }


def _pair(c: Comparison | None) -> tuple[float, float] | None:
    if c is None or c.ratio is None or c.ratio.rounds < 2:
        return None
    return (c.ratio.lo, c.ratio.hi)


def _ahead_reason(chosen: Row, runner_up: Row, figure: Figure) -> str:
    mine, theirs = float(chosen["round_trips_per_op"]), float(runner_up["round_trips_per_op"])
    if theirs - mine >= 0.5:
        return f"{mine:.2g} round trip(s) per op instead of {theirs:.2g}"
    what = {"ops_per_sec": "less time per call", "cpu_us_per_op": "less CPU per op"}.get(
        figure.key, "a lower p50 latency"
    )
    return f"{what} than {runner_up['form']} at the same round trips"


def _details(chosen: Row) -> list[str]:
    out = []
    if chosen.get("bystander_p99_ms") is not None:
        out.append(f"other clients' GET p99 during this form: {_ms(chosen['bystander_p99_ms'])}")
    if float(chosen.get("abort_rate") or 0.0) > 0:
        out.append(f"WATCH aborted {float(chosen['abort_rate']):.0%} of attempts (retried)")
    share, declared = chosen.get("write_share"), chosen.get("write_share_declared")
    if chosen.get("write_share_off") and share is not None and declared is not None:
        out.append(
            f"{float(share):.0%} of calls took the write path but the profile declares "
            f"{float(declared):.0%}: the timing is of another mix than intended"
        )
    return out
