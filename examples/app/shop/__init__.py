"""A small asyncio shop service on luapipe: a per-user rate limiter and stock reservation."""

from shop.service import Decision, Shop

__all__ = ["Decision", "Shop"]
