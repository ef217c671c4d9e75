"""The shop's Redis logic: every read-compute-write is one luapipe script call.

- :meth:`Shop.hit` is a fixed-window rate limiter (``rate_limit_fixed.lua``), or the same
  limiter as a redis-py pipeline (``form="pipelined"``: INCR, EXPIRE NX, PTTL in one round
  trip) so the two forms can be compared under load.
- :meth:`Shop.reserve` takes stock only if enough remains (``check_and_decr.lua``): it can
  never go below zero, however many requests race.

A reservation whose outcome is unknown (timeout, dropped connection) is never retried by
luapipe; the service answers 504 and says so, and the caller decides.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import redis.asyncio

from luapipe import ScriptRegistry

__all__ = ["FORMS", "Decision", "Shop"]

FORMS = ("script", "pipelined")


@dataclass(frozen=True)
class Decision:
    """One rate-limit decision."""

    allowed: bool
    hits: int
    reset_ms: int


class Shop:
    """The service's operations on one ``redis.asyncio`` client."""

    def __init__(
        self,
        client: redis.asyncio.Redis,
        registry: ScriptRegistry | None = None,
        *,
        limit: int = 100,
        window_s: int = 60,
    ) -> None:
        self.client = client
        self.registry = registry if registry is not None else ScriptRegistry.from_directory()
        self.limit = limit
        self.window_s = window_s

    async def hit(self, user: str, form: str = "script") -> Decision:
        """Count one request of ``user`` in the current window; allowed or not."""
        key = f"rl:{{{user}}}"
        if form == "script":
            allowed, hits, ttl = await self.registry.call(
                self.client, "rate_limit_fixed", keys=[key], args=[self.limit, self.window_s]
            )
            return Decision(bool(allowed), int(hits), int(ttl))
        if form == "pipelined":
            async with self.client.pipeline(transaction=False) as pipe:
                pipe.incr(key).expire(key, self.window_s, nx=True).pttl(key)
                hits, _, ttl = await pipe.execute()
            return Decision(int(hits) <= self.limit, int(hits), int(ttl))
        raise ValueError(f"unknown form {form!r}; choose one of {', '.join(FORMS)}")

    async def reserve(self, sku: str, qty: int) -> int:
        """Take ``qty`` of ``sku``: the stock left, or -1 if there was not enough."""
        left: Any = await self.registry.call(
            self.client, "check_and_decr", keys=[f"stock:{{{sku}}}"], args=[qty]
        )
        return int(left)

    async def set_stock(self, sku: str, qty: int) -> None:
        await self.client.set(f"stock:{{{sku}}}", qty)

    async def stock(self, sku: str) -> int:
        return int(await self.client.get(f"stock:{{{sku}}}") or 0)
