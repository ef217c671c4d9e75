"""The sync and asyncio paths give the same answer (issue 12's three drifts).

Each body runs twice through the ``driver`` fixture (sync clients, then ``redis.asyncio``
ones): a difference between the two paths is a failing test, not a comment.
"""

from __future__ import annotations

import pytest
import redis
import redis.cluster

import luapipe
from luapipe.bench.cluster import EmbeddedCluster
from luapipe.bench.server import ServerProcess

from ..drivers import Driver, drained, stopped, unwritable_size, warmed

COUNTER = luapipe.LuaScript.from_source(
    "counted", "-- @key ran\n-- @arg by\nreturn redis.call('INCRBY', KEYS[1], ARGV[1])\n"
)
#: counts its runs in KEYS[1]; ARGV[1] is ballast (a request too big to write at once)
PADDED = luapipe.LuaScript.from_source(
    "padded", "-- @key ran\n-- @arg pad\nreturn redis.call('INCR', KEYS[1])\n"
)
HINT = "this server is a cluster node; use a cluster client"


def _foreign_key(rc: redis.cluster.RedisCluster, port: int) -> str:
    """A key whose slot another node owns than the one at ``port``."""
    return next(f"k{i}" for i in range(1000) if rc.get_node_from_key(f"k{i}").port != port)


@pytest.mark.cluster
def test_a_call_on_a_plain_client_at_a_cluster_node_is_a_server_error_with_the_hint(
    driver: Driver, cluster: EmbeddedCluster, rc: redis.cluster.RedisCluster
) -> None:
    """Drift 2: the asyncio ``reg.call`` raised ``Moved``, a class outside errors.py."""
    port = cluster.ports[0]
    key = _foreign_key(rc, port)
    reg = luapipe.ScriptRegistry([COUNTER])
    plain = driver.redis(port)
    for _ in range(2):  # first SCRIPT LOAD + EVALSHA in one batch, then EVALSHA alone
        with pytest.raises(luapipe.ServerError, match=HINT) as caught:
            driver.run(reg.call(plain, "counted", keys=[key], args=[1]))
        assert str(caught.value).startswith("MOVED ")
        assert type(caught.value).__module__ == "luapipe.errors"  # a class users can catch
        assert isinstance(caught.value, redis.exceptions.MovedError)  # and redis-py's, alike
    assert rc.get(key) is None  # refused by the node: nothing ran


@pytest.mark.cluster
@pytest.mark.parametrize("transaction", [False, True], ids=["pipeline", "transaction"])
def test_a_pipeline_on_a_plain_client_at_a_cluster_node_raises_the_hint(
    driver: Driver, cluster: EmbeddedCluster, rc: redis.cluster.RedisCluster, transaction: bool
) -> None:
    """Drift 1: the asyncio pipeline returned ``Redirect('MOVED ...')`` as a result value."""
    port = cluster.ports[0]
    key = _foreign_key(rc, port)
    reg = luapipe.ScriptRegistry([COUNTER])
    pipe = reg.pipeline(driver.redis(port), transaction=transaction)
    pipe.call("counted", keys=[key], args=[1]).incr(key)
    with pytest.raises(luapipe.ServerError, match=HINT):
        driver.run(pipe.execute())
    pipe.call("counted", keys=[key], args=[1]).incr(key)
    results = driver.run(pipe.execute(raise_on_error=False))
    assert len(results) == 2
    assert all(isinstance(r, luapipe.ServerError) for r in results)
    assert all(isinstance(r, redis.exceptions.MovedError) for r in results)  # as redis-py's
    assert all(str(r).startswith("MOVED ") and HINT in str(r) for r in results)
    assert rc.get(key) is None


@pytest.mark.parametrize("request_kind", ["call", "transaction"])
def test_a_failed_write_of_a_whole_request_is_connection_failed_and_nothing_ran(
    driver: Driver, r: redis.Redis, redis_server: ServerProcess, request_kind: str
) -> None:
    """Drift 3: one command, or MULTI ... EXEC, runs only if it arrives whole. Written to a
    frozen server it times out halfway; the rest must never follow, so nothing ran:
    ConnectionFailed on both paths (the asyncio one said OutcomeUnknown, and its socket
    went on flushing the request after the caller was told it failed)."""
    reg = luapipe.ScriptRegistry([PADDED])
    client = driver.redis(redis_server.port, socket_timeout=0.25, client_name="victim")
    big = b"x" * unwritable_size()
    # warmed with the big value too: a value of 1 MB or more first asks the node's
    # proto-max-bulk-len, remembered from then on, so the frozen write is the request itself
    warmed(driver, lambda: reg.call(client, "padded", keys=["warm"], args=[big]))
    frozen = stopped(redis_server.pid, at_most=10)
    with frozen, pytest.raises(luapipe.ConnectionFailed, match="nothing ran") as caught:
        if request_kind == "call":
            driver.run(reg.call(client, "padded", keys=["ran"], args=[big]))
        else:
            pipe = reg.pipeline(client, transaction=True)
            pipe.call("padded", keys=["ran"], args=["x"]).set("big", big)
            driver.run(pipe.execute())
    assert isinstance(caught.value, redis.exceptions.TimeoutError)  # redis-py's class, alike
    driver.close(client)
    drained(r, "victim")  # the server has read all it was sent
    assert r.get("ran") is None and r.exists("big") == 0
