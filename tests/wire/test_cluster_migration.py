"""Calls during a slot migration (resharding) on the shared 3-primary cluster.

While a slot moves from node A to node B, A answers ``ASK <slot> B`` for keys it no longer
has; the client must send the command to B once, right after ``ASKING``. Without that every
retry goes back to A (the slot map still says A) and the call fails until the migration
ends. Each test moves one slot half-way, runs calls, and puts the slot back afterwards.

Every behaviour runs through the ``driver`` fixture: a sync ``RedisCluster`` and a
``redis.asyncio`` one must follow the same redirects and run each call once.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import redis
import redis.cluster

import luapipe
from luapipe.bench.cluster import EmbeddedCluster
from luapipe.errors import ConnectionFailed
from luapipe.scripts.registry import ScriptRegistry
from luapipe.scripts.script import LuaScript

from ..conftest import EXAMPLES_DIR
from ..drivers import Driver

pytestmark = pytest.mark.cluster

COUNTER = LuaScript.from_source(
    "counted", "-- @key ran\n-- @arg by\nreturn redis.call('INCRBY', KEYS[1], ARGV[1])\n"
)
TAG = "{luapipe-migration}"
MOVED_KEY = f"{TAG}:moved"  # exists, already copied to B
STAYED_KEY = f"{TAG}:stayed"  # exists, still on A
NEW_KEY = f"{TAG}:new"  # exists nowhere: A sends it to B


@dataclass(frozen=True)
class Migration:
    slot: int
    source: redis.Redis
    target: redis.Redis
    target_name: str

    def on_target(self, *args: object) -> object:
        """A command on B for a key of the importing slot (``ASKING`` first)."""
        with self.target.pipeline(transaction=False) as p:
            p.execute_command("ASKING")
            p.execute_command(*args)
            return p.execute()[1]


def _node(cluster: EmbeddedCluster, rc: redis.cluster.RedisCluster, slot: int) -> redis.Redis:
    return rc.get_redis_connection(rc.nodes_manager.get_node_from_slot(slot))


def _primaries(rc: redis.cluster.RedisCluster) -> list[redis.Redis]:
    return [rc.get_redis_connection(n) for n in rc.get_primaries()]


def _move_rest_and_assign(rc: redis.cluster.RedisCluster, slot: int, src: redis.Redis,
                          dst: redis.Redis) -> None:  # fmt: skip
    """Finish a migration: copy the keys left on ``src``, then give ``slot`` to ``dst``."""
    kw = dst.connection_pool.connection_kwargs
    while keys := src.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100):
        src.execute_command("MIGRATE", kw["host"], kw["port"], "", 0, 5000, "KEYS", *keys)
    dst_id = dst.execute_command("CLUSTER", "MYID")
    for node in [dst, src, *(n for n in _primaries(rc) if n not in (src, dst))]:
        node.execute_command("CLUSTER", "SETSLOT", slot, "NODE", dst_id)
    _settle(rc, slot, dst_id.decode())


def _settle(rc: redis.cluster.RedisCluster, slot: int, owner: str | None = None) -> None:
    """Wait until every node knows every node's config epoch (and agrees ``owner`` has
    ``slot``). SETSLOT NODE bumps the new owner's epoch only past the epochs it has heard
    of: a move started before gossip settles can lose the slot to a stale claim."""
    deadline = time.monotonic() + 15
    while True:
        views = [_view(n, slot) for n in _primaries(rc)]
        epochs_agree = all(v[0] == views[0][0] for v in views)
        owners = {v[1] for v in views}
        if epochs_agree and (owner is None or owners == {owner}):
            return
        assert time.monotonic() < deadline, f"cluster did not settle: {views}"
        time.sleep(0.05)


def _view(node: redis.Redis, slot: int) -> tuple[dict[str, str], str | None]:
    """(node id -> config epoch, owner of ``slot``) as ``node`` sees them."""
    epochs: dict[str, str] = {}
    owner = None
    for line in node.execute_command("CLUSTER", "NODES").decode().splitlines():
        words = line.split()
        epochs[words[0]] = words[6]
        for r in words[8:]:
            lo, _, hi = r.partition("-")
            if lo.isdigit() and int(lo) <= slot <= int(hi or lo):
                owner = words[0]
    return epochs, owner


def _start(rc: redis.cluster.RedisCluster, slot: int, src: redis.Redis, dst: redis.Redis) -> None:
    _settle(rc, slot)
    src_id = src.execute_command("CLUSTER", "MYID")
    dst_id = dst.execute_command("CLUSTER", "MYID")
    dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", src_id)
    src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", dst_id)


@pytest.fixture
def migration(cluster: EmbeddedCluster, rc: redis.cluster.RedisCluster) -> Iterator[Migration]:
    slot = int(rc.keyslot(MOVED_KEY))
    source = _node(cluster, rc, slot)
    others = [n for n in _primaries(rc) if n.connection_pool.connection_kwargs["port"]
              != source.connection_pool.connection_kwargs["port"]]  # fmt: skip
    target = others[0]
    source.set(MOVED_KEY, 10)
    source.set(STAYED_KEY, 20)
    _start(rc, slot, source, target)
    kw = target.connection_pool.connection_kwargs
    source.execute_command("MIGRATE", kw["host"], kw["port"], MOVED_KEY, 0, 5000)
    try:
        yield Migration(slot, source, target, f"{kw['host']}:{kw['port']}")
    finally:  # finish A -> B, then move the slot back B -> A, keys and all
        _move_rest_and_assign(rc, slot, source, target)
        _start(rc, slot, target, source)
        _move_rest_and_assign(rc, slot, target, source)
        for node in _primaries(rc):
            node.execute_command("CLUSTER", "SETSLOT", slot, "STABLE")


def test_migration_fixture_really_asks(migration: Migration) -> None:
    """The set-up is what a resharding looks like: A answers ASK for the moved key."""
    with pytest.raises(redis.exceptions.AskError):
        migration.source.get(MOVED_KEY)
    assert migration.source.get(STAYED_KEY) == b"20"
    assert migration.on_target("GET", MOVED_KEY) == b"10"


def test_call_follows_ask_to_the_importing_node(
    driver: Driver, migration: Migration, cluster: EmbeddedCluster
) -> None:
    reg = ScriptRegistry([COUNTER])
    c = driver.cluster(cluster.ports[0])
    assert driver.run(reg.call(c, "counted", keys=[MOVED_KEY], args=[1])) == 11  # loaded on B
    assert driver.run(reg.call(c, "counted", keys=[MOVED_KEY], args=[1])) == 12  # steady
    assert driver.run(reg.call(c, "counted", keys=[STAYED_KEY], args=[1])) == 21  # still A's
    assert driver.run(reg.call(c, "counted", keys=[NEW_KEY], args=[5])) == 5  # created on B
    assert migration.on_target("MGET", MOVED_KEY, NEW_KEY) == [b"12", b"5"]
    assert migration.source.get(STAYED_KEY) == b"21"


def test_pipeline_follows_ask_per_call(
    driver: Driver, migration: Migration, cluster: EmbeddedCluster
) -> None:
    reg = ScriptRegistry([COUNTER])
    p = reg.pipeline(driver.cluster(cluster.ports[0]))
    p.call("counted", keys=[MOVED_KEY], args=[1])
    p.call("counted", keys=[STAYED_KEY], args=[1])
    p.call("counted", keys=[NEW_KEY], args=[1])
    p.call("counted", keys=[MOVED_KEY], args=[1])
    assert driver.run(p.execute()) == [11, 21, 1, 12]  # in the caller's order, each ran once
    assert migration.on_target("MGET", MOVED_KEY, NEW_KEY) == [b"12", b"1"]
    assert migration.source.get(STAYED_KEY) == b"21"


def test_transaction_pipeline_on_a_migrating_slot(
    driver: Driver, migration: Migration, cluster: EmbeddedCluster
) -> None:
    """All the keys are on B: A refuses the queued calls (EXECABORT, nothing ran); they
    are sent again as ASKING, MULTI ... EXEC on B."""
    reg = ScriptRegistry([COUNTER])
    p = reg.pipeline(driver.cluster(cluster.ports[0]), transaction=True)
    p.call("counted", keys=[MOVED_KEY], args=[1])
    p.call("counted", keys=[MOVED_KEY], args=[2])
    p.incr(MOVED_KEY)
    assert driver.run(p.execute()) == [11, 13, 14]
    assert migration.on_target("GET", MOVED_KEY) == b"14"


def test_transaction_split_by_the_migration_runs_nowhere(
    driver: Driver, migration: Migration, cluster: EmbeddedCluster
) -> None:
    """One key moved, one not: no node can run it atomically until the migration ends.
    Sending it to B with ASKING would create a second STAYED_KEY there; it must not."""
    reg = ScriptRegistry([COUNTER], policy=luapipe.RetryPolicy(redirects=3, refresh_cap=0.1))
    p = reg.pipeline(driver.cluster(cluster.ports[0]), transaction=True)
    p.call("counted", keys=[MOVED_KEY], args=[1])
    p.call("counted", keys=[STAYED_KEY], args=[1])
    with pytest.raises(ConnectionFailed, match="split by a slot migration") as err:
        driver.run(p.execute())
    assert "after 3 attempts; it did not run" in str(err.value)  # the policy
    assert migration.on_target("GET", MOVED_KEY) == b"10"
    assert migration.on_target("EXISTS", STAYED_KEY) == 0  # no second copy on B
    assert migration.source.get(STAYED_KEY) == b"20"


RATE_LIMIT = luapipe.load_operation(EXAMPLES_DIR / "operations" / "rate_limit.toml")
INCR_MANY = luapipe.load_operation(EXAMPLES_DIR / "operations" / "incr_many.toml")


@pytest.mark.parametrize("form", RATE_LIMIT.forms)
def test_generated_forms_follow_ask(
    driver: Driver, migration: Migration, cluster: EmbeddedCluster, form: str
) -> None:
    """Every generated form, on a key of the migrating slot that A no longer has."""
    c = driver.cluster(cluster.ports[0])
    key = f"{TAG}:rl:{driver.name}:{form}"
    args = {"limit": 3, "window": 30}
    assert driver.run(RATE_LIMIT.run(c, form, keys={"counter": key}, args=args)) == [1, 2]
    assert driver.run(RATE_LIMIT.run(c, form, keys={"counter": key}, args=args)) == [1, 1]
    assert migration.on_target("GET", key) == b"2"  # two calls, each ran once, on B
    assert 0 < int(migration.on_target("TTL", key)) <= 30  # type: ignore[call-overload]


@pytest.mark.parametrize("form", ["naive", "pipelined"])
def test_generated_form_follows_ask_per_command(
    driver: Driver, migration: Migration, cluster: EmbeddedCluster, form: str
) -> None:
    """incr_many (one INCRBY per counter) routed per command: the moved and the new key
    go to B after ASKING, the stayed key to A; each INCRBY runs once."""
    c = driver.cluster(cluster.ports[0])
    keys = {"counters": [MOVED_KEY, STAYED_KEY, NEW_KEY]}
    assert driver.run(INCR_MANY.run(c, form, keys=keys, args={"by": 1})) == 3
    assert migration.on_target("MGET", MOVED_KEY, NEW_KEY) == [b"11", b"1"]
    assert migration.source.get(STAYED_KEY) == b"21"
