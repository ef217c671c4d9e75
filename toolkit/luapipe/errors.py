"""The exceptions luapipe raises. Every one derives from :class:`LuapipeError`.

::

    LuapipeError                 the root: catch this to catch everything luapipe raises
    ├── ScriptError              a Lua script could not be read, parsed or found
    │   ├── ScriptSyntaxError    Lua does not compile (names file:line)
    │   ├── DuplicateScriptError two scripts share a name
    │   └── UnknownScriptError   no script of that name
    ├── CallArgumentError        wrong number of keys or args, bad names; nothing was sent
    ├── SpecError                an operation spec is invalid (names file:line and field)
    ├── LockFileError            the deploy lock file is missing, unreadable or edited badly
    ├── ServerError              the server answered with an error
    │   ├── ScriptRuntimeError   a script raised an error (names the script's file:line)
    │   ├── BusyError            the server is busy running a script (BUSY)
    │   ├── CrossSlotError       keys of one call hash to different cluster slots
    │   └── ReadOnlyError        a write reached a read-only replica
    ├── ConnectionFailed         could not connect or authenticate; nothing was sent
    │   └── AuthenticationFailed wrong user or password
    ├── TransactionAborted       WATCH kept failing: the transaction form gave up (bounded)
    ├── OutcomeUnknown           the request may have reached the server and the reply was
    │                            lost (timeout, dropped connection): it was NOT re-sent
    └── EnvironmentProblem       something on this machine is missing (redis-server, luac)

Messages are one line and never contain a password. redis-py errors are translated
into this tree at one boundary: :func:`translate` (used by ``transport``).
"""

from __future__ import annotations

import re

import redis.exceptions as rex

__all__ = [
    "AuthenticationFailed",
    "BusyError",
    "CallArgumentError",
    "ConnectionFailed",
    "CrossSlotError",
    "DuplicateScriptError",
    "EnvironmentProblem",
    "LockFileError",
    "LuapipeError",
    "OutcomeUnknown",
    "ReadOnlyError",
    "ScriptError",
    "ScriptRuntimeError",
    "ScriptSyntaxError",
    "ServerError",
    "SpecError",
    "TransactionAborted",
    "UnknownScriptError",
    "mask_url",
    "translate",
]


class LuapipeError(Exception):
    """Root of every error luapipe raises."""


class ScriptError(LuapipeError):
    """A Lua script could not be read, parsed or found."""


class ScriptSyntaxError(ScriptError):
    """A Lua script does not compile; the message starts with ``file:line:``."""

    def __init__(self, message: str, *, path: str = "", line: int | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.line = line


class DuplicateScriptError(ScriptError):
    """Two scripts in one registry share a name."""


class UnknownScriptError(ScriptError, KeyError):
    """No script of that name is registered."""

    def __str__(self) -> str:  # KeyError would add quotes
        return str(self.args[0]) if self.args else ""


class CallArgumentError(LuapipeError, ValueError):
    """A call does not match the script's declared keys or args; nothing was sent."""


class SpecError(LuapipeError):
    """An operation spec is invalid. ``problems`` holds one line per problem."""

    def __init__(self, problems: list[str] | str) -> None:
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("\n".join(self.problems))


class LockFileError(LuapipeError):
    """The deploy lock file is missing, unreadable or malformed."""


class ServerError(LuapipeError):
    """The server answered with an error reply."""

    #: set by luapipe.wire when the reply was a cluster redirect (the request did not run)
    redirect: object = None


class ScriptRuntimeError(ServerError):
    """A script raised an error while running (message names file:line when known)."""


class BusyError(ServerError):
    """BUSY: the server is running a slow script and refuses other work meanwhile."""


class CrossSlotError(ServerError):
    """The keys of one call hash to different cluster slots."""


class ReadOnlyError(ServerError):
    """A write (or a script without ``no-writes``) was sent to a read-only replica."""


class ConnectionFailed(LuapipeError):
    """Could not connect to (or authenticate with) the server; nothing was sent."""


class AuthenticationFailed(ConnectionFailed):
    """The server refused the user name or password."""


class TransactionAborted(LuapipeError):
    """WATCH kept failing: the transaction form gave up after its bounded retries."""


class OutcomeUnknown(LuapipeError):
    """The request may have run on the server but its reply was lost. It was not re-sent."""


class EnvironmentProblem(LuapipeError):
    """A program luapipe needs is missing on this machine."""


_URL_PASSWORD = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*://)(?P<user>[^:@/\s]*):(?P<pw>[^@/\s]*)@")


def mask_url(text: str) -> str:
    """Replace any password in ``redis://user:password@host`` forms with ``***``."""
    return _URL_PASSWORD.sub(lambda m: f"{m['scheme']}{m['user']}:***@", text)


def _first_line(text: str) -> str:
    return mask_url(text.strip().splitlines()[0] if text.strip() else text)


def translate(exc: BaseException, *, where: str = "", sent: bool = False) -> LuapipeError:
    """Map a redis-py exception to luapipe's tree.

    ``where`` is the server address (host:port) for connection errors; ``sent`` says whether
    the request may already have reached the server, which turns a connection or timeout
    error into :class:`OutcomeUnknown`.
    """
    if isinstance(exc, LuapipeError):
        return exc
    text = _first_line(str(exc))
    code = getattr(exc, "status_code", None)
    if code and not text.startswith(f"{code} "):
        text = f"{code} {text}"
    at = f" at {where}" if where else ""
    if isinstance(exc, rex.AuthenticationError | rex.AuthorizationError) or text.startswith(
        ("WRONGPASS", "NOAUTH", "invalid username-password")
    ):
        return AuthenticationFailed(f"authentication failed{at}: {text}")
    if isinstance(exc, rex.InvalidResponse):
        return ConnectionFailed(f"the server{at} did not answer like Redis ({text})")
    if isinstance(exc, rex.ResponseError):
        if "Protocol error: invalid bulk length" in text or "Protocol error: too big" in text:
            return ServerError(
                f"the server{at} refused the request: an argument is larger than its "
                f"proto-max-bulk-len; nothing ran ({text})"
            )
        if text.startswith("BUSY"):
            return BusyError(f"BUSY: the server{at} is running a slow script ({text})")
        if text.startswith("CROSSSLOT"):
            return CrossSlotError(text)
        if text.startswith("READONLY"):
            return ReadOnlyError(f"read-only replica{at}: {text}")
        if text.startswith(("NOPERM", "NOAUTH")):
            return AuthenticationFailed(f"permission denied{at}: {text}")
        return ServerError(text)
    if isinstance(exc, rex.TimeoutError | rex.ConnectionError | OSError):
        kind = "timed out" if isinstance(exc, rex.TimeoutError | TimeoutError) else "lost"
        if sent:
            return OutcomeUnknown(
                f"connection{at} {kind} after the request was sent; outcome unknown, "
                f"it was not re-sent ({text})"
            )
        return ConnectionFailed(f"cannot connect to Redis{at}: {text}")
    if isinstance(exc, rex.RedisError):
        return ServerError(text)
    return LuapipeError(text)
