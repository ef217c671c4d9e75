"""The bench times the path an operation exists for, and contention shows lost updates.

On a real redis-server: the catalogue's bench profiles keep calls on the write path (naive
round trips as the README's table says), the measured write share is reported and flagged
when it strays from the declared one, a spec without a profile still mostly writes, and
under hot contention the forms that read before they write lose updates while the atomic
forms never do.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner

from luapipe.bench.opworkload import OperationWorkload, catalogue_dir, resolve_workloads
from luapipe.bench.runner import BenchConfig, run_bench
from luapipe.bench.server import ServerProcess
from luapipe.cli import main
from luapipe.operations.spec import parse_operation
from luapipe.report import render_table

QUICK = BenchConfig(duration_s=0.3, warmup_s=0.05, rounds=2, bystander=False, patience_s=0.5)


@pytest.fixture
def url(redis_server: ServerProcess) -> str:
    redis.Redis(host=redis_server.host, port=redis_server.port).flushall()
    return redis_server.url


def _by(result: Any) -> dict[tuple[str, str], Any]:
    return {(r.operation, r.form): r for r in result.records}


def test_the_profiles_time_the_write_path(url: str) -> None:
    """README: naive round trips per op are 2 (reserve_stock), 3 (rate_limit: GET, INCR and
    the first hit's EXPIRE) and 4 (transfer); every call of every form writes."""
    work = resolve_workloads(["reserve_stock", "rate_limit", "transfer"])
    by = _by(run_bench(url, work, QUICK))
    for op, trips in (("reserve_stock", 2), ("rate_limit", 3), ("transfer", 4)):
        assert by[(op, "naive")].round_trips_per_op == pytest.approx(trips, rel=0.1), op
        for form in ("naive", "pipelined", "transaction", "script", "function"):
            r = by[(op, form)]
            assert r.write_share_declared == 1.0
            assert r.write_share is not None and r.write_share >= 0.95, (op, form)
            assert not r.write_share_off and r.invariant_ok and r.errors == 0, (op, form)
            assert r.invariant_cases >= 64 * QUICK.rounds  # every case, every round


def _without_profile(name: str) -> str:
    text = (catalogue_dir() / f"{name}.toml").read_text()
    return text[: text.index("\n[bench]")] + "\n"


@pytest.mark.parametrize("name", ["reserve_stock", "transfer"])
def test_without_a_profile_most_calls_still_write(url: str, name: str) -> None:
    op = parse_operation(_without_profile(name), f"{name}.toml")
    assert op.bench is None
    by = _by(run_bench(url, [OperationWorkload(op)], QUICK))
    for form in ("naive", "script"):
        r = by[(name, form)]
        assert r.write_share_declared == 0.9  # the default aim
        assert r.write_share is not None and r.write_share >= 0.8, (form, r.write_share)


def test_a_write_share_far_from_the_declared_one_is_flagged(url: str) -> None:
    text = _without_profile("reserve_stock") + (
        "\n[bench]\ndescription = 'sold out'\nwrite_share = 1.0\nstate = { stock = 0 }\n"
    )
    op = parse_operation(text, "sold_out.toml")
    result = run_bench(url, [OperationWorkload(op)], QUICK)
    for r in result.records:
        assert r.write_share == 0.0 and r.write_share_off, r.form
    assert _by(result)[("reserve_stock", "naive")].round_trips_per_op == pytest.approx(1.0)
    data = result.as_dict()
    table = render_table(data)
    assert "write share: reserve_stock naive at 0 ms: 0% of calls wrote, the bench profile " \
        "declares 100%" in table  # fmt: skip
    (rec,) = data["recommendations"]
    assert any("0% of calls took the write path" in why for why in rec["reasons"])


def test_hot_contention_loses_updates_only_in_the_racing_forms(url: str, tmp_path: Path) -> None:
    """`luapipe bench reserve_stock transfer --contention hot --clients 4`: the hot item
    sells out, the next goes on sale (the profile renews it), so the last units are raced
    for hundreds of times per round: naive and pipelined oversell or overdraw there, the
    atomic forms never do. Asserted on counts, not on timing."""
    out = tmp_path / "hot.json"
    args = ["bench", "reserve_stock", "transfer", "--url", url, "--contention", "hot"]
    args += ["--clients", "4", "--duration", "0.6", "--rounds", "2", "--warmup", "0.05"]
    args += ["--no-bystander", "--json", str(out)]
    run = CliRunner().invoke(main, args)
    assert run.exit_code == 0, run.output
    data = json.loads(out.read_text())
    for r in data["records"]:
        where = (r["operation"], r["form"])
        assert r["clients"] == 4 and r["calls"] > 0, where
        assert r["invariant_cases"] > 2, where  # copies were renewed: the boundary recurs
        if r["form"] in ("naive", "pipelined"):
            assert not r["invariant_ok"] and r["lost_updates"] >= 1, where
            assert f"FAIL {r['lost_updates']}/{r['invariant_cases']}" in run.output
        else:
            assert r["invariant_ok"] and r["lost_updates"] == 0, where
    for rec in data["recommendations"]:
        assert rec["form"] in ("transaction", "script", "function")
        lost = {n["form"]: n for n in rec["non_atomic"]}
        assert lost["naive"]["lost_updates"] >= 1 and lost["pipelined"]["lost_updates"] >= 1
        assert "lost updates in" in lost["pipelined"]["text"]


def test_the_catalogue_readme_describes_every_operation_and_its_bench_profile() -> None:
    """capped_push joined the catalogue (its [bench] table, its forms at stake) without a word
    in the catalogue README: no "when each form wins", no row in the profile table."""
    readme = (catalogue_dir() / "README.md").read_text()
    table = readme[readme.index("| op | state and arguments") :]
    for spec in sorted(catalogue_dir().glob("*.toml")):
        name = spec.stem
        assert f"\n**{name}**" in readme, f"{name}: no paragraph under 'When each form wins'"
        assert f"\n| {name} |" in table, f"{name}: no row in the [bench] table"
