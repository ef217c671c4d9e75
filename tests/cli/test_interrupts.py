"""Interrupts and a server that dies (issue 16), as a user meets them: a real ``luapipe``
process. Ctrl-C (SIGINT) or SIGTERM during ``bench``/``demo`` exits 130 (143) with one line
naming what it stopped, and every process named is gone; a private server that stops on
its own is reported as such, with how it stopped."""

from __future__ import annotations

import contextlib
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
        self.proc = subprocess.Popen(  # a crash prints where it happened (shown by asserts)
            [sys.executable, "-X", "faulthandler", "-m", "luapipe", *args],
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
        (  # the terminal closed (or kill -HUP): luapipe ended at once, and the private
           # redis-server (which ignores SIGHUP) ran on
            ["bench", "--clients", "2", "--duration", "60", "--warmup", "0", "--rounds", "1",
             "--no-bystander"],
            signal.SIGHUP,
            129,
            r"interrupted by SIGHUP; stopped the private redis-server \(pid \d+\) and 2 "
            r"benchmark workers$",
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


def test_an_interrupt_while_the_delay_proxy_starts_stops_it() -> None:
    """Ctrl-C while the proxy process was still starting (it imports luapipe, ~0.5 s) left
    it running: start() raised before the caller held the proxy, and the one line said
    "could not stop the delay proxy (pid N)". start() stops it itself, as the private
    server's start does."""
    from luapipe.bench import running
    from luapipe.bench.rttproxy import RttProxy

    seen: list[str] = []

    def interrupt_once_started() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            seen[:] = [w for w in running.now() if "delay proxy" in w]
            if seen:
                os.kill(os.getpid(), signal.SIGINT)  # the main thread waits for its banner
                return
            time.sleep(0.001)

    proxy = RttProxy("127.0.0.1", 1)
    threading.Thread(target=interrupt_once_started, daemon=True).start()
    try:
        with pytest.raises(KeyboardInterrupt):
            proxy.start()
            time.sleep(30)  # not reached when the interrupt lands inside start()
        assert seen, "the proxy never started"
        pid = int(RUNNING.findall(seen[0])[0])
        assert _gone(pid) and not [w for w in running.now() if "delay proxy" in w], seen
    finally:
        proxy.stop()  # (what the planted bug leaves running)


#: ``luapipe ARGS`` with a Ctrl-C that lands in the first fork's after-fork hooks (Python
#: runs logging's lock release there, where an exception is "ignored"), where a terminal's
#: Ctrl-C lands now and then
FORK_CTRL_C = """
import os, signal, sys
fired = []
def ctrl_c():
    if not fired:
        fired.append(1)
        os.kill(os.getpid(), signal.SIGINT)
os.register_at_fork(after_in_parent=ctrl_c)
from luapipe.cli import main
main(sys.argv[1:], prog_name="luapipe")
"""


@pytest.mark.parametrize(
    ("forked", "args"),
    [
        ("2 benchmark workers", ["--clients", "2", "--no-bystander"]),
        ("the bystander probe", ["--clients", "1"]),
    ],
)
def test_a_ctrl_c_while_forking_is_not_lost(forked: str, args: list[str], tmp_path: Path) -> None:
    """The KeyboardInterrupt raised inside a fork hook was printed as "Exception ignored
    in: <function _releaseLock>" and lost; the handler had already set both signals to be
    ignored, so the benchmark ran to its end and exited 0, deaf to Ctrl-C and SIGTERM."""
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    cmd = [sys.executable, "-c", FORK_CTRL_C, "bench", "--duration", "60", "--warmup", "0",
           "--rounds", "1", *args]  # fmt: skip
    proc = subprocess.Popen(
        cmd, cwd=tmp_path, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True
    )
    try:
        _, err = proc.communicate(timeout=40)
    except subprocess.TimeoutExpired:  # deaf: stop it and its forks (its process group),
        os.killpg(proc.pid, signal.SIGKILL)  # then its server, by the pid it printed
        _, err = proc.communicate()
        for pid in RUNNING.findall(err):
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGTERM)
    lines = err.splitlines()
    assert proc.returncode == 130, lines
    assert not any("Traceback" in ln or "ignored" in ln for ln in lines), lines
    assert lines[-1].startswith("error: interrupted by Ctrl-C (SIGINT); stopped the private")
    assert forked in lines[-1], lines
    for pid in RUNNING.findall(lines[-1]):
        assert _gone(int(pid)), (pid, lines[-1])


def _children(pid: int) -> dict[int, str]:
    """{pid: command line} of the processes whose parent is ``pid``."""
    out = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid:
                cmdline = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ")
                out[int(stat.parent.name)] = cmdline.decode(errors="replace")
    return out


def test_a_delay_proxy_that_dies_on_its_own_is_reported_as_such(tmp_path: Path) -> None:
    """The proxy killed during a timed slice: every call through it failed, each slice
    waited out its probe's patience, and the final calibration wrote to the dead proxy's
    pipe; the BrokenPipeError was taken for output piped into `head`: exit 0, nothing
    printed, no table. Now the run stops at the next slice and says what stopped, as it
    does for the private server."""
    run = Luapipe("bench", "--rtt", "0.5", "--duration", "60", "--rounds", "20",
                  "--warmup", "0", "--no-bystander", cwd=tmp_path)  # fmt: skip
    server = 0
    try:
        server = int(RUNNING.findall(run.wait_for("started a private redis-server"))[0])
        run.wait_for("rtt=0.5")
        proxies = [p for p, cmd in _children(run.proc.pid).items() if "rttproxy" in cmd]
        assert len(proxies) == 1, _children(run.proc.pid)
        os.kill(proxies[0], signal.SIGKILL)
        exit_code, lines = run.finish(timeout=90)
    finally:
        run.kill()
        if server and not _gone(server):  # killed with luapipe (the planted bug): stop it
            os.kill(server, signal.SIGTERM)
    assert exit_code == 1, lines
    assert lines[-1] == (
        f"error: the delay proxy (pid {proxies[0]}) stopped on its own (killed by signal 9, "
        "SIGKILL) during the run, which stopped there"
    ), lines
    assert not any("Traceback" in ln for ln in lines), lines


#: ``luapipe ARGS`` started as its console script is, with a signal sent to itself when
#: MODULE is first imported: an interrupt that lands inside the command line's imports
#: (~0.5 s of start-up, ~1 s on a busy machine), where a terminal's Ctrl-C lands when a
#: user changes their mind at once
SIGNAL_WHILE_IMPORTING = """
import os, signal, sys
module, sig, how = sys.argv[1:4]
class Hook:
    def find_spec(self, name, path=None, target=None):
        if name == module:
            os.kill(os.getpid(), getattr(signal, sig))
        return None
sys.meta_path.insert(0, Hook())
sys.argv[1:] = sys.argv[4:]
if how == "console script":
    from importlib.metadata import entry_points
    (script,) = entry_points(group="console_scripts", name="luapipe")
    sys.exit(script.load()())
import runpy
runpy.run_module("luapipe", run_name="__main__", alter_sys=True)
"""


@pytest.mark.parametrize("how", ["console script", "python -m luapipe"])
@pytest.mark.parametrize(
    ("module", "sig", "code", "name"),
    [
        ("luapipe.cli._common", "SIGINT", 130, "Ctrl-C (SIGINT)"),
        ("redis", "SIGTERM", 143, "SIGTERM"),
        ("luapipe.scripts.registry", "SIGINT", 130, "Ctrl-C (SIGINT)"),
    ],
)
def test_an_interrupt_while_the_command_starts_is_one_line(
    how: str, module: str, sig: str, code: int, name: str, tmp_path: Path
) -> None:
    """Ctrl-C while the command imported its modules printed a KeyboardInterrupt traceback
    (the handler was installed by the command itself, once everything was imported), and
    SIGTERM ended it without a word. Now the entry point takes both signals first thing."""
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    done = subprocess.run(
        [sys.executable, "-c", SIGNAL_WHILE_IMPORTING, module, sig, how, "scripts", "list"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == code, done.stderr
    assert done.stderr == f"error: interrupted by {name}\n", done.stderr
    assert done.stdout == ""


def test_an_interrupt_while_the_command_line_is_read_is_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ctrl-C while click read the main group's options (here --version, which looks the
    version up) was click's own: a blank line, "Aborted!" and exit code 1."""
    import importlib.metadata

    from click.testing import CliRunner

    from luapipe.cli import main

    def interrupted(*args: object, **kwargs: object) -> str:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)  # the handler runs before this ends
        raise AssertionError("not interrupted")

    monkeypatch.setattr(importlib.metadata, "version", interrupted)
    res = CliRunner().invoke(main, ["--version"])
    assert res.exit_code == 130, res.output
    assert res.output == "error: interrupted by Ctrl-C (SIGINT)\n"
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # given back


def _at_a_terminal(args: list[str], typed: bytes, cwd: Path) -> tuple[int, str]:
    """``luapipe ARGS`` on a pseudo-terminal, ``typed`` at it once it has asked: its exit
    code and everything the terminal showed."""
    import pty
    import select

    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    pid, fd = pty.fork()
    if pid == 0:  # the child: luapipe on the terminal
        os.chdir(cwd)
        os.execve(sys.executable, [sys.executable, "-m", "luapipe", *args], env)
    shown = b""
    deadline = time.monotonic() + 30
    sent = False
    while time.monotonic() < deadline:
        if not sent and (b"? [y/N]: " in shown or b"Redis URL: " in shown):
            time.sleep(0.2)  # the question waits for its answer
            os.write(fd, typed)
            sent = True
        ready, _, _ = select.select([fd], [], [], 0.05)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # the terminal closed: luapipe has exited
                break
            if not chunk:
                break
            shown += chunk
    with contextlib.suppress(ProcessLookupError):  # still waiting for an answer: stop it
        os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    return os.waitstatus_to_exitcode(status), shown.decode(errors="replace")


def test_ctrl_c_at_a_question_is_an_interrupt(tmp_path: Path) -> None:
    """Ctrl-C at scripts flush's question read as no answer: "not flushed: no answer to the
    question", exit code 1. It is an interrupt like any other: one line, exit code 130."""
    from luapipe.bench.server import EmbeddedRedis

    with EmbeddedRedis() as server:
        code, shown = _at_a_terminal(["scripts", "flush", "--url", server.url], b"\x03", tmp_path)
    assert code == 130, shown
    assert shown.endswith("^C\r\nerror: interrupted by Ctrl-C (SIGINT)\r\n"), shown


def test_a_url_typed_at_the_terminal_is_asked_for_and_not_shown(tmp_path: Path) -> None:
    """--url-file - on a terminal waited without a word, and echoed the URL (its password)
    as it was typed. It asks, hides what is typed, and Ctrl-C there is an interrupt."""
    from luapipe.bench.server import EmbeddedRedis

    with EmbeddedRedis(["--requirepass", "Typed-S3cret"]) as server:
        url = f"redis://:Typed-S3cret@127.0.0.1:{server.port}/0"
        code, shown = _at_a_terminal(
            ["scripts", "kill", "--url-file", "-"], url.encode() + b"\r", tmp_path
        )
        assert (code, shown) == (0, "Redis URL: \r\nno script or function running\r\n")
        code, shown = _at_a_terminal(["scripts", "kill", "--url-file", "-"], b"\x03", tmp_path)
        assert (code, shown) == (130, "Redis URL: \r\nerror: interrupted by Ctrl-C (SIGINT)\r\n")
