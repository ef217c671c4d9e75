"""Reports: JSON schema, CSV columns, HTML escaping and password masking, `luapipe report`."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from luapipe.cli import main
from luapipe.errors import LuapipeError
from luapipe.report import load_results, render_html, render_table, write_csv, write_json
from luapipe.report.csvio import CSV_COLUMNS
from luapipe.report.jsonio import REQUIRED_RECORD_FIELDS

HOSTILE = "<script>alert(1)</script>"


def record(operation: str = "op", form: str = "naive", **kw: Any) -> dict[str, Any]:
    rec: dict[str, Any] = {
        "operation": operation,
        "form": form,
        "rtt_ms_nominal": 0.25,
        "rtt_ms_measured": 0.251,
        "clients": 1,
        "ops": 1000,
        "ops_per_sec": 500.0,
        "latency_ms": {
            "p50": 1.0,
            "p90": 1.5,
            "p95": 1.7,
            "p99": 2.0,
            "p999": None,
            "max": 3.0,
            "mean": 1.1,
            "min": 0.5,
        },
        "round_trips_per_op": 5.0,
        "commands_per_op": 5.0,
        "server_usec_per_op": 10.0,
        "retries_per_op": 0.0,
        "errors": 0,
        "invariant_ok": True,
        "latency_distribution": [[50, 1.0], [90, 1.5], [99, 2.0]],
        "model_latency_ms": 1.2,
        "model_error_pct": 9.0,
        "error_samples": [],
    }
    rec.update(kw)
    return rec


def result(*records: dict[str, Any]) -> dict[str, Any]:
    return {
        "schema_version": 1,
        "manifest": {
            "redis": {"url": "redis://alice:s3cret-pw@db.example:6379/0", "version": "7.0.15"},
            "spec": {"config": {"rtts_ms": [0.25], "clients": [1], "seed": 1}},
        },
        "calibration": [
            {
                "rtt_ms_nominal": 0.25,
                "rtt_ms_measured": 0.251,
                "error_pct": 0.4,
                "delay_ms_setting": 0.2,
                "direct_ping_ms": 0.02,
                "proxied_ping_ms": 0.27,
                "proxy_overhead_ms": 0.03,
            }
        ],
        "records": list(records),
        "crossovers": [],
        "recommendations": [],
        "notes": [],
    }


def test_json_round_trip_keeps_the_schema(tmp_path: Path) -> None:
    data = result(record(), record(form="script", round_trips_per_op=1.0))
    path = tmp_path / "r.json"
    write_json(data, path)
    loaded = load_results(path)
    assert [r["form"] for r in loaded["records"]] == ["naive", "script"]
    for rec in loaded["records"]:
        assert all(f in rec for f in REQUIRED_RECORD_FIELDS)


def test_load_rejects_files_that_are_not_results(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"records": [{"operation": "x"}]}))
    with pytest.raises(LuapipeError, match="lacks"):
        load_results(bad)
    bad.write_text("not json")
    with pytest.raises(LuapipeError, match="not a luapipe results file"):
        load_results(bad)


def test_html_escapes_hostile_names_and_masks_passwords() -> None:
    data = result(
        record(operation=HOSTILE, form=HOSTILE, error_samples=["redis://bob:hunter2@x:1 failed"]),
        record(
            operation=HOSTILE,
            form="script",
            errors=3,
            error_samples=["redis://bob:hunter2@x:1 failed"],
        ),
    )
    data["recommendations"] = [
        {
            "operation": HOSTILE,
            "rtt_ms": 0.25,
            "clients": 1,
            "form": "x",
            "text": HOSTILE,
            "reasons": [HOSTILE],
        }
    ]
    page = render_html(data)
    assert "<script>" not in page
    assert "&lt;script&gt;" in page
    assert "s3cret-pw" not in page and "hunter2" not in page
    assert "<svg" in page  # charts are inline
    assert "http://" not in page.replace("http://www.w3.org/2000/svg", "")  # nothing fetched


def test_json_and_csv_mask_passwords(tmp_path: Path) -> None:
    data = result(record(error_samples=["redis://bob:hunter2@x:1 failed"]))
    write_json(data, tmp_path / "r.json")
    write_csv(data, tmp_path / "r.csv")
    text = (tmp_path / "r.json").read_text()
    assert "s3cret-pw" not in text and "hunter2" not in text and "alice:***@" in text


def test_csv_starts_with_redis_benchmark_columns(tmp_path: Path) -> None:
    write_csv(result(record()), tmp_path / "r.csv")
    header = (tmp_path / "r.csv").read_text().splitlines()[0].split(",")
    assert header[:8] == [
        "test",
        "rps",
        "avg_latency_ms",
        "min_latency_ms",
        "p50_latency_ms",
        "p95_latency_ms",
        "p99_latency_ms",
        "max_latency_ms",
    ]
    assert header == list(CSV_COLUMNS)


def test_csv_rows_say_which_keys_and_how_many_calls_in_flight(tmp_path: Path) -> None:
    """The demo's CSV had two reserve_stock naive rows at RTT 0, one of 1 client on spread
    keys, one of 4 on one hot key: nothing in the file said which was hot (nor --tasks)."""
    hot = record(clients=4, contention="hot", invariant_ok=False, lost_updates=9)
    write_csv(result(record(), hot, record(form="auto script", tasks=8)), tmp_path / "r.csv")
    rows = list(csv.DictReader((tmp_path / "r.csv").open()))
    assert [(r["contention"], r["tasks"]) for r in rows] == [
        ("spread", "1"), ("hot", "1"), ("spread", "8")
    ]  # fmt: skip
    assert rows[1]["test"] == "op naive rtt=0.25ms c=4 hot"
    assert rows[1]["lost_updates"] == "9"


def test_table_shows_missing_percentiles_and_failed_invariants() -> None:
    text = render_table(result(record(invariant_ok=False, invariant_detail="lost 3 updates")))
    assert "INVARIANT FAILED" in text and "lost 3 updates" in text
    assert "FAIL" in text
    assert " - " in text  # p99.9 withheld (too few samples)


def test_report_command_writes_html(tmp_path: Path) -> None:
    src = tmp_path / "results.json"
    write_json(result(record(), record(form="pipelined", ops_per_sec=2000.0)), src)
    out = tmp_path / "out.html"
    run = CliRunner().invoke(main, ["report", str(src), "--html", str(out)])
    assert run.exit_code == 0, run.output
    assert "recommendation:" in run.output
    assert out.read_text().startswith("<!DOCTYPE html>")


def test_report_command_fails_in_one_line_on_a_bad_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    run = CliRunner().invoke(main, ["report", str(bad), "--html", str(tmp_path / "o.html")])
    assert run.exit_code == 1
    assert "not a luapipe results file" in run.output


def test_report_renders_a_file_without_optional_fields_or_with_odd_manifest_parts(
    tmp_path: Path,
) -> None:
    """Fields the checks call optional may be absent, and the environment table takes what
    it can (it printed a Jinja2 traceback for a missing model_error_pct)."""
    rec = record()
    del rec["model_error_pct"]
    data = result(rec)
    data["manifest"].update(machine="x", libraries=5)
    data["manifest"]["redis"]["config"] = "x"
    del data["calibration"][0]["error_pct"]
    src = tmp_path / "results.json"
    src.write_text(json.dumps(data))
    out = tmp_path / "out.html"
    run = CliRunner().invoke(main, ["report", str(src), "--html", str(out)])
    assert run.exit_code == 0 and "error" not in run.stderr, run.output
    assert out.read_text().startswith("<!DOCTYPE html>")


def test_report_turns_a_template_failure_into_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A shape no check covers that fails inside the template is one line too."""
    import jinja2

    import luapipe.report

    def broken(*args: Any, **kw: Any) -> None:
        raise jinja2.UndefinedError("'dict object' has no attribute 'x'")

    src = tmp_path / "results.json"
    write_json(result(record()), src)
    monkeypatch.setattr(luapipe.report, "write_html", broken)
    run = CliRunner().invoke(main, ["report", str(src), "--html", str(tmp_path / "o.html")])
    assert run.exit_code == 1
    assert run.stderr == (
        f"error: {src}: cannot render it (UndefinedError: 'dict object' has no attribute 'x'); "
        "is it a file that `luapipe bench --json` wrote?\n"
    )


def test_report_checks_where_it_writes_before_rendering_anything(tmp_path: Path) -> None:
    """An --html in a directory that cannot be made: the table was printed and the CSV
    written, then "error: /proc/nope: No such file or directory" (bench checks first)."""
    src = tmp_path / "results.json"
    write_json(result(record()), src)
    csv = tmp_path / "o.csv"
    args = ["report", str(src), "--csv", str(csv), "--html", "/proc/nope/o.html"]
    run = CliRunner().invoke(main, args)
    assert run.exit_code == 1 and run.stdout == "" and not csv.exists(), run.output
    assert run.stderr == (
        "error: /proc/nope/o.html: cannot write it: directory /proc/nope does not exist "
        "(create it first)\n"
    )


def test_charts_follow_the_dimensions_measured() -> None:
    one = render_html(result(record(), record(form="script", rtt_ms_nominal=1.0)))
    assert "throughput vs RTT" in one and "throughput vs clients" not in one
    many = render_html(result(record(), record(clients=4, ops_per_sec=1800.0)))
    assert "throughput vs clients" in many


def test_charts_never_join_points_of_different_contention() -> None:
    """The demo: one client on spread keys (a million units of stock), then 4 clients on one
    hot key (30 units, sold out every few calls). A line from the one to the other read as
    "4 clients: a third of the throughput"; the hot slice is in the tables, not on that line."""
    spread = [record(form=f, rtt_ms_nominal=t) for f in ("script", "function") for t in (0.0, 1.0)]
    hot = [record(form=f, rtt_ms_nominal=0.0, clients=4, contention="hot", ops_per_sec=150.0)
           for f in ("naive", "script", "function")]  # fmt: skip
    page = render_html(result(*spread, *hot))
    assert "throughput vs clients" not in page and "op: throughput vs RTT (1 client)" in page
    charts = page[: page.index("<h3>Speed</h3>")]
    assert ">naive<" not in charts  # naive ran only in the hot slice: no empty legend entry
    assert page.count('<td class="l">naive</td>') == 2  # the hot slice is in both tables


def test_the_page_says_how_many_calls_each_client_had_in_flight() -> None:
    """`bench --tasks 8`: the cards compare auto-pipelined forms at 8 calls in flight, but
    the page said "1 client(s) ... closed loop" and never "tasks" anywhere."""
    data = result(record(tasks=8), record(form="auto script", tasks=8))
    data["manifest"] = {"spec": {"config": {"clients": [1], "rtts_ms": [0.25], "tasks": 8}}}
    page = render_html(data)
    top = page[: page.index('id="verdict"')]
    assert "1 client(s) x 8 calls in flight each (--tasks 8)" in top


def test_table_names_the_batch_when_calls_carry_several_operations() -> None:
    plain = render_table(result(record(), record(form="pipelined")), wide=True)
    assert "batch" not in plain.splitlines()[0]  # no column nobody needs
    data = result(record(batch=1), record(form="pipelined", batch=50))
    text = render_table(data, wide=True)
    header, _rule, one, fifty = text.splitlines()[:4]
    assert header.split()[:6] == ["operation", "form", "rtt", "ms", "meas", "cl"]
    assert header.split()[6] == "batch"
    assert one.split()[5] == "1" and fifty.split()[5] == "50"
    assert "a call of batch N runs N operations" in text
    compact = render_table(data)  # one block per point: the batch is in its title
    assert "op at 0.25 ms RTT (measured 0.251), 1 client, batch 50 (latency per call)" in compact


# -- the page a reviewer reads --------------------------------------------------------------


def _verdict_part(page: str) -> str:
    return page[page.index('id="verdict"') : page.index("How to read the figures")]


def test_the_verdict_comes_first_with_the_choice_the_outcome_and_the_reason() -> None:
    from .sample import LONG_OP, sample_result

    page = render_html(sample_result())
    top = _verdict_part(page)
    assert page.index('id="verdict"') < page.index('id="errors"') < page.index('id="op-1"')
    assert "The choice: <b>pipelined vs script vs function</b>" in top
    assert f"<h3>{LONG_OP}</h3>" in top and "<b>transaction vs script vs function</b>" in top
    # ahead: the form in bold, its ratio and interval against the pair named, the reason
    assert '<span class="form">script</span>' in top
    assert "1.93x the throughput of transaction (1.81x to 2.05x): ahead beyond ±10%" in top
    assert "1 round trip(s) per op instead of 2" in top
    # equivalent: the pick is the policy's, never styled as a win, with the pair's own +-
    assert '<span class="pick">function</span> <span class="bypolicy">by policy' in top
    assert '<span class="form">function</span>' not in top
    assert "equivalent to script within ±3.1% (0.97x to 1.03x its p50 latency)" in top
    assert "function by policy: one call that survives a failover" in top
    # not decided: says so, and what would decide it
    assert '<span class="undecided">not decided</span>' in top
    assert "What more data can do: a narrower interval: more rounds (--rounds 40)" in top
    # server CPU beside the verdict; what the non-atomic forms lost, or why one client
    # cannot tell
    assert "server CPU per op (commandstats): script 30.8 us" in top
    assert "<summary>pipelined lost updates in 12 of 64 cases</summary>" in top
    assert "<summary>non-atomic pipelined: one client cannot show a race</summary>" in top
    assert "no lost update seen" not in top
    # the method once
    assert page.count("The rule: margin ±10%") == 1


def test_throughput_charts_draw_the_interval_of_each_point() -> None:
    from .sample import sample_result

    page = render_html(sample_result())
    # 2 operations x 3 RTTs x 5 forms, each with a bar at 1 and at 4 clients
    bars = page.count(" to ")  # each bar's tooltip: "<form>: <lo> to <hi>"
    assert bars >= 2 * 3 * 5 * 2
    assert "bars: the interval of the median round" in page
    assert '<meta name="viewport" content="width=device-width, initial-scale=1">' in page


def test_figures_tables_show_write_share_lost_updates_and_raw_percentiles() -> None:
    from .sample import sample_result

    page = render_html(sample_result())
    assert "71% (declared 90%)" in page and "93%" in page  # naive's share is off: shown
    first = "first broken round: invariant broken in 12 of 64 cases"
    assert f"FAILED in 12 of 64 cases; {first}" in page
    assert "<th>p50 raw</th><th>p99 raw</th>" in page  # the open loop's uncorrected ones
    assert "<b>Bench profile</b> (declared by the spec)" in page and "1000 to 5000" in page
    assert "A shop with stock to spare" in page and "<th>cpu wait us/op</th>" in page


def test_a_results_file_without_intervals_or_ties_still_reads() -> None:
    data = result(
        record(read_compute_write=True, form="naive"),
        record(read_compute_write=True, form="script", ops_per_sec=900.0),
    )
    data["recommendations"] = [
        {
            "operation": "op",
            "rtt_ms": 0.25,
            "clients": 1,
            "form": "script",
            "text": "op at 0.25 ms RTT with 1 client: use script: 1.8x ...",
            "reasons": ["1.8x the throughput of one call at a time", "atomic"],
        }
    ]
    top = _verdict_part(render_html(data))
    assert "The choice: <b>script</b>: its writes depend on its reads" in top
    assert '<span class="form">script</span>' in top
    assert "1.8x the throughput of one call at a time" in top  # its first reason
    assert "95%" not in top and "bars:" not in render_html(data)


def test_an_older_verdict_still_reads_with_its_tie_and_rule() -> None:
    """A results file of luapipe before the three outcomes (no "status"): the card shows
    its tie, its ratio and its rule as that file stated them."""
    from .sample import sample_result

    result = sample_result()
    result.pop("method")
    for x in result["recommendations"]:
        for k in ("status", "comparisons", "policy", "would_decide", "server_cpu"):
            x.pop(k)
        x["noise_threshold_pct"], x["metric"] = 5.0, "ops_per_sec"
        x["rule"] = "a form beats another only when it was ahead by more than 5% in at least 5"
        x["ratio_coverage"] = 0.94
    tied = next(x for x in result["recommendations"] if x["tied_with"])
    tied |= {"tie_within_pct": 3.1, "tie_break": "fewer moving parts"}
    top = _verdict_part(render_html(result))
    assert "tie within ±3.1%; tie-break: fewer moving parts" in top
    assert "1.93x the throughput of transaction" in top and "(94%: 1.81-2.05x)" in top
    assert "ahead by more than 5% in at least 5" in top
