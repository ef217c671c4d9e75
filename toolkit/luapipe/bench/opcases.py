"""The cases a generated operation is timed on: chosen, written, checked in bulk.

With a ``[bench]`` table the cases hold its declared state (see :mod:`luapipe.bench.profile`);
without one :func:`select_cases` keeps ``verify``-style cases whose trial calls take the
write path. :func:`write_states` and :func:`invariants` touch many cases in a few round
trips (a slice resets 64 cases, and a hot run checks hundreds of copies).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from luapipe.bench.batching import lockstep
from luapipe.bench.benchkeys import tagged
from luapipe.bench.profile import copy_namespace, default_case, profile_case, rebase, wrote_in
from luapipe.errors import LuapipeError
from luapipe.operations.benchprofile import BenchDraw
from luapipe.operations.casegen import Case
from luapipe.operations.clustersafety import safety_for
from luapipe.operations.plan import Batches, bind, plan_of
from luapipe.operations.run import execute_routed
from luapipe.operations.steps import read_level_steps
from luapipe.operations.verify import dump
from luapipe.wire import sync as transport
from luapipe.wire.drivers import Driver
from luapipe.wire.routing import is_cluster, sent_to

__all__ = ["TRIALS", "invariants", "select_cases", "write_states"]

TRIALS = 5  # calls a profile-less case must take the write path in, to be chosen


def select_cases(
    op: Any, client: Any, draw: BenchDraw | None, want: int, rng: random.Random
) -> tuple[Case, ...]:
    """The cases to time. With a ``[bench]`` table: its declared state in each case's
    namespace. Without one: ``verify``-style cases without edge values, each set up and run
    :data:`TRIALS` times (script form, or one that can run here) with the invariant
    checked; a case is kept only if every trial call took the write path, ran without error
    and kept the invariant (numbers in the state are scaled up first, so that a stock
    lasts; if too few such cases qualify, unscaled ones are tried). Each case's keys share
    a hash tag (one cluster slot) under the benchmark's prefix:
    ``{luapipe:bench:<name>:<i>}:<key>``."""
    name = str(op.name)
    if draw is not None:
        return tuple(profile_case(op, draw, tagged(name, i), rng) for i in range(want))
    chosen: list[Case] = []
    spare: list[Case] = []
    for scale in (1000, 1):  # big numbers first: stock that lasts a whole slice
        for _ in range(want * 10):
            case = default_case(op, rng, tagged(name, len(chosen)), scale)
            wrote = _trial(op, client, case)
            if wrote is None:
                continue
            (chosen if wrote == TRIALS or not op.writes else spare).append(case)
            if len(chosen) == want:
                break
        if len(chosen) >= want // 4 or not op.writes:
            break
    chosen = (chosen + spare)[:want]
    if not chosen:
        raise LuapipeError(f"{name}: no sampled case runs without an error")
    return tuple(chosen)


def _holds(op: Any, client: Any, case: Case) -> bool:
    inv = op.invariant
    return (
        inv is None
        or inv.conserved
        or bool(op.check_invariant(client, keys=case.keys_dict, args=case.args_dict))
    )


def _trial(op: Any, client: Any, case: Case) -> int | None:
    """How many of :data:`TRIALS` calls wrote; None if one failed or broke the invariant."""
    safe = safety_for(op, client, case.keys_dict, case.args_dict)
    form = "script" if safe["script"].ok else "pipelined"
    wrote = 0
    try:
        op.setup(client, case)
        for _ in range(TRIALS):
            if not _holds(op, client, case):
                return None
            before = dump(client, case.namespace) if op.wrote is None else None
            value = op.run_detailed(client, form, keys=case.keys_dict, args=case.args_dict).value
            said = wrote_in(op.wrote, value)
            wrote += int(said if said is not None else dump(client, case.namespace) != before)
        if not _holds(op, client, case):
            return None
        op.setup(client, case)
    except Exception:  # any failure (server error, OpError...) disqualifies the case
        return None
    return wrote


def write_states(client: Any, cases: Sequence[Case], *, delete: bool = True) -> None:
    """Every case's initial state, in a few round trips (its keys deleted first)."""
    cmds: list[tuple[Any, ...]] = []
    for case in cases:
        if delete:
            cmds.extend(("DEL", k) for k in case.universe)
        for ks in case.state:
            cmds.extend(ks.commands())
    for start in range(0, len(cmds), 2000):
        for reply in execute_routed(client, cmds[start : start + 2000])[0]:
            transport.raise_for(reply)


def write_copies(client: Any, cases: Sequence[Case], n: int) -> None:
    """Copies 1 to n-1 of every case's initial state, each in its own namespace, for the
    slices that renew a written case by moving on to a fresh copy (copy 0 is the case)."""
    copies = [rebase(c, copy_namespace(c.namespace, str(j))) for c in cases for j in range(1, n)]
    write_states(client, copies, delete=False)


def invariants(op: Any, client: Any, cases: Sequence[Case]) -> list[Any]:
    """The invariant's value in each case: on one server, every case's reads of a level in
    one round trip; on a cluster, case by case (reads routed per key)."""
    if is_cluster(client):
        return [op.check_invariant(client, keys=c.keys_dict, args=c.args_dict) for c in cases]
    plan = plan_of(op)
    out: list[Any] = []
    for start in range(0, len(cases), 500):
        part = cases[start : start + 500]
        steps = [_invariant_steps(plan, bind(plan, c.keys_dict, c.args_dict)) for c in part]
        with transport.session(client) as s:
            outcomes = Driver(client, held=s).run(sent_to(lockstep(steps), s.address))
        for o in outcomes:
            if o.error is not None:
                raise o.error
            out.append(o.value)
    return out


def _invariant_steps(plan: Any, env: dict[str, Any]) -> Batches[Any]:
    """One case's invariant as steps: its read levels, its lets, the check."""
    for level in range(plan.levels):
        yield from read_level_steps(plan, level, env)
    for name, fn in plan.lets:
        env[name] = fn(env)
    return plan.invariant(env)
