"""The embedded redis-server and the RTT proxy stop cleanly when interrupted mid-start."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import luapipe.bench.server as server_mod
from luapipe.bench.server import EmbeddedRedis


def test_an_interrupt_while_the_server_starts_stops_that_server(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ctrl-C or SIGTERM (the CLI turns it into KeyboardInterrupt) during the PING wait:
    the process is not yet known to anyone who could stop it later."""
    started: list[subprocess.Popen[Any]] = []
    real_popen = subprocess.Popen

    def recording_popen(*args: Any, **kwargs: Any) -> subprocess.Popen[Any]:
        proc = real_popen(*args, **kwargs)
        started.append(proc)
        return proc

    def interrupted(host: str, port: int) -> bool:
        raise KeyboardInterrupt

    monkeypatch.setattr(server_mod.subprocess, "Popen", recording_popen)
    monkeypatch.setattr(server_mod, "_ping", interrupted)
    server = EmbeddedRedis()
    try:
        with pytest.raises(KeyboardInterrupt):
            server.start()
        assert len(started) == 1 and started[0].poll() is not None  # stopped, by its PID
        assert not Path(server.directory).exists()  # and its temp dir is gone
    finally:  # should the assertion fail, the test itself leaves nothing running
        for proc in started:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_the_proxy_process_exits_quietly_when_its_parent_has_gone() -> None:
    """A bench stopped while the proxy starts closes the proxy's stdout: no traceback."""
    boot = "import sys; from luapipe.bench.rttproxy import _main; _main(sys.argv[1:])"
    proc = subprocess.Popen(
        [sys.executable, "-c", boot, "127.0.0.1:1", "1.0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the parent went away before reading "listening ..."
    err = proc.stderr.read()
    assert proc.wait(timeout=20) == 0
    assert b"Traceback" not in err and b"Exception ignored" not in err, err.decode()
