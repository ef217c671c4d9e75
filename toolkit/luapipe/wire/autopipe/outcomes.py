"""What a caller gets when the auto-pipeline, not the server, ends its call.

One copy for both flavours, so the words of each promise (at most once: what may have run
is never re-sent) are the same in threads and tasks.
"""

from __future__ import annotations

from luapipe.errors import (
    CallArgumentError,
    ConnectionFailed,
    LuapipeError,
    OutcomeUnknown,
    translate,
)

__all__ = ["closed", "holds_connections", "lost_after_write"]


def closed() -> ConnectionFailed:
    """What a call gets from an auto-pipeline that was closed before it was sent."""
    return ConnectionFailed("the auto-pipeline was closed; nothing was sent")


def holds_connections() -> CallArgumentError:
    """What steps that hold connections between round trips (``Release``) get: an
    auto-pipeline shares its connections."""
    return CallArgumentError(
        "these steps hold connections between round trips, which an auto-pipeline "
        "shares: run them on the client itself"
    )


def lost_after_write(node: str, exc: BaseException | None) -> LuapipeError:
    """What each caller of a write that may have reached ``node`` gets when its connection
    fails (``exc``): :class:`OutcomeUnknown`, saying so once (the translated error already
    does for a timeout or a lost connection: it is not wrapped in a second sentence)."""
    err = translate(exc, where=node, sent=True) if exc is not None else None
    if isinstance(err, OutcomeUnknown):
        return err
    cause = f" ({err})" if err is not None else ""
    return OutcomeUnknown(
        f"connection to {node} failed after the request was sent{cause}; "
        "outcome unknown, it was not re-sent"
    )
