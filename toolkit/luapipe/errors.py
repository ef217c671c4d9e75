"""The exceptions luapipe raises. Every one derives from :class:`LuapipeError`.

::

    LuapipeError                 the root: catch this to catch everything luapipe raises
    ├── ScriptError              a Lua script could not be read, parsed or found
    │   ├── ScriptSyntaxError    Lua does not compile (names file:line)
    │   ├── DuplicateScriptError two scripts share a name
    │   └── UnknownScriptError   no script of that name (also a KeyError)
    ├── CallArgumentError        wrong number or type of keys or args, not a client; nothing
    │                            was sent (also a ValueError)
    ├── SpecError                an operation spec is invalid (names file:line and field)
    ├── LockFileError            the deploy lock file is missing, unreadable or edited badly
    ├── ServerError              the server answered with an error (a redis ResponseError)
    │   ├── ScriptRuntimeError   a script raised an error (names the script's file:line)
    │   │   └── OpError          a generated operation's own check failed in Python
    │   │                        (OVERFLOW, FLOAT, DIVZERO, NOTINT), as its Lua twin raises
    │   ├── BusyError            the server is busy running a script (BUSY)
    │   ├── CrossSlotError       keys of one call hash to different cluster slots
    │   ├── ReadOnlyError        a write reached a read-only replica
    │   └── PermissionDenied     the ACL user may not run that command (NOPERM)
    ├── ConnectionFailed         could not connect or authenticate, or no cluster node
    │                            took the request (every attempt refused); nothing ran
    │   └── AuthenticationFailed wrong user or password
    ├── TransactionAborted       WATCH kept failing: the transaction form gave up (bounded)
    ├── OutcomeUnknown           the request may have reached the server and the reply was
    │                            lost (timeout, dropped connection): it was NOT re-sent
    └── EnvironmentProblem       something on this machine is missing (redis-server, luac)

**Both worlds.** An error that comes from talking to Redis is also an instance of the
redis-py class that redis-py (``register_script``, ``evalsha``, a pipeline) raises for the
same failure, so handlers written for redis-py keep working; one that does not is not a
``redis.RedisError`` (except bad values, which redis-py refuses with ``DataError`` too).
The redis-py class of an error reply is the one redis-py's own parser gives its text
(``BaseParser.parse_error``), so the two cannot drift. ``tests/test_errors.py`` provokes
each failure on a real server and checks the pair against what ``register_script`` raised.

=====================================  ==========================  ==============================
failure                                luapipe class               also a redis.exceptions ...
=====================================  ==========================  ==============================
script ``error()`` / failed redis.call ScriptRuntimeError          ResponseError, or the class of
                                                                   the reply's code (NoScriptError,
                                                                   OutOfMemoryError, ...)
write on a replica (also in a script)  ReadOnlyError (+ Script-    ReadOnlyError
                                       RuntimeError in a script)
BUSY (another script runs), also at    BusyError                   ResponseError
EXEC of a transaction
ACL refusal (NOPERM)                   PermissionDenied            NoPermissionError
OOM, EXECABORT, MOVED, other replies   ServerError                 OutOfMemoryError, ExecAbortError,
                                                                   MovedError..., ResponseError
Lua compile error from the server      ScriptSyntaxError           ResponseError
keys in different cluster slots        CrossSlotError              ClusterCrossSlotError and
                                                                   RedisClusterException (what
                                                                   its cluster client raises)
refused / reset before sending         ConnectionFailed            ConnectionError
connect timeout                        ConnectionFailed            TimeoutError
no cluster node took it within the     ConnectionFailed            ConnectionError and ClusterError
policy's redirects, each attempt                                   (what its cluster client raises
refused before it ran                                              when its redirects run out)
server LOADING its data                ConnectionFailed            BusyLoadingError
wrong password, NOAUTH                 AuthenticationFailed        AuthenticationError
timeout after sending                  OutcomeUnknown              TimeoutError
connection lost after sending          OutcomeUnknown              ConnectionError
reply nested deeper than the parser    OutcomeUnknown              InvalidResponse
allows, or not Redis at all
value of a bad type (None, bool, ...)  CallArgumentError           DataError
WATCH retries exhausted                TransactionAborted          WatchError
wrong counts, not a client, spec,      their own class             (none: not a RedisError)
lock file, script files
=====================================  ==========================  ==============================

Messages are one line and never contain a password, whatever it holds: :func:`printable_url`
is the one way a URL becomes text (the user name kept, the password never), and every
message is passed through :func:`mask_url` when the error is made (the safety net for text
luapipe did not write). The words for the same cause are the same wherever it is met
(NOAUTH, WRONGPASS, NOPERM naming the address and command, a hang-up however redis-py
noticed it). redis-py errors are translated into this tree at one boundary:
:func:`translate` (used by the ``wire`` transports).
"""

from __future__ import annotations

import functools
import re
from typing import Any, ClassVar, Self, cast

import redis.exceptions as rex
from redis._parsers.base import BaseParser

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
    "OpError",
    "OutcomeUnknown",
    "PermissionDenied",
    "ReadOnlyError",
    "ScriptError",
    "ScriptRuntimeError",
    "ScriptSyntaxError",
    "ServerError",
    "SpecError",
    "TransactionAborted",
    "UnknownScriptError",
    "mask_url",
    "printable_url",
    "redis_class_of_reply",
    "redis_io_class",
    "translate",
]

Like = type[BaseException] | tuple[type[BaseException], ...]


class LuapipeError(Exception):
    """Root of every error luapipe raises.

    ``like=`` adds classes the instance is also an instance of (redis-py's class for the
    same failure): ``OutcomeUnknown("...", like=redis.exceptions.TimeoutError)``. A class
    may name a default in ``redis_class``. The message is masked (:func:`mask_url`).
    """

    #: the redis-py class every instance is also an instance of, unless ``like`` says
    redis_class: ClassVar[type[BaseException] | None] = None

    def __new__(cls, *args: Any, like: Like | None = None, **kwargs: Any) -> Self:
        extra = like
        if extra is None and "_luapipe_parts" not in cls.__dict__:  # not already combined
            extra = cls.redis_class
        if extra is not None:
            cls = _combined(cast(Any, cls), extra if isinstance(extra, tuple) else (extra,))
        return super().__new__(cls, *args)

    def __init__(self, *args: Any, like: Like | None = None, status_code: str | None = None):
        # Not redis-py's __init__s: some parse their message (AskError wants "slot host:port").
        Exception.__init__(self, *(mask_url(a) if isinstance(a, str) else a for a in args))
        if isinstance(self, rex.RedisError):  # what redis-py's __init__ would set
            self.__dict__.update(status_code=status_code, error_type=_error_type(self))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(repr(a) for a in self.args)})"

    def __reduce__(self) -> Any:  # combined classes are not module attributes: rebuild them
        own, extra = type(self).__dict__.get("_luapipe_parts", (type(self), ()))
        return (_rebuild, (own, extra, self.args), self.__dict__)


def _rebuild(cls: type[LuapipeError], extra: tuple[type[BaseException], ...], args: Any) -> Any:
    err = cls.__new__(cls, *args, like=extra or None)
    Exception.__init__(err, *args)
    return err


@functools.cache
def _combined(cls: type[LuapipeError], extra: tuple[type[BaseException], ...]) -> Any:
    """``cls`` that is also each class of ``extra`` (named like ``cls`` in tracebacks)."""
    bases = tuple(e for e in extra if not issubclass(cls, e))
    if not bases:
        return cls
    namespace = {
        "__module__": cls.__module__,
        "__doc__": cls.__doc__,
        "_luapipe_parts": (cls, extra),
    }
    return type(cls.__name__, (cls, *bases), namespace)


def _error_type(err: rex.RedisError) -> rex.ExceptionType:
    if isinstance(err, rex.AuthenticationError | rex.AuthorizationError | rex.NoPermissionError):
        return rex.ExceptionType.AUTH
    if isinstance(err, rex.ConnectionError | rex.TimeoutError):
        return rex.ExceptionType.NETWORK
    return rex.ExceptionType.SERVER


class ScriptError(LuapipeError):
    """A Lua script could not be read, parsed or found."""


class ScriptSyntaxError(ScriptError):
    """A Lua script does not compile; the message starts with ``file:line:``."""

    def __init__(
        self, message: str, *, path: str = "", line: int | None = None, like: Like | None = None
    ) -> None:
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
    """A call's keys or args do not match the script (count, type), or what was passed as
    the client is not one; nothing was sent."""


class SpecError(LuapipeError):
    """An operation spec is invalid. ``problems`` holds one line per problem."""

    def __init__(self, problems: list[str] | str) -> None:
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("\n".join(self.problems))


class LockFileError(LuapipeError):
    """The deploy lock file is missing, unreadable or malformed."""


class ServerError(LuapipeError, rex.ResponseError):
    """The server answered with an error reply."""

    #: set by luapipe.wire when the reply was a cluster redirect (the request did not run)
    redirect: object = None


class ScriptRuntimeError(ServerError):
    """A script raised an error while running (message names file:line when known)."""


class OpError(ScriptRuntimeError):
    """An operation failed its own checks (OVERFLOW, FLOAT, DIVZERO, NOTINT) in Python
    (a generated module's forms; ``luapipe.runtime.OpError``)."""


class BusyError(ServerError):
    """BUSY: the server is running a slow script and refuses other work meanwhile."""


class CrossSlotError(ServerError, rex.ClusterCrossSlotError, rex.RedisClusterException):
    """The keys of one call hash to different cluster slots (refused before sending, as
    redis-py's cluster client refuses them with ``RedisClusterException``)."""


class ReadOnlyError(ServerError, rex.ReadOnlyError):
    """A write (or a script without ``no-writes``) was sent to a read-only replica."""


class PermissionDenied(ServerError, rex.NoPermissionError):
    """NOPERM: the connection's ACL user may not run that command; nothing ran."""


class ConnectionFailed(LuapipeError):
    """Could not connect to (or authenticate with) the server, or no cluster node took the
    request within the retry policy's attempts (each refused it before it ran); nothing
    ran."""

    redis_class = rex.ConnectionError


class AuthenticationFailed(ConnectionFailed):
    """The server refused the user name or password."""

    redis_class = rex.AuthenticationError


class TransactionAborted(LuapipeError, rex.WatchError):
    """WATCH kept failing: the transaction form gave up after its bounded retries."""


class OutcomeUnknown(LuapipeError):
    """The request may have run on the server but its reply was lost. It was not re-sent."""

    redis_class = rex.ConnectionError


class EnvironmentProblem(LuapipeError):
    """A program luapipe needs is missing on this machine."""


# A URL's scheme. Everything between it and the LAST "@" of the URL is its userinfo: a
# password may hold a raw "@", "/", "?" or "#" (an invalid URL, still never shown).
_SCHEME = re.compile(r"[a-z][a-z0-9+.-]*://", re.IGNORECASE)
# a query parameter that carries a secret (redis-py takes ?password=... and ?ssl_password=...);
# hidden to the end of the URL: a raw "&", "#" or "@" in it would otherwise end it early
_SECRET_PARAM = re.compile(
    r"([?&;][^=&#]*(?:pass|secret|token)[^=&#]*=).*", re.IGNORECASE | re.DOTALL
)
_MASKED_PARAM = re.compile(r"[?&;][^=&#]*(?:pass|secret|token)[^=&#]*=\*\*\*", re.IGNORECASE)
# what would break a line or hide in one: whitespace, control and format characters
_UNPRINTABLE = re.compile(r"[\s\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff]")
# in free text, a URL runs from its scheme to the next whitespace
_URL_IN_TEXT = re.compile(r"\b[a-z][a-z0-9+.-]*://\S*", re.IGNORECASE)
#: userinfo that is already masked, or a placeholder in a hint (``redis://:PASSWORD@host``)
_SHOWN = frozenset({"***", "PASSWORD"})


def printable_url(url: str) -> str:
    """The one way luapipe turns a Redis URL into text it shows (messages, reports, JSON).

    The user name is kept, the password never: ``redis://bob:***@host:6379/0``. The
    userinfo ends at the LAST ``@``, so a password holding a raw ``@``, ``/``, ``#``, ``?``,
    a quote or a space (which makes the URL invalid) is hidden whole, and a userinfo
    without ``:`` (``redis://s3cret@host``, a password written without its colon) is shown as
    ``***``. Query parameters that carry a secret (``password=``, ``ssl_password=``) are
    masked too, and whitespace or control characters are percent-encoded, so the result
    is always one line.
    """
    found = _SCHEME.match(url)
    head, rest = (found[0], url[found.end() :]) if found else ("", url)
    rest = _SECRET_PARAM.sub(r"\1***", rest)  # first: such a value may hold an "@"
    at = rest.rfind("@")
    if at >= 0:
        user, colon, _secret = rest[:at].partition(":")
        rest = (f"{_encoded(user)}:***" if colon else "***") + _encoded(rest[at:])
    else:
        rest = _encoded(rest)
    return _encoded(head) + rest


def _encoded(text: str) -> str:
    return _UNPRINTABLE.sub(lambda m: "".join(f"%{b:02X}" for b in m[0].encode()), text)


def _mask_one(m: re.Match[str]) -> str:
    token = m[0]
    rest = token[token.index("://") + 3 :]
    userinfo = rest[: rest.rfind("@")] if "@" in rest else None
    masked = userinfo is None or userinfo == "***" or userinfo.partition(":")[2] in _SHOWN
    if masked and (_SECRET_PARAM.search(token) is None or _MASKED_PARAM.search(token)):
        return token  # printed by printable_url already (or a placeholder in a hint)
    return printable_url(token)


# in free text, a URL whose password may hold whitespace: ``scheme://user:``, then the rest
# of the line (``host:6379 ... x@y`` reads as one too: more masked rather than less)
_USERINFO_IN_TEXT = re.compile(r"\b([a-z][a-z0-9+.-]*://[^\s/?#@:]*:)([^\n]*)", re.IGNORECASE)

_NEXT_URL = re.compile(r"\b[a-z][a-z0-9+.-]*://", re.IGNORECASE)


def _mask_spaced(m: re.Match[str]) -> str:
    """A password holding whitespace ends at the last ``@`` before the line's next URL
    (printable_url's rule, more masked than less: a later ``@`` hides the words before it)."""
    head, rest = m[1], m[2]
    after = ""
    following = _NEXT_URL.search(rest)
    if following is not None:
        rest, after = rest[: following.start()], rest[following.start() :]
    at = rest.rfind("@")
    password = rest[:at] if at >= 0 else ""
    if not _UNPRINTABLE.search(password) or password in _SHOWN:
        return m[0]  # no whitespace in it: the token pass below finds it
    tail = re.match(r"\S*", rest[at + 1 :])
    host = tail[0] if tail else ""
    return printable_url(f"{head}{password}@{host}") + rest[at + 1 + len(host) :] + after


def mask_url(text: str) -> str:
    """``text`` with every URL in it shown by :func:`printable_url` (password masked).

    The safety net under text that luapipe did not write itself (a server's words, a
    results file of an older luapipe): a URL ends at whitespace, except that a password
    holding whitespace runs to the line's last ``@`` (printable_url's own rule).
    """
    if "://" not in text:
        return text
    return _URL_IN_TEXT.sub(_mask_one, _USERINFO_IN_TEXT.sub(_mask_spaced, text))


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else text


def redis_class_of_reply(text: str) -> type[rex.RedisError]:
    """The class redis-py raises for the error reply ``text`` (code included, e.g.
    ``"READONLY You can't write..."``): its parser's own table decides."""
    return type(BaseParser.parse_error(text))  # type: ignore[no-untyped-call]


def _reply_text(exc: rex.RedisError) -> str:
    """The server's error line with its code: redis-py strips known codes (NOSCRIPT, ERR)."""
    text = _first_line(str(exc))
    code = getattr(exc, "status_code", None)
    if code and not text.startswith(f"{code} "):
        text = f"{code} {text}"
    return text


def translate(
    exc: BaseException, *, where: str = "", sent: bool = False, command: str = ""
) -> LuapipeError:
    """Map a redis-py exception (or an ``OSError``) to luapipe's tree; see the table above.

    ``where`` is the server address (host:port) for connection errors; ``sent`` says whether
    the request may already have reached the server, which turns a connection or timeout
    error into :class:`OutcomeUnknown`; ``command`` names what was refused by an ACL (when
    the server's text does not). The result is also an instance of the redis-py
    class redis-py raises for the same failure.
    """
    if isinstance(exc, LuapipeError):
        return exc
    at = f" at {where}" if where else ""
    if isinstance(exc, rex.ResponseError | rex.AuthenticationError | rex.BusyLoadingError):
        text = _reply_text(exc)
        # An error reply made up by luapipe from a reply's text is a plain ResponseError:
        # the class redis-py would raise comes from the text, as in redis-py's parser.
        cls = redis_class_of_reply(text) if type(exc) is rex.ResponseError else type(exc)
        return _from_reply(text, cls, at, getattr(exc, "status_code", None), command)
    text = _first_line(str(exc))
    if isinstance(exc, rex.DataError):
        return CallArgumentError(f"{text}; nothing was sent", like=rex.DataError)
    if isinstance(exc, rex.WatchError):
        return TransactionAborted(text)
    if isinstance(exc, rex.InvalidResponse | RecursionError):
        like: type[rex.RedisError] = rex.InvalidResponse
        if sent:
            return OutcomeUnknown(
                f"the reply from the server{at} could not be read ({_unreadable(exc, text)}); "
                "the request may have run; it was not re-sent",
                like=like,
            )
        return ConnectionFailed(f"the server{at} did not answer like Redis ({text})", like=like)
    if isinstance(exc, rex.TimeoutError | rex.ConnectionError | OSError):
        timeout = isinstance(exc, rex.TimeoutError | TimeoutError)
        like = redis_io_class(exc)
        text = _io_words(text)
        if sent:
            kind = "timed out" if timeout else "lost"
            return OutcomeUnknown(
                f"connection{at} {kind} after the request was sent; outcome unknown, "
                f"it was not re-sent ({text})",
                like=like,
            )
        return ConnectionFailed(f"cannot connect to Redis{at}: {text}", like=like)
    if isinstance(exc, rex.RedisError):
        return LuapipeError(text, like=type(exc))
    what = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    if sent:  # e.g. an in-process fake server that raised while running the request
        return OutcomeUnknown(
            f"the request to the server{at} failed ({what}); it may have run; it was not re-sent",
            like=(),
        )
    return LuapipeError(what)


#: how redis-py (and the socket) say the server hung up, depending on when it did: the
#: same cause, so the same words in every command
_HUNG_UP = ("Connection closed by server", "reset by peer", "Broken pipe", "(104,", "(32,")


def _io_words(text: str) -> str:
    return "the server closed the connection" if any(h in text for h in _HUNG_UP) else text


def redis_io_class(exc: BaseException) -> type[rex.RedisError]:
    """What redis-py raises for this I/O failure: its own class, or for a socket error
    one of the two it wraps them in (TimeoutError, ConnectionError)."""
    if isinstance(exc, rex.RedisError):
        return type(exc)
    return rex.TimeoutError if isinstance(exc, TimeoutError) else rex.ConnectionError


def _unreadable(exc: BaseException, text: str) -> str:
    if isinstance(exc, RecursionError) or "nesting depth" in text:
        return "nested deeper than redis-py's reply parser allows"
    return text


def _from_reply(
    text: str, cls: type[rex.RedisError], at: str, code: str | None, command: str = ""
) -> LuapipeError:
    """The luapipe error for an error reply whose redis-py class is ``cls``."""
    if issubclass(cls, rex.AuthenticationError | rex.AuthorizationError) or text.startswith(
        ("WRONGPASS", "NOAUTH", "invalid username-password")
    ):
        return AuthenticationFailed(
            f"authentication failed{at}: {_auth_words(text, at[4:])}", like=cls, status_code=code
        )
    if issubclass(cls, rex.BusyLoadingError):
        return ConnectionFailed(
            f"the server{at} is loading its data set; nothing ran, try again later ({text})",
            like=cls,
            status_code=code,
        )
    if issubclass(cls, rex.ConnectionError):  # "ERR max number of clients reached"
        return ConnectionFailed(f"the server{at} refused the connection: {text}", like=cls)
    if "Protocol error: invalid bulk length" in text or "Protocol error: too big" in text:
        return ServerError(
            f"the server{at} refused the request: an argument is larger than its "
            f"proto-max-bulk-len; nothing ran ({text})",
            like=cls,
        )
    if text.startswith("BUSY "):  # not BUSYKEY (RESTORE, COPY... onto an existing key)
        return BusyError(f"BUSY: the server{at} is running a slow script ({text})", like=cls)
    if issubclass(cls, rex.ClusterCrossSlotError):
        return CrossSlotError(text, status_code=code)
    if issubclass(cls, rex.ReadOnlyError):
        return ReadOnlyError(f"read-only replica{at}: {text}", status_code=code)
    if issubclass(cls, rex.NoPermissionError):
        return PermissionDenied(
            f"permission denied{at}: {acl_words(text, command)}", status_code=code
        )
    return ServerError(text, like=cls, status_code=code)


#: how a password is percent-encoded for a URL, for the messages that may be about one
QUOTE_HOW = "urllib.parse.quote(password, safe='')"


def _auth_words(text: str, where: str = "") -> str:
    """luapipe's own words for an authentication failure (the server's code kept); ``where``
    (a printable URL, or host:port) is where the hint puts the password."""
    if text.startswith("NOAUTH"):
        plain, acl = _with_password(where)
        return (
            "the server needs a password and none was given (NOAUTH); put it in the URL: "
            f"{plain}, or {acl} for an ACL user"
        )
    if "without any password configured" in text or "no password is set" in text:
        return "the URL gives a password but the server has none set; drop it from the URL"
    if text.startswith("WRONGPASS") or "invalid username-password" in text:
        return (
            "wrong user name or password, or the user is disabled (WRONGPASS); a password "
            f"holding / # ? % or a space goes percent-encoded in the URL ({QUOTE_HOW})"
        )
    return text


def _with_password(where: str) -> tuple[str, str]:
    """The user's own URL (``where``, as printable_url shows it) with a password placeholder
    in it, without and with a user name: its scheme (``unix://``, ``rediss://``), socket
    path or host and port, database and options kept; ``redis://`` for a bare host:port."""
    found = _SCHEME.match(where)
    head, rest = (found[0], where[found.end() :]) if found else ("redis://", where)
    rest = rest[rest.rfind("@") + 1 :] or "host:port"  # whatever userinfo it had goes
    return f"{head}:PASSWORD@{rest}", f"{head}USER:PASSWORD@{rest}"


_NOPERM_COMMAND = re.compile(r"permissions? to run the '([^']+)' command")
# Redis 7.0: "... access one of the keys (channels) used as arguments"; Redis 7.2 and
# Valkey 8: "No permissions to access a key" ("a channel")
_NOPERM_KEY = re.compile(r"access (?:one of the |a )(?:keys?|channels?)\b")


def acl_words(text: str, command: str = "") -> str:
    """luapipe's words for an ACL refusal: which command (or key) the user may not use.

    ``command`` is what was sent, for a refusal whose text does not name it (a key or a
    channel the user may not touch)."""
    named = _NOPERM_COMMAND.search(text)
    if named is not None:
        command = named[1]
    what = command.replace("|", " ").upper() or "this command"
    if _NOPERM_KEY.search(text):
        return f"the ACL user may not run {what} on these keys or channels ({text})"
    return f"the ACL user may not run {what} ({text})"
