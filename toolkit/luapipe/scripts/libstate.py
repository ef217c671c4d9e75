"""What a node holds of a directory's Function libraries, read as I/O-free steps.

:func:`read_state_steps` asks every node (primaries and replicas) in one round trip each:
``ROLE`` (primary or replica, and how many replicas a primary has), ``FUNCTION LIST``
(which library owns each function name: names are global), for each library of ours
``FUNCTION LIST LIBRARYNAME <name> WITHCODE`` and the same for its rollback copy, and
``INFO server`` (its ``redis_version``: what ``redis.REDIS_VERSION`` says while a library
loads there, so a library is read as that node loads it).
``LIBRARYNAME`` is a pattern, so only the library of exactly that name is kept.

**The rollback copy.** Before ``deploy`` replaces a library on a node, it keeps the code
it replaces on that node, in a library of its own: ``luapipe_rollback_<name>_kept``, whose
one function (``no-writes``) of the same name returns that code; a comment records the
sha1 of the code put in its place (so ``--prune`` knows a rolled-back library as ours).
(The name never ends in ten hex digits, so luapipe's own generated names,
``luapipe_<op>_<hash>``, and their garbage collection can never take it.) So the copy
lives where the code lived: it survives an ephemeral CI runner, replicates to the
replicas, is saved in the RDB/AOF, is not a key (no eviction, no ``FLUSHALL``, no slot),
and ``redis-cli --cluster add-node`` copies it with the rest. ``deploy --rollback`` reads it back.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from luapipe.errors import LuapipeError, ServerError
from luapipe.scripts.library import BASE_VERSION, library_sha
from luapipe.wire.replies import Command, ReplyError, raise_for
from luapipe.wire.routing import Nodes, Send, SendEach, Steps

__all__ = [
    "ROLLBACK_PREFIX",
    "ROLLBACK_SUFFIX",
    "LiveLibrary",
    "NodeState",
    "kept_code",
    "keeper_name",
    "keeper_source",
    "kept_library",
    "prunable",
    "read_state_steps",
    "successor_sha",
]

ROLLBACK_PREFIX = "luapipe_rollback_"
ROLLBACK_SUFFIX = "_kept"


def keeper_name(library: str) -> str:
    """The library (and function) that keeps ``library``'s previous code on a node."""
    return f"{ROLLBACK_PREFIX}{library}{ROLLBACK_SUFFIX}"


def kept_library(name: str) -> str | None:
    """The library whose rollback copy ``name`` is (None: not a rollback copy's name)."""
    if name.startswith(ROLLBACK_PREFIX) and name.endswith(ROLLBACK_SUFFIX):
        return name[len(ROLLBACK_PREFIX) : -len(ROLLBACK_SUFFIX)] or None
    return None


def keeper_source(library: str, code: str, successor: str | None = None) -> str:
    """The rollback copy of ``code`` (the code ``library`` had), as a library;
    ``successor``: the code luapipe puts in its place (its sha1 is recorded, so that
    ``--prune`` knows the live code as luapipe's own after a rollback)."""
    level = 1
    while f"]{'=' * level}]" in code:
        level += 1
    eq = "=" * level
    name = keeper_name(library)
    replaced = f"-- replaced by sha1 {library_sha(successor)}\n" if successor is not None else ""
    return (
        f"#!lua name={name}\n"
        f"-- The code library '{library}' had before `luapipe deploy` replaced it,\n"
        f"-- kept for `luapipe deploy --rollback`. sha1 {library_sha(code)}\n"
        f"{replaced}"
        f"local code = [{eq}[\n{code}]{eq}]\n"
        f"redis.register_function{{function_name = '{name}', "
        "callback = function() return code end, flags = {'no-writes'}}\n"
    )


_KEPT = re.compile(r"^local code = \[(=+)\[\n", re.M)
_SUCCESSOR = re.compile(r"^-- replaced by sha1 ([0-9a-f]{40})$", re.M)


def kept_code(keeper: str) -> str | None:
    """The code a rollback copy keeps (None if ``keeper`` is not one luapipe wrote)."""
    m = _KEPT.search(keeper)
    if m is None:
        return None
    end = keeper.rfind(f"]{m[1]}]")
    return keeper[m.end() : end] if end >= m.end() else None


def successor_sha(keeper: str) -> str | None:
    """The sha1 of the code luapipe loaded in place of the code a rollback copy keeps
    (None: not recorded, a copy written by an older luapipe)."""
    m = _KEPT.search(keeper)
    found = _SUCCESSOR.search(keeper, 0, m.start() if m else 0)
    return found[1] if found else None


@dataclass(frozen=True)
class LiveLibrary:
    """A library as a node has it: its code and its functions' flags."""

    name: str
    code: str
    functions: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @property
    def sha(self) -> str:
        return library_sha(self.code)

    def flags(self, function: str) -> tuple[str, ...] | None:
        for name, flags in self.functions:
            if name == function:
                return flags
        return None


@dataclass(frozen=True)
class NodeState:
    """One node: its role, its libraries of ours (and their rollback copies) with code,
    and the owner of every function name on it (``owners`` is keyed by the lower-case
    name: the server's function names are case-insensitive)."""

    node: str
    primary: bool
    replicas: int = 0
    libraries: Mapping[str, LiveLibrary] = field(default_factory=dict)
    owners: Mapping[str, str] = field(default_factory=dict)
    #: a replica's primary (``host:port`` from ROLE); None for a primary
    primary_of: str | None = None
    #: ``redis_version`` from ``INFO server``: what ``redis.REDIS_VERSION`` says while a
    #: library loads there (Valkey 8 too: 7.2.4); the base version where INFO is refused
    version: str = BASE_VERSION


def _text(value: Any) -> str:
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "surrogateescape")
    return str(value)


def _fields(item: Any) -> dict[str, Any]:
    """A RESP2 flat ``[k, v, ...]`` list or a RESP3 map, with text keys."""
    pairs = item.items() if isinstance(item, dict) else zip(item[0::2], item[1::2], strict=True)
    return {_text(k): v for k, v in pairs}


def _libraries(reply: Any) -> list[LiveLibrary]:
    out = []
    for item in raise_for(reply) or ():
        info = _fields(item)
        functions = []
        for f in info.get("functions") or ():
            fn = _fields(f)
            flags = tuple(sorted(_text(x) for x in fn.get("flags") or ()))
            functions.append((_text(fn.get("name", "")), flags))
        code = _text(info["library_code"]) if "library_code" in info else ""
        out.append(LiveLibrary(_text(info.get("library_name", "")), code, tuple(functions)))
    return out


_REDIS_VERSION = re.compile(r"^redis_version:(\S+)", re.M)


def _version(reply: Any) -> str:
    """``redis_version`` of an ``INFO server`` reply (the base version if INFO is refused,
    as a restricted ACL user may be: it is ``@dangerous``)."""
    if isinstance(reply, ReplyError | BaseException):
        return BASE_VERSION
    if isinstance(reply, dict):  # a parsed INFO
        return str(reply.get("redis_version", BASE_VERSION))
    m = _REDIS_VERSION.search(_text(reply))
    return m[1] if m else BASE_VERSION


def _state(node: str, names: Sequence[str], replies: list[Any]) -> NodeState:
    version = _version(replies[-1])
    replies = replies[:-1]
    role = raise_for(replies[0])
    primary = _text(role[0]) == "master"
    replicas = len(role[2]) if primary and len(role) > 2 else 0
    primary_of = None if primary else f"{_text(role[1])}:{_text(role[2])}"
    owners = {f.lower(): lib.name for lib in _libraries(replies[1]) for f, _ in lib.functions}
    libraries = {}
    for name, reply in zip(names, replies[2:], strict=True):
        for lib in _libraries(reply):
            if lib.name == name:  # LIBRARYNAME is a pattern: keep the exact name only
                libraries[name] = lib
    return NodeState(node, primary, replicas, libraries, owners, primary_of, version)


def prunable(state: NodeState, library: str, locked_sha: str) -> bool:
    """Whether ``--prune`` may delete ``library`` (and its rollback copy) on that node: it
    is absent, or its live code is luapipe's own: the lock's (``locked_sha``), the code a
    deploy or rollback of luapipe put there last (recorded in the rollback copy: after a
    rollback the live code legitimately differs from the lock) or the code the copy keeps.
    Any other code under that name is someone else's library: never deleted."""
    live = state.libraries.get(library)
    if live is None or live.sha == locked_sha:
        return True
    keeper = state.libraries.get(keeper_name(library))
    if keeper is None:
        return False
    kept = kept_code(keeper.code)
    return live.sha in (successor_sha(keeper.code), kept and library_sha(kept))


def read_state_steps(libraries: Sequence[str]) -> Steps[list[NodeState]]:
    """The state of every node (primaries first) for ``libraries`` and their rollback
    copies; a node that cannot answer is an error naming it."""
    names = [n for lib in libraries for n in (lib, keeper_name(lib))]
    batch = [Command(("ROLE",)), Command(("FUNCTION", "LIST"))]
    batch += [Command(("FUNCTION", "LIST", "LIBRARYNAME", n, "WITHCODE")) for n in names]
    batch.append(Command(("INFO", "server")))
    nodes: list[str] = yield Nodes()
    answers = yield SendEach(tuple(Send(batch, node) for node in nodes))
    out = []
    for node, answer in zip(nodes, answers, strict=True):
        if isinstance(answer, LuapipeError):
            raise answer
        try:
            out.append(_state(node, names, answer))
        except ServerError as exc:
            raise ServerError(f"{node}: cannot read its function libraries: {exc}") from exc
        except (IndexError, KeyError, TypeError, ValueError) as exc:
            raise ServerError(f"{node}: unexpected reply to FUNCTION LIST: {exc}") from exc
    return out
