"""The terminal table: intervals, write share, lost updates, open loop's uncorrected
percentiles, one crossover line per pair, and the verdict lines."""

from __future__ import annotations

import re
from typing import Any

from luapipe.report import render_table

from ..helpers import unwrapped
from .test_report import record


def result(*records: dict[str, Any], **kw: Any) -> dict[str, Any]:
    return {"records": list(records), "crossovers": [], "recommendations": [], **kw}


def cell(table: str, row: int, column: str) -> str:
    """The text under ``column`` in data row ``row`` (0-based) of the first block of the
    rendered table (its title, its header, a row per form; columns are at least two spaces
    apart, a cell has at most single spaces)."""
    lines = [line.strip() for line in table.splitlines()]
    at = next(n for n, line in enumerate(lines) if line.startswith("form"))
    header = re.split(r"\s{2,}", lines[at])
    cells = re.split(r"\s{2,}", lines[at + 1 + row])
    assert len(cells) == len(header), (header, cells)
    return cells[header.index(column)]


def test_write_share_interval_and_lost_updates_are_columns() -> None:
    table = render_table(
        result(
            record(
                form="naive",
                ops_per_sec=400.0,
                ops_per_sec_interval=[360.0, 440.0],
                write_share=0.62,
                write_share_declared=0.8,
                write_share_off=True,
                invariant_ok=False,
                lost_updates=37,
                invariant_cases=812,
            ),
            record(form="script", write_share=1.0, write_share_declared=1.0),
        )
    )
    assert cell(table, 0, "+-%") == "10"  # (440 - 360) / 2 / 400
    assert cell(table, 0, "wr%") == "62!" and cell(table, 1, "wr%") == "100"
    assert cell(table, 0, "inv") == "FAIL 37/812" and cell(table, 1, "inv") == "ok"
    assert (
        "write share: op naive at 0.25 ms: 62% of calls wrote, the bench profile declares 80%"
        in table
    )


def test_a_lopsided_interval_is_shown_by_its_two_ends_never_as_a_plus_minus_past_zero() -> None:
    """Rounds of 818 to 4,047 around 969: "+-167" would read as an interval from below zero.
    The cell says how far each end lies from the figure: -16/+318."""
    rows = [
        record(form="transaction", ops_per_sec=969.0, ops_per_sec_interval=[818.0, 4047.0]),
        record(form="script", ops_per_sec=400.0, ops_per_sec_interval=[360.0, 440.0]),
        record(form="function", ops_per_sec=1000.0, ops_per_sec_interval=[997.0, 1006.0]),
        record(form="pipelined", ops_per_sec=100.0, ops_per_sec_interval=[100.0, 165.0]),
    ]
    table = render_table(result(*rows))
    assert cell(table, 0, "+-%") == "-16/+318" and cell(table, 1, "+-%") == "10"
    assert cell(table, 2, "+-%") == "1"  # -0.3 and +0.6: not "-0/+1"
    assert cell(table, 3, "+-%") == "0/+65"  # the median round at the lower end: not "+0"
    assert "below/above" in unwrapped(table)
    wide = render_table(result(*rows), wide=True)
    assert " -16/+318 " in wide and " 167 " not in wide


def test_a_hot_key_block_decided_on_cpu_keeps_the_write_share_in_100_columns() -> None:
    """The demo's contention slice: cpu/op decides, its "+-%" is lopsided, the invariant
    broke; the client's CPU (inside cpu/op) goes before the write share does."""
    hot = {"clients": 4, "rtt_ms_nominal": 0.0, "contention": "hot", "write_share": 0.88}
    rows = [
        record(form=f, cpu_usec_per_op=245.0, cpu_usec_per_op_interval=[214.0, 765.0],
               client_cpu_usec_per_op=185.0, retries_per_op=0.69, invariant_ok=False,
               lost_updates=130, invariant_cases=150, ops_per_sec=3117.0, **hot)
        for f in ("naive", "pipelined", "transaction")
    ]  # fmt: skip
    rec = {"operation": "op", "rtt_ms": 0.0, "clients": 4, "contention": "hot",
           "figure": "cpu_us_per_op", "text": "not decided"}  # fmt: skip
    table = render_table(result(*rows, recommendations=[rec]))
    assert cell(table, 0, "+-%") == "-13/+212" and cell(table, 0, "wr%") == "88"
    assert max(len(line) for line in table.splitlines()) <= 100


def test_open_loop_shows_uncorrected_percentiles_beside_corrected_ones() -> None:
    rec = record(rate=500.0, latency_ms_uncorrected={"p50": 0.4, "p99": 0.9})
    table = render_table(result(rec))
    assert (cell(table, 0, "p50"), cell(table, 0, "p50 raw")) == ("1", "0.4")
    assert (cell(table, 0, "p99"), cell(table, 0, "p99 raw")) == ("2", "0.9")
    assert "p50 raw/p99 raw from its actual send" in unwrapped(table)
    assert "p50 raw" not in render_table(result(record()))  # closed loop: no such column


def test_one_crossover_line_per_pair() -> None:
    cross = [
        {"operation": "op", "clients": 1, "more_trips": "transaction", "fewer_trips": "script",
         "text": "script overtakes transaction above 0.12 ms RTT"},
        {"operation": "op", "clients": 4, "more_trips": "transaction", "fewer_trips": "script",
         "text": "script is faster than transaction at every measured RTT (0 to 1 ms)"},
    ]  # fmt: skip
    table = render_table(result(record(), crossovers=cross))
    assert [line for line in table.splitlines() if line.startswith("crossover:")] == [
        "crossover: op: script overtakes transaction above 0.12 ms RTT"
    ]


def test_the_table_says_where_the_model_is_off() -> None:
    note = "The model is off by more than 15% at 1 ms RTT for 2 of 5 records (...)"
    table = render_table(result(record(), model_notes=[note]))
    assert f"note: {note}" in table.splitlines()
