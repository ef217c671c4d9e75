"""Inline SVG line charts (no JavaScript, no network): the report opens offline.

Every text that reaches the SVG is escaped here, so the template may insert it as markup.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

__all__ = ["FORM_COLORS", "Series", "line_chart"]

FORM_COLORS = {
    "naive": "#d62728",
    "pipelined": "#1f77b4",
    "transaction": "#9467bd",
    "script": "#2ca02c",
    "function": "#ff7f0e",
}
FALLBACK = ("#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
W, H, LEFT, RIGHT, TOP, BOTTOM = 560, 300, 64, 130, 30, 46


@dataclass(frozen=True)
class Series:
    name: str
    values: tuple[float | None, ...]  # one per x label
    dashed: bool = False


def _color(name: str, i: int) -> str:
    return FORM_COLORS.get(name.split(" ")[0], FALLBACK[i % len(FALLBACK)])


def _ticks(lo: float, hi: float, log: bool) -> list[float]:
    if log:
        return [10.0**e for e in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)]
    step = 10 ** math.floor(math.log10(max(hi - lo, 1e-9)))
    while (hi - lo) / step > 6:
        step *= 2
    start = math.floor(lo / step) * step
    return [start + k * step for k in range(int((hi - start) / step) + 2)]


def _fmt(v: float) -> str:
    return f"{v:,.0f}" if v >= 1000 else f"{v:g}"


def line_chart(
    title: str,
    x_labels: Sequence[str],
    series: Sequence[Series],
    y_label: str,
    log_y: bool = False,
    x_title: str = "",
) -> str:
    """An SVG line chart with categorical x positions; ``None`` values leave gaps."""
    vals = [v for s in series for v in s.values if v is not None and (v > 0 or not log_y)]
    if not vals or not x_labels:
        return f'<p class="nodata">{escape(title)}: no data</p>'
    lo, hi = (min(vals), max(vals)) if log_y else (0.0, max(vals) * 1.08 or 1.0)
    ticks = _ticks(lo, hi, log_y)
    lo, hi = (ticks[0], ticks[-1]) if log_y else (lo, ticks[-1])
    f = (lambda v: math.log10(v)) if log_y else (lambda v: v)
    pw, ph = W - LEFT - RIGHT, H - TOP - BOTTOM
    n = len(x_labels)

    def x(i: int) -> float:
        return LEFT + (pw * (i + 0.5) / n)

    def y(v: float) -> float:
        span = (f(hi) - f(lo)) or 1.0
        return TOP + ph - ph * (f(v) - f(lo)) / span

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
        f'role="img" aria-label="{escape(title)}" class="chart">',
        f'<text x="{W / 2}" y="18" text-anchor="middle" class="title">{escape(title)}</text>',
        f'<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="none" stroke="#ccc"/>',
    ]
    for t in ticks:
        if lo <= t <= hi:
            out.append(
                f'<line x1="{LEFT}" x2="{LEFT + pw}" y1="{y(t):.1f}" y2="{y(t):.1f}" '
                'stroke="#eee"/>'
                f'<text x="{LEFT - 6}" y="{y(t) + 4:.1f}" text-anchor="end">{_fmt(t)}</text>'
            )
    for i, label in enumerate(x_labels):
        out.append(
            f'<text x="{x(i):.1f}" y="{TOP + ph + 16}" text-anchor="middle">{escape(label)}</text>'
        )
    out.append(
        f'<text x="{LEFT + pw / 2}" y="{H - 8}" text-anchor="middle">{escape(x_title)}</text>'
    )
    out.append(
        f'<text transform="translate(14 {TOP + ph / 2}) rotate(-90)" text-anchor="middle">'
        f"{escape(y_label)}</text>"
    )
    for k, s in enumerate(series):
        color = _color(s.name, k)
        dash = ' stroke-dasharray="5 4"' if s.dashed else ""
        pts = [
            (x(i), y(v)) for i, v in enumerate(s.values) if v is not None and (v > 0 or not log_y)
        ]
        if len(pts) > 1:
            path = " ".join(f"{px:.1f},{py:.1f}" for px, py in pts)
            out.append(
                f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"{dash}/>'
            )
        for px, py in pts:
            out.append(f'<circle cx="{px:.1f}" cy="{py:.1f}" r="3" fill="{color}"/>')
        ly = TOP + 12 + 16 * k
        out.append(
            f'<line x1="{W - RIGHT + 10}" x2="{W - RIGHT + 28}" y1="{ly - 4}" y2="{ly - 4}" '
            f'stroke="{color}" stroke-width="2"{dash}/>'
            f'<text x="{W - RIGHT + 32}" y="{ly}">{escape(s.name)}</text>'
        )
    out.append("</svg>")
    return "\n".join(out)
