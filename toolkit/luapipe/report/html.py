"""The HTML report: Jinja2 (autoescape on) with inline SVG charts; opens offline.

The page puts the verdict first (per operation: the choice at stake, the winner or the tie
with its interval, the one main reason), then each operation's charts and figures. It fits
its width from a phone (390 px) to a desktop: wide tables scroll inside their own box,
charts scale, and long words wrap.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader, Undefined, select_autoescape
from markupsafe import Markup, escape

from luapipe.report.files import write_whole
from luapipe.report.jsonio import mask_tree
from luapipe.report.opcharts import operation_charts
from luapipe.report.overview import operation_cards, share_text

__all__ = ["render_html", "write_html"]


def _env() -> Environment:
    env = Environment(
        loader=PackageLoader("luapipe.report", "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["num"] = _num
    env.filters["span"] = _span
    env.filters["share"] = share_text
    env.filters["pm"] = _pm
    env.filters["options"] = _options
    return env


_OPTION = re.compile(r"--[a-z][a-z-]*(?: [0-9][0-9.,]*)?")


def _options(text: Any) -> Markup:
    """Text (escaped) whose command-line options never break across lines: a line ending
    in "--" above "duration" reads as two words."""
    escaped = str(escape(str(text)))
    return Markup(_OPTION.sub(lambda m: f'<span class="nw">{m.group(0)}</span>', escaped))


def _pm(text: Any) -> str:
    """The verdict's ASCII "+-" as the page writes it: ±."""
    return str(text).replace("+-", "±")


def _num(v: Any, digits: int = 3) -> str:
    if v is None or isinstance(v, Undefined):
        return "-"
    x = float(v)
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.{digits}g}"


def _span(v: Any) -> str:
    """An interval ``[lo, hi]`` as "lo-hi" ("" when absent)."""
    if not isinstance(v, list | tuple) or len(v) != 2 or None in v:
        return ""
    return f"{_num(v[0])}-{_num(v[1])}"


def _invariant(r: dict[str, Any]) -> str:
    """What the invariant column says: ok, or how many checked cases broke."""
    if r.get("invariant_ok"):
        return "ok"
    lost, cases = r.get("lost_updates"), r.get("invariant_cases")
    if lost:
        return f"FAILED in {lost}{f' of {cases}' if cases else ''} cases"
    return "FAILED"


def _setting(m: dict[str, Any]) -> dict[str, Any]:
    """The run's settings, as the one line under the title shows them."""
    cfg = (m.get("spec") or {}).get("config") or {}
    rtts = ", ".join(f"{float(t):g}" for t in cfg.get("rtts_ms") or [])
    clients = ", ".join(str(c) for c in cfg.get("clients") or [])
    return {
        "redis": (m.get("redis") or {}).get("version"),
        "rtts": rtts,
        "clients": clients,
        "duration": cfg.get("duration_s"),
        "rounds": cfg.get("rounds"),
        "rate": cfg.get("rate"),
        "created": m.get("created_utc"),
        "seed": cfg.get("seed"),
        "tasks": cfg.get("tasks") if int(cfg.get("tasks") or 1) > 1 else None,
        "also": "; ".join(_part(p) for p in (m.get("spec") or {}).get("also") or []),
    }


def _part(part: dict[str, Any]) -> str:
    """A further part of the run, as the line under the title names it: "then
    reserve_stock, rate_limit with 4 clients on hot keys at RTT 0 ms (6 rounds)"."""
    cfg = part.get("config") or {}
    names = ", ".join(str(w.get("name")) for w in part.get("workloads") or [])
    keys = {str(w.get("contention")) for w in part.get("workloads") or []}
    clients = ", ".join(str(c) for c in cfg.get("clients") or [])
    rtts = ", ".join(f"{float(t):g}" for t in cfg.get("rtts_ms") or [])
    on = " on hot keys" if keys == {"hot"} else ""
    return f"then {names} with {clients} clients{on} at RTT {rtts} ms ({cfg.get('rounds')} rounds)"


def render_html(result: dict[str, Any]) -> str:
    """The report as one self-contained HTML page (every string escaped, URLs masked)."""
    data = mask_tree(result)
    data.setdefault("manifest", {})
    by_op: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in data["records"]:
        r["invariant_text"] = _invariant(r)
        by_op[str(r["operation"])].append(r)
    recs = data.get("recommendations") or []
    profiles = {
        str(w.get("name")): w.get("bench_profile")
        for w in ((data["manifest"].get("spec") or {}).get("workloads") or [])
        if isinstance(w, dict)
    }
    sections = [
        {
            "name": op,
            "charts": operation_charts(op, rows),
            "rows": rows,
            "profile": profiles.get(op),
            "cpu_wait": any(r.get("client_wait_usec_per_op") for r in rows),
            "open_loop": any(r.get("latency_ms_uncorrected") for r in rows),
            "crossovers": [c for c in data.get("crossovers", []) if c["operation"] == op],
            "recommendations": [x for x in recs if x["operation"] == op],
        }
        for op, rows in by_op.items()
    ]
    thresholds = {x.get("noise_threshold_pct") for x in recs} - {None}
    # the rule as the verdict stated it for the rounds this run had (not a fixed "9 of 10")
    rules = list(dict.fromkeys(str(x["rule"]) for x in recs if x.get("rule")))
    return (
        _env()
        .get_template("report.html.j2")
        .render(
            result=data,
            m=data["manifest"],
            setting=_setting(data["manifest"]),
            cards=operation_cards(data["records"], recs),
            noise=min(thresholds) if thresholds else None,
            rules=rules,
            sections=sections,
        )
    )


def write_html(result: dict[str, Any], path: str | Path) -> None:
    write_whole(path, render_html(result))
