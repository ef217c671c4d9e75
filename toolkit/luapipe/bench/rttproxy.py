"""A TCP delay proxy in its own process: simulated network round-trip time (RTT).

This machine's kernel has no ``sch_netem``, so RTT is simulated in user space. The proxy
holds every chunk it reads for half the RTT in each direction before forwarding it, so a
request/response exchange costs one RTT. Timers: sleep (``select``) until 60 us before the
deadline, then spin; ``time.sleep`` alone overshoots by ~90 us here. One thread, one queue
per direction: byte order and per-connection streams are preserved exactly.

Control: the parent writes ``rtt <ms>`` lines to the proxy's stdin (answered ``ok``), so one
proxy serves every RTT of a run. :func:`calibrate` measures what the proxy really adds
(PING through it vs direct) and corrects the delay for the proxy's own overhead.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import statistics
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

__all__ = ["Calibration", "RttProxy", "calibrate", "measure_ping", "measure_ping_rtt_us"]

SPIN_S = 60e-6  # the floor; the proxy measures its own timer overshoot at start


def _timer_overshoot() -> float:
    """p90 overshoot of a 300 us ``select`` sleep on this machine, plus a margin (seconds)."""
    over = []
    for _ in range(40):
        t = time.perf_counter()
        select.select([], [], [], 0.0003)
        over.append(time.perf_counter() - t - 0.0003)
    over.sort()
    return min(0.0005, max(SPIN_S, over[int(len(over) * 0.9)] + 20e-6))


CHUNK = 262144


class _Direction:
    def __init__(self, src: socket.socket, dst: socket.socket) -> None:
        self.src, self.dst = src, dst
        self.queue: deque[tuple[float, bytes]] = deque()
        self.out = bytearray()
        self.eof = False
        self.shut = False


class _Proxy:
    def __init__(self, listen: socket.socket, upstream: tuple[str, int]) -> None:
        self.listen, self.upstream = listen, upstream
        self.half = 0.0
        self.spin = _timer_overshoot()
        self.dirs: list[_Direction] = []
        self.by_src: dict[socket.socket, _Direction] = {}
        self.peer: dict[socket.socket, socket.socket] = {}

    def accept(self) -> None:
        client, _ = self.listen.accept()
        try:
            server = socket.create_connection(self.upstream)
        except OSError:
            client.close()
            return
        for s in (client, server):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            s.setblocking(False)
        for a, b in ((client, server), (server, client)):
            d = _Direction(a, b)
            self.dirs.append(d)
            self.by_src[a] = d
            self.peer[a] = b

    def close_pair(self, s: socket.socket) -> None:
        other = self.peer.pop(s, None)
        for sock in (s, other):
            if sock is None:
                continue
            d = self.by_src.pop(sock, None)
            if d is not None:
                self.dirs.remove(d)
            self.peer.pop(sock, None)
            with contextlib.suppress(OSError):
                sock.close()

    def read(self, s: socket.socket) -> None:
        d = self.by_src.get(s)
        if d is None:
            return
        try:
            data = s.recv(CHUNK)
        except BlockingIOError:
            return
        except OSError:
            self.close_pair(s)
            return
        if not data:
            d.eof = True
            return
        now = time.perf_counter()
        if self.half <= 0 and not d.queue:
            d.out += data
        else:
            d.queue.append((now + self.half, data))

    def flush(self, now: float) -> float:
        """Move due chunks to the output, send what the socket takes; next deadline."""
        nxt = float("inf")
        for d in list(self.dirs):
            while d.queue and d.queue[0][0] <= now:
                d.out += d.queue.popleft()[1]
            if d.out:
                try:
                    sent = d.dst.send(d.out)
                    del d.out[:sent]
                except BlockingIOError:
                    pass
                except OSError:
                    self.close_pair(d.src)
                    continue
            if d.queue:
                nxt = min(nxt, d.queue[0][0])
            elif d.eof and not d.out and not d.shut:
                d.shut = True
                with contextlib.suppress(OSError):
                    d.dst.shutdown(socket.SHUT_WR)
                back = self.by_src.get(d.dst)
                if back is None or back.shut:
                    self.close_pair(d.src)
        return nxt

    def control(self, line: str) -> bool:
        words = line.split()
        if not words or words[0] == "quit":
            return False
        if words[0] == "rtt" and len(words) == 2:
            self.half = max(0.0, float(words[1])) / 2000.0
        sys.stdout.write("ok\n")
        sys.stdout.flush()
        return True

    def serve(self) -> None:
        stdin = sys.stdin.fileno()
        buf = b""
        while True:
            now = time.perf_counter()
            wait = self.flush(now) - now
            timeout = 0.5 if wait == float("inf") else max(0.0, wait - self.spin)
            readers: list[socket.socket | int] = [self.listen, stdin, *self.by_src]
            writers = [d.dst for d in self.dirs if d.out]
            r, _w, _ = select.select(readers, writers, [], min(timeout, 0.5))
            for s in r:
                if s is self.listen:
                    self.accept()
                elif s == stdin:
                    chunk = os.read(stdin, 4096)
                    if not chunk:
                        return
                    buf += chunk
                    while b"\n" in buf:
                        line, buf = buf.split(b"\n", 1)
                        if not self.control(line.decode()):
                            return
                elif isinstance(s, socket.socket):
                    self.read(s)


def _main(argv: list[str]) -> None:
    upstream_host, upstream_port = argv[0].rsplit(":", 1)
    listen = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listen.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listen.bind(("127.0.0.1", 0))
    listen.listen(128)
    proxy = _Proxy(listen, (upstream_host, int(upstream_port)))
    if len(argv) > 1:
        proxy.half = float(argv[1]) / 2000.0
    sys.stdout.write(f"listening {listen.getsockname()[1]} {proxy.spin * 1e6:.0f}\n")
    sys.stdout.flush()
    proxy.serve()


class RttProxy:
    """The proxy process; ``stop()`` ends exactly that process (by its PID)."""

    def __init__(self, upstream_host: str, upstream_port: int, rtt_ms: float = 0.0) -> None:
        self.upstream = f"{upstream_host}:{upstream_port}"
        self.rtt_ms = rtt_ms
        self.host = "127.0.0.1"
        self.port = 0
        self.spin_us = 0.0  # how long before each deadline the proxy stops sleeping and spins
        self._proc: subprocess.Popen[str] | None = None

    def start(self) -> RttProxy:
        env = dict(os.environ)
        root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
        cmd = [sys.executable, "-m", "luapipe.bench.rttproxy", self.upstream, str(self.rtt_ms)]
        self._proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, bufsize=1
        )
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline().split()
        if len(line) != 3 or line[0] != "listening":
            self.stop()
            raise RuntimeError("rtt proxy did not start")
        self.port = int(line[1])
        self.spin_us = float(line[2])
        return self

    @property
    def pid(self) -> int:
        assert self._proc is not None, "proxy not started"
        return self._proc.pid

    def set_delay(self, rtt_ms: float) -> None:
        """Hold chunks ``rtt_ms / 2`` in each direction from now on."""
        assert self._proc is not None and self._proc.stdin and self._proc.stdout
        self._proc.stdin.write(f"rtt {rtt_ms!r}\n")
        self._proc.stdin.flush()
        self._proc.stdout.readline()
        self.rtt_ms = rtt_ms

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        with contextlib.suppress(OSError):
            if proc.stdin:
                proc.stdin.close()
        try:
            proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if proc.stdout:
            proc.stdout.close()

    def __enter__(self) -> RttProxy:
        return self.start()

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def measure_ping(host: str, port: int, samples: int = 200) -> tuple[float, float]:
    """PING on a raw socket: (median round trip, mean client CPU per PING), microseconds."""
    with socket.create_connection((host, port), timeout=10) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        times = []
        cpu = 0.0
        for i in range(samples + 5):
            c0, t0 = time.thread_time(), time.perf_counter()
            s.sendall(b"PING\r\n")
            got = b""
            while not got.endswith(b"\r\n"):
                part = s.recv(64)
                if not part:
                    raise ConnectionError("connection closed during PING")
                got += part
            if i >= 5:
                times.append(time.perf_counter() - t0)
                cpu += time.thread_time() - c0
    return statistics.median(times) * 1e6, cpu / samples * 1e6


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


def calibrate(proxy: RttProxy, server_host: str, server_port: int, rtt_ms: float) -> Calibration:
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


if __name__ == "__main__":
    _main(sys.argv[1:])
