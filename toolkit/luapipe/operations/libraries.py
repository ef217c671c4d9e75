"""The function form's libraries on a server: left as found, and collected when old.

``verify`` and ``bench`` load an operation's function form (``luapipe_<op>_<hash>``) on a
server they were pointed at. Unlike a cached script, a function library persists and
replicates, so both take a snapshot of it first (per primary: its code, or absent) and put
it back afterwards, also after an error: deleted where they loaded it, the old code
reloaded where they replaced it.

Applications load the function form's library at run time, one per version of a spec (a
rolling deploy runs two side by side), so old versions stay behind once no process calls
them. :func:`collect_generated` (``luapipe functions gc``) deletes them: only libraries
whose name is luapipe's (``luapipe_<op>_<hash>``) *and* whose code has that hash
(:func:`~luapipe.operations.generate.generated_operation`), never a team's library,
whatever it is called. A process still running a deleted version loads it again on its
next call (the exact "ERR Function not found" heals), so a collection is never fatal,
only premature.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import redis

from luapipe.errors import translate
from luapipe.operations import prelude
from luapipe.operations.generate import generated_operation, library_name
from luapipe.operations.model import OperationModel
from luapipe.wire import routing as _cluster

__all__ = [
    "Collected",
    "LibrarySnapshot",
    "collect_generated",
    "restore_library",
    "snapshot_library",
    "snapshot_named",
]


@dataclass(frozen=True)
class LibrarySnapshot:
    """An operation's library name and, per primary, its code before (None: not loaded)."""

    library: str
    before: tuple[tuple[Any, str | None], ...]


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
    before = []
    for name, node in _named_primaries(client):
        try:
            before.append((node, _library_code(node, library)))
        except redis.ResponseError:  # no FUNCTION command (Redis < 7): nothing to put back
            return None
        except (redis.RedisError, OSError) as exc:  # a lost node: luapipe's words, its name
            raise translate(exc, where=name, sent=False) from None  # (a read: nothing ran)
    return LibrarySnapshot(library, tuple(before))


def restore_library(snapshot: LibrarySnapshot | None) -> None:
    """Delete the library where it was loaded since; reload the old code where replaced,
    byte for byte (a library whose code is not UTF-8 too)."""
    if snapshot is None:
        return
    for node, before in snapshot.before:
        try:
            now = _library_code(node, snapshot.library)
            if now is None or now == before:
                continue
            if before is None:
                node.execute_command("FUNCTION", "DELETE", snapshot.library)
            else:  # code read back may hold bytes that are not UTF-8: sent back as they were
                code = before.encode("utf-8", "surrogateescape")
                node.execute_command("FUNCTION", "LOAD", "REPLACE", code)
        except (redis.RedisError, OSError) as exc:  # a refusal, a lost node: luapipe's words
            raise translate(exc, where=_name_of(node), sent=True) from None


# -- collecting old generated libraries ---------------------------------------------------
@dataclass(frozen=True)
class Collected:
    """What :func:`collect_generated` found on one primary: luapipe's generated libraries
    deleted (or, in a dry run, to delete) and kept; ``others`` counts the libraries that
    are not luapipe's (never touched)."""

    node: str
    deleted: tuple[str, ...]
    kept: tuple[str, ...]
    others: int
    #: luapipe's libraries of operations or builds not named (``only``), left alone
    unnamed: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "deleted": list(self.deleted),
            "kept": list(self.kept),
            "others": self.others,
            "unnamed": list(self.unnamed),
        }


def _named_primaries(client: Any) -> list[tuple[str, Any]]:
    """Where function libraries live: every primary of a cluster, else the one server."""
    if _cluster.is_cluster(client):
        return [(n.name, client.get_redis_connection(n)) for n in client.get_primaries()]
    return [(_name_of(client), client)]


def _name_of(node: Any) -> str:
    kw = node.connection_pool.connection_kwargs
    return f"{kw.get('host', kw.get('path', '?'))}:{kw.get('port', '')}".rstrip(":")


def _all_libraries(node: Any) -> dict[str, str]:
    """Every library on ``node``: name -> code."""
    out: dict[str, str] = {}
    for item in node.execute_command("FUNCTION", "LIST", "WITHCODE") or ():
        info = item if isinstance(item, dict) else dict(zip(item[0::2], item[1::2], strict=True))
        fields = {prelude.text(k): v for k, v in info.items()}
        out[prelude.text(fields.get("library_name", ""))] = prelude.text(
            fields.get("library_code", "")
        )
    return out


def collect_generated(
    client: Any,
    keep: Iterable[str] = (),
    *,
    dry_run: bool = False,
    only: Iterable[str] | None = None,
) -> list[Collected]:
    """Delete luapipe's generated function libraries on every primary, except those named in
    ``keep`` (e.g. :func:`~luapipe.operations.generate.library_name` of the specs in use).

    A library is luapipe's only if its name is ``luapipe_<op>_<hash>`` and its code has that
    hash; every other library is left alone. ``only``: the base names (``<op>``, or a built
    library's ``--library``) whose versions may go; another operation's or another
    service's build is then left alone too (listed in ``unnamed``). ``dry_run``: say what
    would go, delete nothing. Run it once a rollout is over: a process still on an old
    version reloads it.
    """
    kept_names = set(keep)
    bases = None if only is None else set(only)
    out: list[Collected] = []
    for name, node in _named_primaries(client):
        deleted: list[str] = []
        kept: list[str] = []
        unnamed: list[str] = []
        others = 0
        try:  # a refusal (NOPERM, no FUNCTION command) is luapipe's one-line error
            for library, code in sorted(_all_libraries(node).items()):
                base = generated_operation(library, code)
                if base is None:
                    others += 1
                elif bases is not None and base not in bases:
                    unnamed.append(library)
                elif library in kept_names:
                    kept.append(library)
                else:
                    if not dry_run:
                        node.execute_command("FUNCTION", "DELETE", library)
                    deleted.append(library)
        except (redis.RedisError, OSError) as exc:  # NOPERM, a lost node: luapipe's words
            raise translate(exc, where=name, sent=True) from None
        out.append(Collected(name, tuple(deleted), tuple(kept), others, tuple(unnamed)))
    return out
