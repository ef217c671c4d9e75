"""The runner: measured round trips/commands, errors counted not raised, invariants reported."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import fakeredis
import pytest
import redis

from luapipe.bench.counting import counters, counting_client
from luapipe.bench.manifest import refuse_fake
from luapipe.bench.results import Record
from luapipe.bench.runner import BenchConfig, retarget, run_bench
from luapipe.bench.server import ServerProcess
from luapipe.bench.stats import LatencyHistogram
from luapipe.bench.verdict.model import FormCost, crossovers, fit_cost
from luapipe.bench.verdict.summary import crossovers_at_stake as summarize_crossovers
from luapipe.bench.workloads import KeyChooser, OpFn, PingWorkload, UpdateTokenWorkload
from luapipe.errors import EnvironmentProblem
from luapipe.report.jsonio import REQUIRED_RECORD_FIELDS

QUICK = BenchConfig(duration_s=0.2, warmup_s=0.05, rounds=2, bystander=False, patience_s=0.5)


@pytest.fixture
def url(redis_server: ServerProcess) -> str:
    redis.Redis(host=redis_server.host, port=redis_server.port).flushall()
    return redis_server.url


def test_update_token_forms_measure_round_trips_and_commands(url: str) -> None:
    result = run_bench(url, [UpdateTokenWorkload()], QUICK)
    by_form = {r.form: r for r in result.records}
    assert set(by_form) == {"naive", "pipelined", "transaction", "script", "function"}
    expected = {  # (round trips, commands sent) per op
        "naive": (5, 5),
        "pipelined": (1, 5),
        "transaction": (1, 7),
        "script": (1, 1),
        "function": (1, 1),
    }
    for form, (rt, cmds) in expected.items():
        r = by_form[form]
        assert r.round_trips_per_op == pytest.approx(rt, rel=0.01), form
        assert r.commands_per_op == pytest.approx(cmds, rel=0.01), form
        assert r.server_commands_per_op >= 5 - 0.01  # the script's inner calls count too
        assert r.server_usec_per_op > 0
        assert r.errors == 0 and r.invariant_ok, r.invariant_detail
        assert r.ops > 0 and r.ops_per_sec > 0
        assert r.model_latency_ms is not None
    record = result.as_dict()["records"][0]
    assert all(f in record for f in REQUIRED_RECORD_FIELDS)
    assert set(record["latency_ms"]) >= {"p50", "p90", "p99", "p999", "max"}
    assert result.manifest["redis"]["version"]
    assert result.manifest["spec"]["workloads"][0]["name"] == "update_token"


@dataclass(frozen=True)
class WrongType:
    """Every call hits a WRONGTYPE error on the server."""

    name: str = "wrongtype"
    forms: tuple[str, ...] = ("naive",)
    batch: int = 1

    def describe(self) -> dict[str, Any]:
        return {"name": self.name}

    def reset(self, client: redis.Redis) -> None:
        client.set("wrongtype:k", "a string")

    def prepare(self, client: redis.Redis, form: str) -> None:
        pass

    def op_fn(self, client: redis.Redis, form: str, worker: int, seed: int) -> OpFn:
        def call(i: int) -> int:
            client.lpush("wrongtype:k", 1)
            return 0

        return call

    def check_invariant(self, client: redis.Redis, ops_done: int) -> tuple[bool, str]:
        return True, "nothing to check"


@dataclass(frozen=True)
class Lossy(WrongType):
    """Runs fine, but its invariant says updates were lost."""

    name: str = "lossy"

    def op_fn(self, client: redis.Redis, form: str, worker: int, seed: int) -> OpFn:
        return lambda i: int(bool(client.incr("lossy:n")) and 0)

    def check_invariant(self, client: redis.Redis, ops_done: int) -> tuple[bool, str]:
        return False, f"counter is {client.get('lossy:n')!r}, expected {ops_done}"


@pytest.mark.parametrize("clients", [1, 2])
def test_server_errors_become_error_counts(url: str, clients: int) -> None:
    config = BenchConfig(clients=(clients,), duration_s=0.2, warmup_s=0.05, rounds=1)
    (rec,) = run_bench(url, [WrongType()], config).records
    assert rec.errors > 0 and rec.ops == 0
    assert any("WRONGTYPE" in s for s in rec.error_samples)


@dataclass(frozen=True)
class Order(WrongType):
    """Records the order in which its forms are timed."""

    name: str = "order"
    forms: tuple[str, ...] = ("a", "b", "c")
    seen: list[str] = field(default_factory=list, compare=False)
    seeds: list[int] = field(default_factory=list, compare=False)

    def op_fn(self, client: redis.Redis, form: str, worker: int, seed: int) -> OpFn:
        self.seen.append(form)
        self.seeds.append(seed)
        return lambda i: 0


def test_each_round_starts_one_form_later(url: str) -> None:
    """Over 3 rounds of 3 forms each form is timed once first, once second, once last."""
    work = Order()
    config = BenchConfig(duration_s=0.06, warmup_s=0.01, rounds=3, bystander=False, turns=0)
    run_bench(url, [work], config)
    warm_up, timed = work.seen[:3], work.seen[3:]
    assert (warm_up, timed) == (["a", "b", "c"], ["a", "b", "c", "b", "c", "a", "c", "a", "b"])
    rounds = [set(work.seeds[k : k + 3]) for k in (3, 6, 9)]  # the forms of a round pair up:
    assert all(len(r) == 1 for r in rounds) and len(set.union(*rounds)) == 3  # same draws


def test_invariant_failures_are_reported(url: str) -> None:
    (rec,) = run_bench(url, [Lossy()], QUICK).records
    assert rec.invariant_ok is False
    assert "expected" in rec.invariant_detail


def test_open_loop_reports_corrected_and_uncorrected(url: str) -> None:
    config = BenchConfig(duration_s=0.3, warmup_s=0.05, rounds=1, rate=300.0)
    result = run_bench(url, [PingWorkload()], config)
    for rec in result.records:
        assert rec.latency_ms_uncorrected is not None
        assert rec.rate == 300.0
        assert 40 <= rec.ops <= 120  # ~300/s for 0.3 s


def test_batches_bystander_and_several_clients(url: str) -> None:
    # 0.3 s slices timed no call at all on a machine loaded by parallel suites: give each
    # form time for calls, then check the measured round trips per op.
    config = BenchConfig(clients=(2,), duration_s=0.8, warmup_s=0.05, rounds=1)
    result = run_bench(url, [PingWorkload(batch=10)], config)
    by_form = {r.form: r for r in result.records}
    assert all(r.calls > 0 for r in result.records), [(r.form, r.calls) for r in result.records]
    assert by_form["pipelined"].round_trips_per_op == pytest.approx(0.1)
    assert by_form["naive"].round_trips_per_op == pytest.approx(1.0)
    assert by_form["pipelined"].latency_ms_per_op is not None
    assert all(r.bystander_samples > 0 for r in result.records)
    assert all(r.clients == 2 for r in result.records)


def test_simulated_rtt_is_measured_and_recorded(url: str) -> None:
    config = BenchConfig(rtts_ms=(2.0,), duration_s=0.2, warmup_s=0.05, rounds=1, bystander=False)
    result = run_bench(url, [PingWorkload()], config)
    assert [c.rtt_ms_nominal for c in result.calibrations] == [0.0, 2.0]
    for rec in result.records:
        assert rec.rtt_ms_nominal == 2.0
        assert 1.0 < rec.rtt_ms_measured < 4.0
        assert rec.latency_ms["p50"] is not None and rec.latency_ms["p50"] > 1.0


def test_refuses_fakeredis() -> None:
    with pytest.raises(EnvironmentProblem, match="fakeredis"):
        refuse_fake(fakeredis.FakeRedis(server=fakeredis.FakeServer()))


def test_counting_connection_counts_writes_and_commands(url: str) -> None:
    c = counting_client(url)
    c.ping()
    before = counters(c)
    pipe = c.pipeline(transaction=False)
    for _ in range(10):
        pipe.ping()
    pipe.execute()
    c.get("x")
    delta = counters(c).minus(before)
    assert (delta.round_trips, delta.commands) == (2, 11)
    c.close()


def test_histogram_withholds_unsupported_percentiles() -> None:
    h = LatencyHistogram()
    for v in range(1, 51):
        h.record_us(v * 1000)
    s = h.summary()
    assert s.count == 50 and s.p50 is not None and s.p90 is not None
    assert s.p99 is None and s.p999 is None and s.max == pytest.approx(50, rel=0.01)
    merged = LatencyHistogram.merged([h, LatencyHistogram.decode(h.encode())])
    assert merged.count == 100 and merged.summary().p99 is not None


def test_crossover_rtt_from_the_model() -> None:
    # naive: 5 trips, 0.12 ms fixed; script: 1 trip, 0.45 ms fixed; 0.05 ms wire at RTT 0
    naive = fit_cost("naive", [(0.0, 0.05, 5, 0.37), (1.0, 1.05, 5, 5.37)])
    script = FormCost("script", 1, 0.45, 0.05)
    assert naive == FormCost("naive", 5, pytest.approx(0.12), pytest.approx(0.05))
    (x,) = crossovers("op", 1, [naive, script], (0.0, 1.0))
    # 5 (0.05 + r) + 0.12 = (0.05 + r) + 0.45  ->  r = 0.0325 ms: 2 significant digits
    assert (x.fewer_trips, x.kind, x.rtt_ms) == ("script", "above", 0.032)
    assert x.describe() == "script overtakes naive above 0.032 ms RTT"


def test_crossovers_stay_inside_the_measured_rtts() -> None:
    naive = FormCost("naive", 5, 0.12, 0.05)
    script = FormCost("script", 1, 0.45, 0.05)
    (x,) = crossovers("op", 1, [naive, script], (0.25, 1.0))  # 0.0325 < 0.25: not measured
    assert (x.kind, x.rtt_ms) == ("every_measured", None)
    assert x.describe() == "script is faster than naive at every measured RTT (0.25 to 1 ms)"
    (x,) = crossovers("op", 1, [naive, script], (0.0, 0.01))  # 0.0325 > 0.01: no number
    assert (x.kind, x.rtt_ms) == ("none_measured", None)
    assert "naive stays faster than script at every measured RTT" in x.describe()
    assert crossovers("op", 1, [naive, script], (0.0, 1.0), {frozenset(("a", "b"))}) == []


def _record(op: str, form: str, rtt: float, rt: float, mean: float, **kw: Any) -> dict[str, Any]:
    return Record(op, form, rtt, rtt, 1, 100, 1000 / mean, {"mean": mean}, rt, rt, 10.0, 0.0,
                  0, True, wire_ms=0.05 + rtt, **kw).as_dict()  # fmt: skip


def test_crossovers_only_for_pairs_at_stake_and_from_two_rtts() -> None:
    rcw = {"read_compute_write": True}
    forms = ("naive", "pipelined", "transaction", "script", "function")
    trips = {"naive": 2, "pipelined": 2, "transaction": 2, "script": 1, "function": 1}
    one_rtt = [_record("op", f, 0.0, trips[f], 0.1 * trips[f] + 0.1, **rcw) for f in forms]
    assert summarize_crossovers(one_rtt, [("op", forms)]) == []
    two = one_rtt + [_record("op", f, 1.0, trips[f], 1.05 * trips[f] + 0.1, **rcw) for f in forms]
    pairs = {(x.more_trips, x.fewer_trips) for x in summarize_crossovers(two, [("op", forms)])}
    assert pairs == {("transaction", "script"), ("transaction", "function")}


def test_contention_choosers() -> None:
    import random

    rng = random.Random(1)
    assert {KeyChooser("hot", 100).pick(rng) for _ in range(50)} == {0}
    zipf = [KeyChooser("zipf:1.2", 100).pick(rng) for _ in range(500)]
    assert zipf.count(0) > 50 and max(zipf) < 100
    with pytest.raises(ValueError):
        KeyChooser("bogus")


def test_retarget_keeps_credentials_and_db() -> None:
    assert retarget("redis://u:pw@h:1/3", "127.0.0.1", 99) == "redis://u:pw@127.0.0.1:99/3"


def test_update_token_batches_count_every_logical_op(url: str) -> None:
    result = run_bench(url, [UpdateTokenWorkload(batch=10)], QUICK)
    by_form = {r.form: r for r in result.records}
    assert by_form["pipelined"].round_trips_per_op == pytest.approx(0.1)
    assert by_form["naive"].round_trips_per_op == pytest.approx(5.0)
    assert by_form["script"].commands_per_op == pytest.approx(1.0)
    assert all(r.invariant_ok and r.ops % 10 == 0 for r in result.records)
    assert all(r.latency_ms_per_op is not None for r in result.records)


def test_generated_operation_runs_in_every_form(url: str) -> None:
    from luapipe.bench.opworkload import catalogue_dir, resolve_workloads

    if not (catalogue_dir() / "reserve_stock.toml").exists():
        pytest.skip("catalogue not present")
    (work,) = resolve_workloads(["reserve_stock"], contention="spread")
    result = run_bench(url, [work], QUICK)
    by_form = {r.form: r for r in result.records}
    assert set(by_form) >= {"naive", "pipelined", "transaction", "script", "function"}
    assert by_form["script"].round_trips_per_op == pytest.approx(1.0)
    assert by_form["script"].invariant_ok and by_form["script"].errors == 0
    assert result.manifest["spec"]["workloads"][0]["kind"] == "generated"


@dataclass(frozen=True)
class ServerGone(WrongType):
    name: str = "gone"

    def reset(self, client: redis.Redis) -> None:
        raise redis.ConnectionError("Connection refused")


def test_losing_the_server_is_a_luapipe_error(url: str) -> None:
    from luapipe.errors import LuapipeError

    with pytest.raises(LuapipeError):
        run_bench(url, [ServerGone()], QUICK)


def test_bench_command_end_to_end(url: str, tmp_path: Any) -> None:
    from click.testing import CliRunner

    from luapipe.cli import main

    out = tmp_path / "r"
    args = [
        "bench",
        "ping",
        "--url",
        url,
        "--duration",
        "0.1",
        "--rounds",
        "1",
        "--warmup",
        "0.02",
        "--no-bystander",
        "--json",
        f"{out}.json",
        "--csv",
        f"{out}.csv",
        "--html",
        f"{out}.html",
    ]
    run = CliRunner().invoke(main, args)
    assert run.exit_code == 0, run.output
    assert "recommendation: ping" in run.output
    assert "\r" not in run.output  # not a terminal: plain progress lines, no bar redraws
    assert "progress 4/4: ping" in run.output
    for ext in ("json", "csv", "html"):
        assert (tmp_path / f"r.{ext}").stat().st_size > 0
    bad = CliRunner().invoke(main, ["bench", "--url", url, "--rtt", "x"])
    assert bad.exit_code == 2


def test_the_report_says_where_the_model_is_off() -> None:
    from luapipe.bench.verdict.summary import model_notes

    recs = [
        _record("op", "naive", 0.0, 2, 1.0, model_error_pct=-3.0),
        _record("op", "script", 0.0, 1, 1.0, model_error_pct=-22.0),
        _record("op", "naive", 1.0, 2, 1.0, model_error_pct=-31.0),
        _record("op", "script", 1.0, 1, 1.0, model_error_pct=+18.0),
    ]
    (note,) = model_notes(recs, 6.5)
    assert note.startswith(
        "The model is off by more than 15% at 0 ms RTT for 1 of 2 records (-22%; "
        "op script); at 1 ms RTT for 2 of 2 records (-31% to +18%; worst op naive)."
    )
    assert "load average 6.5" in note
    assert model_notes(recs[:1], 1.0) == []
