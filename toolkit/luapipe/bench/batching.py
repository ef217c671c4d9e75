"""Batches of one generated operation: N calls per round trip where the form allows it.

:func:`run_batch` sends one batch in a form (see its docstring for how each form batches).

:func:`lockstep` combines the step generators of N calls (``pipelined_steps``:
each yields one batch of commands per round trip) into one generator of
the same kind: every round trip carries the current batch of every call still running,
concatenated into one write, and the replies are split back per call. It does no I/O
itself; the sync driver sends it on one held ``transport.session``.

A call that fails (an error reply, a conversion error) stops alone; the others run on, and
its error is in its :class:`Outcome`, so the caller raises the first one after the batch
ran, as a pipeline does.

Lockstep is not atomic across calls: N pipelined read-compute-writes on the same key all
read before any writes (a race with itself, like N clients). The script and function forms
keep each call atomic (the server runs them one after another).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis

from luapipe.errors import LuapipeError
from luapipe.operations.plan import Batches, Cmd, bind, plan_of, wire
from luapipe.operations.steps import (
    pipelined_steps,
    registry_of,
    script_name,
    split,
)
from luapipe.wire import sync as transport
from luapipe.wire.drivers import Driver
from luapipe.wire.routing import is_cluster, sent_to

__all__ = ["CLUSTER_REFUSAL", "Outcome", "first_error", "lockstep", "run_batch"]

CLUSTER_REFUSAL = (
    "--batch is not available on a cluster (a batch's calls are on several nodes): "
    "use --batch 1, or a single server"
)


@dataclass(frozen=True)
class Outcome:
    """One call's result: its value, or the exception it raised."""

    value: Any = None
    error: Exception | None = None
    retries: int = 0  # WATCH retries (transaction form)


def first_error(outcomes: Sequence[Outcome]) -> Exception | None:
    return next((o.error for o in outcomes if o.error is not None), None)


def lockstep(calls: Sequence[Batches[Any]]) -> Batches[list[Outcome]]:
    """Advance every call's steps together: one round trip per step of the longest call."""
    outcomes: list[Outcome | None] = [None] * len(calls)
    pending: dict[int, list[Cmd]] = {}

    def advance(i: int, replies: list[Any] | None) -> None:
        """Feed call ``i`` (start it when ``replies`` is None) until it wants a round trip
        with at least one command, or ends."""
        steps = calls[i]
        try:
            batch = next(steps) if replies is None else steps.send(replies)
            while not batch:  # nothing to send: the answer to no commands is no replies
                batch = steps.send([])
        except StopIteration as done:
            outcomes[i] = Outcome(done.value)
        except Exception as exc:  # this call failed; the others carry on
            outcomes[i] = Outcome(error=exc)
        else:
            pending[i] = batch

    for i in range(len(calls)):
        advance(i, None)
    while pending:
        order = list(pending.items())
        pending.clear()
        replies = yield [c for _, cmds in order for c in cmds]
        pos = 0
        for i, cmds in order:
            advance(i, list(replies[pos : pos + len(cmds)]))
            pos += len(cmds)
    return [o if o is not None else Outcome() for o in outcomes]


def run_batch(
    op: Any, client: redis.Redis, form: str, calls: Sequence[tuple[Any, Any]]
) -> list[Outcome]:
    """Run ``calls`` (``(keys, args)`` each) of ``op`` as one batch in ``form``:

    - ``naive``: one after another, each its own round trips;
    - ``transaction``: one after another too (WATCH is per connection, so N WATCH/MULTI/EXEC
      cannot share one; lockstep would not be atomic across them anyway);
    - ``pipelined``: in lockstep, one round trip per read level plus one for the writes;
    - ``script``: N EVALSHA in one registry pipeline (one round trip; NOSCRIPT handled there);
    - ``function``: N FCALL in one registry pipeline (one round trip; a missing library
      is loaded there).

    A single server only: on a cluster the calls' keys live on several nodes.
    """
    if is_cluster(client):
        raise LuapipeError(CLUSTER_REFUSAL)
    if form in ("naive", "transaction"):
        out = []
        for keys, args in calls:
            try:
                r = op.run_detailed(client, form, keys=keys, args=args)
            except Exception as exc:  # counted after the rest ran, as a pipeline does
                out.append(Outcome(error=exc))
            else:
                out.append(Outcome(r.value, retries=int(r.retries)))
        return out
    plan = plan_of(op)
    envs = [bind(plan, keys, args) for keys, args in calls]
    if form in ("script", "function"):
        pipe = registry_of(plan).pipeline(client)
        name = script_name(plan) if form == "script" else plan.function_name
        for env in envs:
            pipe.call(name, *split(plan, env))
        return [
            Outcome(error=r) if isinstance(r, Exception) else Outcome(wire(r))
            for r in pipe.execute(raise_on_error=False)
        ]
    with transport.session(client) as s:
        if form != "pipelined":
            raise LuapipeError(f"unknown form {form!r}")
        steps = [pipelined_steps(plan, env) for env in envs]
        return Driver(client, held=s).run(sent_to(lockstep(steps), s.address))
