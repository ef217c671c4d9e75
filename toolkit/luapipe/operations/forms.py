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

from collections.abc import Mapping
from typing import Any

import redis
import redis.cluster

from luapipe.errors import CallArgumentError
from luapipe.operations import clientforms, clusterforms, serverforms
from luapipe.operations.model import FORMS
from luapipe.operations.plan import (
    Generated,
    Plan,
    ReadStep,
    RunResult,
    TransactionAborted,
    WriteStep,
    bind,
    drive,
    flat,
    opt_text,
    plan_of,
    score,
    wire,
)
from luapipe.wire import sync as transport
from luapipe.wire.clients import require_sync_client

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
        return clusterforms.run_cluster(plan, client, form, bind(plan, keys, args), max_retries)
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


def run_form(
    op: Generated,
    client: redis.Redis,
    form: str,
    keys: Mapping[str, Any],
    args: Mapping[str, Any],
    *,
    max_retries: int = 20,
) -> RunResult:
    return run_plan(plan_of(op), client, form, keys, args, max_retries=max_retries)


def evaluate_invariant(
    op: Generated, client: redis.Redis, keys: Mapping[str, Any], args: Mapping[str, Any]
) -> Any:
    plan = plan_of(op)
    if plan.invariant is None:
        return None
    env = bind(plan, keys, args)
    with clusterforms.routed_session(client) as s:  # a cluster: reads routed per key
        for level in range(plan.levels):
            clientforms.read_level(s, plan, level, env)
    for name, fn in plan.lets:
        env[name] = fn(env)
    return plan.invariant(env)
