"""A FUNCTION FLUSH every 5 ms while 60,000 function calls run (sync pipelines, sync
transactions, and asyncio calls from many tasks): exact counts. Every call returns the
counter it made, so a call run twice would show as a value twice, a lost one as a gap."""

from __future__ import annotations

import asyncio
import threading
import time

import redis
import redis.asyncio

from luapipe.bench.server import ServerProcess
from luapipe.scripts.registry import ScriptRegistry

from .test_function_calls import COUNTERS

PIPELINES, PIPE_CALLS = 400, 50  # 20,000 calls, a plain INCR beside each pipeline
TRANSACTIONS, TX_CALLS = 500, 20  # 10,000 calls
TASKS, TASK_CALLS = 20, 1_500  # 30,000 asyncio calls, all on one key at once


class Flusher(threading.Thread):
    """Another connection emptying the function libraries every ``every`` seconds."""

    def __init__(self, server: ServerProcess, every: float = 0.005) -> None:
        super().__init__(daemon=True)
        self.client = redis.Redis(host=server.host, port=server.port)
        self.every = every
        self.stop = threading.Event()
        self.flushes = 0

    def run(self) -> None:
        while not self.stop.is_set():
            self.client.function_flush()
            self.flushes += 1
            time.sleep(self.every)


def test_a_function_flush_storm_loses_no_call_and_runs_none_twice(
    r: redis.Redis, redis_server: ServerProcess
) -> None:
    reg = ScriptRegistry([], libraries=[COUNTERS])
    client = redis.Redis(host=redis_server.host, port=redis_server.port)
    flusher = Flusher(redis_server)
    t0 = time.monotonic()
    flusher.start()
    try:
        piped: list[int] = []
        reloads = 0
        with reg.pipeline(client) as pipe:
            for _ in range(PIPELINES):
                for _ in range(PIPE_CALLS):
                    pipe.call("bump", ["pipe"], [1])
                pipe.incr("pipe:plain")
                piped += pipe.execute()[:-1]
                reloads += pipe.last_reloads
        txed: list[int] = []
        with reg.pipeline(client, transaction=True) as tx:
            for _ in range(TRANSACTIONS):
                for _ in range(TX_CALLS):
                    tx.call("bump", ["tx"], [1])
                tx.incr("tx:plain")
                txed += tx.execute()[:-1]

        async def task(c: redis.asyncio.Redis) -> list[int]:
            return [await reg.call(c, "bump", ["aio"], [1]) for _ in range(TASK_CALLS)]

        async def tasks() -> list[int]:
            c = redis.asyncio.Redis(host=redis_server.host, port=redis_server.port)
            try:
                done = await asyncio.gather(*(task(c) for _ in range(TASKS)))
            finally:
                await c.aclose()
            return [v for values in done for v in values]

        aio = asyncio.run(tasks())
    finally:
        flusher.stop.set()
        flusher.join()
        flusher.client.close()
        client.close()
    made = {"pipe": len(piped), "tx": len(txed), "aio": len(aio)}
    ran = {k: int(r.get(k) or 0) for k in made}
    print(
        f"\nFUNCTION FLUSH storm: {flusher.flushes} flushes in {time.monotonic() - t0:.1f} s; "
        f"calls made {made} ({sum(made.values())}), server counters {ran}; "
        f"pipeline calls re-sent after 'not found' {reloads}; 0 errors surfaced"
    )
    assert sum(made.values()) == 60_000
    assert flusher.flushes > 100 and reloads > 0  # the storm did hit the calls
    assert piped == list(range(1, len(piped) + 1))  # each ran once, in order
    assert txed == list(range(1, len(txed) + 1))
    assert sorted(aio) == list(range(1, len(aio) + 1))  # no value twice, none missing
    assert ran == made  # the server's counters equal the calls
    assert r.mget("pipe:plain", "tx:plain") == [str(PIPELINES).encode(), str(TRANSACTIONS).encode()]
