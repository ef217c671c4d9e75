"""The terminal table: one row per record, then crossovers and recommendations."""

from __future__ import annotations

from typing import Any

__all__ = ["render_table", "skipped_lines"]

HEADER = (
    "operation",
    "form",
    "rtt ms",
    "meas",
    "cl",
    "ops/s",
    "+-%",
    "p50",
    "p99",
    "p99.9",
    "max",
    "rt/op",
    "cmd/op",
    "srv us",
    "cpu us",
    "retry",
    "err",
    "inv",
    "wr%",
    "model ms",
    "byst p99",
)
#: open loop: the uncorrected percentiles (from the actual send) beside the corrected ones
RAW = ("p50 raw", "p99 raw")


def _f(v: Any, digits: int = 3) -> str:
    if v is None:
        return "-"
    x = float(v)
    return f"{x:.{digits}g}" if abs(x) < 1000 else f"{x:,.0f}"


def _spread(r: dict[str, Any]) -> str:
    """Half the width of the ops/s interval across rounds, in percent of ops/s."""
    iv, rate = r.get("ops_per_sec_interval"), float(r["ops_per_sec"])
    if not iv or rate <= 0:
        return "-"
    return f"{100.0 * (float(iv[1]) - float(iv[0])) / 2.0 / rate:.0f}"


def _share(r: dict[str, Any]) -> str:
    share = r.get("write_share")
    if share is None:
        return "-"
    return f"{100.0 * float(share):.0f}" + ("!" if r.get("write_share_off") else "")


def _inv(r: dict[str, Any]) -> str:
    if r["invariant_ok"]:
        return "ok"
    lost, cases = r.get("lost_updates"), r.get("invariant_cases")
    return f"FAIL {lost}/{cases}" if cases else "FAIL"


def _row(r: dict[str, Any], open_loop: bool) -> tuple[str, ...]:
    lat = r["latency_ms"]
    raw = r.get("latency_ms_uncorrected") or {}
    model = "-"
    if r.get("model_latency_ms") is not None:
        model = _f(r["model_latency_ms"])
        if r.get("model_error_pct") is not None:
            model += f" ({float(r['model_error_pct']):+.0f}%)"
    return (
        str(r["operation"]),
        str(r["form"]),
        f"{float(r['rtt_ms_nominal']):g}",
        _f(r["rtt_ms_measured"]),
        str(r["clients"]) + (f"x{r['tasks']}" if int(r.get("tasks") or 1) > 1 else ""),
        f"{float(r['ops_per_sec']):,.0f}",
        _spread(r),
        _f(lat.get("p50")),
        _f(lat.get("p99")),
        *((_f(raw.get("p50")), _f(raw.get("p99"))) if open_loop else ()),
        _f(lat.get("p999")),
        _f(lat.get("max")),
        _f(r["round_trips_per_op"]),
        _f(r["commands_per_op"]),
        _f(r["server_usec_per_op"]),
        _f(r.get("client_cpu_usec_per_op")),
        _f(r["retries_per_op"], 2),
        str(r["errors"]),
        _inv(r),
        _share(r),
        model,
        _f(r.get("bystander_p99_ms")),
    )


def skipped_lines(result: dict[str, Any]) -> list[str]:
    """One line per operation and reason: the forms that could not run, and why."""
    grouped: dict[tuple[str, str], list[str]] = {}
    for s in result.get("skipped", []):
        grouped.setdefault((str(s["operation"]), str(s["reason"])), []).append(str(s["form"]))
    return [f"skipped {op} {', '.join(forms)}: {why}" for (op, why), forms in grouped.items()]


def render_table(result: dict[str, Any]) -> str:
    """Plain-text table (latencies in ms, per call) and the verdicts under it."""
    records = result["records"]
    batched = any(int(r.get("batch") or 1) > 1 for r in records)
    open_loop = any(r.get("rate") for r in records)
    at = HEADER.index("p99") + 1
    header = (*HEADER[:at], *RAW, *HEADER[at:]) if open_loop else HEADER
    rows = [header] + [_row(r, open_loop) for r in records]
    if batched:  # a call carries `batch` operations: say so beside its latency
        at = header.index("cl") + 1
        rows = [(*row[:at], "batch" if n == 0 else str(records[n - 1].get("batch") or 1),
                 *row[at:]) for n, row in enumerate(rows)]  # fmt: skip
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for n, row in enumerate(rows):
        cells = [
            c.ljust(w) if i < 2 else c.rjust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    if batched:
        lines.append(
            "latency is per call; a call of batch N runs N operations in one pipeline "
            "(per-operation latency: latency_ms_per_op in the JSON)"
        )
    lines.extend(_legend(open_loop))
    for r in records:
        if not r["invariant_ok"]:
            lines.append(_invariant_line(r))
        if r.get("write_share_off"):
            lines.append(
                f"write share: {r['operation']} {r['form']} at {float(r['rtt_ms_nominal']):g} ms: "
                f"{100 * float(r['write_share']):.0f}% of calls wrote, the bench profile declares "
                f"{100 * float(r['write_share_declared']):.0f}%"
            )
        for s in r.get("error_samples", [])[:1]:
            lines.append(f"errors in {r['operation']} {r['form']} ({r['errors']}): {s}")
    lines.extend(skipped_lines(result))
    harness = [e for e in result.get("errors", []) if e.get("operation") == "harness"]
    for e in harness:
        lines.append(
            f"harness retried {e['form']} {e['errors']} time(s): {(e.get('samples') or [''])[0]}"
        )
    cals = [c for c in result.get("calibration", []) if c["rtt_ms_nominal"] > 0]
    if cals:
        lines.append("")
        lines.append(
            "RTT calibration (PING): "
            + ", ".join(
                f"{c['rtt_ms_nominal']:g} ms -> {c['rtt_ms_measured']:.3f} ms"
                + (f" ({c['error_pct']:+.1f}%)" if c.get("error_pct") is not None else "")
                for c in cals
            )
        )
    over = [c for c in result.get("calibration", []) if c["rtt_ms_nominal"] == 0]
    if over:
        lines.append(
            f"proxy overhead at rtt 0: {over[0]['proxy_overhead_ms']:.3f} ms per round trip "
            f"(direct PING {over[0]['direct_ping_ms']:.3f} ms); RTT 0 runs bypass the proxy"
        )
    lines.extend(f"note: {n}" for n in result.get("model_notes", []))
    if result.get("crossovers"):
        lines.append("")
        seen: set[tuple[str, ...]] = set()
        for c in result["crossovers"]:  # one line per pair
            pair = (str(c["operation"]), *sorted((str(c["more_trips"]), str(c["fewer_trips"]))))
            if pair not in seen:
                seen.add(pair)
                lines.append(f"crossover: {c['operation']}: {c['text']}")
    if result.get("recommendations"):
        lines.append("")
        lines.extend(f"recommendation: {r['text']}" for r in result["recommendations"])
    return "\n".join(lines)


def _legend(open_loop: bool) -> list[str]:
    out = [
        "+-% = half the 95% interval of ops/s across rounds; wr% = calls that took the write "
        "path (! = more than 10 points from the bench profile's share); inv FAIL n/m = the "
        "invariant broke in n of m cases (lost updates)"
    ]
    if open_loop:
        out.append(
            "open loop: p50/p99 count from each call's intended start (coordinated omission "
            "corrected); p50 raw/p99 raw from its actual send"
        )
    return out


def _invariant_line(r: dict[str, Any]) -> str:
    """Where the invariant broke, with the same totals as the table's ``FAIL n/m`` (the
    detail is the first broken round's own finding, whose counts are of that round only)."""
    c = int(r["clients"])
    where = f"{r['operation']} {r['form']} at {float(r['rtt_ms_nominal']):g} ms RTT, {c} " + (
        "client" if c == 1 else "clients"
    )
    lost, cases = r.get("lost_updates"), r.get("invariant_cases")
    total = f"broke in {lost} of {cases} cases checked; " if lost and cases else ""
    detail = r.get("invariant_detail")
    first = f"first broken round: {detail}" if detail else "no detail recorded"
    return f"INVARIANT FAILED: {where}: {total}{first}"
