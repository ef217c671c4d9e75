"""The server's ``proto-max-bulk-len``: an argument longer than it is refused before sending.

Redis answers a bulk string longer than ``proto-max-bulk-len`` (512 MB by default, never
below 1 MB) with a protocol error and closes the connection, often while the client is still
writing: a lone call then reads as a refusal, but a pipeline reads as a reset whose outcome
is unknown, and everything queued beside the big value is lost. So a call or a pipeline that
holds a value of 1 MB or more asks the node's limit first (``CONFIG GET``, one round trip,
only then) and refuses the value by name if it is over; where CONFIG is not allowed (an ACL
user without it, a managed service that renames it) Redis's default, 512 MB, applies.

A registry remembers each node's limit (:class:`BulkLimits`), so later big values are sent
without asking again; a value the remembered limit refuses is checked against a fresh one
first (the limit may have been raised since). If the question itself gets no answer, the
request was not sent: :class:`~luapipe.errors.ConnectionFailed`, nothing ran.

:func:`refusal` is the one way a value over the limit is refused, in every form (and the
CLI's ``--arg-file``, which reads a file no further than :func:`bulk_limit`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from redis.exceptions import DataError
from redis.exceptions import TimeoutError as RedisTimeoutError

from luapipe.errors import CallArgumentError, ConnectionFailed, OutcomeUnknown, redis_io_class
from luapipe.wire.drivers import drive
from luapipe.wire.replies import Command, ReplyError
from luapipe.wire.routing import Nodes, Send, Steps

__all__ = [
    "BulkLimits",
    "DEFAULT_LIMIT",
    "LIMIT_QUESTION",
    "SMALLEST_LIMIT",
    "Sized",
    "bulk_limit",
    "check_sizes",
    "fits",
    "limit_steps",
    "sizes_steps",
    "might_exceed",
    "refusal",
    "sent_size",
    "smallest_limit_steps",
]

#: the lowest ``proto-max-bulk-len`` Redis accepts: a shorter value is never refused
SMALLEST_LIMIT = 1024 * 1024
#: Redis's default, assumed where ``CONFIG GET`` is not allowed
DEFAULT_LIMIT = 512 * 1024 * 1024
#: a str shorter than this is shorter than SMALLEST_LIMIT once encoded (UTF-8: <= 4 bytes)
_SHORT_STR = SMALLEST_LIMIT // 4
_TEXT_OR_BINARY = (str, bytes, bytearray, memoryview)
#: the question asked before a value of 1 MB or more is sent
LIMIT_QUESTION = _CONFIG_GET = Command(("CONFIG", "GET", "proto-max-bulk-len"))

#: (who, kind, values, name_of): ``("script 'x'", "args", [...], name_of)`` where
#: ``name_of(i)`` is the declared name of position i as messages show it (`` (limit)``)
Sized = tuple[str, str, Sequence[Any], Callable[[int], str]]


def might_exceed(values: Sequence[Any]) -> bool:
    """Whether a value of ``values`` could be over the smallest limit (cheap: lengths only)."""
    for v in values:
        cls = v.__class__
        if cls is str:
            if len(v) >= _SHORT_STR:
                return True
        elif (  # bytes, bytearray, memoryview, or a subclass of str or bytes
            cls is not int and isinstance(v, _TEXT_OR_BINARY) and sent_size(v) >= SMALLEST_LIMIT
        ):
            return True
    return False


def sent_size(value: Any) -> int:
    """How many bytes ``value`` is on the wire (as redis-py encodes it)."""
    if isinstance(value, str):
        return len(value.encode("utf-8", "surrogateescape"))
    if isinstance(value, memoryview):
        return value.nbytes
    if isinstance(value, bytes | bytearray):
        return len(value)
    return len(repr(value))


class BulkLimits:
    """The ``proto-max-bulk-len`` last read from each node (thread-safe; a hint: a value it
    refuses is checked against a fresh reading first)."""

    def __init__(self) -> None:
        self._by_node: dict[str, int] = {}
        self._lock = threading.Lock()

    def get(self, node: str) -> int | None:
        return self._by_node.get(node)

    def set(self, node: str, limit: int) -> None:
        with self._lock:
            self._by_node[node] = limit


def limit_steps(node: str) -> Steps[int]:
    """The ``proto-max-bulk-len`` of ``node`` (one round trip); the default if CONFIG is
    refused or its answer cannot be read. No answer at all: :class:`ConnectionFailed` (the
    question changes nothing, and the request it guards was not sent)."""
    try:
        (reply,) = yield Send([_CONFIG_GET], node)
    except OutcomeUnknown as exc:
        cls = RedisTimeoutError if isinstance(exc, RedisTimeoutError) else redis_io_class(exc)
        raise ConnectionFailed(
            f"the server at {node} did not answer CONFIG GET proto-max-bulk-len, asked before "
            f"sending a value of 1 MB or more ({exc}); nothing ran",
            like=cls,
        ) from None
    if isinstance(reply, ReplyError):
        return DEFAULT_LIMIT
    # RESP3: {name: value}; RESP2: [name, value]
    values = list(reply.values()) if isinstance(reply, dict) else list(reply or [])[1:2]
    try:
        return int(values[0])
    except (IndexError, TypeError, ValueError):
        return DEFAULT_LIMIT


def fits(limit: int, items: Sequence[Sized]) -> bool:
    """Whether every value of ``items`` is at most ``limit`` bytes."""
    return all(sent_size(v) <= limit for _who, _kind, values, _n in items for v in values)


def sizes_steps(node: str, items: Sequence[Sized], known: BulkLimits | None) -> Steps[None]:
    """Refuse a value of ``items`` over ``node``'s limit: the remembered one lets it pass
    without a round trip; otherwise (or if it refuses) a fresh one decides."""
    cached = known.get(node) if known is not None else None
    if cached is not None and fits(cached, items):
        return
    limit = yield from limit_steps(node)
    if known is not None:
        known.set(node, limit)
    check_sizes(node, limit, items)


def check_sizes(node: str, limit: int, items: Sequence[Sized]) -> None:
    """Refuse the first value of ``items`` longer than ``limit`` (the node's), by name."""
    for who, kind, values, name_of in items:
        for i, v in enumerate(values):
            size = sent_size(v)
            if size > limit:
                raise refusal(f"{who}: {kind}[{i}]{name_of(i)}", size, node, limit)


def refusal(what: str, size: int | None, node: str, limit: int) -> CallArgumentError:
    """The refusal of a value longer than ``node``'s ``limit``: ``what`` names the value
    (``script 'x': args[1] (limit)``), ``size`` is its length in bytes, or None for one read
    no further than the limit (a stream: its length is not known)."""
    how = f"is {size:,} bytes, more" if size is not None else "is longer"
    return CallArgumentError(
        f"{what} {how} than the proto-max-bulk-len of the server at {node} ({limit:,} "
        "bytes); nothing was sent (raise it with CONFIG SET proto-max-bulk-len, or send less)",
        like=DataError,
    )


def smallest_limit_steps() -> Steps[tuple[int, str]]:
    """The smallest ``proto-max-bulk-len`` of the nodes a call may go to (the server, or
    every node of a cluster), and that node: what a value read before its call knows where
    it goes (a file) must fit."""
    nodes = yield Nodes()
    found = []
    for node in nodes:
        found.append(((yield from limit_steps(node)), node))
    return min(found)


def bulk_limit(client: Any) -> tuple[int, str]:
    """:func:`smallest_limit_steps` on a sync client (redis.Redis or RedisCluster)."""
    return drive(smallest_limit_steps(), client)
