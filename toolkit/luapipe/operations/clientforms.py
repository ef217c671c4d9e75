"""The client-side forms: naive, pipelined and transaction (WATCH/MULTI/EXEC).

Reads run level by level (a read that depends on another is in the next level), in the
order Lua runs them, so the first error is the same error in every form; then the compute
step; then every write is attempted and the first failure raised after the rest ran.

Each form is written once, as I/O-free :data:`~luapipe.operations.plan.Steps` (``naive_steps``,
``pipelined_steps``, ``transaction_steps``); :func:`~luapipe.operations.plan.drive` sends them on a
sync session and :mod:`luapipe.operations.aio_forms` on an async one. The WATCH retry policy
(:meth:`~luapipe.wire.policy.RetryPolicy.watch_delay`, :func:`aborted`) is shared the same way.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import redis

from luapipe.errors import LuapipeError
from luapipe.operations.plan import (
    Cmd,
    Env,
    Plan,
    ReadStep,
    RunResult,
    Steps,
    TransactionAborted,
    check,
    drive,
    encode,
)
from luapipe.wire import sync as transport
from luapipe.wire.policy import DEFAULT

__all__ = [
    "STEPS",
    "Batch",
    "aborted",
    "apply_reads",
    "commands",
    "compute",
    "exec_replies",
    "naive",
    "naive_steps",
    "pipelined",
    "pipelined_steps",
    "raise_first",
    "read_batch",
    "read_level",
    "read_level_steps",
    "transaction",
    "transaction_steps",
]

Batch = list[tuple[ReadStep, list[Env], list[Cmd]]]


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


def compute(plan: Plan, env: Env) -> tuple[list[Cmd], Any]:
    """The compute step: ``lets`` into ``env``, then the writes to send and the reply."""
    for name, fn in plan.lets:
        env[name] = fn(env)
    cmds: list[Cmd] = []
    for w in plan.writes:
        for e in [{**env, "it": it} for it in w.each(env)] if w.each else [env]:
            if w.when is None or w.when(e):
                cmds.append((w.cmd, w.key(e), *(a(e) for a in w.args)))
    return cmds, plan.returns(env)


def raise_first(replies: Sequence[Any]) -> None:
    for reply in replies:
        check(reply)


def exec_replies(replies: list[Any]) -> list[Any] | None:
    """The EXEC reply of ``[MULTI, ..., EXEC]``: None when WATCH aborted it."""
    exec_reply = replies[-1]
    if isinstance(exec_reply, transport.ReplyError):
        queued = [r for r in replies[1:-1] if isinstance(r, transport.ReplyError)]
        transport.raise_for(queued[0] if queued else exec_reply)
    return None if exec_reply is None else list(exec_reply)


# -- the forms as steps ------------------------------------------------------------------


def naive_steps(plan: Plan, env: Env) -> Steps[Any]:
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
    writes, ret = compute(plan, env)
    replies = []
    for c in writes:
        replies.append((yield encode([c]))[0])
    raise_first(replies)
    return ret


def read_level_steps(plan: Plan, level: int, env: Env) -> Steps[None]:
    """One level of reads in one round trip, converted into ``env``."""
    batch, pending = read_batch(plan, level, env)
    apply_reads(batch, (yield encode(commands(batch))), env, pending)


def pipelined_steps(plan: Plan, env: Env) -> Steps[Any]:
    """A round trip per read level, then one for the writes (none when nothing is written)."""
    for level in range(plan.levels):
        yield from read_level_steps(plan, level, env)
    writes, ret = compute(plan, env)
    if writes:
        raise_first((yield encode(writes)))
    return ret


def transaction_steps(plan: Plan, env: Env) -> Steps[tuple[bool, Any]]:
    """One WATCH attempt: (committed, reply); (False, None) when a watched key changed."""
    if plan.levels == 1 and not plan.writes:
        batch, pending = read_batch(plan, 0, env)
        replies = exec_replies((yield encode([("MULTI",), *commands(batch), ("EXEC",)])))
        assert replies is not None
        apply_reads(batch, replies, env, pending)
        return True, compute(plan, env)[1]
    for level in range(plan.levels):
        batch, pending = read_batch(plan, level, env)
        cmds = commands(batch)
        watch = ("WATCH", *dict.fromkeys(c[1] for c in cmds))
        replies = yield encode([watch, *cmds] if len(watch) > 1 else cmds)
        apply_reads(batch, replies[1:] if len(watch) > 1 else replies, env, pending)
    writes, ret = compute(plan, env)
    committed = exec_replies((yield encode([("MULTI",), *writes, ("EXEC",)])))
    if committed is None:
        return False, None
    raise_first(committed)
    return True, ret


STEPS = {"naive": naive_steps, "pipelined": pipelined_steps}


def aborted(plan: Plan, max_retries: int) -> TransactionAborted:
    return TransactionAborted(
        f"{plan.name}: WATCH failed {max_retries + 1} times in a row (heavy contention); "
        "nothing was written by the last attempt"
    )


# -- the sync forms ----------------------------------------------------------------------


def naive(plan: Plan, s: transport.Session, env: Env) -> Any:
    return drive(naive_steps(plan, env), s)


def read_level(s: transport.Session, plan: Plan, level: int, env: Env) -> None:
    drive(read_level_steps(plan, level, env), s)


def pipelined(plan: Plan, s: transport.Session, env: Env) -> Any:
    return drive(pipelined_steps(plan, env), s)


def transaction(
    plan: Plan, client: redis.Redis, env: Env, max_retries: int, *, asking: bool = False
) -> RunResult:
    trips = 0
    for attempt in range(max_retries + 1):
        with transport.session(client) as s:
            ok, ret = drive(transaction_steps(plan, dict(env)), s, asking=asking)
            trips += s.round_trips
        if ok:
            return RunResult(ret, "transaction", trips, attempt)
        time.sleep(DEFAULT.watch_delay(attempt))
    raise aborted(plan, max_retries)
