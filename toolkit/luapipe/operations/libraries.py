"""Leave Redis Function libraries as they were found.

``verify`` and ``bench`` load an operation's function form (``luapipe_<name>``) on a server
they were pointed at. Unlike a cached script, a function library persists and replicates,
so both take a snapshot of it first (per primary: its code, or absent) and put it back
afterwards, also after an error: deleted where they loaded it, the old code reloaded where
they replaced it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import redis

from luapipe.operations import prelude
from luapipe.operations.generate import library_name
from luapipe.operations.model import OperationModel
from luapipe.wire import routing as _cluster

__all__ = ["LibrarySnapshot", "restore_library", "snapshot_library", "snapshot_named"]


@dataclass(frozen=True)
class LibrarySnapshot:
    """An operation's library name and, per primary, its code before (None: not loaded)."""

    library: str
    before: tuple[tuple[Any, str | None], ...]


def _primaries(client: Any) -> list[Any]:
    """Where function libraries live: every primary of a cluster, else the one server."""
    if _cluster.is_cluster(client):
        return [client.get_redis_connection(n) for n in client.get_primaries()]
    return [client]


def _library_code(node: Any, library: str) -> str | None:
    """The code of ``library`` on ``node``, or None when it is not loaded."""
    reply = node.execute_command("FUNCTION", "LIST", "LIBRARYNAME", library, "WITHCODE")
    for item in reply or ():
        info = item if isinstance(item, dict) else dict(zip(item[0::2], item[1::2], strict=True))
        fields = {prelude.text(k): v for k, v in info.items()}
        if prelude.text(fields.get("library_name", "")) == library:  # LIBRARYNAME is a pattern
            return prelude.text(fields.get("library_code", ""))
    return None


def snapshot_library(op: OperationModel, client: Any) -> LibrarySnapshot | None:
    """The state of ``op``'s function library on every primary (None: nothing to keep)."""
    return snapshot_named(library_name(op), client)


def snapshot_named(library: str, client: Any) -> LibrarySnapshot | None:
    """The state of the library called ``library`` on every primary."""
    try:
        before = tuple((node, _library_code(node, library)) for node in _primaries(client))
    except redis.ResponseError:  # no FUNCTION command (Redis < 7): nothing to put back
        return None
    return LibrarySnapshot(library, before)


def restore_library(snapshot: LibrarySnapshot | None) -> None:
    """Delete the library where it was loaded since; reload the old code where replaced."""
    if snapshot is None:
        return
    for node, before in snapshot.before:
        now = _library_code(node, snapshot.library)
        if now is None or now == before:
            continue
        if before is None:
            node.execute_command("FUNCTION", "DELETE", snapshot.library)
        else:
            node.execute_command("FUNCTION", "LOAD", "REPLACE", before)
