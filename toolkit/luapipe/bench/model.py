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
from dataclasses import dataclass

__all__ = ["Crossover", "FormCost", "crossovers", "fit_cost", "predict_ms"]


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
    """Above ``rtt_ms`` (added RTT), ``fewer_trips`` is faster than ``more_trips``.

    ``rtt_ms`` is 0.0 when ``fewer_trips`` wins at every RTT.
    """

    operation: str
    clients: int
    more_trips: str
    fewer_trips: str
    rtt_ms: float | None

    def describe(self) -> str:
        if self.rtt_ms is None:
            return f"{self.more_trips} stays faster than {self.fewer_trips} at every RTT"
        if self.rtt_ms == 0.0:
            return f"{self.fewer_trips} is faster than {self.more_trips} at every RTT"
        return f"{self.fewer_trips} overtakes {self.more_trips} above {self.rtt_ms:.3g} ms RTT"


def crossovers(operation: str, clients: int, costs: list[FormCost]) -> list[Crossover]:
    """Crossover RTT for every pair of forms with different round trips per call."""
    out = []
    for i, a in enumerate(costs):
        for b in costs[i + 1 :]:
            if abs(a.round_trips - b.round_trips) < 0.05:
                continue
            more, fewer = (a, b) if a.round_trips > b.round_trips else (b, a)
            gap = fewer.at(0.0) - more.at(0.0)  # > 0: the fewer-trip form is slower at RTT 0
            rtt: float | None = 0.0
            if gap > 0:
                rtt = gap / (more.round_trips - fewer.round_trips)
            out.append(Crossover(operation, clients, more.form, fewer.form, rtt))
    return out
