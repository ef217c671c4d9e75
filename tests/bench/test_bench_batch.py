"""bench --batch for generated operations: N operations per call, batched as each form allows."""

from __future__ import annotations

import json
import random
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner

from luapipe.bench.batching import run_batch
from luapipe.bench.counting import counters, counting_client
from luapipe.bench.opworkload import OperationWorkload, resolve_workloads
from luapipe.bench.server import ServerProcess
from luapipe.cli import main

N = 10
OPS = ("reserve_stock", "incr_many")


@pytest.fixture
def client(redis_server: ServerProcess) -> Any:
    c = counting_client(redis_server.url, socket_timeout=10)
    c.flushall()
    try:
        yield c
    finally:
        c.close()


def workload(name: str, c: redis.Redis) -> OperationWorkload:
    (w,) = resolve_workloads([name], batch=N)
    assert isinstance(w, OperationWorkload) and w.batch == N
    w.reset(c)
    return w


def keyspace(c: redis.Redis) -> dict[Any, Any]:
    return {k: (c.type(k), c.dump(k)) for k in sorted(c.keys("*"))}  # type: ignore[union-attr]


@pytest.mark.parametrize("name", OPS)
def test_round_trips_per_batch(name: str, client: redis.Redis) -> None:
    """One call = N ops: 1 round trip for script and function, read levels + 1 for
    pipelined (lockstep), the N ops' own round trips for naive and transaction."""
    w = workload(name, client)
    one = replace(w, batch=1)
    for form in w.forms:
        w.op_fn(client, form, 0, 99)(0)  # warm: script and function loaded
        singles = []
        w.reset(client)
        f1 = one.op_fn(client, form, 0, 7)
        for i in range(N):  # the same N picks, one by one
            before = counters(client)
            f1(i)
            singles.append(counters(client).minus(before).round_trips)
        w.reset(client)
        before = counters(client)
        w.op_fn(client, form, 0, 7)(0)
        trips = counters(client).minus(before).round_trips
        if form in ("script", "function"):
            assert trips == 1, form
        elif form == "pipelined":
            assert trips == max(singles) == w.op.read_levels + 1, form
        else:  # naive, transaction: one after another
            assert trips == sum(singles) >= N, form
        ok, detail = w.check_invariant(client, 2 * N)
        assert ok, (form, detail)


def _one_by_one(w: OperationWorkload, c: redis.Redis, picks: list[int]) -> tuple[Any, list[Any]]:
    w.reset(c)
    values = [
        w.op.run(c, "naive", keys=w.cases[p].keys_dict, args=w.cases[p].args_dict) for p in picks
    ]
    return keyspace(c), values


def _batched(
    w: OperationWorkload, c: redis.Redis, form: str, picks: list[int]
) -> tuple[Any, list[Any]]:
    w.reset(c)
    values = []
    for start in range(0, len(picks), N):
        calls = [(w.cases[p].keys_dict, w.cases[p].args_dict) for p in picks[start : start + N]]
        outcomes = run_batch(w.op, c, form, calls)
        assert all(o.error is None for o in outcomes), [o.error for o in outcomes]
        values.extend(o.value for o in outcomes)
    return keyspace(c), values


@pytest.mark.parametrize("name", OPS)
def test_batches_equal_the_ops_one_by_one(name: str, client: redis.Redis) -> None:
    """A deterministic sequence (with repeats inside a batch) leaves the keyspace and
    replies of running it one by one; pipelined lockstep too when a batch's operations touch
    different keys (or, for incr_many, only blind writes)."""
    w = workload(name, client)
    pool = len(w.cases)
    mixed = random.Random(3).choices(range(min(pool, 6)), k=3 * N)  # repeats in a batch
    distinct = [i % pool for i in range(3 * N)]
    assert pool >= N
    for picks in (mixed, distinct):
        expected = _one_by_one(w, client, picks)
        for form in w.forms:
            if form == "pipelined" and picks is mixed and w.op.reads:
                continue  # read-compute-write in lockstep on one key races: next test
            assert _batched(w, client, form, picks) == expected, form


def test_pipelined_lockstep_on_one_key_races_and_the_script_does_not(
    client: redis.Redis,
) -> None:
    """10 reservations of 1 unit on a stock of 3: every pipelined read sees 3 before any
    write (it oversells, and the bench's invariant check says so); the scripts run one after
    another and sell exactly 3."""
    w = workload("reserve_stock", client)
    calls = [({"stock": "race:stock"}, {"qty": 1})] * N
    for form, stock, sold in (("pipelined", 3 - N, N), ("script", 0, 3), ("function", 0, 3)):
        client.set("race:stock", 3)
        outcomes = run_batch(w.op, client, form, calls)
        assert int(client.get("race:stock")) == stock, form  # type: ignore[arg-type]
        assert sum(o.value[0] for o in outcomes) == sold, form


def test_cli_bench_batch_runs_and_reports_the_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("REDIS_URL", raising=False)
    out = tmp_path / "r.json"
    args = ["bench", "incr_many", "--batch", "10", "--duration", "0.3", "--rounds", "1"]
    res = CliRunner().invoke(main, [*args, "--warmup", "0.1", "--json", str(out), "--wide"])
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    assert data["manifest"]["spec"]["workloads"][0]["batch"] == N
    by_form = {r["form"]: r for r in data["records"]}
    assert set(by_form) == {"naive", "pipelined", "transaction", "script", "function"}
    for form, r in by_form.items():
        assert r["batch"] == N and r["ops"] == r["calls"] * N and r["calls"] > 0, form
        assert r["errors"] == 0 and r["invariant_ok"], form
        assert r["latency_ms_per_op"]["p50"] == pytest.approx(r["latency_ms"]["p50"] / N)
    for form in ("script", "function", "pipelined"):  # one round trip per batch of 10
        assert by_form[form]["round_trips_per_op"] == pytest.approx(0.1), form
    assert by_form["naive"]["round_trips_per_op"] >= 1
    rows = [line.split() for line in res.output.splitlines() if line.startswith("incr_many")]
    assert {row[1] for row in rows} >= {"naive", "script"}
    header = next(line for line in res.output.splitlines() if line.startswith("operation"))
    rt = header.replace("rtt ms", "rtt_ms").split().index("rt/op")  # after the batch column
    assert header.split()[6] == "batch" and {row[5] for row in rows} == {"10"}
    assert {row[rt] for row in rows if row[1] in ("script", "function")} == {"0.1"}  # rt/op
    # every operation of a batch writes: the share is of operations, not calls (never 1000%)
    share = re.split(r"\s{2,}", header).index("wr%")
    cells = [re.split(r"\s{2,}", line) for line in res.output.splitlines()]
    assert {c[share] for c in cells if c[0] == "incr_many"} == {"100"}, cells
    assert "write share:" not in res.output
    assert all(r["write_share"] == pytest.approx(1.0) for r in data["records"])
