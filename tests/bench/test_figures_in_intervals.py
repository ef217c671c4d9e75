"""Every figure shown beside an interval is the median round's, so it lies inside its own
interval: in the terminal table (each block's "+-%", the wide table's), the HTML report (the
speed table, the charts' error bars, every reason), the CSV and the JSON.

The rounds are made so that the figure over every call of every round (pooled) lies outside
the median round's interval: one round of a fast moment of the host completes fifteen times
the calls of each of the nine slow ones, so it outweighs them all in a pooled figure while
the interval of the median round (2nd to 9th of 10) holds only slow rounds. That is what a
host that switches between a fast and a slow mode does to a closed loop; showing the pooled
figure there puts 0.02 ms beside "0.30-0.38".
"""

from __future__ import annotations

import csv
import io
import json
import re
from typing import Any

import pytest

from luapipe.bench.aggregate import FormTotals, SliceCost, build_record
from luapipe.bench.loop import WorkerResult
from luapipe.bench.stats import LatencyHistogram
from luapipe.bench.verdict import recommendations
from luapipe.report import load_results, render_html, render_table
from luapipe.report.csvio import render_csv

ROUNDS = 10
FORMS = {"transaction": 1.3, "script": 1.0, "function": 0.97}  # each form's latency factor
#: (RTT, clients): the four figures that decide a block (turns, p50, CPU per op, throughput)
POINTS = ((0.0, 1), (1.0, 1), (0.0, 4), (1.0, 4))


class Work:
    name = "op"
    forms = tuple(FORMS)
    batch = 1
    write_share_declared = None

    def describe(self) -> dict[str, Any]:
        return {"read_compute_write": False}


def _slice(ms: float, fast: bool) -> tuple[WorkerResult, SliceCost]:
    """One 0.25 s round of one form: ``ms`` per call, as many calls as fit."""
    calls = round(250 / ms)
    h = LatencyHistogram()
    for _ in range(calls):
        h.record_us(ms * 1000)
    cpu_us = 10.0 if fast else 100.0 * ms  # the client's CPU per call
    worker = WorkerResult(h.encode(), b"", calls, 0, (), 0, calls, calls, calls * cpu_us / 1e6,
                          0.25)  # fmt: skip
    cost = SliceCost(calls, calls * 5, None, True, "held", cpu_us=calls * (5 if fast else 20))
    return worker, cost


def _records() -> list[dict[str, Any]]:
    out = []
    for rtt, clients in POINTS:
        for form, factor in FORMS.items():
            t = FormTotals()
            for j in range(ROUNDS):  # round 0 fast, 1..9 slow and a little apart
                fast = j == 0
                ms = factor * 0.02 if fast else factor * (0.30 + 0.01 * j) + rtt
                worker, cost = _slice(ms, fast)
                t.add([worker], cost)
                t.rounds[-1]["p50_turns"] = ms * 1.05 if rtt == 0 and clients == 1 else None
            out.append(build_record(Work(), form, t, rtt, rtt, clients, None).as_dict())
    return out


@pytest.fixture(scope="module")
def result() -> dict[str, Any]:
    records = _records()
    return {
        "manifest": {},
        "calibration": [],
        "records": records,
        "crossovers": [],
        "recommendations": recommendations(records),
        "notes": [],
    }


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def _ends(cell: str) -> tuple[float, float]:
    """A "+-%" cell: where the interval ends, in percent of the figure ("-16/+318", "3")."""
    if "/" in cell:
        below, above = cell.split("/")
        return float(below), float(above)
    return -float(cell), float(cell)


def _blocks(table: str) -> list[tuple[str, list[str], list[list[str]]]]:
    """Each block of the default table: its title, its header, its rows' cells."""
    out: list[tuple[str, list[str], list[list[str]]]] = []
    lines = table.splitlines()
    for n, line in enumerate(lines):
        if line.strip().startswith("form ") and n > 0:
            rows = []
            for row in lines[n + 1 :]:
                if not row.startswith("  ") or row.strip().startswith("recommendation:"):
                    break
                rows.append(row.split())
            out.append((lines[n - 1], line.split(), rows))
    return out


def test_the_pooled_figure_would_lie_outside_the_interval(result: dict[str, Any]) -> None:
    """The data is what the other tests need: pooled figures outside their intervals, so a
    report that shows them again fails there."""
    for r in result["records"]:
        lo, hi = r["ops_per_sec_interval"]
        assert not lo <= r["pooled"]["ops_per_sec"] <= hi
        lo, hi = r["latency_ms_interval"]["p50"]
        assert not lo <= r["pooled"]["latency_ms"]["p50"] <= hi


def test_every_figure_in_the_json_lies_in_its_interval(result: dict[str, Any]) -> None:
    for r in result["records"]:
        lo, hi = r["ops_per_sec_interval"]
        assert lo <= r["ops_per_sec"] <= hi
        for k, (lo, hi) in r["latency_ms_interval"].items():
            assert lo <= r["latency_ms"][k] <= hi, k
        lo, hi = r["cpu_usec_per_op_interval"]
        assert lo <= r["cpu_usec_per_op"] <= hi
        if r["p50_turns_ms_interval"]:
            lo, hi = r["p50_turns_ms_interval"]
            assert lo <= r["p50_turns_ms"] <= hi


def test_each_blocks_figure_lies_inside_its_plus_minus(result: dict[str, Any]) -> None:
    """Every block of the terminal table: the "+-%" beside the figure that decides it says
    where its interval ends, below and above the figure shown."""
    seen = set()
    for title, header, rows in _blocks(render_table(result)):
        at = header.index("+-%")
        seen.add(header[at - 1])
        for cells in rows:
            below, above = _ends(cells[at])
            assert below <= 0 <= above, f"{title}: {cells[0]} {header[at - 1]} {cells[at]}"
    assert seen == {"turns", "p50", "cpu/op", "ops/s"}  # every figure that decides a block


def test_the_wide_tables_ops_per_sec_lies_inside_its_plus_minus(result: dict[str, Any]) -> None:
    lines = render_table(result, wide=True).splitlines()
    header = lines[0].replace("rtt ms", "rtt_ms").replace("model ms", "model_ms").split()
    at = header.index("+-%")
    assert header[at - 1] == "ops/s"
    rows = [line.split() for line in lines[2:] if line.startswith("op ")]
    assert len(rows) == len(result["records"])
    for cells in rows:
        below, above = _ends(cells[at])
        assert below <= 0 <= above, cells


def test_the_reports_figures_lie_inside_the_intervals_under_them(result: dict[str, Any]) -> None:
    """The speed table's ops/s, p50 and p99, each with its interval under it."""
    page = render_html(result)
    cells = re.findall(r"<td>([\d.,]+)<small>([\d.,]+)-([\d.,]+)</small></td>", page)
    assert len(cells) == 3 * len(result["records"])
    for value, lo, hi in cells:
        assert _number(lo) <= _number(value) <= _number(hi), (value, lo, hi)


def test_the_charts_points_lie_on_their_error_bars(result: dict[str, Any]) -> None:
    """Each point of a chart with error bars (throughput, mean latency) lies on its bar: the
    bar of a form and its point share a colour and an x."""
    checked = 0
    for chart in re.findall(r"<figure class=\"chart\">.*?</figure>", render_html(result), re.S):
        circles = re.findall(r'<circle cx="([\d.]+)" cy="([\d.]+)" r="3" fill="([^"]+)"', chart)
        bars = re.findall(r'<path d="M([\d.]+),([\d.]+)V([\d.]+)M[^"]*" stroke="([^"]+)"', chart)
        for x, low, high, color in bars:
            ys = [float(cy) for cx, cy, fill in circles if cx == x and fill == color]
            assert any(float(high) - 0.15 <= y <= float(low) + 0.15 for y in ys), chart[:80]
            checked += 1
    assert checked >= 2 * len(FORMS)


def test_every_reason_names_figures_inside_their_interval(result: dict[str, Any]) -> None:
    """The verdict's reasons ("function: 3,300 ops/s (3,100 to 3,400), p50 ..."), in the
    terminal's JSON and in the report's every reason."""
    figures = re.compile(r"\b\w+: ([\d,]+) ops/s \(([\d,]+) to ([\d,]+)\)")
    found = [m for rec in result["recommendations"] for why in rec["reasons"]
             for m in figures.findall(why)]  # fmt: skip
    found += figures.findall(render_html(result))
    assert len(found) >= 2 * len(POINTS)
    for value, lo, hi in found:
        assert _number(lo) <= _number(value) <= _number(hi), (value, lo, hi)


def test_the_csv_figures_are_the_ones_beside_the_intervals(result: dict[str, Any]) -> None:
    rows = list(csv.DictReader(io.StringIO(render_csv(result))))
    for row, r in zip(rows, result["records"], strict=True):
        lo, hi = r["ops_per_sec_interval"]
        assert lo - 0.01 <= float(row["rps"]) <= hi + 0.01
        for column, k in (("p50_latency_ms", "p50"), ("p99_latency_ms", "p99"),
                          ("avg_latency_ms", "mean")):  # fmt: skip
            lo, hi = r["latency_ms_interval"][k]
            assert lo <= float(row[column]) <= hi, column


def test_a_file_written_before_pooled_is_shown_by_its_median_rounds(
    result: dict[str, Any], tmp_path: Any
) -> None:
    """`luapipe report` of a results file whose figures were pooled (no ``pooled`` field)
    shows each record's median round beside its interval, and keeps the old figure as
    ``pooled``."""
    old = json.loads(json.dumps(result))
    for r in old["records"]:
        pooled = r.pop("pooled")
        r["ops_per_sec"] = pooled["ops_per_sec"]
        r["latency_ms"].update(pooled["latency_ms"])
        r["cpu_usec_per_op"] = pooled["cpu_usec_per_op"]
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old))
    loaded = load_results(path)
    for was, now in zip(result["records"], loaded["records"], strict=True):
        assert now["ops_per_sec"] == pytest.approx(was["ops_per_sec"])
        assert now["cpu_usec_per_op"] == pytest.approx(was["cpu_usec_per_op"])
        assert now["latency_ms"] == pytest.approx(was["latency_ms"])
        assert now["pooled"]["ops_per_sec"] == pytest.approx(was["pooled"]["ops_per_sec"])
        assert now["pooled"]["latency_ms"] == pytest.approx(was["pooled"]["latency_ms"])
    for title, header, rows in _blocks(render_table(loaded)):
        at = header.index("+-%")
        for cells in rows:
            below, above = _ends(cells[at])
            assert below <= 0 <= above, f"{title}: {cells[0]} {header[at - 1]} {cells[at]}"
