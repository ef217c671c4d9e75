"""The HTML report: Jinja2 (autoescape on) with inline SVG charts; opens offline."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader, Undefined, select_autoescape
from markupsafe import Markup

from luapipe.report.charts import Series, line_chart
from luapipe.report.jsonio import mask_tree

__all__ = ["render_html", "write_html"]


def _env() -> Environment:
    env = Environment(
        loader=PackageLoader("luapipe.report", "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["num"] = _num
    return env


def _num(v: Any, digits: int = 3) -> str:
    if v is None or isinstance(v, Undefined):
        return "-"
    x = float(v)
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.{digits}g}"


def _forms(rows: list[dict[str, Any]]) -> list[str]:
    return list(dict.fromkeys(str(r["form"]) for r in rows))


def _charts(op: str, rows: list[dict[str, Any]]) -> list[Markup]:
    forms = _forms(rows)
    rtts = sorted({float(r["rtt_ms_nominal"]) for r in rows})
    clients = sorted({int(r["clients"]) for r in rows})
    c0 = clients[0]
    at = {(r["form"], float(r["rtt_ms_nominal"]), int(r["clients"])): r for r in rows}
    charts = []
    lat_series = []
    for f in forms:
        vals = [at.get((f, t, c0), {}).get("latency_ms", {}).get("mean") for t in rtts]
        lat_series.append(Series(f, tuple(vals)))
    for f in forms:
        model = [at.get((f, t, c0), {}).get("model_latency_ms") for t in rtts]
        if any(v is not None for v in model):
            lat_series.append(Series(f"{f} model", tuple(model), dashed=True))
    charts.append(
        line_chart(
            f"{op}: mean latency per call vs RTT ({c0} client{'s' if c0 > 1 else ''})",
            [f"{t:g}" for t in rtts],
            lat_series,
            "ms (log)",
            log_y=True,
            x_title="simulated RTT, ms",
        )
    )
    top = rtts[-1]
    points: list[float] = []
    for f in forms:
        points.extend(q for q, _ in at.get((f, top, c0), {}).get("latency_distribution", []))
    qs = sorted(set(points))
    dist = []
    for f in forms:
        d = dict((q, v) for q, v in at.get((f, top, c0), {}).get("latency_distribution", []))
        dist.append(Series(f, tuple(d.get(q) for q in qs)))
    charts.append(
        line_chart(
            f"{op}: latency percentiles at {top:g} ms RTT",
            [f"{q:g}" for q in qs],
            dist,
            "ms (log)",
            log_y=True,
            x_title="percentile",
        )
    )
    if len(clients) == 1:  # one client count: throughput against RTT says more
        thr = [
            Series(f, tuple(at.get((f, t, c0), {}).get("ops_per_sec") for t in rtts)) for f in forms
        ]
        charts.append(
            line_chart(
                f"{op}: throughput vs RTT ({c0} client{'s' if c0 > 1 else ''})",
                [f"{t:g}" for t in rtts],
                thr,
                "ops/s (log)",
                log_y=True,
                x_title="simulated RTT, ms",
            )
        )
    for t in rtts if len(clients) > 1 else ():
        thr = [
            Series(f, tuple(at.get((f, t, c), {}).get("ops_per_sec") for c in clients))
            for f in forms
        ]
        charts.append(
            line_chart(
                f"{op}: throughput vs clients at {t:g} ms RTT",
                [str(c) for c in clients],
                thr,
                "ops/s",
                x_title="clients",
            )
        )
    return [Markup(c) for c in charts]


def render_html(result: dict[str, Any]) -> str:
    """The report as one self-contained HTML page (every string escaped, URLs masked)."""
    data = mask_tree(result)
    by_op: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in data["records"]:
        by_op[str(r["operation"])].append(r)
    sections = [
        {
            "name": op,
            "charts": _charts(op, rows),
            "rows": rows,
            "crossovers": [c for c in data.get("crossovers", []) if c["operation"] == op],
            "recommendations": [x for x in data.get("recommendations", []) if x["operation"] == op],
        }
        for op, rows in by_op.items()
    ]
    return (
        _env()
        .get_template("report.html.j2")
        .render(result=data, sections=sections, summary=_summary(data))
    )


def _summary(data: dict[str, Any]) -> dict[str, Any]:
    """Operation x RTT grid of recommended forms (fewest clients measured)."""
    recs = data.get("recommendations", [])
    if not recs:
        return {"rtts": [], "rows": []}
    c0 = min(int(r["clients"]) for r in recs)
    rtts = sorted({float(r["rtt_ms"]) for r in recs})
    grid: dict[str, dict[float, Any]] = defaultdict(dict)
    for r in recs:
        if int(r["clients"]) == c0:
            grid[str(r["operation"])][float(r["rtt_ms"])] = r
    rows = [{"operation": op, "cells": [cells.get(t) for t in rtts]} for op, cells in grid.items()]
    return {"rtts": rtts, "rows": rows, "clients": c0}


def write_html(result: dict[str, Any], path: str | Path) -> None:
    Path(path).write_text(render_html(result))
