"""``python -m shop --redis-url redis://127.0.0.1:6379/0 --port 8080 [--limit 100]``."""

from __future__ import annotations

import argparse
import asyncio

import redis.asyncio

from luapipe import ScriptRegistry
from shop.server import serve
from shop.service import Shop


async def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="shop", description=__doc__)
    ap.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8080)
    ap.add_argument("--limit", type=int, default=100, help="requests per user per window")
    ap.add_argument("--window", type=int, default=60, help="window length in seconds")
    ap.add_argument("--scripts", default=None, help="scripts directory (default: bundled)")
    opts = ap.parse_args(argv)
    client = redis.asyncio.Redis.from_url(opts.redis_url)
    registry = ScriptRegistry.from_directory(opts.scripts)
    await registry.load(client)  # deploy at start: the first request pays nothing
    shop = Shop(client, registry, limit=opts.limit, window_s=opts.window)
    server = await serve(shop, opts.host, opts.port)
    port = server.sockets[0].getsockname()[1]
    print(f"shop listening on http://{opts.host}:{port}", flush=True)
    try:
        async with server:
            await server.serve_forever()
    finally:
        await client.aclose()


if __name__ == "__main__":
    asyncio.run(main())
