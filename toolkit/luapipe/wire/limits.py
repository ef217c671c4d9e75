"""The server's ``proto-max-bulk-len``: an argument longer than it is refused before sending.

Redis answers a bulk string longer than ``proto-max-bulk-len`` (512 MB by default, never
below 1 MB) with a protocol error and closes the connection, often while the client is still
writing: a lone call then reads as a refusal, but a pipeline reads as a reset whose outcome
is unknown, and everything queued beside the big value is lost. So a call or a pipeline that
holds a value of 1 MB or more asks the node's limit first (``CONFIG GET``, one round trip,
only then) and refuses the value by name if it is over; where CONFIG is not allowed (an ACL
user without it, a managed service that renames it) Redis's default, 512 MB, applies.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from redis.exceptions import DataError

from luapipe.errors import CallArgumentError
from luapipe.wire.replies import Command, ReplyError
from luapipe.wire.routing import Send, Steps

__all__ = [
    "DEFAULT_LIMIT",
    "SMALLEST_LIMIT",
    "Sized",
    "check_sizes",
    "limit_steps",
    "might_exceed",
    "sent_size",
]

#: the lowest ``proto-max-bulk-len`` Redis accepts: a shorter value is never refused
SMALLEST_LIMIT = 1024 * 1024
#: Redis's default, assumed where ``CONFIG GET`` is not allowed
DEFAULT_LIMIT = 512 * 1024 * 1024
#: a str shorter than this is shorter than SMALLEST_LIMIT once encoded (UTF-8: <= 4 bytes)
_SHORT_STR = SMALLEST_LIMIT // 4
_BINARY = frozenset({bytes, bytearray, memoryview})
_CONFIG_GET = Command(("CONFIG", "GET", "proto-max-bulk-len"))

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
        elif cls in _BINARY and sent_size(v) >= SMALLEST_LIMIT:
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


def limit_steps(node: str) -> Steps[int]:
    """The ``proto-max-bulk-len`` of ``node`` (one round trip); the default if CONFIG is
    refused or its answer cannot be read."""
    (reply,) = yield Send([_CONFIG_GET], node)
    if isinstance(reply, ReplyError):
        return DEFAULT_LIMIT
    # RESP3: {name: value}; RESP2: [name, value]
    values = list(reply.values()) if isinstance(reply, dict) else list(reply or [])[1:2]
    try:
        return int(values[0])
    except (IndexError, TypeError, ValueError):
        return DEFAULT_LIMIT


def check_sizes(node: str, limit: int, items: Sequence[Sized]) -> None:
    """Refuse the first value of ``items`` longer than ``limit`` (the node's), by name."""
    for who, kind, values, name_of in items:
        for i, v in enumerate(values):
            size = sent_size(v)
            if size > limit:
                raise CallArgumentError(
                    f"{who}: {kind}[{i}]{name_of(i)} is {size:,} bytes, more than the "
                    f"proto-max-bulk-len of the server at {node} ({limit:,} bytes); nothing "
                    "was sent (raise it with CONFIG SET proto-max-bulk-len, or send less)",
                    like=DataError,
                )
