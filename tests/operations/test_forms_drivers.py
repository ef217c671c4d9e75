"""Every form through both drivers: one test body, sync and asyncio, single server and cluster.

The forms are one table of steps run by two drivers (luapipe.operations.run); the ``driver``
fixture (tests/drivers.py) runs each body with sync and with ``redis.asyncio`` clients, so
a drift between the flavours fails here. What is pinned: replies, measured round trips and
WATCH retries (bounded by the policy), errors before anything is sent, routing on the
cluster (cross-slot refusals, a stale slot map), the cluster-client hint on a plain client
pointed at a cluster node, and at most once on one server: a call whose reply never came is
:class:`~luapipe.errors.OutcomeUnknown` and never sent again (on a cluster:
tests/operations/test_promises_forms.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis
import redis.cluster

import luapipe
from luapipe.bench.cluster import EmbeddedCluster
from luapipe.bench.server import EmbeddedRedis, ServerProcess
from luapipe.errors import (
    CallArgumentError,
    CrossSlotError,
    OutcomeUnknown,
    ServerError,
    TransactionAborted,
)
from luapipe.operations import steps
from luapipe.operations.clustersafety import slot
from luapipe.operations.plan import plan_of
from luapipe.operations.run import form_steps
from luapipe.wire.replies import ReplyError
from luapipe.wire.routing import Locate, Refresh, Send

from ..conftest import EXAMPLES_DIR
from ..drivers import Driver, drained, stopped

FORMS = ("naive", "pipelined", "transaction", "script", "function")
ATOMIC = ("transaction", "script", "function")
STOCK = luapipe.load_operation(EXAMPLES_DIR / "operations" / "reserve_stock.toml")
TRANSFER = luapipe.load_operation(EXAMPLES_DIR / "operations" / "transfer.toml")
INCR = luapipe.load_operation(EXAMPLES_DIR / "operations" / "incr_many.toml")


def _detailed(driver: Driver, client: Any, op: luapipe.Operation, form: str, **kw: Any) -> Any:
    res = driver.run(op.run_detailed(client, form, **kw))
    return res.value, res.round_trips, res.retries


def _ready(driver: Driver, client: Any) -> Any:
    """A client whose connections (and asyncio cluster's slot map) are set up already."""
    if driver.name == "asyncio" and isinstance(client, redis.asyncio.RedisCluster):
        driver.run(client.initialize())
    driver.run(client.ping())
    return client


# -- replies, round trips, retries ---------------------------------------------------------


def _every_form(driver: Driver, client: Any, key: str) -> list[Any]:
    kw: dict[str, Any] = {"keys": {"stock": key}, "args": {"qty": 3}}
    for form in ("script", "function"):  # loaded once: round trips below are steady state
        driver.run(STOCK.run(client, form, keys={"stock": key + ":warm"}, args={"qty": 1}))
    return [_detailed(driver, client, STOCK, form, **kw) for form in FORMS]


EVERY_FORM = [
    ([1, 7], 2, 0),  # naive: GET, DECRBY
    ([1, 4], 2, 0),  # pipelined: the read level, the writes
    ([1, 1], 2, 0),  # transaction: WATCH+GET, MULTI..EXEC
    ([0, 1], 1, 0),  # script
    ([0, 1], 1, 0),  # function
]


def test_every_form_on_a_single_server(
    driver: Driver, redis_server: ServerProcess, r: redis.Redis
) -> None:
    r.set("stock", 10)
    assert _every_form(driver, driver.redis(redis_server.port), "stock") == EVERY_FORM
    assert r.get("stock") == b"1"


@pytest.mark.cluster
def test_every_form_on_a_cluster(
    driver: Driver, cluster: EmbeddedCluster, rc: redis.cluster.RedisCluster
) -> None:
    rc.set("{d}:stock", 10)
    assert _every_form(driver, driver.cluster(cluster.ports[0]), "{d}:stock") == EVERY_FORM
    assert rc.get("{d}:stock") == b"1"


def _interfere(monkeypatch: pytest.MonkeyPatch, other: Any, key: str, times: int) -> None:
    """Another client changes ``key`` between the transaction's WATCH and its EXEC,
    ``times`` times."""
    real = steps.compute
    left = [times]

    def compute(plan: Any, env: Any) -> Any:
        if left[0]:
            left[0] -= 1
            other.incr(key)
        return real(plan, env)

    monkeypatch.setattr(steps, "compute", compute)


@pytest.mark.parametrize("where", ["server", pytest.param("cluster", marks=pytest.mark.cluster)])
def test_watch_retries_are_counted_and_bounded(
    driver: Driver,
    where: str,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> None:
    if where == "server":
        other: Any = request.getfixturevalue("r")
        client = driver.redis(request.getfixturevalue("redis_server").port)
    else:
        other = request.getfixturevalue("rc")
        client = driver.cluster(request.getfixturevalue("cluster").ports[0])
    key = "{w}:stock"
    other.set(key, 5)
    kw: dict[str, Any] = {"keys": {"stock": key}, "args": {"qty": 2}}
    _interfere(monkeypatch, other, key, 2)
    assert _detailed(driver, client, STOCK, "transaction", **kw) == ([1, 5], 6, 2)
    assert other.get(key) == b"5"  # 5, +1, +1, then -2 once
    _interfere(monkeypatch, other, key, 100)
    with pytest.raises(TransactionAborted, match="WATCH failed 4 times"):
        driver.run(STOCK.run_detailed(client, "transaction", max_retries=3, **kw))
    assert other.get(key) == b"9"  # four interfering writes, nothing of the aborted call


def test_bad_calls_send_nothing(
    driver: Driver, redis_server: ServerProcess, r: redis.Redis
) -> None:
    client = driver.redis(redis_server.port)
    r.config_resetstat()
    for form, keys, args in [
        ("pipelined", {"stock": "s"}, {"qty": "2"}),
        ("script", {"stok": "s"}, {"qty": 2}),
        ("function", {"stock": "s"}, {"qty": 2**60}),
        ("lua", {"stock": "s"}, {"qty": 2}),
    ]:
        with pytest.raises(CallArgumentError):
            driver.run(STOCK.run(client, form, keys=keys, args=args))
    assert int(r.info("stats")["total_commands_processed"]) <= 2  # CONFIG RESETSTAT, INFO


# -- routing on a cluster ------------------------------------------------------------------


@pytest.mark.cluster
def test_cross_slot_keys_refuse_the_atomic_forms_before_sending(
    driver: Driver, cluster: EmbeddedCluster, rc: redis.cluster.RedisCluster
) -> None:
    client = driver.cluster(cluster.ports[0])
    rc.set("a:src", 10)
    keys, args = {"src": "a:src", "dst": "b:dst"}, {"amount": 3}
    assert slot("a:src") != slot("b:dst")
    for form in ATOMIC:
        with pytest.raises(CrossSlotError):
            driver.run(TRANSFER.run(client, form, keys=keys, args=args))
    assert (rc.get("a:src"), rc.get("b:dst")) == (b"10", None)
    for form in ("naive", "pipelined"):  # one command per key, each to its own node
        assert driver.run(TRANSFER.run(client, form, keys=keys, args=args)) == [
            1,
            7 if form == "naive" else 4,
        ]
    assert (rc.get("a:src"), rc.get("b:dst")) == (b"4", b"6")


def _misroute(client: Any, key: str) -> None:
    """Make ``client``'s slot map name another primary for ``key``'s slot (a stale map)."""
    cache = client.nodes_manager.slots_cache
    owner = cache[slot(key)][0]
    cache[slot(key)] = [next(n for n in client.get_primaries() if n.name != owner.name)]


@pytest.mark.cluster
def test_a_stale_slot_map_re_routes_what_did_not_run_and_runs_it_once(
    driver: Driver, cluster: EmbeddedCluster, rc: redis.cluster.RedisCluster
) -> None:
    client = _ready(driver, driver.cluster(cluster.ports[0]))
    counters = [f"n:{i}" for i in range(6)]
    rc.config_resetstat(target_nodes=redis.cluster.RedisCluster.PRIMARIES)
    got = []
    for form in ("naive", "pipelined"):
        _misroute(client, counters[0])
        res = driver.run(
            INCR.run_detailed(client, form, keys={"counters": counters}, args={"by": 1})
        )
        got.append((form, res.value, res.round_trips))
    pair = {"src": "{m}:src", "dst": "{m}:dst"}
    rc.set("{m}:src", 10)
    for form in ATOMIC:
        _misroute(client, "{m}:src")
        got.append((form, driver.run(TRANSFER.run(client, form, keys=pair, args={"amount": 2}))))
    assert got == [
        ("naive", 6, 7),  # 6 INCRBYs, one sent twice: MOVED there, then to its owner
        ("pipelined", 6, 4),  # one write per node, then the moved one again
        ("transaction", [1, 8]),
        ("script", [1, 6]),
        ("function", [1, 4]),
    ]
    assert [rc.get(k) for k in counters] == [b"2"] * 6  # each ran once per form
    assert (rc.get("{m}:src"), rc.get("{m}:dst")) == (b"4", b"6")
    errors = rc.info("errorstats", target_nodes=redis.cluster.RedisCluster.PRIMARIES)
    moved = sum(e.get("errorstat_MOVED", {}).get("count", 0) for e in errors.values())
    assert moved == 1 + 1 + 3 + 1 + 1  # the transaction: WATCH and both GETs of one batch


@pytest.mark.cluster
def test_a_plain_client_at_a_cluster_node_gets_the_cluster_hint(
    driver: Driver, cluster: EmbeddedCluster, rc: redis.cluster.RedisCluster
) -> None:
    """Every form, pointed at a node that does not own the key: the one cluster-client
    hint (from the driver), never a redirect as a value or an unexplained MOVED."""
    port = cluster.ports[0]
    here = {s for s, nodes in rc.nodes_manager.slots_cache.items() if nodes[0].port == port}
    key = next(k for k in (f"hint:{i}" for i in range(100)) if slot(k) not in here)
    rc.set(key, 10)
    client = driver.redis(port)
    for form in FORMS:
        with pytest.raises(ServerError, match=r"^MOVED \d+ \S+: this server is a cluster node"):
            driver.run(STOCK.run(client, form, keys={"stock": key}, args={"qty": 1}))
    assert rc.get(key) == b"10"


def test_a_redirected_transaction_clears_its_watch_before_it_is_routed_again() -> None:
    """fetch_feed's second read level goes to other keys: if they turn out to live
    elsewhere, the first level's WATCH is still set on that connection, so the attempt
    sends UNWATCH there before the call is routed again (a pooled connection must never
    carry a WATCH into someone else's MULTI). The steps alone, without I/O."""
    feed = luapipe.load_operation(EXAMPLES_DIR / "operations" / "fetch_feed.toml")
    call = form_steps(
        plan_of(feed),
        "transaction",
        {"feed": "{f}:feed"},
        {"n": 2, "prefix": "item:"},
        cluster=True,
    )
    assert next(call) == Locate(slot("{f}:feed"))
    first = call.send("10.0.0.1:7000")
    assert isinstance(first, Send) and first.batch[0][0] == b"WATCH"
    second = call.send(["OK", [b"a", b"b"]])  # WATCH + ZREVRANGE ran: the feed is watched
    assert isinstance(second, Send) and second.batch[0] == (b"WATCH", b"item:a", b"item:b")
    moved = ReplyError("MOVED 1234 10.0.0.2:7000")
    assert call.send([moved, moved, moved]) == Send([("UNWATCH",)], "10.0.0.1:7000", False)
    refresh = call.send(["OK"])
    assert isinstance(refresh, Refresh) and refresh.cause.kind == "MOVED"
    call.close()


# -- at most once --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def private_server() -> Iterator[ServerProcess]:
    """A server of this module's own: the tests below freeze it."""
    server = EmbeddedRedis()
    try:
        yield server.start()
    finally:
        server.stop()


#: what ran of one call whose first round trip was written, then timed out: the one-round
#: forms ran (once: the call was not sent again); the others stopped before their writes
RAN_BEFORE_THE_TIMEOUT = {"naive": 0, "pipelined": 0, "transaction": 0, "script": 1, "function": 1}


def _unknown_then_count(
    driver: Driver, client: Any, admin: redis.Redis, pid: int, key: str, form: str, name: str
) -> int:
    """Freeze the server, call ``form`` (its reply times out), thaw it, wait until it ran
    whatever reached it; how many units the call took."""
    admin.set(key, 100)
    driver.run(STOCK.run(client, form, keys={"stock": key}, args={"qty": 1}))  # warm
    with stopped(pid), pytest.raises(OutcomeUnknown):
        driver.run(STOCK.run(client, form, keys={"stock": key}, args={"qty": 1}))
    drained(admin, name)  # the dropped connection is gone: what it sent has run
    return 99 - int(admin.get(key) or 0)


@pytest.mark.parametrize("form", FORMS)
def test_a_timed_out_call_is_outcome_unknown_and_never_sent_again(
    driver: Driver, private_server: ServerProcess, form: str
) -> None:
    name = f"victim-{driver.name}-{form}"
    admin = redis.Redis(host=private_server.host, port=private_server.port)
    client = driver.redis(private_server.port, socket_timeout=0.3, client_name=name)
    try:
        ran = _unknown_then_count(driver, client, admin, private_server.pid, "s", form, name)
        assert ran == RAN_BEFORE_THE_TIMEOUT[form]
        assert driver.run(STOCK.run(client, form, keys={"stock": "s"}, args={"qty": 1})) == [
            1,
            98 - ran,
        ]  # and the client works afterwards
    finally:
        admin.close()
