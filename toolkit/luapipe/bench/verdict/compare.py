"""Two forms at one point: which figure compares them, and the three outcomes under one margin.

With a margin ``m`` (:data:`MARGIN_PCT`), the interval of one form's advantage over another
(:func:`~luapipe.bench.verdict.intervals.ratio_of`, paired by round, above 1 = better) says:

- **ahead** when the whole interval lies above ``1 + m`` (behind: below ``1 / (1 + m)``);
- **equivalent** when it lies within ``[1 / (1 + m), 1 + m]`` (as in a two one-sided test);
- **inconclusive** otherwise, and always with fewer than 6 rounds: the data cannot tell.

The figure (:func:`figure_for`), per round:

- one client (closed loop): the p50 latency, the median call's: at RTT 0 while the forms
  take turns of 16 calls (A, B, C, A, B, C... in a slice of each round, :data:`TURNS`),
  elsewhere (and in a run without turns) in each form's own slice (:data:`P50`). One
  client runs one call at a time, so its throughput is the inverse of its mean latency,
  and a stall of the host (another process on the CPU, the delay proxy descheduled) adds
  milliseconds to a few calls of a round: it moves the mean and the throughput of that
  round, not the median; in turns it also falls on every form alike;
- the open loop (``--rate``): the p50 at the fixed rate, where every form completes the
  same calls;
- several clients (or ``--tasks`` calls in flight) at RTT 0: the client's plus the
  server's CPU per op, because there the
  host's stalls, not the forms, dominate a round's wall time, and the forms compete for the
  same CPUs;
- several clients over a network (RTT > 0): the throughput.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from luapipe.bench.verdict.intervals import COVERAGE, Interval, ratio_of

__all__ = [
    "AHEAD",
    "BEHIND",
    "CPU",
    "EQUIVALENT",
    "FIGURES",
    "INCONCLUSIVE",
    "MARGIN_PCT",
    "P50",
    "THROUGHPUT",
    "TURNS",
    "Comparison",
    "Figure",
    "compare",
    "figure_for",
    "outcome_of",
]

#: the one margin of a report: ahead beyond it, equivalent within it
MARGIN_PCT = 10.0

AHEAD, BEHIND, EQUIVALENT, INCONCLUSIVE = "ahead", "behind", "equivalent", "inconclusive"

Row = dict[str, Any]


def _cpu(x: Row) -> float | None:
    client, server = x.get("client_cpu_us"), x.get("server_cpu_us")
    return None if client is None or server is None else float(client) + float(server)


def _cpu_total(r: Row) -> float | None:
    """The record's CPU per op: the median round's where it has one (as the table shows it),
    else the client's plus the server's over the run (a file without it)."""
    if r.get("cpu_usec_per_op") is not None:
        return float(r["cpu_usec_per_op"])
    client, server = r.get("client_cpu_usec_per_op"), r.get("server_cpu_usec_per_op")
    return None if client is None or server is None else float(client) + float(server)


@dataclass(frozen=True)
class Figure:
    """The per-round figure that compares forms, and which way is better."""

    key: str  # ops_per_sec | cpu_us_per_op | p50_ms
    name: str  # in words: "throughput"
    higher_is_better: bool
    of_round: Callable[[Row], float | None]
    of_record: Callable[[Row], float | None]
    why: str = ""  # why this figure decides here

    def rounds(self, r: Row) -> list[float | None]:
        """The figure per round (one value, the record's own, for a file without rounds); a
        round in which the form completed no call is the worst there is (no throughput, an
        infinite latency or CPU per op): a round it lost, which the ratios count."""
        worst = 0.0 if self.higher_is_better else math.inf
        rounds = r.get("rounds") or []
        values = [worst if x.get("calls") == 0 else self.of_round(x) for x in rounds]
        return values or [self.of_record(r)]

    def value(self, r: Row) -> float:
        """The record's own figure, oriented so that more is better (for ranking)."""
        v = self.of_record(r)
        if v is None or v <= 0:
            return 0.0
        return float(v) if self.higher_is_better else 1.0 / float(v)

    def advantage(self, a: Row, b: Row) -> Interval | None:
        """How many times better ``a`` is than ``b``, per paired round (> 1: ``a``)."""
        xa, xb = self.rounds(a), self.rounds(b)
        return ratio_of(xa, xb) if self.higher_is_better else ratio_of(xb, xa)


def _p50(x: Row) -> float | None:
    v = x.get("p50")
    return None if v is None else float(v)


def _p50_turns(x: Row) -> float | None:
    v = x.get("p50_turns")
    return None if v is None else float(v)


THROUGHPUT = Figure(
    "ops_per_sec",
    "throughput",
    True,
    lambda x: x.get("ops_per_sec"),
    lambda r: r.get("ops_per_sec"),
)
P50 = Figure(
    "p50_ms",
    "p50 latency",
    False,
    _p50,
    lambda r: (r.get("latency_ms") or {}).get("p50"),
    "a stall of the host delays a few calls of a round, not its median call; one client's "
    "throughput is the inverse of its mean latency, stalls included",
)
CPU = Figure(
    "cpu_us_per_op",
    "client + server CPU per op",
    False,
    _cpu,
    _cpu_total,
    "at RTT 0 the host's stalls, not the forms, dominate a round's wall time, and the clients "
    "and the server share the same CPUs; CPU time does not run while a process waits",
)
TURNS = Figure(
    "p50_turns_ms",
    "p50 latency, the forms taking turns of 16 calls",
    False,
    _p50_turns,
    lambda r: r.get("p50_turns_ms") or (r.get("latency_ms") or {}).get("p50"),
    "each round the forms also take turns of 16 calls (A, B, C, A, B, C...) on one client, "
    "the first call of a turn untimed: a stall or a slow spell of the host falls on every "
    "form alike, and the median call is not moved by it",
)
FIGURES = {f.key: f for f in (THROUGHPUT, P50, CPU, TURNS)}


def figure_for(rows: Sequence[Row]) -> Figure:
    """The figure that decides at this point (see the module's docstring)."""
    if any(r.get("rate") for r in rows):
        return P50
    one_at_a_time = all(int(r.get("clients") or 1) == 1 and int(r.get("tasks") or 1) == 1
                        for r in rows)  # fmt: skip
    if one_at_a_time:  # one client, one call in flight: the turns in most rounds decide
        turns = all(
            2 * sum(_p50_turns(x) is not None for x in r.get("rounds") or ())
            > len(r.get("rounds") or ())
            for r in rows
        )
        return TURNS if turns else P50
    at_zero = all(float(r.get("rtt_ms_nominal") or 0) == 0 for r in rows)
    if at_zero and all(
        r.get("rounds") and all(_cpu(x) for x in r["rounds"] if x.get("calls") != 0) for r in rows
    ):
        return CPU
    return THROUGHPUT


def outcome_of(x: Interval | None, margin_pct: float = MARGIN_PCT) -> str:
    """:data:`AHEAD`, :data:`BEHIND`, :data:`EQUIVALENT` or :data:`INCONCLUSIVE` for an
    advantage interval (see the module's docstring)."""
    if x is None or x.coverage < COVERAGE:
        return INCONCLUSIVE
    up = 1.0 + margin_pct / 100.0
    if x.lo > up:
        return AHEAD
    if x.hi < 1.0 / up:
        return BEHIND
    if x.lo >= 1.0 / up and x.hi <= up:
        return EQUIVALENT
    return INCONCLUSIVE


@dataclass(frozen=True)
class Comparison:
    """``form`` against ``other`` at one point: ``ratio`` is ``form``'s advantage (> 1:
    better) by ``figure``, paired by round, and ``outcome`` what it says at the margin."""

    form: str
    other: str
    figure: Figure
    ratio: Interval | None
    outcome: str
    margin_pct: float = MARGIN_PCT

    @property
    def decided(self) -> bool:
        return self.outcome != INCONCLUSIVE

    def as_dict(self) -> dict[str, Any]:
        x = self.ratio
        return {
            "form": self.form,
            "other": self.other,
            "figure": self.figure.key,
            "outcome": self.outcome,
            "ratio": None if x is None else x.value,
            "ratio_interval": None if x is None or x.rounds < 2 else (x.lo, x.hi),
            "within_pct": None if x is None or x.rounds < 2 else x.within_pct,
            "rounds": None if x is None else x.rounds,
            "coverage": None if x is None else x.coverage,
        }


def compare(a: Row, b: Row, figure: Figure, margin_pct: float = MARGIN_PCT) -> Comparison:
    """``a`` against ``b`` by ``figure`` at ``margin_pct``."""
    x = figure.advantage(a, b)
    return Comparison(str(a["form"]), str(b["form"]), figure, x, outcome_of(x, margin_pct),
                      margin_pct)  # fmt: skip
