"""The logic of calling scripts, free of I/O: which commands to send, what replies mean.

A :class:`Plan` turns queued entries (script calls and plain commands) into batches of
wire commands and consumes their replies; a driver (sync in ``registry``/``pipeline``,
async elsewhere) only sends each batch in one round trip and feeds the replies back::

    plan = Plan(entries, known, node, transaction=False)
    batch = plan.start()
    while batch:
        batch = plan.feed(send(batch))
    results = plan.results

Rules it enforces (see DESIGN.md "Semantics that must hold"):

- non-transactional: scripts not known to be cached on that node get ``SCRIPT LOAD`` in the
  same write, ahead of the batch; a call answered with the server's exact NOSCRIPT text did
  not run, so only those calls are loaded and re-sent (bounded rounds); nothing else is.
- transactional: scripts run as ``EVAL`` inside MULTI/EXEC, so EXEC never depends on the
  cache (an EVALSHA of a missing script would fail alone while the rest commits).
- functions (:class:`~luapipe.scripts.fcall.FunctionCall`): FCALL alone (libraries
  persist); the calls answered with the exact "ERR Function not found" did not run and go
  again in one MULTI after their libraries' FUNCTION LOAD (never REPLACE). In a
  transaction each library's FUNCTION LOAD is queued inside MULTI ahead of the calls, and
  before the first transaction on a node its live version is read (FUNCTION LIST): another
  version is refused before MULTI.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import redis.exceptions as rex
from redis.exceptions import ResponseError

from luapipe.errors import (
    BusyError,
    ConnectionFailed,
    CrossSlotError,
    LuapipeError,
    PermissionDenied,
    ReadOnlyError,
    ScriptRuntimeError,
    ScriptSyntaxError,
    ServerError,
    redis_class_of_reply,
    translate,
)
from luapipe.scripts.fcall import (
    FunctionCall,
    conflict_error,
    function_owners,
    heal_batch,
    list_command,
    live_library,
    read_heal,
)
from luapipe.scripts.library import FunctionLibrary
from luapipe.scripts.script import LuaScript
from luapipe.wire.limits import BulkLimits
from luapipe.wire.replies import Command, Redirect, ReplyError, Value, full_error_text

__all__ = [
    "FunctionCall",
    "KnownScripts",
    "LuaSource",
    "Plan",
    "ScriptCall",
    "cached_by_eval",
    "exec_item",
    "function_result",
    "load_failed",
    "parse_lua_error",
    "raise_first",
    "script_error",
    "script_result",
]

# Redis 7: "user_script:3: msg script: <sha>, on @user_script:3."; older Redis and fakeredis:
# "Error running script (call to f_<sha>): @user_script:3: msg" or '[string "..."]:3: msg'.
# A function's errors say user_function and name the function: "script: f1, on
# @user_function:4."
_LINE_TAG = re.compile(r'(?:user_script|user_function|\[string "[^"]*"\]):(\d+):\s*')
_TRAILER = re.compile(r"\s+script: \S+, on @user_(?:script|function):(\d+)\.$")
_COMPILE = ("Error compiling script", "Error compiling function")
_LIST_ALL = Command(("FUNCTION", "LIST"))


def cached_by_eval(reply: Any) -> bool:
    """Whether an EVAL that got ``reply`` compiled the script (so it is cached now): a value,
    or an error raised while the script ran; not a refusal before it ran (BUSY, NOPERM,
    OOM, READONLY...) and not a compile error. A hint either way: a wrong guess costs one
    NOSCRIPT round trip, never a second run."""
    if not isinstance(reply, ReplyError):
        return True
    if reply.is_compile_error:
        return False
    return bool(_TRAILER.search(reply.text) or _LINE_TAG.search(reply.text))


def parse_lua_error(text: str) -> tuple[int, str] | None:
    """``(line, message)`` from a Lua compile or runtime error text, in any known format."""
    tags = list(_LINE_TAG.finditer(text))
    if not tags:
        return None
    last = tags[-1]
    return int(last[1]), _TRAILER.sub("", text[last.end() :]).strip()


@dataclass(frozen=True)
class ScriptCall:
    """A queued script call."""

    script: LuaScript
    keys: tuple[Value, ...]
    args: tuple[Value, ...]

    def evalsha(self) -> Command:
        return Command(self.evalsha_args())

    def evalsha_args(self) -> tuple[Any, ...]:
        """The words of the EVALSHA (EVALSHA_RO for ``no-writes`` scripts)."""
        verb = "EVALSHA_RO" if self.script.read_only else "EVALSHA"
        return (verb, self.script.sha, len(self.keys), *self.keys, *self.args)

    def eval(self) -> Command:
        """EVAL (EVAL_RO): never answered by a genuine NOSCRIPT, and it caches the script."""
        verb = "EVAL_RO" if self.script.read_only else "EVAL"
        return Command((verb, self.script.source, len(self.keys), *self.keys, *self.args))


def load_command(script: LuaScript) -> Command:
    return Command(("SCRIPT", "LOAD", script.source))


class KnownScripts:
    """Which SHAs we have seen cached, per node address. Thread-safe; a hint, never a promise.
    ``limits``: each node's proto-max-bulk-len as last read (:mod:`luapipe.wire.limits`)."""

    def __init__(self) -> None:
        self._by_node: dict[str, set[str]] = {}
        self._lock = threading.Lock()
        self.limits = BulkLimits()

    def has(self, node: str, sha: str) -> bool:
        shas = self._by_node.get(node)
        return shas is not None and sha in shas

    def add(self, node: str, sha: str) -> None:
        with self._lock:
            self._by_node.setdefault(node, set()).add(sha)

    def discard(self, node: str, sha: str) -> None:
        with self._lock:
            self._by_node.get(node, set()).discard(sha)

    def forget(self, node: str) -> None:
        with self._lock:
            self._by_node.pop(node, None)


class LuaSource(Protocol):
    """What the error reader needs of a script or a library: its name, file and code."""

    @property
    def name(self) -> str: ...
    @property
    def path(self) -> str | None: ...
    @property
    def source(self) -> str: ...
    def file_line(self, line: int) -> str: ...


def script_error(
    script: LuaSource,
    text: str,
    where: str = "",
    command: str = "",
    *,
    label: str | None = None,
) -> LuapipeError:
    """The error for a script's error reply, naming the script's file:line where known.

    ``label`` names the callee in messages (default ``script <name>``; a function's is
    ``function f, library lib``). Its class is luapipe's and also redis-py's for the same
    reply (see luapipe.errors)."""
    label = label or f"script {script.name}"
    if text.startswith("ERR unknown command"):
        return _unknown_command(text, f"{label} did not run")
    if text.startswith("BUSY"):  # another script holds the server: this one did not run
        callee = label if label.startswith("function") else script.name
        return BusyError(f"BUSY: the server is running another script; {callee} did not run")
    compile_err = any(c in text for c in _COMPILE)
    found = parse_lua_error(text)
    if found is not None:
        line, message = found
        where = script.file_line(line)
        if compile_err:
            return ScriptSyntaxError(
                f"{where}: Lua syntax error: {message}",
                path=script.path or script.name,
                line=line,
                like=ResponseError,
            )
        return _runtime_error(text, f"{where}: {message} ({label})")
    trailer = _TRAILER.search(text)
    if trailer is not None:
        # A redis.call failed inside the running script (WRONGTYPE, NOPERM, a write in a
        # no-writes script...): Redis 7 names the line only in "script: <sha>, on
        # @user_script:N." It is the script's runtime error, whatever the code: the lines
        # before it have run, so it is never a connection or permission error to retry.
        message = text[: trailer.start()].strip()
        where = script.file_line(int(trailer[1]))
        return _runtime_error(text, f"{where}: {message} ({label})")
    if compile_err:  # a limit Lua reports without a line (the local check names it)
        return ScriptSyntaxError(
            f"{script.path or script.name}: {text}",
            path=script.path or script.name,
            like=ResponseError,
        )
    generic = translate(ResponseError(text), where=where, command=command)
    if _refused(generic, text):
        return generic
    # The script's own error_reply, or a failed redis.call on a server that does not say
    # the line (fakeredis): name the lines it can have come from.
    return _runtime_error(text, f"{_error_sites(script)}: {label} failed: {text}")


_UNKNOWN_COMMAND = re.compile(r"^ERR unknown command '([^']*)'")
_FUNCTIONS = "Redis Functions need Redis 7.0 or later (or Valkey)"
#: why a server does not know a command luapipe sends for a call
_NEEDS = {
    "FCALL": _FUNCTIONS,
    "FCALL_RO": _FUNCTIONS,
    "FUNCTION": _FUNCTIONS,
    "EVALSHA_RO": "a no-writes script's EVALSHA_RO needs Redis 7.0 or later",
}


def _unknown_command(text: str, outcome: str) -> ServerError:
    """The server does not know the call's command (an older server, or the command
    renamed or disabled there): one line that names the command and why, never the call's
    keys and args (the server's reply echoes them: "with args beginning with: ...")."""
    m = _UNKNOWN_COMMAND.match(text)
    verb = m[1].upper() if m else "?"
    need = _NEEDS.get(verb)
    why = f": {need}, with {verb} not renamed or disabled" if need else " (renamed or disabled?)"
    return ServerError(f"the server does not know {verb}{why}; {outcome}")


def _refused(err: LuapipeError, text: str) -> bool:
    """An error reply that refused the script before it ran (not its own error)."""
    if isinstance(err, BusyError | ReadOnlyError | CrossSlotError | PermissionDenied):
        return True
    if isinstance(err, ConnectionFailed) or text.startswith("ERR Protocol error"):
        return True
    return text.startswith(("OOM command not allowed", "ERR unknown command", "ERR Number of keys"))


def _runtime_error(text: str, message: str) -> LuapipeError:
    """A script's runtime error: also ReadOnlyError / PermissionDenied for those codes, and
    redis-py's class for the reply's code (NoScriptError, OutOfMemoryError...)."""
    cls = redis_class_of_reply(text)
    if issubclass(cls, rex.ReadOnlyError):
        return ReadOnlyError(message, like=ScriptRuntimeError)
    if issubclass(cls, rex.NoPermissionError):
        return PermissionDenied(message, like=ScriptRuntimeError)
    return ScriptRuntimeError(message, like=cls)


_SITE = re.compile(r"\bredis\s*\.\s*(?:call|error_reply)\s*\(|\{\s*err\s*=")


def _error_sites(script: LuaSource) -> str:
    """``file:line`` of the one line an error without a line number can come from (a
    redis.call or an error reply), or ``file`` and the candidate lines."""
    lines = [
        n
        for n, text in enumerate(script.source.splitlines(), 1)
        if _SITE.search(text.split("--")[0])
    ]
    if len(lines) == 1:
        return script.file_line(lines[0])
    where = script.path or script.name
    if not lines:
        return where
    shown = ", ".join(script.file_line(n).rsplit(":", 1)[1] for n in lines[:8])
    more = ", ..." if len(lines) > 8 else ""
    return f"{where} (the server did not say the line: one of lines {shown}{more})"


def script_result(script: LuaScript, reply: Any) -> Any:
    """A script's reply, or its error mapped to luapipe (returned, not raised)."""
    if isinstance(reply, ReplyError):
        return script_error(script, reply.text, reply.where, reply.command)
    return reply


def function_result(call: FunctionCall, reply: Any) -> Any:
    """A function's reply, or its error mapped to luapipe, naming the library's file:line
    (returned, not raised)."""
    if isinstance(reply, ReplyError):
        label = f"function {call.function.name}, library {call.library.name}"
        source = call.library.error_source(call.function.name)
        return script_error(source, reply.text, reply.where, reply.command, label=label)
    return reply


def load_failed(
    library: FunctionLibrary, reply: ReplyError, node: str, *, outcome: str = "nothing ran"
) -> LuapipeError:
    """The error for a FUNCTION LOAD of ``library`` that failed on ``node`` (a compile or
    load-time error at file:line, a function name another library owns...); ``outcome``
    says what ran."""
    text = reply.text
    if text.startswith("ERR Function ") and text.endswith(" already exists"):
        fn = text[len("ERR Function ") : -len(" already exists")]
        return ServerError(
            f"library {library.name!r} ({library.path or library.name}) cannot be loaded on "
            f"{node}: another library already registers a function {fn!r} (function names "
            f"are global on a server); rename one of them; {outcome}"
        )
    return script_error(library, text, reply.where, reply.command, label=f"library {library.name}")


def check_loaded(script: LuaScript, reply: Any) -> LuapipeError | None:
    """Validate a SCRIPT LOAD reply: an error, or a SHA that is not ours."""
    if isinstance(reply, ReplyError):
        return script_error(script, reply.text, reply.where, reply.command)
    sha = reply.decode() if isinstance(reply, bytes) else str(reply)
    if sha.lower() != script.sha:
        return ServerError(f"server computed SHA {sha} for {script.name}, expected {script.sha}")
    return None


Entry = ScriptCall | FunctionCall | Command


class Plan:
    """Batches for one execute of queued entries on one node (see module docstring)."""

    def __init__(
        self, entries: Sequence[Entry], known: KnownScripts, node: str, *, transaction: bool
    ) -> None:
        self.entries = list(entries)
        self.known = known
        self.node = node
        self.transaction = transaction
        self.results: list[Any] = [None] * len(self.entries)
        self.rounds = 0
        self.reloads = 0  # script and function calls re-sent after NOSCRIPT / not found
        self._batch_slots: list[int | None] = []  # per wire command: entry index, or None
        self._loading: list[LuaScript | None] = []
        self._resend = False  # this batch re-sends NOSCRIPT'd calls as EVAL
        self._heal: list[int] = []  # function calls healed at the tail of this batch
        self._checking: list[FunctionLibrary] = []  # libraries checked before a MULTI
        self._tx_loads: list[FunctionLibrary] = []  # FUNCTION LOADs queued after MULTI

    # -- building batches -----------------------------------------------------------------
    def start(self) -> list[Command]:
        if not self.entries:
            return []
        if self.transaction:
            unchecked = [lib for lib in self._libraries() if not self.known.has(self.node, lib.sha)]
            if unchecked:  # which version is live: refuse another before MULTI
                self.rounds += 1
                self._checking = unchecked
                # and who owns each function name: a library that cannot be loaded would
                # fail its calls at EXEC while the rest commits
                return [*(list_command(lib) for lib in unchecked), _LIST_ALL]
            return self._transaction_batch()
        return self._batch(list(range(len(self.entries))))

    def _libraries(self) -> list[FunctionLibrary]:
        libs = {e.library.sha: e.library for e in self.entries if isinstance(e, FunctionCall)}
        return list(libs.values())

    def _batch(self, indexes: list[int], *, resend: bool = False) -> list[Command]:
        """The first batch: scripts not known on the node are loaded inline, then EVALSHA;
        functions go as FCALL alone (libraries persist).
        ``resend``: the calls answered NOSCRIPT go again as EVAL, which cannot be answered
        NOSCRIPT by the server, so a NOSCRIPT now is the script's own error reply (a
        script that returns exactly that text cannot be told from a flushed cache: it may
        run twice, never more). The function calls answered "not found" go again at the
        tail, after their libraries' FUNCTION LOAD in one MULTI (see
        :mod:`luapipe.scripts.fcall`)."""
        self.rounds += 1
        self._resend = resend
        wire: list[Command] = []
        slots: list[int | None] = []
        loading: list[LuaScript | None] = []
        seen: set[str] = set()
        for i in [] if resend else indexes:
            e = self.entries[i]
            if isinstance(e, ScriptCall):
                sha = e.script.sha
                if sha not in seen and not self.known.has(self.node, sha):
                    seen.add(sha)
                    wire.append(load_command(e.script))
                    slots.append(None)
                    loading.append(e.script)
        heal: list[int] = []
        for i in indexes:
            e = self.entries[i]
            if isinstance(e, ScriptCall):
                wire.append(e.eval() if resend else e.evalsha())
            elif isinstance(e, FunctionCall):
                if resend:
                    heal.append(i)
                    continue
                wire.append(e.fcall())
            else:
                wire.append(e)
            slots.append(i)
            loading.append(None)
        self._batch_slots, self._loading, self._heal = slots, loading, heal
        if heal:
            wire += heal_batch([self._call(i) for i in heal])
        return wire

    def _call(self, i: int) -> FunctionCall:
        e = self.entries[i]
        assert isinstance(e, FunctionCall)
        return e

    def _transaction_batch(self) -> list[Command]:
        self.rounds += 1
        # Every library is loaded (never replaced) inside MULTI, ahead of its calls: EXEC
        # never depends on a library being there ("already exists" is harmless).
        self._tx_loads = self._libraries()
        # Replies inside MULTI are QUEUED: parse callbacks apply to EXEC's items (driver).
        body = [
            e.eval()
            if isinstance(e, ScriptCall)
            else e.fcall()
            if isinstance(e, FunctionCall)
            else Command(e.args)
            for e in self.entries
        ]
        loads = [Command(lib.load_args()) for lib in self._tx_loads]
        return [Command(("MULTI",)), *loads, *body, Command(("EXEC",))]

    # -- consuming replies ----------------------------------------------------------------
    def feed(self, replies: Sequence[Any]) -> list[Command]:
        """Record replies; return the next batch (only the calls that did not run), or []
        when done."""
        if self._checking:
            refused = self._read_check(replies)
            if refused is not None:  # nothing was sent but the check
                self.results = [refused] * len(self.entries)
                return []
            return self._transaction_batch()
        if self.transaction:
            self._feed_transaction(replies)
            return []
        retry: list[int] = []
        load_errors: dict[str, LuapipeError] = {}
        head = len(self._batch_slots)
        for slot, script, reply in zip(
            self._batch_slots, self._loading, replies[:head], strict=True
        ):
            if script is not None:
                err = check_loaded(script, reply)
                if err is None:
                    self.known.add(self.node, script.sha)
                else:
                    load_errors[script.sha] = err
                continue
            assert slot is not None
            entry = self.entries[slot]
            redirect = Redirect.of(reply)
            if redirect is not None:
                self.results[slot] = redirect
                continue
            if isinstance(entry, ScriptCall):
                if self._resend:  # EVAL: any reply is the script's own
                    if cached_by_eval(reply):
                        self.known.add(self.node, entry.script.sha)
                elif isinstance(reply, ReplyError) and reply.is_noscript:
                    self.known.discard(self.node, entry.script.sha)
                    if entry.script.sha in load_errors:
                        self.results[slot] = load_errors[entry.script.sha]
                    else:
                        retry.append(slot)
                    continue
                self.results[slot] = script_result(entry.script, reply)
            elif isinstance(entry, FunctionCall):
                if isinstance(reply, ReplyError) and reply.is_function_not_found:
                    retry.append(slot)  # it did not run
                    continue
                self.results[slot] = function_result(entry, reply)
            else:
                self.results[slot] = _command_result(reply)
        if self._heal:
            calls = [self._call(i) for i in self._heal]
            healed = read_heal(calls, replies[head:], self.node, function_result, load_failed)
            for i, outcome in zip(self._heal, healed, strict=True):
                self.results[i] = outcome
        if retry:
            self.reloads += len(retry)
            return self._batch(retry, resend=True)
        return []

    def _read_check(self, replies: Sequence[Any]) -> LuapipeError | None:
        """The libraries' live versions before a MULTI: another version is refused, and so
        is an absent library whose function names another library owns (its load inside
        MULTI would fail at EXEC, and its calls with it, while the rest commits)."""
        for reply in replies:
            if isinstance(reply, ReplyError) and reply.text.startswith("ERR unknown command"):
                return _unknown_command(reply.text, "the transaction was not sent")
        if isinstance(replies[-1], ReplyError):
            return _command_result(replies[-1])  # type: ignore[no-any-return]
        owners = function_owners(replies[-1])
        for lib, reply in zip(self._checking, replies[:-1], strict=True):
            if isinstance(reply, ReplyError):
                return _command_result(reply)  # type: ignore[no-any-return]
            live = live_library(reply, lib.name)
            if live is None:  # absent: the load inside MULTI puts it there, if it can
                for f in lib.functions:
                    owner = owners.get(f.name.lower())
                    if owner is not None and owner != lib.name:
                        return ServerError(
                            f"library {lib.name!r} ({lib.path or lib.name}) cannot be loaded "
                            f"on {self.node}: library {owner!r} already registers a function "
                            f"{f.name!r} (function names are global on a server); rename one "
                            "of them; the transaction was not sent"
                        )
                continue
            if live.sha != lib.sha:
                return conflict_error(lib, live.sha, self.node, "the transaction was not sent")
            self.known.add(self.node, lib.sha)
        self._checking = []
        return None

    def _feed_transaction(self, replies: Sequence[Any]) -> None:
        loads = len(self._tx_loads)
        queued_all = replies[1:-1]
        queued = queued_all[loads:]
        exec_reply = replies[-1]
        moved = [r for q in queued if (r := Redirect.of(q)) is not None]
        if moved:  # refused at queue time, EXECABORT: nothing ran; route it again
            first = moved[0]
            if first.ask is not None and len(moved) < len(queued):
                # Only some keys have moved: ASKING would let the importing node create the
                # others afresh beside the originals. Wait for the migration instead.
                first = Redirect(
                    "TRYAGAIN",
                    None,
                    f"TRYAGAIN keys of this transaction are split by a slot migration ({first})",
                )
            self.results = [first] * len(self.entries)
            return
        redirect = Redirect.of(exec_reply)
        if redirect is not None:  # nothing ran (TRYAGAIN)
            self.results = [redirect] * len(self.entries)
            return
        if isinstance(exec_reply, ReplyError):  # EXECABORT: nothing ran
            self.results = [_aborted(exec_reply, queued_all)] * len(self.entries)
            return
        if exec_reply is None:
            err = ServerError("transaction aborted by the server (EXEC returned nil)")
            self.results = [err] * len(self.entries)
            return
        items = [
            ReplyError(full_error_text(r)) if isinstance(r, BaseException) else r
            for r in exec_reply
        ]
        loaded = dict(zip((lib.sha for lib in self._tx_loads), items[:loads], strict=True))
        for lib in self._tx_loads:
            if not isinstance(loaded[lib.sha], ReplyError):
                self.known.add(self.node, lib.sha)  # ours, loaded by this transaction
        for i, (entry, reply) in enumerate(zip(self.entries, items[loads:], strict=True)):
            if isinstance(entry, ScriptCall):
                self.results[i] = script_result(entry.script, reply)
            elif isinstance(entry, FunctionCall):
                self.results[i] = self._exec_function(entry, reply, loaded[entry.library.sha])
            else:
                self.results[i] = _command_result(reply)

    def _exec_function(self, call: FunctionCall, reply: Any, load: Any) -> Any:
        """A function call's item of EXEC, beside its library's FUNCTION LOAD item."""
        if not (isinstance(reply, ReplyError) and reply.is_function_not_found):
            return function_result(call, reply)
        if not isinstance(load, ReplyError):  # loaded just before: its own error reply
            return function_result(call, reply)
        if not load.text.endswith(" already exists") or not load.text.startswith("ERR Library"):
            # taken since the check (the race README describes): the rest has committed
            done = f"{call.function.name!r} did not run; the rest of the transaction committed"
            return load_failed(call.library, load, self.node, outcome=done)
        # Another version went live after the check (the race README describes): the
        # call did not run, the rest of the transaction has committed.
        self.known.discard(self.node, call.library.sha)
        return ServerError(
            f"function {call.function.name!r} did not run: library {call.library.name!r} "
            f"on {self.node} is not the version luapipe checked (code sha1 "
            f"{call.library.sha}); another version was loaded since; the rest of the "
            "transaction committed"
        )


def _aborted(exec_reply: ReplyError, queued: Sequence[Any]) -> LuapipeError:
    """EXEC refused the transaction (nothing ran): the class is that of the first command
    refused while queueing (BUSY -> BusyError, as redis-py raises that one), else
    EXECABORT's."""
    errors = [q for q in queued if isinstance(q, ReplyError)]
    cause = translate(ResponseError(errors[0].text if errors else exec_reply.text))
    # Redis 7 names the first refusal in EXECABORT's text already: say it once
    detail = f" ({errors[0].text})" if errors and errors[0].text not in exec_reply.text else ""
    message = f"transaction aborted, nothing was applied: {exec_reply.text}{detail}"
    return type(cause)(message, status_code=getattr(cause, "status_code", None))


def _command_result(reply: Any) -> Any:
    if isinstance(reply, ReplyError):
        return reply.error()
    return reply


def raise_first(results: Sequence[Any]) -> None:
    """Raise the first luapipe error among ``results`` (after the whole batch ran)."""
    for r in results:
        if isinstance(r, LuapipeError):
            raise r


def exec_item(client: Any, entry: Entry, reply: Any) -> Any:
    """redis-py's response callback applied to a command's item of EXEC's array (replies
    inside MULTI are QUEUED, so callbacks wait until EXEC). May be awaitable (asyncio)."""
    if not isinstance(entry, Command) or isinstance(reply, LuapipeError):
        return reply
    callback = client.response_callbacks.get(entry.name)
    if callback is None:
        return reply
    options = {k: v for k, v in entry.options.items() if k != "keys"}
    return callback(reply, **options)
