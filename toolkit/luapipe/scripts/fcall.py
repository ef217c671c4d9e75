"""Calling a function of a Function library, free of I/O: FCALL, and healing a missing library.

A call is one ``FCALL`` (``FCALL_RO`` for a ``no-writes`` function). Function libraries
persist and replicate, so in steady state nothing else is sent: no check, no load.

The server's whole reply ``ERR Function not found``
(:attr:`~luapipe.wire.replies.ReplyError.is_function_not_found`) proves the call did not
run. The library is then loaded and the call sent again, atomically, on the primary that
owns the slot (:func:`heal_batch`; the calls of one pipeline that did not run go in one
round trip, each in its own MULTI, since a cluster checks a MULTI's keys as one request)::

    MULTI
    FUNCTION LOAD <library>                        (never REPLACE)
    FUNCTION LIST LIBRARYNAME <library> WITHCODE   (what is live, as the FCALL sees it;
                                                    with the first call of each library)
    FCALL <function> ...
    EXEC

Inside MULTI nothing can come between the load and the call: a ``FUNCTION FLUSH`` from
another connection lands before (the load puts the library back) or after (the call has
run). So :func:`read_heal` reads each call's fate from the one EXEC, with no guess:

- the FCALL answered anything but "not found": it ran (its value, or its own error);
- "not found" with our code live and the function in it: the function's own error reply
  is that very text, and it ran (a second time, never more);
- "not found" with another version of the library live (another ``library_code``): a
  rolling deploy or a hand edit. luapipe never replaces a live library: that is one error
  naming both code SHAs, and the call did not run;
- "not found" with no library live: the load failed (its error says why: a compile error
  at file:line, a function name another library owns...); the call did not run.

So one heal on a node is definitive: nothing is left to repeat there. What repeats is the
routing: a heal answered with a redirect (the slot moved, a failover) did not run, and the
call starts again on the node that owns the slot now, healing there if it must, bounded by
the :class:`~luapipe.wire.policy.RetryPolicy`'s ``redirects``
(:func:`~luapipe.wire.routing.on_slot_node`, :func:`~luapipe.wire.routing.per_node`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from redis.exceptions import ResponseError

from luapipe.errors import LuapipeError, ServerError, translate
from luapipe.scripts.library import FunctionLibrary, LuaFunction, library_sha
from luapipe.wire.replies import Command, Redirect, ReplyError, Value, full_error_text

__all__ = [
    "FunctionCall",
    "LiveLibrary",
    "conflict_error",
    "function_owners",
    "heal_batch",
    "list_command",
    "live_library",
    "load_command",
    "read_heal",
]

MULTI = Command(("MULTI",))
EXEC = Command(("EXEC",))


@dataclass(frozen=True)
class FunctionCall:
    """A queued call of one function of a library."""

    function: LuaFunction
    library: FunctionLibrary
    keys: tuple[Value, ...]
    args: tuple[Value, ...]

    @property
    def read_only(self) -> bool:
        return self.function.read_only

    def fcall_args(self) -> tuple[Any, ...]:
        """The words of the call: FCALL (FCALL_RO for ``no-writes``)."""
        return self.function.fcall_args(self.keys, self.args)

    def fcall(self) -> Command:
        return Command(self.fcall_args())


def load_command(library: FunctionLibrary) -> Command:
    """FUNCTION LOAD without REPLACE: it never replaces a live library, whatever its code."""
    return Command(library.load_args(replace=False))


def list_command(library: FunctionLibrary) -> Command:
    # LIBRARYNAME is a pattern, but a library name is letters, digits and '_' only
    return Command(("FUNCTION", "LIST", "LIBRARYNAME", library.name, "WITHCODE"))


# -- what is live --------------------------------------------------------------------------
def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _fields(item: Any) -> dict[str, Any]:
    """One entry of FUNCTION LIST as a dict (RESP3 maps, RESP2 flat lists)."""
    if isinstance(item, dict):
        return {_text(k): v for k, v in item.items()}
    return {_text(k): v for k, v in zip(item[0::2], item[1::2], strict=False)}


@dataclass(frozen=True)
class LiveLibrary:
    """A library as a node has it: its code's sha1 and its functions' names."""

    name: str
    sha: str
    functions: frozenset[str]


def live_library(reply: Any, name: str) -> LiveLibrary | None:
    """The library called ``name`` in a ``FUNCTION LIST ... WITHCODE`` reply (None: absent)."""
    if isinstance(reply, ReplyError | BaseException) or not reply:
        return None
    for item in reply:
        info = _fields(item)
        if _text(info.get("library_name", "")) != name:
            continue
        code = info.get("library_code", b"")
        code = code.encode() if isinstance(code, str) else bytes(code)
        names = frozenset(_text(_fields(f).get("name", "")) for f in info.get("functions") or ())
        return LiveLibrary(name, library_sha(code.decode("utf-8", "surrogateescape")), names)
    return None


def function_owners(reply: Any) -> dict[str, str]:
    """{lower-case function name: its library} from a ``FUNCTION LIST`` reply (the
    server's function names are case-insensitive)."""
    if isinstance(reply, ReplyError | BaseException) or not reply:
        return {}
    out = {}
    for item in reply:
        info = _fields(item)
        for f in info.get("functions") or ():
            out[_text(_fields(f).get("name", "")).lower()] = _text(info.get("library_name", ""))
    return out


def conflict_error(library: FunctionLibrary, live_sha: str, node: str, what: str) -> ServerError:
    """Another version of ``library`` is live on ``node``: the one clear error (both SHAs)."""
    where = library.path or library.name
    return ServerError(
        f"library {library.name!r} on {node} is another version (code sha1 {live_sha}), not "
        f"the one in {where} (code sha1 {library.sha}); luapipe never replaces a live "
        f"library of the same name: {what}. Deploy it (luapipe deploy), or give a new "
        "version its own library and function names for a rolling deploy"
    )


# -- the heal round trip -------------------------------------------------------------------
def _groups(calls: Sequence[FunctionCall]) -> list[bool]:
    """Per call, whether its MULTI also lists its library (the first call of each)."""
    seen: set[str] = set()
    out = []
    for c in calls:
        out.append(c.library.sha not in seen)
        seen.add(c.library.sha)
    return out


def heal_batch(calls: Sequence[FunctionCall]) -> list[Command]:
    """One MULTI per call: FUNCTION LOAD of its library, FUNCTION LIST of it (with the
    first call of each library), the FCALL, EXEC.

    A MULTI per call, not one for all: a cluster checks a transaction's keys as one
    request, so calls of several slots in one MULTI would be CROSSSLOT, and keys of a
    migrating slot TRYAGAIN until the migration ends."""
    out: list[Command] = []
    for call, listed in zip(calls, _groups(calls), strict=True):
        lib = call.library
        out += [MULTI, load_command(lib), *([list_command(lib)] if listed else []), call.fcall()]
        out.append(EXEC)
    return out


def _refused(text: str, node: str) -> LuapipeError:
    return translate(ResponseError(text), where=node)  # an ACL refusal names the node


def _aborted(queued: Sequence[Any], exec_reply: Any, node: str) -> Any:
    """EXEC did not run the call: a redirect (route it again) or the refusal."""
    moved = Redirect.of(queued[-1]) or Redirect.of(exec_reply)
    if moved is not None:
        return moved
    errors = [q for q in queued if isinstance(q, ReplyError)]
    text = errors[0].text if errors else _text(getattr(exec_reply, "text", exec_reply))
    return _refused(text, node)


def read_heal(
    calls: Sequence[FunctionCall],
    replies: Sequence[Any],
    node: str,
    result: Callable[[FunctionCall, Any], Any],
    load_failed: Callable[[FunctionLibrary, ReplyError, str], LuapipeError],
) -> list[Any]:
    """Each call's outcome from the replies to :func:`heal_batch`: a value, a
    :class:`Redirect` (it did not run), or a :class:`LuapipeError` (returned, not raised).

    ``result(call, reply)`` turns the reply of a call that ran into its value or error;
    ``load_failed(library, reply, node)`` is the error for a FUNCTION LOAD that failed
    (both in :mod:`luapipe.scripts.protocol`, the one reader of Lua errors).
    """
    lives: dict[str, LiveLibrary | None] = {}
    out: list[Any] = []
    pos = 0
    for call, listed in zip(calls, _groups(calls), strict=True):
        size = 5 if listed else 4
        group, pos = replies[pos : pos + size], pos + size
        out.append(_read_group(call, listed, group, lives, node, result, load_failed))
    return out


def _read_group(
    call: FunctionCall,
    listed: bool,
    group: Sequence[Any],
    lives: dict[str, LiveLibrary | None],
    node: str,
    result: Callable[[FunctionCall, Any], Any],
    load_failed: Callable[[FunctionLibrary, ReplyError, str], LuapipeError],
) -> Any:
    lib, fn = call.library, call.function.name
    if isinstance(group[0], ReplyError):  # MULTI refused (BUSY...): nothing was queued
        return _refused(group[0].text, node)
    queued, exec_reply = group[1:-1], group[-1]
    if not isinstance(exec_reply, list | tuple):  # EXECABORT, TRYAGAIN: nothing ran
        return _aborted(queued, exec_reply, node)
    items = [ReplyError(full_error_text(r)) if isinstance(r, BaseException) else r
             for r in exec_reply]  # fmt: skip
    load, reply = items[0], items[-1]
    if listed:
        lives[lib.sha] = live_library(items[1], lib.name)
    if not (isinstance(reply, ReplyError) and reply.is_function_not_found):
        return result(call, reply)  # it ran
    live = lives.get(lib.sha)
    if isinstance(load, ReplyError) and not _exists(load):  # our load failed: why
        return load_failed(lib, load, node)
    if live is None:  # loaded by this MULTI, or by another client since the list
        if not isinstance(load, ReplyError):  # ours, loaded just before the call
            return result(call, reply)  # its own error reply is that very text
        return ServerError(
            f"function {fn!r} was not found on {node} while library {lib.name!r} was "
            "there (another version loaded meanwhile?); it did not run"
        )
    if live.sha != lib.sha:
        return conflict_error(lib, live.sha, node, f"function {fn!r} did not run")
    if fn in live.functions:  # the function's own error reply is that very text
        return result(call, reply)
    where = lib.path or lib.name
    return ServerError(
        f"library {lib.name!r} ({where}) registers no function {fn!r} on {node} "
        "(registered only under a condition?); it did not run"
    )


def _exists(reply: ReplyError) -> bool:
    """FUNCTION LOAD's "ERR Library 'x' already exists" (harmless: it never replaces)."""
    return reply.text.startswith("ERR Library ") and reply.text.endswith(" already exists")
