"""Latency histograms: HdrHistogram in microseconds, merged across workers, never averaged.

A percentile is reported only when there are enough samples to support it: ``p`` needs at
least ``1 / (1 - p)`` samples (p50: 2, p90: 10, p95: 20, p99: 100, p99.9: 1000); otherwise it is
``None`` and shown as "-" in reports.
"""

from __future__ import annotations

from dataclasses import dataclass

from hdrh.histogram import HdrHistogram

__all__ = ["PERCENTILES", "LatencyHistogram", "LatencySummary", "min_samples_for"]

LOWEST_US = 1
HIGHEST_US = 120_000_000  # two minutes
SIGNIFICANT_DIGITS = 3

#: JSON key -> percentile
PERCENTILES: dict[str, float] = {"p50": 50.0, "p90": 90.0, "p95": 95.0, "p99": 99.0, "p999": 99.9}


def min_samples_for(percentile: float) -> int:
    """Samples needed before ``percentile`` (0-100) means anything."""
    return max(1, round(1.0 / (1.0 - percentile / 100.0)))


@dataclass(frozen=True)
class LatencySummary:
    """Percentiles in milliseconds (``None`` when there were too few samples)."""

    count: int
    p50: float | None
    p90: float | None
    p95: float | None
    p99: float | None
    p999: float | None
    max: float | None
    mean: float | None
    min: float | None

    def as_dict(self) -> dict[str, float | None]:
        return {
            "p50": self.p50,
            "p90": self.p90,
            "p95": self.p95,
            "p99": self.p99,
            "p999": self.p999,
            "max": self.max,
            "mean": self.mean,
            "min": self.min,
        }


class LatencyHistogram:
    """A histogram of latencies recorded in microseconds."""

    def __init__(self) -> None:
        self._h = HdrHistogram(LOWEST_US, HIGHEST_US, SIGNIFICANT_DIGITS)

    def record_us(self, value_us: float) -> None:
        v = int(value_us)
        self._h.record_value(min(max(v, LOWEST_US), HIGHEST_US))

    def record_seconds(self, seconds: float) -> None:
        self.record_us(seconds * 1e6)

    def record_corrected_us(self, value_us: float, expected_interval_us: float) -> None:
        """Record with HdrHistogram's coordinated-omission back-fill."""
        v = min(max(int(value_us), LOWEST_US), HIGHEST_US)
        self._h.record_corrected_value(v, max(1, int(expected_interval_us)))

    @property
    def count(self) -> int:
        return int(self._h.get_total_count())

    def merge(self, other: LatencyHistogram) -> None:
        self._h.add(other._h)

    def value_at_us(self, percentile: float) -> float:
        return float(self._h.get_value_at_percentile(percentile))

    def values_at_us(self, percentiles: list[float]) -> dict[float, float]:
        """Several percentiles in one pass over the counts (hdrh walks them once per call
        of :meth:`value_at_us`)."""
        if not self.count:
            return dict.fromkeys(percentiles, 0.0)
        found = self._h.get_percentile_to_value_dict(list(percentiles))
        return {q: float(found.get(q, 0.0)) for q in percentiles}

    def mean_us(self) -> float:
        """The mean, as HdrHistogram's ``get_mean_value`` defines it (each count at the
        middle of its bucket), but one pass over the counts array: hdrh's own iterator
        takes about half a second on this histogram's 18k buckets."""
        h = self._h
        if not self.count:
            return 0.0
        counts, total = h.counts, 0
        # only the buckets between the smallest and the largest value can hold counts
        first = h.get_counts_array_index(h.get_min_value())
        last = min(h.counts_len - 1, h.get_counts_array_index(h.get_max_value()))
        for i in range(first, last + 1):
            c = counts[i]
            if c:
                total += c * h._hdr_median_equiv_value(h.get_value_from_index(i))
        return float(total) / self.count

    def encode(self) -> bytes:
        """Compact form for sending between processes (see :meth:`decode`)."""
        if self.count == 0:
            return b""
        encoded: bytes = self._h.encode()
        return encoded

    @classmethod
    def decode(cls, data: bytes) -> LatencyHistogram:
        out = cls()
        if data:
            out._h.decode_and_add(data)
        return out

    @classmethod
    def merged(cls, parts: list[LatencyHistogram]) -> LatencyHistogram:
        out = cls()
        for p in parts:
            out.merge(p)
        return out

    def summary(self) -> LatencySummary:
        n = self.count
        values = self.values_at_us(list(PERCENTILES.values()))

        def pct(key: str) -> float | None:
            q = PERCENTILES[key]
            return values[q] / 1000.0 if n >= min_samples_for(q) else None

        return LatencySummary(
            count=n,
            p50=pct("p50"),
            p90=pct("p90"),
            p95=pct("p95"),
            p99=pct("p99"),
            p999=pct("p999"),
            max=float(self._h.get_max_value()) / 1000.0 if n else None,
            mean=self.mean_us() / 1000.0 if n else None,
            min=float(self._h.get_min_value()) / 1000.0 if n else None,
        )

    def distribution(self, points: tuple[float, ...] = ()) -> list[tuple[float, float]]:
        """(percentile, latency ms) pairs for a percentile-distribution chart."""
        qs = points or (0, 10, 25, 50, 75, 90, 95, 99, 99.5, 99.9, 99.99, 100)
        shown = [float(q) for q in qs if q >= 100 or self.count >= min_samples_for(q)]
        values = self.values_at_us(shown)
        return [(q, values[q] / 1000.0) for q in shown]
