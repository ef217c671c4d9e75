"""Bad input, table-driven: each gets exit code 1, one line naming the place, no traceback,
and nothing half-done on the server. (Spec errors: tests/operations/test_spec*.py.)"""

from __future__ import annotations

import shutil
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner

from luapipe.bench.server import EmbeddedRedis, ServerProcess
from luapipe.cli import main
from luapipe.errors import CallArgumentError
from luapipe.scripts.registry import ScriptRegistry
from luapipe.scripts.script import LuaScript

from ..conftest import SCRIPTS_DIR


@pytest.fixture(scope="module")
def not_redis() -> Iterator[int]:
    """A TCP server that answers like an HTTP server."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    srv.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            with conn:
                conn.recv(4096)
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        yield int(srv.getsockname()[1])
    finally:
        stop.set()
        t.join()
        srv.close()


@pytest.fixture(scope="module")
def locked() -> Iterator[ServerProcess]:
    server = EmbeddedRedis(["--requirepass", "the-real-one"])
    try:
        yield server.start()
    finally:
        server.stop()


def _scripts(tmp: Path) -> Path:
    d = tmp / "scripts_lua"
    shutil.copytree(SCRIPTS_DIR, d, ignore=shutil.ignore_patterns("*.json"))
    return d


Case = Callable[[Path, str, dict[str, str]], list[str]]

CASES: dict[str, tuple[Case, str]] = {
    "lua syntax error": (
        lambda d, url, _: (
            (d / "zz.lua").write_text("-- @key k\nlocal = 1\n")
            and ["scripts", "load", "--dir", str(d), "--url", url]
        ),
        "zz.lua:2: Lua syntax error",
    ),
    "template syntax error": (
        lambda d, url, _: (
            (d / "zz.lua").write_text("-- @template\nreturn 1\n{% if %}\n")
            and ["scripts", "load", "--dir", str(d), "--url", url]
        ),
        "zz.lua:3: template error",
    ),
    "lua error in a template maps to the template line": (
        lambda d, url, _: (
            (d / "_snip.lua").write_text("local a = 1\nlocal b = 2\n")
            and (d / "zz.lua").write_text("-- @template\n{% include '_snip.lua' %}\nreturn = a\n")
            and ["scripts", "load", "--dir", str(d), "--url", url]
        ),
        "zz.lua:3: Lua syntax error",
    ),
    "empty script": (
        lambda d, url, _: (
            (d / "zz.lua").write_text("") == 0
            and ["scripts", "load", "--dir", str(d), "--url", url]
        ),
        "zz.lua: the script is empty",
    ),
    "non-utf8 script": (
        lambda d, url, _: (
            (d / "zz.lua").write_bytes(b"return '\xff'\n")
            and ["scripts", "load", "--dir", str(d), "--url", url]
        ),
        "zz.lua:1: not valid UTF-8",
    ),
    "unknown script": (
        lambda d, url, _: ["scripts", "call", "../etc/passwd", "--dir", str(d), "--url", url],
        "unknown script '../etc/passwd'",
    ),
    "wrong key count": (
        lambda d, url, _: ["scripts", "call", "check_and_decr", "--dir", str(d), "--url", url],
        "takes 1 key (counter), got 0",
    ),
    "lock file edited by hand": (
        lambda d, url, _: (
            (d / "luapipe.lock.json").write_text('{"version": 1,\n "scripts": {,}}')
            and ["deploy", "--check", "--dir", str(d), "--url", url]
        ),
        "luapipe.lock.json:2: not valid JSON",
    ),
    "lock file with a bad sha": (
        lambda d, url, _: (
            (d / "luapipe.lock.json").write_text(
                '{"version": 1, "scripts": {"capped_push": "ABC"}}'
            )
            and ["deploy", "--check", "--dir", str(d), "--url", url]
        ),
        "'ABC' is not a lower-case sha1",
    ),
    "unreachable server": (
        lambda d, url, _: ["scripts", "status", "--dir", str(d), "--url", "redis://127.0.0.1:1/0"],
        "cannot connect to Redis at redis://127.0.0.1:1/0",
    ),
    "wrong password": (
        lambda d, url, other: ["scripts", "status", "--dir", str(d), "--url", other["locked"]],
        "authentication failed",
    ),
    "a server that is not redis": (
        lambda d, url, other: ["scripts", "status", "--dir", str(d), "--url", other["not_redis"]],
        "did not answer like Redis",
    ),
    "invalid url": (
        lambda d, url, _: ["scripts", "status", "--dir", str(d), "--url", "http://x:y@host"],
        "invalid --url http://x:***@host: a Redis URL starts with redis://",
    ),
}
#: usage errors: exit code 2 (one line all the same)
USAGE = {"invalid url"}


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_input_is_one_line_and_changes_nothing(
    name: str,
    tmp_path: Path,
    r: redis.Redis,
    redis_server: ServerProcess,
    not_redis: int,
    locked: ServerProcess,
) -> None:
    make, expected = CASES[name]
    other = {
        "not_redis": f"redis://127.0.0.1:{not_redis}/0",
        "locked": f"redis://:hunter2@{locked.host}:{locked.port}/0",
    }
    args = make(_scripts(tmp_path), redis_server.url, other)
    res = CliRunner().invoke(main, args, catch_exceptions=False)
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert res.exit_code == (2 if name in USAGE else 1), res.output
    assert len(lines) == 1 and lines[0].startswith("error: "), res.output
    assert expected in lines[0]
    assert "hunter2" not in res.output and "Traceback" not in res.output
    assert int(r.info("memory")["number_of_cached_scripts"]) == 0  # nothing loaded
    assert r.dbsize() == 0  # nothing written


def test_binary_values_round_trip(client: redis.Redis) -> None:
    echo = LuaScript.from_source(
        "echo", "-- @key k\n-- @arg v\nredis.call('SET', KEYS[1], ARGV[1])\nreturn ARGV[1]\n"
    )
    reg = ScriptRegistry([echo])
    value = bytes(range(256)) + b"\xff\xfe\x00"
    assert reg.call(client, "echo", keys=[b"k\xff"], args=[value]) == value
    assert client.get(b"k\xff") == value


def test_oversized_argument_is_refused_and_nothing_runs(r: redis.Redis) -> None:
    echo = LuaScript.from_source(
        "echo", "-- @key k\n-- @arg v\nreturn redis.call('SET', KEYS[1], ARGV[1])\n"
    )
    reg = ScriptRegistry([echo])
    r.config_set("proto-max-bulk-len", 1024 * 1024)
    try:
        # refused before sending (the server's own refusal, a protocol error or a reset
        # mid-write, is never reached; tests/scripts/test_values_and_sizes.py has the rest)
        with pytest.raises(CallArgumentError, match="more than the proto-max-bulk-len"):
            reg.call(r, "echo", keys=["big"], args=[b"x" * (2 * 1024 * 1024)])
        assert r.exists("big") == 0
        assert reg.call(r, "echo", keys=["small"], args=["ok"]) == b"OK"  # the client recovers
    finally:
        r.config_set("proto-max-bulk-len", 512 * 1024 * 1024)


def test_batch_for_a_generated_operation_is_refused_not_ignored() -> None:
    """--batch now batches generated operations (tests/bench/test_bench_batch.py); it is refused,
    not ignored, only on a cluster, where a batch's calls live on several nodes."""
    from luapipe.bench.opworkload import resolve_workloads
    from luapipe.errors import LuapipeError

    assert resolve_workloads(["update_token"], batch=10)[0].batch == 10
    (w,) = resolve_workloads(["reserve_stock"], batch=10)
    assert w.batch == 10 and w.describe()["batch"] == 10
    cluster_client = redis.cluster.RedisCluster.__new__(redis.cluster.RedisCluster)
    with pytest.raises(LuapipeError, match="--batch is not available on a cluster"):
        w.op_fn(cluster_client, "script", 0, 1)
    with pytest.raises(LuapipeError, match="--batch is not available on a cluster"):
        w.cluster_skips(cluster_client)
