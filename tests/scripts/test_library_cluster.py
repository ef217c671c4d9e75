"""Function libraries on a real 3-primary, 3-replica cluster: deploy on every primary,
replicas checked, a failed node puts the others back, rollback, and a new primary joined
with a bare ``CLUSTER MEET`` (which, unlike ``redis-cli --cluster add-node``, copies no
library) found missing by ``deploy --check`` and loaded by ``deploy``.

The cluster is this module's own: the last test adds a fourth primary to it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner, Result
from redis.crc import key_slot

from luapipe.bench.cluster import EmbeddedCluster
from luapipe.bench.server import EmbeddedRedis
from luapipe.cli import main
from luapipe.scripts.libparse import parse_library
from luapipe.scripts.libstate import keeper_name, keeper_source

from .test_library_deploy import HELLO, STOCK_V1, STOCK_V2, code_of, write

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def cluster() -> Iterator[EmbeddedCluster]:
    c = EmbeddedCluster(primaries=3, replicas=1)
    c.start()
    print(f"\ncluster of 6 nodes ready in {c.startup_seconds:.1f} s")
    try:
        yield c
    finally:
        c.stop()


def nodes(cluster: EmbeddedCluster) -> dict[str, redis.Redis]:
    """A plain client on every node, by name (``127.0.0.1:port``)."""
    return {f"127.0.0.1:{p}": redis.Redis(port=p) for p in cluster.ports}


def primaries(cluster: EmbeddedCluster) -> list[str]:
    return [n for n, c in nodes(cluster).items() if c.execute_command("ROLE")[0] == b"master"]


@pytest.fixture
def clean(cluster: EmbeddedCluster) -> Iterator[EmbeddedCluster]:
    for name in primaries(cluster):
        nodes(cluster)[name].function_flush()
    yield cluster
    for c in nodes(cluster).values():
        c.config_set("maxmemory", 0)


def run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def replicated(cluster: EmbeddedCluster, library: str, code: str | None) -> None:
    """Every node, replicas included, has ``code`` (None: no such library)."""
    deadline = time.monotonic() + 5
    while True:
        found = {n: code_of(c, library) for n, c in nodes(cluster).items()}
        if all(v == code for v in found.values()) or time.monotonic() > deadline:
            assert found == dict.fromkeys(found, code)
            return
        time.sleep(0.05)


def test_deploy_loads_every_primary_and_check_sees_every_node(
    tmp_path: Path, clean: EmbeddedCluster
) -> None:
    d = write(tmp_path / "s", {"stock.lua": STOCK_V1, "hello.lua": HELLO})
    res = run("deploy", "--dir", str(d), "--url", clean.url)
    assert res.exit_code == 0, res.output
    loaded = sorted(ln.split(":")[0] + ":" + ln.split(":")[1] for ln in res.stdout.splitlines()
                    if "loaded stock" in ln)  # fmt: skip
    assert loaded == sorted(primaries(clean))
    replicated(clean, "stock", STOCK_V1)  # WAIT made the replicas confirm it
    res = run("deploy", "--check", "--dir", str(d), "--url", clean.url)
    assert res.exit_code == 0, res.output
    assert res.stdout.startswith("no drift: 0 scripts, 2 libraries, nodes ")
    assert len(res.stdout.split("nodes ")[1].split(", ")) == 6  # replicas are checked too
    write(d, {"stock.lua": STOCK_V2})
    res = run("deploy", "--check", "--dir", str(d), "--url", clean.url)
    assert res.exit_code == 1
    found = [ln.split(" (")[0] for ln in res.stdout.splitlines()]
    assert [ln for ln in found if ln.startswith("signature")] == [  # once, as deploy says
        "signature: stock_reserve on 6 nodes",
        "signature: stock_left on 6 nodes",
    ]
    assert sum(ln.startswith("differs: stock on ") for ln in found) == 6  # each node's state
    assert found[-1] == "drift: 9 differences"  # changed in the lock, 6 differs, 2 signatures
    res = run("deploy", "--dir", str(d), "--url", clean.url)
    assert res.exit_code == 0, res.output
    assert [ln.split(" (")[0] for ln in res.stderr.splitlines()] == [  # once, not per node
        "warning: signature: stock_reserve on 6 nodes",
        "warning: signature: stock_left on 6 nodes",
    ]
    replicated(clean, "stock", STOCK_V2)
    res = run("deploy", "--rollback", "--dir", str(d), "--url", clean.url)
    assert res.exit_code == 0, res.output
    assert res.stdout.splitlines()[-1].startswith("rolled back stock (nodes ")
    replicated(clean, "stock", STOCK_V1)
    replicated(clean, "hello", HELLO)


def test_a_deploy_that_fails_on_one_primary_puts_the_others_back(
    tmp_path: Path, clean: EmbeddedCluster
) -> None:
    d = write(tmp_path / "s", {"stock.lua": STOCK_V1})
    assert run("deploy", "--dir", str(d), "--url", clean.url).exit_code == 0
    lock = (d / "luapipe.lock.json").read_text()
    full = sorted(primaries(clean))[1]
    nodes(clean)[full].config_set("maxmemory", 1)  # FUNCTION LOAD is refused there (OOM)
    write(d, {"stock.lua": STOCK_V2, "hello.lua": HELLO})
    res = run("deploy", "--dir", str(d), "--url", clean.url)
    assert res.exit_code == 1 and res.stderr.count("\n") == 1, res.output
    others = [n for n in sorted(primaries(clean)) if n != full]
    assert res.stderr.startswith(f"error: deploy failed on {full}: ")
    assert "OOM" in res.stderr
    assert res.stderr.endswith(f"; put back the libraries it had changed on {', '.join(others)}\n")
    replicated(clean, "stock", STOCK_V1)
    replicated(clean, "hello", None)
    replicated(clean, keeper_name("stock"), None)
    assert (d / "luapipe.lock.json").read_text() == lock


def test_a_replica_missing_a_library_is_drift_even_when_no_primary_changes(
    tmp_path: Path, clean: EmbeddedCluster
) -> None:
    d = write(tmp_path / "s", {"stock.lua": STOCK_V1})
    assert run("deploy", "--dir", str(d), "--url", clean.url).exit_code == 0
    replicated(clean, "stock", STOCK_V1)
    replica = next(n for n in nodes(clean) if n not in primaries(clean))
    lagging = nodes(clean)[replica]
    lagging.config_set("replica-read-only", "no")  # the only way to take it from a replica
    try:
        lagging.function_delete("stock")
        res = run("deploy", "--dir", str(d), "--url", clean.url)  # every primary has it
    finally:
        lagging.config_set("replica-read-only", "yes")
    assert res.exit_code == 1, res.output  # not "deployed": that replica lacks it
    assert f"missing: stock on {replica} (library not loaded)" in res.stdout.splitlines()


def test_rollback_refuses_a_library_one_primary_has_no_kept_copy_of_and_rolls_back_the_rest(
    tmp_path: Path, clean: EmbeddedCluster
) -> None:
    """A primary without the rollback copy (a shard that joined after the deploy): rolling
    back the others would leave the shards on two versions. That library stays as it is
    everywhere, the line names the node, exit 1; the directory's other library rolls back."""
    hello_v2 = HELLO.replace("'hi'", "'hello'")
    d = write(tmp_path / "s", {"stock.lua": STOCK_V1, "hello.lua": HELLO})
    assert run("deploy", "--dir", str(d), "--url", clean.url).exit_code == 0
    write(d, {"stock.lua": STOCK_V2, "hello.lua": hello_v2})
    assert run("deploy", "--dir", str(d), "--url", clean.url).exit_code == 0
    first, second, late = sorted(primaries(clean))
    nodes(clean)[late].function_delete(keeper_name("stock"))
    replicated(clean, "stock", STOCK_V2)
    res = run("deploy", "--rollback", "--dir", str(d), "--url", clean.url)
    assert res.exit_code == 1, res.output
    assert res.stderr == (
        f"error: not rolled back stock: no kept copy of its previous code on {late} (joined "
        f"or flushed since the deploy?) while {first}, {second} have one; rolling back only "
        "those would leave the shards on different versions, so stock is left as it is "
        "everywhere (deploy its previous file instead)\n"
    )
    assert res.stdout.splitlines()[-1].startswith("rolled back hello (nodes ")
    assert not any("stock" in line for line in res.stdout.splitlines())
    replicated(clean, "stock", STOCK_V2)  # nothing changed for stock, on any node
    replicated(clean, "hello", HELLO)  # the other library rolled back everywhere
    kept = {n: code_of(nodes(clean)[n], keeper_name("stock")) for n in (first, second)}
    assert kept == dict.fromkeys((first, second), keeper_source("stock", STOCK_V1, STOCK_V2))
    report = json.loads(
        run("deploy", "--rollback", "--json", "--dir", str(d), "--url", clean.url).stdout
    )
    assert not report["ok"] and len(report["refused"]) == 1  # hello goes back to v2 here
    replicated(clean, "hello", hello_v2)


@pytest.fixture
def joined(clean: EmbeddedCluster) -> Iterator[tuple[EmbeddedCluster, EmbeddedRedis, int]]:
    """A fourth primary joined with CLUSTER MEET, given one slot with CLUSTER ADDSLOTS."""
    node = EmbeddedRedis(
        ["--cluster-enabled", "yes", "--cluster-config-file", "nodes-new.conf",
         "--cluster-node-timeout", "2000", "--cluster-require-full-coverage", "no"],
        directory=f"{clean.directory}/joined",
    )  # fmt: skip
    Path(node.directory).mkdir(parents=True, exist_ok=True)
    node.start()
    try:
        yield clean, node, _join(clean, node)
    finally:
        node.stop()


def _join(cluster: EmbeddedCluster, node: EmbeddedRedis) -> int:
    new = redis.Redis(port=node.port)
    new_id = new.execute_command("CLUSTER", "MYID").decode()
    new.execute_command("CLUSTER", "MEET", "127.0.0.1", cluster.ports[0])
    everyone = [*nodes(cluster).values(), new]
    _until(lambda: all(new_id.encode() in c.execute_command("CLUSTER", "NODES") for c in everyone))
    slot = key_slot(b"joined")
    for c in everyone:  # nobody owns the slot any more (it holds no key)
        try:
            c.execute_command("CLUSTER", "DELSLOTS", slot)
        except redis.ResponseError as exc:
            assert "already unassigned" in str(exc)
    new.execute_command("CLUSTER", "ADDSLOTS", slot)

    def owned_by_new(c: redis.Redis) -> bool:
        for start, end, owner, *_ in c.execute_command("CLUSTER", "SLOTS"):
            if start <= slot <= end:
                return int(owner[1]) == node.port
        return False

    _until(lambda: all(owned_by_new(c) for c in everyone))
    return slot


def _until(ok: Any, within: float = 20.0) -> None:
    deadline = time.monotonic() + within
    while not ok():
        assert time.monotonic() < deadline, "the cluster did not converge"
        time.sleep(0.05)


def test_a_primary_joined_with_cluster_meet_is_found_missing_and_deploy_loads_it_there(
    tmp_path: Path, joined: tuple[EmbeddedCluster, EmbeddedRedis, int]
) -> None:
    cluster, node, slot = joined
    d = write(tmp_path / "s", {"stock.lua": STOCK_V1, "hello.lua": HELLO})
    # the deploy happened before the join: redo it on the three first primaries only
    for name in primaries(cluster):
        c = nodes(cluster)[name]
        c.function_load(STOCK_V1, replace=True)
        c.function_load(HELLO, replace=True)
    lock = {"stock": parse_library(STOCK_V1).sha, "hello": parse_library(HELLO).sha}
    (d / "luapipe.lock.json").write_text(
        '{"version": 1, "scripts": {}, "libraries": ' + str(lock).replace("'", '"') + "}\n"
    )
    new = f"127.0.0.1:{node.port}"
    res = run("deploy", "--check", "--dir", str(d), "--url", cluster.url)
    print("\n$ luapipe deploy --check  # after CLUSTER MEET + ADDSLOTS", slot)
    print(res.stdout, end="")
    assert res.exit_code == 1
    assert res.stdout.splitlines()[:2] == [
        f"missing: hello on {new} (library not loaded)",
        f"missing: stock on {new} (library not loaded)",
    ]
    assert res.stdout.splitlines()[2].startswith("drift: 2 differences (0 scripts, 2 libraries")
    assert new in res.stdout.splitlines()[2]
    res = run("deploy", "--dir", str(d), "--url", cluster.url)
    print("$ luapipe deploy")
    print(res.stdout, end="")
    assert res.exit_code == 0, res.output
    stock, hello = parse_library(STOCK_V1).sha[:12], parse_library(HELLO).sha[:12]
    assert [ln for ln in res.stdout.splitlines() if ": loaded " in ln] == [
        f"{new}: loaded hello {hello} (new)",
        f"{new}: loaded stock {stock} (new)",
    ]
    assert code_of(redis.Redis(port=node.port), "stock") == STOCK_V1
    res = run("deploy", "--check", "--dir", str(d), "--url", cluster.url)
    assert res.exit_code == 0 and new in res.stdout, res.output
