"""Nothing is re-sent once it may have reached the server; BUSY and replicas are named."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from luapipe.bench.server import EmbeddedRedis, ServerProcess
from luapipe.errors import BusyError, OutcomeUnknown, ReadOnlyError, ScriptRuntimeError
from luapipe.scripts.registry import ScriptRegistry
from luapipe.scripts.script import LuaScript

from ..conftest import SCRIPTS_DIR
from ..helpers import SLOW

QUICK = LuaScript.from_source("quick", "-- @key k\nreturn redis.call('INCR', KEYS[1])\n")


@pytest.fixture
def reg() -> ScriptRegistry:
    return ScriptRegistry([SLOW, QUICK])


def _impatient(server: ServerProcess, timeout: float) -> redis.Redis:
    return redis.Redis(host=server.host, port=server.port, socket_timeout=timeout)


def _wait_done(r: redis.Redis) -> None:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            r.ping()
            return
        except redis.exceptions.BusyLoadingError:
            time.sleep(0.02)
        except redis.ResponseError:
            time.sleep(0.02)


def test_redis_py_default_retry_runs_a_script_again(
    r: redis.Redis, redis_server: ServerProcess
) -> None:
    """The fact luapipe exists to avoid (REDIS_FACTS: 11 runs with socket_timeout=1).
    redis-py's default Retry backs off for seconds; the same Retry without backoff shows it
    quickly. Ten retries (redis-py's default count): a retry sent while the server is still
    busy times out in its connection hand-shake, before the script is re-sent, and how long
    the server stays busy depends on the engine (the spin counts CPU time from Redis 7.2)."""
    sha = r.script_load(SLOW.source)
    raw = redis.Redis(
        host=redis_server.host,
        port=redis_server.port,
        socket_timeout=0.05,
        retry=Retry(NoBackoff(), 10),
    )
    with pytest.raises(redis.TimeoutError):
        raw.evalsha(sha, 1, "ran", 120)
    time.sleep(0.15)
    _wait_done(r)
    assert int(r.get("ran") or 0) > 1


@pytest.mark.parametrize("how", ["call", "pipeline", "transaction"])
def test_timeout_is_outcome_unknown_and_never_resent(
    r: redis.Redis, redis_server: ServerProcess, reg: ScriptRegistry, how: str
) -> None:
    reg.load(r)
    client = _impatient(redis_server, 0.1)
    with pytest.raises(OutcomeUnknown, match="outcome unknown"):
        if how == "call":
            reg.call(client, "slow", keys=["ran"], args=[300])
        else:
            with reg.pipeline(client, transaction=how == "transaction") as pipe:
                pipe.call("slow", keys=["ran"], args=[300]).incr("other")
                pipe.execute()
    time.sleep(0.35)
    _wait_done(r)
    assert r.get("ran") == b"1"
    # the client still works afterwards, on a fresh connection
    assert reg.call(client, "quick", keys=["k"]) == 1


def test_killed_connection_is_outcome_unknown(
    r: redis.Redis, redis_server: ServerProcess, reg: ScriptRegistry
) -> None:
    """The call reached the server (held by CLIENT PAUSE WRITE) and its connection is killed:
    the caller hears "outcome unknown" and luapipe does not send it again."""
    reg.load(r)
    victim = redis.Redis(host=redis_server.host, port=redis_server.port)
    victim_id = victim.client_id()
    r.client_pause(1000, all=False)
    killer = threading.Timer(0.2, lambda: r.client_kill_filter(_id=victim_id))
    killer.start()
    try:
        with pytest.raises(OutcomeUnknown, match="outcome unknown"):
            reg.call(victim, "quick", keys=["k"])
    finally:
        killer.join()
        r.client_unpause()
    assert r.get("k") is None  # it never ran, and nothing re-sent it
    assert reg.call(victim, "quick", keys=["k"]) == 1


def test_busy_server_is_named_busy(
    r: redis.Redis, redis_server: ServerProcess, reg: ScriptRegistry
) -> None:
    r.config_set("busy-reply-threshold", 100)
    reg.load(r)
    slow_client = _impatient(redis_server, 5)
    runner = threading.Thread(target=reg.call, args=(slow_client, "slow", ["ran"], [600]))
    runner.start()
    try:
        other = redis.Redis(host=redis_server.host, port=redis_server.port)
        deadline = time.monotonic() + 5  # until the slow script holds the server (a fixed
        while time.monotonic() < deadline:  # sleep loses the race on a loaded machine)
            try:
                other.ping()
            except redis.ResponseError:
                break
            time.sleep(0.01)
        with pytest.raises(BusyError, match="BUSY"):
            reg.call(other, "quick", keys=["k"])
    finally:
        runner.join()
    assert r.get("ran") == b"1" and r.get("k") is None


@pytest.fixture(scope="module")
def replica(redis_server: ServerProcess) -> Iterator[redis.Redis]:
    server = EmbeddedRedis(["--replicaof", redis_server.host, str(redis_server.port)])
    info = server.start()
    client = redis.Redis(host=info.host, port=info.port)
    deadline = time.monotonic() + 10
    while client.info("replication").get("master_link_status") != "up":
        assert time.monotonic() < deadline, "replica did not sync"
        time.sleep(0.05)
    try:
        yield client
    finally:
        client.close()
        server.stop()


def test_read_only_script_runs_on_a_replica(r: redis.Redis, replica: redis.Redis) -> None:
    reg = ScriptRegistry.from_directory(SCRIPTS_DIR)
    now = int(time.time() * 1000)
    reg.call(r, "rate_limit_sliding", keys=["log"], args=[now, 60_000, 10, "a"])
    deadline = time.monotonic() + 5
    while replica.zcard("log") != 1 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert reg.call(replica, "window_count", keys=["log"], args=[now, 60_000]) == 1
    with pytest.raises((ReadOnlyError, ScriptRuntimeError), match=r"READONLY|read.only"):
        reg.call(replica, "rate_limit_fixed", keys=["rl"], args=[1, 60])
