"""The results JSON: writing, reading, and its schema.

Schema (``schema_version`` 2; a version 1 file lacks the fields marked "v2" and still
renders)::

    {
      "schema_version": 2,
      "manifest": {
        "created_utc": "...",
        "redis": {"url": <masked>, "server" ("redis", "valkey"), "version", "mode", "os",
                  "config": {name: value}},
        "machine": {"kernel", "system", "cpu", "cpus", "python"},
        "libraries": {"luapipe", "redis", "hiredis", "hdrhistogram", "jinja2", "click"},
        "rtt_method": "delay proxy ...", "proxy_spin_us": float,
        "spec": {"config": {rtts_ms, clients, duration_s, warmup_s, rounds, rate, bystander,
                            bystander_interval_s, seed},
                 "workloads": [<each workload's describe(): name, kind, commands/spec...,
                    "bench_profile" (v2): {"source": "spec"|"default"|"builtin",
                      "description", "write_share" (declared), "wrote", "renew",
                      "state": {key: text}, "args": {arg: text}}>]}
      },
      "calibration": [{"rtt_ms_nominal", "rtt_ms_measured" (added RTT: through proxy minus
                       direct), "delay_ms_setting", "direct_ping_ms", "proxied_ping_ms",
                       "proxy_overhead_ms" (proxy at delay 0 minus direct), "error_pct"}],
      "records": [{   # one per (operation, form, rtt, clients)
        "operation", "form", "rtt_ms_nominal", "rtt_ms_measured", "clients",
        "ops",                       # logical operations completed (calls x batch)
        "ops_per_sec",               # the median round's (beside its interval); with one
                                     # round, over the round
        "latency_ms": {"p50","p90","p95","p99","p999","max","mean","min"},  # per call; null
                                     # when too few samples (p99.9 needs >= 1000); p50, p99
                                     # and mean: the median round's (beside their
                                     # intervals), the others over every call
        "round_trips_per_op", "commands_per_op",  # measured by a counting connection
        "server_usec_per_op", "server_commands_per_op",  # INFO commandstats deltas
        "retries_per_op", "abort_rate", "errors", "error_samples",
        "watch_attempts_per_op",     # transaction form only: WATCH/EXEC attempts per call
        "invariant_ok", "invariant_detail",
        "batch", "calls", "duration_s", "rate",
        "latency_ms_uncorrected",    # open loop only: from the actual send, not the due time
        "latency_ms_per_op",         # batch > 1: per-call latency / batch
        "latency_distribution": [[percentile, ms], ...],
        "client_cpu_usec_per_op", "bystander_p99_ms", "bystander_samples",
        "rtt_ms_under_load",         # added RTT by raw PING beside each slice, under load
        "wire_ms",                   # one round trip without client CPU: back-to-back raw PING
                                     # on the same path beside each slice, minus its CPU
        "model_latency_ms", "model_error_pct", "atomic",
        "read_compute_write",        # the writes depend on reads: non-atomic forms can race
        # v2:
        "client_wait_usec_per_op",   # runnable but waiting for a CPU (schedstat); in the model
        "write_share",               # measured share of calls that took the write path, or null
        "write_share_declared",      # the bench profile's share
        "write_share_off",           # more than 10 points apart
        "rounds": [{"ops_per_sec", "calls", "seconds", "p50", "p99", "mean",  # per round
                    "client_cpu_us", "server_us", "server_cpu_us",  # per op (v2, issue 19)
                    "p50_turns"}],           # one client at RTT 0: p50 with the forms taking
                                             # turns of 16 calls
        "ops_per_sec_interval": [lo, hi],    # the median round's interval (null: 1 round);
        "latency_ms_interval": {"p50", "p99", "mean": [lo, hi] or null},  # every interval
                                             # of a report is of its median round (the sign
                                             # test), see bench/verdict/intervals.py
        "lost_updates", "invariant_cases",  # cases whose invariant broke, of those checked
        "contention",                # hot | spread | zipf:S
        "server_cpu_usec_per_op",    # the server's main thread (INFO cpu) per op
        "cpu_usec_per_op", "cpu_usec_per_op_interval",  # client + server main thread (the
                                     # median round's, beside its interval)
        "p50_turns_ms", "p50_turns_ms_interval",  # median of the rounds' p50_turns
        "pooled": {"ops_per_sec", "latency_ms": {"p50", "p99", "mean"},  # the same figures
                   "cpu_usec_per_op"}  # over every call of every round (a round weighs by
                                       # its calls); the model is compared with the shown mean
      }],
      "crossovers": [{"operation", "clients", "more_trips", "fewer_trips",
                      "rtt_ms",              # 2 significant digits; null unless kind "above"
                      "kind",                # v2: above | every_measured | none_measured
                      "measured_rtts",       # v2: the added RTTs measured (no extrapolation)
                      "text"}],              # only pairs at stake, from >= 2 RTTs
      "recommendations": [{"operation", "rtt_ms", "clients",
        "form",                      # null: no recommendation (see text)
        "text", "reasons", "headline",
        # v2:
        "question", "kind", "at_stake",   # e.g. "transaction vs script vs function"
        "metric",                    # the figure that decided (as "figure")
        "tied_with", "tie_within_pct", "tie_break",  # the forms equivalent to it, the
                                     # widest +-x% among those pairs, the policy's words
        "noise_threshold_pct",       # the margin (as "margin_pct")
        "alternative", "ratio", "ratio_interval",  # the winner vs the best other at stake:
                                     # the median round's ratio, the interval of that median;
                                     # every "ratio" here is an advantage, > 1 = the form is
                                     # better: form/other for ops/s, other/form for p50 and
                                     # CPU per op (the words say the inverse for those:
                                     # "0.788x the p50 latency of pipelined" is ratio 1.27)
        "beats", "beats_ratio", "beats_ratio_interval",  # the best form at stake it is
                                     # ahead of (null: none)
        "beats_by",                  # whose ratio that is: the form itself
        "ratio_rounds", "ratio_coverage", "rule",  # paired rounds, the interval's coverage,
                                     # when a form beats another, in words
        "non_atomic": [{"form", "ratio", "ratio_interval", "lost_updates",
                        "invariant_cases", "invariant_ok", "clients",
                        "calls_met",         # False: one client, one call at a time (no
                                             # --tasks, no pipelined --batch): races cannot show
                        "text"}],
        "main_reason",
        # the three outcomes (issue 19):
        "status",                    # ahead | equivalent | inconclusive | only | none |
                                     # too few samples
        "decided",                   # the form's comparison with every other at stake is
        "figure", "figure_name",     # ops_per_sec | p50_ms | p50_turns_ms | cpu_us_per_op
        "margin_pct",                # ahead beyond it, equivalent within it
        "comparisons": [{"form", "other", "figure", "outcome", "ratio", "ratio_interval",
                         "within_pct", "rounds", "coverage", "text"}],  # best other first
        "policy",                    # "function by policy: ..." when the policy picked it
        "would_decide",              # inconclusive: what would decide it
        "server_cpu",                # server CPU per op of the forms at stake, > 1.5x apart
        "contention"}],
      "method": str,                 # the figure, rule, interval method and policy, once
      "notes": [str],
      "model_notes": [str],          # v2: where the model is > 15% off, and why (also in notes)
      "skipped": [{"operation", "form", "reason"}],  # forms that cannot run here (cluster)
      "errors": [{"operation", "form", "rtt_ms", "clients", "errors", "calls", "samples"}]
                 # failed calls per record with errors; "operation": "harness" entries count
                 # the harness's own retried failures (restart, BUSY, killed connection)
    }
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any

from luapipe.errors import LuapipeError, mask_url
from luapipe.report.files import write_whole
from luapipe.report.validate import check_results

__all__ = ["REQUIRED_RECORD_FIELDS", "load_results", "mask_tree", "write_json"]

REQUIRED_RECORD_FIELDS = (
    "operation",
    "form",
    "rtt_ms_nominal",
    "rtt_ms_measured",
    "clients",
    "ops",
    "ops_per_sec",
    "latency_ms",
    "round_trips_per_op",
    "commands_per_op",
    "server_usec_per_op",
    "retries_per_op",
    "errors",
    "invariant_ok",
)


def mask_tree(data: Any) -> Any:
    """Every string in ``data`` with URL passwords masked."""
    if isinstance(data, str):
        return mask_url(data)
    if isinstance(data, dict):
        return {k: mask_tree(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [mask_tree(v) for v in data]
    return data


def _finite(data: Any) -> Any:
    """``data`` with NaN and infinities as null: strict JSON, readable by any parser."""
    if isinstance(data, float) and not math.isfinite(data):
        return None
    if isinstance(data, dict):
        return {k: _finite(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [_finite(v) for v in data]
    return data


def write_json(result: dict[str, Any], path: str | Path) -> None:
    text = json.dumps(_finite(mask_tree(result)), indent=2, allow_nan=False)
    write_whole(path, text + "\n")


def _median(values: list[Any]) -> float | None:
    known = [float(v) for v in values if isinstance(v, int | float) and math.isfinite(v)]
    return statistics.median(known) if known else None


def _median_round_figures(r: dict[str, Any]) -> None:
    """A record written before ``pooled`` (its figures over every call of every round,
    beside intervals of the median round): the median round's figures where it has an
    interval, the old ones kept as ``pooled``, as a run writes them now."""
    rounds = r.get("rounds")
    if "pooled" in r or not isinstance(rounds, list) or len(rounds) < 2:
        return
    if not all(isinstance(x, dict) for x in rounds):
        return
    lat, spans = r.get("latency_ms"), r.get("latency_ms_interval")
    lat = lat if isinstance(lat, dict) else {}
    spans = spans if isinstance(spans, dict) else {}
    r["pooled"] = {
        "ops_per_sec": r.get("ops_per_sec"),
        "latency_ms": {k: lat.get(k) for k in ("p50", "p99", "mean")},
        "cpu_usec_per_op": r.get("cpu_usec_per_op"),
    }
    shown = _median([x.get("ops_per_sec") for x in rounds])
    if r.get("ops_per_sec_interval") and shown is not None:
        r["ops_per_sec"] = shown
    for k in ("p50", "p99", "mean"):
        shown = _median([x.get(k) for x in rounds])
        if spans.get(k) and shown is not None:
            lat[k] = shown
    cpu = []
    for x in rounds:
        client, server = x.get("client_cpu_us"), x.get("server_cpu_us")
        both = isinstance(client, int | float) and isinstance(server, int | float)
        cpu.append(client + server if both else None)
    shown = _median(cpu)
    if r.get("cpu_usec_per_op_interval") and shown is not None:
        r["cpu_usec_per_op"] = shown


def load_results(path: str | Path) -> dict[str, Any]:
    """Read a results file and check it has the fields every renderer needs."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise LuapipeError(
            f"{path}: not a luapipe results file (not UTF-8 text: byte {exc.start})"
        ) from None
    except json.JSONDecodeError as exc:
        raise LuapipeError(f"{path}: not a luapipe results file ({exc})") from None
    check_results(data, str(path), REQUIRED_RECORD_FIELDS)
    for r in data["records"]:
        _median_round_figures(r)
    data.setdefault("manifest", {}).setdefault("spec", {})
    data.setdefault("calibration", [])
    data.setdefault("crossovers", [])
    data.setdefault("recommendations", [])
    data.setdefault("notes", [])
    data.setdefault("skipped", [])
    data.setdefault("errors", [])
    return dict(mask_tree(data))
