"""The server-side forms: the generated Lua as a script (through the registry) and as a
Redis Function library (FCALL / FCALL_RO), one round trip each in steady state."""

from __future__ import annotations

import re
import threading
from typing import TYPE_CHECKING, Any

import redis

from luapipe import transport
from luapipe.errors import ScriptRuntimeError
from luapipe.plan import Env, Plan, enc, to_wire, wire
from luapipe.script import LuaScript

if TYPE_CHECKING:
    from luapipe.registry import ScriptRegistry

__all__ = ["function", "script"]

_LOCK = threading.Lock()
_REGISTRIES: dict[str, ScriptRegistry] = {}
_FUNCTIONS: set[tuple[str, str]] = set()


def _registry(plan: Plan) -> ScriptRegistry:
    from luapipe.registry import ScriptRegistry

    with _LOCK:
        reg = _REGISTRIES.get(plan.lua_script)
        if reg is None:
            script = LuaScript.from_source(f"op_{plan.name}", plan.lua_script)
            reg = _REGISTRIES[plan.lua_script] = ScriptRegistry([script], check=False)
        return reg


def _split(plan: Plan, env: Env) -> tuple[list[str], list[str]]:
    keys = [x for k, _ in plan.keys for x in to_wire(env[k])]
    return keys, [x for a, _ in plan.args for x in to_wire(env[a])]


def _encode_cmds(cmds: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return [tuple(enc(x) for x in c) for c in cmds]


def script(plan: Plan, client: redis.Redis, env: Env) -> Any:
    """EVALSHA (EVALSHA_RO when read-only) through a registry of the generated script."""
    keys, args = _split(plan, env)
    return wire(_registry(plan).call(client, f"op_{plan.name}", keys, args))


def function(plan: Plan, client: redis.Redis, env: Env) -> Any:
    """FCALL (FCALL_RO); an unknown function is loaded with REPLACE in the same write."""
    keys, args = _split(plan, env)
    call = ("FCALL_RO" if plan.read_only else "FCALL", plan.function_name, len(keys), *keys, *args)
    with transport.session(client) as s:
        known = (s.address, plan.function_name)
        if known in _FUNCTIONS:
            reply = s.execute(_encode_cmds([call]))[0]
            if not (isinstance(reply, transport.ReplyError) and "Function not found" in reply.text):
                return _function_reply(plan, reply)
        load, reply = s.execute(
            _encode_cmds([("FUNCTION", "LOAD", "REPLACE", plan.lua_library), call])
        )
        transport.raise_for(load)
        with _LOCK:
            _FUNCTIONS.add(known)
        return _function_reply(plan, reply)


_FN_WHERE = re.compile(r"^(?:ERR )?user_function:\d+: |\s*script: \S+, on @user_function:\d+\.$")


def _function_reply(plan: Plan, reply: Any) -> Any:
    if isinstance(reply, transport.ReplyError):
        text = _FN_WHERE.sub("", reply.text)
        if text.startswith(("BUSY", "READONLY", "CROSSSLOT", "NOPERM")):
            transport.raise_for(reply)
        raise ScriptRuntimeError(f"function {plan.function_name} failed: {text}")
    return wire(reply)
