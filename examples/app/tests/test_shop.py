"""The shop service, tested with luapipe's pytest plugin on a real server and fakeredis."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest
import redis
import redis.asyncio
from shop import Shop
from shop.server import serve

from luapipe import ScriptRegistry
from luapipe.pytest_plugin import Chaos, ScriptRuns

T = TypeVar("T")
Make = Callable[..., redis.asyncio.Redis]


def with_shop(make: Make, reg: ScriptRegistry, body: Callable[[Shop], Awaitable[T]]) -> T:
    async def main() -> T:
        client = make()
        try:
            return await body(Shop(client, reg, limit=3, window_s=60))
        finally:
            await client.aclose()

    return asyncio.run(main())


@pytest.mark.luapipe_both
@pytest.mark.parametrize("form", ["script", "pipelined"])
def test_rate_limiter_allows_the_limit_then_refuses(
    luapipe_async: Make, luapipe_registry: ScriptRegistry, form: str
) -> None:
    async def body(shop: Shop) -> list[tuple[bool, int]]:
        return [((d := await shop.hit("alice", form)).allowed, d.hits) for _ in range(5)]

    got = with_shop(luapipe_async, luapipe_registry, body)
    assert got == [(True, 1), (True, 2), (True, 3), (False, 4), (False, 5)]


@pytest.mark.luapipe_both
def test_racing_reservations_never_oversell(
    luapipe_async: Make, luapipe_registry: ScriptRegistry, luapipe_client: redis.Redis
) -> None:
    async def body(shop: Shop) -> list[int]:
        await shop.set_stock("42", 10)
        return list(await asyncio.gather(*(shop.reserve("42", 1) for _ in range(25))))

    results = with_shop(luapipe_async, luapipe_registry, body)
    assert sorted(r for r in results if r >= 0) == list(range(10))
    assert results.count(-1) == 15
    assert luapipe_client.get("stock:{42}") == b"0"


def test_a_flushed_script_cache_still_reserves_exactly_once(
    luapipe_async: Make,
    luapipe_registry: ScriptRegistry,
    luapipe_runs: ScriptRuns,
    luapipe_chaos: Chaos,
) -> None:
    async def body(shop: Shop) -> list[int]:
        await shop.set_stock("7", 5)
        first = await shop.reserve("7", 2)
        luapipe_chaos.failover()  # cache empty, connections dropped
        with luapipe_runs.expect(1):
            second = await shop.reserve("7", 2)
        return [first, second, await shop.stock("7")]

    assert with_shop(luapipe_async, luapipe_registry, body) == [3, 1, 1]


async def http(port: int, method: str, path: str) -> tuple[int, dict[str, Any]]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
    await writer.drain()
    raw = await reader.read()
    writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


def test_http_endpoints(luapipe_async: Make, luapipe_registry: ScriptRegistry) -> None:
    async def body(shop: Shop) -> list[tuple[int, dict[str, Any]]]:
        server = await serve(shop, port=0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            return [
                await http(port, "PUT", "/stock/9?qty=2"),
                await http(port, "POST", "/reserve/9?qty=2"),
                await http(port, "POST", "/reserve/9?qty=1"),
                await http(port, "POST", "/reserve/9?qty=0"),
                *[await http(port, "POST", "/limit/bob?form=pipelined") for _ in range(4)],
                await http(port, "GET", "/nowhere"),
            ]

    got = with_shop(luapipe_async, luapipe_registry, body)
    assert [status for status, _ in got] == [200, 200, 409, 503, 200, 200, 200, 429, 404]
    assert got[1][1] == {"sku": "9", "left": 0}
    assert "amount must be a positive integer" in got[3][1]["error"]
    assert got[7][1]["allowed"] is False and got[7][1]["hits"] == 4
