"""Helpers for reading what the server really saw."""

from __future__ import annotations

import redis


def calls(client: redis.Redis, command: str) -> int:
    """How many times the server ran ``command`` (INFO commandstats, e.g. "evalsha")."""
    stats = client.info("commandstats")
    entry = stats.get(f"cmdstat_{command.lower()}")
    return int(entry["calls"]) if entry else 0


def reset_stats(client: redis.Redis) -> None:
    client.config_resetstat()
