"""The verdict in words: the headline, the one main reason, and the reasons behind it."""

from __future__ import annotations

from typing import Any

from luapipe.bench.compare import ATOMIC, MOVING_PARTS, Verdict, ratio
from luapipe.bench.intervals import NOISE_PCT, Ratio, median_cut

__all__ = ["CLUSTER", "QUESTIONS", "explain", "rule"]

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
QUESTIONS = {
    "read_compute_write": "its writes depend on its reads, so it needs an atomic form",
    "blind_writes": "its writes do not depend on reads: plain commands in one round trip "
    "against server-side code",
    "read_only": "it only reads: plain commands against server-side code",
    "other": "every form that ran",
}
_MOVING = {
    "function": "survives a failover (replicated and persisted), unlike the script cache",
    "transaction": "nothing deployed, nothing lost in a failover",
    "script": "needs each node's script cache, lost on restart or failover",
}
# an auto-pipelined form (bench --tasks) has its form's traits
CLUSTER.update({f"auto {f}": why for f, why in list(CLUSTER.items()) if f != "transaction"})
_MOVING.update({f"auto {f}": why for f, why in list(_MOVING.items()) if f != "transaction"})


def _x(v: float) -> str:
    return f"{v:.2g}x" if v < 10 else f"{v:.0f}x"


def _ms(v: Any) -> str:
    return "-" if v is None else f"{float(v):.3g} ms"


def _interval(x: Ratio | None) -> str:
    return "" if x is None or x.rounds < 2 else f" ({_x(x.lo)} to {_x(x.hi)})"


def rule(rounds: int) -> str:
    """When one form beats another, in words, for ``rounds`` paired rounds."""
    if rounds < 2:
        return "one round only: no spread is known, a form wins only by its single ratio"
    k, covered = median_cut(rounds)
    need = rounds - k + 1
    return (
        f"a form beats another only when it was ahead by more than {NOISE_PCT:g}% in at least "
        f"{need} of {rounds} paired rounds (the median round's ratio, its {covered:.0%} "
        "interval)"
    )


def _compare(x: Ratio, other: str, open_loop: bool) -> str:
    if open_loop:  # x: the other's p50 over this one's
        if x.value < 1.0:  # "0.8x lower" would mean higher: say so, the interval inverted
            inv = Ratio(1.0 / x.value, 1.0 / x.hi, 1.0 / x.lo, x.rounds, x.coverage)
            return f"p50 {_x(inv.value)} higher than {other}'s{_interval(inv)}"
        return f"p50 {_x(x.value)} lower than {other}'s{_interval(x)}"
    return f"{_x(x.value)} the throughput of {other}{_interval(x)}"


def _tie_break(chosen: dict[str, Any], group: list[dict[str, Any]]) -> str:
    """The rule that picked ``chosen`` among tied forms."""
    forms = [str(r["form"]) for r in group]
    if chosen["form"] in ATOMIC and any(f not in ATOMIC for f in forms):
        return "atomic over non-atomic: no other client sees it half done"
    mine = MOVING_PARTS.get(str(chosen["form"]), 3)
    if any(MOVING_PARTS.get(f, 3) > mine for f in forms):
        return f"fewer moving parts: {chosen['form']} {_MOVING.get(str(chosen['form']), '')}"
    cheapest = min(float(r.get("server_usec_per_op") or 0) for r in group)
    return f"lower server CPU ({cheapest:.1f} us/op)"


def _lost(r: dict[str, Any]) -> str:
    lost, cases = int(r.get("lost_updates") or 0), int(r.get("invariant_cases") or 0)
    if not r["invariant_ok"]:
        return f"lost updates in {lost} of {cases} cases here" if cases else "lost updates here"
    if cases:
        return f"no lost update seen in {cases} cases here, but it races when calls meet on a key"
    return "no invariant to check here, but it races when calls meet on a key"


def _non_atomic(v: Verdict, chosen: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for r in v.rows:
        if r["form"] in ATOMIC or v.kind != "read_compute_write":
            continue
        x = ratio(r, chosen, v.open_loop)
        out.append(
            {
                "form": r["form"],
                "ratio": None if x is None else x.value,
                "ratio_interval": None if x is None or x.rounds < 2 else (x.lo, x.hi),
                "lost_updates": int(r.get("lost_updates") or 0),
                "invariant_cases": int(r.get("invariant_cases") or 0),
                "invariant_ok": bool(r["invariant_ok"]),
                "text": f"{r['form']} would be "
                + (_compare(x, chosen["form"], v.open_loop) if x else "unmeasured")
                + f", but it is not atomic: {_lost(r)}",
            }
        )
    return out


def _figures(r: dict[str, Any]) -> str:
    iv = r.get("ops_per_sec_interval")
    rng = f" ({float(iv[0]):,.0f} to {float(iv[1]):,.0f})" if iv else ""
    lat = r["latency_ms"]
    return (
        f"{float(r['ops_per_sec']):,.0f} ops/s{rng}, p50 {_ms(lat.get('p50'))}, "
        f"p99 {_ms(lat.get('p99'))}, {float(r['round_trips_per_op']):.2g} round trip(s) per op"
    )


def explain(op: str, rtt: float, clients: int, v: Verdict) -> dict[str, Any]:
    """The fields of a :class:`~luapipe.bench.recommend.Recommendation` for ``v``."""
    where = f"at {rtt:g} ms RTT with {clients} client{'s' if clients != 1 else ''}"
    question = " vs ".join(v.at_stake)
    base: dict[str, Any] = {
        "question": question,
        "kind": v.kind,
        "at_stake": v.at_stake,
        "metric": "p50_ms" if v.open_loop else "ops_per_sec",
        "noise_threshold_pct": NOISE_PCT,
    }
    chosen = v.chosen
    if chosen is None:
        text = f"{op} {where}: no form at stake ({question}) ran correctly; see the errors."
        return base | {"form": None, "text": text, "reasons": tuple(v.ruled_out), "headline": text,
                       "main_reason": "no form at stake ran correctly"}  # fmt: skip
    form = str(chosen["form"])
    group = [chosen, *v.tied]
    tie_pct = None
    tie_rule = None
    reasons: list[str] = []
    if v.tied:
        spans = [x.within_pct for r in v.tied if (x := ratio(chosen, r, v.open_loop))]
        tie_pct = max([NOISE_PCT, *spans])
        tie_rule = _tie_break(chosen, group)
        names = ", ".join(str(r["form"]) for r in v.tied)
        reasons.append(f"tie with {names} (within +-{tie_pct:.0f}%); picked by {tie_rule}")
    alt = v.others[0] if v.others else None
    x = ratio(chosen, alt, v.open_loop) if alt is not None else None
    clear, by, cx = _clearly_beaten(chosen, v)
    beat = ""
    if clear is not None and by is not None and cx is not None:
        beat = _compare(cx, str(clear["form"]), v.open_loop)
        if by is not chosen:  # only a form it ties with is clearly ahead of that one
            beat = f"{by['form']}, tied with it, has {beat}"
        reasons.append(beat)
    reasons.append(_figures(chosen))
    if form in ATOMIC:
        reasons.append("atomic: no other client ever sees a half-done update")
    else:
        reasons.append("not atomic: other clients can see it half done")
    non_atomic = _non_atomic(v, chosen)
    reasons.extend(n["text"] for n in non_atomic)
    reasons.extend(_details(chosen, v))
    reasons.extend(f"ruled out: {r}" for r in v.ruled_out)
    reasons.append(CLUSTER.get(form, ""))
    headline = f"{op} {where}: use {form}"
    if v.tied:
        names = ", ".join(str(r["form"]) for r in v.tied)
        headline += f": tie with {names} (within +-{tie_pct:.0f}%)"
        if beat:
            headline += "; " + beat
    elif beat:
        headline += ": " + beat
    elif x is not None and alt is not None:  # ahead of alt only through a third form
        headline += f": {_compare(x, str(alt['form']), v.open_loop)}, within the noise"
    else:
        headline += ": the only form at stake that ran correctly"
    main = _main_reason(chosen, clear if by is chosen else None, tie_rule, non_atomic, v.others)
    reasons = [r for r in reasons if r]
    return base | {
        "form": form,
        "text": f"{headline}; {main}.",
        "reasons": tuple(reasons),
        "headline": headline,
        "tied_with": tuple(str(r["form"]) for r in v.tied),
        "tie_within_pct": tie_pct,
        "tie_break": tie_rule,
        "alternative": None if alt is None else str(alt["form"]),
        "ratio": None if x is None else x.value,
        "ratio_interval": None if x is None or x.rounds < 2 else (x.lo, x.hi),
        "beats": None if cx is None or clear is None else str(clear["form"]),
        "beats_by": None if cx is None or by is None else str(by["form"]),
        "beats_ratio": None if cx is None else cx.value,
        "beats_ratio_interval": None if cx is None or cx.rounds < 2 else (cx.lo, cx.hi),
        "ratio_rounds": None if x is None else x.rounds,
        "ratio_coverage": None if x is None or x.rounds < 2 else x.coverage,
        "rule": rule(x.rounds) if x is not None else "",
        "non_atomic": tuple(non_atomic),
        "main_reason": main,
    }


def _clearly_beaten(
    chosen: dict[str, Any], v: Verdict
) -> tuple[dict[str, Any] | None, dict[str, Any] | None, Ratio | None]:
    """``(form, by, ratio)``: the best form at stake past the tie that ``chosen`` clearly
    beats (``by`` is ``chosen``), else one that a form tied with ``chosen`` clearly beats
    (``by`` is that form: a ratio whose interval does not clear the noise is never put as a
    win); ``(None, None, None)`` when no such pair exists."""
    past = [r for r in v.others if r not in v.tied]
    for r in past:
        x = ratio(chosen, r, v.open_loop)
        if x is not None and x.beats():
            return r, chosen, x
    for r in past:
        for t in v.tied:
            x = ratio(t, r, v.open_loop)
            if x is not None and x.beats():
                return r, t, x
    return None, None, None


def _main_reason(
    chosen: dict[str, Any],
    clear: dict[str, Any] | None,
    tie_rule: str | None,
    non_atomic: list[dict[str, Any]],
    others: list[dict[str, Any]],
) -> str:
    lost = [n["form"] for n in non_atomic if not n["invariant_ok"]]
    tail = f" ({' and '.join(lost)} lost updates)" if lost else ""
    if tie_rule is not None:
        return tie_rule + tail
    if clear is not None:
        mine, theirs = float(chosen["round_trips_per_op"]), float(clear["round_trips_per_op"])
        if theirs - mine >= 0.5:
            return f"{mine:.2g} round trip(s) per op instead of {theirs:.2g}" + tail
        return f"less time per call than {clear['form']} at the same round trips" + tail
    if others:  # others ran correctly, and it cleared none of them beyond the noise
        return "no other form at stake was clearly ahead of it" + tail
    return "the only correct form at stake" + tail


def _details(chosen: dict[str, Any], v: Verdict) -> list[str]:
    out = []
    cheapest = min(v.rows, key=lambda r: float(r["server_usec_per_op"]))
    out.append(
        f"server CPU {float(chosen['server_usec_per_op']):.1f} us/op"
        + (
            ""
            if cheapest is chosen
            else f" (cheapest: {cheapest['form']}, "
            f"{float(cheapest['server_usec_per_op']):.1f} us/op)"
        )
    )
    if chosen.get("bystander_p99_ms") is not None:
        out.append(f"other clients' GET p99 during this form: {_ms(chosen['bystander_p99_ms'])}")
    if float(chosen.get("abort_rate", 0.0)) > 0:
        out.append(f"WATCH aborted {float(chosen['abort_rate']):.0%} of attempts (retried)")
    share, declared = chosen.get("write_share"), chosen.get("write_share_declared")
    if chosen.get("write_share_off") and share is not None and declared is not None:
        out.append(
            f"{float(share):.0%} of calls took the write path but the profile declares "
            f"{float(declared):.0%}: the timing is of another mix than intended"
        )
    return out
