"""Interrupts and a server that dies (issue 16), as a user meets them: a real ``luapipe``
process. Ctrl-C (SIGINT) or SIGTERM during ``bench``/``demo`` exits 130 (143) with one line
naming what it stopped, and every process named is gone; a private server that stops on
its own is reported as such, with how it stopped."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

RUNNING = re.compile(r"\(pid (\d+)\)")


class Luapipe:
    """``python -m luapipe ARGS`` with its stderr read line by line as it comes."""

    def __init__(self, *args: str, cwd: Path) -> None:
        env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "luapipe", *args],
            cwd=cwd,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.put(line.rstrip("\n"))

    def wait_for(self, text: str, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.2)
            except queue.Empty:
                assert self.proc.poll() is None, f"exited {self.proc.returncode}: {self.seen}"
                continue
            self.seen.append(line)
            if text in line:
                return line
        raise AssertionError(f"no {text!r} in {self.seen}")

    def finish(self, timeout: float = 60) -> tuple[int, list[str]]:
        code = self.proc.wait(timeout=timeout)
        time.sleep(0.1)  # the reader thread drains the pipe
        while not self.lines.empty():
            self.seen.append(self.lines.get())
        return code, self.seen

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.parametrize(
    ("command", "sig", "code", "stopped"),
    [
        (
            ["bench", "--rtt", "0.5", "--clients", "2", "--duration", "60", "--warmup", "0",
             "--rounds", "1"],
            signal.SIGINT,
            130,
            r"interrupted by Ctrl-C \(SIGINT\); stopped the private redis-server \(pid \d+\), "
            r"the delay proxy \(pid \d+\), the bystander probe \(pid \d+\) and 2 benchmark "
            r"workers$",
        ),
        (
            ["demo", "--duration", "30", "--out", "{tmp}/demo-out"],
            signal.SIGTERM,
            143,
            # the demo runs no bystander probe (its table does not show one)
            r"interrupted by SIGTERM; stopped the private redis-server \(pid \d+\) and the "
            r"delay proxy \(pid \d+\)$",
        ),
    ],
)  # fmt: skip
def test_an_interrupt_stops_everything_and_says_what_in_one_line(
    command: list[str], sig: signal.Signals, code: int, stopped: str, tmp_path: Path
) -> None:
    run = Luapipe(*(a.format(tmp=tmp_path) for a in command), cwd=tmp_path)
    try:
        run.wait_for("started a private redis-server")
        if command[0] == "bench":  # the five warm-ups, then a timed slice of 60 s
            for _ in range(5):
                run.wait_for("warm-up")
        else:
            run.wait_for("progress")
        time.sleep(1.0)  # inside a slice: its workers are running
        run.proc.send_signal(sig)
        exit_code, lines = run.finish()
    finally:
        run.kill()
    assert exit_code == code, lines
    last = lines[-1]
    assert last.startswith("error: ") and re.search(stopped, last), lines
    assert not any("Traceback" in ln or "Aborted" in ln for ln in lines), lines
    assert len([ln for ln in lines if ln.startswith("error: ")]) == 1, lines
    for pid in RUNNING.findall(last):  # each process it says it stopped is gone
        assert _gone(int(pid)), (pid, last)


def test_a_private_server_that_dies_on_its_own_is_reported_as_such(tmp_path: Path) -> None:
    """Not "connection lost after the request was sent ... Connection refused": the server
    stopped, how, and the run stopped with it (after the harness's patience, ~10 s)."""
    run = Luapipe("bench", "--duration", "60", "--rounds", "100", "--warmup", "0", cwd=tmp_path)
    try:
        started = run.wait_for("started a private redis-server")
        pid = int(RUNNING.findall(started)[0])
        address = started.split(" on ", 1)[1].split(" ", 1)[0]
        run.wait_for("progress")
        os.kill(pid, signal.SIGKILL)
        exit_code, lines = run.finish(timeout=90)
    finally:
        run.kill()
    assert exit_code == 1, lines
    assert lines[-1] == (
        f"error: the private redis-server on {address} (pid {pid}) stopped on its own "
        "(killed by signal 9, SIGKILL) during the run, which stopped there"
    ), lines
    assert not any("Traceback" in ln for ln in lines), lines
