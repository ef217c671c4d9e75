"""Replies as the links read them: hiredis's reader or redis-py's, error replies as values.

Both flavours' links (:mod:`~luapipe.wire.autopipe.threadlink`,
:mod:`~luapipe.wire.autopipe.aiolink`) read a write's replies in order and hand each to the
scheduler. An error reply is a :class:`~luapipe.wire.replies.ReplyError` value for its call
alone; only a reply the parser cannot read (``InvalidResponse``) ends the connection.
"""

from __future__ import annotations

from typing import Any

import redis.exceptions as rex

from luapipe.wire.replies import ReplyError, full_error_text

__all__ = ["REPLY_ERRORS", "error_reply", "not_enough_data", "push_type"]

#: what redis-py's own reader raises for an error reply (LOADING too): a reply, not a lost
#: connection
REPLY_ERRORS = (rex.ResponseError, rex.BusyLoadingError)


def error_reply(reply: Exception) -> ReplyError:
    """An error hiredis's reader returned: the call's :class:`ReplyError`, or raised if it
    is the reader's own (the connection is out of step)."""
    if isinstance(reply, rex.InvalidResponse):
        raise reply
    return ReplyError(full_error_text(reply))


def not_enough_data() -> Any:
    """What redis-py's hiredis reader returns while a reply is incomplete."""
    from redis._parsers import hiredis as parsers

    return getattr(parsers, "NOT_ENOUGH_DATA", False)


_PUSH: list[Any] = []


def push_type() -> Any:
    """hiredis's push message type (RESP3 pushes are skipped), or None."""
    if not _PUSH:
        try:
            import hiredis

            _PUSH.append(getattr(hiredis, "PushNotification", None))
        except ImportError:  # pragma: no cover - hiredis is what this path reads with
            _PUSH.append(None)
    return _PUSH[0]
