"""Run an operation in any form: naive, pipelined, transaction, script, function.

The Python forms interpret the :class:`Plan` held by the generated module (its expressions
are Python compiled from the checked AST); the script and function forms run the generated
Lua. All sending goes through :mod:`luapipe.transport` (never re-sent after a write).

Semantics shared by every form: reads, then the compute step, then every write is
attempted in order; if any write failed the call raises the first error after the rest
ran (as Lua's ``redis.pcall``, a pipeline and EXEC all do). Nothing is written when a read
or the compute step fails.
"""

from __future__ import annotations

import random
import re
import threading
import time
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import redis
import redis.exceptions as rex

from luapipe import runtime as _rt
from luapipe import transport
from luapipe.errors import CallArgumentError, LuapipeError, ScriptRuntimeError
from luapipe.script import LuaScript

if TYPE_CHECKING:
    from luapipe.operation import Operation
    from luapipe.registry import ScriptRegistry

__all__ = [
    "Plan",
    "ReadStep",
    "RunResult",
    "TransactionAborted",
    "WriteStep",
    "run_form",
    "run_plan",
    "plan_of",
]

Env = dict[str, Any]
Fn = Callable[[Env], Any]


class TransactionAborted(LuapipeError):
    """WATCH kept failing: the transaction form gave up after its bounded retries."""


@dataclass(frozen=True)
class ReadStep:
    name: str
    level: int
    cmd: str
    key: Fn
    args: tuple[Fn, ...]
    each: Fn | None
    convert: Callable[[Any, Env], Any]


@dataclass(frozen=True)
class WriteStep:
    cmd: str
    key: Fn
    args: tuple[Fn, ...]
    when: Fn | None
    each: Fn | None


@dataclass(frozen=True)
class Plan:
    name: str
    keys: tuple[tuple[str, bool], ...]
    args: tuple[tuple[str, str], ...]
    reads: tuple[ReadStep, ...]
    lets: tuple[tuple[str, Fn], ...]
    writes: tuple[WriteStep, ...]
    returns: Fn
    lua_script: str
    lua_library: str
    function_name: str
    read_only: bool
    invariant: Fn | None = None

    @property
    def levels(self) -> int:
        return max((r.level + 1 for r in self.reads), default=0)


@dataclass(frozen=True)
class RunResult:
    """One call: the reply, round trips and commands sent, WATCH retries."""

    value: Any
    form: str
    round_trips: int
    retries: int = 0


# -- reply normalisation (RESP2/RESP3, decoded or not) ------------------------------------


def flat(reply: Any) -> list[Any]:
    if reply is None:
        return []
    if isinstance(reply, dict):
        return [x for kv in reply.items() for x in kv]
    return list(reply)


def score(reply: Any) -> float | None:
    if reply is None:
        return None
    return float(reply) if isinstance(reply, float) else float(_rt.text(reply))


def opt_text(reply: Any) -> str | None:
    return None if reply is None else _rt.text(reply)


def wire(reply: Any) -> Any:
    """A script/function reply as the Python forms return it."""
    if isinstance(reply, list):
        return [wire(x) for x in reply]
    if reply is False:
        return None
    if reply is True:
        return 1
    if isinstance(reply, bytes | str):
        return _rt.text(reply)
    return reply


def _check(reply: Any) -> Any:
    if isinstance(reply, rex.ResponseError):
        reply = transport.ReplyError(transport.full_error_text(reply))
    return transport.raise_for(reply)


def _enc(v: Any) -> Any:
    return v.encode("utf-8", "surrogateescape") if isinstance(v, str) else v


# -- arguments ---------------------------------------------------------------------------


def _arg_value(name: str, kind: str, v: Any) -> Any:
    ok = {
        "int": isinstance(v, int) and not isinstance(v, bool) and abs(v) < _rt.LIMIT,
        "float": isinstance(v, int | float)
        and not isinstance(v, bool)
        and v == v
        and abs(v) != float("inf"),
        "str": isinstance(v, str),
        "bool": isinstance(v, bool),
    }
    if kind.startswith("list["):
        if not isinstance(v, list | tuple) or not v:
            raise CallArgumentError(f"argument {name!r} must be a non-empty {kind}")
        return [_arg_value(name, kind[5:-1], x) for x in v]
    if not ok[kind]:
        raise CallArgumentError(f"argument {name!r} must be a {kind}, got {v!r}")
    return float(v) if kind == "float" else v


def _to_wire(v: Any) -> list[str]:
    if isinstance(v, list):
        return [x for item in v for x in _to_wire(item)]
    if isinstance(v, bool):
        return ["1" if v else "0"]
    if isinstance(v, float):
        return [_rt.fmt(v)]
    return [str(v)]


def bind(plan: Plan, keys: Mapping[str, Any], args: Mapping[str, Any]) -> Env:
    """The environment of a call; checks names and types (nothing sent on error)."""
    want_k, want_a = {k for k, _ in plan.keys}, {a for a, _ in plan.args}
    if set(keys) != want_k:
        raise CallArgumentError(f"{plan.name}: keys must be {sorted(want_k)}, got {sorted(keys)}")
    if set(args) != want_a:
        raise CallArgumentError(f"{plan.name}: args must be {sorted(want_a)}, got {sorted(args)}")
    env: Env = {}
    for k, variadic in plan.keys:
        v = keys[k]
        if (
            variadic != isinstance(v, list | tuple)
            or (variadic and not v)
            or not all(isinstance(x, str) for x in (v if variadic else [v]))
        ):
            raise CallArgumentError(
                f"key {k!r} must be {'a non-empty list of str' if variadic else 'a str'}"
            )
        env[k] = list(v) if variadic else v
    for a, kind in plan.args:
        env[a] = _arg_value(a, kind, args[a])
    return env


# -- the Python forms --------------------------------------------------------------------

Cmd = tuple[Any, ...]


Batch = list[tuple[ReadStep, list[Env], list[Cmd]]]


def _read_batch(plan: Plan, level: int, env: Env) -> tuple[Batch, LuapipeError | None]:
    """The reads of one level, in order. If building a command fails (its key or args), the
    batch stops there and the error is returned, to be raised after the earlier reads: the
    order Lua fails in."""
    out: Batch = []
    for r in plan.reads:
        if r.level != level:
            continue
        try:
            envs = [{**env, "it": it} for it in r.each(env)] if r.each else [env]
            cmds = [(r.cmd, r.key(e), *(a(e) for a in r.args)) for e in envs]
        except LuapipeError as exc:
            return out, exc
        out.append((r, envs, cmds))
    return out, None


def _apply_reads(batch: Batch, replies: list[Any], env: Env, pending: LuapipeError | None) -> None:
    """Convert replies in order (a conversion error comes before a later read's error)."""
    pos = 0
    for r, envs, _ in batch:
        values = []
        for e in envs:
            values.append(r.convert(_check(replies[pos]), e))
            pos += 1
        env[r.name] = values if r.each else values[0]
    if pending is not None:
        raise pending


def _commands(batch: Batch) -> list[Cmd]:
    return [c for b in batch for c in b[2]]


def _compute(plan: Plan, env: Env) -> tuple[list[Cmd], Any]:
    for name, fn in plan.lets:
        env[name] = fn(env)
    cmds: list[Cmd] = []
    for w in plan.writes:
        for e in [{**env, "it": it} for it in w.each(env)] if w.each else [env]:
            if w.when is None or w.when(e):
                cmds.append((w.cmd, w.key(e), *(a(e) for a in w.args)))
    return cmds, plan.returns(env)


def _raise_first(replies: Sequence[Any]) -> None:
    for reply in replies:
        _check(reply)


def _encode(cmds: Sequence[Cmd]) -> list[Cmd]:
    return [tuple(_enc(x) for x in c) for c in cmds]


def _naive(plan: Plan, s: transport.Session, env: Env) -> Any:
    for level in range(plan.levels):
        batch, pending = _read_batch(plan, level, env)
        for step in batch:  # one read at a time, converted before the next is sent
            replies = [s.execute(_encode([c]))[0] for c in step[2]]
            _apply_reads([step], replies, env, None)
        if pending is not None:
            raise pending
    writes, ret = _compute(plan, env)
    replies = [s.execute(_encode([c]))[0] for c in writes]
    _raise_first(replies)
    return ret


def _pipelined(plan: Plan, s: transport.Session, env: Env) -> Any:
    for level in range(plan.levels):
        batch, pending = _read_batch(plan, level, env)
        _apply_reads(batch, s.execute(_encode(_commands(batch))), env, pending)
    writes, ret = _compute(plan, env)
    _raise_first(s.execute(_encode(writes)))
    return ret


def _exec_replies(replies: list[Any]) -> list[Any] | None:
    """The EXEC reply of ``[MULTI, ..., EXEC]``: None when WATCH aborted it."""
    exec_reply = replies[-1]
    if isinstance(exec_reply, transport.ReplyError):
        queued = [r for r in replies[1:-1] if isinstance(r, transport.ReplyError)]
        transport.raise_for(queued[0] if queued else exec_reply)
    return None if exec_reply is None else list(exec_reply)


def _transaction_once(plan: Plan, s: transport.Session, env: Env) -> tuple[bool, Any]:
    if plan.levels == 1 and not plan.writes:
        batch, pending = _read_batch(plan, 0, env)
        cmds = _commands(batch)
        replies = _exec_replies(s.execute(_encode([("MULTI",), *cmds, ("EXEC",)])))
        assert replies is not None
        _apply_reads(batch, replies, env, pending)
        return True, _compute(plan, env)[1]
    for level in range(plan.levels):
        batch, pending = _read_batch(plan, level, env)
        cmds = _commands(batch)
        watch = ("WATCH", *dict.fromkeys(c[1] for c in cmds))
        replies = s.execute(_encode([watch, *cmds]) if len(watch) > 1 else _encode(cmds))
        _apply_reads(batch, replies[1:] if len(watch) > 1 else replies, env, pending)
    writes, ret = _compute(plan, env)
    replies_exec = _exec_replies(s.execute(_encode([("MULTI",), *writes, ("EXEC",)])))
    if replies_exec is None:
        return False, None
    _raise_first(replies_exec)
    return True, ret


def _transaction(plan: Plan, client: redis.Redis, env: Env, max_retries: int) -> RunResult:
    trips = 0
    for attempt in range(max_retries + 1):
        with transport.session(client) as s:
            ok, ret = _transaction_once(plan, s, dict(env))
            trips += s.round_trips
        if ok:
            return RunResult(ret, "transaction", trips, attempt)
        time.sleep(random.uniform(0, min(0.05, 0.0005 * 2**attempt)))
    raise TransactionAborted(
        f"{plan.name}: WATCH failed {max_retries + 1} times in a row (heavy contention); "
        "nothing was written by the last attempt"
    )


# -- the server-side forms ---------------------------------------------------------------

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
    keys = [x for k, _ in plan.keys for x in _to_wire(env[k])]
    return keys, [x for a, _ in plan.args for x in _to_wire(env[a])]


def _function(plan: Plan, client: redis.Redis, env: Env) -> Any:
    keys, args = _split(plan, env)
    call = ("FCALL_RO" if plan.read_only else "FCALL", plan.function_name, len(keys), *keys, *args)
    with transport.session(client) as s:
        known = (s.address, plan.function_name)
        if known in _FUNCTIONS:
            reply = s.execute(_encode([call]))[0]
            if not (isinstance(reply, transport.ReplyError) and "Function not found" in reply.text):
                return _function_reply(plan, reply)
        load, reply = s.execute(_encode([("FUNCTION", "LOAD", "REPLACE", plan.lua_library), call]))
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


def run_plan(
    plan: Plan,
    client: redis.Redis,
    form: str,
    keys: Mapping[str, Any],
    args: Mapping[str, Any],
    *,
    max_retries: int = 20,
) -> RunResult:
    env = bind(plan, keys, args)
    if form == "script":
        k, a = _split(plan, env)
        return RunResult(wire(_registry(plan).call(client, f"op_{plan.name}", k, a)), form, 1)
    if form == "function":
        return RunResult(_function(plan, client, env), form, 1)
    if form == "transaction":
        return _transaction(plan, client, env, max_retries)
    runner = {"naive": _naive, "pipelined": _pipelined}.get(form)
    if runner is None:
        raise CallArgumentError(
            f"unknown form {form!r} (naive, pipelined, transaction, script, function)"
        )
    with transport.session(client) as s:
        value = runner(plan, s, env)
        return RunResult(value, form, s.round_trips)


_PLANS: dict[str, Plan] = {}


def plan_of(op: Operation) -> Plan:
    """The Plan of the generated module, compiled once (text generated from the checked AST)."""
    src = op.python_source
    with _LOCK:
        plan = _PLANS.get(src)
    if plan is None:
        module = types.ModuleType(f"luapipe_generated_op_{op.name}")
        exec(compile(src, f"<op_{op.name}.py>", "exec"), module.__dict__)
        plan = module.PLAN
        with _LOCK:
            _PLANS[src] = plan
    assert isinstance(plan, Plan)
    return plan


def run_form(
    op: Operation,
    client: redis.Redis,
    form: str,
    keys: Mapping[str, Any],
    args: Mapping[str, Any],
    *,
    max_retries: int = 20,
) -> RunResult:
    return run_plan(plan_of(op), client, form, keys, args, max_retries=max_retries)


def evaluate_invariant(
    op: Operation, client: redis.Redis, keys: Mapping[str, Any], args: Mapping[str, Any]
) -> Any:
    plan = plan_of(op)
    if plan.invariant is None:
        return None
    env = bind(plan, keys, args)
    with transport.session(client) as s:
        for level in range(plan.levels):
            batch, pending = _read_batch(plan, level, env)
            _apply_reads(batch, s.execute(_encode(_commands(batch))), env, pending)
    for name, fn in plan.lets:
        env[name] = fn(env)
    return plan.invariant(env)
