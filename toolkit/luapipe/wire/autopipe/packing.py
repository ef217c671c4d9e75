"""Commands to bytes for the auto-pipeline: one ``bytes`` per entry, packed by its caller.

Packing happens when a call joins, in its caller's task or thread, so a value redis-py
cannot send is that caller's :class:`~luapipe.errors.CallArgumentError` before anything is
queued. With hiredis and a UTF-8 encoder, hiredis's C packer is used (what redis-py's sync
client does; byte for byte what its asyncio client's pure-Python packer writes, a tenth of
the cost); otherwise the connection's own packer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from luapipe.wire.replies import pack

__all__ = ["Packer"]

try:  # pragma: no branch
    import hiredis

    _PACK: Any = hiredis.pack_command
except ImportError:  # pragma: no cover - without hiredis, the connection's packer
    _PACK = None


def _utf8(encoder: Any) -> bool:
    encoding = str(getattr(encoder, "encoding", "utf-8")).lower().replace("_", "-")
    return encoding in ("utf-8", "utf8") and getattr(encoder, "encoding_errors", "strict") == (
        "strict"
    )


class Packer:
    """Packs commands the way ``conn`` (a redis-py connection, connected or not) would."""

    __slots__ = ("conn", "fast")

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.fast = _PACK is not None and _utf8(getattr(conn, "encoder", None))

    def one(self, args: Sequence[Any]) -> bytes:
        """One command's bytes (a CallArgumentError for a value that cannot be sent)."""
        if self.fast:
            head = args[0]
            if (head.__class__ is str and " " in head) or (
                head.__class__ is bytes and b" " in head
            ):
                args = (*head.split(), *args[1:])  # "CONFIG GET": two words, as redis-py
            try:
                packed: bytes = _PACK(args if args.__class__ is tuple else tuple(args))
                return packed
            except (TypeError, ValueError):  # UnicodeEncodeError: a str UTF-8 refuses
                pass  # a bytearray, a memoryview, or a bad value: redis-py decides
        return b"".join(pack(self.conn.pack_command, *args))

    def many(self, commands: Sequence[Sequence[Any]]) -> bytes:
        return b"".join(self.one(c) for c in commands)
