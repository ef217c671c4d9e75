"""A request no cluster node would take, every attempt proving it did not run (its primary
SIGKILLed and no replica to take over: each connection refused before anything was sent),
ends as ConnectionFailed on every path (reg.call, a pipeline, the auto-pipeline), naming
the slot and the attempts: code that retries on ConnectionFailed may send it again, as
it may for any call that did not run. It was a ServerError, which such code does not
retry."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import redis
import redis.asyncio.cluster as acluster
import redis.exceptions as rex

import luapipe
from luapipe.bench.cluster import EmbeddedCluster
from luapipe.errors import ConnectionFailed, ServerError
from luapipe.scripts.registry import ScriptRegistry

from ..drivers import Driver
from .test_cluster_migration import COUNTER

pytestmark = pytest.mark.cluster

POLICY = luapipe.RetryPolicy(redirects=2, refresh_base=0.01, refresh_cap=0.02)


@dataclass
class Headless:
    cluster: EmbeddedCluster
    dead: str  # a key whose primary is gone
    live: str  # a key on a node that answers
    slot: int
    port: int  # a live node's port


@pytest.fixture(scope="module")
def headless() -> Iterator[Headless]:
    c = EmbeddedCluster(primaries=3).start()
    try:
        rc = c.client()
        start = c.ports[0]
        victim = next(n for n in c.nodes if n.port != start)
        dead = next(
            f"k{i}" for i in range(1000) if rc.get_node_from_key(f"k{i}").port == victim.port
        )
        live = next(f"k{i}" for i in range(1000) if rc.get_node_from_key(f"k{i}").port == start)
        slot = rc.keyslot(dead)
        rc.close()
        os.kill(victim.pid, signal.SIGKILL)
        yield Headless(c, dead, live, slot, start)
    finally:
        c.stop()


def assert_gave_up(err: BaseException, slot: int) -> None:
    assert isinstance(err, ConnectionFailed) and not isinstance(err, ServerError)
    assert isinstance(err, rex.ConnectionError)  # redis-py's handlers still catch it
    assert isinstance(err, rex.ClusterError)  # what redis-py raises when its TTL runs out
    text = str(err)
    assert f"(slot {slot}) after 2 attempts; it did not run" in text, text
    assert "cannot connect to Redis at" in text, text  # the last cause


def test_reg_call_and_pipeline(driver: Driver, headless: Headless) -> None:
    reg = ScriptRegistry([COUNTER], policy=POLICY)
    client = driver.cluster(headless.port)
    with pytest.raises(ConnectionFailed) as info:
        driver.run(reg.call(client, "counted", keys=[headless.dead], args=[1]))
    assert_gave_up(info.value, headless.slot)
    pipe = reg.pipeline(client)
    pipe.call("counted", keys=[headless.live], args=[1]).incr(headless.dead)
    with pytest.raises(ConnectionFailed) as info:
        driver.run(pipe.execute())
    assert_gave_up(info.value, headless.slot)


def test_autopipeline_asyncio(headless: Headless) -> None:
    reg = ScriptRegistry([COUNTER], policy=POLICY)

    async def main() -> list[BaseException]:
        client = acluster.RedisCluster(host="127.0.0.1", port=headless.port)
        ap = luapipe.autopipeline(client, policy=POLICY)
        out = await asyncio.gather(
            ap.incr(headless.dead),
            reg.call(ap, "counted", keys=[headless.dead], args=[1]),
            ap.zunionstore(headless.dead, [headless.dead]),
            return_exceptions=True,
        )
        await ap.aclose()
        await client.aclose()
        return out  # type: ignore[return-value]

    for err in asyncio.run(main()):
        assert_gave_up(err, headless.slot)


def test_autopipeline_threads(headless: Headless) -> None:
    reg = ScriptRegistry([COUNTER], policy=POLICY)
    ap: Any = luapipe.autopipeline(
        redis.cluster.RedisCluster(host="127.0.0.1", port=headless.port), policy=POLICY
    )
    try:
        for call in (
            lambda: ap.incr(headless.dead),
            lambda: reg.call(ap, "counted", keys=[headless.dead], args=[1]),
        ):
            with pytest.raises(ConnectionFailed) as info:
                call()
            assert_gave_up(info.value, headless.slot)
    finally:
        ap.close()
        ap.client.close()
