"""The client-side forms: naive, pipelined and transaction (WATCH/MULTI/EXEC).

Reads run level by level (a read that depends on another is in the next level), in the
order Lua runs them, so the first error is the same error in every form; then the compute
step; then every write is attempted and the first failure raised after the rest ran.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from typing import Any

import redis

from luapipe import transport
from luapipe.errors import LuapipeError
from luapipe.plan import Env, Plan, ReadStep, RunResult, TransactionAborted, check, enc

__all__ = ["naive", "pipelined", "read_level", "transaction"]

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
            values.append(r.convert(check(replies[pos]), e))
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
        check(reply)


def _encode(cmds: Sequence[Cmd]) -> list[Cmd]:
    return [tuple(enc(x) for x in c) for c in cmds]


def naive(plan: Plan, s: transport.Session, env: Env) -> Any:
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


def read_level(s: transport.Session, plan: Plan, level: int, env: Env) -> None:
    """One level of reads in one round trip, converted into ``env``."""
    batch, pending = _read_batch(plan, level, env)
    _apply_reads(batch, s.execute(_encode(_commands(batch))), env, pending)


def pipelined(plan: Plan, s: transport.Session, env: Env) -> Any:
    for level in range(plan.levels):
        read_level(s, plan, level, env)
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


def transaction(plan: Plan, client: redis.Redis, env: Env, max_retries: int) -> RunResult:
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
