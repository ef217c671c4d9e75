"""The sandbox that runs a Function library's top level as ``FUNCTION LOAD`` does.

A fresh Lua 5.1 (lupa) per library, offering exactly what Redis 7.0 offers while a library
loads: the ``redis`` table with ``register_function``, ``log``, the ``LOG_*`` levels and
``REDIS_VERSION``/``REDIS_VERSION_NUM`` (those of the server the library is read for, else
7.0.0, the oldest server with Functions: ``BASE_VERSION``), and nothing else. No
``redis.call``, no ``KEYS``/``ARGV``, no ``string``, ``table`` or ``pairs`` either: Redis
7.0 answers "Script attempted to access nonexistent global variable" for each
(REDIS_FACTS.md); a string's methods (``("x"):upper()``) do work, as
there. The globals and ``redis`` are read-only. ``redis.register_function`` records each
call (positional, or the table with ``function_name``, ``callback``, ``flags``,
``description``) with the line it was called from, checking what the server checks: the
arguments, the name (letters, digits, ``_``), the flags, a name registered twice (also
in another case: the server's function names are case-insensitive).

The run is bounded: :data:`LOAD_CPU_SECONDS` of CPU (a server stops a load after 500 ms)
and :data:`LOAD_MEMORY` bytes. Every failure is a :class:`~luapipe.errors.ScriptError`
naming ``file:line``, with what to do instead where the server's text does not say. Lua
says no line for running out of memory, so the top level is then run once more with a
line hook (several times slower, so only then) to name the line that allocated; if that
rerun cannot tell, the error says "while loading" and names no line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from luapipe.errors import ScriptError, ScriptSyntaxError
from luapipe.scripts.library import BASE_VERSION
from luapipe.scripts.luaenv import words

__all__ = [
    "BASE_VERSION",
    "FLAG_ORDER",
    "LOAD_CPU_SECONDS",
    "LOAD_MEMORY",
    "Registration",
    "registrations",
    "version_num",
]

LOAD_CPU_SECONDS = 1.0
LOAD_MEMORY = 64 * 1024 * 1024
#: The server's order of function flags (FUNCTION LIST prints them so).
FLAG_ORDER = ("no-writes", "allow-oom", "allow-stale", "no-cluster", "allow-cross-slot-keys")
_ERROR_RE = re.compile(r"^user_function:(\d+): (.*)$", re.S)
#: what the runtime ``redis`` API has that a library cannot use while it loads
_RUNTIME_ONLY = frozenset(
    words(
        "call pcall setresp sha1hex error_reply status_reply set_repl replicate_commands "
        "breakpoint debug acl_check_cmd REPL_ALL REPL_AOF REPL_NONE REPL_REPLICA REPL_SLAVE"
    )
)
_AT_CALL_TIME = frozenset(
    words(
        "pairs ipairs next type tostring tonumber string table math cjson cmsgpack bit "
        "struct pcall xpcall error assert select unpack setmetatable getmetatable rawget "
        "rawset rawequal loadstring load coroutine _G _VERSION gcinfo collectgarbage "
        "getfenv setfenv newproxy"
    )
)

# -- the sandbox --------------------------------------------------------------------------
_HARNESS = r"""
local code, budget, flags_text, runtime_text, trace, version, version_num = ...
local clock, sethook, getinfo = os.clock, debug.sethook, debug.getinfo
local format, concat, lower = string.format, table.concat, string.lower
local KNOWN = {}
for flag in string.gmatch(flags_text, "%S+") do KNOWN[flag] = true end
local RUNTIME_ONLY = {}
for name in string.gmatch(runtime_text, "%S+") do RUNTIME_ONLY[name] = true end
local found = {}

local function line_of(level)
  local info = getinfo(level + 1, "l")
  return info and info.currentline or 0
end
local function fail(level, message)
  error(format("user_function:%d: %s", line_of(level + 1), message), 0)
end
local function valid_name(name)
  return type(name) == "string" and name ~= "" and not string.find(name, "[^%w_]")
end

local function record(name, callback, flags, description)
  if type(name) == "number" then name = tostring(name) end
  if name == nil then fail(3, "redis.register_function must get a function name argument") end
  if not valid_name(name) then
    fail(3, format("invalid function name %q: letters, digits and '_' only", tostring(name)))
  end
  if type(callback) ~= "function" then
    fail(3, format("function '%s': its callback must be a function, got %s", name, type(callback)))
  end
  local given = {}
  if flags ~= nil then
    if type(flags) ~= "table" then
      fail(3, format("function '%s': flags must be a table such as {'no-writes'}", name))
    end
    for _, flag in ipairs(flags) do
      if not KNOWN[flag] then
        fail(3, format("function '%s': unknown flag %q", name, tostring(flag)))
      end
      given[#given + 1] = flag
    end
  end
  if description ~= nil and type(description) ~= "string" then
    fail(3, format("function '%s': description must be a string", name))
  end
  for _, f in ipairs(found) do
    if f.name == name then
      local twice = "function '%s' is registered twice (lines %d and %d)"
      fail(3, format(twice, name, f.line, line_of(3)))
    end
    if lower(f.name) == lower(name) then
      local case = "function '%s' differs from '%s' (line %d) only in case: function names " ..
        "are case-insensitive on the server (Redis 7.0 loads such a library, then crashes " ..
        "when it is replaced or deleted)"
      fail(3, format(case, name, f.name, f.line))
    end
  end
  found[#found + 1] = {
    name = name, flags = given, description = description or "", line = line_of(3),
  }
end

local function register_function(...)
  local n = select("#", ...)
  local first = ...
  if n == 1 and type(first) == "table" then
    local t = first
    for k in pairs(t) do
      if k ~= "function_name" and k ~= "callback" and k ~= "flags" and k ~= "description" then
        fail(2, format("unknown argument %q to redis.register_function", tostring(k)))
      end
    end
    record(t.function_name, t.callback, t.flags, t.description)
  elseif n == 2 then
    local name, callback = ...
    record(name, callback, nil, nil)
  else
    fail(2, "wrong number of arguments to redis.register_function")
  end
end

local function log(...)
  if select("#", ...) < 2 then fail(2, "redis.log() requires two arguments or more.") end
  if type((...)) ~= "number" then fail(2, "First argument must be a number (log level).") end
end

local api = {
  register_function = register_function, log = log,
  LOG_DEBUG = 0, LOG_VERBOSE = 1, LOG_NOTICE = 2, LOG_WARNING = 3,
  REDIS_VERSION = version, REDIS_VERSION_NUM = version_num,
}
local redis_table = setmetatable({}, {
  __index = function(_, k)
    local v = api[k]
    if v ~= nil then return v end
    if RUNTIME_ONLY[k] then
      fail(2, format("redis.%s cannot be used while the library loads (only " ..
        "redis.register_function, redis.log and the version constants exist then): " ..
        "use it inside a function", tostring(k)))
    end
    fail(2, format("Script attempted to access nonexistent global variable '%s'", tostring(k)))
  end,
  __newindex = function() fail(2, "Attempt to modify a readonly table") end,
  __metatable = false,
})
local env = setmetatable({}, {
  __index = function(_, k)
    if k == "redis" then return redis_table end
    fail(2, format("Script attempted to access nonexistent global variable '%s'", tostring(k)))
  end,
  __newindex = function() fail(2, "Attempt to modify a readonly table") end,
  __metatable = false,
})

local chunk, err = loadstring(code, "=user_function")
if not chunk then return "syntax", err end
setfenv(chunk, env)
-- The line running, for an error that has none (out of memory): with trace, each line
-- of the library's code (a rerun after such an error: slower), else none. The library's
-- line 1 (its #!lua line) is empty and this harness is one line 1: a line 1 is ours.
local start, last_line = clock(), 0
sethook(function(event, line)
  if event == "line" then
    if line ~= 1 then last_line = line end
    return
  end
  if clock() - start > budget then
    local slow = "user_function:%d: the library's top level ran for more than %g s"
    error(format(slow, line_of(2), budget), 0)
  end
end, trace and "l" or "", 10000)
local ok, failure = pcall(chunk)
sethook()
if not ok then
  -- out of memory: allocate nothing more; say the line (when traced)
  if failure == "not enough memory" then return "memory", last_line end
  return "error", tostring(failure)
end
local out = {}
for i, f in ipairs(found) do
  out[i] = {f.name, concat(f.flags, " "), f.description, f.line}
end
return "ok", out
"""


#: the harness as one line (comments dropped): every line event of a line other than 1 is
#: the library's own code (whose line 1, the ``#!lua`` line, is empty)
_ONE_LINE = " ".join(
    line.strip() for line in _HARNESS.splitlines() if not line.strip().startswith("--")
)
#: CPU for the rerun that finds the line of an out-of-memory error (a line hook is slower)
_TRACE_CPU_SECONDS = 5 * LOAD_CPU_SECONDS
_FLAGS_TEXT = " ".join(FLAG_ORDER).encode()
_RUNTIME_TEXT = " ".join(sorted(_RUNTIME_ONLY)).encode()


@dataclass(frozen=True)
class Registration:
    """One ``redis.register_function`` call as the sandbox recorded it."""

    name: str
    flags: tuple[str, ...]
    description: str
    line: int


def _explain(message: str) -> str:
    """The server's text, with what to do instead for a global missing at load time."""
    m = re.match(r"Script attempted to access nonexistent global variable '(.*)'$", message)
    if m is None:
        return message
    name = m[1]
    if name in ("KEYS", "ARGV"):
        return (
            f"{name} does not exist in a library: a function gets its keys and args as its "
            "callback's parameters, function(keys, args)"
        )
    if name in _AT_CALL_TIME:
        return (
            f"{name!r} does not exist while a library loads (only 'redis' does): use it "
            "inside a function"
        )
    return message


def version_num(version: str) -> int:
    """``REDIS_VERSION_NUM`` for a version string, as the server computes it:
    ``(major << 16) | (minor << 8) | patch`` (7.2.4 is 0x070204); missing parts are 0."""
    parts = [int(p) for p in re.findall(r"\d+", version)[:3]] + [0, 0, 0]
    return (min(parts[0], 255) << 16) | (min(parts[1], 255) << 8) | min(parts[2], 255)


def _run(body: bytes, version: str, *, trace: bool = False) -> tuple[str, Any]:
    """The harness's status and result for ``body`` in a fresh runtime; ``("memory",
    line)`` when the top level runs out of memory (line 0: unknown, without ``trace``)."""
    from lupa import lua51

    runtime = lua51.LuaRuntime(register_eval=False, encoding=None, max_memory=LOAD_MEMORY)
    budget = _TRACE_CPU_SECONDS if trace else LOAD_CPU_SECONDS
    try:
        status, result = runtime.execute(
            _ONE_LINE,
            body,
            budget,
            _FLAGS_TEXT,
            _RUNTIME_TEXT,
            trace,
            version.encode(),
            version_num(version),
        )
    except lua51.LuaMemoryError:  # outside the protected call: no line known
        return "memory", 0
    return status.decode(), result


def _out_of_memory(body: bytes, version: str, where: str) -> ScriptError:
    """The error for a top level that needs more than :data:`LOAD_MEMORY`, naming the line
    that allocated: found by running it again with a line hook (nothing costs more while
    a library loads within bounds); without the line if that rerun does not tell."""
    status, line = _run(body, version, trace=True)
    needs = f"the library's top level needs more than {LOAD_MEMORY >> 20} MB"
    if status == "memory" and isinstance(line, int) and line > 1:
        return ScriptError(f"{where}:{line}: at load time: {needs}")
    return ScriptError(f"{where}: while loading: {needs}")


def registrations(code: str, where: str, version: str = BASE_VERSION) -> list[Registration]:
    """Run the library's top level in the sandbox; the functions it registers, in order.

    ``code`` is the library as sent (its ``#!lua`` line is kept as an empty line 1, as the
    server numbers lines); ``version``: the ``redis.REDIS_VERSION`` it sees (a server's
    ``redis_version`` from INFO: what that server's own ``REDIS_VERSION`` says while a
    library loads; Valkey 8 says 7.2.4 in both)."""
    body = "\n" + code.split("\n", 1)[1] if "\n" in code else ""
    # code read from a server may not be UTF-8: its bytes as they are
    encoded = body.encode("utf-8", "surrogateescape")
    status, result = _run(encoded, version)
    if status == "memory":
        raise _out_of_memory(encoded, version, where)
    if status != "ok":
        text = bytes(result).decode("utf-8", "backslashreplace")
        m = _ERROR_RE.match(text)
        line, message = (int(m[1]), m[2]) if m else (None, text)
        message = " ".join(_explain(message).split())
        if status == "syntax":
            raise ScriptSyntaxError(
                f"{where}:{line}: Lua syntax error: {message}", path=where, line=line
            )
        at = f"{where}:{line}" if line else where
        raise ScriptError(f"{at}: at load time: {message}")
    found = []
    for i in range(1, len(result) + 1):
        name, flags, description, line = (result[i][j] for j in range(1, 5))
        given = set(flags.decode().split())
        found.append(
            Registration(
                name.decode("utf-8", "backslashreplace"),
                tuple(f for f in FLAG_ORDER if f in given),
                description.decode("utf-8", "backslashreplace"),
                int(line),
            )
        )
    return found
