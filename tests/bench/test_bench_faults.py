"""The bench survives faults during a run and reports them as errors, not crashes.

Each test starts a private redis-server, injects one fault from a thread while a short
``run_bench`` (or ``luapipe bench``) runs, and checks what a user sees: the run finishes,
every form has a record, failed calls are counted per form, the invariant is still
checked, and the JSON, the table and the HTML report show the errors.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner

from luapipe.bench.opworkload import resolve_workloads
from luapipe.bench.runner import BenchConfig, Progress, run_bench
from luapipe.bench.server import EmbeddedRedis
from luapipe.cli import main
from luapipe.report import render_html, render_table

from ..helpers import SPIN

FORMS = {"naive", "pipelined", "transaction", "script", "function"}
CONFIG = BenchConfig(duration_s=0.5, warmup_s=0.05, rounds=2, bystander=False)


@pytest.fixture
def server() -> Iterator[EmbeddedRedis]:
    s = EmbeddedRedis()
    s.start()
    try:
        yield s
    finally:
        s.stop()


class Fault:
    """Run ``inject(client)`` every ``every`` seconds in a thread until stopped."""

    def __init__(self, port: int, inject: Callable[[redis.Redis], None], every: float) -> None:
        self.port, self.inject, self.every = port, inject, every
        self.done = threading.Event()
        self.count = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.done.wait(self.every):
            try:
                with redis.Redis(port=self.port, socket_timeout=5) as c:
                    self.inject(c)
                self.count += 1
            except (redis.RedisError, OSError):
                pass  # the server may be down (restart) or busy: try again next time

    def __enter__(self) -> Fault:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join(timeout=10)


def _check_report(data: dict[str, Any], word: str) -> None:
    """The errors reach the JSON, the table and the HTML report."""
    assert data["errors"], "no errors recorded"
    text = render_table(data)
    html = render_html(data)
    assert ">Errors</h2>" in html
    assert word in json.dumps(data["errors"]) and word in html, word
    assert "errors in" in text or "harness retried" in text


def _by_form(result: Any) -> dict[str, Any]:
    return {r.form: r for r in result.records}


def test_script_flush_storm_loses_no_call(server: EmbeddedRedis) -> None:
    workloads = resolve_workloads(["transfer", "update_token"])
    with Fault(server.port or 0, lambda c: c.script_flush(), 0.005) as storm:
        result = run_bench(server.url, workloads, CONFIG)
    assert storm.count > 50
    transfer = [r for r in result.records if r.operation == "transfer"]
    assert {r.form for r in transfer} == FORMS
    for r in transfer:  # luapipe reloads on NOSCRIPT: no call fails, no update is lost
        assert r.errors == 0 and r.invariant_ok and r.ops > 0, (r.form, r.error_samples)
    token = {r.form: r for r in result.records if r.operation == "update_token"}
    assert token["script"].errors > 0  # the raw EVALSHA of the hand-written workload
    assert "NoScriptError" in token["script"].error_samples[0]
    assert token["naive"].errors == token["function"].errors == 0
    assert all(r.invariant_ok for r in token.values())  # failed calls were not counted
    data = result.as_dict()
    _check_report(data, "NoScriptError")
    print(
        f"\nSCRIPT FLUSH x{storm.count}: errors per form "
        f"{[(r.operation, r.form, r.errors) for r in result.records]}"
    )


def _loop_calls(c: redis.Redis) -> int:
    """Calls only the measured transfer loops send (never the harness's reset or check)."""
    stats = c.info("commandstats")
    loop_only = ("cmdstat_incrby", "cmdstat_evalsha", "cmdstat_fcall", "cmdstat_exec")
    return sum(int(stats[k]["calls"]) for k in loop_only if k in stats)


def test_server_restart_mid_run(server: EmbeddedRedis) -> None:
    """Restart the server while a timed slice is running, up to three times.

    A restart at a fixed time can land between slices, where the harness retries its own
    reset and no measured call fails (CI once saw exactly that). So the fault waits for
    the first timed slice (the progress callback) and for the loop's own traffic.
    """
    workloads = resolve_workloads(["transfer"])
    timed = threading.Event()
    restarts: list[int] = []
    last = [0]

    def restart_while_measuring(c: redis.Redis) -> None:
        if not timed.is_set() or len(restarts) >= 3:
            return
        now = _loop_calls(c)
        live, last[0] = now > last[0] > 0, now
        if live:  # the loop sent calls since the last poll: it is inside a timed slice
            server.restart()
            restarts.append(now)
            last[0] = 0  # a new process counts from zero

    def progress(p: Progress) -> None:
        if "warm-up" not in p.label:
            timed.set()  # every slice from here on is timed

    with Fault(server.port or 0, restart_while_measuring, 0.01):
        result = run_bench(server.url, workloads, CONFIG, progress)
    assert restarts, "the measured loop never ran"
    recs = _by_form(result)
    assert set(recs) == FORMS
    assert sum(r.errors for r in recs.values()) > 0
    assert all(r.invariant_detail for r in recs.values())  # still checked after the restart
    data = result.as_dict()
    word = "onnection"  # ConnectionFailed / OutcomeUnknown / connection refused
    _check_report(data, word)
    print(
        f"\nrestart x{len(restarts)}: errors per form {[(r.form, r.errors) for r in recs.values()]}"
    )


def test_client_kill_mid_run(server: EmbeddedRedis) -> None:
    workloads = resolve_workloads(["transfer"])
    kill = Fault(
        server.port or 0, lambda c: c.execute_command("CLIENT", "KILL", "TYPE", "normal"), 0.1
    )
    with kill:
        result = run_bench(server.url, workloads, CONFIG)
    recs = _by_form(result)
    assert set(recs) == FORMS and kill.count > 10
    assert sum(r.errors for r in recs.values()) > 0
    for form in ("transaction", "script", "function"):  # all or nothing, even when killed
        assert recs[form].invariant_ok, recs[form].invariant_detail
    assert all(r.invariant_detail for r in recs.values())
    _check_report(result.as_dict(), "onnection")
    print(
        f"\nCLIENT KILL x{kill.count}: errors per form "
        f"{[(r.form, r.errors) for r in recs.values()]}"
    )


def test_busy_script_during_cli_bench(server: EmbeddedRedis, tmp_path: Path) -> None:
    redis.Redis(port=server.port).config_set("busy-reply-threshold", 50)

    def busy(c: redis.Redis) -> None:
        with redis.Redis(port=server.port, socket_timeout=10) as own:
            own.eval(SPIN, 0, 300)

    out = tmp_path / "r.json"
    html = tmp_path / "r.html"
    args = ["bench", "reserve_stock", "--url", server.url, "--duration", "0.5",
            "--rounds", "2", "--warmup", "0.05", "--no-bystander",
            "--json", str(out), "--html", str(html)]  # fmt: skip
    with Fault(server.port or 0, busy, 0.4) as f:
        res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    assert f.count >= 2
    data = json.loads(out.read_text())
    recs = {r["form"]: r for r in data["records"]}
    assert set(recs) == FORMS
    assert sum(r["errors"] for r in recs.values()) > 0
    assert all(r["invariant_ok"] for r in recs.values())  # BUSY calls did not run
    assert "BUSY" in json.dumps(data["errors"])
    assert "BUSY" in html.read_text() and ">Errors</h2>" in html.read_text()
    assert "errors in reserve_stock" in res.output
    print(f"\nBUSY x{f.count}: errors per form {[(k, r['errors']) for k, r in recs.items()]}")
