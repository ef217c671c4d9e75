"""Check a loaded results document before anything renders it: a record that is not an
object, or a field of the wrong type, is a one-line :class:`LuapipeError` naming the record
and the field, never a traceback from deep inside a renderer.

Only the fields this version's renderers read are checked; unknown fields are left alone
(a newer file may carry more).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from luapipe.errors import LuapipeError

__all__ = ["check_results"]

Check = Callable[[Any], bool]


def _num(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _str(v: Any) -> bool:
    return isinstance(v, str)


def _bool(v: Any) -> bool:
    return isinstance(v, bool)


def _nullable(check: Check) -> Check:
    return lambda v: v is None or check(v)


def _latency(v: Any) -> bool:
    return isinstance(v, dict) and all(_str(k) and (x is None or _num(x)) for k, x in v.items())


def _distribution(v: Any) -> bool:
    return isinstance(v, list) and all(
        isinstance(p, list) and len(p) == 2 and _num(p[0]) and _num(p[1]) for p in v
    )


def _strings(v: Any) -> bool:
    return isinstance(v, list) and all(_str(x) for x in v)


def _objects(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(x, dict) for x in v)


_NUMBER = "a finite number"
#: record field -> (check, what it must be); the first block is required
RECORD: dict[str, tuple[Check, str]] = {
    "operation": (_str, "a string"),
    "form": (_str, "a string"),
    "rtt_ms_nominal": (_num, _NUMBER),
    "rtt_ms_measured": (_nullable(_num), _NUMBER),
    "clients": (_int, "a whole number"),
    "ops": (_int, "a whole number"),
    "ops_per_sec": (_num, _NUMBER),
    "latency_ms": (_latency, "an object of percentiles (numbers or null)"),
    "round_trips_per_op": (_nullable(_num), _NUMBER),
    "commands_per_op": (_nullable(_num), _NUMBER),
    "server_usec_per_op": (_num, _NUMBER),
    "retries_per_op": (_nullable(_num), _NUMBER),
    "errors": (_int, "a whole number"),
    "invariant_ok": (_nullable(_bool), "true or false"),
    # optional
    "batch": (_int, "a whole number"),
    "calls": (_int, "a whole number"),
    "latency_ms_uncorrected": (_nullable(_latency), "an object of percentiles or null"),
    "latency_ms_per_op": (_nullable(_latency), "an object of percentiles or null"),
    "latency_distribution": (_distribution, "a list of [percentile, ms] pairs"),
    "error_samples": (_strings, "a list of strings"),
    "invariant_detail": (_nullable(_str), "a string"),
    "model_latency_ms": (_nullable(_num), _NUMBER),
    "model_error_pct": (_nullable(_num), _NUMBER),
    "bystander_p99_ms": (_nullable(_num), _NUMBER),
    "client_cpu_usec_per_op": (_nullable(_num), _NUMBER),
    "atomic": (_bool, "true or false"),
}

#: top-level section -> (check, what it must be)
SECTIONS: dict[str, tuple[Check, str]] = {
    "manifest": (lambda v: isinstance(v, dict), "an object"),
    "calibration": (_objects, "a list of objects"),
    "crossovers": (_objects, "a list of objects"),
    "recommendations": (_objects, "a list of objects"),
    "notes": (_strings, "a list of strings"),
    "skipped": (_objects, "a list of objects"),
    "errors": (_objects, "a list of objects"),
}


def _shown(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def check_results(data: Any, path: str, required: tuple[str, ...]) -> None:
    """Raise :class:`LuapipeError` (one line, naming the record and field) unless ``data``
    has the shape the renderers read and every record has the ``required`` fields."""
    if not isinstance(data, dict) or not isinstance(data.get("records"), list):
        raise LuapipeError(f"{path}: not a luapipe results file (no records list)")
    for name, (check, what) in SECTIONS.items():
        if name in data and not check(data[name]):
            raise LuapipeError(f"{path}: {name} must be {what}, not {_shown(data[name])}")
    for i, rec in enumerate(data["records"]):
        if not isinstance(rec, dict):
            raise LuapipeError(f"{path}: record {i} is not an object: {_shown(rec)}")
        missing = [f for f in required if f not in rec]
        if missing:
            raise LuapipeError(f"{path}: record {i} lacks {', '.join(missing)}")
        for field, (check, what) in RECORD.items():
            if field in rec and not check(rec[field]):
                raise LuapipeError(
                    f"{path}: record {i} ({_shown(rec.get('operation'))}): {field} must be "
                    f"{what}, not {_shown(rec[field])}"
                )
