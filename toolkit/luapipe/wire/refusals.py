"""Did the script or function run? One reading of an error reply, for every engine.

An error reply to ``EVAL``/``EVALSHA``/``FCALL`` (and their ``_RO`` twins) is either a
**refusal** (the server did not run the script or function: it is not its fault, and its
lines did not run) or the **script's own error** (it ran, perhaps in part, and failed). The
two read differently on each engine (Redis 7.0 and 7.2, Valkey 8, fakeredis), so they are
told apart here only, by what every engine in the test matrix says alike
(``tests/wire/engine_replies.json`` holds their real texts; ``tests/wire/test_refusals.py``
feeds each one through :func:`refused`):

1. A text carrying the Lua error trailer (``script: <sha>, on @user_script:3.``, a
   function's ``on @user_function:3.``), a Lua line tag (``user_script:3:``) or the older
   ``Error running script`` / ``Error compiling script`` is the script's own error, whatever
   its code: a ``redis.call`` that hit OOM or NOPERM midway has run the lines before it.
2. Else the error code decides: NOSCRIPT (to ``EVALSHA`` only: ``EVAL`` is never answered
   NOSCRIPT, so there it is the script's own reply), BUSY, OOM, READONLY, NOPERM, CROSSSLOT,
   LOADING, MASTERDOWN, MISCONF, NOREPLICAS, MOVED, ASK, TRYAGAIN, CLUSTERDOWN, NOAUTH,
   WRONGPASS.
3. A few refusals carry a plain ``ERR``; they are matched on text every engine shares:
   the exact ``ERR Function not found`` (to FCALL only: after luapipe loaded the library
   and sent the call again, that text is the function's own reply, as NOSCRIPT is after
   EVAL); ``ERR Number of keys can't be ...`` (greater than
   the number of args, or negative); the exact ``ERR Can not execute a script with write
   flag using *_ro command.``; ``ERR unknown command '<verb>'`` naming the verb luapipe sent
   (a server without ``EVALSHA_RO``, a renamed ``FCALL``), never another command (fakeredis
   says ``unknown command 'foo'`` for a script's own ``redis.call('FOO')``);
   ``ERR Protocol error`` (an argument over proto-max-bulk-len); and ``ERR max number of
   clients reached``.
4. Anything else is the script's own error (its ``error_reply``, its ``error()`` on a
   server that gives no line, a failed ``redis.call`` on fakeredis).

A script can still make its own error look like a refusal (``return redis.error_reply('BUSY
x')``): nothing on the wire tells the two apart, and luapipe never re-sends on a refusal
read here (only a redirect or a genuine NOSCRIPT / ``Function not found`` is sent again, see
:mod:`luapipe.wire.policy`), so the worst outcome is the wrong exception class, never a
second run.
"""

from __future__ import annotations

import re

from luapipe.wire.replies import FUNCTION_NOT_FOUND, NOSCRIPT_TEXT

__all__ = [
    "CALL_VERBS",
    "FUNCTION_NOT_FOUND",
    "NOSCRIPT_TEXT",
    "REFUSAL_CODES",
    "lua_error",
    "refused",
]

#: error codes that mean the server did not run the request at all
REFUSAL_CODES = frozenset(
    [
        "BUSY",
        "OOM",
        "READONLY",
        "NOPERM",
        "CROSSSLOT",
        "LOADING",
        "MASTERDOWN",
        "MISCONF",
        "NOREPLICAS",
        "MOVED",
        "ASK",
        "TRYAGAIN",
        "CLUSTERDOWN",
        "NOAUTH",
        "WRONGPASS",
    ]
)
#: the verbs luapipe sends to run or load a script or a function
CALL_VERBS = frozenset(
    ["EVAL", "EVALSHA", "EVAL_RO", "EVALSHA_RO", "FCALL", "FCALL_RO", "SCRIPT", "FUNCTION"]
)
_EVALSHA = frozenset(("EVALSHA", "EVALSHA_RO"))

_FCALL = frozenset(("FCALL", "FCALL_RO"))
_ERR_EXACT = frozenset(("ERR Can not execute a script with write flag using *_ro command.",))
_ERR_PREFIXES = (
    "ERR Number of keys can't be ",
    "ERR Protocol error",
    "ERR max number of clients reached",
)
_UNKNOWN = re.compile(r"ERR unknown command '([^']*)'")
# Redis 7 and Valkey 8: "... script: <sha or function>, on @user_script:3." at the end;
# a compile error or a Lua error with its line ("user_script:3: ..."), also a function's;
# older Redis and fakeredis: "Error running script (call to f_<sha>): @user_script:3: ..."
_TRAILER = re.compile(r"\sscript: \S+, on @user_(?:script|function):\d+\.$")
_LUA = re.compile(
    r'user_(?:script|function):\d+:|\[string "[^"]*"\]:\d+:'
    r"|^(?:ERR )?Error (?:running|compiling) (?:script|function)"
)


def lua_error(text: str) -> bool:
    """Whether ``text`` carries Lua's own marks (the trailer, a line tag, a compile or run
    error): the script or function ran, or its code failed to compile."""
    return bool(_TRAILER.search(text) or _LUA.search(text))


def refused(text: str, sent: str | None = None) -> bool:
    """Whether the error reply ``text`` (code included) proves the script or function was
    not run, through no fault of its own (see the module docstring).

    ``sent`` is the verb of the command that got the reply (``EVALSHA_RO``, ``FCALL``...).
    NOSCRIPT is a refusal only for ``EVALSHA``/``EVALSHA_RO`` and the exact ``ERR Function
    not found`` only for ``FCALL``/``FCALL_RO``: luapipe reads those two first, from the
    first send (:attr:`~luapipe.wire.replies.ReplyError.is_noscript`,
    ``is_function_not_found``); once it has re-sent (EVAL, or FCALL after loading the
    library) the same text can only be the callee's own reply. Without ``sent`` (the reply
    of a call that was already read for those two) both are the callee's own, and an
    unknown-command error counts only when it names one of :data:`CALL_VERBS`."""
    if lua_error(text):
        return False
    code = text.split(" ", 1)[0]
    verb = sent.upper() if sent is not None else None
    if code == "NOSCRIPT":
        return verb in _EVALSHA and text.startswith(NOSCRIPT_TEXT)
    if code in REFUSAL_CODES:
        return True
    if text == FUNCTION_NOT_FOUND:
        return verb in _FCALL
    if text in _ERR_EXACT or text.startswith(_ERR_PREFIXES):
        return True
    unknown = _UNKNOWN.match(text)
    if unknown is not None:
        named = unknown[1].upper()
        return named == verb if verb is not None else named in CALL_VERBS
    return False
