"""Which form to use, in plain words, from benchmark records (the JSON ``records`` list).

For each (operation, RTT, clients) point: forms that lost updates or failed are ruled out,
and so are non-atomic forms of a read-compute-write (they race even when this run's
contention did not show it);
the fastest remaining form wins, except that an atomic form within 10% of a non-atomic
winner is preferred (it is as fast and nobody sees a half-done update). The reasons name
the throughput gain, round trips, latency, server CPU, the bystander's p99, aborts and the
cluster constraint.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["Recommendation", "recommend"]

ATOMIC = {"transaction", "script", "function"}
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


@dataclass(frozen=True)
class Recommendation:
    operation: str
    rtt_ms: float
    clients: int
    form: str | None
    text: str
    reasons: tuple[str, ...]
    headline: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _ms(v: Any) -> str:
    return "-" if v is None else f"{float(v):.3g} ms"


def _pick(rows: list[dict[str, Any]]) -> tuple[dict[str, Any] | None, list[str]]:
    ruled_out = []
    valid = []
    for r in rows:
        if not r["invariant_ok"]:
            ruled_out.append(
                f"{r['form']} lost updates ({r.get('invariant_detail') or 'invariant failed'})"
            )
        elif r.get("read_compute_write") and r["form"] not in ATOMIC:
            ruled_out.append(
                f"{r['form']}: its writes depend on its reads, and without atomicity another "
                "client can change the data in between (lost updates under contention)"
            )
        elif r["errors"] and r["ops"] == 0:
            ruled_out.append(f"{r['form']} failed: every call returned an error")
        elif r["ops"] > 0:
            valid.append(r)
    if not valid:
        return None, ruled_out
    valid.sort(key=lambda r: -float(r["ops_per_sec"]))
    best = valid[0]
    if best["form"] not in ATOMIC:
        for r in valid[1:]:
            if r["form"] in ATOMIC and float(r["ops_per_sec"]) >= 0.9 * float(best["ops_per_sec"]):
                return r, ruled_out
    return best, ruled_out


def _reasons(best: dict[str, Any], rows: list[dict[str, Any]], ruled_out: list[str]) -> list[str]:
    out = []
    by_form = {r["form"]: r for r in rows}
    rate = float(best["ops_per_sec"])
    naive = by_form.get("naive")
    if naive and naive is not best and float(naive["ops_per_sec"]) > 0:
        out.append(
            f"{rate / float(naive['ops_per_sec']):.1f}x the throughput of one call at a time"
        )
    out.append(
        f"{rate:,.0f} ops/s, p50 {_ms(best['latency_ms'].get('p50'))}, "
        f"p99 {_ms(best['latency_ms'].get('p99'))}, "
        f"{float(best['round_trips_per_op']):.2g} round trip(s) per op"
    )
    if best["form"] in ATOMIC:
        out.append("atomic: no other client ever sees a half-done update")
    else:
        out.append(
            "not atomic: other clients can see it half done, and a read-then-write can lose "
            "updates under contention"
        )
    faster = [
        r
        for r in rows
        if float(r["ops_per_sec"]) > rate * 1.02
        and r is not best
        and r["invariant_ok"]
        and not r.get("read_compute_write")
    ]
    for r in faster:
        out.append(f"{r['form']} is {float(r['ops_per_sec']) / rate - 1:.0%} faster but not atomic")
    cheapest = min(rows, key=lambda r: float(r["server_usec_per_op"]))
    out.append(
        f"server CPU {float(best['server_usec_per_op']):.1f} us/op"
        + (
            ""
            if cheapest is best
            else f" (cheapest: {cheapest['form']}, "
            f"{float(cheapest['server_usec_per_op']):.1f} us/op)"
        )
    )
    if best.get("bystander_p99_ms") is not None:
        out.append(f"other clients' GET p99 during this form: {_ms(best['bystander_p99_ms'])}")
    if float(best.get("abort_rate", 0.0)) > 0:
        out.append(f"WATCH aborted {float(best['abort_rate']):.0%} of attempts (retried)")
    out.extend(f"ruled out: {r}" for r in ruled_out)
    out.append(CLUSTER.get(best["form"], ""))
    return [r for r in out if r]


def recommend(
    records: list[dict[str, Any]], skipped: list[dict[str, str]] | None = None
) -> list[Recommendation]:
    """One recommendation per (operation, nominal RTT, clients) in ``records``.

    ``skipped`` (the results' ``skipped`` list: operation, form, reason) names forms that
    could not run at all here, such as atomic forms whose keys span cluster slots.
    """
    groups: dict[tuple[str, float, int], list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        groups[(str(r["operation"]), float(r["rtt_ms_nominal"]), int(r["clients"]))].append(r)
    out = []
    for (op, rtt, clients), rows in groups.items():
        best, ruled_out = _pick(rows)
        ruled_out = ruled_out + [
            f"{s['form']} could not run here: {s['reason']}"
            for s in skipped or ()
            if s.get("operation") == op
        ]
        where = f"at {rtt:g} ms RTT with {clients} client{'s' if clients != 1 else ''}"
        if best is None:
            text = f"{op} {where}: no form ran correctly; see the errors."
            out.append(Recommendation(op, rtt, clients, None, text, tuple(ruled_out), text))
            continue
        reasons = _reasons(best, rows, ruled_out)
        headline = f"{op} {where}: use {best['form']}"
        text = f"{headline}: " + "; ".join(reasons[:3]) + "."
        out.append(
            Recommendation(op, rtt, clients, str(best["form"]), text, tuple(reasons), headline)
        )
    return out
