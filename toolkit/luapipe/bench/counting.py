"""Measure round trips and commands per operation on the client side.

:class:`CountingConnection` is a redis-py connection that counts every write it sends to the
server (one write = one round trip for request/response use) and every command packed into
those writes. :func:`counting_client` builds a client on it; :func:`counters` reads the
totals of every connection that client's pool made.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.connection import Connection, HiredisRespSerializer
from redis.retry import Retry
from redis.utils import HIREDIS_AVAILABLE

__all__ = ["CountingConnection", "Counts", "counters", "counting_client"]


class _NumbersFirst(HiredisRespSerializer):
    """hiredis's C packer, given every int and float already as bytes.

    For an int or a float, ``hiredis.pack_command`` calls ``PyObject_Repr``, which runs
    pending signal handlers, and uses its result unchecked: Ctrl-C or SIGTERM landing there
    (luapipe's handlers raise KeyboardInterrupt, as Python's own does) made it NULL and the
    process died of SIGSEGV instead of stopping what it started (hiredis 3.5.0; a demo or
    bench interrupted during its timed loop, one run in ~50 on a busy machine). The same
    bytes as hiredis makes (``repr``), made in Python, where an interrupt is an exception."""

    def pack(self, *args: Any) -> list[bytes]:
        plain: list[Any] = [
            repr(a).encode() if type(a) is int or isinstance(a, float) else a for a in args
        ]
        packed: list[bytes] = super().pack(*plain)
        return packed


class CountingConnection(Connection):
    """A :class:`redis.connection.Connection` that counts writes and commands."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if HIREDIS_AVAILABLE:  # an interrupt while packing a number must not crash
            kwargs.setdefault("command_packer", _NumbersFirst())
        super().__init__(*args, **kwargs)  # type: ignore[no-untyped-call]
        self.writes = 0
        self.commands = 0

    def send_command(self, *args: Any, **kwargs: Any) -> None:
        self.commands += 1
        super().send_command(*args, **kwargs)  # type: ignore[no-untyped-call]

    def pack_command(self, *args: Any) -> list[bytes | memoryview]:
        # luapipe's transport packs single commands itself; redis-py's send_command does not
        # call this, so nothing is counted twice
        self.commands += 1
        packed: list[bytes | memoryview] = super().pack_command(*args)  # type: ignore[no-untyped-call]
        return packed

    def pack_commands(self, commands: Any) -> list[bytes | memoryview]:
        cmds = list(commands)
        self.commands += len(cmds)
        packed: list[bytes | memoryview] = super().pack_commands(cmds)  # type: ignore[no-untyped-call]
        return packed

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        self.writes += 1
        super().send_packed_command(command, check_health=check_health)  # type: ignore[no-untyped-call]


@dataclass(frozen=True)
class Counts:
    """Totals since the client was built."""

    round_trips: int
    commands: int

    def minus(self, other: Counts) -> Counts:
        return Counts(self.round_trips - other.round_trips, self.commands - other.commands)


def counting_client(url: str, **kwargs: Any) -> redis.Redis:
    """A client on :class:`CountingConnection` (no retries: a benchmark must not re-send)."""
    kwargs.setdefault("retry", Retry(NoBackoff(), 0))
    pool = redis.ConnectionPool.from_url(url, connection_class=CountingConnection, **kwargs)
    return redis.Redis(connection_pool=pool, retry=Retry(NoBackoff(), 0))


def _connections(client: redis.Redis) -> list[Any]:
    pool: Any = client.connection_pool
    found: list[Any] = []
    for attr in ("_available_connections", "_in_use_connections"):
        conns = getattr(pool, attr, None)
        if conns:
            found.extend(conns)
    return found


def counters(client: redis.Redis) -> Counts:
    """Sum of the counters of every connection the client's pool holds (every node's pool
    for a cluster client)."""
    nodes = getattr(client, "get_nodes", None)
    conns: list[Any] = []
    if nodes is not None:
        for node in nodes():
            if node.redis_connection is not None:
                conns.extend(_connections(node.redis_connection))
    else:
        conns = _connections(client)
    writes = commands = 0
    for conn in conns:
        writes += getattr(conn, "writes", 0)
        commands += getattr(conn, "commands", 0)
    return Counts(writes, commands)
