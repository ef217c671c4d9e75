"""The round-trip model: latency per call = round trips x wire time + fixed time.

``wire time`` is what one request/response costs on the network path alone (back-to-back
raw PINGs on the same path beside each timed slice, minus their client CPU); ``fixed time``
is the server plus client time of one call. Beside each measurement the model is predicted
from its parts (server us from INFO commandstats, client CPU). For the crossover, each
form's fixed time is fitted from its measurements at every RTT (the median of
``latency - round_trips x wire``), which is steadier than one point; then
``rt_a * (w0 + r) + F_a = rt_b * (w0 + r) + F_b`` gives the added RTT ``r`` where the form
with fewer round trips overtakes the other.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace

__all__ = ["Crossover", "FormCost", "crossovers", "fit_cost", "predict_ms", "two_digits"]


def predict_ms(round_trips: float, wire_ms: float, server_us: float, client_us: float) -> float:
    """Predicted latency of one call in milliseconds."""
    return round_trips * wire_ms + (server_us + client_us) / 1000.0


@dataclass(frozen=True)
class FormCost:
    """One form per call: round trips, fixed time (server + client), wire time at RTT 0."""

    form: str
    round_trips: float
    fixed_ms: float
    wire0_ms: float

    def at(self, added_rtt_ms: float) -> float:
        """Predicted latency (ms) when ``added_rtt_ms`` is added to every round trip."""
        return self.round_trips * (self.wire0_ms + added_rtt_ms) + self.fixed_ms


def fit_cost(form: str, points: list[tuple[float, float, float, float]]) -> FormCost:
    """From ``(added_rtt_ms, wire_ms, round_trips, mean_latency_ms)`` per measured RTT."""
    rt = statistics.median(p[2] for p in points)
    fixed = statistics.median(p[3] - p[2] * p[1] for p in points)
    wire0 = statistics.median(p[1] - p[0] for p in points)
    return FormCost(form, rt, max(0.0, fixed), max(0.0, wire0))


@dataclass(frozen=True)
class Crossover:
    """Where ``fewer_trips`` overtakes ``more_trips``, within the measured RTTs only.

    ``kind``: ``"above"`` (faster above ``rtt_ms`` of added RTT, 2 significant digits),
    ``"every_measured"`` (faster at every measured RTT) or ``"none_measured"`` (slower at
    every measured RTT); ``rtt_ms`` is None unless ``kind`` is ``"above"``.
    """

    operation: str
    clients: int
    more_trips: str
    fewer_trips: str
    rtt_ms: float | None
    kind: str = "above"
    measured_rtts: tuple[float, ...] = ()

    def describe(self) -> str:
        span = ""
        if self.measured_rtts:
            lo, hi = min(self.measured_rtts), max(self.measured_rtts)
            span = f" ({lo:.2g} to {hi:.2g} ms)"
        if self.kind == "every_measured":
            faster = f"{self.fewer_trips} is faster than {self.more_trips}"
            return f"{faster} at every measured RTT{span}"
        if self.kind == "none_measured" or self.rtt_ms is None:
            return (
                f"{self.more_trips} stays faster than {self.fewer_trips} at every measured RTT"
                f"{span}"
            )
        return f"{self.fewer_trips} overtakes {self.more_trips} above {self.rtt_ms:g} ms RTT"


def two_digits(x: float) -> float:
    """``x`` rounded to 2 significant digits (0.004853 -> 0.0049, 123 -> 120)."""
    return float(f"{x:.2g}")


def crossovers(
    operation: str,
    clients: int,
    costs: list[FormCost],
    measured: tuple[float, ...] = (),
    pairs: set[frozenset[str]] | None = None,
) -> list[Crossover]:
    """Crossover RTT for each pair of forms with different round trips per call (only the
    ``pairs`` given, when given), never outside ``measured`` (the added RTTs measured)."""
    lo, hi = (min(measured), max(measured)) if measured else (0.0, float("inf"))
    out = []
    for i, a in enumerate(costs):
        for b in costs[i + 1 :]:
            if abs(a.round_trips - b.round_trips) < 0.05:
                continue
            if pairs is not None and frozenset((a.form, b.form)) not in pairs:
                continue
            more, fewer = (a, b) if a.round_trips > b.round_trips else (b, a)
            gap = fewer.at(0.0) - more.at(0.0)  # > 0: the fewer-trip form is slower at RTT 0
            rtt = gap / (more.round_trips - fewer.round_trips) if gap > 0 else 0.0
            if rtt <= lo:
                x = Crossover(operation, clients, more.form, fewer.form, None, "every_measured")
            elif rtt > hi:
                x = Crossover(operation, clients, more.form, fewer.form, None, "none_measured")
            else:
                x = Crossover(operation, clients, more.form, fewer.form, two_digits(rtt))
            out.append(replace(x, measured_rtts=measured))
    return out
