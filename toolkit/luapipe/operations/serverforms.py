"""The server-side forms: the generated Lua as a script (through the registry) and as a
Redis Function library (FCALL / FCALL_RO), one round trip each in steady state.

The function form is written once as :data:`~luapipe.operations.plan.Steps`
(:func:`function_steps`);
the script form's sending is the registry's (``reg.call`` takes sync and async clients).
"""

from __future__ import annotations

import re
import threading
from typing import Any

import redis

from luapipe.errors import ScriptRuntimeError
from luapipe.operations.plan import Env, Plan, Steps, drive, enc, encode, to_wire, wire
from luapipe.scripts.registry import ScriptRegistry
from luapipe.scripts.script import LuaScript
from luapipe.wire import sync as transport

__all__ = ["function", "function_steps", "registry_of", "script", "script_name", "split"]

_LOCK = threading.Lock()
_REGISTRIES: dict[tuple[str, str], ScriptRegistry] = {}
_FUNCTIONS: set[tuple[str, str]] = set()


def registry_of(plan: Plan) -> ScriptRegistry:
    """A registry holding the plan's generated script (one per operation name and text:
    two operations may generate the same Lua)."""
    key = (plan.name, plan.lua_script)
    with _LOCK:
        reg = _REGISTRIES.get(key)
        if reg is None:
            script = LuaScript.from_source(script_name(plan), plan.lua_script)
            reg = _REGISTRIES[key] = ScriptRegistry([script], check=False)
        return reg


def script_name(plan: Plan) -> str:
    return f"op_{plan.name}"


def split(plan: Plan, env: Env) -> tuple[list[Any], list[Any]]:
    """KEYS and ARGV of a call, as the script and the function receive them: str values as
    UTF-8 with surrogates kept, like every other form (binary-safe)."""
    keys = [enc(x) for k, _ in plan.keys for x in to_wire(env[k])]
    return keys, [enc(x) for a, _ in plan.args for x in to_wire(env[a])]


def script(plan: Plan, client: redis.Redis, env: Env) -> Any:
    """EVALSHA (EVALSHA_RO when read-only) through a registry of the generated script."""
    keys, args = split(plan, env)
    return wire(registry_of(plan).call(client, script_name(plan), keys, args))


def function_steps(plan: Plan, env: Env, address: str) -> Steps[Any]:
    """FCALL (FCALL_RO) on the node at ``address``; a function not yet known there is
    loaded with REPLACE in the same write. "Function not found" means it did not run, so
    sending it again with the load is safe; anything else is never re-sent."""
    keys, args = split(plan, env)
    call = ("FCALL_RO" if plan.read_only else "FCALL", plan.function_name, len(keys), *keys, *args)
    known = (address, plan.function_name)
    if known in _FUNCTIONS:
        (reply,) = yield encode([call])
        if not (isinstance(reply, transport.ReplyError) and "Function not found" in reply.text):
            return _function_reply(plan, reply)
    load, reply = yield encode([("FUNCTION", "LOAD", "REPLACE", plan.lua_library), call])
    transport.raise_for(load)
    with _LOCK:
        _FUNCTIONS.add(known)
    return _function_reply(plan, reply)


def function(plan: Plan, client: redis.Redis, env: Env, *, asking: bool = False) -> Any:
    """FCALL (FCALL_RO); an unknown function is loaded with REPLACE in the same write."""
    with transport.session(client) as s:
        return drive(function_steps(plan, env, s.address), s, asking=asking)


_FN_WHERE = re.compile(r"^(?:ERR )?user_function:\d+: |\s*script: \S+, on @user_function:\d+\.$")


def _function_reply(plan: Plan, reply: Any) -> Any:
    if isinstance(reply, transport.ReplyError):
        text = _FN_WHERE.sub("", reply.text)
        if reply.is_redirect or text.startswith(("BUSY", "READONLY", "CROSSSLOT", "NOPERM")):
            transport.raise_for(reply)  # a redirect's error carries it, typed (did not run)
        raise ScriptRuntimeError(f"function {plan.function_name} failed: {text}")
    return wire(reply)
