"""Calling a function of a Function library, free of I/O: FCALL, and healing a missing library.

A call is one ``FCALL`` (``FCALL_RO`` for a ``no-writes`` function). Function libraries
persist and replicate, so in steady state nothing else is sent: no check, no load.

The server's whole reply ``ERR Function not found``
(:attr:`~luapipe.wire.replies.ReplyError.is_function_not_found`) proves the call did not
run. The library is then loaded and the call sent again in one atomic round trip on the
primary that owns the slot (:func:`heal_batch`)::

    MULTI
    FUNCTION LOAD <library>                        (never REPLACE)
    FUNCTION LIST LIBRARYNAME <library> WITHCODE   (what is live, as the FCALL sees it)
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
def _libraries(calls: Sequence[FunctionCall]) -> list[FunctionLibrary]:
    return list({c.library.sha: c.library for c in calls}.values())


def heal_batch(calls: Sequence[FunctionCall]) -> list[Command]:
    """MULTI, FUNCTION LOAD and FUNCTION LIST of each library once, the FCALLs, EXEC."""
    libs = _libraries(calls)
    return [
        MULTI,
        *(load_command(lib) for lib in libs),
        *(list_command(lib) for lib in libs),
        *(c.fcall() for c in calls),
        EXEC,
    ]


def _refused(text: str) -> LuapipeError:
    return translate(ResponseError(text))


def _aborted(calls: Sequence[FunctionCall], queued: Sequence[Any], exec_reply: Any) -> list[Any]:
    """EXEC did not run the batch: every call gets a redirect (route it again) or the
    refusal; nothing ran."""
    moved = [Redirect.of(q) for q in queued[-len(calls) :]]
    first = next((m for m in moved if m is not None), None)
    if first is not None:
        again = Redirect("TRYAGAIN", None, f"TRYAGAIN aborted with a redirected call ({first})")
        return [m if m is not None else (again if first.ask is None else first) for m in moved]
    errors = [q for q in queued if isinstance(q, ReplyError)]
    text = errors[0].text if errors else _text(getattr(exec_reply, "text", exec_reply))
    err = _refused(text)
    return [err] * len(calls)


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
    if isinstance(replies[0], ReplyError):  # MULTI refused (BUSY...): nothing was queued
        return [_refused(replies[0].text)] * len(calls)
    queued, exec_reply = replies[1:-1], replies[-1]
    if not isinstance(exec_reply, list | tuple):  # EXECABORT: nothing ran
        return _aborted(calls, queued, exec_reply)
    items = [
        ReplyError(full_error_text(r)) if isinstance(r, BaseException) else r for r in exec_reply
    ]
    libs = _libraries(calls)
    loads = dict(zip((lib.sha for lib in libs), items, strict=False))
    lives = {lib.sha: live_library(items[len(libs) + i], lib.name) for i, lib in enumerate(libs)}
    out: list[Any] = []
    for call, reply in zip(calls, items[2 * len(libs) :], strict=True):
        if not (isinstance(reply, ReplyError) and reply.is_function_not_found):
            out.append(result(call, reply))  # it ran
            continue
        lib, fn = call.library, call.function.name
        live = lives[lib.sha]
        if live is None:  # our load failed: its error says why
            load = loads[lib.sha]
            out.append(
                load_failed(lib, load, node)
                if isinstance(load, ReplyError)
                else ServerError(
                    f"function {fn!r} not found on {node} right after loading "
                    f"library {lib.name!r}; it did not run"
                )
            )
        elif live.sha != lib.sha:
            out.append(conflict_error(lib, live.sha, node, f"function {fn!r} did not run"))
        elif fn in live.functions:  # the function's own error reply is that very text
            out.append(result(call, reply))
        else:
            where = lib.path or lib.name
            out.append(
                ServerError(
                    f"library {lib.name!r} ({where}) registers no function {fn!r} on {node} "
                    "(registered only under a condition?); it did not run"
                )
            )
    return out
