"""Inline SVG line charts (no JavaScript, no network): the report opens offline.

A chart is a ``<figure>``: the title is its HTML caption (it wraps on a phone instead of
being cut off), the SVG scales to the width it gets (``viewBox``), and the legend sits under
the plot in as many rows as its labels need, so no label runs out of the box. A series may
carry an interval per point, drawn as an error bar. Every text that reaches the markup is
escaped here, so the template may insert it as is.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from typing import TypeGuard

__all__ = ["FORM_COLORS", "Series", "line_chart"]

FORM_COLORS = {
    "naive": "#d62728",
    "pipelined": "#1f77b4",
    "transaction": "#9467bd",
    "script": "#2ca02c",
    "function": "#ff7f0e",
}
FALLBACK = ("#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
W, PLOT_H, LEFT, RIGHT, TOP, AXIS = 480, 220, 74, 16, 12, 42
FONT_PX = 13
#: a generous average glyph width of the chart font (px per character at FONT_PX): legend
#: entries are laid out with it, so a wider font than expected still fits
CHAR_PX = 0.62 * FONT_PX
SWATCH, ROW_H = 24, 20

Interval = tuple[float, float] | None


@dataclass(frozen=True)
class Series:
    name: str
    values: tuple[float | None, ...]  # one per x label
    dashed: bool = False
    #: (low, high) per x label, drawn as an error bar (e.g. a 95% interval over rounds)
    intervals: tuple[Interval, ...] = ()

    def interval(self, i: int) -> Interval:
        return self.intervals[i] if i < len(self.intervals) else None


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


def _legend_rows(series: Sequence[Series]) -> list[list[tuple[int, float]]]:
    """Legend entries (series index, x offset) per row, wrapped to the chart's width."""
    rows: list[list[tuple[int, float]]] = [[]]
    x, room = 0.0, W - 2 * 8
    for k, s in enumerate(series):
        width = SWATCH + 6 + len(s.name) * CHAR_PX + 14
        if rows[-1] and x + width > room:
            rows.append([])
            x = 0.0
        rows[-1].append((k, x))
        x += width
    return rows


def _plottable(v: float | None, log_y: bool) -> TypeGuard[float]:
    return v is not None and math.isfinite(v) and (v > 0 or not log_y)


def line_chart(
    title: str,
    x_labels: Sequence[str],
    series: Sequence[Series],
    y_label: str,
    log_y: bool = False,
    x_title: str = "",
) -> str:
    """A captioned SVG line chart with categorical x positions; ``None`` leaves a gap."""
    vals = [v for s in series for v in s.values if _plottable(v, log_y)]
    if not vals or not x_labels:
        return f'<p class="nodata">{escape(title)}: no data</p>'
    bounds = [b for s in series for iv in s.intervals if iv for b in iv if _plottable(b, log_y)]
    if log_y:  # an interval reaching towards 0 would squash the data: cut it at a tenth
        floor = min(vals) / 10
        bounds = [max(b, floor) for b in bounds]
    vals += bounds
    lo, hi = (min(vals), max(vals)) if log_y else (0.0, max(vals) * 1.08 or 1.0)
    ticks = _ticks(lo, hi, log_y)
    lo, hi = (ticks[0], ticks[-1]) if log_y else (lo, ticks[-1])
    f = (lambda v: math.log10(v)) if log_y else (lambda v: v)
    pw, ph = W - LEFT - RIGHT, PLOT_H
    n = len(x_labels)
    rows = _legend_rows(series)
    height = TOP + ph + AXIS + 8 + ROW_H * len(rows)

    def x(i: int) -> float:
        return LEFT + (pw * (i + 0.5) / n)

    def y(v: float) -> float:
        span = (f(hi) - f(lo)) or 1.0
        return TOP + ph - ph * (f(max(v, lo)) - f(lo)) / span

    out = [
        f'<figure class="chart"><figcaption>{escape(title)}</figcaption>',
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {height}" '
        f'width="{W}" height="{height}" role="img" aria-label="{escape(title)}" '
        f'font-size="{FONT_PX}">',
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
            f'<text x="{x(i):.1f}" y="{TOP + ph + 17}" text-anchor="middle">{escape(label)}</text>'
        )
    out.append(
        f'<text x="{LEFT + pw / 2}" y="{TOP + ph + 35}" text-anchor="middle">'
        f"{escape(x_title)}</text>"
    )
    out.append(
        f'<text transform="translate(16 {TOP + ph / 2}) rotate(-90)" text-anchor="middle">'
        f"{escape(y_label)}</text>"
    )
    with_bars = [s for s in series if any(s.intervals)]
    for k, s in enumerate(series):
        color = _color(s.name, k)
        dash = ' stroke-dasharray="5 4"' if s.dashed else ""
        # series with error bars are spread a little apart, so overlapping bars stay legible
        dx = (with_bars.index(s) - (len(with_bars) - 1) / 2) * 5 if s in with_bars else 0.0
        pts = [(x(i) + dx, y(v)) for i, v in enumerate(s.values) if _plottable(v, log_y)]
        if len(pts) > 1:
            path = " ".join(f"{px:.1f},{py:.1f}" for px, py in pts)
            out.append(
                f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"{dash}/>'
            )
        for i in range(n):
            iv = s.interval(i)
            if iv is None or not _plottable(iv[1], log_y):
                continue
            low = iv[0] if _plottable(iv[0], log_y) else lo  # 0 on a log axis: to the bottom
            bx, y1, y2 = x(i) + dx, y(low), y(iv[1])
            out.append(
                f'<path d="M{bx:.1f},{y1:.1f}V{y2:.1f}M{bx - 4:.1f},{y1:.1f}h8'
                f'M{bx - 4:.1f},{y2:.1f}h8" stroke="{color}" stroke-width="1.5" fill="none">'
                f"<title>{escape(s.name)}: {_fmt(iv[0])} to {_fmt(iv[1])}</title></path>"
            )
        for px, py in pts:
            out.append(f'<circle cx="{px:.1f}" cy="{py:.1f}" r="3" fill="{color}"/>')
    for r, row in enumerate(rows):
        ly = TOP + ph + AXIS + 8 + ROW_H * r + 14
        for k, offset in row:
            s = series[k]
            color, lx = _color(s.name, k), 8 + offset
            dash = ' stroke-dasharray="5 4"' if s.dashed else ""
            out.append(
                f'<g class="legend"><line x1="{lx:.1f}" x2="{lx + SWATCH:.1f}" y1="{ly - 4}" '
                f'y2="{ly - 4}" stroke="{color}" stroke-width="2"{dash}/>'
                f'<text x="{lx + SWATCH + 6:.1f}" y="{ly}">{escape(s.name)}</text></g>'
            )
    out.append("</svg></figure>")
    return "\n".join(out)
