"""Each form's work on one node, free of I/O: naive, pipelined, transaction, function.

Each form is written once, as :data:`~luapipe.operations.plan.Batches` (a generator that
yields a batch of commands per round trip and is sent the replies);
:mod:`luapipe.operations.run` routes the batches and the drivers send them, sync or asyncio.

Reads run level by level (a read that depends on another is in the next level), in the
order Lua runs them, so the first error is the same error in every form; then the compute
step; then every write is attempted and the first failure raised after the rest ran. The
reply is computed before any write is sent, unless it uses a write's reply: the pipelined
form has those after its write batch, the transaction form after EXEC (:func:`finish`).

The script form is the registry's own call (:func:`script_call` builds it), and so is the
function form (:func:`function_call`): FCALL alone in steady state; on the exact "ERR
Function not found" its library (``luapipe_<op>_<hash>``: two versions of a spec never
share a name) is loaded, never replaced, and the call sent again in one MULTI.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from luapipe.errors import LuapipeError, TransactionAborted
from luapipe.operations.plan import (
    Batches,
    Cmd,
    Env,
    Plan,
    ReadStep,
    check,
    enc,
    encode,
    to_wire,
)
from luapipe.scripts.fcall import FunctionCall
from luapipe.scripts.library import FunctionLibrary, LuaFunction
from luapipe.scripts.protocol import ScriptCall
from luapipe.scripts.registry import ScriptRegistry
from luapipe.scripts.script import LuaScript
from luapipe.wire.replies import ReplyError, raise_for

__all__ = [
    "Batch",
    "aborted",
    "apply_reads",
    "commands",
    "compute",
    "exec_replies",
    "finish",
    "function_call",
    "library_of",
    "naive_steps",
    "pipelined_steps",
    "raise_first",
    "read_batch",
    "read_level_steps",
    "registry_of",
    "script_call",
    "split",
    "transaction_steps",
]

Batch = list[tuple[ReadStep, list[Env], list[Cmd]]]


# -- reads, compute, writes ----------------------------------------------------------------


def read_batch(plan: Plan, level: int, env: Env) -> tuple[Batch, LuapipeError | None]:
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


def apply_reads(batch: Batch, replies: list[Any], env: Env, pending: LuapipeError | None) -> None:
    """Convert replies in order (a conversion error comes before a later read's error)."""
    pos = 0
    for r, envs, _ in batch:
        values = []
        for e in envs:
            values.append(r.convert(check(replies[pos]), e))
            pos += 1
        env[r.name] = values if r.each else values[0]
    if pending is not None:
        raise pending


def commands(batch: Batch) -> list[Cmd]:
    return [c for b in batch for c in b[2]]


def compute(plan: Plan, env: Env) -> tuple[list[Cmd], list[int], Any]:
    """The compute step: ``lets`` into ``env``; then the writes to send, the write each one
    comes from (its index in ``plan.writes``), and the reply, which is None when it uses a
    write's reply (:func:`finish` computes it then)."""
    for name, fn in plan.lets:
        env[name] = fn(env)
    cmds: list[Cmd] = []
    owners: list[int] = []
    for i, w in enumerate(plan.writes):
        for e in [{**env, "it": it} for it in w.each(env)] if w.each else [env]:
            if w.when is None or w.when(e):
                cmds.append((w.cmd, w.key(e), *(a(e) for a in w.args)))
                owners.append(i)
    return cmds, owners, None if plan.late_returns else plan.returns(env)


def finish(plan: Plan, env: Env, owners: Sequence[int], replies: Sequence[Any], ret: Any) -> Any:
    """After the writes (every one attempted): the first error is raised; then the replies of
    named writes go into ``env``, converted, and the reply that uses them is computed. A
    write skipped by its ``when`` leaves nil; one with ``each`` gives a list."""
    raise_first(replies)
    if not plan.late_returns:
        return ret
    for i, w in enumerate(plan.writes):
        if w.name is None:
            continue
        got = [
            w.convert(r) if w.convert else r for r, o in zip(replies, owners, strict=True) if o == i
        ]
        env[w.name] = got if w.each else got[0] if got else None
    return plan.returns(env)


def raise_first(replies: Sequence[Any]) -> None:
    for reply in replies:
        check(reply)


def exec_replies(replies: list[Any]) -> list[Any] | None:
    """The EXEC reply of ``[MULTI, ..., EXEC]``: None when WATCH aborted it."""
    exec_reply = replies[-1]
    if isinstance(exec_reply, ReplyError):
        queued = [r for r in replies[1:-1] if isinstance(r, ReplyError)]
        raise_for(queued[0] if queued else exec_reply)
    return None if exec_reply is None else list(exec_reply)


# -- the client-side forms -------------------------------------------------------------------


def naive_steps(plan: Plan, env: Env) -> Batches[Any]:
    """One command per round trip, each read converted before the next is sent."""
    for level in range(plan.levels):
        batch, pending = read_batch(plan, level, env)
        for step in batch:
            replies = []
            for c in step[2]:
                replies.append((yield encode([c]))[0])
            apply_reads([step], replies, env, None)
        if pending is not None:
            raise pending
    writes, owners, ret = compute(plan, env)
    replies = []
    for c in writes:
        replies.append((yield encode([c]))[0])
    return finish(plan, env, owners, replies, ret)


def read_level_steps(plan: Plan, level: int, env: Env) -> Batches[None]:
    """One level of reads in one round trip, converted into ``env``."""
    batch, pending = read_batch(plan, level, env)
    apply_reads(batch, (yield encode(commands(batch))), env, pending)


def pipelined_steps(plan: Plan, env: Env) -> Batches[Any]:
    """A round trip per read level, then one for the writes (none when nothing is written)."""
    for level in range(plan.levels):
        yield from read_level_steps(plan, level, env)
    writes, owners, ret = compute(plan, env)
    return finish(plan, env, owners, (yield encode(writes)) if writes else [], ret)


def transaction_steps(plan: Plan, env: Env) -> Batches[tuple[bool, Any]]:
    """One WATCH attempt: (committed, reply); (False, None) when a watched key changed."""
    if plan.levels == 1 and not plan.writes:
        batch, pending = read_batch(plan, 0, env)
        replies = exec_replies((yield encode([("MULTI",), *commands(batch), ("EXEC",)])))
        assert replies is not None
        apply_reads(batch, replies, env, pending)
        return True, compute(plan, env)[2]
    for level in range(plan.levels):
        batch, pending = read_batch(plan, level, env)
        cmds = commands(batch)
        watch = ("WATCH", *dict.fromkeys(c[1] for c in cmds))
        replies = yield encode([watch, *cmds] if len(watch) > 1 else cmds)
        apply_reads(batch, replies[1:] if len(watch) > 1 else replies, env, pending)
    writes, owners, ret = compute(plan, env)
    committed = exec_replies((yield encode([("MULTI",), *writes, ("EXEC",)])))
    if committed is None:
        return False, None
    return True, finish(plan, env, owners, committed, ret)


def aborted(plan: Plan, retries: int) -> TransactionAborted:
    return TransactionAborted(
        f"{plan.name}: WATCH failed {retries + 1} times in a row (heavy contention); "
        "nothing was written by the last attempt"
    )


# -- the server-side forms -------------------------------------------------------------------

_LOCK = threading.Lock()
_REGISTRIES: dict[tuple[str, str], ScriptRegistry] = {}
_LIBRARIES: dict[tuple[str, str], FunctionLibrary] = {}


def script_name(plan: Plan) -> str:
    return f"op_{plan.name}"


def registry_of(plan: Plan) -> ScriptRegistry:
    """A registry holding the plan's generated script and library (one per operation name
    and text: two operations may generate the same Lua)."""
    key = (plan.name, plan.lua_script)
    lib = library_of(plan)
    with _LOCK:
        reg = _REGISTRIES.get(key)
        if reg is None:
            script = LuaScript.from_source(script_name(plan), plan.lua_script)
            reg = _REGISTRIES[key] = ScriptRegistry([script], check=False, libraries=[lib])
        return reg


def split(plan: Plan, env: Env) -> tuple[list[Any], list[Any]]:
    """KEYS and ARGV of a call, as the script and the function receive them: str values as
    UTF-8 with surrogates kept, like every other form (binary-safe)."""
    keys = [enc(x) for k, _ in plan.keys for x in to_wire(env[k])]
    return keys, [enc(x) for a, _ in plan.args for x in to_wire(env[a])]


def script_call(plan: Plan, env: Env) -> tuple[ScriptRegistry, ScriptCall]:
    """The script form: EVALSHA (EVALSHA_RO when read-only) of the generated script, run by
    the registry's call steps (NOSCRIPT, routing and redirects handled there)."""
    reg = registry_of(plan)
    keys, args = split(plan, env)
    return reg, ScriptCall(reg[script_name(plan)], tuple(keys), tuple(args))


def library_of(plan: Plan) -> FunctionLibrary:
    """The plan's generated Function library, with its one function (named in the
    library's first line, ``#!lua name=...``, as the server reads it)."""
    key = (plan.function_name, plan.lua_library)
    with _LOCK:
        lib = _LIBRARIES.get(key)
        if lib is None:
            first = plan.lua_library.split("\n", 1)[0]
            name = first.split("name=", 1)[1].split()[0] if "name=" in first else plan.name
            flags = ("no-writes",) if plan.read_only else ()
            fn = LuaFunction(plan.function_name, name, flags=flags)
            lib = _LIBRARIES[key] = FunctionLibrary.of(
                name, plan.lua_library, [fn], origin="generated"
            )
        return lib


def function_call(plan: Plan, env: Env) -> FunctionCall:
    """The function form: FCALL (FCALL_RO when read-only) of the generated library's
    function, run by the registry's function steps (a missing library loaded on the
    slot's primary, never replaced; routing and redirects handled there)."""
    lib = library_of(plan)
    keys, args = split(plan, env)
    return FunctionCall(lib.functions[0], lib, tuple(keys), tuple(args))
