"""Generated operations on a real 3-primary cluster: safety analysis, verify, run, bench."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import redis.cluster
from click.testing import CliRunner

import luapipe
from luapipe.bench.cluster import EmbeddedCluster
from luapipe.bench.opworkload import catalogue_dir, resolve_workloads
from luapipe.bench.runner import BenchConfig, run_bench
from luapipe.cli import main
from luapipe.errors import CrossSlotError, LuapipeError
from luapipe.operations.clustersafety import cluster_safety, slot
from luapipe.report import render_html, render_table

pytestmark = pytest.mark.cluster

ALL = ("naive", "pipelined", "transaction", "script", "function")
ATOMIC = ("transaction", "script", "function")


def _op(name: str) -> luapipe.Operation:
    return luapipe.load_operation(catalogue_dir() / f"{name}.toml")


def _keys_left(rc: redis.cluster.RedisCluster) -> int:
    return sum(1 for _ in rc.scan_iter(count=1000))


def test_safety_from_the_spec_and_from_keys() -> None:
    feed = cluster_safety(_op("fetch_feed"))
    assert feed["naive"].ok and feed["pipelined"].ok
    assert not any(feed[f].ok for f in ATOMIC)
    assert "prefix .. it" in feed["script"].reason and "hash tag" in feed["script"].reason
    tagged = cluster_safety(_op("fetch_feed"), {"feed": "{u1}:feed"}, {"n": 2, "prefix": "{u1}:"})
    assert all(s.ok for s in tagged.values())
    other = cluster_safety(_op("fetch_feed"), {"feed": "{u1}:feed"}, {"n": 2, "prefix": "{u2}:"})
    assert not other["function"].ok and "another slot" in other["function"].reason
    split = cluster_safety(_op("transfer"), {"src": "acct:1", "dst": "acct:2"})
    assert split["naive"].ok and split["pipelined"].ok
    assert "slots" in split["pipelined"].reason
    for form in ATOMIC:
        assert not split[form].ok and "CROSSSLOT" in split[form].reason
        assert f"slot {slot('acct:1')}: acct:1" in split[form].reason
    same = cluster_safety(_op("transfer"), {"src": "{a}:1", "dst": "{a}:2"})
    assert all(s.ok for s in same.values())


@pytest.mark.parametrize("name", ["reserve_stock", "transfer", "fetch_feed"])
def test_verify_on_the_cluster_runs_every_form(rc: redis.cluster.RedisCluster, name: str) -> None:
    report = luapipe.verify(_op(name), rc, cases=60, seed=3)
    assert report.ok, report.mismatch.describe() if report.mismatch else ""
    assert report.forms == ALL and report.cases == 60 and not report.skipped
    assert _keys_left(rc) == 0  # cleaned up on every node


def test_cross_slot_keys_skip_the_atomic_forms(rc: redis.cluster.RedisCluster) -> None:
    assert slot("xs:src") != slot("xs:dst")
    report = luapipe.verify(_op("transfer"), rc, cases=40, namespace="xs:")
    assert report.ok and report.forms == ("naive", "pipelined")
    (why,) = report.skipped
    assert why.startswith("transaction, script, function (CROSSSLOT")
    assert "skipped transaction, script, function" in report.summary()
    assert _keys_left(rc) == 0


def test_every_form_runs_on_the_cluster_and_cross_slot_is_refused(
    rc: redis.cluster.RedisCluster,
) -> None:
    op = _op("transfer")
    replies = []
    for form in ALL:
        rc.mset({"{t}:src": 10, "{t}:dst": 0})
        replies.append(
            op.run(rc, form, keys={"src": "{t}:src", "dst": "{t}:dst"}, args={"amount": 3})
        )
        assert rc.get("{t}:src") == b"7" and rc.get("{t}:dst") == b"3", form
    assert replies == [[1, 7]] * len(ALL)
    rc.set("a:src", 10)
    rc.set("b:dst", 0)
    for form in ATOMIC:
        with pytest.raises(CrossSlotError, match="hash tag"):
            op.run(rc, form, keys={"src": "a:src", "dst": "b:dst"}, args={"amount": 3})
    assert rc.get("a:src") == b"10"  # nothing ran
    assert op.run(rc, "pipelined", keys={"src": "a:src", "dst": "b:dst"}, args={"amount": 3}) == [
        1,
        7,
    ]


def test_cli_verify_on_a_cluster_url(cluster: EmbeddedCluster) -> None:
    spec = str(catalogue_dir() / "fetch_feed.toml")
    res = CliRunner().invoke(main, ["verify", spec, "--url", cluster.url, "--cases", "30"])
    assert res.exit_code == 0, res.output
    assert "fetch_feed: ok: 30 cases x 5 forms" in res.output


def test_bench_on_the_cluster_records_forms_and_skips(
    cluster: EmbeddedCluster, tmp_path: Path
) -> None:
    config = BenchConfig(duration_s=0.4, warmup_s=0.05, rounds=2)
    result = run_bench(cluster.url, resolve_workloads(["reserve_stock", "update_token"]), config)
    data = result.as_dict()
    ran = {(r.operation, r.form) for r in result.records}
    assert ran == {("reserve_stock", f) for f in ALL} | {
        ("update_token", "naive"),
        ("update_token", "pipelined"),
    }
    for r in result.records:
        assert r.ops > 0 and r.errors == 0 and r.invariant_ok, (r.operation, r.form)
    skipped = {(s["operation"], s["form"]): s["reason"] for s in data["skipped"]}
    assert set(skipped) == {("update_token", f) for f in ATOMIC}
    assert all(why.startswith("CROSSSLOT") for why in skipped.values())
    assert data["manifest"]["redis"]["mode"] == "cluster"
    assert data["manifest"]["redis"]["cluster_primaries"] == 3
    assert "skipped update_token transaction, script, function: CROSSSLOT" in render_table(data)
    html = render_html(data)
    assert ">Skipped forms</h2>" in html and "CROSSSLOT" in html
    json.dumps(data)  # the results are plain JSON
    with pytest.raises(LuapipeError, match="not available on a cluster"):
        run_bench(cluster.url, resolve_workloads(["ping"]), BenchConfig(rtts_ms=(0.5,)))
