"""``--tasks N``: N asyncio tasks per client process, and the auto-pipelined forms."""

from __future__ import annotations

import pytest
import redis
from click.testing import CliRunner

from luapipe.bench.runner import BenchConfig, run_bench
from luapipe.bench.server import ServerProcess
from luapipe.bench.workloads import UpdateTokenWorkload
from luapipe.cli import main


@pytest.fixture
def url(redis_server: ServerProcess) -> str:
    redis.Redis(host=redis_server.host, port=redis_server.port).flushall()
    return redis_server.url


def test_tasks_run_every_form_and_its_auto_pipelined_twin(url: str) -> None:
    config = BenchConfig(duration_s=0.3, warmup_s=0.02, rounds=1, bystander=False, tasks=16)
    result = run_bench(url, [UpdateTokenWorkload()], config)
    by_form = {r.form: r for r in result.records}
    assert set(by_form) == {
        "naive", "pipelined", "transaction", "script", "function",
        "auto naive", "auto pipelined", "auto script", "auto function",
    }  # fmt: skip
    for form, r in by_form.items():
        assert r.errors == 0 and r.invariant_ok, (form, r.error_samples, r.invariant_detail)
        assert r.ops > 0 and r.tasks == 16
        assert r.model_latency_ms is None  # the model is of one call at a time
    assert by_form["script"].round_trips_per_op == pytest.approx(1, rel=0.05)
    assert by_form["naive"].round_trips_per_op == pytest.approx(5, rel=0.05)
    for form in ("auto script", "auto function", "auto pipelined"):
        assert by_form[form].round_trips_per_op < 0.5, form  # the tasks shared writes
    assert by_form["auto script"].atomic and not by_form["auto pipelined"].atomic


def test_tasks_refuse_the_open_loop_and_batches() -> None:
    out = CliRunner().invoke(main, ["bench", "--tasks", "4", "--rate", "100"])
    assert out.exit_code == 2 and "--tasks > 1" in out.output
