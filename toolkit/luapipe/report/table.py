"""The terminal table and the lines under it.

By default it fits :data:`WIDTH` columns: one block per point (operation, RTT, clients,
contention) with the columns that decide a form, then that point's verdict; every note is
wrapped to the same width. ``wide=True`` is the full table, one row per record with every
column (model, bystander, p99.9, max...), the verdicts after it.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["WIDTH", "render_table", "skipped_lines", "wrap"]

#: the default table and every note fit this many columns
WIDTH = 100

Row = dict[str, Any]

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


def wrap(text: str, indent: str = "", width: int = WIDTH) -> list[str]:
    """``text`` in lines of at most ``width`` columns, continuation lines indented."""
    return textwrap.wrap(
        text,
        width=width,
        initial_indent=indent,
        subsequent_indent=indent + "  ",
        break_on_hyphens=False,
    ) or [indent.rstrip()]


def _f(v: Any, digits: int = 3) -> str:
    if v is None:
        return "-"
    x = float(v)
    return f"{x:.{digits}g}" if abs(x) < 1000 else f"{x:,.0f}"


def _spread(r: Row) -> str:
    """Where the ops/s interval across rounds ends, in percent of ops/s (see :func:`_half`)."""
    return _half(r["ops_per_sec"], r.get("ops_per_sec_interval"))


def _share(r: Row) -> str:
    share = r.get("write_share")
    if share is None:
        return "-"
    return f"{100.0 * float(share):.0f}" + ("!" if r.get("write_share_off") else "")


def _inv(r: Row) -> str:
    if r["invariant_ok"] or r["invariant_ok"] is None:
        return "ok"
    lost, cases = r.get("lost_updates"), r.get("invariant_cases")
    return f"FAIL {lost}/{cases}" if cases else "FAIL"


def _model(r: Row) -> str:
    if r.get("model_latency_ms") is None:
        return "-"
    text = _f(r["model_latency_ms"])
    if r.get("model_error_pct") is not None:
        text += f" ({float(r['model_error_pct']):+.0f}%)"
    return text


@dataclass(frozen=True)
class Column:
    name: str
    cell: Callable[[Row], str]
    keep: int = 0  # the default table drops the lowest first when it would not fit
    left: bool = False


def _lat(key: str, raw: bool = False) -> Callable[[Row], str]:
    def cell(r: Row) -> str:
        lat = (r.get("latency_ms_uncorrected") if raw else r.get("latency_ms")) or {}
        return _f(lat.get(key))

    return cell


def _half(value: Any, iv: Any) -> str:
    """Where an interval ends, in percent of the value (the "+-%" of a figure): "10" when
    both ends lie as far from it (within a point), else both ends, "-16/+318" (the intervals
    are a median's, often lopsided: "+-167" would read as running below zero)."""
    if not iv or value is None or float(value) <= 0 or None in iv:
        return "-"
    v = float(value)
    below, above = 100.0 * (float(iv[0]) - v) / v, 100.0 * (float(iv[1]) - v) / v
    down, up = round(-below), round(above)
    if down >= 0 and up >= 0 and abs(down - up) <= 1:  # as far within a point: "1", not "-0/+1"
        return str(max(down, up))
    return f"{_signed(below)}/{_signed(above)}"


def _signed(pct: float) -> str:
    """ "-16", "+318", and "0" for an end within half a point of the figure ("+0" would read
    as an end above it)."""
    return "0" if round(pct) == 0 else f"{pct:+.0f}"


def _p50_spread(r: Row) -> str:
    return _half((r.get("latency_ms") or {}).get("p50"),
                 (r.get("latency_ms_interval") or {}).get("p50"))  # fmt: skip


PLUS = "+-%"
#: the default table's columns (a point's block: operation, RTT and clients in its title);
#: the block's "+-%" goes right after the figure that decides it
COMPACT = (
    Column("form", lambda r: str(r["form"]), 9, left=True),
    Column("ops/s", lambda r: f"{float(r['ops_per_sec']):,.0f}", 9),
    Column("p50", _lat("p50"), 9),
    Column("turns", lambda r: _f(r.get("p50_turns_ms")), 9),
    Column("p99", _lat("p99"), 7),
    Column("p50 raw", _lat("p50", raw=True), 4),
    Column("p99 raw", _lat("p99", raw=True), 3),
    Column("cpu/op", lambda r: _f(r.get("cpu_usec_per_op")), 9),
    Column("rt/op", lambda r: _f(r["round_trips_per_op"]), 8),
    Column("srv us", lambda r: _f(r["server_usec_per_op"]), 8),
    Column("cpu us", lambda r: _f(r.get("client_cpu_usec_per_op")), 6),
    Column("retry", lambda r: _f(r["retries_per_op"], 2), 5),
    Column("err", lambda r: str(r["errors"]), 8),
    Column("inv", _inv, 9),
    Column("wr%", _share, 2),
)
#: the figure a block is decided by -> (the column it is, its "+-%")
SPREADS: dict[str, tuple[str, Callable[[Row], str]]] = {
    "ops_per_sec": ("ops/s", _spread),
    "p50_ms": ("p50", _p50_spread),
    "p50_turns_ms": (
        "turns",
        lambda r: _half(r.get("p50_turns_ms"), r.get("p50_turns_ms_interval")),
    ),
    "cpu_us_per_op": (
        "cpu/op",
        lambda r: _half(r.get("cpu_usec_per_op"), r.get("cpu_usec_per_op_interval")),
    ),
}


def _columns(figure: str, open_loop: bool) -> list[Column]:
    """A block's columns: ``cpu/op`` only where it decides, the open loop's raw
    percentiles only in the open loop, and the "+-%" after the deciding figure."""
    after, spread = SPREADS.get(figure, SPREADS["ops_per_sec"])
    cols = []
    for c in COMPACT:
        if ("raw" in c.name and not open_loop) or (
            c.name in ("cpu/op", "turns") and after != c.name
        ):
            continue
        if c.name == "cpu us" and after == "cpu/op":  # in cpu/op already: the first to go
            c = Column(c.name, c.cell, 1)
        cols.append(c)
        if c.name == after:
            cols.append(Column(PLUS, spread, 5))
    return cols


def _grid(rows: list[tuple[str, ...]], left: Sequence[bool], indent: str = "") -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        indent
        + "  ".join(
            c.ljust(w) if left[i] else c.rjust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in rows
    ]


def _fit(columns: list[Column], records: list[Row], indent: int) -> list[Column]:
    """The columns that fit :data:`WIDTH`, dropping the least needed first."""
    cols = list(columns)
    while True:
        widths = [max(len(c.name), *(len(c.cell(r)) for r in records)) for c in cols]
        if indent + sum(widths) + 2 * (len(cols) - 1) <= WIDTH or len(cols) <= 2:
            return cols
        cols.remove(min(cols[1:], key=lambda c: c.keep))


def _point_key(r: Row) -> tuple[str, float, int, str, int]:
    return (
        str(r["operation"]),
        float(r["rtt_ms_nominal"]),
        int(r["clients"]),
        str(r.get("contention") or "spread"),
        int(r.get("batch") or 1),
    )


def _title(r: Row) -> str:
    c = int(r["clients"])
    text = f"{r['operation']} at {float(r['rtt_ms_nominal']):g} ms RTT"
    if float(r["rtt_ms_nominal"]) > 0 and r.get("rtt_ms_measured") is not None:
        text += f" (measured {_f(r['rtt_ms_measured'])})"
    text += f", {c} client{'s' if c != 1 else ''}"
    if int(r.get("tasks") or 1) > 1:
        text += f" x {r['tasks']} tasks"
    contention = str(r.get("contention") or "spread")
    if contention == "hot":
        text += ", hot keys"
    elif contention != "spread":
        text += f", keys {contention}"
    if int(r.get("batch") or 1) > 1:
        text += f", batch {r['batch']} (latency per call)"
    if r.get("rate"):
        text += f", open loop at {_f(r['rate'])} calls/s"
    return text


def _verdict_lines(rec: Row, indent: str = "") -> list[str]:
    lines = wrap(f"recommendation: {rec['text']}", indent)
    if rec.get("server_cpu"):
        lines.extend(wrap(str(rec["server_cpu"]), indent + "  "))
    return lines


def _compact(result: Row) -> list[str]:
    records = result["records"]
    open_loop = any(r.get("rate") for r in records)
    recs = {_rec_key(x, rec=True): x for x in result.get("recommendations") or []}
    points: dict[tuple[str, float, int, str, int], list[Row]] = {}
    for r in records:
        points.setdefault(_point_key(r), []).append(r)
    lines: list[str] = []
    for key, rows in points.items():
        rec = recs.get(key[:4])
        figure = str((rec or {}).get("figure") or "ops_per_sec")
        cols = _fit(_columns(figure, open_loop), rows, indent=2)
        if lines:
            lines.append("")
        lines.extend(wrap(_title(rows[0])))
        grid = [tuple(c.name for c in cols)] + [tuple(c.cell(r) for c in cols) for r in rows]
        lines.extend(_grid(grid, [c.left for c in cols], "  "))
        if rec is not None:
            lines.extend(_verdict_lines(rec, "  "))
    return lines


def _row(r: Row, open_loop: bool) -> tuple[str, ...]:
    return (
        str(r["operation"]),
        str(r["form"]),
        f"{float(r['rtt_ms_nominal']):g}",
        _f(r["rtt_ms_measured"]),
        str(r["clients"]) + (f"x{r['tasks']}" if int(r.get("tasks") or 1) > 1 else ""),
        f"{float(r['ops_per_sec']):,.0f}",
        _spread(r),
        _lat("p50")(r),
        _lat("p99")(r),
        *((_lat("p50", True)(r), _lat("p99", True)(r)) if open_loop else ()),
        _lat("p999")(r),
        _lat("max")(r),
        _f(r["round_trips_per_op"]),
        _f(r["commands_per_op"]),
        _f(r["server_usec_per_op"]),
        _f(r.get("client_cpu_usec_per_op")),
        _f(r["retries_per_op"], 2),
        str(r["errors"]),
        _inv(r),
        _share(r),
        _model(r),
        _f(r.get("bystander_p99_ms")),
    )


def _wide(result: Row) -> list[str]:
    records = result["records"]
    batched = any(int(r.get("batch") or 1) > 1 for r in records)
    open_loop = any(r.get("rate") for r in records)
    keyed = len({str(r.get("contention") or "spread") for r in records}) > 1
    at = HEADER.index("p99") + 1
    header = (*HEADER[:at], *RAW, *HEADER[at:]) if open_loop else HEADER
    rows = [header] + [_row(r, open_loop) for r in records]
    if batched:  # a call carries `batch` operations: say so beside its latency
        at = header.index("cl") + 1
        rows = [(*row[:at], "batch" if n == 0 else str(records[n - 1].get("batch") or 1),
                 *row[at:]) for n, row in enumerate(rows)]  # fmt: skip
    if keyed:  # several contentions in one run (the demo's hot-key slice)
        at = rows[0].index("cl") + 1
        rows = [(*row[:at], "keys" if n == 0 else str(records[n - 1].get("contention")),
                 *row[at:]) for n, row in enumerate(rows)]  # fmt: skip
    lines = _grid(rows, [i < 2 for i in range(len(rows[0]))])
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return lines


def skipped_lines(result: Row) -> list[str]:
    """One line per operation and reason: the forms that could not run, and why."""
    grouped: dict[tuple[str, str], list[str]] = {}
    for s in result.get("skipped", []):
        grouped.setdefault((str(s["operation"]), str(s["reason"])), []).append(str(s["form"]))
    return [f"skipped {op} {', '.join(forms)}: {why}" for (op, why), forms in grouped.items()]


def render_table(result: Row, *, wide: bool = False) -> str:
    """The table (latencies in ms, per call) and the lines under it; every line but the
    wide table's own fits :data:`WIDTH` columns."""
    records = result["records"]
    open_loop = any(r.get("rate") for r in records)
    lines = _wide(result) if wide else _compact(result)
    notes: list[str] = []
    if any(int(r.get("batch") or 1) > 1 for r in records):
        notes.append(
            "latency is per call; a call of batch N runs N operations in one pipeline "
            "(per-operation latency: latency_ms_per_op in the JSON)"
        )
    notes.extend(_legend(open_loop, wide))
    for r in records:
        if r["invariant_ok"] is False:
            notes.append(_invariant_line(r))
        if r.get("write_share_off"):
            notes.append(
                f"write share: {r['operation']} {r['form']} at {float(r['rtt_ms_nominal']):g} ms: "
                f"{100 * float(r['write_share']):.0f}% of calls wrote, the bench profile declares "
                f"{100 * float(r['write_share_declared']):.0f}%"
            )
        for s in r.get("error_samples", [])[:1]:
            notes.append(f"errors in {r['operation']} {r['form']} ({r['errors']}): {s}")
    notes.extend(skipped_lines(result))
    for e in result.get("errors", []):
        if e.get("operation") == "harness":
            sample = (e.get("samples") or [""])[0]
            notes.append(f"harness retried {e['form']} {e['errors']} time(s): {sample}")
    lines.append("")
    for n in notes:
        lines.extend(wrap(n))
    cals = [c for c in result.get("calibration", []) if c["rtt_ms_nominal"] > 0]
    if cals:
        lines.append("")
        lines.extend(
            wrap(
                "RTT calibration (PING): "
                + ", ".join(
                    f"{c['rtt_ms_nominal']:g} ms -> {c['rtt_ms_measured']:.3f} ms"
                    + (f" ({c['error_pct']:+.1f}%)" if c.get("error_pct") is not None else "")
                    for c in cals
                )
            )
        )
    over = [c for c in result.get("calibration", []) if c["rtt_ms_nominal"] == 0]
    if over:
        lines.extend(
            wrap(
                f"proxy overhead at rtt 0: {over[0]['proxy_overhead_ms']:.3f} ms per round "
                f"trip (direct PING {over[0]['direct_ping_ms']:.3f} ms); RTT 0 runs bypass "
                "the proxy"
            )
        )
    for n in result.get("model_notes", []):
        lines.extend(wrap(f"note: {n}"))
    if result.get("crossovers"):
        lines.append("")
        seen: set[tuple[str, ...]] = set()
        for c in result["crossovers"]:  # one line per pair
            pair = (str(c["operation"]), *sorted((str(c["more_trips"]), str(c["fewer_trips"]))))
            if pair not in seen:
                seen.add(pair)
                lines.extend(wrap(f"crossover: {c['operation']}: {c['text']}"))
    method = result.get("method")
    if method:
        lines.append("")
        lines.extend(wrap(f"how the verdict decides: {method}"))
    shown = set() if wide else {_rec_key(r) for r in records}
    rest = [x for x in result.get("recommendations") or [] if _rec_key(x, rec=True) not in shown]
    if rest:  # the wide table's verdicts, or any the blocks above did not show
        lines.append("")
        for rec in rest:
            lines.extend(_verdict_lines(rec))
    return "\n".join(lines)


def _rec_key(x: Row, rec: bool = False) -> tuple[str, float, int, str]:
    """The point of a record, or of a recommendation (``rec``)."""
    rtt = x["rtt_ms"] if rec else x["rtt_ms_nominal"]
    return (
        str(x["operation"]),
        float(rtt),
        int(x["clients"]),
        str(x.get("contention") or "spread"),
    )


def _legend(open_loop: bool, wide: bool) -> list[str]:
    out = [
        (
            "+-% = where the interval of ops/s across rounds ends, in percent of ops/s "
            "(below/above; one number when both ends are as far); ops/s, p50 and p99 are the "
            "median round's, p99.9 and max over every call"
            if wide
            else "+-% = where the interval of the figure before it ends, in percent of it "
            "(below/above; one number when both ends are as far), the figure that decides its "
            "block; turns = the p50 while the forms took turns of 16 "
            "calls (one client); cpu/op = the client's plus the server's CPU per op; ops/s, "
            "p50, p99, turns and cpu/op are each the median round's, inside its interval"
        )
        + " (intervals: see the method at the end); srv us = server time inside commands per "
        "op (commandstats); cpu us = the "
        "client's CPU per op; inv = the invariant after each round, FAIL n/m = it broke in n "
        "of m cases (lost updates; with 1 client making one call at a time no two calls meet "
        "on a key: only several clients, --tasks or a pipelined --batch can show them); wr% = "
        "calls that took the write path (! = more "
        "than 10 points from the bench profile's share)"
        + ("" if wide else "; --wide shows every column")
    ]
    if open_loop:
        out.append(
            "open loop: p50/p99 count from each call's intended start (coordinated omission "
            "corrected); p50 raw/p99 raw from its actual send"
        )
    return out


def _invariant_line(r: Row) -> str:
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
