"""The round-trip model: latency per call = round trips x wire time + server + client time.

``wire time`` is what one request/response costs on the network path alone: the median PING
through the proxy (or direct at RTT 0) from calibration. Fitting the model to one
measurement per form gives the crossover RTT where a form with fewer round trips overtakes
one with more: ``a_f + rt_f * r = a_g + rt_g * r``.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Crossover", "FormCost", "crossovers", "predict_ms"]


def predict_ms(round_trips: float, wire_ms: float, server_us: float, client_us: float) -> float:
    """Predicted latency of one call in milliseconds."""
    return round_trips * wire_ms + (server_us + client_us) / 1000.0


@dataclass(frozen=True)
class FormCost:
    """One form's model inputs per call, measured at ``wire_ms``."""

    form: str
    round_trips: float
    server_us: float
    client_us: float
    wire_ms: float

    def at(self, added_rtt_ms: float) -> float:
        """Predicted latency (ms) when ``added_rtt_ms`` is added to every round trip."""
        return predict_ms(
            self.round_trips, self.wire_ms + added_rtt_ms, self.server_us, self.client_us
        )


@dataclass(frozen=True)
class Crossover:
    """Above ``rtt_ms`` (added RTT), ``fewer_trips`` is faster than ``more_trips``.

    ``rtt_ms`` is 0.0 when ``fewer_trips`` wins at every RTT, and ``None`` when it never does.
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
