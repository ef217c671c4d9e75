"""Calibrating the delay proxy: PING through it vs direct, on a raw socket.

The measured RTT is what the proxy adds to a direct round trip; the proxy's own overhead
(at delay 0) is measured and reported, and the delay is corrected for it.
"""

from __future__ import annotations

import socket
import statistics
import time
from dataclasses import dataclass
from typing import Protocol

__all__ = [
    "Calibration",
    "DelayProxy",
    "PingProbe",
    "calibrate",
    "measure_ping",
    "measure_ping_rtt_us",
]


class DelayProxy(Protocol):
    """What calibrating needs of a delay proxy (:class:`luapipe.bench.rttproxy.RttProxy`)."""

    host: str
    port: int

    def set_delay(self, rtt_ms: float) -> None: ...


def _pings(s: socket.socket, samples: int, warm: int) -> tuple[list[float], float]:
    """``samples`` PINGs after ``warm`` discarded ones: round trips (s), client CPU (s)."""
    times = []
    cpu = 0.0
    for i in range(samples + warm):
        c0, t0 = time.thread_time(), time.perf_counter()
        s.sendall(b"PING\r\n")
        got = b""
        while not got.endswith(b"\r\n"):
            part = s.recv(64)
            if not part:
                raise ConnectionError("connection closed during PING")
            got += part
        if i >= warm:
            times.append(time.perf_counter() - t0)
            cpu += time.thread_time() - c0
    return times, cpu


def _connect(host: str, port: int) -> socket.socket:
    s = socket.create_connection((host, port), timeout=10)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def measure_ping(
    host: str, port: int, samples: int = 200, *, mean: bool = False
) -> tuple[float, float]:
    """PING on a raw socket: (median round trip, or the mean with ``mean``; mean client CPU
    per PING), microseconds. The median calibrates the proxy; the mean, like the mean
    latency it is compared with, keeps the stalls of a busy machine."""
    with _connect(host, port) as s:
        times, cpu = _pings(s, samples, 5)
    typical = statistics.fmean(times) if mean else statistics.median(times)
    return typical * 1e6, cpu / samples * 1e6


class PingProbe:
    """Mean PING round trip and client CPU on kept-open raw sockets, one per address.

    The benchmark probes the path beside every slice; a new connection per probe (through
    the delay proxy: a handshake that costs round trips of its own) made the probe the
    largest cost of a slice. A socket that fails is dropped and opened again next time.
    """

    def __init__(self) -> None:
        self._socks: dict[tuple[str, int], socket.socket] = {}

    def mean_us(self, host: str, port: int, samples: int) -> tuple[float, float]:
        """(mean round trip, mean client CPU per PING) over ``samples`` PINGs, microseconds."""
        addr = (host, port)
        s = self._socks.get(addr)
        fresh = s is None
        if s is None:
            s = self._socks[addr] = _connect(host, port)
        try:
            times, cpu = _pings(s, samples, 2 if fresh else 0)
        except OSError:
            self._socks.pop(addr, None)
            s.close()
            raise
        return statistics.fmean(times) * 1e6, cpu / samples * 1e6

    def close(self) -> None:
        for s in self._socks.values():
            s.close()
        self._socks.clear()


def measure_ping_rtt_us(host: str, port: int, samples: int = 200) -> float:
    """Median PING round trip on a raw socket (minimal client overhead), microseconds."""
    return measure_ping(host, port, samples)[0]


@dataclass(frozen=True)
class Calibration:
    """What the proxy adds at one nominal RTT, from PINGs through it and direct."""

    rtt_ms_nominal: float
    rtt_ms_measured: float  # added round-trip time the client sees (through proxy - direct)
    delay_ms_setting: float  # what the proxy was told, after correcting for its overhead
    direct_ping_ms: float  # loopback PING without the proxy
    proxied_ping_ms: float  # PING through the proxy
    proxy_overhead_ms: float  # proxy at delay 0 minus direct
    ping_cpu_ms: float = 0.0  # client CPU of one raw PING (subtracted to get wire time)

    @property
    def wire_ms(self) -> float:
        """One round trip on this path without client CPU: the model's unit."""
        return max(0.0, self.proxied_ping_ms - self.ping_cpu_ms)

    @property
    def error_pct(self) -> float | None:
        if self.rtt_ms_nominal <= 0:
            return None
        return 100.0 * (self.rtt_ms_measured - self.rtt_ms_nominal) / self.rtt_ms_nominal


def calibrate(proxy: DelayProxy, server_host: str, server_port: int, rtt_ms: float) -> Calibration:
    """Set the proxy to ``rtt_ms`` and measure what it adds (PING through it minus direct,
    each proxied measurement right after a direct one). The delay is corrected for the
    proxy's own overhead, damped and clamped to [nominal - 0.25 ms, nominal] so one noisy
    measurement cannot swing it; the best of up to five rounds is kept."""
    samples = int(min(300, max(15, 0.4 / max(rtt_ms / 1000.0, 1e-4))))
    direct, cpu = measure_ping(server_host, server_port, 300)
    proxy.set_delay(0.0)
    zero = measure_ping_rtt_us(proxy.host, proxy.port, 300)
    overhead = max(0.0, zero - direct)
    best = (0.0, 0.0, zero, direct)  # (|error|, setting, through, direct)
    if rtt_ms > 0:
        low = max(0.0, rtt_ms - 0.25)
        setting = min(rtt_ms, max(low, rtt_ms - overhead / 1000.0))
        best = (float("inf"), setting, zero, direct)
        for _ in range(5):
            proxy.set_delay(setting)
            d = measure_ping_rtt_us(server_host, server_port, 100)
            through = measure_ping_rtt_us(proxy.host, proxy.port, samples)
            error = rtt_ms - (through - d) / 1000.0
            if abs(error) < best[0]:
                best = (abs(error), setting, through, d)
            if abs(error) <= 0.02 * rtt_ms:
                break
            setting = min(rtt_ms, max(low, setting + 0.8 * error))
        proxy.set_delay(best[1])
    _, setting, through, direct_now = best
    return Calibration(
        rtt_ms_nominal=rtt_ms,
        rtt_ms_measured=round((through - direct_now) / 1000.0, 4),
        delay_ms_setting=round(setting, 4),
        direct_ping_ms=round(direct_now / 1000.0, 4),
        proxied_ping_ms=round(through / 1000.0, 4),
        proxy_overhead_ms=round(overhead / 1000.0, 4),
        ping_cpu_ms=round(cpu / 1000.0, 4),
    )
