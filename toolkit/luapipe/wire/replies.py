"""What is sent and what comes back, free of I/O: commands, error replies, redirects.

- :class:`Command`: one command's words (and redis-py parse options);
- :class:`ReplyError`: an error reply in its slot (never raised by the transports);
- :class:`Redirect`: a cluster redirect, typed (MOVED, ASK, TRYAGAIN, CLUSTERDOWN) and
  built only from the server's own reply, never from one of luapipe's messages;
- :func:`with_asking`: a batch for the node an ``ASK`` named;
- :func:`whole_or_nothing`: whether a batch runs only if it arrives whole, so a failed
  write of it proves that nothing ran.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import redis.exceptions as rex

from luapipe.errors import CallArgumentError, LuapipeError, ServerError, translate

__all__ = [
    "ASKING",
    "Command",
    "FakeFault",
    "Redirect",
    "ReplyError",
    "Value",
    "address_of",
    "as_command",
    "full_error_text",
    "pack",
    "raise_for",
    "whole_or_nothing",
    "with_asking",
]

T = TypeVar("T")

#: a key or argument as redis-py sends it
Value = str | bytes | int | float

#: the start of the server's own "script not cached" reply (Valkey 8 ends it after
#: "script."; Redis adds " Please use EVAL.")
NOSCRIPT_TEXT = "NOSCRIPT No matching script"
#: the whole reply to FCALL of a function no library registers (Redis 7.0-7.2, Valkey 8)
FUNCTION_NOT_FOUND = "ERR Function not found"
RedirectKind = Literal["MOVED", "ASK", "TRYAGAIN", "CLUSTERDOWN"]
_KINDS: tuple[RedirectKind, ...] = ("MOVED", "ASK", "TRYAGAIN", "CLUSTERDOWN")


@dataclass(frozen=True)
class Command:
    """One command: its words and the redis-py parse options (``withscores=True``...)."""

    args: tuple[Any, ...]
    options: dict[str, Any] = field(default_factory=dict, compare=False)
    #: apply redis-py's response callback (for commands queued through its methods)
    parse: bool = False

    @property
    def name(self) -> str:
        head = self.args[0]
        return (head.decode() if isinstance(head, bytes) else str(head)).upper()


def as_command(cmd: Command | Sequence[Any]) -> Command:
    return cmd if isinstance(cmd, Command) else Command(tuple(cmd))


@dataclass(frozen=True)
class Redirect:
    """A cluster redirect: the command did not run on that node; route it again.

    ``kind`` is the reply's code; ``target`` the ``host:port`` a MOVED or ASK names (None
    for TRYAGAIN and CLUSTERDOWN); ``text`` the server's line, for messages.
    """

    kind: RedirectKind
    target: str | None
    text: str

    @property
    def ask(self) -> str | None:
        """``host:port`` of an ``ASK`` (send it there once, after ASKING), else None."""
        return self.target if self.kind == "ASK" else None

    @classmethod
    def of(cls, reply: Any) -> Redirect | None:
        """The redirect an error reply is, or None (any other reply)."""
        if reply.__class__ is not ReplyError:
            return None
        text: str = reply.text
        kind = text.split(" ", 1)[0]
        if kind not in _KINDS:
            return None
        words = text.split()
        target = words[2] if kind in ("MOVED", "ASK") and len(words) == 3 else None
        return cls(kind, target, text)

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class ReplyError:
    """An error reply in its slot. ``text`` is the server's text (first line); ``where``
    the node that sent it and ``command`` the command it answers, when the transport knows
    them (messages name them: an ACL refusal says where and what)."""

    text: str
    where: str = field(default="", compare=False)
    command: str = field(default="", compare=False)

    @classmethod
    def of(cls, exc: BaseException, where: str = "", command: Any = "") -> ReplyError:
        """The error reply redis-py raised as ``exc``, read on ``where`` for ``command``."""
        name = command.decode(errors="replace") if isinstance(command, bytes) else str(command)
        return cls(full_error_text(exc), where, name.upper())

    def error(self) -> LuapipeError:
        """luapipe's error for this reply (naming the node and command where known)."""
        return translate(rex.ResponseError(self.text), where=self.where, command=self.command)

    @property
    def is_noscript(self) -> bool:
        """True only for the server's own "script not cached" reply."""
        return self.text.startswith(NOSCRIPT_TEXT)

    @property
    def is_function_not_found(self) -> bool:
        """True only for the server's whole "no such function" reply: the call did not run.

        Matched exactly, never as a substring: a function's own error that contains the
        words (``error("Function not found")`` reads ``ERR user_function:3: Function not
        found script: ...``) is that function's error, and it may have written."""
        return self.text == FUNCTION_NOT_FOUND

    @property
    def is_compile_error(self) -> bool:
        """The script did not compile, so the server did not cache it."""
        return "Error compiling script" in self.text

    @property
    def redirect(self) -> Redirect | None:
        return Redirect.of(self)

    def __str__(self) -> str:
        return self.text


def full_error_text(exc: BaseException) -> str:
    """The server's error line with its code: redis-py strips known codes (NOSCRIPT, ERR)."""
    text = str(exc).splitlines()[0] if str(exc) else ""
    code = getattr(exc, "status_code", None)
    if code and not text.startswith(f"{code} "):
        text = f"{code} {text}"
    return text


def raise_for(reply: Any) -> Any:
    """Return ``reply`` or raise the luapipe error for a :class:`ReplyError`; a redirect's
    error carries it, typed, as ``.redirect`` (see :func:`luapipe.wire.policy.did_not_run`)."""
    if isinstance(reply, ReplyError):
        err = reply.error()
        redirect = Redirect.of(reply)
        if redirect is not None and isinstance(err, ServerError):
            err.redirect = redirect
        raise err
    return reply


def address_of(conn: Any) -> str:
    """``host:port`` (or the socket path) of a redis-py connection."""
    host = getattr(conn, "host", None)
    if host is not None:
        return f"{host}:{getattr(conn, 'port', '')}"
    return str(getattr(conn, "path", "") or "unknown")


def pack(packer: Callable[..., T], *args: Any) -> T:
    """``packer(*args)``: a value redis-py cannot encode (None, a bool, a dict...) is a
    :class:`CallArgumentError` (also redis-py's ``DataError``); nothing was sent."""
    try:
        return packer(*args)
    except rex.DataError as exc:
        raise translate(exc) from exc
    except (TypeError, ValueError) as exc:  # hiredis's packer; a str the encoding refuses
        raise CallArgumentError(
            f"a key or argument cannot be sent ({exc}); nothing was sent", like=rex.DataError
        ) from exc


def _word(arg: Any) -> str:
    return (arg.decode(errors="replace") if isinstance(arg, bytes) else str(arg)).upper()


def _harmless(cmd: Command) -> bool:
    """A command whose running alone changes nothing a caller could notice (SCRIPT LOAD,
    ASKING)."""
    if cmd.name == "ASKING":
        return True
    return cmd.name == "SCRIPT" and len(cmd.args) > 1 and _word(cmd.args[1]) == "LOAD"


def whole_or_nothing(cmds: Sequence[Command]) -> bool:
    """Whether ``cmds`` change anything only if they arrive whole: one command (after
    harmless ones such as SCRIPT LOAD or ASKING), or MULTI ... EXEC."""
    if not cmds:
        return True
    return (cmds[0].name == "MULTI" and cmds[-1].name == "EXEC") or all(
        _harmless(c) for c in cmds[:-1]
    )


ASKING = Command(("ASKING",))


def with_asking(cmds: Sequence[Command]) -> tuple[list[Command], list[int]]:
    """``cmds`` for the node named by an ``ASK`` redirect: each command preceded by ASKING
    (the server forgets it after one command), except inside MULTI ... EXEC, where the flag
    set before MULTI holds and an ASKING would be queued. Also returns where the replies of
    ``cmds`` are in the longer batch."""
    out: list[Command] = []
    keep: list[int] = []
    in_multi = False
    for c in cmds:
        if not in_multi:
            out.append(ASKING)
        keep.append(len(out))
        out.append(c)
        if c.name == "MULTI":
            in_multi = True
        elif c.name in ("EXEC", "DISCARD"):
            in_multi = False
    return out, keep


class FakeFault(Exception):
    """An in-process fake server (fakeredis runs each command inside the client's write)
    raised a Python exception, not a reply, while it ran a command: e.g. fakeredis 2.40's
    ``redis.call()`` without arguments raises TypeError from its Lua bridge, where a server
    answers "ERR Please specify at least one argument...". The transports raise this for a
    batch of one command (after harmless ones), whose :attr:`reply` then stands for the
    error reply a server would give; the fake's connection is dropped."""

    def __init__(self, exc: BaseException) -> None:
        super().__init__(str(exc))
        self.reply = ReplyError(f"ERR the in-process server raised {type(exc).__name__}: {exc}")

    @staticmethod
    def of(exc: BaseException) -> FakeFault | None:
        """The fault ``exc`` is (raised while writing a batch), or None for an I/O error:
        a real connection's write raises only redis-py's errors or an OSError."""
        if isinstance(exc, rex.RedisError | OSError | LuapipeError):
            return None
        return FakeFault(exc)
