"""Generated forms never run a call twice (sync and asyncio alike, ``driver``).

- on a cluster, every form (``op.run(cluster_client, form)``): the node owning the keys is
  frozen (SIGSTOP) after the request was written, the call times out with OutcomeUnknown,
  and when the node wakes it has run exactly once; re-routing is only for what provably
  did not run (a redirect, a refused connection);
- the transaction form whose EXEC reports a failed write: the other writes committed, so
  the caller gets the error and the transaction is not run again.
"""

from __future__ import annotations

from typing import Any

import pytest
import redis
import redis.cluster

import luapipe
from luapipe.bench.cluster import EmbeddedCluster
from luapipe.bench.server import ServerProcess

from ..conftest import EXAMPLES_DIR
from ..drivers import Driver, drained, stopped, warmed

FORMS = ("naive", "pipelined", "transaction", "script", "function")
INCR_MANY = luapipe.load_operation(EXAMPLES_DIR / "operations" / "incr_many.toml")


@pytest.mark.cluster
@pytest.mark.parametrize("form", FORMS)
def test_a_cluster_form_call_that_may_have_run_is_not_sent_again(
    driver: Driver, cluster: EmbeddedCluster, rc: redis.cluster.RedisCluster, form: str
) -> None:
    counters = [f"{{{form}}}:a", f"{{{form}}}:b"]
    port = rc.get_node_from_key(counters[0]).port
    node = next(n for n in cluster.nodes if n.port == port)
    client = driver.cluster(cluster.ports[0], socket_timeout=0.25, client_name="victim")
    warm = {"keys": {"counters": [f"{{{form}}}:warm"]}, "args": {"by": 1}}
    warmed(driver, lambda: INCR_MANY.run(client, form, **warm))  # connected, loaded
    call: dict[str, Any] = {"keys": {"counters": counters}, "args": {"by": 1}}
    with stopped(node.pid), pytest.raises(luapipe.OutcomeUnknown, match="outcome unknown"):
        driver.run(INCR_MANY.run(client, form, **call))
    driver.close(client)
    with redis.Redis(port=node.port) as admin:
        drained(admin, "victim")
    # the first round trip of the unknown call ran once: the naive form sends one INCRBY
    # per round trip, every other form both in one
    moved = [1, 0] if form == "naive" else [1, 1]
    assert [int(rc.get(c) or 0) for c in counters] == moved


TALLY = luapipe.parse_operation(
    """
name = "tally"
description = "Count a visit and tag the visitor."
keys = ["visits", "tags"]
returns = "seen + 1"

[[reads]]
name = "seen"
cmd = "GET"
key = "visits"
as = "int"
default = "0"

[[writes]]
cmd = "INCR"
key = "visits"

[[writes]]
cmd = "SADD"
key = "tags"
args = ["'visited'"]
""",
    "tally.toml",
)


@pytest.mark.parametrize("where", ["server", pytest.param("cluster", marks=pytest.mark.cluster)])
def test_a_transaction_form_with_a_failed_write_is_not_run_again(
    driver: Driver, request: pytest.FixtureRequest, where: str
) -> None:
    """WATCH visits, GET it; MULTI INCR visits, SADD tags EXEC, where tags is a string: EXEC
    runs both, SADD fails (WRONGTYPE), INCR committed."""
    if where == "server":
        server: ServerProcess = request.getfixturevalue("redis_server")
        admin: redis.Redis = request.getfixturevalue("r")
        client = driver.redis(server.port)
    else:
        cluster: EmbeddedCluster = request.getfixturevalue("cluster")
        rc: redis.cluster.RedisCluster = request.getfixturevalue("rc")
        admin = rc.get_redis_connection(rc.get_node_from_key("{t}"))  # the slot's node
        client = driver.cluster(cluster.ports[0])
    admin.set("{t}:tags", "a string")
    admin.config_resetstat()
    keys = {"visits": "{t}:visits", "tags": "{t}:tags"}
    with pytest.raises(luapipe.ServerError, match="WRONGTYPE"):
        driver.run(TALLY.run(client, "transaction", keys=keys, args={}))
    assert admin.get("{t}:visits") == b"1"  # committed once, never again
    assert admin.info("commandstats")["cmdstat_exec"]["calls"] == 1
