"""The charts of one operation: latency and throughput against RTT (or clients), with the
intervals across rounds as error bars, and the latency percentiles at the largest RTT."""

from __future__ import annotations

from typing import Any

from markupsafe import Markup

from luapipe.report.charts import Interval, Series, line_chart

__all__ = ["operation_charts"]

Row = dict[str, Any]


def _forms(rows: list[Row]) -> list[str]:
    return list(dict.fromkeys(str(r["form"]) for r in rows))


def _interval(value: Any) -> Interval:
    """``[lo, hi]`` from the JSON, or None (absent, null, or not two numbers)."""
    if isinstance(value, list | tuple) and len(value) == 2 and all(v is not None for v in value):
        return float(value[0]), float(value[1])
    return None


def _clients(n: int) -> str:
    return f"{n} client{'s' if n != 1 else ''}"


def operation_charts(op: str, rows: list[Row]) -> list[Markup]:
    # one contention per chart (the first measured): a line from spread keys to the demo's
    # hot-key slice would read as the effect of the clients; that slice is in the tables
    keys = str(rows[0].get("contention") or "spread")
    rows = [r for r in rows if str(r.get("contention") or "spread") == keys]
    forms = _forms(rows)
    rtts = sorted({float(r["rtt_ms_nominal"]) for r in rows})
    clients = sorted({int(r["clients"]) for r in rows})
    c0 = clients[0]
    at = {(r["form"], float(r["rtt_ms_nominal"]), int(r["clients"])): r for r in rows}

    def get(f: str, t: float, c: int) -> Row:
        return at.get((f, t, c), {})

    charts = []
    lat = [  # the mean latency's interval over the rounds, when the run measured one
        Series(
            f,
            tuple(get(f, t, c0).get("latency_ms", {}).get("mean") for t in rtts),
            intervals=tuple(
                _interval((get(f, t, c0).get("latency_ms_interval") or {}).get("mean"))
                for t in rtts
            ),
        )
        for f in forms
    ]
    for f in forms:
        model = [get(f, t, c0).get("model_latency_ms") for t in rtts]
        if any(v is not None for v in model):
            lat.append(Series(f"{f} model", tuple(model), dashed=True))
    charts.append(
        line_chart(
            f"{op}: mean latency per call vs RTT ({_clients(c0)}); dashed: the round-trip model",
            [f"{t:g}" for t in rtts],
            lat,
            "ms (log)",
            log_y=True,
            x_title="simulated RTT, ms",
        )
    )
    bars = (
        ", bars: the interval of the median round"
        if any(r.get("ops_per_sec_interval") for r in rows)
        else ""
    )
    if len(clients) == 1:  # one client count: throughput against RTT says more
        charts.append(
            line_chart(
                f"{op}: throughput vs RTT ({_clients(c0)}){bars}",
                [f"{t:g}" for t in rtts],
                [_throughput(f, [get(f, t, c0) for t in rtts]) for f in forms],
                "ops/s (log)",
                log_y=True,
                x_title="simulated RTT, ms",
            )
        )
    for t in rtts if len(clients) > 1 else ():
        charts.append(
            line_chart(
                f"{op}: throughput vs clients at {t:g} ms RTT{bars}",
                [str(c) for c in clients],
                [_throughput(f, [get(f, t, c) for c in clients]) for f in forms],
                "ops/s",
                x_title="clients",
            )
        )
    charts.append(_percentiles(op, forms, [get(f, rtts[-1], c0) for f in forms], rtts[-1]))
    return [Markup(c) for c in charts]


def _throughput(form: str, points: list[Row]) -> Series:
    return Series(
        form,
        tuple(p.get("ops_per_sec") for p in points),
        intervals=tuple(_interval(p.get("ops_per_sec_interval")) for p in points),
    )


def _percentiles(op: str, forms: list[str], rows: list[Row], rtt: float) -> str:
    dists = [dict((q, v) for q, v in r.get("latency_distribution", [])) for r in rows]
    qs = sorted({q for d in dists for q in d})
    return line_chart(
        f"{op}: latency percentiles at {rtt:g} ms RTT",
        [f"{q:g}" for q in qs],
        [Series(f, tuple(d.get(q) for q in qs)) for f, d in zip(forms, dists, strict=True)],
        "ms (log)",
        log_y=True,
        x_title="percentile",
    )
