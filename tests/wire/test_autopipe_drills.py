"""Drills: the auto-pipeline under load while the server misbehaves, counted exactly.

Like go-redis's "truth" tests (the server's count equals the successful calls), plus the
faults they lack. Every call appends its own number to its caller's list on the server, so
afterwards each outcome can be checked against what ran:

- a call that returned ran exactly once;
- a call that got :class:`ConnectionFailed` did not run at all;
- a call that got :class:`OutcomeUnknown` ran at most once;
- no other error; nothing ran twice; each caller's numbers are in the order it issued them
  (also the two calls a caller issues at once with ``asyncio.gather``).

Faults: a script and function cache flushed every 5 ms; CLIENT KILL of the auto-pipeline's
connections at random points; a graceful restart of the server (asyncio and threads); a
coordinated failover (``CLUSTER FAILOVER``) on a 3+3 cluster.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

import pytest
import redis
import redis.asyncio
import redis.asyncio.cluster as acluster
import redis.cluster

import luapipe
from luapipe.bench.cluster import EmbeddedCluster
from luapipe.bench.server import EmbeddedRedis, ServerProcess
from luapipe.errors import ConnectionFailed, OutcomeUnknown
from luapipe.scripts.calls import call_steps
from luapipe.scripts.libparse import parse_library
from luapipe.scripts.protocol import KnownScripts, ScriptCall
from luapipe.scripts.registry import ScriptRegistry
from luapipe.scripts.script import LuaScript
from luapipe.wire.policy import DEFAULT

from ..helpers import emptied_cluster_client

APPEND = LuaScript.from_source(
    "append", "-- @key log\n-- @arg item\nreturn redis.call('RPUSH', KEYS[1], ARGV[1])\n"
)
LIBRARY = parse_library(
    "#!lua name=drill\n"
    "redis.register_function('drill_append', function(keys, args) "
    "return redis.call('RPUSH', keys[1], args[1]) end)\n"
)


def registry() -> ScriptRegistry:
    return ScriptRegistry([APPEND], libraries=[LIBRARY])


def log_key(caller: int) -> str:
    return f"drill:{{c{caller}}}"


@dataclass
class Ledger:
    """What each call got back, checked against what the server ran."""

    outcomes: dict[tuple[int, int], Any] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, caller: int, item: int, outcome: Any) -> None:
        with self.lock:
            self.outcomes[caller, item] = outcome

    def check(self, logs: dict[int, list[int]]) -> dict[str, int]:
        ran = Counter((c, i) for c, items in logs.items() for i in items)
        twice = [k for k, n in ran.items() if n > 1]
        assert not twice, f"ran twice: {twice[:5]}"
        counts = Counter[str]()
        for key, outcome in self.outcomes.items():
            if isinstance(outcome, OutcomeUnknown):
                counts["unknown, ran" if ran[key] else "unknown, did not run"] += 1
            elif isinstance(outcome, ConnectionFailed):
                assert not ran[key], f"{key} got ConnectionFailed but ran: {outcome}"
                counts["not sent (ConnectionFailed)"] += 1
            elif isinstance(outcome, BaseException):
                raise AssertionError(f"{key}: wrong error class {outcome!r}") from outcome
            else:
                assert ran[key] == 1, f"{key} returned {outcome!r} but ran {ran[key]} times"
                counts["ok"] += 1
        extra = set(ran) - set(self.outcomes)
        assert not extra, f"ran but never issued: {sorted(extra)[:5]}"
        for caller, items in logs.items():  # each caller's calls applied in its order
            late = next((b for a, b in pairwise(items) if b < a), None)
            assert late is None, f"caller {caller}: {late} applied after a later call"
        counts["calls"] = len(self.outcomes)
        return dict(counts)


def read_logs(client: Any, callers: int) -> dict[int, list[int]]:
    return {c: [int(x) for x in client.lrange(log_key(c), 0, -1)] for c in range(callers)}


async def async_caller(
    ap: Any,
    reg: ScriptRegistry,
    known: KnownScripts,
    caller: int,
    ledger: Ledger,
    until: Callable[[], bool],
    *,
    functions: bool = True,
) -> None:
    """Issue calls of every kind, and pairs at once, until ``until()``."""
    key = log_key(caller)
    item = 0

    async def one(n: int) -> None:
        kind = n % (4 if functions else 3)
        try:
            if kind == 0:  # the registry: EVAL
                out = await reg.call(ap, "append", keys=[key], args=[n])
            elif kind == 1:  # a command
                out = await ap.rpush(key, n)
            elif kind == 2:  # steps that send EVALSHA and heal a NOSCRIPT (op.run's script form)
                call = ScriptCall(APPEND, (key,), (n,))
                out = await ap.run(call_steps(call, known, DEFAULT, cluster=ap.on_cluster))
            else:  # a function of a library: FCALL, healed on "Function not found"
                out = await reg.call(ap, "drill_append", keys=[key], args=[n])
        except Exception as exc:
            ledger.record(caller, n, exc)
            return
        ledger.record(caller, n, out)

    while not until():
        if item % 5 == 4:  # two at once: the first must still apply first
            await asyncio.gather(one(item), one(item + 1))
            item += 2
        else:
            await one(item)
            item += 1


def thread_caller(
    ap: Any, reg: ScriptRegistry, caller: int, ledger: Ledger, until: Callable[[], bool]
) -> None:
    key = log_key(caller)
    item = 0
    while not until():
        try:
            if item % 2:
                out = ap.rpush(key, item)
            else:
                out = reg.call(ap, "append", keys=[key], args=[item])
        except Exception as exc:
            ledger.record(caller, item, exc)
        else:
            ledger.record(caller, item, out)
        item += 1


def report(name: str, counts: dict[str, int], **extra: Any) -> None:
    shown = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
    more = ", ".join(f"{k} {v}" for k, v in extra.items())
    print(f"\ndrill {name}: {shown}" + (f"; {more}" if more else ""))


# -- a 5 ms SCRIPT FLUSH and FUNCTION FLUSH storm ------------------------------------------


def test_flush_storm_every_call_exactly_once_in_order(
    r: redis.Redis, redis_server: ServerProcess
) -> None:
    reg = registry()
    known = KnownScripts()
    ledger = Ledger()
    stop = threading.Event()
    flushes = 0

    def storm() -> None:
        nonlocal flushes
        with redis.Redis(host=redis_server.host, port=redis_server.port) as admin:
            while not stop.wait(0.005):
                admin.script_flush()
                admin.function_flush()
                flushes += 1

    async def main() -> None:
        client = redis.asyncio.Redis(host=redis_server.host, port=redis_server.port)
        ap = luapipe.autopipeline(client)
        deadline = time.monotonic() + 1.0
        try:
            await asyncio.gather(
                *(
                    async_caller(ap, reg, known, c, ledger, lambda: time.monotonic() > deadline)
                    for c in range(24)
                )
            )
        finally:
            await ap.aclose()
            await client.aclose()

    flusher = threading.Thread(target=storm)
    flusher.start()
    try:
        r.config_resetstat()
        asyncio.run(main())
    finally:
        stop.set()
        flusher.join()
    counts = ledger.check(read_logs(r, 24))
    stats = r.info("commandstats")
    noscript = int(stats.get("cmdstat_evalsha", {}).get("failed_calls", 0))
    unloaded = int(stats.get("cmdstat_fcall", {}).get("failed_calls", 0))
    report("flush storm", counts, flushes=flushes, noscript=noscript, unloaded_fcalls=unloaded)
    assert counts == {"ok": counts["calls"], "calls": counts["calls"]}  # no error at all
    assert flushes > 50 and noscript > 0 and unloaded > 0  # the storm really hit


# -- CLIENT KILL at random points -----------------------------------------------------------


def test_client_kill_at_random_points(r: redis.Redis, redis_server: ServerProcess) -> None:
    reg = registry()
    known = KnownScripts()
    ledger = Ledger()
    stop = threading.Event()
    kills = 0
    rng = random.Random(20)

    def killer() -> None:
        nonlocal kills
        with redis.Redis(host=redis_server.host, port=redis_server.port) as admin:
            while not stop.wait(rng.uniform(0.002, 0.02)):
                for c in admin.client_list():
                    if c.get("name") == "drill":
                        admin.client_kill_filter(_id=c["id"])
                        kills += 1

    async def main() -> None:
        client = redis.asyncio.Redis(
            host=redis_server.host, port=redis_server.port, client_name="drill"
        )
        ap = luapipe.autopipeline(client)
        deadline = time.monotonic() + 1.0
        try:
            await asyncio.gather(
                *(
                    async_caller(ap, reg, known, c, ledger, lambda: time.monotonic() > deadline)
                    for c in range(24)
                )
            )
        finally:
            await ap.aclose()
            await client.aclose()

    thread = threading.Thread(target=killer)
    thread.start()
    try:
        asyncio.run(main())
    finally:
        stop.set()
        thread.join()
    counts = ledger.check(read_logs(r, 24))
    report("client kill", counts, kills=kills)
    assert kills > 20 and counts["ok"] > counts["calls"] // 2


# -- a graceful restart ---------------------------------------------------------------------


@pytest.fixture
def durable() -> Iterator[EmbeddedRedis]:
    """A server of its own whose data survives a graceful restart (AOF, fsync always)."""
    server = EmbeddedRedis(["--appendonly", "yes", "--appendfsync", "always"])
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _restart_soon(server: EmbeddedRedis, after: float) -> threading.Thread:
    def go() -> None:
        time.sleep(after)
        server.restart()  # SIGTERM: Redis shuts down gracefully, then starts again

    t = threading.Thread(target=go)
    t.start()
    return t


def test_graceful_restart_asyncio(durable: EmbeddedRedis) -> None:
    reg = registry()
    known = KnownScripts()
    ledger = Ledger()
    assert durable.info is not None
    host, port = durable.info.host, durable.info.port

    async def main() -> None:
        client = redis.asyncio.Redis(host=host, port=port, socket_timeout=2)
        ap = luapipe.autopipeline(client)
        restarter = _restart_soon(durable, 0.3)
        try:
            await asyncio.gather(
                *(
                    async_caller(ap, reg, known, c, ledger, lambda: not restarter.is_alive())
                    for c in range(16)
                )
            )
            after = time.monotonic() + 0.3  # and on, on the new server
            await asyncio.gather(
                *(
                    async_caller(ap, reg, known, c, ledger, lambda: time.monotonic() > after)
                    for c in range(16, 32)
                )
            )
        finally:
            restarter.join()
            await ap.aclose()
            await client.aclose()

    asyncio.run(main())
    with redis.Redis(host=host, port=port) as admin:
        counts = ledger.check(read_logs(admin, 32))
    report("graceful restart (asyncio)", counts)
    assert counts["ok"] > 100


def test_graceful_restart_threads(durable: EmbeddedRedis) -> None:
    reg = registry()
    ledger = Ledger()
    assert durable.info is not None
    host, port = durable.info.host, durable.info.port
    ap = luapipe.autopipeline(redis.Redis(host=host, port=port, socket_timeout=2))
    restarter = _restart_soon(durable, 0.3)
    deadline = [0.0]

    def until() -> bool:
        if restarter.is_alive():
            return False
        deadline[0] = deadline[0] or time.monotonic() + 0.3
        return time.monotonic() > deadline[0]

    threads = [
        threading.Thread(target=thread_caller, args=(ap, reg, c, ledger, until)) for c in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    restarter.join()
    ap.close()
    with redis.Redis(host=host, port=port) as admin:
        counts = ledger.check(read_logs(admin, 8))
    report("graceful restart (threads)", counts)
    assert counts["ok"] > 100


# -- a coordinated failover on a 3+3 cluster ------------------------------------------------


@pytest.fixture(scope="module")
def cluster6() -> Iterator[EmbeddedCluster]:
    c = EmbeddedCluster(primaries=3, replicas=1).start()
    try:
        yield c
    finally:
        c.stop()


@pytest.mark.cluster
def test_coordinated_failover_on_a_cluster(cluster6: EmbeddedCluster) -> None:
    rc = emptied_cluster_client(cluster6)
    reg = registry()
    known = KnownScripts()
    ledger = Ledger()
    callers = 16
    primary = rc.get_node_from_key(log_key(0))
    replica = next(
        n
        for n in rc.get_nodes()
        if n.server_type == "replica"
        and rc.get_redis_connection(n).info("replication")["master_port"] == primary.port
    )
    promoted = threading.Event()

    def failover() -> None:
        time.sleep(0.3)
        node = rc.get_redis_connection(replica)
        node.execute_command("CLUSTER", "FAILOVER")
        deadline = time.monotonic() + 15
        while node.info("replication")["role"] != "master":
            assert time.monotonic() < deadline, "failover did not happen"
            time.sleep(0.01)
        promoted.set()

    async def main() -> None:
        client = acluster.RedisCluster(host="127.0.0.1", port=cluster6.ports[0])
        ap = luapipe.autopipeline(client)
        thread = threading.Thread(target=failover)
        thread.start()
        after = [0.0]

        def until() -> bool:
            if not promoted.is_set():
                return False
            after[0] = after[0] or time.monotonic() + 0.3
            return time.monotonic() > after[0]

        try:
            await asyncio.gather(
                *(async_caller(ap, reg, known, c, ledger, until) for c in range(callers))
            )
        finally:
            thread.join()
            await ap.aclose()
            await client.aclose()

    asyncio.run(main())
    fresh = cluster6.client()
    counts = ledger.check(read_logs(fresh, callers))
    fresh.close()
    rc.close()
    report("coordinated failover", counts)
    assert counts["ok"] > 100
