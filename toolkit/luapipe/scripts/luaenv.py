"""The Lua environment a script sees on the server, per target, as a luacheck standard.

The base is what ``EVAL`` exposes on Redis 7 (read from a Redis 7.0 server by listing
``_G`` and every library table): Lua 5.1's allowed base functions, ``string``, ``table``,
``math``, ``coroutine``, the ``redis`` API, ``cjson``, ``cmsgpack``, ``bit``, ``struct``,
and the ``KEYS``/``ARGV`` tables. Nothing else: ``print``, ``os``, ``io``, ``require``,
``dofile`` and ``loadfile`` are absent, and the globals and libraries are read-only (a
script that assigns a global fails with "Attempt to modify a readonly table").

A :class:`Target` removes or adds names: the CVE-2025-46818 fix blocks ``getfenv``/
``setfenv``/``newproxy`` (Redis 7.2.11, 7.4.6, 8.0.4, 8.2.2 and distribution backports such
as Debian 12's 7.0.15; Valkey 7.2.11, 8.0.6, 8.1.4 unless ``lua-enable-insecure-api``), Redis
8 and Valkey 8 add ``os.clock``, Valkey adds ``server.*`` and ``redis.VALKEY_VERSION``,
Dragonfly runs Lua 5.4. :data:`WHY` explains each such name, naming the release it comes
from, so a finding says what to write instead.

Targets with a server in the test matrix are checked against it (tests/scripts/
test_lint_engines.py): ``redis-7.0`` against Debian's 7.0.15 and Redis 7.2.6, ``valkey-8.0``
and ``valkey-8`` against Valkey 8.0.1 (a name a later release blocks must say which).
``redis-7.4``, ``redis-8.2`` and ``dragonfly`` are written from their documentation.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["BASE", "TARGETS", "WHY", "Env", "Target", "library_env", "luacheck_config", "why"]

Env = dict[str, tuple[str, ...]]  # global -> its fields (none for a plain global)


def words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


_BASE_FUNCTIONS = [
    "_G",
    "_VERSION",
    "assert",
    "collectgarbage",
    "error",
    "gcinfo",
    "getfenv",
    "getmetatable",
    "ipairs",
    "load",
    "loadstring",
    "newproxy",
    "next",
    "pairs",
    "pcall",
    "rawequal",
    "rawget",
    "rawset",
    "select",
    "setfenv",
    "setmetatable",
    "tonumber",
    "tostring",
    "type",
    "unpack",
    "xpcall",
]

BASE: Env = {
    **{name: () for name in _BASE_FUNCTIONS},
    "redis": words(
        "LOG_DEBUG LOG_NOTICE LOG_VERBOSE LOG_WARNING REDIS_VERSION REDIS_VERSION_NUM "
        "REPL_ALL REPL_AOF REPL_NONE REPL_REPLICA REPL_SLAVE acl_check_cmd breakpoint call "
        "debug error_reply log pcall replicate_commands set_repl setresp sha1hex "
        "status_reply"
    ),
    "bit": words("arshift band bnot bor bswap bxor lshift rol ror rshift tobit tohex"),
    "cjson": words(
        "_NAME _VERSION decode decode_invalid_numbers decode_max_depth encode "
        "encode_invalid_numbers encode_keep_buffer encode_max_depth encode_number_precision "
        "encode_sparse_array new null"
    ),
    "cmsgpack": words("_COPYRIGHT _DESCRIPTION _NAME _VERSION pack unpack unpack_limit unpack_one"),
    "struct": ("pack", "size", "unpack"),
    "coroutine": ("create", "resume", "running", "status", "wrap", "yield"),
    "math": words(
        "abs acos asin atan atan2 ceil cos cosh deg exp floor fmod frexp huge ldexp log "
        "log10 max min mod modf pi pow rad random randomseed sin sinh sqrt tan tanh"
    ),
    "string": words(
        "byte char dump find format gfind gmatch gsub len lower match rep reverse sub upper"
    ),
    "table": words("concat foreach foreachi getn insert maxn remove setn sort"),
}

_INSECURE = (
    "blocked by the CVE-2025-46818 fix: Redis 7.2.11, 7.4.6, 8.0.4, 8.2.2 and backports "
    "(Debian 12's 7.0.15); Valkey 7.2.11, 8.0.6, 8.1.4 unless lua-enable-insecure-api is yes"
)
_VALKEY = "Valkey only (Valkey 8)"
_LUA54 = "Lua 5.4 (Dragonfly) does not have it"
#: Why a name is missing on some server, and what to use instead. Dragonfly runs Lua 5.4
#: but keeps ``unpack``, ``table.getn``, ``table.setn``, ``table.foreach`` and
#: ``table.foreachi`` for Redis scripts, so those are not reported.
WHY: dict[str, str] = {
    "getfenv": _INSECURE,
    "setfenv": _INSECURE,
    "newproxy": _INSECURE,
    "server": "server.* exists only on Valkey: use redis.*",
    "redis.VALKEY_VERSION": _VALKEY,
    "redis.VALKEY_VERSION_NUM": _VALKEY,
    "redis.SERVER_NAME": _VALKEY,
    "os": "os.clock exists from Redis 8.0 and on Valkey 8 only",
    "loadstring": f"{_LUA54}: use load",
    "gcinfo": f"{_LUA54}: use collectgarbage('count')",
    "string.gfind": f"{_LUA54}: use string.gmatch",
    "table.maxn": _LUA54,
    "math.mod": f"{_LUA54}: use math.fmod or %",
    "math.pow": f"{_LUA54}: use x ^ y",
    "math.log10": f"{_LUA54}: use math.log(x, 10)",
    "math.atan2": f"{_LUA54}: use math.atan(y, x)",
    "math.ldexp": _LUA54,
    "math.frexp": _LUA54,
    "math.cosh": _LUA54,
    "math.sinh": _LUA54,
    "math.tanh": _LUA54,
    "table.unpack": "Redis and Valkey run Lua 5.1: use unpack",
    "table.pack": "Redis and Valkey run Lua 5.1: use {...}",
    "table.move": "Redis and Valkey run Lua 5.1",
}


def why(name: str) -> str:
    """The explanation for a missing global (``getfenv``) or field (``table.getn``)."""
    return WHY.get(name) or WHY.get(name.split(".", 1)[0], "")


@dataclass(frozen=True)
class Target:
    """A server family and version whose Lua environment differs from the base."""

    name: str
    description: str
    remove: tuple[str, ...] = ()  # globals ("getfenv") or fields ("table.getn")
    add: tuple[str, ...] = ()
    #: keys not passed through KEYS: "error" (refused) or "warning" (cluster-unsafe)
    undeclared_keys: str = "warning"

    @property
    def env(self) -> Env:
        return _apply(BASE, self.remove, self.add)


_LUA54_REMOVED = (
    *(name for name, text in WHY.items() if text.startswith(_LUA54) and "." in name),
    *words("loadstring gcinfo getfenv setfenv newproxy"),
)
#: what the CVE-2025-46818 fix blocks (every maintained release line, October 2025)
_FIXED = ("getfenv", "setfenv", "newproxy")
#: what Valkey 8 adds: os.clock, its own version fields, and server.* beside redis.*
_VALKEY_8 = (
    "os.clock",
    *(f"redis.{f}" for f in ("SERVER_NAME", "VALKEY_VERSION", "VALKEY_VERSION_NUM")),
    *(
        f"server.{f}"
        for f in (*BASE["redis"], "SERVER_NAME", "VALKEY_VERSION", "VALKEY_VERSION_NUM")
    ),
)

TARGETS: dict[str, Target] = {
    t.name: t
    for t in (
        Target("redis-7.0", "Redis 7.0 to 7.2", remove=_FIXED),
        Target(
            "redis-7.4",
            "Redis 7.4 to 8.0 (EVAL-cached scripts are evicted beyond 500)",
            remove=_FIXED,
        ),
        Target("redis-8.2", "Redis 8.2.2 and later", remove=_FIXED, add=("os.clock",)),
        Target(
            "valkey-8",
            "Valkey 8.0.6, 8.1.4 and later 8.x (getfenv... blocked)",
            remove=_FIXED,
            add=_VALKEY_8,
        ),
        Target(
            "valkey-8.0", "Valkey 8.0.0 to 8.0.5 (before the CVE-2025-46818 fix)", add=_VALKEY_8
        ),
        Target(
            "dragonfly",
            "Dragonfly (Lua 5.4; undeclared keys refused)",
            remove=_LUA54_REMOVED,
            add=("table.unpack", "table.pack", "table.move", "math.tointeger", "math.type"),
            undeclared_keys="error",
        ),
    )
}


def _apply(base: Env, remove: tuple[str, ...], add: tuple[str, ...]) -> Env:
    env = {name: tuple(fields) for name, fields in base.items()}
    for item in remove:
        glob, _, fld = item.partition(".")
        if fld:
            env[glob] = tuple(f for f in env.get(glob, ()) if f != fld)
        else:
            env.pop(glob, None)
    for item in add:
        glob, _, fld = item.partition(".")
        env[glob] = tuple(sorted({*env.get(glob, ()), *([fld] if fld else [])}))
    return env


def library_env(env: Env) -> Env:
    """``env`` as a Function library sees it: ``redis.register_function`` too (and
    ``server.register_function`` where ``server`` exists, on Valkey)."""
    add = ["redis.register_function"] + (["server.register_function"] if "server" in env else [])
    return _apply(env, (), tuple(add))


def _lua_list(items: tuple[str, ...]) -> str:
    return "{" + ", ".join(f'"{i}"' for i in items) + "}"


def luacheck_config(env: Env, std: str = "redis", *, keys_argv: bool = True) -> str:
    """A luacheck config defining ``env`` as the standard ``std`` (and selecting it).

    ``KEYS``/``ARGV`` are tables a script may index and even extend; every other global
    and library is read-only, as on the server. A Function library has no ``KEYS``/``ARGV``
    globals (``keys_argv=False``): its functions get them as their callback's parameters.
    """
    lines = [f"stds.{std} = {{", "  read_globals = {"]
    if keys_argv:
        lines.append("    KEYS = {other_fields = true},")
        lines.append("    ARGV = {other_fields = true},")
    for name in sorted(env):
        fields = env[name]
        lines.append(
            f"    {name} = {{fields = {_lua_list(fields)}}}," if fields else f'    "{name}",'
        )
    lines += ["  },", "}", f'std = "{std}"', ""]
    return "\n".join(lines)
