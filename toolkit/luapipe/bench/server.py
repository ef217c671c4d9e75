"""A private redis-server: temp dir, free loopback port, no persistence, stopped by its PID.

Used by ``luapipe bench``/``verify`` without ``--url`` and by the test fixtures::

    with EmbeddedRedis() as server:
        client = redis.Redis.from_url(server.url)

The binary is ``$LUAPIPE_REDIS_SERVER`` if set (any engine that answers to redis-server's
options: a Redis or Valkey build), else ``redis-server`` on PATH; a cluster is formed with
``$LUAPIPE_REDIS_CLI``, else ``redis-cli``. The engine matrix (``make test-engines``) runs
the same tests on every engine this way.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from luapipe.bench import running
from luapipe.errors import EnvironmentProblem

__all__ = [
    "CLI_ENV",
    "SERVER_ENV",
    "EmbeddedRedis",
    "ServerProcess",
    "find_redis_cli",
    "find_redis_server",
    "free_port",
]

#: environment variables naming the server and redis-cli binaries (the engine matrix)
SERVER_ENV = "LUAPIPE_REDIS_SERVER"
CLI_ENV = "LUAPIPE_REDIS_CLI"

INSTALL_HINT = (
    "redis-server not found on PATH; install it (Debian/Ubuntu: "
    "apt-get install -y redis-server redis-tools) or pass --url"
)
CLI_HINT = "redis-cli not found on PATH; install it (Debian: apt-get install -y redis-tools)"


def _binary(variable: str | None, program: str, hint: str) -> str:
    """``$variable`` if set (it must name an executable), else ``program`` on PATH."""
    named = os.environ.get(variable) if variable else None
    if named:
        found = shutil.which(named)
        if found is None:
            raise EnvironmentProblem(f"{variable}={named}: not an executable file")
        return found
    found = shutil.which(program)
    if found is None:
        raise EnvironmentProblem(hint)
    return found


def find_redis_server(program: str = "redis-server") -> str:
    """The server binary (``$LUAPIPE_REDIS_SERVER``, else ``program`` on PATH), or a
    one-line :class:`EnvironmentProblem`."""
    if program != "redis-server":
        return _binary(None, program, f"{program} not found on PATH")
    return _binary(SERVER_ENV, program, INSTALL_HINT)


def find_redis_cli() -> str:
    """``$LUAPIPE_REDIS_CLI``, else ``redis-cli`` on PATH (it forms clusters)."""
    return _binary(CLI_ENV, "redis-cli", CLI_HINT)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (the caller retries if it is taken)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class ServerProcess:
    """A running server: where it listens and which process it is."""

    host: str
    port: int
    pid: int
    directory: str

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


def _ping(host: str, port: int, timeout: float = 0.2) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.sendall(b"PING\r\n")
            data = s.recv(64)
    except OSError:
        return False
    # +PONG, or -NOAUTH / -LOADING: the server is up and speaking RESP either way.
    return data.startswith((b"+PONG", b"-NOAUTH", b"-ERR"))


class EmbeddedRedis:
    """Start a private redis-server; ``stop()`` ends exactly that process (by its PID)."""

    def __init__(
        self,
        extra_args: Sequence[str] = (),
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        directory: str | None = None,
        startup_timeout: float = 10.0,
    ) -> None:
        self.extra_args = tuple(extra_args)
        self.host = host
        self.port = port
        self._own_dir = directory is None
        self.directory = directory or tempfile.mkdtemp(prefix="luapipe-redis-")
        self.startup_timeout = startup_timeout
        self._proc: subprocess.Popen[bytes] | None = None
        self._token: int | None = None
        self.info: ServerProcess | None = None

    def _command(self, port: int) -> list[str]:
        return [
            find_redis_server(),
            "--port", str(port),
            "--bind", self.host,
            "--save", "",
            "--appendonly", "no",
            "--dir", self.directory,
            "--logfile", str(Path(self.directory) / f"redis-{port}.log"),
            "--daemonize", "no",
            "--repl-diskless-sync-delay", "0",  # replicas (tests, clusters) sync at once
            *self.extra_args,
        ]  # fmt: skip

    def start(self) -> ServerProcess:
        """Start the server (retrying on a port race) and wait until it answers PING."""
        attempts = 1 if self.port is not None else 5
        last = ""
        for _ in range(attempts):
            port = self.port if self.port is not None else free_port(self.host)
            proc = subprocess.Popen(
                self._command(port),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                # its own session: a Ctrl-C at the terminal reaches luapipe, which stops this
                # server itself (after the run's clean-up), not the server behind its back
                start_new_session=True,
            )
            deadline = time.monotonic() + self.startup_timeout
            try:
                while time.monotonic() < deadline:
                    if proc.poll() is not None:
                        break
                    if _ping(self.host, port):
                        self._proc = proc
                        self.port = port
                        self.info = ServerProcess(self.host, port, proc.pid, self.directory)
                        what = f"the private redis-server (pid {proc.pid})"
                        self._token = running.started(what)
                        return self.info
                    time.sleep(0.01)
            except BaseException:  # Ctrl-C or SIGTERM while it starts: no one else knows
                _terminate(proc)  # this process yet, so stop it here, and remove our temp
                self.stop()  # dir (the caller's `with` never reached __exit__)
                raise
            last = self._failure(proc, port)
            _terminate(proc)
        raise EnvironmentProblem(f"redis-server did not start on {self.host}: {last}")

    def _failure(self, proc: subprocess.Popen[bytes], port: int) -> str:
        log = Path(self.directory) / f"redis-{port}.log"
        text = log.read_text(errors="replace") if log.exists() else ""
        if proc.stderr is not None and proc.poll() is not None:
            text += proc.stderr.read().decode(errors="replace")
        lines = [ln for ln in text.splitlines() if ln.strip()]
        return lines[-1] if lines else f"no answer on port {port}"

    def stop(self) -> None:
        """Stop the process this object started (by PID) and remove its temp dir."""
        self._end()
        if self._own_dir:
            shutil.rmtree(self.directory, ignore_errors=True)

    def _end(self) -> None:
        if self._proc is not None:
            _terminate(self._proc)
            self._proc = None
        if self._token is not None:
            running.stopped(self._token)
            self._token = None

    def death(self) -> str | None:
        """How the server stopped on its own: ``stopped on its own (killed by signal 9,
        SIGKILL)``, or ``... (exit status 1; its last log line: ...)``; None while it runs
        (and after :meth:`stop`, which is not on its own)."""
        if self._proc is None:
            return None
        status = self._proc.poll()
        if status is None:
            return None
        if status < 0:
            try:
                name = f", {signal.Signals(-status).name}"
            except ValueError:
                name = ""
            return f"stopped on its own (killed by signal {-status}{name})"
        last = self._failure(self._proc, self.port) if self.port else ""
        said = f"; its last log line: {last}" if last and not last.startswith("no answer") else ""
        return f"stopped on its own (exit status {status}{said})"

    def restart(self) -> ServerProcess:
        """Stop and start again on the same port (the cache and data are gone)."""
        self._end()
        for _ in range(100):  # the old socket may linger a moment (self.port is kept)
            try:
                return self.start()
            except EnvironmentProblem:
                time.sleep(0.05)
        return self.start()

    @property
    def pid(self) -> int:
        assert self._proc is not None, "server not started"
        return self._proc.pid

    @property
    def url(self) -> str:
        assert self.info is not None, "server not started"
        return self.info.url

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _terminate(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
    if proc.stderr is not None:
        with contextlib.suppress(OSError):
            proc.stderr.close()
