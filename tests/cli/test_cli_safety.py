"""`luapipe bench`/`demo`/`verify` never harm the user's server and never leave processes.

- With ``--url`` a benchmark writes only ``luapipe:bench:`` keys and deletes them at the end
  (after an error too); the user's keys, even ones named like the old benchmark keys, stay.
- Without ``--url`` it uses a private server, even when ``REDIS_URL`` is set.
- SIGTERM (a CI cancel, ``timeout``) stops the private redis-server, the RTT proxy and every
  worker, as Ctrl-C does.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner

from luapipe.bench.runner import BenchConfig, run_bench
from luapipe.bench.server import EmbeddedRedis, ServerProcess
from luapipe.bench.workloads import UpdateTokenWorkload
from luapipe.cli import main

from ..conftest import EXAMPLES_DIR

LUAPIPE = str(Path(sys.executable).parent / "luapipe")
SHORT = ["--duration", "0.2", "--rounds", "1", "--warmup", "0.02"]
#: the user's data, named like the keys the benchmark used to write (and FLUSHDB)
USER_KEYS = {
    "myimportant": "keep me",
    "login:": "x",
    "bystander:1": "y",
    "{bench0}:stock": "7",
    "{luapipe:bench:x": "looks like ours, is not",
    "luapipe:benchmark": "z",
}
#: a user's own library of the benchmark's name, with a function of the workload's name
USER_LIBRARY = (
    "#!lua name=luapipe_bench\n"
    "redis.register_function('update_token', function(keys, args) return 'mine' end)\n"
)


@pytest.fixture(scope="module")
def users_server() -> Iterator[ServerProcess]:
    """A server standing for the user's own Redis, with data on it."""
    server = EmbeddedRedis()
    try:
        yield server.start()
    finally:
        server.stop()


@pytest.fixture
def users(users_server: ServerProcess) -> Iterator[redis.Redis]:
    client = redis.Redis(host=users_server.host, port=users_server.port, decode_responses=True)
    client.flushall()
    client.mset(USER_KEYS)
    try:
        yield client
    finally:
        client.close()


def _keys(client: redis.Redis) -> dict[str, Any]:
    return {k: client.get(k) for k in client.scan_iter("*")}


@pytest.mark.parametrize("bystander", [True, False])
def test_bench_with_url_keeps_the_users_keys_and_deletes_its_own(
    users: redis.Redis, users_server: ServerProcess, bystander: bool
) -> None:
    flushes = _flushes(users)
    args = ["bench", "update_token", "reserve_stock", "--url", users_server.url, *SHORT]
    res = CliRunner().invoke(main, args + ([] if bystander else ["--no-bystander"]))
    assert res.exit_code == 0, res.output
    assert _keys(users) == USER_KEYS  # nothing of the user's touched, nothing of ours left
    assert _flushes(users) == flushes
    assert users.function_list() == []  # luapipe_reserve_stock and luapipe_bench are gone


def test_bench_puts_back_a_users_library_of_the_same_name(users: redis.Redis) -> None:
    """A library called luapipe_bench, with a function called update_token, is the user's:
    the run neither fails on the name nor leaves the library replaced or deleted."""
    users.function_load(USER_LIBRARY)
    url = f"redis://127.0.0.1:{users.connection_pool.connection_kwargs['port']}/0"
    res = CliRunner().invoke(main, ["bench", "update_token", "--url", url, *SHORT])
    assert res.exit_code == 0, res.output
    assert users.fcall("update_token", 0) == "mine"
    (library,) = users.function_list(withcode=True)
    info = dict(zip(library[0::2], library[1::2], strict=True))  # RESP2: a flat list
    assert info["library_code"] == USER_LIBRARY
    assert _keys(users) == USER_KEYS


def _flushes(client: redis.Redis) -> tuple[int, int]:
    stats = client.info("commandstats")
    return tuple(  # type: ignore[return-value]
        int(stats.get(f"cmdstat_{c}", {}).get("calls", 0)) for c in ("flushdb", "flushall")
    )


@dataclass(frozen=True)
class FailsLater(UpdateTokenWorkload):
    """update_token whose invariant check breaks the run (not a transient error)."""

    def check_invariant(self, client: redis.Redis, ops_done: int) -> tuple[bool, str]:
        raise KeyboardInterrupt  # as an interrupt mid-run would


def test_a_run_that_stops_early_still_deletes_its_keys(
    users: redis.Redis, users_server: ServerProcess
) -> None:
    config = BenchConfig(duration_s=0.1, warmup_s=0.02, rounds=1)
    with pytest.raises(KeyboardInterrupt):
        run_bench(users_server.url, [FailsLater()], config)
    assert _keys(users) == USER_KEYS


def _commands(client: redis.Redis) -> dict[str, int]:
    """Calls per command on the server, without the INFO calls that read them."""
    stats = client.info("commandstats")
    return {k: int(v["calls"]) for k, v in stats.items() if k != "cmdstat_info"}


def test_bench_without_url_ignores_redis_url(
    users: redis.Redis, users_server: ServerProcess
) -> None:
    before = _commands(users)
    args = ["bench", "ping", *SHORT, "--no-bystander"]
    res = CliRunner().invoke(main, args, env={"REDIS_URL": users_server.url})
    assert res.exit_code == 0, res.output
    assert "started a private redis-server" in res.output
    assert _commands(users) == before  # the user's server saw no command at all
    assert _keys(users) == USER_KEYS


def test_bench_help_says_redis_url_is_not_used() -> None:
    for command in ("bench", "demo", "verify"):
        text = CliRunner().invoke(main, [command, "--help"]).output
        assert "REDIS_URL is not used" in " ".join(text.split()), command


# --- SIGTERM ------------------------------------------------------------------------------


def _parent_of(pid: int) -> tuple[int, str] | None:
    """(parent pid, state) of a process, None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return int(fields[1]), fields[0]


def _alive(pid: int) -> bool:
    info = _parent_of(pid)
    return info is not None and info[1] != "Z"


def _descendants(root: int) -> set[int]:
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            info = _parent_of(int(entry.name))
            if info is not None and info[1] != "Z":
                parents[int(entry.name)] = info[0]
    found, frontier = set(), {root}
    while frontier:
        frontier = {p for p, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


class Cli:
    """``luapipe ARGS`` in its own process, its stderr lines read by a thread."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [LUAPIPE, *args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: set[int] = set()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.put(line)

    def wait_for(self, pattern: str, timeout: float = 30.0) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.1)
            except queue.Empty:
                assert self.proc.poll() is None, f"exited early: {self.proc.returncode}"
                continue
            found = re.search(pattern, line)
            if found:
                return found
        raise AssertionError(f"no line matching {pattern!r} within {timeout} s")

    def children(self) -> set[int]:
        self.seen |= _descendants(self.proc.pid)
        return self.seen

    def stop(self) -> None:
        """Whatever happened: end the process and what it started (by PID)."""
        for pid in (self.proc.pid, *self.children()):
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        self.proc.wait(timeout=10)


def _terminate_and_check(cli: Cli, started: set[int]) -> None:
    t = time.monotonic()
    cli.proc.send_signal(signal.SIGTERM)
    cli.proc.wait(timeout=15)
    assert time.monotonic() - t < 10, "took too long to stop"
    deadline = time.monotonic() + 5  # reaped by their parent before it exited
    while any(_alive(p) for p in started) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = sorted(p for p in started if _alive(p))
    assert not left, f"still running after SIGTERM: {left}"


def test_sigterm_during_verify_stops_the_private_server() -> None:
    spec = str(EXAMPLES_DIR / "operations" / "reserve_stock.toml")
    cli = Cli("verify", spec, "--cases", "100000")
    try:
        pid = int(cli.wait_for(r"private redis-server .*\(pid (\d+)\)").group(1))
        time.sleep(0.3)  # well into the cases
        assert _alive(pid)
        _terminate_and_check(cli, {pid, *cli.children()})
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    finally:
        cli.stop()


def test_sigterm_during_bench_stops_server_proxy_and_workers() -> None:
    args = ["bench", "ping", "--rtt", "1", "--clients", "2", "--duration", "60", "--rounds", "1"]
    cli = Cli(*args, "--warmup", "30")
    try:
        pid = int(cli.wait_for(r"private redis-server .*\(pid (\d+)\)").group(1))
        deadline = time.monotonic() + 30
        # the server, the RTT proxy and two workers of the (30 s) warm-up
        while len(cli.children()) < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        started = set(cli.children())
        assert pid in started and len(started) >= 4, started
        _terminate_and_check(cli, started)
    finally:
        cli.stop()
