"""A TCP delay proxy in its own process: simulated network round-trip time (RTT).

This machine's kernel has no ``sch_netem``, so RTT is simulated in user space. The proxy
holds every chunk it reads for half the RTT in each direction before forwarding it, so a
request/response exchange costs one RTT. Timers: sleep (``select``) until 60 us before the
deadline, then spin; ``time.sleep`` alone overshoots by ~90 us here. Deadlines count from
the kernel's receive timestamp (SO_TIMESTAMPNS), so the proxy's own wake-up latency does not
stretch the RTT. One thread, one queue per direction: byte order and per-connection streams
are preserved exactly.

Control: the parent writes ``rtt <ms>`` lines to the proxy's stdin (answered ``ok``), so one
proxy serves every RTT of a run. :func:`calibrate` measures what the proxy really adds
(PING through it vs direct) and corrects the delay for the proxy's own overhead.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import time
from collections import deque
from pathlib import Path
from types import TracebackType

from luapipe.bench import running
from luapipe.bench.calibrate import Calibration, calibrate, measure_ping, measure_ping_rtt_us
from luapipe.errors import LuapipeError

__all__ = ["Calibration", "RttProxy", "calibrate", "measure_ping", "measure_ping_rtt_us"]

SO_TIMESTAMPNS: int = getattr(socket, "SO_TIMESTAMPNS", 35)  # Linux
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


ANCILLARY = socket.CMSG_SPACE(16)


def _arrival(anc: list[tuple[int, int, bytes]]) -> float:
    """When the bytes reached the socket (kernel timestamp), on the perf_counter clock.

    Deadlines count from arrival, not from when this process woke up to read, so the
    proxy's wake-up latency does not add to the simulated RTT.
    """
    now = time.perf_counter()
    for level, kind, raw in anc:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(raw) >= 16:
            sec, nsec = struct.unpack("qq", raw[:16])
            age = (time.time_ns() - (int(sec) * 1_000_000_000 + int(nsec))) / 1e9
            if 0.0 <= age < 0.5:  # trust it only when it is plausible
                return now - age
    return now


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
            with contextlib.suppress(OSError, AttributeError):
                s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
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
            data, anc, _flags, _addr = s.recvmsg(CHUNK, ANCILLARY)
        except BlockingIOError:
            return
        except OSError:
            self.close_pair(s)
            return
        if not data:
            d.eof = True
            return
        now = _arrival(anc)
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
    """The proxy process: quiet when its parent goes first (Ctrl-C, SIGTERM, a closed pipe)."""
    try:
        _serve(argv)
    except (BrokenPipeError, KeyboardInterrupt):
        with contextlib.suppress(OSError):  # nothing left to flush at exit either
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _serve(argv: list[str]) -> None:
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
        self._token: int | None = None

    def start(self) -> RttProxy:
        env = dict(os.environ)
        root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
        # Not ``-m luapipe.bench.rttproxy``: importing the luapipe package already imports
        # this module, and runpy warns about running a module twice.
        boot = "import sys; from luapipe.bench.rttproxy import _main; _main(sys.argv[1:])"
        cmd = [sys.executable, "-c", boot, self.upstream, str(self.rtt_ms)]
        self._proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            bufsize=1,
            start_new_session=True,  # stopped by luapipe, not by the terminal's Ctrl-C
        )
        self._token = running.started(f"the delay proxy (pid {self._proc.pid})")
        assert self._proc.stdout is not None
        try:
            line = self._proc.stdout.readline().split()
        except BaseException:  # Ctrl-C or SIGTERM while it starts: the caller does not
            self.stop()  # hold the proxy yet, so nothing else would stop it
            raise
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

    def check(self) -> None:
        """Raise a one-line :class:`~luapipe.errors.LuapipeError` if the proxy stopped on
        its own (killed, crashed): every call through it would fail from then on."""
        proc = self._proc
        status = proc.poll() if proc is not None else None
        if proc is None or status is None:
            return
        how = f"exit status {status}"
        if status < 0:
            how = f"killed by signal {-status}"
            with contextlib.suppress(ValueError):
                how += f", {signal.Signals(-status).name}"
        raise LuapipeError(
            f"the delay proxy (pid {proc.pid}) stopped on its own ({how}) during the run, "
            "which stopped there"
        )

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
        try:
            self._stop(proc)
        finally:
            if self._token is not None:
                running.stopped(self._token)
                self._token = None

    @staticmethod
    def _stop(proc: subprocess.Popen[str]) -> None:
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


if __name__ == "__main__":
    _main(sys.argv[1:])
