"""Run an operation in any form: naive, pipelined, transaction, script, function.

The Python forms (:mod:`luapipe.operations.clientforms`) interpret the
:class:`~luapipe.operations.plan.Plan` of the generated module (its expressions are Python
compiled from the checked AST); the script
and function forms (:mod:`luapipe.operations.serverforms`) run the generated Lua. All sending goes
through :mod:`luapipe.wire.sync` (never re-sent after a write).

Semantics shared by every form: reads, then the compute step, then every write is
attempted in order; if any write failed the call raises the first error after the rest
ran (as Lua's ``redis.pcall``, a pipeline and EXEC all do). Nothing is written when a read
or the compute step fails.
"""

from __future__ import annotations

import threading
import types
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import redis
import redis.cluster

from luapipe import runtime as _rt
from luapipe.errors import CallArgumentError
from luapipe.operations import clientforms, serverforms
from luapipe.operations.operation import FORMS
from luapipe.operations.plan import (
    Env,
    Plan,
    ReadStep,
    RunResult,
    TransactionAborted,
    WriteStep,
    drive,
    flat,
    opt_text,
    score,
    wire,
)
from luapipe.wire import sync as transport
from luapipe.wire.clients import require_sync_client

if TYPE_CHECKING:
    from luapipe.operations.operation import Operation

__all__ = [
    "Plan",
    "ReadStep",
    "RunResult",
    "TransactionAborted",
    "WriteStep",
    "bind",
    "check_form",
    "evaluate_invariant",
    "flat",
    "opt_text",
    "plan_of",
    "run_form",
    "run_plan",
    "score",
    "wire",
]

_LOCK = threading.Lock()


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


def check_form(plan: Plan, client: object, form: str) -> None:
    """A known form (nothing sent on error). Every form runs on every client kind: cluster
    clients, sync and async, are routed by key slot (:mod:`luapipe.operations.clusterforms`,
    :mod:`luapipe.operations.aio_clusterforms`); atomic forms with keys in several slots raise
    :class:`~luapipe.errors.CrossSlotError` there, before sending."""
    if form not in FORMS:
        raise CallArgumentError(f"unknown form {form!r} ({', '.join(FORMS)})")


def run_plan(
    plan: Plan,
    client: redis.Redis,
    form: str,
    keys: Mapping[str, Any],
    args: Mapping[str, Any],
    *,
    max_retries: int = 20,
) -> RunResult:
    require_sync_client(client, f"{plan.name} ({form})", f"the async form ({form}_async)")
    if isinstance(client, redis.cluster.RedisCluster):  # every form, routed by slot
        from luapipe.operations.clusterforms import run_cluster

        return run_cluster(plan, client, form, bind(plan, keys, args), max_retries)
    check_form(plan, client, form)
    env = bind(plan, keys, args)
    if form == "script":
        return RunResult(serverforms.script(plan, client, env), form, 1)
    if form == "function":
        return RunResult(serverforms.function(plan, client, env), form, 1)
    if form == "transaction":
        return clientforms.transaction(plan, client, env, max_retries)
    with transport.session(client) as s:
        value = drive(clientforms.STEPS[form](plan, env), s)
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
    from luapipe.operations.clusterforms import routed_session  # a cluster: reads routed per key

    with routed_session(client) as s:
        for level in range(plan.levels):
            clientforms.read_level(s, plan, level, env)
    for name, fn in plan.lets:
        env[name] = fn(env)
    return plan.invariant(env)
